/* A pipeline end to end on a real model, one stage at a time: stage graphs (model/stage.h) of
 * mlp's layers, each synthesised (dp-ev) on its host's devices (hap_cluster_of_devices) for one
 * micro-batch, simulated (plan_sim.h), read as per-micro-batch times (stage_times.h) and run as
 * a 1F1B pipeline (pipeline_sim.h): identical layers on identical devices give identical middle
 * stages (the first computes no input gradient, the last holds the loss) and, GEMM-bound, within
 * 5 % the bubble (p-1)/(m+p-1) of identical stages (measured 0.261 against 0.273; the formula
 * itself is checked within 1 % in test_pipeline_sim.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "cluster/cluster.h"
#include "model/stage.h"
#include "plan/lower.h"
#include "plan/replica.h"
#include "simulate/pipeline_sim.h"
#include "simulate/stage_times.h"
#include "synth/synth.h"
#include "test_util.h"

enum { P = 4, M = 8 };

/* Stage k of `g` (nodes [first, end)) for one of M micro-batches on host k's devices. */
static hap_stage_times stage_times(const hap_graph *g, const hap_cluster *c, int32_t k,
                                   int32_t first, int32_t end, double *boundary_bytes) {
  hap_err err = {0};
  hap_stage_graph *s = NULL;
  cr_assert_eq(hap_stage_graph_build(g, first, end, &s, &err), HAP_OK, "%s", err.msg);
  hap_graph *micro = NULL;
  cr_assert_eq(hap_graph_split_batch(s->graph, M, &micro, &err), HAP_OK, "%s", err.msg);
  *boundary_bytes = 0;
  for (int32_t i = 0; i < s->n_out; i++)
    *boundary_bytes += (double)hap_tensor_bytes(&micro->tensors[s->stage_of[s->boundary_out[i]]]);
  const hap_host *h = &c->hosts[k];
  int32_t devices[16];
  for (int32_t i = 0; i < h->n_devices; i++)
    devices[i] = h->first_device + i;
  hap_cluster *sub = NULL;
  cr_assert_eq(hap_cluster_of_devices(c, devices, h->n_devices, NULL, &sub, &err), HAP_OK, "%s",
               err.msg);
  hap_synth_options o = {.strategy = HAP_STRATEGY_DP_EV};
  hap_plan *plan = NULL;
  hap_synth_stats st;
  cr_assert_eq(hap_synthesize(micro, sub, &o, &plan, &st, &err), HAP_OK, "stage %d: %s", k,
               err.msg);
  hap_lowered *lw = NULL;
  cr_assert_eq(hap_lower(plan, micro, &lw, &err), HAP_OK, "%s", err.msg);
  hap_plan_sim *ps = NULL;
  hap_plan_sim_options so = {0};
  cr_assert_eq(hap_plan_sim_run(lw, sub, &so, &ps, &err), HAP_OK, "%s", err.msg);
  hap_stage_times t, one;
  double iteration = 0;
  cr_assert_eq(hap_stage_times_run(lw, sub, NULL, &t, &iteration, &err), HAP_OK, "%s", err.msg);
  cr_expect_lt(fabs(t.fwd_s + t.bwd_s + t.tail_s - iteration), 1e-12);
  cr_expect_lt(fabs(iteration - ps->iteration_s), 1e-12 + 1e-9 * ps->iteration_s);
  /* read from the full run alone, the backward waits for the gradient all-reduce: never shorter */
  hap_stage_times_of(ps, &one);
  cr_expect_lt(fabs(one.fwd_s - t.fwd_s), 1e-12);
  cr_expect_geq(one.bwd_s, t.bwd_s * (1 - 1e-12));
  hap_plan_sim_destroy(ps);
  hap_lowered_destroy(lw);
  hap_plan_destroy(plan);
  hap_cluster_destroy(sub);
  hap_graph_destroy(micro);
  hap_stage_graph_destroy(s);
  return t;
}

Test(stage_times, identical_layers_make_identical_stages_and_the_1f1b_bubble) {
  hap_graph *g = model("mlp:layers=8,batch=64,seq=64,hidden=2048");
  hap_cluster *c = bundled("paper-homo:gpus_per_host=2,hosts=4");
  /* linear + sigmoid per layer, the loss last: two layers per stage, the loss with the last */
  cr_assert_eq(g->n_nodes, 17);
  const int32_t cut[P + 1] = {0, 4, 8, 12, 17};
  double fwd[P], bwd[P], bytes[P], tail[P];
  for (int32_t k = 0; k < P; k++) {
    hap_stage_times t = stage_times(g, c, k, cut[k], cut[k + 1], &bytes[k]);
    fwd[k] = t.fwd_s;
    bwd[k] = t.bwd_s;
    tail[k] = t.tail_s;
    cr_expect(fwd[k] > 0 && bwd[k] > fwd[k], "stage %d: fwd %g s, bwd %g s", k, fwd[k], bwd[k]);
    cr_expect_gt(tail[k], 0, "stage %d: its gradient all-reduce and update", k);
  }
  /* stages 1 and 2 are the same graph on the same kind of host; the first computes no input
   * gradient, the last adds the loss */
  cr_expect_lt(fabs(fwd[1] - fwd[2]) / fwd[1], 1e-9);
  cr_expect_lt(fabs(bwd[1] - bwd[2]) / bwd[1], 1e-9);
  cr_expect_lt(bwd[0], bwd[1]);
  cr_expect_eq(bytes[0], bytes[1]);
  cr_expect_gt(bytes[0], 0);

  hap_pipe_order *o = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_order_build(HAP_PIPE_1F1B, P, M, 1, &o, &err), HAP_OK, "%s", err.msg);
  hap_pipe_sim_input in = {.order = o,
                           .fwd_s = fwd,
                           .bwd_s = bwd,
                           .boundary_bytes = NULL,
                           .link = {.latency_s = 0, .bandwidth_Bps = 1e30}};
  hap_pipe_sim *r = NULL;
  cr_assert_eq(hap_pipe_sim_run(&in, &r, &err), HAP_OK, "%s", err.msg);
  double want = (double)(P - 1) / (M + P - 1), slowest = 0;
  for (int32_t k = 0; k < P; k++)
    slowest = fmax(slowest, fwd[k] + bwd[k]);
  cr_expect_geq(r->makespan_s, M * slowest * (1 - 1e-12));
  cr_expect_leq(r->makespan_s, (M + P - 1) * slowest * (1 + 1e-12));
  cr_expect_lt(fabs(r->bubble[1] - want) / want, 0.05, "stage 1 bubble %g, (p-1)/(m+p-1) = %g",
               r->bubble[1], want);
  /* the boundaries over the hosts' NICs make the iteration longer */
  hap_link nic = hap_cluster_link(c, c->hosts[0].first_device, c->hosts[1].first_device);
  in.boundary_bytes = bytes;
  in.link = (hap_pipe_link){.latency_s = nic.latency_s, .bandwidth_Bps = nic.bandwidth_Bps};
  hap_pipe_sim *r2 = NULL;
  cr_assert_eq(hap_pipe_sim_run(&in, &r2, &err), HAP_OK, "%s", err.msg);
  cr_expect_gt(r2->makespan_s, r->makespan_s);
  hap_pipe_sim_destroy(r2);
  hap_pipe_sim_destroy(r);
  hap_pipe_order_destroy(o);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}
