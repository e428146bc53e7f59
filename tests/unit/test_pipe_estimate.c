/* Pipeline estimates at stage granularity (pipe/estimate.h): the --pipeline spec, balanced
 * stages on equal groups, the schedules compared, memory with the order's in-flight micro-batches,
 * and every refusal. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "pipe/estimate.h"
#include "test_util.h"

static hap_pipe_estimate *estimate(const char *spec, const char *model_spec, const char *cluster,
                                   hap_strategy strategy) {
  hap_pipe_spec ps;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_spec_parse(spec, &ps, &err), HAP_OK, "%s", err.msg);
  hap_graph *g = model(model_spec);
  hap_cluster *c = bundled(cluster);
  hap_synth_options o = {.strategy = strategy};
  hap_pipe_estimate *e = NULL;
  cr_assert_eq(hap_pipe_estimate_run(g, c, &ps, &o, &e, &err), HAP_OK, "%s", err.msg);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return e;
}

#define MLP    "mlp:layers=8,batch=64,seq=64,hidden=2048"
#define HOSTS4 "paper-homo:gpus_per_host=2,hosts=4"

Test(pipe_estimate, four_stages_of_an_mlp_on_four_hosts) {
  hap_pipe_estimate *e = estimate("stages=4,micro_batches=8", MLP, HOSTS4, HAP_STRATEGY_DP_EV);
  cr_assert_eq(e->n_stages, 4);
  cr_expect_eq(e->group_size, 2);
  cr_expect_eq(e->spec.schedule, HAP_PIPE_1F1B);
  const int32_t cuts[5] = {0, 4, 8, 12, 17};
  for (int32_t k = 0; k < 4; k++) {
    const hap_pipe_stage *s = &e->stages[k];
    cr_expect_eq(s->first, cuts[k]);
    cr_expect_eq(s->end, cuts[k + 1]);
    cr_expect_eq(s->group, k);
    cr_expect_eq(s->in_flight, 4 - k, "1F1B holds p - i micro-batches on stage i");
    cr_expect_gt(s->times.fwd_s, 0);
    cr_expect_gt(s->memory_bytes, 0);
    cr_expect_eq(s->boundary_bytes > 0, k < 3);
    cr_assert_not_null(s->plan);
    cr_expect_eq(s->plan->n_devices, 2);
    cr_expect_eq(s->memory_limit, 16.0 * 1073741824.0, "V100-16GB");
    cr_expect(s->fits);
  }
  /* the first stage keeps the most micro-batches in flight */
  cr_expect_gt(e->stages[0].memory_bytes, e->stages[3].memory_bytes);
  const hap_pipe_sim *r = e->sim;
  cr_assert_not_null(r);
  double slowest = 0;
  for (int32_t k = 0; k < 4; k++)
    slowest = fmax(slowest, e->stages[k].times.fwd_s + e->stages[k].times.bwd_s);
  cr_expect_geq(r->makespan_s, 8 * slowest);
  /* the boundaries (4 MiB a micro-batch) cross the hosts' NICs: more bubble than identical
   * stages with free transfers would have */
  cr_expect_lt(e->link.bandwidth_Bps, 1e11);
  cr_expect_gt(r->mean_bubble, 3.0 / 11);
  cr_expect_lt(r->mean_bubble, 1);
  hap_pipe_estimate_destroy(e);
}

/* Two groups of two hosts each: both hosts' NICs carry a boundary at once (device i to device i).
 */
Test(pipe_estimate, a_group_sends_through_all_its_hosts_nics) {
  hap_pipe_estimate *e = estimate("stages=2,micro_batches=4", MLP, HOSTS4, HAP_STRATEGY_DP_EV);
  hap_cluster *c = bundled(HOSTS4);
  double nic = c->hosts[0].nic.bandwidth_Bps;
  cr_expect_lt(fabs(e->link.bandwidth_Bps - 2 * nic), 1e-6 * nic, "%g B/s, NIC %g B/s",
               e->link.bandwidth_Bps, nic);
  hap_cluster_destroy(c);
  hap_pipe_estimate_destroy(e);
}

Test(pipe_estimate, more_micro_batches_shrink_the_bubble_and_gpipe_holds_them_all) {
  hap_pipe_estimate *a = estimate("stages=4,micro_batches=4", MLP, HOSTS4, HAP_STRATEGY_DP_EV);
  hap_pipe_estimate *b = estimate("stages=4,micro_batches=16", MLP, HOSTS4, HAP_STRATEGY_DP_EV);
  hap_pipe_estimate *gp =
      estimate("stages=4,micro_batches=16,schedule=gpipe", MLP, HOSTS4, HAP_STRATEGY_DP_EV);
  cr_expect_lt(b->sim->bubble[1], a->sim->bubble[1]);
  cr_expect_eq(gp->stages[3].in_flight, 16);
  cr_expect_gt(gp->stages[3].memory_bytes, b->stages[3].memory_bytes);
  hap_pipe_estimate_destroy(a);
  hap_pipe_estimate_destroy(b);
  hap_pipe_estimate_destroy(gp);
}

Test(pipe_estimate, one_stage_is_the_plain_program) {
  hap_pipe_estimate *e =
      estimate("stages=1", "mlp:layers=2,batch=16,seq=8,hidden=64", "cpu-2", HAP_STRATEGY_HAP);
  cr_assert_eq(e->n_stages, 1);
  cr_expect_eq(e->group_size, 2);
  cr_expect_eq(e->stages[0].boundary_bytes, 0);
  const hap_stage_times *t = &e->stages[0].times;
  cr_expect_lt(fabs(e->sim->makespan_s - (t->fwd_s + t->bwd_s + t->tail_s)),
               1e-9 * e->sim->makespan_s);
  hap_pipe_estimate_destroy(e);
}

static void expect_spec_refused(const char *text, const char *want) {
  hap_pipe_spec ps;
  hap_err err = {0};
  cr_expect_eq(hap_pipe_spec_parse(text, &ps, &err), HAP_EINVAL, "'%s' was accepted", text);
  cr_expect_not_null(strstr(err.msg, want), "'%s': expected '%s' in: %s", text, want, err.msg);
  cr_expect_null(strchr(err.msg, '\n'));
}

Test(pipe_estimate, the_spec_and_its_refusals) {
  hap_pipe_spec ps;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_spec_parse("stages=4,schedule=interleaved", &ps, &err), HAP_OK);
  cr_expect_eq(ps.chunks, 2, "interleaved defaults to 2 chunks");
  cr_expect_eq(ps.micro_batches, 0, "0: the policy's");
  expect_spec_refused("schedule=gpipe", "missing stages=P");
  expect_spec_refused("stages=0", "pipeline: stages wants an integer 1..65536, got '0'");
  expect_spec_refused("stages=4,schedule=zigzag", "schedule 'zigzag', expected gpipe, 1f1b");
  expect_spec_refused("stages=4,depth=2", "unknown key 'depth', expected one of stages");
  expect_spec_refused("stages=4,,", "is not of the form key=value");
  expect_spec_refused("stages=4,micro_batches=x", "micro_batches wants an integer");
  cr_assert_eq(hap_pipe_spec_parse("groups=4+12", &ps, &err), HAP_OK, "%s", err.msg);
  cr_expect_eq(ps.stages, 2, "groups= alone sets the stages");
  cr_expect_eq(ps.n_groups, 2);
  cr_expect_eq(ps.group_devices[0], 4);
  cr_expect_eq(ps.group_devices[1], 12);
  expect_spec_refused("groups=4+x", "groups '4+x', expected device counts joined by '+'");
  expect_spec_refused("groups=4+", "groups '4+', expected device counts");
  expect_spec_refused("groups=0+4", "groups '0+4'");
  expect_spec_refused("stages=3,groups=4+12", "groups has 2 sizes for stages=3");
}

/* paper-hetero with 2 GPUs a host: 4 V100s on 2 hosts, then 12 P100s on 6. One stage per device
 * model: the groups differ in size and type, and each stage's program runs on its own. */
Test(pipe_estimate, unequal_groups_of_a_heterogeneous_cluster) {
  hap_pipe_estimate *e = estimate("groups=4+12,micro_batches=8", MLP,
                                  "paper-hetero:gpus_per_host=2", HAP_STRATEGY_HAP);
  cr_assert_eq(e->n_stages, 2);
  cr_expect_eq(e->group_size, 0, "unequal");
  cr_expect_eq(e->group_first[0], 0);
  cr_expect_eq(e->group_devices[0], 4);
  cr_expect_eq(e->group_first[1], 4);
  cr_expect_eq(e->group_devices[1], 12);
  cr_expect_eq(e->stages[0].plan->n_devices, 4);
  cr_expect_eq(e->stages[1].plan->n_devices, 12);
  int32_t n;
  const int32_t *dev = hap_pipeline_group(e->pipeline, 1, &n);
  cr_assert_eq(n, 12);
  cr_expect_eq(dev[0], 4);
  cr_expect_eq(dev[11], 15);
  /* 12 P100s outrun 4 V100s: the second stage takes more of the layers */
  cr_expect_gt(e->stages[1].end - e->stages[1].first, e->stages[0].end - e->stages[0].first);
  cr_expect_gt(e->sim->makespan_s, 0);
  hap_pipe_estimate_destroy(e);
  hap_pipe_estimate *eq =
      estimate("stages=2,groups=4+4,micro_batches=8", MLP, HOSTS4, HAP_STRATEGY_DP_EV);
  cr_expect_eq(eq->group_size, 4, "equal groups given as groups= are equal");
  hap_pipe_estimate_destroy(eq);
}

static void expect_run_refused(const char *spec, const char *model_spec, const char *cluster,
                               const char *want) {
  hap_pipe_spec ps;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_spec_parse(spec, &ps, &err), HAP_OK, "%s", err.msg);
  hap_graph *g = model(model_spec);
  hap_cluster *c = bundled(cluster);
  hap_synth_options o = {.strategy = HAP_STRATEGY_DP_EV};
  hap_pipe_estimate *e = (hap_pipe_estimate *)1;
  cr_expect_neq(hap_pipe_estimate_run(g, c, &ps, &o, &e, &err), HAP_OK, "%s accepted", spec);
  cr_expect_null(e);
  cr_expect_not_null(strstr(err.msg, want), "%s: expected '%s' in: %s", spec, want, err.msg);
  cr_expect_null(strchr(err.msg, '\n'));
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(pipe_estimate, shapes_that_cannot_run_are_refused_before_any_synthesis) {
  const char *small = "mlp:layers=2,batch=16,seq=8,hidden=64";
  expect_run_refused("stages=3", small, "cpu-2", "3 stages do not divide the 2 devices");
  expect_run_refused("stages=2,chunks=4,schedule=interleaved,micro_batches=2", small, "cpu-2",
                     "8 virtual stages but 'mlp' has 5 nodes");
  expect_run_refused("stages=2,schedule=interleaved,micro_batches=3",
                     "mlp:layers=4,batch=24,seq=8,hidden=64", "cpu-2",
                     "interleaved 1F1B needs micro_batches a multiple of the 2 stages, got 3");
  expect_run_refused("stages=2,micro_batches=5", small, "cpu-2", "pipeline stage 0");
  expect_run_refused("groups=1+2", small, "cpu-2", "groups add up to 3 devices, 'cpu-2' has 2");
}
