/* Simulating plans (simulate/plan_sim.h): hand-computed iterations (one device: the sum of its
 * tasks; two devices 2:1 with free links: the slow device's chain, every duration FLOPs / rate),
 * communication overlapping computation, folding identical devices is exact, traces are valid
 * and nest with the same task names across strategies, and the synthesizer's re-scoring hook. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster_io.h"
#include "model/zoo.h"
#include "simulate/plan_sim.h"
#include "synth/synth.h"
#include "test_util.h"
#include "traces/check.h"

/* n devices with FLOP/s speed[i] * 1e12, no launch overhead, memory bandwidth unbounded, and
 * links of the given bandwidth (bytes/s) and zero latency. */
static hap_cluster *devices(int n, const double *speed, double link_Bps) {
  hap_cluster *c = hap_cluster_create("hand");
  hap_link link = {0, link_Bps};
  cr_assert_eq(hap_cluster_add_host(c, "h", link, link, NULL, NULL), HAP_OK);
  for (int i = 0; i < n; i++) {
    hap_device d = {0};
    d.model = speed[i] == speed[0] ? "fast" : "slow";
    d.sustained_flops[HAP_F32] = d.peak_flops[HAP_F32] = speed[i] * 1e12;
    d.memory_bytes = 1e12;
    d.memory_bw_Bps = 1e30;
    char name[8];
    snprintf(name, sizeof name, "h:%d", i);
    cr_assert_eq(hap_cluster_add_device(c, name, &d, NULL, NULL), HAP_OK);
  }
  cr_assert_eq(hap_cluster_validate(c, NULL), HAP_OK);
  return c;
}

static hap_plan *synth(const hap_graph *g, const hap_cluster *c, hap_strategy s, bool rescore) {
  hap_synth_options o = {.strategy = s, .rescore = rescore ? hap_plan_sim_rescore : NULL};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  return p;
}

typedef struct simulated {
  hap_plan *plan;
  hap_lowered *lw;
  hap_plan_sim *ps;
} simulated;

static simulated simulate(const hap_graph *g, const hap_cluster *c, hap_strategy s, bool fold) {
  simulated r = {synth(g, c, s, false), NULL, NULL};
  hap_err err = {0};
  cr_assert_eq(hap_lower(r.plan, g, &r.lw, &err), HAP_OK, "%s", err.msg);
  hap_plan_sim_options o = {.no_fold = !fold};
  cr_assert_eq(hap_plan_sim_run(r.lw, c, &o, &r.ps, &err), HAP_OK, "%s", err.msg);
  return r;
}

static void release(simulated *r) {
  hap_plan_sim_destroy(r->ps);
  hap_lowered_destroy(r->lw);
  hap_plan_destroy(r->plan);
}

static double compute_stream_sum(const hap_plan_sim *ps, int32_t d) {
  double sum = 0;
  for (int32_t t = 0; t < ps->n_tasks; t++)
    if (ps->lw->tasks[t].kind != HAP_TASK_COLLECTIVE)
      sum += hap_plan_sim_duration(ps, t, d);
  return sum;
}

Test(plan_sim, one_device_iteration_is_the_sum_of_its_tasks) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  double speed[1] = {1};
  hap_cluster *c = devices(1, speed, 1e9);
  simulated r = simulate(g, c, HAP_STRATEGY_HAP, true);
  cr_assert_float_eq(r.ps->iteration_s, compute_stream_sum(r.ps, 0), 1e-15);
  cr_assert_float_eq(r.ps->devices[0].idle_s, 0, 1e-15);
  /* layers.0.linear.fwd: 2MNK + MN FLOPs at 1e12 FLOP/s, M = 24 * 8 */
  int32_t t = 0;
  cr_assert_str_eq(r.lw->tasks[t].name, "layers.0.linear.fwd");
  cr_assert_float_eq(hap_plan_sim_duration(r.ps, t, 0), (2.0 * 192 * 32 * 32 + 192 * 32) / 1e12,
                     1e-18);
  release(&r);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* An update task moves 12 bytes per parameter element: priced at the measured update bandwidth
 * when the device has one, at the memory bandwidth when not. */
Test(plan_sim, updates_are_priced_at_the_update_bandwidth) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  double speed[1] = {1};
  hap_cluster *c = devices(1, speed, 1e9);
  c->devices[0].memory_bw_Bps = 1e9;
  for (int pass = 0; pass < 2; pass++) {
    c->devices[0].update_bw_Bps = pass == 0 ? 0 : 4e9;
    simulated r = simulate(g, c, HAP_STRATEGY_DP_EV, true);
    int32_t t = r.lw->n_tasks - 1;
    cr_assert_str_eq(r.lw->tasks[t].name, "layers.0.linear.upd", "first layer updated last");
    double bytes = 12.0 * (32 * 32 + 32); /* weight and bias, float32 */
    cr_assert_float_eq(hap_plan_sim_duration(r.ps, t, 0), bytes / (pass == 0 ? 1e9 : 4e9), 1e-18,
                       "pass %d", pass);
    release(&r);
  }
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* A mixed-precision plan on CPU devices (no half-precision FLOP/s: hap_device_emulates_dtype)
 * is priced as hap-run's CPU backend runs it, in float32: every compute, collective and local
 * task takes what the same plan takes under the default policy (only the updates differ, the
 * optimizer pass keeping a float32 master), but an all-reduce adds the rounding of its sum, a
 * read and a write of its float32 bytes at the update (else memory) bandwidth; on V100s, which
 * have float16 FLOP/s, a float16 plan has faster tasks. */
Test(plan_sim, half_precision_on_cpu_devices_is_priced_as_float32) {
  hap_graph *g = model("bert-base:layers=1,batch=8,seq=16,width=64,heads=2,hidden=128,vocab=64");
  const char *clusters[2] = {"cpu-2", "paper-homo:gpus_per_host=2,hosts=1"};
  for (int ci = 0; ci < 2; ci++) {
    hap_cluster *c = bundled(clusters[ci]);
    for (int s = 0; s < 2; s++) {
      hap_synth_options o = {.strategy = s ? HAP_STRATEGY_HAP : HAP_STRATEGY_DP_EV};
      hap_err err = {0};
      uint32_t given = 0;
      cr_assert_eq(hap_policy_parse(ci == 0 && s == 0 ? "precision=bf16" : "precision=fp16",
                                    &o.policy, &given, &err),
                   HAP_OK);
      hap_plan *p = NULL;
      cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
      hap_lowered *lw[2] = {NULL, NULL};
      hap_plan_sim *ps[2] = {NULL, NULL};
      for (int k = 0; k < 2; k++) {
        if (k == 1)
          p->policy = hap_policy_default();
        cr_assert_eq(hap_lower(p, g, &lw[k], &err), HAP_OK, "%s", err.msg);
        cr_assert_eq(hap_plan_sim_run(lw[k], c, NULL, &ps[k], &err), HAP_OK, "%s", err.msg);
      }
      int colls = 0, faster = 0, rounded = 0;
      for (int32_t t = 0; t < lw[0]->n_tasks; t++) {
        hap_task_kind kind = lw[0]->tasks[t].kind;
        if (kind == HAP_TASK_UPDATE)
          continue;
        colls += kind == HAP_TASK_COLLECTIVE;
        double per_rank[2] = {0, 0};
        bool all_reduce =
            kind == HAP_TASK_COLLECTIVE && lw[0]->tasks[t].coll == HAP_COLL_ALL_REDUCE;
        if (all_reduce) /* its float32 bytes: under the default policy (p's policy now) */
          cr_assert_eq(hap_lowered_coll_moved_bytes(lw[1], c, t, per_rank, &err), HAP_OK, "%s",
                       err.msg);
        for (int32_t d = 0; d < 2; d++) {
          double half = hap_plan_sim_duration(ps[0], t, d);
          double f32 = hap_plan_sim_duration(ps[1], t, d);
          double round = 0;
          if (ci == 0 && all_reduce && lw[0]->tasks[t].repeats == 1) {
            const hap_device *dev = &c->devices[d]; /* the update bandwidth when measured */
            round = 2 * per_rank[d] /
                    (dev->update_bw_Bps > 0 ? dev->update_bw_Bps : dev->memory_bw_Bps);
            rounded += round > 0;
          }
          if (ci == 0)
            cr_assert(fabs(half - (f32 + round)) <= 1e-12 * f32,
                      "%s, %s, task '%s' on device %d: %g s "
                      "in half precision, %g s in fp32, %g s rounding",
                      clusters[ci], s ? "hap" : "dp-ev", lw[0]->tasks[t].name, d, half, f32, round);
          else
            faster += half < f32 * (1 - 1e-9);
        }
      }
      if (s == 0) /* dp-ev: the gradient all-reduces, rounded on the CPU devices */
        cr_assert_gt(colls, 0);
      if (s == 0 && ci == 0)
        cr_assert_gt(rounded, 0);
      if (ci == 1)
        cr_assert_gt(faster, 0, "%s: no task is faster in fp16", clusters[ci]);
      for (int k = 0; k < 2; k++) {
        hap_plan_sim_destroy(ps[k]);
        hap_lowered_destroy(lw[k]);
      }
      hap_plan_destroy(p);
    }
    hap_cluster_destroy(c);
  }
  hap_graph_destroy(g);
}

/* Even split on devices 2:1 with free communication: the slow device never waits, so the
 * iteration is its chain, and every one of its compute tasks takes twice the fast one's. */
Test(plan_sim, two_devices_even_split_slow_device_bounds) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  double speed[2] = {2, 1};
  hap_cluster *c = devices(2, speed, 1e30);
  simulated r = simulate(g, c, HAP_STRATEGY_DP_EV, false);
  cr_assert_float_eq(r.ps->iteration_s, compute_stream_sum(r.ps, 1), 1e-12);
  for (int32_t t = 0; t < r.ps->n_tasks; t++)
    if (r.lw->tasks[t].kind == HAP_TASK_COMPUTE)
      cr_assert_float_eq(hap_plan_sim_duration(r.ps, t, 1), 2 * hap_plan_sim_duration(r.ps, t, 0),
                         1e-18, "%s", r.lw->tasks[t].name);
  /* the fast device idles for the difference */
  cr_assert_float_eq(r.ps->devices[0].compute_s, compute_stream_sum(r.ps, 0), 1e-15);
  cr_assert_float_eq(r.ps->devices[0].idle_s,
                     r.ps->iteration_s - r.ps->devices[0].compute_s - r.ps->devices[0].comm_s +
                         r.ps->devices[0].overlap_s,
                     1e-12);
  release(&r);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* With slow links the gradient all-reduces overlap the remaining backward pass: the iteration is
 * shorter than computing and communicating one after the other, and no shorter than either. */
Test(plan_sim, communication_overlaps_computation) {
  hap_graph *g = model("mlp:layers=4,batch=64,seq=8,hidden=256");
  double speed[2] = {1, 1};
  hap_cluster *c = devices(2, speed, 2e9);
  simulated r = simulate(g, c, HAP_STRATEGY_DP_EV, true);
  const hap_plan_sim_device *d = &r.ps->devices[0];
  cr_assert_gt(d->overlap_s, 0);
  cr_assert_lt(r.ps->iteration_s, d->compute_s + d->comm_s - 1e-12);
  cr_assert_geq(r.ps->iteration_s, fmax(d->compute_s, d->comm_s) - 1e-15);
  cr_assert_float_eq(r.ps->iteration_s, d->compute_s + d->exposed_comm_s + d->idle_s, 1e-12);
  release(&r);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(plan_sim, folding_identical_devices_is_exact) {
  hap_graph *g = model("bert-base:layers=2,batch=32,seq=16,width=64,heads=4,vocab=128");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=2");
  for (int s = 0; s < HAP_STRATEGY_COUNT; s++) {
    simulated a = simulate(g, c, (hap_strategy)s, true);
    simulated b = simulate(g, c, (hap_strategy)s, false);
    cr_assert_lt(a.ps->n_groups, b.ps->n_groups);
    cr_assert_eq(b.ps->n_groups, c->n_devices);
    cr_assert_float_eq(a.ps->iteration_s, b.ps->iteration_s, 1e-15);
    for (int32_t d = 0; d < c->n_devices; d++) {
      cr_assert_float_eq(a.ps->devices[d].compute_s, b.ps->devices[d].compute_s, 1e-15);
      cr_assert_float_eq(a.ps->devices[d].idle_s, b.ps->devices[d].idle_s, 1e-12);
      cr_assert_float_eq(a.ps->devices[d].exposed_comm_s, b.ps->devices[d].exposed_comm_s, 1e-12);
    }
    release(&a);
    release(&b);
  }
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

static void write_trace(hap_plan_sim *ps, const char *path) {
  hap_trace *t = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_trace_open(path, "test", &t, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_sim_trace(ps, t, 0, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_trace_close(t, &err), HAP_OK, "%s", err.msg);
  hap_trace_check_report rep;
  cr_assert_eq(hap_trace_check(path, &rep, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(rep.complete, (int64_t)ps->n_tasks * ps->n_devices);
}

/* Every task name of one strategy's trace is a name the other's lowering uses too when it is a
 * node's forward or backward computation. */
Test(plan_sim, traces_nest_and_twins_share_names) {
  hap_graph *g = model("vgg19:batch=8,classes=10");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  simulated h = simulate(g, c, HAP_STRATEGY_HAP, true);
  simulated d = simulate(g, c, HAP_STRATEGY_DP_EV, true);
  char a[64], b[64];
  snprintf(a, sizeof a, "/tmp/hap-test-trace-%d-hap.json", (int)getpid());
  snprintf(b, sizeof b, "/tmp/hap-test-trace-%d-dp.json", (int)getpid());
  write_trace(h.ps, a);
  write_trace(d.ps, b);
  int shared = 0;
  for (int32_t t = 0; t < h.lw->n_tasks; t++) {
    if (h.lw->tasks[t].kind != HAP_TASK_COMPUTE)
      continue;
    bool found = false;
    for (int32_t u = 0; u < d.lw->n_tasks && !found; u++)
      found = strcmp(h.lw->tasks[t].name, d.lw->tasks[u].name) == 0;
    cr_assert(found, "%s has no twin under dp-ev", h.lw->tasks[t].name);
    shared++;
  }
  cr_assert_geq(shared, 2 * g->n_nodes - 2);
  unlink(a);
  unlink(b);
  release(&h);
  release(&d);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* Re-scoring picks, among the synthesizer's candidates, the one the simulator finds fastest. */
Test(plan_sim, rescoring_never_loses_under_the_simulator) {
  hap_graph *g = model("bert-base:layers=2,batch=32,seq=16,width=64,heads=4,vocab=128");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=2");
  hap_plan *plain = synth(g, c, HAP_STRATEGY_HAP, false);
  hap_plan *rescored = synth(g, c, HAP_STRATEGY_HAP, true);
  double a = hap_plan_sim_rescore(NULL, plain, g, c);
  double b = hap_plan_sim_rescore(NULL, rescored, g, c);
  cr_assert(isfinite(a) && isfinite(b));
  cr_assert_leq(b, a);
  hap_plan_destroy(plain);
  hap_plan_destroy(rescored);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(plan_sim, cluster_of_another_size_refused) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  double speed[2] = {1, 1};
  hap_cluster *two = devices(2, speed, 1e9);
  hap_cluster *one = devices(1, speed, 1e9);
  hap_plan *p = synth(g, two, HAP_STRATEGY_DP_EV, false);
  hap_lowered *lw = NULL;
  hap_plan_sim *ps = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_lower(p, g, &lw, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_sim_run(lw, one, NULL, &ps, &err), HAP_EINVAL);
  cr_assert_null(ps);
  cr_expect(strstr(err.msg, "2 devices") != NULL, "%s", err.msg);
  hap_lowered_destroy(lw);
  hap_plan_destroy(p);
  hap_cluster_destroy(one);
  hap_cluster_destroy(two);
  hap_graph_destroy(g);
}

/* With the simulator as the re-scoring hook, HAP's plan is never slower in simulation than either
 * baseline: their programs are among the candidates it compares. */
Test(plan_sim, rescored_hap_never_slower_than_the_baselines) {
  static const char *const models[] = {
      "mlp:layers=2,batch=24,seq=8,hidden=32",
      "bert-base:layers=2,batch=32,seq=16,width=64,heads=4,vocab=128",
      "vit:layers=2,batch=32,image=32,patch=8,width=64,heads=4,classes=10"};
  static const char *const clusters[] = {"cpu-2", "paper-hetero:gpus_per_host=1",
                                         "paper-homo:gpus_per_host=2"};
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
    for (size_t k = 0; k < sizeof clusters / sizeof clusters[0]; k++) {
      hap_graph *g = model(models[m]);
      hap_cluster *c = bundled(clusters[k]);
      hap_plan *h = synth(g, c, HAP_STRATEGY_HAP, true);
      cr_assert_str_eq(h->strategy, "hap");
      double th = hap_plan_sim_rescore(NULL, h, g, c);
      for (int s = HAP_STRATEGY_DP_EV; s <= HAP_STRATEGY_DP_CP; s++) {
        hap_plan *b = synth(g, c, (hap_strategy)s, false);
        double tb = hap_plan_sim_rescore(NULL, b, g, c);
        cr_assert_leq(th, tb, "%s on %s: hap %.9g s, %s %.9g s", models[m], clusters[k], th,
                      hap_strategy_name((hap_strategy)s), tb);
        hap_plan_destroy(b);
      }
      hap_plan_destroy(h);
      hap_cluster_destroy(c);
      hap_graph_destroy(g);
    }
}
