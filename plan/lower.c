/* lower.c — plan -> task list (lower.h). Forward: one task per compute step, per communication
 * step and per ZeRO source; dependencies follow the property flow (a step waits for the producer
 * of every layout it reads). Backward, in reverse: a step's gradient task waits for the gradient
 * tasks of every consumer of the layouts it produced; a step without a gradient task passes its
 * consumers' tasks through (its "frontier"). Updates wait for each parameter's synchronised
 * gradient. */
#include "plan/lower.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strmap.h"
#include "base/vec.h"
#include "plan/replica.h"

static const char *const kind_names[HAP_TASK_KIND_COUNT] = {"compute", "local", "collective",
                                                            "update"};
static const char *const phase_names[3] = {"fwd", "bwd", "upd"};
static const char *const local_names[HAP_LOCAL_OP_COUNT] = {"slice", "pad", "keep_once", "copy"};

const char *hap_task_kind_name(hap_task_kind k) {
  return (unsigned)k < HAP_TASK_KIND_COUNT ? kind_names[k] : "?";
}
const char *hap_task_phase_name(hap_task_phase p) { return (unsigned)p < 3 ? phase_names[p] : "?"; }
const char *hap_local_op_name(hap_local_op op) {
  return (unsigned)op < HAP_LOCAL_OP_COUNT ? local_names[op] : "?";
}

/* ---- shard lengths cache ---------------------------------------------------------------- */

struct hap_lower_private {
  hap_arena names;         /* task names */
  hap_shard_cache lengths; /* shard lengths per (extent, granule, segment) */
};

const int64_t *hap_lowered_lengths(hap_lowered *lw, int64_t extent, int64_t granule, int32_t seg) {
  return hap_shard_cache_get(&lw->priv->lengths, extent, granule < 1 ? 1 : granule, seg);
}

/* ---- building -------------------------------------------------------------------------- */

/* A layout of a tensor made available by a step (as plan.c's flow: segment -1 and granule 1
 * unless Gather). */
typedef struct lprop {
  int32_t tensor;
  hap_layout layout;
  int32_t segment;
  int64_t granule;
  int32_t producer;   /* step */
  int32_t next;       /* next prop of the same tensor, -1 */
  int32_t use0, nuse; /* consumer steps: uses[use0 ..) after the forward pass */
} lprop;

typedef struct builder {
  const hap_plan *p;
  const hap_graph *g;
  hap_lowered *lw;
  hap_err *err;
  int32_t cap_tasks, cap_deps, cap_params;
  lprop *props;
  int32_t n_props, cap_props;
  int32_t *head;   /* [tensors]: first prop, -1 */
  int32_t *in;     /* [steps][HAP_MAX_OP_INPUTS]: props a step reads, -1 */
  int32_t *out;    /* [steps][HAP_MAX_OP_OUTPUTS]: props a step makes, -1 */
  int32_t *fwd;    /* [steps]: forward task, -1 */
  int32_t *bwd;    /* [steps]: gradient task, -1 */
  int32_t *front0; /* [steps]: frontier in front[front0 .. front0+nfront) */
  int32_t *nfront;
  int32_t *front;
  int32_t n_front, cap_front;
  int32_t *uses; /* consumer steps, grouped per prop */
  int32_t *scratch;
  int32_t n_scratch, cap_scratch;
  int32_t n_deps_total, n_params_total;
  hap_strmap names;
  /* the policy's: micro-batches, tensors without a batch, recomputation */
  int32_t micro;
  bool zero3;
  bool *state;            /* [tensors] */
  hap_recompute_map rmap; /* of the priced graph */
} builder;

/* An all-to-all between two segments' splits of one dim that are equal moves nothing: it becomes
 * a LOCAL copy of the device's part, which waits for no other device. */
static void copy_if_nothing_moves(builder *b, hap_task *t) {
  if (t->kind != HAP_TASK_COLLECTIVE || t->coll != HAP_COLL_ALL_TO_ALL || t->from < 0 ||
      t->from != t->to || t->from_segment == t->to_segment)
    return;
  int64_t extent = b->g->tensors[t->tensor].shape.dims[t->from];
  const int64_t *a = hap_lowered_lengths(b->lw, extent, t->granule, t->from_segment);
  const int64_t *c = hap_lowered_lengths(b->lw, extent, t->granule, t->to_segment);
  if (a != NULL && c != NULL && memcmp(a, c, (size_t)b->lw->group_size * sizeof *a) == 0) {
    t->kind = HAP_TASK_LOCAL;
    t->local = HAP_LOCAL_COPY;
  }
}

/* Runs per iteration of a task that moves or computes tensor t: once per micro-batch, unless t
 * carries no batch (parameters, buffers and what is made from them alone). */
static int32_t runs_of(const builder *b, int32_t tensor) {
  return tensor >= 0 && b->state[tensor] ? 1 : b->micro;
}

static hap_status oom(builder *b) {
  return hap_err_set(b->err, HAP_ENOMEM, "out of memory lowering the plan");
}

static lprop key(hap_layout l, int32_t t, int32_t segment, int64_t granule) {
  lprop k = {.tensor = t, .layout = l, .segment = -1, .granule = 1};
  if (l >= 0) {
    k.segment = segment;
    k.granule = granule > 1 ? granule : 1;
  }
  return k;
}

static int32_t find_prop(const builder *b, lprop k) {
  for (int32_t i = b->head[k.tensor]; i >= 0; i = b->props[i].next) {
    const lprop *q = &b->props[i];
    if (q->layout == k.layout && q->granule == k.granule &&
        hap_plan_same_split(b->p, q->segment, k.segment))
      return i;
  }
  return -1;
}

/* A new prop made by `step` (a layout made again after it died gets a new one, which later
 * lookups find first); returns its id or -1. */
static int32_t add_prop(builder *b, lprop k, int32_t step) {
  if (HAP_VEC_RESERVE(b->props, b->cap_props, b->n_props + 1, 64))
    return -1;
  k.producer = step;
  k.next = b->head[k.tensor];
  k.use0 = k.nuse = 0;
  b->props[b->n_props] = k;
  b->head[k.tensor] = b->n_props;
  return b->n_props++;
}

/* Append a task named by fmt; its deps are b->scratch[0..n_scratch). Returns its id or -1. */
__attribute__((format(printf, 3, 4))) static int32_t add_task(builder *b, const hap_task *proto,
                                                              const char *fmt, ...) {
  hap_lowered *lw = b->lw;
  char name[512], unique[540];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const char *use = name;
  for (int k = 2; hap_strmap_get(&b->names, use) >= 0; k++) {
    snprintf(unique, sizeof unique, "%s.%d", name, k);
    use = unique;
  }
  const char *owned = hap_arena_strdup(&lw->priv->names, use);
  if (owned == NULL || HAP_VEC_RESERVE(lw->tasks, b->cap_tasks, lw->n_tasks + 1, 64))
    return -1;
  /* deps: sorted, unique (insertion sort: a task has few) */
  for (int32_t i = 1; i < b->n_scratch; i++) {
    int32_t v = b->scratch[i], j = i - 1;
    while (j >= 0 && b->scratch[j] > v) {
      b->scratch[j + 1] = b->scratch[j];
      j--;
    }
    b->scratch[j + 1] = v;
  }
  int32_t base = b->n_deps_total, n_deps = 0;
  if (HAP_VEC_RESERVE(lw->deps, b->cap_deps, base + b->n_scratch, 64))
    return -1;
  for (int32_t i = 0; i < b->n_scratch; i++)
    if (i == 0 || b->scratch[i] != b->scratch[i - 1])
      lw->deps[base + n_deps++] = b->scratch[i];
  b->n_deps_total += n_deps;
  hap_task *t = &lw->tasks[lw->n_tasks];
  *t = *proto;
  t->name = owned;
  t->dep0 = base;
  t->n_deps = n_deps;
  if (hap_strmap_put(&b->names, owned, lw->n_tasks) != 0)
    return -1;
  b->n_scratch = 0;
  return lw->n_tasks++;
}

static int push_dep(builder *b, int32_t task) {
  if (task < 0)
    return 0;
  if (HAP_VEC_RESERVE(b->scratch, b->cap_scratch, b->n_scratch + 1, 64))
    return -1;
  b->scratch[b->n_scratch++] = task;
  return 0;
}

static hap_task proto(hap_task_kind kind, hap_task_phase phase, int32_t step) {
  hap_task t;
  memset(&t, 0, sizeof t);
  t.kind = kind;
  t.phase = phase;
  t.step = step;
  t.node = -1;
  t.tensor = -1;
  t.from_segment = t.to_segment = -1;
  t.granule = 1;
  t.repeats = 1;
  t.recompute_of = -1;
  return t;
}

static bool trainable(const hap_tensor *t) {
  return t->kind == HAP_TENSOR_PARAMETER && t->requires_grad;
}

/* The prop a step reads or makes, or a flow error. */
static hap_status need_prop(builder *b, int32_t k, lprop want, int32_t *id) {
  *id = find_prop(b, want);
  if (*id < 0) {
    char buf[4];
    return hap_err_set(b->err, HAP_EINVAL,
                       "plan steps[%d]: tensor '%s' is not available as %s (validate the plan "
                       "before lowering it)",
                       k, b->g->tensors[want.tensor].name, hap_layout_name(want.layout, buf));
  }
  return HAP_OK;
}

static hap_status forward_pass(builder *b) {
  const hap_plan *p = b->p;
  const hap_graph *g = b->g;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    int32_t *in = b->in + (size_t)k * HAP_MAX_OP_INPUTS;
    int32_t *out = b->out + (size_t)k * HAP_MAX_OP_OUTPUTS;
    int32_t task = -1;
    if (s->kind == HAP_STEP_SOURCE) {
      b->lw->source_step[s->tensor] = k;
      if (s->storage == HAP_STORE_ZERO) {
        hap_task t = proto(HAP_TASK_COLLECTIVE, HAP_PHASE_FWD, k);
        t.tensor = s->tensor;
        t.coll = HAP_COLL_ALL_GATHER;
        t.impl = HAP_IMPL_AUTO;
        t.from = 0;
        t.from_segment = 0;
        t.to = HAP_LAYOUT_IDENTITY;
        t.repeats = b->micro * (b->zero3 ? 2 : 1); /* ZeRO-3 gathers again for the backward */
        if ((task = add_task(b, &t, "%s.all_gather", g->tensors[s->tensor].name)) < 0)
          return oom(b);
      }
      if ((out[0] = add_prop(b, key(s->to, s->tensor, s->segment, s->granule), k)) < 0)
        return oom(b);
    } else if (s->kind == HAP_STEP_COMPUTE) {
      const hap_node *node = &g->nodes[s->node];
      for (int i = 0; i < node->n_inputs; i++) {
        HAP_TRY(need_prop(
            b, k, key(s->variant.in[i], node->inputs[i], s->segment, s->variant.granule), &in[i]));
        if (push_dep(b, b->fwd[b->props[in[i]].producer]))
          return oom(b);
      }
      hap_task t = proto(HAP_TASK_COMPUTE, HAP_PHASE_FWD, k);
      t.node = s->node;
      t.repeats = b->micro;
      if ((task = add_task(b, &t, "%s.fwd", node->name)) < 0)
        return oom(b);
      for (int o = 0; o < node->n_outputs; o++)
        if ((out[o] = add_prop(
                 b, key(s->variant.out[o], node->outputs[o], s->segment, s->variant.granule), k)) <
            0)
          return oom(b);
    } else {
      HAP_TRY(need_prop(b, k, key(s->from, s->tensor, s->from_segment, s->granule), &in[0]));
      if (push_dep(b, b->fwd[b->props[in[0]].producer]))
        return oom(b);
      bool local = s->comm == HAP_COMM_SLICE || s->comm == HAP_COMM_KEEP_ONCE;
      hap_task t = proto(local ? HAP_TASK_LOCAL : HAP_TASK_COLLECTIVE, HAP_PHASE_FWD, k);
      t.tensor = s->tensor;
      t.from = s->from;
      t.to = s->to;
      t.from_segment = s->from >= 0 ? s->from_segment : -1;
      t.to_segment = s->to >= 0 ? s->segment : -1;
      t.granule = s->granule > 1 ? s->granule : 1;
      t.impl = s->impl;
      t.repeats = runs_of(b, s->tensor);
      static const hap_coll_kind coll_of[HAP_COMM_OP_COUNT] = {
          HAP_COLL_ALL_GATHER, HAP_COLL_REDUCE_SCATTER, HAP_COLL_ALL_REDUCE, HAP_COLL_ALL_TO_ALL};
      t.coll = coll_of[s->comm];
      t.local = s->comm == HAP_COMM_SLICE ? HAP_LOCAL_SLICE : HAP_LOCAL_KEEP_ONCE;
      copy_if_nothing_moves(b, &t);
      if ((task = add_task(b, &t, "%s.%s", g->tensors[s->tensor].name,
                           t.kind == HAP_TASK_LOCAL && t.local == HAP_LOCAL_COPY
                               ? hap_local_op_name(t.local)
                               : hap_comm_op_name(s->comm))) < 0)
        return oom(b);
      if ((out[0] = add_prop(b, key(s->to, s->tensor, s->segment, s->granule), k)) < 0)
        return oom(b);
    }
    b->fwd[k] = task;
  }
  return HAP_OK;
}

/* Group consumer steps per prop (uses[use0 .. use0+nuse)). */
static hap_status index_uses(builder *b) {
  int32_t total = 0;
  size_t n_in = (size_t)b->p->n_steps * HAP_MAX_OP_INPUTS;
  for (size_t i = 0; i < n_in; i++)
    if (b->in[i] >= 0)
      b->props[b->in[i]].nuse++;
  for (int32_t i = 0; i < b->n_props; i++) {
    b->props[i].use0 = total;
    total += b->props[i].nuse;
    b->props[i].nuse = 0;
  }
  b->uses = malloc((size_t)(total ? total : 1) * sizeof *b->uses);
  if (b->uses == NULL)
    return oom(b);
  for (int32_t k = 0; k < b->p->n_steps; k++)
    for (int i = 0; i < HAP_MAX_OP_INPUTS; i++) {
      int32_t q = b->in[(size_t)k * HAP_MAX_OP_INPUTS + (size_t)i];
      bool repeat = false;
      for (int j = 0; j < i; j++)
        repeat = repeat || b->in[(size_t)k * HAP_MAX_OP_INPUTS + (size_t)j] == q;
      if (q >= 0 && !repeat)
        b->uses[b->props[q].use0 + b->props[q].nuse++] = k;
    }
  return HAP_OK;
}

/* Push the frontier of every consumer of the props step k made: the tasks that finish k's
 * output gradients. */
static int push_grad_deps(builder *b, int32_t k) {
  for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++) {
    int32_t q = b->out[(size_t)k * HAP_MAX_OP_OUTPUTS + (size_t)o];
    if (q < 0)
      continue;
    for (int32_t u = 0; u < b->props[q].nuse; u++) {
      int32_t c = b->uses[b->props[q].use0 + u];
      for (int32_t f = 0; f < b->nfront[c]; f++)
        if (push_dep(b, b->front[b->front0[c] + f]))
          return -1;
    }
  }
  return 0;
}

static int set_frontier(builder *b, int32_t k, int32_t task) {
  b->front0[k] = b->n_front;
  if (task >= 0) {
    if (HAP_VEC_RESERVE(b->front, b->cap_front, b->n_front + 1, 64))
      return -1;
    b->front[b->n_front++] = task;
  } else {
    if (HAP_VEC_RESERVE(b->front, b->cap_front, b->n_front + b->n_scratch, 64))
      return -1;
    for (int32_t i = 0; i < b->n_scratch; i++) {
      bool dup = false;
      for (int32_t j = b->front0[k]; j < b->n_front && !dup; j++)
        dup = b->front[j] == b->scratch[i];
      if (!dup)
        b->front[b->n_front++] = b->scratch[i];
    }
    b->n_scratch = 0;
  }
  b->nfront[k] = b->n_front - b->front0[k];
  return 0;
}

/* The weight of a linear node whose source is sfb (the node's weight gradient is made by
 * sfb_tasks), or -1. */
static int32_t sfb_weight(const builder *b, const hap_node *node) {
  if (node->op != HAP_OP_LINEAR || node->n_inputs < 2)
    return -1;
  int32_t src = b->lw->source_step[node->inputs[1]];
  return src >= 0 && b->p->steps[src].storage == HAP_STORE_SFB ? node->inputs[1] : -1;
}

/* Sufficient-factor broadcasting of the weight sourced by step k (the deps pushed so far are its
 * consumer's backward): the consumer's input and output gradient all-gathered along its rows,
 * then the whole weight gradient on every device. *last: that task. */
static hap_status sfb_tasks(builder *b, int32_t k, int32_t *last) {
  const hap_graph *g = b->g;
  const char *wn = g->tensors[b->p->steps[k].tensor].name;
  int32_t c = hap_plan_sfb_consumer(b->p, g, b->p->steps[k].tensor);
  if (c < 0 || b->bwd[c] < 0)
    return hap_err_set(b->err, HAP_EINVAL,
                       "plan steps[%d]: sfb source '%s' has no linear consumer (validate the plan "
                       "before lowering it)",
                       k, wn);
  const hap_step *cs = &b->p->steps[c];
  const hap_node *node = &g->nodes[cs->node];
  int32_t gathers[2];
  for (int i = 0; i < 2; i++) {
    hap_task t = proto(HAP_TASK_COLLECTIVE, HAP_PHASE_BWD, c);
    t.sfb = i == 0 ? HAP_SFB_GATHER_X : HAP_SFB_GATHER_DY;
    t.tensor = i == 0 ? node->inputs[0] : node->outputs[0];
    t.coll = HAP_COLL_ALL_GATHER;
    t.impl = HAP_IMPL_AUTO;
    t.from = i == 0 ? cs->variant.in[0] : cs->variant.out[0];
    t.from_segment = cs->segment;
    t.granule = cs->variant.granule > 1 ? cs->variant.granule : 1;
    t.to = HAP_LAYOUT_IDENTITY;
    if ((i > 0 && push_dep(b, b->bwd[c])) ||
        (gathers[i] = add_task(b, &t, "%s.grad.sfb_gather_%s", wn, i == 0 ? "x" : "dy")) < 0)
      return oom(b);
  }
  hap_task t = proto(HAP_TASK_COMPUTE, HAP_PHASE_BWD, c);
  t.sfb = HAP_SFB_WEIGHT_GRAD;
  t.node = cs->node;
  if (push_dep(b, gathers[0]) || push_dep(b, gathers[1]) ||
      (*last = add_task(b, &t, "%s.grad.sfb", wn)) < 0)
    return oom(b);
  return HAP_OK;
}

static hap_status backward_step(builder *b, int32_t k) {
  const hap_step *s = &b->p->steps[k];
  const hap_graph *g = b->g;
  if (push_grad_deps(b, k))
    return oom(b);
  int32_t task = -1;
  if (s->kind == HAP_STEP_COMPUTE) {
    const hap_node *node = &g->nodes[s->node];
    bool any = false;
    for (int i = 0; i < node->n_inputs; i++)
      any = any || g->tensors[node->inputs[i]].requires_grad;
    if (any) {
      hap_task t = proto(HAP_TASK_COMPUTE, HAP_PHASE_BWD, k);
      t.node = s->node;
      t.repeats = b->micro;
      if (b->rmap.recomputed != NULL && b->rmap.recomputed[s->node])
        t.recompute_of = b->fwd[k];
      if (sfb_weight(b, node) >= 0)
        t.sfb = HAP_SFB_NO_WEIGHT_GRAD;
      if ((task = add_task(b, &t, "%s.bwd", node->name)) < 0)
        return oom(b);
    }
  } else if (s->kind == HAP_STEP_COMM && g->tensors[s->tensor].requires_grad) {
    const char *tn = g->tensors[s->tensor].name;
    hap_task t = proto(HAP_TASK_COLLECTIVE, HAP_PHASE_BWD, k);
    t.tensor = s->tensor;
    t.impl = s->impl;
    t.granule = s->granule > 1 ? s->granule : 1;
    t.repeats = runs_of(b, s->tensor);
    if (b->rmap.dropped != NULL && b->rmap.dropped[s->tensor])
      t.recompute_of = b->fwd[k]; /* the forward layout change again, for the recomputation */
    /* the gradient moves from the dual of `to` to the dual of `from` */
    switch (s->comm) {
    case HAP_COMM_ALL_GATHER: /* grad I-dual (R) -> G */
      t.coll = HAP_COLL_REDUCE_SCATTER;
      t.from = HAP_LAYOUT_REDUCE;
      t.to = s->from;
      t.to_segment = s->from_segment;
      break;
    case HAP_COMM_REDUCE_SCATTER: /* grad G -> I */
      t.coll = HAP_COLL_ALL_GATHER;
      t.from = s->to;
      t.from_segment = s->segment;
      t.to = HAP_LAYOUT_IDENTITY;
      break;
    case HAP_COMM_ALL_REDUCE: /* grad R -> I */
      t.coll = HAP_COLL_ALL_REDUCE;
      t.from = HAP_LAYOUT_REDUCE;
      t.to = HAP_LAYOUT_IDENTITY;
      break;
    case HAP_COMM_ALL_TO_ALL:
      t.coll = HAP_COLL_ALL_TO_ALL;
      t.from = s->to;
      t.from_segment = s->segment;
      t.to = s->from;
      t.to_segment = s->from_segment;
      copy_if_nothing_moves(b, &t);
      break;
    case HAP_COMM_SLICE: /* grad G -> R: pad with zeros */
      t.kind = HAP_TASK_LOCAL;
      t.local = HAP_LOCAL_PAD;
      t.from = s->to;
      t.from_segment = s->segment;
      t.to = HAP_LAYOUT_REDUCE;
      break;
    default: /* keep_once: grad I -> R, device 0 keeps it */
      t.kind = HAP_TASK_LOCAL;
      t.local = HAP_LOCAL_KEEP_ONCE;
      t.from = HAP_LAYOUT_IDENTITY;
      t.to = HAP_LAYOUT_REDUCE;
      break;
    }
    const char *op =
        t.kind == HAP_TASK_LOCAL ? hap_local_op_name(t.local) : hap_coll_kind_name(t.coll);
    if ((task = add_task(b, &t, "%s.grad.%s", tn, op)) < 0)
      return oom(b);
  } else if (s->kind == HAP_STEP_SOURCE && s->storage == HAP_STORE_SFB) {
    HAP_TRY(sfb_tasks(b, k, &task));
  } else if (s->kind == HAP_STEP_SOURCE && trainable(&g->tensors[s->tensor]) &&
             (s->storage == HAP_STORE_REPLICATED || s->storage == HAP_STORE_ZERO)) {
    hap_task t = proto(HAP_TASK_COLLECTIVE, HAP_PHASE_BWD, k);
    t.tensor = s->tensor;
    t.from = HAP_LAYOUT_REDUCE;
    if (s->storage == HAP_STORE_REPLICATED) {
      t.coll = HAP_COLL_ALL_REDUCE;
      t.impl = HAP_IMPL_AUTO;
      t.to = HAP_LAYOUT_IDENTITY;
    } else {
      t.coll = HAP_COLL_REDUCE_SCATTER;
      t.impl = HAP_IMPL_AUTO;
      t.to = 0;
      t.to_segment = 0;
      t.repeats = b->micro; /* a sharded gradient is reduced every micro-batch */
    }
    if ((task = add_task(b, &t, "%s.grad.%s", g->tensors[s->tensor].name,
                         hap_coll_kind_name(t.coll))) < 0)
      return oom(b);
  }
  if (s->kind == HAP_STEP_SOURCE && trainable(&g->tensors[s->tensor]) && b->p->replicas > 1) {
    /* the gradient shard this device holds, summed over the replicas */
    hap_task t = proto(HAP_TASK_COLLECTIVE, HAP_PHASE_BWD, k);
    t.tensor = s->tensor;
    t.coll = HAP_COLL_ALL_REDUCE;
    t.impl = HAP_IMPL_AUTO;
    t.span = HAP_SPAN_REPLICAS;
    t.to = s->storage == HAP_STORE_ZERO ? 0 : s->to;
    t.to_segment = t.to >= 0 ? (s->storage == HAP_STORE_ZERO ? 0 : s->segment) : -1;
    t.granule = s->storage != HAP_STORE_ZERO && s->granule > 1 ? s->granule : 1;
    t.from = t.to;
    t.from_segment = t.to_segment;
    if (push_dep(b, task) ||
        (task = add_task(b, &t, "%s.grad.replica_all_reduce", g->tensors[s->tensor].name)) < 0)
      return oom(b);
  }
  b->bwd[k] = task;
  if (set_frontier(b, k, task))
    return oom(b);
  return HAP_OK;
}

bool hap_lowered_is_grad_sync(const hap_lowered *lw, int32_t t) {
  const hap_task *k = &lw->tasks[t];
  if (k->kind != HAP_TASK_COLLECTIVE || k->phase != HAP_PHASE_BWD)
    return false;
  if (k->span == HAP_SPAN_REPLICAS || k->sfb == HAP_SFB_GATHER_X || k->sfb == HAP_SFB_GATHER_DY)
    return true;
  return k->step >= 0 && lw->plan->steps[k->step].kind == HAP_STEP_SOURCE;
}

/* One update per node that first uses a trainable parameter, last layers first. */
static hap_status updates(builder *b) {
  const hap_graph *g = b->g;
  hap_lowered *lw = b->lw;
  int32_t *owner = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *owner);
  if (owner == NULL)
    return oom(b);
  for (int32_t t = 0; t < g->n_tensors; t++)
    owner[t] = -1;
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int i = 0; i < g->nodes[k].n_inputs; i++) {
      int32_t t = g->nodes[k].inputs[i];
      if (trainable(&g->tensors[t]) && owner[t] < 0)
        owner[t] = k;
    }
  hap_status st = HAP_OK;
  for (int32_t k = g->n_nodes - 1; k >= 0 && st == HAP_OK; k--) {
    /* parameters of node k, in input order */
    int32_t count = 0, np = 0, p0 = b->n_params_total;
    for (int i = 0; i < g->nodes[k].n_inputs; i++)
      count += owner[g->nodes[k].inputs[i]] == k;
    if (count == 0)
      continue;
    if (HAP_VEC_RESERVE(lw->params, b->cap_params, p0 + count, 64) || lw->params == NULL) {
      st = oom(b);
      break;
    }
    for (int i = 0; i < g->nodes[k].n_inputs; i++) {
      int32_t t = g->nodes[k].inputs[i];
      if (owner[t] != k)
        continue;
      owner[t] = -2; /* a parameter repeated in the inputs counts once */
      lw->params[p0 + np++] = t;
      int32_t src = lw->source_step[t];
      if (src < 0) {
        st = hap_err_set(b->err, HAP_EINVAL, "plan: parameter '%s' is never sourced",
                         g->tensors[t].name);
        break;
      }
      for (int32_t f = 0; f < b->nfront[src]; f++)
        if (push_dep(b, b->front[b->front0[src] + f])) {
          st = oom(b);
          break;
        }
    }
    if (st != HAP_OK)
      break;
    hap_task u = proto(HAP_TASK_UPDATE, HAP_PHASE_UPD, -1);
    u.node = k;
    u.param0 = p0;
    u.n_params = np;
    b->n_params_total += np;
    if (add_task(b, &u, "%s.upd", g->nodes[k].name) < 0)
      st = oom(b);
  }
  free(owner);
  return st;
}

static void free_builder(builder *b) {
  free(b->props);
  free(b->head);
  free(b->in);
  free(b->out);
  free(b->fwd);
  free(b->bwd);
  free(b->front0);
  free(b->nfront);
  free(b->front);
  free(b->uses);
  free(b->scratch);
  free(b->state);
  hap_recompute_map_free(&b->rmap);
  hap_strmap_free(&b->names);
}

void hap_lowered_destroy(hap_lowered *lw) {
  if (lw == NULL)
    return;
  if (lw->priv) {
    hap_shard_cache_free(&lw->priv->lengths);
    hap_arena_free(&lw->priv->names);
    free(lw->priv);
  }
  if (lw->priced_graph != lw->local_graph && lw->priced_graph != lw->exec_graph)
    hap_graph_destroy((hap_graph *)lw->priced_graph);
  if (lw->exec_graph != lw->local_graph)
    hap_graph_destroy((hap_graph *)lw->exec_graph);
  if (lw->local_graph != lw->graph)
    hap_graph_destroy((hap_graph *)lw->local_graph);
  free(lw->tasks);
  free(lw->deps);
  free(lw->params);
  free(lw->source_step);
  free(lw);
}

hap_status hap_lower(const hap_plan *p, const hap_graph *g, hap_lowered **out, hap_err *err) {
  *out = NULL;
  builder b;
  memset(&b, 0, sizeof b);
  b.p = p;
  b.g = g;
  b.err = err;
  hap_strmap_init(&b.names);
  hap_lowered *lw = calloc(1, sizeof *lw);
  size_t ns = (size_t)(p->n_steps ? p->n_steps : 1);
  if (lw == NULL) {
    free_builder(&b);
    return oom(&b);
  }
  lw->plan = p;
  lw->graph = g;
  lw->local_graph = g;
  lw->n_devices = p->n_devices;
  lw->replicas = p->replicas;
  lw->group_size = p->group_size;
  if (p->replicas > 1) {
    hap_graph *split = NULL;
    hap_status sst = hap_graph_split_batch(g, p->replicas, &split, err);
    if (sst != HAP_OK) {
      free_builder(&b);
      free(lw);
      return sst;
    }
    lw->local_graph = split;
  }
  lw->priced_graph = lw->exec_graph = lw->local_graph;
  b.micro = p->policy.micro_batches > 1 ? p->policy.micro_batches : 1;
  b.zero3 = p->policy.zero >= 3;
  if (!hap_policy_is_default(&p->policy)) {
    hap_graph *micro = NULL, *priced = NULL;
    hap_status pst = HAP_OK;
    if (b.micro > 1 &&
        (pst = hap_graph_split_batch(lw->local_graph, b.micro, &micro, err)) == HAP_OK)
      lw->priced_graph = lw->exec_graph = micro;
    if (pst == HAP_OK)
      pst =
          hap_graph_cast_float(lw->exec_graph, hap_policy_compute_dtype(&p->policy), &priced, err);
    if (pst == HAP_OK && priced != NULL)
      lw->priced_graph = priced;
    if (pst == HAP_OK)
      pst = hap_recompute_map_build(lw->priced_graph, p->policy.recompute, &b.rmap, err);
    if (pst != HAP_OK) {
      free_builder(&b);
      hap_lowered_destroy(lw);
      return pst;
    }
  }
  lw->priv = calloc(1, sizeof *lw->priv);
  b.state = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *b.state);
  lw->source_step = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *lw->source_step);
  b.lw = lw;
  b.head = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *b.head);
  b.in = malloc(ns * HAP_MAX_OP_INPUTS * sizeof *b.in);
  b.out = malloc(ns * HAP_MAX_OP_OUTPUTS * sizeof *b.out);
  b.fwd = malloc(ns * sizeof *b.fwd);
  b.bwd = malloc(ns * sizeof *b.bwd);
  b.front0 = malloc(ns * sizeof *b.front0);
  b.nfront = malloc(ns * sizeof *b.nfront);
  hap_status st = HAP_OK;
  if (!lw->priv || !lw->source_step || !b.head || !b.in || !b.out || !b.fwd || !b.bwd ||
      !b.front0 || !b.nfront || !b.state) {
    st = oom(&b);
    goto out;
  }
  hap_arena_init(&lw->priv->names);
  hap_shard_cache_init(&lw->priv->lengths, p->ratios, p->n_segments, p->group_size);
  hap_graph_state_tensors(g, b.state);
  for (int32_t t = 0; t < g->n_tensors; t++)
    lw->source_step[t] = b.head[t] = -1;
  memset(b.in, 0xff, ns * HAP_MAX_OP_INPUTS * sizeof *b.in); /* every entry -1 */
  memset(b.out, 0xff, ns * HAP_MAX_OP_OUTPUTS * sizeof *b.out);
  for (size_t i = 0; i < ns; i++)
    b.fwd[i] = b.bwd[i] = -1;
  if ((st = forward_pass(&b)) != HAP_OK || (st = index_uses(&b)) != HAP_OK)
    goto out;
  for (int32_t k = p->n_steps - 1; k >= 0 && st == HAP_OK; k--)
    st = backward_step(&b, k);
  if (st == HAP_OK)
    st = updates(&b);
out:
  free_builder(&b);
  if (st != HAP_OK) {
    hap_lowered_destroy(lw);
    return st;
  }
  *out = lw;
  return HAP_OK;
}

/* ---- per-device work ------------------------------------------------------------------- */

/* Bytes of tensor t of graph `g` (local_graph or priced_graph) held on `dev` under a layout. */
static double held_bytes(hap_lowered *lw, const hap_graph *g, int32_t t, hap_layout l, int32_t seg,
                         int64_t granule, int32_t dev) {
  const hap_tensor *ten = &g->tensors[t];
  double full = (double)hap_tensor_bytes(ten);
  if (l < 0)
    return full;
  int64_t extent = ten->shape.dims[l];
  const int64_t *len = hap_lowered_lengths(lw, extent, granule, seg);
  if (len == NULL || extent == 0)
    return full / lw->group_size;
  return full * (double)len[dev % lw->group_size] / (double)extent;
}

static hap_status bad_task(hap_lowered *lw, int32_t t, int32_t dev, hap_err *err) {
  if (t < 0 || t >= lw->n_tasks || dev < 0 || dev >= lw->n_devices)
    return hap_err_set(err, HAP_EINVAL, "task %d on device %d: out of range (%d tasks, %d devices)",
                       t, dev, lw->n_tasks, lw->n_devices);
  return HAP_OK;
}

/* Priced: a ZeRO-stored parameter's shard is an even split of the flattened tensor (as DeepSpeed
 * partitions it; the synthesizer's zero_bytes), with any policy but the default (whose shard,
 * like the executor's, is dim 0 by the first segment's ratios). */
static bool flat_zero(const hap_lowered *lw, const hap_task *k, bool priced) {
  if (!priced || hap_policy_is_default(&lw->plan->policy) || k->step < 0)
    return false;
  const hap_step *s = &lw->plan->steps[k->step];
  return s->kind == HAP_STEP_SOURCE && s->storage == HAP_STORE_ZERO;
}

/* Priced bytes per byte of a collective: a parameter's gradient reduction (the backward task of
 * its source) moves the gradient's precision, which with grad_accum=fp32 is twice the compute
 * copy's. 1 otherwise. */
static double coll_scale(const hap_lowered *lw, const hap_task *k) {
  const hap_train_policy *pol = &lw->plan->policy;
  if (pol->precision == HAP_PREC_FP32 || pol->grad_accum != HAP_GRAD_FP32 ||
      k->phase != HAP_PHASE_BWD || k->step < 0 || lw->plan->steps[k->step].kind != HAP_STEP_SOURCE)
    return 1;
  return hap_policy_grad_comm_bytes(pol) /
         hap_dtype_size(lw->priced_graph->tensors[k->tensor].dtype);
}

double hap_lowered_elem_bytes(const hap_lowered *lw, int32_t t) {
  if (t < 0 || t >= lw->n_tasks)
    return 0;
  const hap_task *k = &lw->tasks[t];
  if ((k->kind != HAP_TASK_COLLECTIVE && k->kind != HAP_TASK_LOCAL) || k->tensor < 0)
    return 0;
  double size = hap_dtype_size(lw->priced_graph->tensors[k->tensor].dtype);
  return k->kind == HAP_TASK_COLLECTIVE ? size * coll_scale(lw, k) : size;
}

/* Whether task k re-shards one dim between two segments' splits; if so, moved[] (group_size
 * entries) gets what each rank of a group sends or receives of graph g's tensor, the larger,
 * bytes (hap_shard_moved). */
static bool is_reshard(const hap_task *k) {
  return k->kind == HAP_TASK_COLLECTIVE && k->coll == HAP_COLL_ALL_TO_ALL && k->from >= 0 &&
         k->from == k->to && k->from_segment != k->to_segment;
}

static bool reshard_moved(hap_lowered *lw, const hap_graph *g, const hap_task *k, double *moved) {
  if (!is_reshard(k))
    return false;
  const hap_tensor *ten = &g->tensors[k->tensor];
  int64_t extent = ten->shape.dims[k->from];
  const int64_t *a = hap_lowered_lengths(lw, extent, k->granule, k->from_segment);
  const int64_t *b = hap_lowered_lengths(lw, extent, k->granule, k->to_segment);
  int32_t m = lw->group_size;
  int64_t *units = malloc((size_t)m * sizeof *units);
  bool ok = a != NULL && b != NULL && units != NULL && extent > 0;
  if (ok) {
    hap_shard_moved(a, b, m, units);
    double per_unit = (double)hap_tensor_bytes(ten) / (double)extent;
    for (int32_t i = 0; i < m; i++)
      moved[i] = (double)units[i] * per_unit;
  }
  free(units);
  return ok;
}

hap_status hap_lowered_coll_bytes(hap_lowered *lw, int32_t t, double *per_rank, hap_err *err) {
  HAP_TRY(bad_task(lw, t, 0, err));
  const hap_task *k = &lw->tasks[t];
  if (k->kind != HAP_TASK_COLLECTIVE)
    return hap_err_set(err, HAP_EINVAL, "task '%s' is not a collective", k->name);
  if (reshard_moved(lw, lw->priced_graph, k, per_rank)) {
    /* priced as the all-to-all that moves it; per_rank has n_devices >= group_size entries */
    double scale = coll_scale(lw, k) * hap_reshard_spread(lw->group_size);
    for (int32_t d = lw->n_devices - 1; d >= 0; d--)
      per_rank[d] = per_rank[d % lw->group_size] * scale;
    return HAP_OK;
  }
  /* all-gather and all-to-all: what each rank sends; reduce-scatter: what it receives;
   * all-reduce: the whole buffer */
  bool use_to = k->coll == HAP_COLL_REDUCE_SCATTER || k->coll == HAP_COLL_ALL_REDUCE;
  hap_layout l = use_to ? k->to : k->from;
  int32_t seg = use_to ? k->to_segment : k->from_segment;
  double scale = coll_scale(lw, k);
  bool flat = flat_zero(lw, k, true);
  for (int32_t d = 0; d < lw->n_devices; d++) {
    per_rank[d] = flat ? held_bytes(lw, lw->priced_graph, k->tensor, -1, -1, 1, d) / lw->group_size
                       : held_bytes(lw, lw->priced_graph, k->tensor, l, seg, k->granule, d);
    if (scale != 1)
      per_rank[d] *= scale;
  }
  return HAP_OK;
}

int32_t hap_lowered_n_subgroups(const hap_lowered *lw, hap_task_span sp) {
  return sp == HAP_SPAN_GROUP ? lw->replicas : lw->group_size;
}

int32_t hap_lowered_subgroup_size(const hap_lowered *lw, hap_task_span sp) {
  return sp == HAP_SPAN_GROUP ? lw->group_size : lw->replicas;
}

int32_t hap_lowered_subgroup_member(const hap_lowered *lw, hap_task_span sp, int32_t s, int32_t i) {
  return sp == HAP_SPAN_GROUP ? s * lw->group_size + i : i * lw->group_size + s;
}

int32_t hap_lowered_coll_group(const hap_lowered *lw, int32_t t, int32_t d, int32_t *ranks) {
  hap_task_span sp = lw->tasks[t].span;
  int32_t m = hap_lowered_subgroup_size(lw, sp);
  int32_t s = sp == HAP_SPAN_GROUP ? d / lw->group_size : d % lw->group_size;
  for (int32_t i = 0; i < m; i++)
    ranks[i] = hap_lowered_subgroup_member(lw, sp, s, i);
  return m;
}

double hap_lowered_emulated_scale(const hap_lowered *lw, int32_t t) {
  hap_dtype half = hap_policy_compute_dtype(&lw->plan->policy);
  const hap_task *k = &lw->tasks[t];
  if (half == HAP_F32 || k->tensor < 0 || lw->priced_graph->tensors[k->tensor].dtype != half)
    return 1;
  double elem = hap_lowered_elem_bytes(lw, t);
  return elem > 0 && elem < 4 ? 4 / elem : 1;
}

/* Whether device d of cluster c (NULL: hap-run's CPU runner) holds half precision in float32. */
static bool emulates(const hap_lowered *lw, const hap_cluster *c, int32_t d) {
  return c == NULL ||
         hap_device_emulates_dtype(&c->devices[d], hap_policy_compute_dtype(&lw->plan->policy));
}

hap_status hap_lowered_coll_moved_bytes(hap_lowered *lw, const hap_cluster *c, int32_t t,
                                        double *per_rank, hap_err *err) {
  const hap_task *k = &lw->tasks[t];
  HAP_TRY(hap_lowered_coll_bytes(lw, t, per_rank, err));
  double emu = hap_lowered_emulated_scale(lw, t);
  if (emu == 1)
    return HAP_OK;
  int32_t ns = hap_lowered_n_subgroups(lw, k->span), m = hap_lowered_subgroup_size(lw, k->span);
  for (int32_t s = 0; s < ns; s++) {
    bool all_emulate = true;
    for (int32_t i = 0; i < m && all_emulate; i++)
      all_emulate = emulates(lw, c, hap_lowered_subgroup_member(lw, k->span, s, i));
    for (int32_t i = 0; i < m && all_emulate; i++)
      per_rank[hap_lowered_subgroup_member(lw, k->span, s, i)] *= emu;
  }
  return HAP_OK;
}

static hap_status compute_work(hap_lowered *lw, const hap_graph *g, const hap_task *k, int32_t dev,
                               hap_task_work *w, hap_err *err) {
  const hap_step *s = &lw->plan->steps[k->step];
  hap_op_io full;
  hap_graph_node_io(g, k->node, &full);
  w->op = lw->graph->nodes[k->node].op;
  w->backward = k->phase == HAP_PHASE_BWD;
  int64_t extent = k->sfb == HAP_SFB_WEIGHT_GRAD ? 0 : hap_variant_extent(&full, &s->variant);
  if (extent > 0) {
    const int64_t *len = hap_lowered_lengths(lw, extent, s->variant.granule, s->segment);
    if (len == NULL)
      return hap_err_set(err, HAP_ENOMEM, "out of memory computing shard lengths");
    w->len = len[dev % lw->group_size];
  }
  if (w->len >= 0) {
    HAP_TRY(hap_op_local_io(w->op, &full, &s->variant, w->len, &w->attrs, &w->io, err));
  } else {
    w->attrs = *full.attrs;
    w->io = full;
    w->io.attrs = &w->attrs;
  }
  if (k->sfb == HAP_SFB_NO_WEIGHT_GRAD)
    w->io.in_grad[1] = false;
  for (int i = 0; k->sfb == HAP_SFB_WEIGHT_GRAD && i < w->io.n_in; i++)
    w->io.in_grad[i] = i == 1;
  if (w->len == 0)
    return HAP_OK; /* nothing of this op lands on the device */
  hap_op_cost c;
  hap_op_cost_of(w->op, &w->io, &c);
  w->flops = w->backward ? c.bwd_flops : c.fwd_flops;
  w->bytes =
      w->backward ? c.bwd_bytes_read + c.bwd_bytes_written : c.fwd_bytes_read + c.fwd_bytes_written;
  return HAP_OK;
}

/* UPDATE: the optimizer's pass over what the device holds of each parameter. The executor's
 * (priced false) and the default policy's: SGD, w -= lr * g, 2 FLOPs and 3x the bytes held. */
static void update_work(hap_lowered *lw, const hap_task *k, int32_t dev, bool priced,
                        hap_task_work *out) {
  const hap_train_policy *pol = &lw->plan->policy;
  bool sgd = !priced || hap_policy_is_default(pol);
  const hap_graph *g = priced ? lw->priced_graph : lw->exec_graph;
  for (int32_t i = 0; i < k->n_params; i++) {
    int32_t p = lw->params[k->param0 + i];
    const hap_step *s = &lw->plan->steps[lw->source_step[p]];
    double held;
    if (s->storage == HAP_STORE_ZERO && !sgd)
      held = held_bytes(lw, g, p, -1, -1, 1, dev) / lw->group_size; /* flat_zero */
    else if (s->storage == HAP_STORE_ZERO)
      held = held_bytes(lw, g, p, 0, 0, 1, dev);
    else
      held = held_bytes(lw, g, p, s->to, s->segment, s->granule, dev);
    const hap_tensor *ten = &g->tensors[p];
    if (sgd) {
      out->flops += 2 * held / hap_dtype_size(ten->dtype);
      out->bytes += 3 * held;
      continue;
    }
    /* ZeRO >= 1: each of the copies updates its share of the element */
    double copies = (s->storage == HAP_STORE_REPLICATED && s->to < 0 ? lw->group_size : 1) *
                    (double)lw->replicas;
    double elems = held / hap_dtype_size(ten->dtype) / (pol->zero >= 1 ? copies : 1);
    out->flops += hap_policy_update_flops(pol) * elems;
    out->bytes += hap_policy_update_bytes(pol) * elems;
  }
}

static hap_status work(hap_lowered *lw, int32_t t, int32_t dev, bool priced, hap_task_work *out,
                       hap_err *err) {
  HAP_TRY(bad_task(lw, t, dev, err));
  memset(out, 0, sizeof *out);
  out->len = -1;
  const hap_task *k = &lw->tasks[t];
  const hap_graph *g = priced ? lw->priced_graph : lw->exec_graph;
  switch (k->kind) {
  case HAP_TASK_COMPUTE: return compute_work(lw, g, k, dev, out, err);
  case HAP_TASK_LOCAL:
    out->bytes = held_bytes(lw, g, k->tensor, k->to == HAP_LAYOUT_REDUCE ? -1 : k->to,
                            k->to_segment, k->granule, dev);
    return HAP_OK;
  case HAP_TASK_COLLECTIVE: {
    bool use_to = k->coll == HAP_COLL_REDUCE_SCATTER || k->coll == HAP_COLL_ALL_REDUCE;
    bool reshard = false;
    double mine = 0;
    if (is_reshard(k)) { /* the other collectives allocate nothing here */
      double *moved = malloc((size_t)lw->group_size * sizeof *moved);
      if (moved == NULL)
        return hap_err_set(err, HAP_ENOMEM, "out of memory pricing task '%s'", k->name);
      reshard = reshard_moved(lw, g, k, moved);
      mine = reshard ? moved[dev % lw->group_size] : 0;
      free(moved);
    }
    out->bytes = reshard ? mine
                 : flat_zero(lw, k, priced)
                     ? held_bytes(lw, g, k->tensor, -1, -1, 1, dev) / lw->group_size
                     : held_bytes(lw, g, k->tensor, use_to ? k->to : k->from,
                                  use_to ? k->to_segment : k->from_segment, k->granule, dev);
    double scale = priced ? coll_scale(lw, k) : 1;
    if (scale != 1)
      out->bytes *= scale;
    return HAP_OK;
  }
  default: update_work(lw, k, dev, priced, out); return HAP_OK;
  }
}

hap_status hap_lowered_work(hap_lowered *lw, int32_t t, int32_t dev, hap_task_work *out,
                            hap_err *err) {
  return work(lw, t, dev, false, out, err);
}

hap_status hap_lowered_priced_work(hap_lowered *lw, int32_t t, int32_t dev, hap_task_work *out,
                                   hap_err *err) {
  return work(lw, t, dev, true, out, err);
}
