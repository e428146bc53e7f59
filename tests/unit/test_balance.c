/* The ratio LP (synth/balance.c) is what finds the best sharding ratios: a cluster whose measured
 * GEMM rates disagree with its sustained FLOP/s, so that neither of the synthesizer's starting
 * points (even, and proportional to sustained FLOP/s) is the optimum, and the plan must land on
 * the closed-form ratios and time. Disabling the LP (synth.c) or mis-weighting one class's slope
 * (balance.c) makes these tests fail. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/plan_io.h"
#include "synth/synth.h"
#include "test_util.h"

/* One host, n devices, each its own device class (a GEMM sweep keeps classes apart). Device i
 * runs every GEMM at gemm_flops[i] FLOP/s (one measured sample: hap_gemm_rate then returns it at
 * any shape); its sustained FLOP/s, which only the compute-proportional start and non-GEMM ops
 * use, is sustained[i]. Communication, memory traffic and launches are free: links with no
 * latency and 1e30 B/s, memory 1e30 B/s, launch 0 s. */
static hap_cluster *gemm_cluster(int n, const double *gemm_flops, const double *sustained) {
  hap_cluster *c = hap_cluster_create("lp-closed-form");
  hap_link free_link = {0, 1e30};
  hap_err err = {0};
  cr_assert_eq(hap_cluster_add_host(c, "h", free_link, free_link, NULL, &err), HAP_OK, "%s",
               err.msg);
  for (int i = 0; i < n; i++) {
    hap_gemm_sample s = {
        .m = 256, .n = 256, .k = 256, .dtype = HAP_F32, .flops_per_s = gemm_flops[i]};
    hap_device d = {0};
    char model_name[16], name[16];
    snprintf(model_name, sizeof model_name, "class-%d", i);
    snprintf(name, sizeof name, "h:%d", i);
    d.model = model_name;
    d.sustained_flops[HAP_F32] = d.peak_flops[HAP_F32] = sustained[i];
    d.memory_bytes = 1e12;
    d.memory_bw_Bps = 1e30;
    d.n_gemm = 1;
    d.gemm = &s;
    cr_assert_eq(hap_cluster_add_device(c, name, &d, NULL, &err), HAP_OK, "%s", err.msg);
  }
  cr_assert_eq(hap_cluster_validate(c, &err), HAP_OK, "%s", err.msg);
  return c;
}

static hap_plan *synth(const hap_graph *g, const hap_cluster *c, hap_strategy s) {
  hap_synth_options o = {.strategy = s};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  cr_assert_not_null(p);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  return p;
}

/* Total FLOPs of one training iteration of mlp:layers=L,batch=B,seq=S,hidden=D on one device
 * (M = B*S rows; every layer a linear D->D with bias, then a sigmoid; sum loss):
 *   linear forward 2MD^2 + MD; backward 2MD^2 (weight) + MD (bias) + 2MD^2 (input gradient, not
 *   needed by the first layer, whose input is the model input);
 *   W = L (2MD^2 + MD) + L (2MD^2 + MD) + (L - 1) 2MD^2 = (6L - 2) M D^2 + 2 L M D.
 * Sigmoid and sum run at the sustained rate (>= 1e30 FLOP/s here) and add < 1e-20 s. */
static double mlp_flops(double L, double B, double S, double D) {
  double M = B * S;
  return (6 * L - 2) * M * D * D + 2 * L * M * D;
}

/* Closed form. Every step's time is max_i (w_j r_i / F_i) (w_j: the step's FLOPs over the whole
 * batch, F_i: device i's GEMM rate; communication is free), so sum_j max_i (...) >= W max_i
 * (r_i / F_i) >= W / sum_i F_i, with equality exactly when r_i / F_i is the same for all i:
 *   r_i = F_i / sum_k F_k,   T = W / sum_k F_k.
 * The batch (48) and width (96) are multiples of the denominators, so integer shard lengths hit
 * the ratios exactly. Tolerances: ratios 1e-9 absolute, time 1e-9 relative (rounding only). */
static void check_closed_form(int n, const double *gemm_flops, const double *sustained) {
  const double L = 3, B = 48, S = 8, D = 96;
  hap_graph *g = model("mlp:layers=3,batch=48,seq=8,hidden=96");
  hap_cluster *c = gemm_cluster(n, gemm_flops, sustained);
  double sum_f = 0;
  for (int i = 0; i < n; i++)
    sum_f += gemm_flops[i];
  double t_opt = mlp_flops(L, B, S, D) / sum_f; /* s */

  /* Neither starting point is the optimum: both baselines keep their start's ratios and are
   * slower by a clear margin (even: the slowest device takes 1/n; proportional: inverted). */
  for (int s = HAP_STRATEGY_DP_EV; s <= HAP_STRATEGY_DP_CP; s++) {
    hap_plan *b = synth(g, c, (hap_strategy)s);
    cr_assert_gt(b->predicted_iteration_s, 1.2 * t_opt, "%s: %.9g s is within 20 %% of %.9g s",
                 b->strategy, b->predicted_iteration_s, t_opt);
    hap_plan_destroy(b);
  }

  hap_plan *p = synth(g, c, HAP_STRATEGY_HAP);
  cr_assert_eq(p->n_segments, 1);
  cr_assert_eq(p->n_devices, n);
  for (int i = 0; i < n; i++) {
    double want = gemm_flops[i] / sum_f;
    cr_expect(fabs(p->ratios[i] - want) <= 1e-9,
              "device %d: ratio %.12f, closed form F_%d / sum F = %.12f", i, p->ratios[i], i, want);
  }
  cr_expect(fabs(p->predicted_iteration_s - t_opt) <= 1e-9 * t_opt,
            "predicted %.12g s, closed form W / sum F = %.12g s (%+.3g %%)",
            p->predicted_iteration_s, t_opt, 100 * (p->predicted_iteration_s / t_opt - 1));
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* Two classes, GEMM rates 3:1 (r = 0.75, 0.25), sustained FLOP/s 1:3: the proportional start is
 * (0.25, 0.75), the even one (0.5, 0.5). */
Test(balance, two_classes_reach_the_closed_form_ratios_and_time, .timeout = 60) {
  const double gemm[2] = {3e12, 1e12}, sustained[2] = {1e30, 3e30};
  check_closed_form(2, gemm, sustained);
}

/* Three classes, GEMM rates 3:2:1 (r = 1/2, 1/3, 1/6), sustained FLOP/s 1:2:3. */
Test(balance, three_classes_reach_the_closed_form_ratios_and_time, .timeout = 60) {
  const double gemm[3] = {3e12, 2e12, 1e12}, sustained[3] = {1e30, 2e30, 3e30};
  check_closed_form(3, gemm, sustained);
}
