/* Lowering (plan/lower.h): the exact task list of a 2-layer data-parallel MLP, and invariants over
 * every zoo model under every strategy: stable unique names, dependencies on earlier tasks only,
 * forward before backward before update on the compute stream, one dual per communication of a
 * gradient-carrying tensor, one update per trainable parameter, the same compute names across
 * strategies, and per-device work that adds up to the plan's shards. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cluster_io.h"
#include "model/zoo.h"
#include "plan/lower.h"
#include "synth/synth.h"
#include "test_util.h"

static hap_plan *synth(const hap_graph *g, const hap_cluster *c, hap_strategy s) {
  hap_synth_options o = {.strategy = s};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  return p;
}

static hap_lowered *lower(const hap_plan *p, const hap_graph *g) {
  hap_lowered *lw = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_lower(p, g, &lw, &err), HAP_OK, "%s", err.msg);
  return lw;
}

static int32_t find(const hap_lowered *lw, const char *name) {
  for (int32_t t = 0; t < lw->n_tasks; t++)
    if (strcmp(lw->tasks[t].name, name) == 0)
      return t;
  return -1;
}

/* "a b c": the names of task t's dependencies, in id order. */
static void dep_names(const hap_lowered *lw, int32_t t, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i < lw->tasks[t].n_deps && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? " " : "",
                            lw->tasks[lw->deps[lw->tasks[t].dep0 + i]].name);
}

Test(lower, data_parallel_mlp_exact_task_list) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = synth(g, c, HAP_STRATEGY_DP_EV);
  hap_lowered *lw = lower(p, g);
  /* forward in order; backward in reverse with each layer's gradient all-reduces issued as soon
   * as its backward is done; then the updates, last layer first */
  static const char *const want[][2] = {
      {"layers.0.linear.fwd", ""},
      {"layers.0.sigmoid.fwd", "layers.0.linear.fwd"},
      {"layers.1.linear.fwd", "layers.0.sigmoid.fwd"},
      {"layers.1.sigmoid.fwd", "layers.1.linear.fwd"},
      {"loss.fwd", "layers.1.sigmoid.fwd"},
      {"loss.bwd", ""},
      {"layers.1.sigmoid.bwd", "loss.bwd"},
      {"layers.1.linear.bwd", "layers.1.sigmoid.bwd"},
      {"layers.1.linear.bias.grad.all_reduce", "layers.1.linear.bwd"},
      {"layers.1.linear.weight.grad.all_reduce", "layers.1.linear.bwd"},
      {"layers.0.sigmoid.bwd", "layers.1.linear.bwd"},
      {"layers.0.linear.bwd", "layers.0.sigmoid.bwd"},
      {"layers.0.linear.bias.grad.all_reduce", "layers.0.linear.bwd"},
      {"layers.0.linear.weight.grad.all_reduce", "layers.0.linear.bwd"},
      {"layers.1.linear.upd",
       "layers.1.linear.bias.grad.all_reduce layers.1.linear.weight.grad.all_reduce"},
      {"layers.0.linear.upd",
       "layers.0.linear.bias.grad.all_reduce layers.0.linear.weight.grad.all_reduce"},
  };
  int n = (int)(sizeof want / sizeof want[0]);
  cr_assert_eq(lw->n_tasks, n);
  for (int t = 0; t < n; t++) {
    char deps[512];
    dep_names(lw, t, deps, sizeof deps);
    cr_expect_str_eq(lw->tasks[t].name, want[t][0], "task %d", t);
    cr_expect_str_eq(deps, want[t][1], "deps of %s", want[t][0]);
  }
  /* work on each device: the batch split 12/12, the gradient all-reduce moves the whole weight */
  hap_task_work w;
  hap_err err = {0};
  int32_t t = find(lw, "layers.0.linear.fwd");
  cr_assert_eq(hap_lowered_work(lw, t, 1, &w, &err), HAP_OK, "%s", err.msg);
  cr_expect_eq(w.len, 12);
  cr_expect_eq(w.io.in[0].dims[0], 12);
  cr_expect_float_eq(w.flops, 2.0 * 12 * 8 * 32 * 32 + 12 * 8 * 32, 1e-9); /* 2MNK + bias MN */
  t = find(lw, "layers.0.linear.weight.grad.all_reduce");
  cr_assert_eq(hap_lowered_work(lw, t, 0, &w, &err), HAP_OK, "%s", err.msg);
  cr_expect_float_eq(w.bytes, 32.0 * 32 * 4, 1e-9);
  t = find(lw, "layers.0.linear.upd");
  cr_assert_eq(hap_lowered_work(lw, t, 0, &w, &err), HAP_OK, "%s", err.msg);
  cr_expect_float_eq(w.flops, 2.0 * (32 * 32 + 32), 1e-9);
  cr_expect_float_eq(w.bytes, 3.0 * 4 * (32 * 32 + 32), 1e-9);
  hap_lowered_destroy(lw);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* The invariants every lowering keeps. */
static void check_invariants(const hap_lowered *lw, const hap_graph *g, const char *what) {
  const hap_plan *p = lw->plan;
  hap_task_phase last_compute_phase = HAP_PHASE_FWD;
  int *updates = calloc((size_t)g->n_tensors, sizeof *updates);
  cr_assert_not_null(updates);
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    const hap_task *k = &lw->tasks[t];
    cr_assert_eq(find(lw, k->name), t, "%s: name '%s' repeats", what, k->name);
    for (int32_t i = 0; i < k->n_deps; i++)
      cr_assert_lt(lw->deps[k->dep0 + i], t, "%s: %s waits for a later task", what, k->name);
    if (k->kind != HAP_TASK_COLLECTIVE) {
      cr_assert_geq(k->phase, last_compute_phase, "%s: %s out of pass order", what, k->name);
      last_compute_phase = k->phase;
    }
    for (int32_t i = 0; i < k->n_params; i++)
      updates[lw->params[k->param0 + i]]++;
    const char *suffix = strrchr(k->name, '.');
    if (k->kind == HAP_TASK_COMPUTE)
      cr_assert_str_eq(suffix, k->phase == HAP_PHASE_FWD ? ".fwd" : ".bwd", "%s", k->name);
  }
  for (int32_t i = 0; i < g->n_tensors; i++) {
    const hap_tensor *t = &g->tensors[i];
    int want = t->kind == HAP_TENSOR_PARAMETER && t->requires_grad ? 1 : 0;
    cr_assert_eq(updates[i], want, "%s: parameter %s updated %d times", what, t->name, updates[i]);
  }
  free(updates);
  /* every compute step has its forward task; every communication of a gradient-carrying tensor
   * has exactly one backward dual */
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    int fwd = 0, bwd = 0;
    for (int32_t t = 0; t < lw->n_tasks; t++) {
      fwd += lw->tasks[t].step == k && lw->tasks[t].phase == HAP_PHASE_FWD;
      bwd += lw->tasks[t].step == k && lw->tasks[t].phase == HAP_PHASE_BWD;
    }
    if (s->kind == HAP_STEP_COMPUTE)
      cr_assert_eq(fwd, 1, "%s: step %d", what, k);
    if (s->kind == HAP_STEP_COMM) {
      cr_assert_eq(fwd, 1, "%s: step %d", what, k);
      cr_assert_eq(bwd, g->tensors[s->tensor].requires_grad ? 1 : 0, "%s: step %d (%s)", what, k,
                   g->tensors[s->tensor].name);
    }
  }
}

Test(lower, invariants_over_the_zoo) {
  static const char *const models[] = {
      "mlp:layers=3,batch=16,seq=4,hidden=16",
      "bert-base:layers=2,batch=8,seq=16,width=64,heads=4,vocab=128",
      "vit:layers=2,batch=8,image=32,patch=8,width=64,heads=4,classes=10",
      "bert-moe:layers=2,batch=8,seq=16,width=64,heads=4,vocab=128,experts=4",
      "vgg19:batch=8,classes=10", "gpt:layers=2,batch=8,seq=16,width=64,heads=4,vocab=128",
      /* fine: the tied head transposes a parameter, which data parallelism keeps replicated */
      "gpt:layers=2,batch=8,seq=16,width=64,heads=4,vocab=128,granularity=fine"};
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    hap_graph *g = model(models[m]);
    hap_lowered *first = NULL;
    hap_plan *first_plan = NULL;
    for (int s = 0; s < HAP_STRATEGY_COUNT; s++) {
      hap_plan *p = synth(g, c, (hap_strategy)s);
      hap_lowered *lw = lower(p, g);
      char what[256];
      snprintf(what, sizeof what, "%s under %s", models[m], hap_strategy_name((hap_strategy)s));
      check_invariants(lw, g, what);
      if (first == NULL) {
        first = lw;
        first_plan = p;
        continue;
      }
      /* twins across strategies: every node's forward task has the same name */
      for (int32_t k = 0; k < g->n_nodes; k++) {
        char name[300];
        snprintf(name, sizeof name, "%s.fwd", g->nodes[k].name);
        cr_assert_geq(find(lw, name), 0, "%s: no %s", what, name);
        cr_assert_geq(find(first, name), 0, "%s: no %s", what, name);
      }
      hap_lowered_destroy(lw);
      hap_plan_destroy(p);
    }
    hap_lowered_destroy(first);
    hap_plan_destroy(first_plan);
    hap_graph_destroy(g);
  }
  hap_cluster_destroy(c);
}

/* A plan whose step reads a layout no earlier step made is refused with the step named. */
Test(lower, broken_flow_refused) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = synth(g, c, HAP_STRATEGY_DP_EV);
  for (int32_t k = 0; k < p->n_steps; k++)
    if (p->steps[k].kind == HAP_STEP_COMPUTE) {
      p->steps[k].variant.in[0] = HAP_LAYOUT_REDUCE; /* nothing makes this */
      break;
    }
  hap_lowered *lw = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_lower(p, g, &lw, &err), HAP_EINVAL);
  cr_assert_null(lw);
  cr_expect(strstr(err.msg, "steps[") != NULL, "%s", err.msg);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}
