/* Megatron-LM's 3-D layout (pipe/megatron.h): the strategy's options and their refusals, the
 * layout they mean, megatron-tp over tensor-parallel groups smaller or larger than a host,
 * sequence parallelism on and off, and stage programs chosen to fit with their micro-batches in
 * flight (hap_synth_options.activation_copies, hap_memory_in_flight). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "pipe/layouts.h"
#include "pipe/megatron.h"
#include "test_util.h"

#define GPT    "gpt:layers=4,batch=8,seq=64,width=128,heads=4,vocab=512"
#define HOSTS4 "paper-homo:gpus_per_host=2,hosts=4"

static hap_megatron_spec parsed(const char *text) {
  hap_megatron_spec m;
  hap_err err = {0};
  cr_assert_eq(hap_megatron_spec_parse(text, &m, &err), HAP_OK, "%s", err.msg);
  return m;
}

static void refused(const char *text, const char *words) {
  hap_megatron_spec m;
  hap_err err = {0};
  cr_assert_eq(hap_megatron_spec_parse(text, &m, &err), HAP_EINVAL, "%s accepted", text);
  cr_expect(strstr(err.msg, words) != NULL, "%s: '%s' lacks '%s'", text, err.msg, words);
}

Test(megatron3d, spec_defaults_and_every_key) {
  cr_expect(hap_megatron_spec_is("megatron"));
  cr_expect(hap_megatron_spec_is("megatron:tp=2"));
  cr_expect_not(hap_megatron_spec_is("megatron-tp"));
  cr_expect_not(hap_megatron_spec_is("megatronx"));
  hap_megatron_spec d = parsed("megatron");
  cr_expect_eq(d.tp, 0);
  cr_expect_eq(d.pp, 1);
  cr_expect_eq(d.dp, 0);
  cr_expect_eq(d.mbs, 1);
  cr_expect_eq(d.v, 1);
  cr_expect_eq(d.sp, HAP_SP_ON);
  cr_expect_not(d.recompute_given);
  hap_megatron_spec m = parsed("megatron:tp=4,pp=8,dp=2,mbs=3,v=2,sp=off,recompute=full");
  cr_expect_eq(m.tp, 4);
  cr_expect_eq(m.pp, 8);
  cr_expect_eq(m.dp, 2);
  cr_expect_eq(m.mbs, 3);
  cr_expect_eq(m.v, 2);
  cr_expect_eq(m.sp, HAP_SP_OFF);
  cr_expect(m.recompute_given);
  cr_expect_eq(m.recompute, HAP_RECOMPUTE_FULL);
}

Test(megatron3d, malformed_specs_are_refused_naming_the_key) {
  refused("megatron:tp=x", "tp='x', expected a positive integer");
  refused("megatron:pp=0", "pp='0', expected a positive integer");
  refused("megatron:mbs=-1", "mbs='-1'");
  refused("megatron:v=2.5", "v='2.5'");
  refused("megatron:sp=maybe", "sp='maybe', expected on or off");
  refused("megatron:recompute=most", "recompute='most', expected none, selective or full");
  refused("megatron:zero=1", "unknown key 'zero' (keys tp, pp, dp, mbs, v, sp, recompute)");
  refused("megatron:tp", "'tp' is not of the form key=value");
  refused("megatron:tp=2,", "is not of the form key=value");
  refused("megatron-tp", "is not megatron[:key=value,...]");
}

static hap_status layout(const char *text, const char *model_spec, const char *cluster,
                         hap_megatron_spec *resolved, hap_pipe_spec *pipe, hap_synth_options *so,
                         hap_err *err) {
  hap_megatron_spec m = parsed(text);
  hap_graph *g = model(model_spec);
  hap_cluster *c = bundled(cluster);
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP};
  hap_status st = hap_megatron_layout(&m, g, c, &o, resolved, pipe, so, err);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return st;
}

Test(megatron3d, layout_resolves_degrees_and_micro_batches) {
  hap_megatron_spec r;
  hap_pipe_spec p;
  hap_synth_options so;
  hap_err err = {0};
  cr_assert_eq(layout("megatron:pp=2,mbs=1", GPT, HOSTS4, &r, &p, &so, &err), HAP_OK, "%s",
               err.msg);
  cr_expect_eq(r.tp, 2, "a host's devices");
  cr_expect_eq(r.dp, 2, "8 devices / (tp 2 x pp 2)");
  cr_expect_eq(p.stages, 2);
  cr_expect_eq(p.schedule, HAP_PIPE_1F1B);
  cr_expect_eq(p.micro_batches, 4, "batch 8 / (mbs 1 x dp 2)");
  cr_expect_eq(so.strategy, HAP_STRATEGY_MEGATRON_TP);
  cr_expect_eq(so.tensor_parallel, 2);
  cr_expect_eq(so.sequence_parallel, HAP_SP_ON);
  cr_expect_eq(so.policy.micro_batches, 4);
  char text[96];
  hap_megatron_describe(&r, text, sizeof text);
  cr_expect_str_eq(text, "tp=2,pp=2,dp=2,mbs=1,v=1,sp=on");

  cr_assert_eq(layout("megatron:tp=4,pp=2,v=2,recompute=full", GPT, HOSTS4, &r, &p, &so, &err),
               HAP_OK, "%s", err.msg);
  cr_expect_eq(r.dp, 1);
  cr_expect_eq(p.schedule, HAP_PIPE_INTERLEAVED);
  cr_expect_eq(p.chunks, 2);
  cr_expect_eq(p.micro_batches, 8);
  cr_expect_eq(so.policy.recompute, HAP_RECOMPUTE_FULL);
}

Test(megatron3d, layouts_that_do_not_match_the_cluster_or_batch_are_refused) {
  hap_megatron_spec r;
  hap_pipe_spec p;
  hap_synth_options so;
  hap_err err = {0};
  cr_expect_eq(layout("megatron:tp=2,pp=3", GPT, HOSTS4, &r, &p, &so, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "tp 2 x pp 3 does not divide the 8 devices") != NULL, "%s", err.msg);
  err = (hap_err){0};
  cr_expect_eq(layout("megatron:tp=2,pp=2,dp=4", GPT, HOSTS4, &r, &p, &so, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "tp 2 x pp 2 x dp 4 = 16 devices, the cluster has 8") != NULL, "%s",
            err.msg);
  err = (hap_err){0};
  cr_expect_eq(layout("megatron:tp=2,mbs=3", GPT, HOSTS4, &r, &p, &so, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "mbs 3 x dp 4 does not divide the batch of 8 samples") != NULL, "%s",
            err.msg);
}

/* megatron-tp over `tp` devices per group on 4 hosts of 2. */
static hap_plan *tensor_parallel(const char *model_spec, int32_t tp, hap_seq_parallel sp) {
  hap_graph *g = model(model_spec);
  hap_cluster *c = bundled(HOSTS4);
  hap_synth_options o = {.strategy = HAP_STRATEGY_MEGATRON_TP,
                         .tensor_parallel = tp,
                         .sequence_parallel = sp,
                         .rescore = NULL};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return p;
}

Test(megatron3d, tensor_parallel_groups_of_any_size) {
  hap_plan *host = tensor_parallel(GPT, 0, HAP_SP_FREE);
  cr_expect_eq(host->replicas, 4, "one replica per host");
  cr_expect_eq(host->group_size, 2);
  hap_plan *two_hosts = tensor_parallel(GPT, 4, HAP_SP_FREE);
  cr_expect_eq(two_hosts->replicas, 2, "a group spans two hosts");
  cr_expect_eq(two_hosts->group_size, 4);
  cr_expect_eq(two_hosts->n_devices, 8);
  hap_plan *one = tensor_parallel(GPT, 1, HAP_SP_FREE);
  cr_expect_eq(one->replicas, 8, "tp 1 is data parallelism");
  hap_plan_destroy(host);
  hap_plan_destroy(two_hosts);
  hap_plan_destroy(one);
  hap_graph *g = model(GPT);
  hap_cluster *c = bundled(HOSTS4);
  hap_synth_options o = {.strategy = HAP_STRATEGY_MEGATRON_TP, .tensor_parallel = 3};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_expect_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "tensor_parallel 3 does not divide the 8 devices") != NULL, "%s",
            err.msg);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* How the plan's compute steps hold [batch, seq, width] activations (seq 64): whole on every
 * device, split along the sequence. */
static void seq_layouts(const hap_plan *p, const char *model_spec, int *whole, int *split) {
  hap_graph *g = model(model_spec);
  *whole = *split = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind != HAP_STEP_COMPUTE)
      continue;
    const hap_node *n = &g->nodes[s->node];
    for (int o = 0; o < n->n_outputs; o++) {
      const hap_tensor *t = &g->tensors[n->outputs[o]];
      if (t->shape.rank != 3 || t->shape.dims[1] != 64)
        continue;
      *whole += s->variant.out[o] == HAP_LAYOUT_IDENTITY;
      *split += s->variant.out[o] == 1;
    }
  }
  hap_graph_destroy(g);
}

Test(megatron3d, sequence_parallelism_on_and_off) {
  int whole, split;
  hap_plan *on = tensor_parallel(GPT, 2, HAP_SP_ON);
  seq_layouts(on, GPT, &whole, &split);
  cr_expect_eq(whole, 0, "sp on: no [b, s, h] activation computed whole on every device");
  cr_expect_gt(split, 0, "layer norms, dropouts and residuals split along the sequence");
  hap_plan *off = tensor_parallel(GPT, 2, HAP_SP_OFF);
  seq_layouts(off, GPT, &whole, &split);
  cr_expect_eq(split, 0, "sp off: nothing split along the sequence");
  cr_expect_gt(whole, 0, "layer norms run whole on every tensor-parallel device");
  hap_plan_destroy(on);
  hap_plan_destroy(off);
}

Test(megatron3d, memory_in_flight_counts_the_working_set_once) {
  hap_memory_breakdown m = {.parameters = 10, .activations = 7, .recompute_working = 3};
  hap_memory_breakdown f = hap_memory_in_flight(&m, 4);
  cr_expect_float_eq(f.activations, 4 * 4 + 3, 1e-12, "kept 4 per micro-batch, working set once");
  cr_expect_float_eq(f.parameters, 10, 1e-12);
  cr_expect_float_eq(hap_memory_total(&f), 29, 1e-12);
  hap_memory_breakdown one = hap_memory_in_flight(&m, 1);
  cr_expect_float_eq(hap_memory_total(&one), hap_memory_total(&m), 1e-12);
}

/* A stage program synthesised for many micro-batches in flight keeps fewer activations: it fits
 * a limit that the fastest single-micro-batch program, held that many times, does not. */
Test(megatron3d, programs_fit_their_micro_batches_in_flight) {
  const char *spec = "gpt:layers=2,batch=16,seq=256,width=512,heads=8,vocab=512";
  hap_graph *g = model(spec);
  hap_cluster *c = bundled("paper-homo:gpus_per_host=4,hosts=1");
  hap_train_policy pol = hap_policy_default();
  pol.precision = HAP_PREC_FP16;
  pol.optimizer = HAP_OPT_ADAM;
  pol.recompute = HAP_RECOMPUTE_FULL;
  pol.micro_batches = 16;
  hap_synth_options o = {.strategy = HAP_STRATEGY_MEGATRON_TP, .policy = pol};
  hap_plan *fast = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &fast, NULL, &err), HAP_OK, "%s", err.msg);
  double copies = 16, need_fast = 0;
  for (int32_t d = 0; d < fast->n_devices; d++) {
    hap_memory_breakdown m = hap_memory_in_flight(&fast->device_memory[d], copies);
    need_fast = fmax(need_fast, hap_memory_total(&m));
  }
  cr_assert(fast->device_memory[0].recompute_working > 0, "full recomputation has a working set");
  /* a limit just under what the fastest program needs with 16 in flight */
  o.memory_limit_bytes = need_fast * 0.97;
  o.activation_copies = copies;
  hap_plan *lean = NULL;
  hap_status st = hap_synthesize(g, c, &o, &lean, NULL, &err);
  cr_assert_eq(st, HAP_OK, "a leaner program fits: %s", err.msg);
  for (int32_t d = 0; d < lean->n_devices; d++) {
    hap_memory_breakdown m = hap_memory_in_flight(&lean->device_memory[d], copies);
    cr_expect_leq(hap_memory_total(&m), o.memory_limit_bytes, "device %d", d);
  }
  cr_expect_geq(lean->predicted_iteration_s, fast->predicted_iteration_s * (1 - 1e-9));
  hap_plan_destroy(fast);
  hap_plan_destroy(lean);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* ---- the hap strategy's 3-D layouts (pipe/layouts.h) and the one-stage bound -------------- */

#define BIGGER "gpt:layers=8,batch=16,seq=128,width=512,heads=8,vocab=1024"

Test(megatron3d, layouts_are_needed_when_one_device_cannot_hold_the_state) {
  hap_graph *g = model(BIGGER);
  hap_cluster *c = bundled(HOSTS4);
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP};
  cr_expect_not(hap_layouts_needed(g, c, &o), "a 16 GiB device holds a small GPT");
  o.memory_limit_bytes = 64.0 * 1048576; /* the fp32 SGD state is about 8 B x 29 M params */
  cr_expect(hap_layouts_needed(g, c, &o));
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(megatron3d, layout_search_picks_the_fastest_that_fits) {
  hap_graph *g = model(BIGGER);
  hap_cluster *c = bundled(HOSTS4);
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP, .memory_limit_bytes = 160.0 * 1048576};
  hap_layout_search s;
  hap_err err = {0};
  cr_assert_eq(hap_layouts_search(g, c, &o, 0, &s, &err), HAP_OK, "%s", err.msg);
  cr_assert_geq(s.n_rows, 2, "pp 1, 2 and 4 over 4 hosts of 2");
  cr_assert_geq(s.best, 0, "a layout fits 160 MiB");
  cr_assert_not_null(s.estimate);
  const hap_layout_row *b = &s.rows[s.best];
  cr_expect(b->fits);
  cr_expect(b->layout.tp == 1 || b->layout.tp == 2, "a host's devices or fewer: tp %d",
            (int)b->layout.tp);
  cr_expect_eq(b->layout.tp * b->layout.pp * b->layout.dp, 8);
  /* both tensor-parallel degrees tried; without tensor parallelism a stage is hap's program */
  bool tried[3] = {false, false, false};
  for (int i = 0; i < s.n_rows; i++)
    if (s.rows[i].layout.tp <= 2)
      tried[s.rows[i].layout.tp] = true;
  cr_expect(tried[1] && tried[2], "tp 1 and 2 among the rows");
  cr_expect_str_eq(s.estimate->stages[0].plan->strategy, b->layout.tp == 1 ? "hap" : "megatron-tp");
  cr_expect_eq(b->policy.zero, b->layout.dp > 1 ? 1 : 0, "ZeRO-1 across replicas");
  cr_expect_float_eq(b->iteration_s, s.estimate->sim->makespan_s, 1e-12);
  for (int i = 0; i < s.n_rows; i++) {
    const hap_layout_row *r = &s.rows[i];
    if (r->fits)
      cr_expect_geq(r->iteration_s, b->iteration_s, "row %d is faster than the chosen", i);
    else
      cr_expect_neq(r->why[0], '\0', "row %d says why it lost", i);
  }
  for (int32_t k = 0; k < s.estimate->n_stages; k++)
    cr_expect_leq(s.estimate->stages[k].memory_bytes, o.memory_limit_bytes, "stage %d", k);
  hap_layouts_free(&s);
  /* a limit below any layout's parameters: rows, none chosen */
  o.memory_limit_bytes = 1048576;
  cr_assert_eq(hap_layouts_search(g, c, &o, 0, &s, &err), HAP_OK, "%s", err.msg);
  cr_expect_eq(s.best, -1);
  cr_expect_null(s.estimate);
  cr_expect(strstr(s.rows[0].why, "parameters alone need at least") != NULL, "%s", s.rows[0].why);
  hap_layouts_free(&s);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(megatron3d, cost_bound_cuts_the_one_stage_search_short) {
  hap_graph *g = model(GPT);
  hap_cluster *c = bundled(HOSTS4);
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP};
  hap_plan *free_plan = NULL, *bounded = NULL, *none = NULL;
  hap_synth_stats st;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &free_plan, &st, &err), HAP_OK, "%s", err.msg);
  cr_expect_not(st.over_bound);
  /* a bound above the program's own estimate changes nothing */
  o.cost_bound_s = free_plan->predicted_iteration_s * 10;
  cr_assert_eq(hap_synthesize(g, c, &o, &bounded, &st, &err), HAP_OK, "%s", err.msg);
  cr_expect_float_eq(bounded->predicted_iteration_s, free_plan->predicted_iteration_s, 1e-12);
  /* a bound below any program: refused, said so */
  o.cost_bound_s = free_plan->predicted_iteration_s / 1000;
  cr_expect_neq(hap_synthesize(g, c, &o, &none, &st, &err), HAP_OK);
  cr_expect_null(none);
  cr_expect(st.over_bound);
  cr_expect(strstr(err.msg, "no program is estimated under") != NULL, "%s", err.msg);
  /* steering stops at the first candidate over the bound */
  hap_steer_report rep;
  err = (hap_err){0};
  o.memory_limit_bytes = 1;
  cr_expect_neq(hap_synthesize_steered(g, c, &o, 0, &none, &st, &rep, &err), HAP_OK);
  cr_expect(st.over_bound, "%s", err.msg);
  cr_expect_eq(rep.tried, 1);
  hap_plan_destroy(free_plan);
  hap_plan_destroy(bounded);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}
