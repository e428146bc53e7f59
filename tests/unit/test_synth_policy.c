/* The training policy in the synthesizer and the simulator (docs/memory.md): memory per device by
 * component against hand-computed figures for a data-parallel mlp (2 layers of 16 x 16 + 16 =
 * 272 parameters, batch 8 x seq 4 x hidden 16 split over 2 devices), ZeRO stages, micro-batches
 * and full recomputation; half precision in collectives and compute; the lowering's repeats and
 * recomputation; steering under a memory limit, and its error when nothing fits. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "model/policy.h"
#include "plan/lower.h"
#include "simulate/plan_sim.h"
#include "synth/synth.h"
#include "test_util.h"

#define MLP "mlp:layers=2,batch=8,seq=4,hidden=16"

static hap_train_policy policy(const char *text) {
  hap_train_policy p = hap_policy_default();
  hap_err err = {0};
  cr_assert_eq(hap_policy_parse(text, &p, NULL, &err), HAP_OK, "%s", err.msg);
  return p;
}

/* A validated plan of `strategy` for g on c under `text` (NULL: the default policy). */
static hap_plan *plan_of(const hap_graph *g, const hap_cluster *c, hap_strategy strategy,
                         const char *text) {
  hap_synth_options o = {.strategy = strategy};
  if (text != NULL)
    o.policy = policy(text);
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s: %s", text, err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  cr_assert(p->memory_recorded);
  for (int32_t d = 0; d < p->n_devices; d++)
    cr_assert_float_eq(hap_memory_total(&p->device_memory[d]), p->device_memory_bytes[d], 1e-9,
                       "device %d: the parts add up to the peak", d);
  return p;
}

static void expect_memory(const hap_plan *p, double params, double grads, double opt, double acts) {
  for (int32_t d = 0; d < p->n_devices; d++) {
    const hap_memory_breakdown *m = &p->device_memory[d];
    cr_assert_eq(m->parameters, params, "device %d parameters %.17g, expected %.17g", d,
                 m->parameters, params);
    cr_assert_eq(m->gradients, grads, "device %d gradients %.17g, expected %.17g", d, m->gradients,
                 grads);
    cr_assert_eq(m->optimizer, opt, "device %d optimizer %.17g, expected %.17g", d, m->optimizer,
                 opt);
    cr_assert_eq(m->activations, acts, "device %d activations %.17g, expected %.17g", d,
                 m->activations, acts);
    cr_assert_eq(m->comm_buffers, 0);
    cr_assert_eq(m->workspace, 0);
  }
}

/* data parallel, 544 parameters: x, 2 x (linear, sigmoid) of [4, 4, 16] per device and the
 * scalar loss */
Test(synth_policy, default_policy_counts_parameters_twice) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = plan_of(g, c, HAP_STRATEGY_DP_EV, NULL);
  cr_assert(hap_policy_is_default(&p->policy));
  expect_memory(p, 544 * 4, 544 * 4, 0, 5 * 256 * 4 + 4);
  cr_assert_eq(p->device_memory_bytes[0], 2 * 2176 + 5124);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth_policy, mixed_precision_adam_and_zero_stages) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = plan_of(g, c, HAP_STRATEGY_DP_EV, "precision=bf16,optimizer=adam");
  /* 2 + 2 + 12 B per parameter, activations in bf16 */
  expect_memory(p, 544 * 2, 544 * 2, 544 * 12, 5 * 256 * 2 + 2);
  hap_plan_destroy(p);
  p = plan_of(g, c, HAP_STRATEGY_DP_EV, "precision=bf16,optimizer=adam,grad_accum=fp32");
  expect_memory(p, 544 * 2, 544 * 4, 544 * 12, 5 * 256 * 2 + 2); /* Megatron's 18 B */
  hap_plan_destroy(p);
  p = plan_of(g, c, HAP_STRATEGY_DP_EV, "precision=bf16,optimizer=adam,zero=1");
  expect_memory(p, 544 * 2, 544 * 2, 544 * 12 / 2, 2562); /* N_d = 2 */
  hap_plan_destroy(p);
  p = plan_of(g, c, HAP_STRATEGY_DP_EV, "precision=bf16,optimizer=adam,zero=2");
  expect_memory(p, 544 * 2, 544 * 2 / 2, 544 * 12 / 2, 2562);
  hap_plan_destroy(p);
  p = plan_of(g, c, HAP_STRATEGY_DP_EV, "precision=bf16,optimizer=adam,zero=3");
  expect_memory(p, 544 * 2 / 2, 544 * 2 / 2, 544 * 12 / 2, 2562);
  for (int32_t k = 0; k < p->n_steps; k++)
    if (p->steps[k].kind == HAP_STEP_SOURCE &&
        g->tensors[p->steps[k].tensor].kind == HAP_TENSOR_PARAMETER)
      cr_assert_eq(p->steps[k].storage, HAP_STORE_ZERO, "ZeRO-3 stores every parameter sharded");
  hap_plan_destroy(p);
  p = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=adam"); /* fp32 Adam: 4 + 4 + 8 */
  expect_memory(p, 544 * 4, 544 * 4, 544 * 8, 5124);
  hap_plan_destroy(p);
  p = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=momentum");
  expect_memory(p, 544 * 4, 544 * 4, 544 * 4, 5124);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth_policy, micro_batches_hold_one_micro_batch) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = plan_of(g, c, HAP_STRATEGY_DP_EV, "micro_batches=2");
  expect_memory(p, 2176, 2176, 0, 5 * 128 * 4 + 4); /* [2, 4, 16] per device */
  cr_assert_eq(p->policy.micro_batches, 2);
  hap_plan_destroy(p);
  hap_synth_options o = {.strategy = HAP_STRATEGY_DP_EV, .policy = policy("micro_batches=3")};
  hap_err err = {0};
  cr_assert_neq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK);
  cr_assert(strstr(err.msg, "not a multiple of 3") != NULL, "%s", err.msg);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

static double step_s(const hap_plan *p, const hap_graph *g, const char *node) {
  for (int32_t k = 0; k < p->n_steps; k++)
    if (p->steps[k].kind == HAP_STEP_COMPUTE && strcmp(g->nodes[p->steps[k].node].name, node) == 0)
      return p->steps[k].predicted_s;
  cr_assert_fail("no compute step %s", node);
  return 0;
}

Test(synth_policy, full_recomputation_keeps_layer_inputs_and_costs_a_forward) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  hap_plan *none = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=momentum");
  hap_plan *full = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=momentum,recompute=full");
  /* kept: x and each layer's output (sigmoid) and the loss; dropped: each linear's output, one
   * layer (1024 B) held at a time while it is recomputed */
  expect_memory(full, 2176, 2176, 2176, 4 * 1024 + 4);
  cr_assert_lt(full->device_memory_bytes[0], none->device_memory_bytes[0]);
  /* the linears run their forward again; the sigmoids (outputs kept) do not */
  cr_assert_gt(step_s(full, g, "layers.0.linear"), step_s(none, g, "layers.0.linear"));
  cr_assert_gt(step_s(full, g, "layers.1.linear"), step_s(none, g, "layers.1.linear"));
  cr_assert_eq(step_s(full, g, "layers.0.sigmoid"), step_s(none, g, "layers.0.sigmoid"));
  hap_plan_destroy(none);
  hap_plan_destroy(full);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

static double source_s(const hap_plan *p, const hap_graph *g, const char *tensor) {
  for (int32_t k = 0; k < p->n_steps; k++)
    if (p->steps[k].kind == HAP_STEP_SOURCE &&
        strcmp(g->tensors[p->steps[k].tensor].name, tensor) == 0)
      return p->steps[k].predicted_s;
  cr_assert_fail("no source %s", tensor);
  return 0;
}

Test(synth_policy, half_precision_halves_gradient_reductions_and_runs_at_the_half_rate) {
  hap_graph *g = model("mlp:layers=2,batch=64,seq=32,hidden=512");
  hap_cluster *c = bundled("paper-homo:hosts=1"); /* V100: fp16 tensor-core rate, no bf16 */
  hap_plan *f32 = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=momentum");
  hap_plan *f16 = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=momentum,precision=fp16");
  hap_plan *f16g =
      plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=momentum,precision=fp16,grad_accum=fp32");
  const char *w = "layers.0.linear.weight";
  cr_assert_lt(source_s(f16, g, w), 0.75 * source_s(f32, g, w), "all-reduce of 2-byte gradients");
  cr_assert_gt(source_s(f16g, g, w), source_s(f16, g, w), "fp32 gradients move 4 bytes");
  cr_assert_lt(step_s(f16, g, "layers.0.linear"), 0.2 * step_s(f32, g, "layers.0.linear"),
               "fp16 at 93.75 TFLOP/s vs fp32 at 3.86 TFLOP/s");
  hap_plan_destroy(f32);
  hap_plan_destroy(f16);
  hap_plan_destroy(f16g);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* ---- the simulator -------------------------------------------------------------------------- */

static const hap_task *task(const hap_lowered *lw, const char *name) {
  for (int32_t t = 0; t < lw->n_tasks; t++)
    if (strcmp(lw->tasks[t].name, name) == 0)
      return &lw->tasks[t];
  cr_assert_fail("no task %s", name);
  return NULL;
}

static double simulate(const hap_plan *p, const hap_graph *g, const hap_cluster *c,
                       hap_lowered **keep) {
  hap_lowered *lw = NULL;
  hap_plan_sim *ps = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_lower(p, g, &lw, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_sim_run(lw, c, NULL, &ps, &err), HAP_OK, "%s", err.msg);
  double s = ps->iteration_s;
  hap_plan_sim_destroy(ps);
  if (keep != NULL)
    *keep = lw;
  else
    hap_lowered_destroy(lw);
  return s;
}

Test(synth_policy, lowering_prices_repeats_recomputation_and_the_update) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  hap_plan *base = plan_of(g, c, HAP_STRATEGY_DP_EV, NULL);
  hap_plan *p = plan_of(g, c, HAP_STRATEGY_DP_EV, "optimizer=adam,recompute=full,micro_batches=2");
  hap_lowered *lw0 = NULL, *lw = NULL;
  double t0 = simulate(base, g, c, &lw0), t = simulate(p, g, c, &lw);
  cr_assert_eq(lw->n_tasks, lw0->n_tasks, "the policy adds no task");
  cr_assert_eq(task(lw0, "layers.0.linear.fwd")->repeats, 1);
  cr_assert_eq(task(lw, "layers.0.linear.fwd")->repeats, 2);
  cr_assert_eq(task(lw, "layers.0.linear.bwd")->repeats, 2);
  const hap_task *fwd = task(lw, "layers.0.linear.fwd");
  cr_assert_eq(task(lw, "layers.0.linear.bwd")->recompute_of, (int32_t)(fwd - lw->tasks));
  cr_assert_eq(task(lw, "layers.0.sigmoid.bwd")->recompute_of, -1, "its output is kept");
  cr_assert_eq(task(lw, "layers.0.linear.weight.grad.all_reduce")->repeats, 1,
               "gradients reduced once per iteration");
  /* the update: Adam's 28 B per element of the 272 the node owns (replicated, ZeRO 0) */
  int32_t u = (int32_t)(task(lw, "layers.0.linear.upd") - lw->tasks);
  hap_task_work w0, w;
  hap_err err = {0};
  cr_assert_eq(hap_lowered_priced_work(lw, u, 0, &w, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(w.bytes, 272 * 28);
  cr_assert_eq(hap_lowered_work(lw, u, 0, &w0, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(w0.bytes, 272 * 12, "the executor's work stays SGD's");
  /* the group's graph keeps the whole batch; the executed and the priced one are a micro-batch */
  cr_assert_eq(lw->local_graph, g);
  cr_assert_eq(lw->priced_graph->tensors[hap_graph_find_tensor(g, "x")].shape.dims[0], 4);
  cr_assert_eq(lw->exec_graph->tensors[hap_graph_find_tensor(g, "x")].shape.dims[0], 4);
  cr_assert_eq(lw0->exec_graph, g, "one micro-batch: the graph itself");
  cr_assert_gt(t, t0, "recomputation and twice the launches cost time");
  hap_lowered_destroy(lw0);
  hap_lowered_destroy(lw);
  hap_plan_destroy(base);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* ---- steering ------------------------------------------------------------------------------- */

Test(synth_policy, memory_limit_steers_the_zero_stage) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  /* fp32 SGD needs 9476 B; ZeRO-1 changes nothing (no state), ZeRO-2 halves the gradients */
  hap_synth_options o = {.strategy = HAP_STRATEGY_DP_EV, .memory_limit_bytes = 9000};
  hap_plan *p = NULL;
  hap_synth_stats st;
  hap_steer_report rep;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize_steered(g, c, &o, 0, &p, &st, &rep, &err), HAP_OK, "%s", err.msg);
  cr_assert(rep.steered);
  cr_assert_eq(rep.tried, 3);
  cr_assert_eq(p->policy.zero, 2);
  cr_assert_eq(rep.chosen.zero, 2);
  cr_assert_leq(p->device_memory_bytes[0], 9000);
  hap_plan_destroy(p);
  /* unconstrained: the default policy, the plain synthesis */
  o.memory_limit_bytes = 0;
  cr_assert_eq(hap_synthesize_steered(g, c, &o, 0, &p, &st, &rep, &err), HAP_OK, "%s", err.msg);
  cr_assert_not(rep.steered);
  cr_assert(hap_policy_is_default(&p->policy));
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth_policy, nothing_fits_names_every_component) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled("cpu-2");
  hap_synth_options o = {.strategy = HAP_STRATEGY_DP_EV, .memory_limit_bytes = 1000};
  hap_plan *p = NULL;
  hap_synth_stats st;
  hap_steer_report rep;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize_steered(g, c, &o, 0, &p, &st, &rep, &err), HAP_EINVAL);
  cr_assert_null(p);
  cr_assert(st.no_fit);
  cr_assert_gt(rep.tried, 4);
  const char *want[] = {
      "no program fits in 1000 B per cpu with any policy tried: the leanest (policy "
      "zero=3,recompute=full,micro_batches=",
      "over: parameters ",
      "gradients ",
      "optimizer ",
      "activations ",
      "comm_buffers 0 B",
      "workspace 0 B"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_assert(strstr(err.msg, want[i]) != NULL, "'%s' not in: %s", want[i], err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  /* every field forced: the synthesizer's own error, the policy named */
  hap_err_clear(&err);
  o.policy = policy("zero=1");
  cr_assert_eq(hap_synthesize_steered(
                   g, c, &o, HAP_POLICY_ZERO | HAP_POLICY_RECOMPUTE | HAP_POLICY_MICRO_BATCHES, &p,
                   &st, &rep, &err),
               HAP_EINVAL);
  cr_assert_eq(rep.tried, 1);
  cr_assert(strstr(err.msg, "no program fits in 1000 B per device (policy zero=1)") != NULL, "%s",
            err.msg);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}
