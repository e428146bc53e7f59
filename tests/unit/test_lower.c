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

/* ---- segment boundaries --------------------------------------------------------------------- */

/* p's copy with segments 1.. split by {r0, 1 - r0} and, with `reshard`, an all-to-all of
 * layers.0.sigmoid (G0, segment 0 -> 1) before layers.1.linear. */
static hap_plan *resplit(const hap_plan *p, const hap_graph *g, double r0, bool reshard) {
  hap_plan *q = hap_plan_copy(p);
  cr_assert_not_null(q);
  for (int32_t s = 1; s < q->n_segments; s++) {
    q->ratios[(size_t)s * 2] = r0;
    q->ratios[(size_t)s * 2 + 1] = 1 - r0;
  }
  if (!reshard)
    return q;
  int32_t at = -1, tensor;
  for (int32_t k = 0; k < q->n_steps && at < 0; k++)
    if (q->steps[k].kind == HAP_STEP_COMPUTE &&
        strcmp(g->nodes[q->steps[k].node].name, "layers.1.linear") == 0)
      at = k;
  tensor = hap_graph_find_tensor(g, "layers.0.sigmoid");
  cr_assert(at >= 0 && tensor >= 0 && q->steps[at].segment == 1 && q->steps[at].variant.in[0] == 0);
  hap_step step = {.kind = HAP_STEP_COMM,
                   .segment = 1,
                   .tensor = tensor,
                   .node = -1,
                   .to = 0,
                   .from = 0,
                   .comm = HAP_COMM_ALL_TO_ALL,
                   .impl = HAP_IMPL_PAIRWISE,
                   .from_segment = 0,
                   .granule = 1};
  hap_err err = {0};
  cr_assert_eq(hap_plan_add_step(q, &step, &err), HAP_OK, "%s", err.msg);
  memmove(&q->steps[at + 1], &q->steps[at], (size_t)(q->n_steps - 1 - at) * sizeof *q->steps);
  q->steps[at] = step;
  return q;
}

/* Segments with identical ratios share their Gathers (no step between them); a boundary between
 * different splits moves only the difference (per rank: the larger of what it sends and receives,
 * priced as the all-to-all of that times n / (n - 1)), or nothing when the lengths agree: then the
 * all-to-all is a local copy. Reading a Gather under other ratios without a step is refused. */
Test(lower, segment_boundaries_move_only_the_difference) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32,segments=1");
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = synth(g, c, HAP_STRATEGY_DP_EV);
  hap_err err = {0};
  cr_assert_gt(p->n_segments, 2);
  cr_assert(hap_plan_same_split(p, 0, 1) && hap_plan_same_split(p, 2, 2));
  cr_assert_not(hap_plan_same_split(p, 0, p->n_segments));
  for (int32_t k = 0; k < p->n_steps; k++)
    cr_assert(p->steps[k].kind != HAP_STEP_COMM || p->steps[k].comm != HAP_COMM_ALL_TO_ALL,
              "steps[%d] re-shards between segments that split alike", k);
  hap_lowered *lw = lower(p, g);
  hap_lowered_destroy(lw);

  /* 12 / 12 -> 18 / 6 rows of [24, 8, 32] float32 (1 KiB a row): 6 rows leave rank 1 for rank 0 */
  hap_plan *moved = resplit(p, g, 0.75, true);
  cr_assert_eq(hap_plan_validate(moved, g, c, &err), HAP_OK, "%s", err.msg);
  cr_assert_not(hap_plan_same_split(moved, 0, 1));
  cr_assert(hap_plan_same_split(moved, 1, 2));
  lw = lower(moved, g);
  const char *names[2] = {"layers.0.sigmoid.all_to_all", "layers.0.sigmoid.grad.all_to_all"};
  for (int i = 0; i < 2; i++) {
    int32_t t = find(lw, names[i]);
    cr_assert(t >= 0 && lw->tasks[t].kind == HAP_TASK_COLLECTIVE, "%s", names[i]);
    double per_rank[2];
    cr_assert_eq(hap_lowered_coll_bytes(lw, t, per_rank, &err), HAP_OK, "%s", err.msg);
    for (int d = 0; d < 2; d++)
      cr_assert_float_eq(per_rank[d], 6 * 1024.0 * 2, 1e-9, "%s rank %d: %g", names[i], d,
                         per_rank[d]);
    hap_task_work w;
    cr_assert_eq(hap_lowered_work(lw, t, 1, &w, &err), HAP_OK, "%s", err.msg);
    cr_assert_float_eq(w.bytes, 6 * 1024.0, 1e-9);
  }
  hap_lowered_destroy(lw);

  /* ratios that differ in the last bit only give the same lengths: a local copy each way */
  hap_plan *copied = resplit(p, g, 0.5000000000000001, true);
  cr_assert_not(hap_plan_same_split(copied, 0, 1));
  lw = lower(copied, g);
  cr_assert_lt(find(lw, "layers.0.sigmoid.all_to_all"), 0);
  int32_t fwd = find(lw, "layers.0.sigmoid.copy"), bwd = find(lw, "layers.0.sigmoid.grad.copy");
  cr_assert(fwd >= 0 && bwd >= 0);
  cr_assert(lw->tasks[fwd].kind == HAP_TASK_LOCAL && lw->tasks[fwd].local == HAP_LOCAL_COPY);
  cr_assert(lw->tasks[bwd].kind == HAP_TASK_LOCAL && lw->tasks[bwd].local == HAP_LOCAL_COPY);
  hap_lowered_destroy(lw);

  hap_plan *refused = resplit(p, g, 0.75, false);
  cr_assert_eq(hap_plan_validate(refused, g, c, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "'layers.0.sigmoid' as G0 (segment 1)") != NULL, "%s", err.msg);
  hap_plan_destroy(refused);
  hap_plan_destroy(copied);
  hap_plan_destroy(moved);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* Sufficient-factor broadcasting: the 2-layer data-parallel MLP with layer 1's weight stored sfb.
 * Its gradient all-reduce becomes the two all-gathers (after the layer's backward) and the
 * whole-batch weight gradient, which the update waits for; the layer's own backward no longer
 * computes the weight gradient. Batch 24 x 8 positions split 18/6 rows. */
Test(lower, sfb_replaces_the_weight_all_reduce) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = synth(g, c, HAP_STRATEGY_DP_EV);
  p->ratios[0] = 0.75;
  p->ratios[1] = 0.25;
  for (int32_t k = 0; k < p->n_steps; k++)
    if (p->steps[k].kind == HAP_STEP_SOURCE &&
        strcmp(g->tensors[p->steps[k].tensor].name, "layers.1.linear.weight") == 0)
      p->steps[k].storage = HAP_STORE_SFB;
  hap_err err = {0};
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  hap_lowered *lw = lower(p, g);
  cr_expect_eq(find(lw, "layers.1.linear.weight.grad.all_reduce"), -1);
  cr_expect_geq(find(lw, "layers.0.linear.weight.grad.all_reduce"), 0);
  static const char *const want[][2] = {
      {"layers.1.linear.weight.grad.sfb_gather_x", "layers.1.linear.bwd"},
      {"layers.1.linear.weight.grad.sfb_gather_dy", "layers.1.linear.bwd"},
      {"layers.1.linear.weight.grad.sfb",
       "layers.1.linear.weight.grad.sfb_gather_x layers.1.linear.weight.grad.sfb_gather_dy"},
  };
  for (int i = 0; i < 3; i++) {
    int32_t t = find(lw, want[i][0]);
    cr_assert_geq(t, 0, "no task %s", want[i][0]);
    char deps[512];
    dep_names(lw, t, deps, sizeof deps);
    cr_expect_str_eq(deps, want[i][1], "deps of %s", want[i][0]);
    cr_expect_eq(hap_lowered_is_grad_sync(lw, t), i < 2, "%s", want[i][0]);
  }
  char deps[512];
  dep_names(lw, find(lw, "layers.1.linear.upd"), deps, sizeof deps);
  cr_expect_str_eq(deps, "layers.1.linear.bias.grad.all_reduce layers.1.linear.weight.grad.sfb");
  hap_task_work w;
  /* device 1 holds 6 rows of 8 positions: its backward is dx (2MNK) and db (MN) only */
  cr_assert_eq(hap_lowered_work(lw, find(lw, "layers.1.linear.bwd"), 1, &w, &err), HAP_OK, "%s",
               err.msg);
  cr_expect(!w.io.in_grad[1] && w.io.in_grad[0] && w.io.in_grad[2]);
  cr_expect_float_eq(w.flops, 2.0 * 6 * 8 * 32 * 32 + 6 * 8 * 32, 1e-9);
  /* the gathers send each device's rows: 6 x 8 x 32 floats from device 1 */
  cr_assert_eq(
      hap_lowered_work(lw, find(lw, "layers.1.linear.weight.grad.sfb_gather_dy"), 1, &w, &err),
      HAP_OK, "%s", err.msg);
  cr_expect_float_eq(w.bytes, 6.0 * 8 * 32 * 4, 1e-9);
  /* every device forms dW over all 24 x 8 rows: 2MNK */
  for (int32_t d = 0; d < 2; d++) {
    cr_assert_eq(hap_lowered_work(lw, find(lw, "layers.1.linear.weight.grad.sfb"), d, &w, &err),
                 HAP_OK, "%s", err.msg);
    cr_expect(w.backward && w.len == -1 && w.io.in[0].dims[0] == 24);
    cr_expect_float_eq(w.flops, 2.0 * 24 * 8 * 32 * 32, 1e-9, "device %d", d);
  }
  hap_lowered_destroy(lw);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}
