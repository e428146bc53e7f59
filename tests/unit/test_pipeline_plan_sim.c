/* Pipelined plans lowered (plan/pipeline_lower.h) and simulated on one engine
 * (simulate/pipeline_plan_sim.h): the boundary transfers' pairs and bytes, bubbles that emerge
 * from the event simulation and match the schedules' formulas on uniform stages, interleaving,
 * and agreement with the stage-granularity estimate. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"

#include "pipe/estimate.h"
#include "plan/pipeline_lower.h"
#include "simulate/pipeline_plan_sim.h"
#include "test_util.h"

typedef struct run {
  hap_graph *g;
  hap_cluster *c;
  hap_pipe_estimate *e;
  hap_pipe_lowered *pw;
  hap_pipe_plan_sim *r;
} run;

static void start(run *x, const char *model_spec, const char *cluster, const char *spec,
                  hap_strategy strategy) {
  memset(x, 0, sizeof *x);
  x->g = model(model_spec);
  x->c = bundled(cluster);
  hap_pipe_spec ps;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_spec_parse(spec, &ps, &err), HAP_OK, "%s", err.msg);
  hap_synth_options o = {.strategy = strategy};
  cr_assert_eq(hap_pipe_estimate_run(x->g, x->c, &ps, &o, &x->e, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_pipe_lower(x->e->pipeline, x->g, x->c, &x->pw, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_pipe_plan_sim_run(x->pw, NULL, &x->r, &err), HAP_OK, "%s", err.msg);
}

static void finish(run *x) {
  hap_pipe_plan_sim_destroy(x->r);
  hap_pipe_lowered_destroy(x->pw);
  hap_pipe_estimate_destroy(x->e);
  hap_cluster_destroy(x->c);
  hap_graph_destroy(x->g);
}

#define MLP "mlp:layers=8,batch=64,seq=64,hidden=1024"
/* four V100s on one host with links too fast to matter (800 TB/s, 0 us) */
#define FAST4 "paper-homo:gpus_per_host=4,hosts=1,intra_gbps=6400000,intra_latency_us=0"

/* Data-parallel stages on groups of two: device i of one group sends its half of the boundary to
 * device i of the next, and the gradient comes back the same way. */
Test(pipeline_plan_sim, boundary_pairs_follow_the_shards) {
  run x;
  start(&x, MLP, "paper-homo:gpus_per_host=2,hosts=2", "stages=2,micro_batches=4",
        HAP_STRATEGY_DP_EV);
  const hap_pipe_lowered *pw = x.pw;
  cr_assert_eq(pw->n_xfers, 2, "one value and its gradient");
  double per_micro = x.e->stages[0].boundary_bytes;
  for (int32_t xi = 0; xi < 2; xi++) {
    const hap_pipe_xfer *t = &pw->xfers[xi];
    cr_expect_eq(t->gradient, xi == 1);
    cr_expect_eq(t->from_stage, xi == 0 ? 0 : 1);
    cr_assert_eq(t->n_pairs, 2);
    double sum = 0;
    for (int32_t q = 0; q < t->n_pairs; q++) {
      const hap_pipe_pair *pr = &pw->pairs[t->pair0 + q];
      cr_expect_eq(pr->dst - pr->src, xi == 0 ? 2 : -2, "device i to device i of the other group");
      sum += pr->bytes;
    }
    cr_expect_lt(fabs(sum - per_micro), 1e-9 * per_micro, "%g vs %g", sum, per_micro);
  }
  cr_expect_lt(fabs(x.r->transfer_bytes - 2 * 4 * per_micro), 1e-9 * per_micro);
  cr_expect_gt(x.r->iteration_s, x.r->flush_s * 0.999);
  cr_expect_eq(x.r->n_devices, 4);
  finish(&x);
}

/* Every task of every stage is classified, and the first stage has a stage loss (LOSS part), the
 * last none. */
Test(pipeline_plan_sim, stage_parts) {
  run x;
  start(&x, MLP, "paper-homo:gpus_per_host=2,hosts=2", "stages=2,micro_batches=4",
        HAP_STRATEGY_DP_EV);
  int n[2][HAP_PIPE_PART_COUNT] = {{0}};
  for (int32_t k = 0; k < 2; k++) {
    const hap_pipe_lowered_stage *s = &x.pw->stages[k];
    for (int32_t t = 0; t < s->lw->n_tasks; t++) {
      cr_assert_lt(s->part[t], HAP_PIPE_PART_COUNT);
      n[k][s->part[t]]++;
    }
  }
  cr_expect_gt(n[0][HAP_PIPE_PART_LOSS], 0, "y@grad.mul, .sum and stage@loss");
  cr_expect_eq(n[1][HAP_PIPE_PART_LOSS], 0);
  for (int32_t k = 0; k < 2; k++) {
    cr_expect_gt(n[k][HAP_PIPE_PART_FWD], 0);
    cr_expect_gt(n[k][HAP_PIPE_PART_BWD], 0);
    cr_expect_gt(n[k][HAP_PIPE_PART_TAIL], 0, "gradient all-reduces and updates");
  }
  finish(&x);
}

/* The idle fraction of the busiest device (the stage that sets the pace). */
static double busiest_bubble(const hap_pipe_plan_sim *r) {
  int32_t top = 0;
  for (int32_t d = 1; d < r->n_devices; d++)
    top = r->busy_s[d] > r->busy_s[top] ? d : top;
  return r->bubble[top];
}

/* Uniform stages (one device each, equal layers, links fast beside the compute): the bubble
 * that emerges from the engine matches (p-1)/(m+p-1) within 1 % (absolute) for GPipe and 1F1B.
 * The first stage computes no input gradient and so idles a little more: the busiest stage is
 * the one the formula describes. */
Test(pipeline_plan_sim, uniform_stages_bubble_matches_the_formula) {
  const char *schedules[2] = {"gpipe", "1f1b"};
  for (int s = 0; s < 2; s++)
    for (int m = 4; m <= 16; m *= 2) {
      char spec[96];
      snprintf(spec, sizeof spec, "stages=4,micro_batches=%d,schedule=%s", m, schedules[s]);
      run x;
      start(&x, "mlp:layers=16,batch=64,seq=16,hidden=2048", FAST4, spec, HAP_STRATEGY_DP_EV);
      double want = 3.0 / (m + 3), got = busiest_bubble(x.r);
      cr_expect_lt(fabs(got - want), 0.01, "%s m=%d: bubble %.4f, formula %.4f", schedules[s], m,
                   got, want);
      finish(&x);
    }
}

/* Interleaving with v chunks cuts the bubble about v-fold. */
Test(pipeline_plan_sim, interleaving_shrinks_the_bubble) {
  run a, b;
  start(&a, "mlp:layers=16,batch=64,seq=16,hidden=2048", FAST4, "stages=4,micro_batches=8",
        HAP_STRATEGY_DP_EV);
  start(&b, "mlp:layers=16,batch=64,seq=16,hidden=2048", FAST4,
        "stages=4,micro_batches=8,schedule=interleaved,chunks=2", HAP_STRATEGY_DP_EV);
  double one = busiest_bubble(a.r), two = busiest_bubble(b.r);
  /* bubble time (p-1)(f+b)/v against m(f+b) of work: fraction 3/11 -> 1.5/9.5 */
  cr_expect_lt(fabs(one - 3.0 / 11), 0.01, "1f1b %.4f", one);
  cr_expect_lt(fabs(two - 1.5 / 9.5), 0.015, "interleaved %.4f", two);
  finish(&a);
  finish(&b);
}

/* Every device on one engine agrees with the stage-granularity estimate on equal groups when the
 * boundary transfers are cheap (the estimate gives each direction between two groups a link of
 * its own; the engine shares a host's NIC between the sends forward and the gradients back). */
Test(pipeline_plan_sim, agrees_with_the_stage_estimate) {
  run x;
  start(&x, MLP,
        "paper-homo:gpus_per_host=2,hosts=4,inter_gbps=6400000,inter_latency_us=0,"
        "intra_gbps=6400000,intra_latency_us=0",
        "stages=4,micro_batches=8", HAP_STRATEGY_HAP);
  double est = x.e->sim->makespan_s, got = x.r->iteration_s;
  cr_expect_lt(fabs(got / est - 1), 0.05, "per device %.6f s, stage estimate %.6f s", got, est);
  finish(&x);
}

/* Chains of compute tasks change the engine's task count, not the answer: the same iteration
 * and busy times up to rounding (the sums are taken in another order), with a tensor-parallel stage
 * program (collectives inside the ops). */
Test(pipeline_plan_sim, compute_chains_are_exact) {
  run x;
  start(&x, "gpt:layers=4,batch=16,seq=32,width=64,heads=4,vocab=128",
        "paper-homo:gpus_per_host=2,hosts=4", "stages=2,micro_batches=4", HAP_STRATEGY_MEGATRON_TP);
  hap_pipe_plan_sim *plain = NULL;
  hap_pipe_plan_sim_options o = {.no_chains = true};
  hap_err err = {0};
  cr_assert_eq(hap_pipe_plan_sim_run(x.pw, &o, &plain, &err), HAP_OK, "%s", err.msg);
  cr_expect_lt(x.r->n_engine_tasks, plain->n_engine_tasks);
  cr_expect_lt(fabs(x.r->iteration_s - plain->iteration_s), 1e-12 * plain->iteration_s,
               "%.17g vs %.17g", x.r->iteration_s, plain->iteration_s);
  cr_expect_lt(fabs(x.r->flush_s - plain->flush_s), 1e-12 * plain->flush_s);
  for (int32_t d = 0; d < plain->n_devices; d++)
    cr_expect_lt(fabs(x.r->busy_s[d] - plain->busy_s[d]), 1e-12 * plain->flush_s);
  hap_pipe_plan_sim_destroy(plain);
  finish(&x);
}

/* A megatron-tp stage leaves its boundary output as partial sums on the tensor-parallel devices
 * and the next one sources it whole: the senders reduce-scatter it, each sends its shard to one
 * receiver, the receivers all-gather (Megatron-LM's scatter/gather), so each replica's slice
 * crosses once; the gradient comes back the same way (the gradient of an input sourced whole on
 * the tensor-parallel devices is their partial sums: reduce-scattered too; hap-run --check
 * proves the sums in tests/run/test_check_pipeline.sh). */
Test(pipeline_plan_sim, boundaries_cross_once_per_replica) {
  run x;
  start(&x, "gpt:layers=4,batch=16,seq=32,width=64,heads=4,vocab=128",
        "paper-homo:gpus_per_host=2,hosts=4", "stages=2,micro_batches=4", HAP_STRATEGY_MEGATRON_TP);
  const hap_pipe_lowered *pw = x.pw;
  cr_assert_eq(pw->n_xfers, 2);
  for (int32_t xi = 0; xi < 2; xi++) {
    const hap_pipe_xfer *t = &pw->xfers[xi];
    const hap_lowered *recv = pw->stages[t->to_stage].lw;
    cr_expect(t->reduce_scatter && t->partial, "partial sums on the sending devices");
    cr_assert(t->all_gather, "the receivers source it whole");
    double sum = 0;
    for (int32_t q = 0; q < t->n_pairs; q++)
      sum += pw->pairs[t->pair0 + q].bytes;
    double slice = t->gather_shard_bytes * recv->group_size; /* a replica's micro-batch slice */
    cr_expect_eq(t->n_pairs, recv->n_devices, "one shard into each receiver");
    cr_expect_lt(fabs(sum - recv->replicas * slice), 1e-9 * sum, "%g vs %g", sum,
                 recv->replicas * slice);
  }
  finish(&x);
}

/* GPT's tied wte (the embedding in the first stage, the head in the last): its gradients are
 * summed with an all-reduce over the devices of those two stages, one member task on each of
 * them in the trace, ending the iteration; an mlp (nothing tied) has none. */
Test(pipeline_plan_sim, tied_parameters_are_summed_across_stages) {
  const char *models[2] = {"gpt:layers=4,batch=16,seq=32,width=64,heads=4,vocab=128", MLP};
  for (int i = 0; i < 2; i++) {
    run x;
    start(&x, models[i], "paper-homo:gpus_per_host=2,hosts=2", "stages=4,micro_batches=4",
          HAP_STRATEGY_HAP);
    char path[] = "/tmp/hap-test-tied-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    hap_trace *t = NULL;
    hap_err err = {0};
    cr_assert_eq(hap_trace_open(path, "test", &t, &err), HAP_OK, "%s", err.msg);
    hap_pipe_plan_sim_options o = {.trace = t};
    hap_pipe_plan_sim *r = NULL;
    cr_assert_eq(hap_pipe_plan_sim_run(x.pw, &o, &r, &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(hap_trace_close(t, &err), HAP_OK, "%s", err.msg);
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(hap_read_file(path, &text, &len, &err), HAP_OK, "%s", err.msg);
    int members = 0;
    for (const char *p = text; (p = strstr(p, "\"name\":\"wte.weight.grad.tied_all_reduce\"")); p++)
      members++;
    /* stages 0 and 3 run on groups 0 and 3, one device each */
    cr_expect_eq(members, i == 0 ? 2 : 0, "%s: %d members", models[i], members);
    cr_expect_eq(r->iteration_s, x.r->iteration_s, "the same simulation");
    free(text);
    unlink(path);
    hap_pipe_plan_sim_destroy(r);
    finish(&x);
  }
}
