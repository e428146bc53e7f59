/* run.c — the plan runner (run.h): properties as buffers of boxes, tasks dispatched by kind and
 * pass, layout changes as box redistributions over the comm table. */
#include "run/run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/vec.h"
#include "exec/clock.h"
#include "exec/emulate.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/optim.h"
#include "model/policy.h"
#include "plan/replica.h"
#include "run/box.h"
#include "run/init.h"
#include "run/reference.h"

#include "fault.h"
#include "grad_buckets.h"

/* A (tensor, layout) made available, as this rank's buffer. */
typedef struct rprop {
  int32_t tensor;
  hap_layout layout;
  int32_t segment; /* Gather only; -1 otherwise */
  int64_t granule; /* Gather only; 1 otherwise */
  hap_box box;     /* this rank's share, global coordinates */
  size_t elem;     /* bytes per element */
  void *val;       /* box values, row-major */
  float *grad;     /* box gradient (float tensors), allocated on first use */
  bool grad_live;  /* received a contribution this iteration (else it is zero) */
  int32_t next;    /* previous prop of the same tensor, -1 */
  int32_t step;    /* the plan step that makes it, -1 (a ZeRO shard) */
  /* micro-batches: the gradient restarts every micro-batch (the backward task it feeds runs in
   * each one), else it accumulates over the iteration */
  bool grad_per_micro;
  void *micro_vals; /* a source with a batch: every micro-batch's block of values, in order */
  /* recomputation: a dropped tensor's values are overwritten with NaN once the forward pass of the
   * micro-batch is over (stale) and made again by `producer`, the forward task, when read */
  bool dropped, stale;
  int32_t producer;
  /* the copy the optimizer updates (a trainable parameter's ZeRO shard or stored copy) */
  float *master;        /* mixed precision: the float32 master copy; val holds it rounded */
  float *opt_m, *opt_v; /* optimizer state (optim.h), allocated at the first update */
  /* Policy ZeRO stage >= 1 on a replicated parameter (zero_rows): the group's ranks split its rows
   * (dim 0 of the box) evenly; the gradient is reduce-scattered to them, the optimizer updates
   * elements [upd_lo, upd_lo + upd_n) of the box only (master, opt_m and opt_v hold those alone)
   * and the update ends with an all-gather of every rank's rows. Else the whole box. */
  bool zero_rows;
  int64_t upd_lo, upd_n; /* elements */
} rprop;

/* SFB_X, SFB_DY: sufficient-factor broadcasting's gathered input and output gradient (whole
 * tensors), alive from the two gathers to the weight-gradient task that follows them */
enum {
  SCRATCH_SEND,
  SCRATCH_RECV,
  SCRATCH_SUM,
  SCRATCH_PORT,
  SCRATCH_SFB_X,
  SCRATCH_SFB_DY,
  SCRATCH_SLOTS
};

/* Pipeline stages: one micro-batch's values of the props that differ per micro-batch
 * (hap_run.per_slot), with its kernel state. The open slot's buffers are in the props and in
 * hap_run.state / state_stale (owned there); the others are owned here. */
typedef struct run_slot {
  int32_t mb;              /* the micro-batch using it, -1: free */
  void **val;              /* [n_props]: per-slot props' buffers, NULL for the others */
  bool *stale;             /* [n_props] */
  hap_kernel_state *state; /* [steps] */
  bool *state_stale;       /* [steps] */
} run_slot;

struct hap_run {
  hap_lowered *lw;
  const hap_graph *g;      /* shapes this rank runs: one replica's graph for 2-D plans */
  const hap_graph *global; /* the whole graph: initial values */
  const hap_plan *p;
  hap_comm *world;  /* every rank */
  hap_comm *comm;   /* this rank's group: world, or split off it for 2-D plans (owned then) */
  hap_comm *across; /* 2-D plans: the ranks with this index in every group (owned); else NULL */
  hap_run_options o;
  int32_t rank, n;   /* index in the group, group size */
  int32_t replica;   /* this rank's group, 0 for 1-D plans */
  double loss_scale; /* the loss gradient's seed: 1, or 1 / replicas for a batch-mean loss */
  bool *reads_batch; /* [nodes]: not computed from state alone (dropout shifts by replica) */
  rprop *props;
  int32_t n_props, cap_props;
  int32_t *head;           /* [tensors]: latest prop, -1 */
  int32_t *in;             /* [steps][HAP_MAX_OP_INPUTS] props a step reads, -1 */
  int32_t *out;            /* [steps][HAP_MAX_OP_OUTPUTS] props a step makes, -1 */
  int32_t *zero_shard;     /* [tensors]: ZeRO storage prop of a parameter, -1 */
  hap_kernel_state *state; /* [steps]: compute steps' saved state */
  hap_run_kernels k;       /* where compute tasks run */
  double staging_s;        /* this iteration's staging copies, s */
  const char *failed;
  hap_fault fault; /* HAP_FAULT (tests only), NONE normally */
  bool seeded;     /* the loss gradient of this micro-batch is in place */
  /* the training policy (the plan's) */
  hap_train_policy pol;
  hap_dtype half;         /* mixed precision's storage dtype, HAP_F32 without */
  int32_t micro, mb;      /* micro-batches per iteration, the one running */
  double loss_part;       /* this rank's loss values, summed over the micro-batches */
  bool loss_owner;        /* this rank's loss value counts (a Reduce loss, or rank 0) */
  hap_recompute_map rmap; /* recomputation; empty with none */
  bool *state_stale;      /* [steps]: a recomputed node's kernel state is gone */
  int32_t *fwd_task;      /* [steps]: the forward task of a compute step, -1 */
  hap_loss_scaler scaler; /* loss scale S: 1 except fp16 */
  int64_t opt_steps;      /* optimizer steps taken (skipped ones not counted) */
  int64_t skipped_steps;  /* fp16: steps skipped for overflowing gradients */
  int8_t update_state;    /* this iteration: 0 not decided, 1 update, -1 skip (overflow) */
  /* per task, last iteration: its runs, and their time without the recomputation nested in them */
  int32_t *runs;
  double *own_s;      /* s */
  double recompute_s; /* recomputation inside the running task, s */
  int32_t depth;      /* forward_again nesting */
  /* Communication scratch, kept across tasks and iterations: MPI is ~10x slower on a buffer it
   * has not seen (a fresh 1 MiB reduce-scatter: 0.5 ms instead of 0.05 ms here). */
  void *scratch[SCRATCH_SLOTS];
  size_t scratch_bytes[SCRATCH_SLOTS];
  /* initial values: from init_g, tensor t being init_of[t] there (NULL: t; -1: none) */
  const hap_graph *init_g;
  const int32_t *init_of;
  /* a pipeline stage (hap_run_options.stage); NULL otherwise */
  const hap_pipe_lowered_stage *ls;
  bool stage_loss;               /* the loss is the stage loss: seeded with 1, not counted */
  double *iter_start, *iter_end; /* the iteration's task times (may be NULL) */
  bool *per_slot;                /* [n_props] */
  run_slot *slots;
  int32_t n_slots, cur_slot;
  bool open_backward;             /* the open micro-batch's op */
  int32_t world_rank, world_size; /* HAP_FAULT's ranks: the world's (a stage's comm is its group) */
  hap_buckets *buckets; /* overlapped gradient sums (options.overlap_bucket_bytes); NULL */
};

/* ---- the CPU kernel table ------------------------------------------------------------------ */

static hap_status cpu_forward(void *ctx, const hap_kernel_call *c, void *const *out,
                              hap_kernel_state *st, double *kernel_s, double *staging_s,
                              hap_err *err) {
  (void)ctx;
  *kernel_s = -1; /* the host clock times it */
  *staging_s = 0;
  return hap_kernel_forward(c, out, st, err);
}

static hap_status cpu_backward(void *ctx, const hap_kernel_call *c, const float *const *dout,
                               float *const *din, const hap_kernel_state *st, double *kernel_s,
                               double *staging_s, hap_err *err) {
  (void)ctx;
  *kernel_s = -1;
  *staging_s = 0;
  return hap_kernel_backward(c, dout, din, st, err);
}

const hap_run_kernels hap_run_kernels_cpu = {"cpu", NULL, cpu_forward, cpu_backward, true};

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "hap-run: out of memory");
}

/* ---- boxes of layouts ------------------------------------------------------------------- */

/* The box rank i holds of tensor t under (layout, segment, granule). */
static hap_status layout_box(hap_run *r, int32_t t, hap_layout l, int32_t seg, int64_t granule,
                             int32_t i, hap_box *out, hap_err *err) {
  const hap_shape *s = &r->g->tensors[t].shape;
  if (l < 0) {
    *out = hap_box_full(s);
    return HAP_OK;
  }
  const int64_t *len = hap_lowered_lengths(r->lw, s->dims[l], granule, seg);
  if (len == NULL)
    return hap_err_set(err, HAP_EINVAL, "tensor '%s': no shard lengths for segment %d",
                       r->g->tensors[t].name, seg);
  int64_t off = 0;
  for (int32_t k = 0; k < i; k++)
    off += len[k];
  *out = hap_box_slice(s, l, off, len[i]);
  return HAP_OK;
}

static hap_status new_prop(hap_run *r, int32_t t, hap_layout l, int32_t seg, int64_t granule,
                           bool chain, int32_t *id, hap_err *err) {
  if (HAP_VEC_RESERVE(r->props, r->cap_props, (int64_t)r->n_props + 1, 64) != 0)
    return oom(err);
  rprop *p = &r->props[r->n_props];
  memset(p, 0, sizeof *p);
  p->tensor = t;
  p->layout = l;
  p->segment = l >= 0 ? seg : -1;
  p->granule = l >= 0 && granule > 1 ? granule : 1;
  p->next = -1;
  p->step = -1;
  p->producer = -1;
  HAP_TRY(layout_box(r, t, l, seg, granule, r->rank, &p->box, err));
  p->elem = (size_t)hap_dtype_size(r->g->tensors[t].dtype);
  int64_t n = hap_box_numel(&p->box);
  p->val = calloc((size_t)(n > 0 ? n : 1), p->elem);
  if (p->val == NULL)
    return oom(err);
  p->upd_n = n;
  if (chain) {
    p->next = r->head[t];
    r->head[t] = r->n_props;
  }
  *id = r->n_props++;
  return HAP_OK;
}

static int32_t find_prop(const hap_run *r, int32_t t, hap_layout l, int32_t seg, int64_t granule) {
  int32_t want_seg = l >= 0 ? seg : -1;
  int64_t want_gran = l >= 0 && granule > 1 ? granule : 1;
  if (r->props == NULL)
    return -1;
  for (int32_t i = r->head[t]; i >= 0; i = r->props[i].next)
    if (r->props[i].layout == l && r->props[i].granule == want_gran &&
        hap_plan_same_split(r->p, r->props[i].segment, want_seg))
      return i;
  return -1;
}

static bool trainable(const hap_tensor *t) {
  return t->kind == HAP_TENSOR_PARAMETER && t->requires_grad;
}

/* Rank i of the group's rows of a zero_rows prop: elements [*lo, *lo + *n) of its box. */
static void zero_rows_of(const hap_run *r, const rprop *p, int32_t i, int64_t *lo, int64_t *n) {
  int64_t rows = p->box.hi[0] - p->box.lo[0], numel = hap_box_numel(&p->box);
  int64_t row = rows > 0 ? numel / rows : 0;
  int64_t first = (int64_t)i * rows / r->n, end = ((int64_t)i + 1) * rows / r->n;
  *lo = first * row;
  *n = (end - first) * row;
}

/* Policy ZeRO >= 1 on a replicated trainable parameter of a 1-D plan: split its rows (above). */
static void split_zero_rows(hap_run *r, const hap_step *s, rprop *p) {
  if (r->pol.zero < 1 || r->n < 2 || s->storage != HAP_STORE_REPLICATED ||
      s->to != HAP_LAYOUT_IDENTITY || p->box.rank == 0 || !trainable(&r->g->tensors[s->tensor]))
    return;
  p->zero_rows = true;
  zero_rows_of(r, p, r->rank, &p->upd_lo, &p->upd_n);
}

/* The gradient buffer of a prop, zeroed on its first use in an iteration; with `fresh` non-NULL
 * that first use leaves it as it is and sets *fresh instead (the caller's kernel stores the
 * gradient there: hap_kernel_call.fresh_din). */
static float *grad_for(hap_run *r, int32_t id, bool *fresh, hap_err *err) {
  rprop *p = &r->props[id];
  int64_t n = hap_box_numel(&p->box);
  if (fresh != NULL)
    *fresh = false;
  if (p->grad == NULL) {
    p->grad = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (p->grad == NULL) {
      oom(err);
      return NULL;
    }
  } else if (!p->grad_live && fresh != NULL) {
    *fresh = true;
  } else if (!p->grad_live) {
    memset(p->grad, 0, (size_t)n * sizeof(float));
  }
  p->grad_live = true;
  return p->grad;
}

static float *grad_of(hap_run *r, int32_t id, hap_err *err) { return grad_for(r, id, NULL, err); }

/* ---- building --------------------------------------------------------------------------- */

static hap_status need(hap_run *r, int32_t k, int32_t t, hap_layout l, int32_t seg, int64_t gran,
                       int32_t *id, hap_err *err) {
  *id = find_prop(r, t, l, seg, gran);
  if (*id < 0) {
    char buf[4];
    return hap_err_set(err, HAP_EINVAL, "plan steps[%d]: '%s' is not available as %s", k,
                       r->g->tensors[t].name, hap_layout_name(l, buf));
  }
  return HAP_OK;
}

/* A source's initial values, from the whole graph: an input's rows are this replica's block of
 * the batch (with micro-batches, every micro-batch's block, kept in micro_vals). Mixed precision:
 * float values are stored rounded; a trainable parameter keeps its float32 master. */
/* The block of the batch (in rows of the exec graph) that micro-batch mb of this rank's replica
 * holds: replica-major for an ordinary plan; micro-batch-major in a pipeline stage, whose stages
 * must agree on what micro-batch mb is whatever their replicas. */
static int64_t batch_block(const hap_run *r, int32_t mb) {
  if (r->ls != NULL)
    return (int64_t)mb * r->lw->replicas + r->replica;
  return (int64_t)r->replica * r->micro + mb;
}

static hap_status fill_source(hap_run *r, int32_t t, int32_t id, hap_err *err) {
  rprop *p = &r->props[id];
  int32_t wt = r->init_of != NULL ? r->init_of[t] : t;
  if (wt < 0 || r->init_g->tensors[wt].kind == HAP_TENSOR_ACTIVATION)
    return HAP_OK; /* a stage's boundary input or received gradient: it arrives every micro-batch */
  const hap_tensor *whole = &r->init_g->tensors[wt];
  int64_t rows = r->g->tensors[t].shape.dims[0], n = hap_box_numel(&p->box);
  bool batch = p->box.rank > 0 && whole->shape.dims[0] != rows;
  bool is_float = whole->dtype == HAP_F32;
  if (batch && (r->micro > 1 || r->ls != NULL)) {
    size_t bytes = (size_t)n * p->elem;
    p->micro_vals = malloc(bytes * (size_t)r->micro + 1);
    if (p->micro_vals == NULL)
      return oom(err);
    for (int32_t m = 0; m < r->micro; m++) {
      hap_box at = p->box;
      int64_t shift = batch_block(r, m) * rows;
      at.lo[0] += shift;
      at.hi[0] += shift;
      char *dst = (char *)p->micro_vals + bytes * (size_t)m;
      HAP_TRY(hap_init_fill(r->init_g, wt, r->o.seed, &at, dst, err));
      if (is_float)
        hap_round_array(r->half, (float *)dst, n);
    }
    memcpy(p->val, p->micro_vals, bytes);
    return HAP_OK;
  }
  hap_box at = p->box;
  if (batch) {
    int64_t shift = (int64_t)r->replica * rows;
    at.lo[0] += shift;
    at.hi[0] += shift;
  }
  HAP_TRY(hap_init_fill(r->init_g, wt, r->o.seed, &at, p->val, err));
  if (!is_float || r->half == HAP_F32)
    return HAP_OK;
  if (trainable(whole)) { /* the rows this rank updates */
    p->master = malloc((size_t)(p->upd_n > 0 ? p->upd_n : 1) * sizeof *p->master);
    if (p->master == NULL)
      return oom(err);
    memcpy(p->master, (const float *)p->val + p->upd_lo, (size_t)p->upd_n * sizeof *p->master);
  }
  hap_round_array(r->half, p->val, n);
  return HAP_OK;
}

static hap_status build(hap_run *r, hap_err *err) {
  const hap_plan *p = r->p;
  const hap_graph *g = r->g;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    int32_t *in = r->in + (size_t)k * HAP_MAX_OP_INPUTS;
    int32_t *out = r->out + (size_t)k * HAP_MAX_OP_OUTPUTS;
    if (s->kind == HAP_STEP_SOURCE) {
      HAP_TRY(new_prop(r, s->tensor, s->to, s->segment, s->granule, true, &out[0], err));
      int32_t held = out[0]; /* ZeRO: the stored shard; the Identity copy is gathered each time */
      if (s->storage == HAP_STORE_ZERO) {
        HAP_TRY(new_prop(r, s->tensor, 0, 0, 1, false, &held, err));
        r->zero_shard[s->tensor] = held;
      }
      split_zero_rows(r, s, &r->props[held]);
      HAP_TRY(fill_source(r, s->tensor, held, err));
    } else if (s->kind == HAP_STEP_COMPUTE) {
      const hap_node *node = &g->nodes[s->node];
      for (int i = 0; i < node->n_inputs; i++)
        HAP_TRY(need(r, k, node->inputs[i], s->variant.in[i], s->segment, s->variant.granule,
                     &in[i], err));
      for (int o = 0; o < node->n_outputs; o++)
        HAP_TRY(new_prop(r, node->outputs[o], s->variant.out[o], s->segment, s->variant.granule,
                         true, &out[o], err));
    } else {
      HAP_TRY(need(r, k, s->tensor, s->from, s->from_segment, s->granule, &in[0], err));
      HAP_TRY(new_prop(r, s->tensor, s->to, s->segment, s->granule, true, &out[0], err));
    }
    for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++)
      if (out[o] >= 0)
        r->props[out[o]].step = k;
  }
  return HAP_OK;
}

/* The loss's scale: a batch mean is R x k times the mean of each replica's micro-batch. */
static hap_status scale_loss(hap_run *r, hap_err *err) {
  bool mean = false;
  HAP_TRY(hap_graph_batch_mean(r->global, &mean, err));
  r->loss_scale = mean ? 1.0 / ((double)r->lw->replicas * r->micro) : 1;
  return HAP_OK;
}

/* 2-D plans: the group's communicator and the one across groups (collective over every rank). */
static hap_status split_groups(hap_run *r, hap_err *err) {
  hap_comm *w = r->world;
  hap_comm *group = NULL;
  HAP_TRY(w->ops->split(w, r->replica, w->rank, &group, err));
  r->comm = group;
  return w->ops->split(w, r->rank, w->rank, &r->across, err);
}

/* Whether task k sums a parameter's gradient with an all-reduce (over the group or the replicas).
 */
static bool grad_all_reduce(const hap_run *r, const hap_task *k) {
  if (k->kind != HAP_TASK_COLLECTIVE || k->phase == HAP_PHASE_FWD)
    return false;
  return k->span == HAP_SPAN_REPLICAS ||
         (r->p->steps[k->step].kind == HAP_STEP_SOURCE && k->coll == HAP_COLL_ALL_REDUCE);
}

/* The parameter whose gradient task k synchronises, as HAP_FAULT skip-all-reduce sees it: a
 * gradient all-reduce's, or the weight of an sfb output-gradient gather; -1 for other tasks. */
static int32_t synced_param(const hap_run *r, const hap_task *k) {
  if (k->sfb == HAP_SFB_GATHER_DY)
    return r->g->nodes[r->p->steps[k->step].node].inputs[1];
  return grad_all_reduce(r, k) ? r->p->steps[k->step].tensor : -1;
}

/* HAP_FAULT (fault.h), with its default tensor. */
static hap_status pick_fault(hap_run *r, hap_err *err) {
  hap_fault *f = &r->fault;
  if (r->ls != NULL && r->ls->sg != NULL) { /* names of the whole graph, ranks of the world */
    HAP_TRY(hap_fault_parse(getenv("HAP_FAULT"), r->init_g, r->world_size, f, err));
    if (f->tensor >= 0 && (f->tensor = r->ls->sg->stage_of[f->tensor]) < 0)
      f->kind = HAP_FAULT_NONE; /* a tensor of another stage */
  } else {
    HAP_TRY(hap_fault_parse(getenv("HAP_FAULT"), r->global, r->world_size, f, err));
  }
  if (f->kind == HAP_FAULT_SKIP_RECOMPUTE && r->pol.recompute == HAP_RECOMPUTE_NONE)
    return hap_err_set(err, HAP_EINVAL, "HAP_FAULT: skip-recompute: the plan recomputes nothing");
  if (f->kind == HAP_FAULT_SKIP_TIED_SUM && r->ls == NULL)
    return hap_err_set(
        err, HAP_EINVAL,
        "HAP_FAULT: skip-tied-sum: the plan is not pipelined (no stages to sum over)");
  if (f->kind == HAP_FAULT_NONE || f->kind == HAP_FAULT_NAN_LOSS ||
      f->kind == HAP_FAULT_SKIP_RECOMPUTE || f->kind == HAP_FAULT_SKIP_TIED_SUM)
    return HAP_OK;
  bool skip = f->kind == HAP_FAULT_SKIP_ALL_REDUCE;
  for (int32_t t = 0; t < r->lw->n_tasks && skip; t++) {
    int32_t tensor = synced_param(r, &r->lw->tasks[t]);
    if (tensor >= 0 && (f->tensor < 0 || f->tensor == tensor)) {
      f->tensor = tensor;
      return HAP_OK;
    }
  }
  if (skip)
    return hap_err_set(err, HAP_EINVAL, "HAP_FAULT: the plan all-reduces no gradient%s%s%s",
                       f->tensor >= 0 ? " of '" : "",
                       f->tensor >= 0 ? r->global->tensors[f->tensor].name : "",
                       f->tensor >= 0 ? "'" : "");
  for (int32_t t = 0; t < r->global->n_tensors && f->tensor < 0; t++)
    if (r->global->tensors[t].kind == HAP_TENSOR_PARAMETER && r->global->tensors[t].requires_grad)
      f->tensor = t;
  return HAP_OK;
}

/* The policy's bookkeeping, once the props exist: which gradients restart every micro-batch, which
 * forward task makes each prop, what recomputation drops. */
static hap_status plan_policy(hap_run *r, hap_err *err) {
  const hap_lowered *lw = r->lw;
  size_t ns = (size_t)(r->p->n_steps > 0 ? r->p->n_steps : 1);
  bool *bwd_per_micro = calloc(ns, sizeof *bwd_per_micro);
  r->state_stale = calloc(ns, sizeof *r->state_stale);
  r->fwd_task = malloc(ns * sizeof *r->fwd_task);
  size_t ntasks = (size_t)(lw->n_tasks > 0 ? lw->n_tasks : 1);
  r->runs = calloc(ntasks, sizeof *r->runs);
  r->own_s = calloc(ntasks, sizeof *r->own_s);
  if (!bwd_per_micro || !r->state_stale || !r->fwd_task || !r->runs || !r->own_s) {
    free(bwd_per_micro);
    return oom(err);
  }
  memset(r->fwd_task, 0xff, ns * sizeof *r->fwd_task);
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    const hap_task *k = &lw->tasks[t];
    if (k->step < 0)
      continue;
    bool every_micro = r->ls != NULL ? r->ls->part[t] == HAP_PIPE_PART_BWD : k->repeats > 1;
    if (k->phase == HAP_PHASE_BWD && every_micro)
      bwd_per_micro[k->step] = true;
    if (k->phase != HAP_PHASE_FWD)
      continue;
    const int32_t *out = r->out + (size_t)k->step * HAP_MAX_OP_OUTPUTS;
    if (k->kind == HAP_TASK_COMPUTE)
      r->fwd_task[k->step] = t;
    for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++)
      if (out[o] >= 0)
        r->props[out[o]].producer = t;
  }
  for (int32_t i = 0; i < r->n_props; i++)
    r->props[i].grad_per_micro = r->props[i].step >= 0 && bwd_per_micro[r->props[i].step];
  free(bwd_per_micro);
  if (r->pol.recompute == HAP_RECOMPUTE_NONE)
    return HAP_OK;
  HAP_TRY(hap_recompute_map_build(r->g, r->pol.recompute, &r->rmap, err));
  for (int32_t i = 0; i < r->n_props; i++) {
    rprop *p = &r->props[i];
    p->dropped = r->rmap.dropped[p->tensor] && p->step >= 0 && p->producer >= 0 &&
                 r->p->steps[p->step].kind != HAP_STEP_SOURCE;
  }
  return HAP_OK;
}

/* ---- pipeline stages: micro-batch slots ------------------------------------------------------ */

static void free_slot_arrays(run_slot *s) {
  free(s->val);
  free(s->stale);
  s->val = NULL;
  s->stale = NULL;
}

/* A slot that is not open: its buffers and kernel state. */
static void free_slot(hap_run *r, run_slot *s) {
  for (int32_t i = 0; i < r->n_props && s->val != NULL; i++)
    if (r->per_slot[i])
      free(s->val[i]);
  for (int32_t k = 0; k < r->p->n_steps && s->state != NULL; k++)
    hap_kernel_state_free(&s->state[k]);
  free(s->state);
  free(s->state_stale);
  free_slot_arrays(s);
}

/* Which props hold one micro-batch's values: all but the parameters' and buffers' stored copies
 * (and ZeRO shards), which every micro-batch shares. */
static bool differs_per_micro(const hap_run *r, const rprop *p) {
  if (p->step < 0)
    return false;
  hap_tensor_kind kind = r->g->tensors[p->tensor].kind;
  return r->p->steps[p->step].kind != HAP_STEP_SOURCE ||
         (kind != HAP_TENSOR_PARAMETER && kind != HAP_TENSOR_BUFFER);
}

static hap_status grow_slots(hap_run *r, hap_err *err) {
  run_slot *grown = realloc(r->slots, (size_t)(r->n_slots + 1) * sizeof *grown);
  if (grown == NULL)
    return oom(err);
  r->slots = grown;
  run_slot *s = &r->slots[r->n_slots];
  memset(s, 0, sizeof *s);
  s->mb = -1;
  size_t np = (size_t)(r->n_props > 0 ? r->n_props : 1);
  s->val = calloc(np, sizeof *s->val);
  s->stale = calloc(np, sizeof *s->stale);
  r->n_slots++; /* from here on destroy frees what is there */
  if (s->val == NULL || s->stale == NULL)
    return oom(err);
  return HAP_OK;
}

/* Slot 0: the buffers the props were built with. */
static hap_status first_slot(hap_run *r, hap_err *err) {
  r->per_slot = calloc((size_t)(r->n_props > 0 ? r->n_props : 1), sizeof *r->per_slot);
  if (r->per_slot == NULL)
    return oom(err);
  HAP_TRY(grow_slots(r, err));
  run_slot *s = &r->slots[0];
  for (int32_t i = 0; i < r->n_props; i++) {
    r->per_slot[i] = differs_per_micro(r, &r->props[i]);
    s->val[i] = r->per_slot[i] ? r->props[i].val : NULL;
    /* a boundary input's gradient (no backward task of its own) is sent every micro-batch */
    r->props[i].grad_per_micro = r->props[i].grad_per_micro || r->per_slot[i];
  }
  s->state = r->state;
  s->state_stale = r->state_stale;
  r->cur_slot = 0;
  return HAP_OK;
}

/* A further slot: fresh buffers for the per-slot props. */
static hap_status new_slot(hap_run *r, int32_t *out, hap_err *err) {
  HAP_TRY(grow_slots(r, err));
  run_slot *s = &r->slots[r->n_slots - 1];
  size_t ns = (size_t)(r->p->n_steps > 0 ? r->p->n_steps : 1);
  if ((s->state = calloc(ns, sizeof *s->state)) == NULL ||
      (s->state_stale = calloc(ns, sizeof *s->state_stale)) == NULL)
    return oom(err);
  for (int32_t i = 0; i < r->n_props; i++) {
    if (!r->per_slot[i])
      continue;
    int64_t n = hap_box_numel(&r->props[i].box);
    if ((s->val[i] = calloc((size_t)(n > 0 ? n : 1), r->props[i].elem)) == NULL)
      return oom(err);
  }
  *out = r->n_slots - 1;
  return HAP_OK;
}

/* Make slot `to` the open one: the props' buffers and the kernel state are its. */
static void switch_slot(hap_run *r, int32_t to) {
  if (to == r->cur_slot)
    return;
  run_slot *from = &r->slots[r->cur_slot], *s = &r->slots[to];
  for (int32_t i = 0; i < r->n_props; i++) {
    if (!r->per_slot[i])
      continue;
    from->stale[i] = r->props[i].stale;
    r->props[i].val = s->val[i];
    r->props[i].stale = s->stale[i];
  }
  r->state = s->state;
  r->state_stale = s->state_stale;
  r->cur_slot = to;
}

bool hap_run_fault(const hap_run *r, char *buf, size_t size) {
  const hap_fault *f = &r->fault;
  if (f->kind == HAP_FAULT_NONE)
    return false;
  char rank[32] = "every rank";
  if (f->rank >= 0)
    snprintf(rank, sizeof rank, "rank %d", (int)f->rank);
  if (f->kind == HAP_FAULT_SKIP_RECOMPUTE) {
    snprintf(buf, size, "%s on %s", hap_fault_kind_name(f->kind), rank);
    return true;
  }
  snprintf(buf, size, "%s of '%s' on %s", hap_fault_kind_name(f->kind),
           f->tensor >= 0 ? r->global->tensors[f->tensor].name
                          : r->global->tensors[r->global->loss].name,
           rank);
  return true;
}

hap_status hap_run_create(hap_lowered *lw, const hap_graph *g, hap_comm *comm,
                          const hap_run_options *o, hap_run **out, hap_err *err) {
  *out = NULL;
  if (comm->size != lw->n_devices)
    return hap_err_set(err, HAP_EINVAL,
                       "hap-run: the plan is for %d devices but %d ranks are running (start it "
                       "with mpirun -np %d)",
                       lw->n_devices, comm->size, lw->n_devices);
  for (int32_t t = 0; t < g->n_tensors; t++)
    if (hap_dtype_is_float(g->tensors[t].dtype) && g->tensors[t].dtype != HAP_F32)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "hap-run: tensor '%s' is %s; the %s backend runs float32 only",
                         g->tensors[t].name, hap_dtype_name(g->tensors[t].dtype),
                         o->kernels != NULL ? o->kernels->name : hap_run_kernels_cpu.name);
  if (lw->plan->policy.zero >= 1 && (lw->replicas > 1 || o->stage != NULL))
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "hap-run: policy zero=%d: hap-run shards optimizer state on plans of one "
                       "data-parallel group only so far; this plan %s",
                       (int)lw->plan->policy.zero,
                       o->stage != NULL ? "is pipelined" : "has replicas (a 2-D plan)");
  hap_run *r = calloc(1, sizeof *r);
  if (r == NULL)
    return oom(err);
  r->lw = lw;
  r->g = lw->exec_graph;
  r->global = g;
  r->p = lw->plan;
  r->world = r->comm = comm;
  r->o = *o;
  r->k = o->kernels != NULL ? *o->kernels : hap_run_kernels_cpu;
  if (!(r->o.speed > 0 && r->o.speed <= 1))
    r->o.speed = 1;
  r->rank = comm->rank % lw->group_size;
  r->n = lw->group_size;
  r->replica = comm->rank / lw->group_size;
  r->pol = lw->plan->policy;
  r->half = hap_policy_compute_dtype(&r->pol);
  r->micro = r->pol.micro_batches > 1 ? r->pol.micro_batches : 1;
  r->init_g = g;
  r->world_rank = comm->rank;
  r->world_size = comm->size;
  if (o->stage != NULL) {
    r->world_rank = o->stage->world_rank;
    r->world_size = o->stage->world_size;
    const hap_pipe_lowered_stage *ls = o->stage->lowered;
    r->ls = ls;
    r->o.stage = NULL; /* not kept: the caller's struct */
    r->init_g = o->stage->whole;
    r->init_of = ls->sg != NULL ? ls->sg->whole_of : NULL;
    r->stage_loss = ls->sg != NULL && !ls->sg->has_loss;
    r->micro = o->stage->micro_batches > 1 ? o->stage->micro_batches : 1;
  }
  r->scaler = hap_loss_scaler_start(r->pol.precision);
  r->loss_scale = 1;
  size_t ns = (size_t)(r->p->n_steps > 0 ? r->p->n_steps : 1);
  size_t nt = (size_t)(g->n_tensors > 0 ? g->n_tensors : 1);
  r->head = malloc(nt * sizeof *r->head);
  r->zero_shard = malloc(nt * sizeof *r->zero_shard);
  r->in = malloc(ns * HAP_MAX_OP_INPUTS * sizeof *r->in);
  r->out = malloc(ns * HAP_MAX_OP_OUTPUTS * sizeof *r->out);
  r->state = calloc(ns, sizeof *r->state);
  r->reads_batch = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *r->reads_batch);
  bool *state = calloc(nt, sizeof *state);
  hap_status st = HAP_OK;
  if (!r->head || !r->zero_shard || !r->in || !r->out || !r->state || !r->reads_batch || !state) {
    free(state);
    st = oom(err);
    goto fail;
  }
  hap_graph_state_tensors(g, state);
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int i = 0; i < g->nodes[k].n_inputs; i++)
      r->reads_batch[k] = r->reads_batch[k] || !state[g->nodes[k].inputs[i]];
  free(state);
  if ((lw->replicas > 1 || r->micro > 1) && (st = scale_loss(r, err)) != HAP_OK)
    goto fail;
  if (lw->replicas > 1 && (st = split_groups(r, err)) != HAP_OK)
    goto fail;
  memset(r->head, 0xff, nt * sizeof *r->head); /* -1 */
  memset(r->zero_shard, 0xff, nt * sizeof *r->zero_shard);
  memset(r->in, 0xff, ns * HAP_MAX_OP_INPUTS * sizeof *r->in);
  memset(r->out, 0xff, ns * HAP_MAX_OP_OUTPUTS * sizeof *r->out);
  if ((st = build(r, err)) != HAP_OK || (st = plan_policy(r, err)) != HAP_OK ||
      (st = pick_fault(r, err)) != HAP_OK || (r->ls != NULL && (st = first_slot(r, err)) != HAP_OK))
    goto fail;
  if (o->overlap_bucket_bytes > 0 && r->micro == 1 && r->half == HAP_F32 && r->ls == NULL &&
      lw->replicas <= 1 &&
      (st = hap_buckets_create(r->comm, o->overlap_bucket_bytes, &r->buckets, err)) != HAP_OK)
    goto fail;
  *out = r;
  return HAP_OK;
fail:
  hap_run_destroy(r);
  return st;
}

void hap_run_destroy(hap_run *r) {
  if (r == NULL)
    return;
  for (int32_t s = 0; s < r->n_slots; s++)
    if (s != r->cur_slot) /* the open slot's buffers are the props' */
      free_slot(r, &r->slots[s]);
    else
      free_slot_arrays(&r->slots[s]);
  free(r->slots);
  free(r->per_slot);
  hap_buckets_destroy(r->buckets);
  if (r->comm != r->world)
    hap_comm_destroy(r->comm);
  hap_comm_destroy(r->across);
  free(r->reads_batch);
  for (int32_t i = 0; i < r->n_props; i++) {
    free(r->props[i].val);
    free(r->props[i].grad);
    free(r->props[i].micro_vals);
    free(r->props[i].master);
    free(r->props[i].opt_m);
    free(r->props[i].opt_v);
  }
  hap_recompute_map_free(&r->rmap);
  free(r->state_stale);
  free(r->fwd_task);
  free(r->runs);
  free(r->own_s);
  if (r->state != NULL)
    for (int32_t k = 0; k < r->p->n_steps; k++)
      hap_kernel_state_free(&r->state[k]);
  for (int i = 0; i < SCRATCH_SLOTS; i++)
    free(r->scratch[i]);
  free(r->props);
  free(r->head);
  free(r->zero_shard);
  free(r->in);
  free(r->out);
  free(r->state);
  free(r);
}

const char *hap_run_failed_task(const hap_run *r) { return r->failed; }

double hap_run_staging_s(const hap_run *r) { return r->staging_s; }

/* ---- data movement ---------------------------------------------------------------------- */

/* Scratch buffer `slot` with room for `bytes` (at least 1; contents undefined), or NULL. */
static void *scratch(hap_run *r, int slot, int64_t bytes, hap_err *err) {
  size_t want = bytes > 0 ? (size_t)bytes : 1;
  if (r->scratch_bytes[slot] < want) {
    free(r->scratch[slot]);
    r->scratch[slot] = malloc(want);
    r->scratch_bytes[slot] = r->scratch[slot] != NULL ? want : 0;
    if (r->scratch[slot] == NULL) {
      oom(err);
      return NULL;
    }
  }
  return r->scratch[slot];
}

/* dst (n floats) = src, or += src. */
static void put(float *dst, const float *src, int64_t n, bool add) {
  if (add) {
    for (int64_t i = 0; i < n; i++)
      dst[i] += src[i];
  } else {
    memcpy(dst, src, (size_t)n * sizeof *dst);
  }
}

/* Box every rank holds under (layout, seg, gran) of tensor t, into boxes[n]. */
static hap_status boxes_of(hap_run *r, int32_t t, hap_layout l, int32_t seg, int64_t gran,
                           hap_box *boxes, hap_err *err) {
  for (int32_t i = 0; i < r->n; i++)
    HAP_TRY(layout_box(r, t, l, seg, gran, i, &boxes[i], err));
  return HAP_OK;
}

/* Redistribute between two partitions of a tensor (no reduction): rank i holds src_boxes[i] in
 * `src` and receives dst_boxes[rank] into `dst` (elem bytes per element), with an all-to-all(v)
 * or, when every rank receives the whole tensor, an all-gather(v). `add`: accumulate floats. */
static hap_status redistribute(hap_run *r, const void *src, const hap_box *src_boxes, void *dst,
                               const hap_box *dst_boxes, size_t elem, bool add, hap_err *err) {
  int32_t n = r->n, me = r->rank;
  const hap_box *mine_src = &src_boxes[me], *mine_dst = &dst_boxes[me];
  int64_t *sb = calloc((size_t)n * 4, sizeof *sb);
  if (sb == NULL)
    return oom(err);
  int64_t *sd = sb + n, *rb = sb + 2 * (size_t)n, *rd = sb + 3 * (size_t)n;
  int64_t send_total = 0, recv_total = 0;
  for (int32_t i = 0; i < n; i++) {
    hap_box x;
    sb[i] = hap_box_intersect(mine_src, &dst_boxes[i], &x) ? hap_box_numel(&x) * (int64_t)elem : 0;
    sd[i] = send_total;
    send_total += sb[i];
    rb[i] = hap_box_intersect(&src_boxes[i], mine_dst, &x) ? hap_box_numel(&x) * (int64_t)elem : 0;
    rd[i] = recv_total;
    recv_total += rb[i];
  }
  char *sendbuf = scratch(r, SCRATCH_SEND, send_total, err);
  char *recvbuf = scratch(r, SCRATCH_RECV, recv_total, err);
  int64_t tmp_bytes = hap_box_numel(mine_dst) * (int64_t)elem;
  void *tmp = add ? scratch(r, SCRATCH_SUM, tmp_bytes, err) : NULL;
  hap_status st = HAP_OK;
  if (!sendbuf || !recvbuf || (add && !tmp)) {
    st = HAP_ENOMEM;
    goto out;
  }
  if (add && tmp_bytes > 0)
    memset(tmp, 0, (size_t)tmp_bytes);
  for (int32_t i = 0; i < n; i++) {
    hap_box x;
    if (sb[i] > 0 && hap_box_intersect(mine_src, &dst_boxes[i], &x))
      hap_box_pack(&x, src, mine_src, sendbuf + sd[i], elem);
  }
  st = r->comm->ops->all_to_allv(r->comm, sendbuf, sb, sd, recvbuf, rb, rd, err);
  if (st != HAP_OK)
    goto out;
  void *target = add ? tmp : dst;
  for (int32_t i = 0; i < n; i++) {
    hap_box x;
    if (rb[i] > 0 && hap_box_intersect(&src_boxes[i], mine_dst, &x))
      hap_box_unpack(&x, recvbuf + rd[i], target, mine_dst, elem);
  }
  if (add)
    put(dst, tmp, hap_box_numel(mine_dst), true);
out:
  free(sb);
  return st;
}

/* Sum full-shaped partial sums (src, the whole tensor on every rank) and give rank i the
 * dst_boxes[i] part: a reduce-scatter(v). */
static hap_status reduce_to_boxes(hap_run *r, const float *src, const hap_shape *shape,
                                  const hap_box *dst_boxes, float *dst, bool add, hap_err *err) {
  int32_t n = r->n;
  hap_box full = hap_box_full(shape);
  int64_t total = hap_box_numel(&full);
  int64_t *counts = malloc((size_t)n * sizeof *counts);
  int64_t mine = hap_box_numel(&dst_boxes[r->rank]);
  float *packed = scratch(r, SCRATCH_SEND, total * (int64_t)sizeof(float), err);
  float *recv = scratch(r, SCRATCH_RECV, mine * (int64_t)sizeof(float), err);
  hap_status st = HAP_OK;
  if (!counts || !packed || !recv) {
    st = counts ? HAP_ENOMEM : oom(err);
    goto out;
  }
  int64_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    counts[i] = hap_box_numel(&dst_boxes[i]);
    if (counts[i] > 0)
      hap_box_pack(&dst_boxes[i], src, &full, packed + off, sizeof(float));
    off += counts[i];
  }
  st = r->comm->ops->reduce_scatterv(r->comm, packed, recv, counts, HAP_F32, HAP_REDUCE_SUM, err);
  if (st == HAP_OK)
    put(dst, recv, mine, add);
out:
  free(counts);
  return st;
}

static hap_status sum_all(hap_run *r, const float *src, float *dst, int64_t count, bool add,
                          hap_err *err) {
  if (!add) /* straight into dst (in place when src == dst): no scratch buffer to fault in */
    return r->comm->ops->all_reduce(r->comm, src, dst, count, HAP_F32, HAP_REDUCE_SUM, err);
  float *tmp = scratch(r, SCRATCH_RECV, count * (int64_t)sizeof(float), err);
  if (tmp == NULL)
    return HAP_ENOMEM;
  hap_status st = r->comm->ops->all_reduce(r->comm, src, tmp, count, HAP_F32, HAP_REDUCE_SUM, err);
  if (st == HAP_OK)
    put(dst, tmp, count, add);
  return st;
}

/* ZeRO (zero_rows): every rank's count and offset of prop id's rows, times `elem` bytes. */
static int64_t *rows_table(hap_run *r, const rprop *p, int64_t elem, hap_err *err) {
  int64_t *t = malloc((size_t)r->n * 2 * sizeof *t);
  if (t == NULL) {
    oom(err);
    return NULL;
  }
  for (int32_t i = 0; i < r->n; i++) {
    zero_rows_of(r, p, i, &t[r->n + i], &t[i]);
    t[i] *= elem;
    t[r->n + i] *= elem;
  }
  return t;
}

/* ZeRO: the group's sum of prop id's gradient, on this rank's rows only (a reduce-scatter in place
 * of the all-reduce; the other rows keep this rank's own partial sums, unused). */
static hap_status reduce_rows(hap_run *r, int32_t id, hap_err *err) {
  rprop *p = &r->props[id];
  int64_t *counts = rows_table(r, p, 1, err);
  float *mine = counts ? scratch(r, SCRATCH_RECV, p->upd_n * (int64_t)sizeof(float), err) : NULL;
  hap_status st = mine == NULL ? HAP_ENOMEM
                               : r->comm->ops->reduce_scatterv(r->comm, p->grad, mine, counts,
                                                               HAP_F32, HAP_REDUCE_SUM, err);
  if (st == HAP_OK)
    memcpy(p->grad + p->upd_lo, mine, (size_t)p->upd_n * sizeof(float));
  free(counts);
  return st;
}

/* ZeRO: every rank's rows of prop id from `from` (this rank's rows of a box-shaped buffer of
 * float32) into the whole box `to` (an all-gather). */
static hap_status gather_rows(hap_run *r, int32_t id, const float *from, float *to, hap_err *err) {
  rprop *p = &r->props[id];
  int64_t bytes = p->upd_n * (int64_t)sizeof(float);
  int64_t *table = rows_table(r, p, (int64_t)sizeof(float), err);
  void *mine = table ? scratch(r, SCRATCH_SEND, bytes, err) : NULL;
  hap_status st = HAP_ENOMEM;
  if (mine != NULL) {
    memcpy(mine, from + p->upd_lo, (size_t)bytes);
    st = r->comm->ops->all_gatherv(r->comm, mine, bytes, to, table, table + r->n, err);
  }
  free(table);
  return st;
}

/* Move values (fwd) or gradients (bwd) of tensor t from layout a to layout b with the
 * collective `kind`: src holds a's box, dst b's. */
static hap_status collective(hap_run *r, hap_coll_kind kind, int32_t t, hap_layout a, int32_t aseg,
                             hap_layout b, int32_t bseg, int64_t gran, const void *src, void *dst,
                             size_t elem, bool add, hap_err *err) {
  const hap_shape *shape = &r->g->tensors[t].shape;
  hap_box *boxes = malloc((size_t)r->n * 2 * sizeof *boxes);
  if (boxes == NULL)
    return oom(err);
  hap_box *abox = boxes, *bbox = boxes + r->n;
  hap_status st = boxes_of(r, t, a, aseg, gran, abox, err);
  if (st == HAP_OK)
    st = boxes_of(r, t, b, bseg, gran, bbox, err);
  if (st == HAP_OK) {
    switch (kind) {
    case HAP_COLL_ALL_REDUCE:
      st = sum_all(r, src, dst, hap_box_numel(&bbox[r->rank]), add, err);
      break;
    case HAP_COLL_REDUCE_SCATTER: st = reduce_to_boxes(r, src, shape, bbox, dst, add, err); break;
    default: /* all-gather, all-to-all: a partition to another partition (or to the whole) */
      st = redistribute(r, src, abox, dst, bbox, elem, add, err);
      break;
    }
  }
  free(boxes);
  return st;
}

/* ---- tasks ------------------------------------------------------------------------------ */

static void pad_wait(double seconds) {
  if (seconds > 0)
    hap_clock_wait_until(hap_clock_s() + seconds);
}

/* A compute task through the kernel table; *kernel_s: the device's time of it (< 0: none). */
static hap_status compute(hap_run *r, const hap_task *k, int32_t t, bool backward, double *kernel_s,
                          hap_err *err) {
  const hap_step *s = &r->p->steps[k->step];
  const hap_node *node = &r->g->nodes[k->node];
  hap_task_work *w = malloc(sizeof *w);
  if (w == NULL)
    return oom(err);
  hap_status st = hap_lowered_work(r->lw, t, r->rank, w, err);
  hap_op_io full;
  hap_graph_node_io(r->g, k->node, &full);
  hap_kernel_shard shard = {&full, &s->variant, r->rank, 0};
  int64_t extent = hap_variant_extent(&full, &s->variant);
  if (st == HAP_OK && extent > 0) {
    const int64_t *len = hap_lowered_lengths(r->lw, extent, s->variant.granule, s->segment);
    if (len == NULL)
      st = oom(err);
    for (int32_t i = 0; len != NULL && i < r->rank; i++)
      shard.offset += len[i];
  }
  const void *ins[HAP_MAX_OP_INPUTS] = {0};
  const void *outs_c[HAP_MAX_OP_OUTPUTS] = {0};
  void *outs[HAP_MAX_OP_OUTPUTS] = {0};
  const int32_t *in = r->in + (size_t)k->step * HAP_MAX_OP_INPUTS;
  const int32_t *out = r->out + (size_t)k->step * HAP_MAX_OP_OUTPUTS;
  for (int i = 0; i < node->n_inputs; i++)
    ins[i] = r->props[in[i]].val;
  for (int o = 0; o < node->n_outputs; o++)
    outs_c[o] = outs[o] = r->props[out[o]].val;
  /* always the shard, even without a Gather (extent 0): a partial-sum passthrough's BIAS_ONCE
   * (an Identity addend applied by rank 0 only) lives in the variant the shard carries */
  hap_kernel_call call = {node->op,
                          &w->io,
                          &shard,
                          hap_run_node_seed(r->o.seed, node->name),
                          ins,
                          outs_c,
                          r->reads_batch[k->node] ? (int32_t)batch_block(r, r->mb) : 0};
  double t0 = hap_clock_s(), staging = 0;
  *kernel_s = -1;
  if (st == HAP_OK && !backward) {
    hap_kernel_state_free(&r->state[k->step]);
    st = r->k.forward(r->k.ctx, &call, outs, &r->state[k->step], kernel_s, &staging, err);
  } else if (st == HAP_OK) {
    const float *dout[HAP_MAX_OP_OUTPUTS] = {0};
    float *din[HAP_MAX_OP_INPUTS] = {0};
    for (int o = 0; o < node->n_outputs; o++)
      dout[o] = r->props[out[o]].grad_live ? r->props[out[o]].grad : NULL;
    for (int i = 0; i < node->n_inputs && st == HAP_OK; i++) {
      bool fresh = false;
      if (!w->io.in_grad[i])
        continue;
      din[i] = grad_for(r, in[i], r->k.fresh_din ? &fresh : NULL, err);
      if (din[i] == NULL)
        st = HAP_ENOMEM;
      call.fresh_din |= fresh ? 1u << i : 0u;
    }
    if (st == HAP_OK)
      st = r->k.backward(r->k.ctx, &call, dout, din, &r->state[k->step], kernel_s, &staging, err);
  }
  r->staging_s += staging;
  if (st == HAP_OK && r->o.speed < 1 && *kernel_s < 0)
    pad_wait(hap_emulate_pad_s(hap_clock_s() - t0, r->o.speed));
  free(w);
  return st;
}

/* Layout changes without communication, forward (values) or backward (gradients). */
static hap_status local(hap_run *r, const hap_task *k, hap_err *err) {
  const int32_t from = r->in[(size_t)k->step * HAP_MAX_OP_INPUTS];
  const int32_t to = r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS];
  rprop *a = &r->props[from], *b = &r->props[to];
  if (k->phase == HAP_PHASE_FWD) {
    if (k->local == HAP_LOCAL_SLICE || k->local == HAP_LOCAL_COPY)
      hap_box_copy(&b->box, a->val, &a->box, b->val, &b->box, a->elem);
    else if (r->rank == 0) /* keep_once */
      memcpy(b->val, a->val, (size_t)hap_box_numel(&a->box) * a->elem);
    else
      memset(b->val, 0, (size_t)hap_box_numel(&b->box) * b->elem);
    return HAP_OK;
  }
  /* every rank marks the earlier layout's gradient live (zero where nothing arrives): no rank's
   * later choices may depend on what reached it */
  float *ga = grad_of(r, from, err);
  if (ga == NULL)
    return HAP_ENOMEM;
  if (!b->grad_live)
    return HAP_OK; /* no gradient reached the later layout */
  if (k->local == HAP_LOCAL_KEEP_ONCE && r->rank != 0)
    return HAP_OK;
  if (k->local == HAP_LOCAL_PAD) { /* the slice's gradient into the whole, zeros elsewhere */
    int64_t nb = hap_box_numel(&b->box);
    float *tmp = calloc((size_t)hap_box_numel(&a->box) + 1, sizeof *tmp);
    if (tmp == NULL)
      return oom(err);
    if (nb > 0)
      hap_box_copy(&b->box, b->grad, &b->box, tmp, &a->box, sizeof(float));
    put(ga, tmp, hap_box_numel(&a->box), true);
    free(tmp);
  } else {
    put(ga, b->grad, hap_box_numel(&a->box), true);
  }
  return HAP_OK;
}

/* Sufficient-factor broadcasting: the linear node's input values (GATHER_X) or output gradient
 * (GATHER_DY, zeros where none arrived) all-gathered whole into their scratch slot. */
static hap_status sfb_gather(hap_run *r, const hap_task *k, bool skip, hap_err *err) {
  bool x = k->sfb == HAP_SFB_GATHER_X;
  int32_t id =
      x ? r->in[(size_t)k->step * HAP_MAX_OP_INPUTS] : r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS];
  const float *src = x ? r->props[id].val : grad_of(r, id, err);
  int64_t n = hap_tensor_numel(&r->g->tensors[k->tensor]);
  float *dst =
      src ? scratch(r, x ? SCRATCH_SFB_X : SCRATCH_SFB_DY, n * (int64_t)sizeof(float), err) : NULL;
  if (dst == NULL)
    return HAP_ENOMEM;
  if (skip) { /* HAP_FAULT skip-all-reduce: no output gradient arrives */
    memset(dst, 0, (size_t)n * sizeof(float));
    return HAP_OK;
  }
  return collective(r, HAP_COLL_ALL_GATHER, k->tensor, k->from, k->from_segment,
                    HAP_LAYOUT_IDENTITY, -1, k->granule, src, dst, sizeof(float), false, err);
}

/* Sufficient-factor broadcasting: the whole batch's weight gradient from the gathered factors,
 * dW = dYᵀ X, on every rank (the same sum on each: nothing left to reduce). */
static hap_status sfb_grad(hap_run *r, const hap_task *k, int32_t t, double *kernel_s,
                           hap_err *err) {
  const hap_node *node = &r->g->nodes[k->node];
  const int32_t *in = r->in + (size_t)k->step * HAP_MAX_OP_INPUTS;
  int32_t wt = node->inputs[1];
  int32_t wid = r->out[(size_t)r->lw->source_step[wt] * HAP_MAX_OP_OUTPUTS];
  hap_task_work *w = malloc(sizeof *w);
  if (w == NULL)
    return oom(err);
  hap_status st = hap_lowered_work(r->lw, t, r->rank, w, err);
  float *gw = st == HAP_OK ? grad_of(r, wid, err) : NULL;
  if (st == HAP_OK && gw == NULL)
    st = HAP_ENOMEM;
  if (st == HAP_OK) {
    const void *ins[HAP_MAX_OP_INPUTS] = {0};
    for (int i = 0; i < node->n_inputs; i++)
      ins[i] = r->props[in[i]].val;
    ins[0] = r->scratch[SCRATCH_SFB_X];
    /* the linear backward reads no forward output; the call's check wants one of y's shape */
    const void *outs[HAP_MAX_OP_OUTPUTS] = {r->scratch[SCRATCH_SFB_DY]};
    const float *dout[HAP_MAX_OP_OUTPUTS] = {r->scratch[SCRATCH_SFB_DY]};
    float *din[HAP_MAX_OP_INPUTS] = {NULL, gw};
    hap_kernel_call call = {node->op, &w->io, NULL, hap_run_node_seed(r->o.seed, node->name),
                            ins,      outs,   0};
    double staging = 0, t0 = hap_clock_s();
    st = r->k.backward(r->k.ctx, &call, dout, din, NULL, kernel_s, &staging, err);
    r->staging_s += staging;
    if (st == HAP_OK && r->o.speed < 1 && *kernel_s < 0)
      pad_wait(hap_emulate_pad_s(hap_clock_s() - t0, r->o.speed));
  }
  free(w);
  return st;
}

/* Does backward task k only hand its parameter's replicated gradient to an overlapped bucket
 * (summed at the first update) instead of summing it in the task? */
static bool hands_to_bucket(const hap_run *r, const hap_task *k) {
  if (r->buckets == NULL || k->kind != HAP_TASK_COLLECTIVE || k->phase == HAP_PHASE_FWD ||
      k->coll != HAP_COLL_ALL_REDUCE || k->sfb != HAP_SFB_NONE || k->span == HAP_SPAN_REPLICAS ||
      r->p->steps[k->step].kind != HAP_STEP_SOURCE)
    return false;
  return !r->props[r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS]].zero_rows;
}

static hap_status comm_task(hap_run *r, const hap_task *k, hap_err *err) {
  bool skip = r->fault.kind == HAP_FAULT_SKIP_ALL_REDUCE && r->fault.tensor >= 0 &&
              synced_param(r, k) == r->fault.tensor;
  if (k->sfb == HAP_SFB_GATHER_X || k->sfb == HAP_SFB_GATHER_DY)
    return sfb_gather(r, k, skip, err);
  if (skip)
    return HAP_OK;
  const hap_step *s = &r->p->steps[k->step];
  if (k->span == HAP_SPAN_REPLICAS) { /* 2-D: sum the parameter's gradient over the replicas */
    int32_t id = r->zero_shard[s->tensor] >= 0 ? r->zero_shard[s->tensor]
                                               : r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS];
    float *g = grad_of(r, id, err);
    if (g == NULL)
      return HAP_ENOMEM;
    return r->across->ops->all_reduce(r->across, g, g, hap_box_numel(&r->props[id].box), HAP_F32,
                                      HAP_REDUCE_SUM, err);
  }
  if (s->kind == HAP_STEP_SOURCE) {
    int32_t p = r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS];
    int32_t z = r->zero_shard[s->tensor];
    if (k->phase == HAP_PHASE_FWD) /* ZeRO: gather the stored shards */
      return collective(r, HAP_COLL_ALL_GATHER, s->tensor, 0, 0, HAP_LAYOUT_IDENTITY, -1, 1,
                        r->props[z].val, r->props[p].val, r->props[p].elem, false, err);
    /* every rank synchronises, with zeros where no gradient reached it */
    float *gp = grad_of(r, p, err);
    if (gp == NULL)
      return HAP_ENOMEM;
    if (k->coll == HAP_COLL_ALL_REDUCE && r->props[p].zero_rows)
      return reduce_rows(r, p, err);
    if (hands_to_bucket(r, k)) /* summed at the first update */
      return hap_buckets_add(r->buckets, gp, hap_box_numel(&r->props[p].box), err);
    if (k->coll == HAP_COLL_ALL_REDUCE) /* replicated: sum the partial gradients in place */
      return sum_all(r, gp, gp, hap_box_numel(&r->props[p].box), false, err);
    /* ZeRO: each rank keeps its shard's gradient, summed over the micro-batches */
    bool add = r->props[z].grad_live;
    float *gz = grad_of(r, z, err);
    if (gz == NULL)
      return HAP_ENOMEM;
    return collective(r, HAP_COLL_REDUCE_SCATTER, s->tensor, HAP_LAYOUT_REDUCE, -1, 0, 0, 1, gp, gz,
                      sizeof(float), add, err);
  }
  int32_t from = r->in[(size_t)k->step * HAP_MAX_OP_INPUTS];
  int32_t to = r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS];
  if (k->phase == HAP_PHASE_FWD)
    return collective(r, k->coll, s->tensor, k->from, k->from_segment, k->to, k->to_segment,
                      k->granule, r->props[from].val, r->props[to].val, r->props[to].elem, false,
                      err);
  /* backward: the gradient of `to` moves into the gradient of `from`; every rank takes part even
   * when its own gradient is zero */
  float *gf = grad_of(r, from, err);
  float *gt = grad_of(r, to, err);
  if (gf == NULL || gt == NULL)
    return HAP_ENOMEM;
  return collective(r, k->coll, s->tensor, k->from, k->from_segment, k->to, k->to_segment,
                    k->granule, gt, gf, sizeof(float), true, err);
}

/* The prop parameter t's update reads and writes: its ZeRO shard or its stored copy. */
static int32_t update_prop(const hap_run *r, int32_t t) {
  return r->zero_shard[t] >= 0 ? r->zero_shard[t]
                               : r->out[(size_t)r->lw->source_step[t] * HAP_MAX_OP_OUTPUTS];
}

/* Does any trainable gradient on this rank hold a non-finite value? */
static bool grads_overflowed(const hap_run *r) {
  for (int32_t t = 0; t < r->g->n_tensors; t++) {
    if (!trainable(&r->g->tensors[t]) || r->lw->source_step[t] < 0)
      continue;
    const rprop *p = &r->props[update_prop(r, t)];
    if (p->grad_live && !hap_all_finite(p->grad + p->upd_lo, p->upd_n))
      return true;
  }
  return false;
}

/* fp16's dynamic loss scaling: the iteration's update is skipped on every rank when any rank's
 * gradient overflowed (collective over the world; once per iteration, at the first update). */
static hap_status decide_update(hap_run *r, hap_err *err) {
  r->update_state = 1;
  if (!r->scaler.dynamic)
    return HAP_OK;
  double overflow = grads_overflowed(r) ? 1 : 0, any = 0;
  HAP_TRY(r->world->ops->all_reduce(r->world, &overflow, &any, 1, HAP_F64, HAP_REDUCE_MAX, err));
  r->update_state = any > 0 ? -1 : 1;
  return HAP_OK;
}

static hap_status update(hap_run *r, const hap_task *k, hap_err *err) {
  if (r->update_state == 0)
    HAP_TRY(decide_update(r, err));
  if (r->update_state < 0)
    return HAP_OK;
  for (int32_t i = 0; i < k->n_params; i++) {
    int32_t t = r->lw->params[k->param0 + i], id = update_prop(r, t);
    rprop *p = &r->props[id];
    if (!p->grad_live || r->o.lr == 0)
      continue;
    int32_t me = r->world_rank;
    int64_t n = p->upd_n; /* the rows this rank updates (ZeRO), else the whole box */
    float *grad = p->grad + p->upd_lo, *val = (float *)p->val + p->upd_lo;
    double lr = hap_fault_lr(&r->fault, me, t, r->o.lr);
    hap_fault_gradient(&r->fault, me, t, grad, n);
    float *w = p->master != NULL ? p->master : val;
    if (hap_policy_is_default(&r->pol)) { /* as hap-run always did */
      hap_kernel_sgd(w, grad, (float)lr, n);
    } else {
      int buffers = hap_optim_state_buffers(r->pol.optimizer);
      if (buffers >= 1 && p->opt_m == NULL &&
          (p->opt_m = calloc((size_t)(n > 0 ? n : 1), sizeof(float))) == NULL)
        return oom(err);
      if (buffers >= 2 && p->opt_v == NULL &&
          (p->opt_v = calloc((size_t)(n > 0 ? n : 1), sizeof(float))) == NULL)
        return oom(err);
      hap_optim_hyper h = hap_optim_defaults(lr);
      hap_optim_step(r->pol.optimizer, &h, r->opt_steps + 1, w, grad, 1 / r->scaler.scale, p->opt_m,
                     p->opt_v, n);
    }
    hap_fault_value(&r->fault, me, t, w, n);
    if (p->master != NULL) { /* the compute copy */
      memcpy(val, p->master, (size_t)n * sizeof *p->master);
      hap_round_array(r->half, val, n);
    }
    if (p->zero_rows) /* every rank's updated rows to every rank */
      HAP_TRY(gather_rows(r, id, p->val, p->val, err));
  }
  return HAP_OK;
}

/* The loss gradient: 1 where the loss's last layout's dual needs it. */
static hap_status seed_loss(hap_run *r, hap_err *err) {
  int32_t id = r->head[r->g->loss];
  if (id < 0)
    return hap_err_set(err, HAP_EINVAL, "hap-run: the plan never makes the loss '%s'",
                       r->g->tensors[r->g->loss].name);
  float *g = grad_of(r, id, err);
  if (g == NULL)
    return HAP_ENOMEM;
  int64_t n = hap_box_numel(&r->props[id].box);
  bool everywhere = r->props[id].layout == HAP_LAYOUT_REDUCE;
  /* a stage loss: its received gradient carries the loss's scale already */
  float seed = hap_round_to(r->half, (float)(r->stage_loss ? 1 : r->loss_scale * r->scaler.scale));
  for (int64_t e = 0; e < n; e++)
    g[e] = everywhere || r->rank == 0 ? seed : 0.0f;
  r->loss_owner = !r->stage_loss && (everywhere || r->rank == 0);
  if (r->loss_owner) /* this micro-batch's loss value */
    r->loss_part += ((const float *)r->props[id].val)[0];
  return HAP_OK;
}

/* ---- the policy inside the iteration ------------------------------------------------------ */

/* Whether task k runs in the current micro-batch: a task that carries the batch in every one,
 * the others once (forward ones in the first micro-batch, the rest in the last). */
static bool runs_now(const hap_run *r, const hap_task *k) {
  if (r->micro == 1 || k->repeats > 1)
    return true;
  return k->phase == HAP_PHASE_FWD ? r->mb == 0 : r->mb == r->micro - 1;
}

/* Mixed precision's storage of what a forward task of `step` wrote (the loss stays float32). */
static void round_values(hap_run *r, int32_t step) {
  if (r->half == HAP_F32)
    return;
  const int32_t *out = r->out + (size_t)step * HAP_MAX_OP_OUTPUTS;
  for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++) {
    if (out[o] < 0)
      continue;
    rprop *p = &r->props[out[o]];
    if (r->g->tensors[p->tensor].dtype == HAP_F32 && p->tensor != r->g->loss)
      hap_round_array(r->half, p->val, hap_box_numel(&p->box));
  }
}

/* ... and of a gradient buffer a backward task wrote (trainable parameters' gradients stay float32
 * with grad_accum=fp32). Rounding is idempotent, so buffers the task did not touch are unchanged.
 */
static void round_grad(hap_run *r, int32_t id) {
  if (r->half == HAP_F32 || id < 0)
    return;
  rprop *p = &r->props[id];
  if (!p->grad_live || (r->pol.grad_accum == HAP_GRAD_FP32 && trainable(&r->g->tensors[p->tensor])))
    return;
  hap_round_array(r->half, p->grad, hap_box_numel(&p->box));
}

static void round_grads(hap_run *r, const hap_task *k) {
  if (r->half == HAP_F32)
    return;
  const int32_t *in = r->in + (size_t)k->step * HAP_MAX_OP_INPUTS;
  for (int i = 0; i < HAP_MAX_OP_INPUTS; i++)
    round_grad(r, in[i]);
  const hap_step *s = &r->p->steps[k->step];
  if (s->kind == HAP_STEP_SOURCE) {
    round_grad(r, r->out[(size_t)k->step * HAP_MAX_OP_OUTPUTS]);
    round_grad(r, r->zero_shard[s->tensor]);
  }
}

/* Recomputation: once a micro-batch's forward pass is over, the dropped tensors' values are
 * overwritten with NaN (a missed recomputation then fails --check) and recomputed nodes lose their
 * kernel state. */
static void drop_activations(hap_run *r) {
  if (r->rmap.dropped == NULL)
    return;
  bool skip = r->fault.kind == HAP_FAULT_SKIP_RECOMPUTE; /* tests only: read the NaNs */
  for (int32_t i = 0; i < r->n_props; i++) {
    rprop *p = &r->props[i];
    if (!p->dropped)
      continue;
    p->stale = !skip;
    if (r->g->tensors[p->tensor].dtype == HAP_F32) {
      float *v = p->val;
      for (int64_t e = 0, n = hap_box_numel(&p->box); e < n; e++)
        v[e] = NAN;
    }
  }
  for (int32_t k = 0; k < r->p->n_steps && !skip; k++)
    if (r->p->steps[k].kind == HAP_STEP_COMPUTE && r->rmap.recomputed[r->p->steps[k].node]) {
      hap_kernel_state_free(&r->state[k]);
      r->state_stale[k] = true;
    }
}

static hap_status forward_again(hap_run *r, int32_t t, hap_err *err);

/* Prop id's values, made again by their forward task when recomputation dropped them. */
static hap_status fresh(hap_run *r, int32_t id, hap_err *err) {
  if (id < 0 || !r->props[id].stale)
    return HAP_OK;
  return forward_again(r, r->props[id].producer, err);
}

/* The values and kernel state task k reads are in place: what recomputation dropped is made again
 * first, in forward order (the same on every rank: it depends on the plan alone). */
static hap_status ready(hap_run *r, const hap_task *k, hap_err *err) {
  if (r->rmap.dropped == NULL || k->step < 0)
    return HAP_OK;
  const int32_t *in = r->in + (size_t)k->step * HAP_MAX_OP_INPUTS;
  const int32_t *out = r->out + (size_t)k->step * HAP_MAX_OP_OUTPUTS;
  bool source = r->p->steps[k->step].kind == HAP_STEP_SOURCE;
  if (k->phase == HAP_PHASE_FWD) {
    for (int i = 0; i < HAP_MAX_OP_INPUTS && !source; i++)
      HAP_TRY(fresh(r, in[i], err));
    return HAP_OK;
  }
  if (k->kind != HAP_TASK_COMPUTE)
    return HAP_OK; /* gradients only */
  if (r->state_stale[k->step])
    return forward_again(r, r->fwd_task[k->step], err); /* its inputs, then its outputs */
  for (int i = 0; i < HAP_MAX_OP_INPUTS; i++)
    HAP_TRY(fresh(r, in[i], err));
  for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++)
    HAP_TRY(fresh(r, out[o], err));
  return HAP_OK;
}

/* A forward task: its values (rounded to the storage precision), no longer stale. */
static hap_status forward(hap_run *r, const hap_task *k, int32_t t, double *kernel_s,
                          hap_err *err) {
  hap_status st;
  switch (k->kind) {
  case HAP_TASK_COMPUTE: st = compute(r, k, t, false, kernel_s, err); break;
  case HAP_TASK_LOCAL: st = local(r, k, err); break;
  default: st = comm_task(r, k, err); break;
  }
  if (st != HAP_OK)
    return st;
  round_values(r, k->step);
  const int32_t *out = r->out + (size_t)k->step * HAP_MAX_OP_OUTPUTS;
  for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++)
    if (out[o] >= 0)
      r->props[out[o]].stale = false;
  if (k->kind == HAP_TASK_COMPUTE)
    r->state_stale[k->step] = false;
  return HAP_OK;
}

/* Recompute forward task t (and first what it reads), inside the task that needs it. */
static hap_status forward_again(hap_run *r, int32_t t, hap_err *err) {
  if (t < 0)
    return hap_err_set(err, HAP_EINVAL,
                       "hap-run: recomputation: a dropped tensor has no forward task");
  const hap_task *k = &r->lw->tasks[t];
  double kernel_s = -1, t0 = hap_clock_s();
  r->depth++;
  hap_status st = ready(r, k, err);
  if (st == HAP_OK)
    st = forward(r, k, t, &kernel_s, err);
  r->depth--;
  if (r->depth == 0) /* the outermost: its time holds the nested ones */
    r->recompute_s += hap_clock_s() - t0;
  return st;
}

/* Micro-batch mb begins: its inputs in place, the gradients that restart every micro-batch zero. */
static void start_micro_batch(hap_run *r, int32_t mb) {
  r->mb = mb;
  r->seeded = false;
  if (r->micro == 1)
    return;
  for (int32_t i = 0; i < r->n_props; i++) {
    rprop *p = &r->props[i];
    if (p->grad_per_micro && mb > 0)
      p->grad_live = false;
    if (p->micro_vals != NULL) {
      size_t bytes = (size_t)hap_box_numel(&p->box) * p->elem;
      memcpy(p->val, (const char *)p->micro_vals + bytes * (size_t)mb, bytes);
    }
  }
}

static hap_status run_task(hap_run *r, const hap_task *k, int32_t t, double *kernel_s,
                           hap_err *err) {
  HAP_TRY(ready(r, k, err));
  if (k->phase == HAP_PHASE_FWD)
    return forward(r, k, t, kernel_s, err);
  hap_status st;
  switch (k->kind) {
  case HAP_TASK_COMPUTE:
    st = k->sfb == HAP_SFB_WEIGHT_GRAD ? sfb_grad(r, k, t, kernel_s, err)
                                       : compute(r, k, t, true, kernel_s, err);
    break;
  case HAP_TASK_LOCAL: st = local(r, k, err); break;
  case HAP_TASK_COLLECTIVE: st = comm_task(r, k, err); break;
  default: /* an update reads the summed gradients */
    if (r->buckets != NULL)
      HAP_TRY(hap_buckets_finish(r->buckets, err));
    return update(r, k, err);
  }
  if (st == HAP_OK)
    round_grads(r, k);
  return st;
}

/* The state a new iteration starts from: every gradient zero, no task run yet. */
static void begin_iteration(hap_run *r) {
  for (int32_t i = 0; i < r->n_props; i++)
    r->props[i].grad_live = false;
  r->failed = NULL;
  r->staging_s = 0;
  r->loss_part = 0;
  r->update_state = 0;
  memset(r->runs, 0, (size_t)r->lw->n_tasks * sizeof *r->runs);
  memset(r->own_s, 0, (size_t)r->lw->n_tasks * sizeof *r->own_s);
}

/* Run task t, its times into start_s / end_s (may be NULL): a task run in several micro-batches
 * gets its summed time, from its first start (as the simulator draws a repeated task). */
static hap_status run_timed(hap_run *r, int32_t t, double *start_s, double *end_s, hap_err *err) {
  const hap_task *k = &r->lw->tasks[t];
  if (r->o.current_task != NULL)
    *r->o.current_task = (sig_atomic_t)t;
  if (r->o.on_task != NULL)
    r->o.on_task(r->o.on_task_ctx, t);
  r->recompute_s = 0;
  double t0 = hap_clock_s(), kernel_s = -1;
  hap_status st = run_task(r, k, t, &kernel_s, err);
  double t1 = kernel_s >= 0 ? t0 + kernel_s : hap_clock_s(); /* device time: no staging */
  if (st != HAP_OK) {
    r->failed = k->name;
    return st;
  }
  if (start_s != NULL && end_s != NULL) {
    if (r->runs[t] == 0)
      start_s[t] = end_s[t] = t0;
    end_s[t] += t1 - t0;
  }
  r->runs[t]++;
  r->own_s[t] += t1 - t0 - r->recompute_s;
  return HAP_OK;
}

/* The iteration is over: the loss scale and the step counts move on; HAP_FAULT=nan-loss. */
static void end_iteration(hap_run *r) {
  if (r->o.current_task != NULL)
    *r->o.current_task = -1;
  if (r->update_state < 0 || r->update_state > 0) {
    hap_loss_scaler_after(&r->scaler, r->update_state < 0);
    if (r->update_state > 0)
      r->opt_steps++;
    else
      r->skipped_steps++;
  }
  if (r->loss_owner) { /* HAP_FAULT=nan-loss: this rank's share of the loss */
    float v = (float)r->loss_part;
    hap_fault_loss(&r->fault, r->world_rank, &v);
    if (isnan(v))
      r->loss_part = NAN;
  }
}

hap_status hap_run_iteration(hap_run *r, double *start_s, double *end_s, hap_err *err) {
  if (r->ls != NULL)
    return hap_err_set(err, HAP_EINVAL,
                       "hap-run: a pipeline stage runs op by op (hap_run_stage_*), not whole "
                       "iterations");
  begin_iteration(r);
  const hap_lowered *lw = r->lw;
  for (int32_t mb = 0; mb < r->micro; mb++) {
    start_micro_batch(r, mb);
    for (int32_t t = 0; t < lw->n_tasks; t++) {
      const hap_task *k = &lw->tasks[t];
      if (!runs_now(r, k))
        continue;
      if (k->phase != HAP_PHASE_FWD && !r->seeded) {
        drop_activations(r);
        HAP_TRY(seed_loss(r, err));
        r->seeded = true;
      }
      HAP_TRY(run_timed(r, t, start_s, end_s, err));
      if (r->buckets != NULL && hap_buckets_pending(r->buckets))
        HAP_TRY(hap_buckets_progress(r->buckets, err));
    }
    if (!r->seeded) { /* a task list without backward tasks: the loss is still counted */
      HAP_TRY(seed_loss(r, err));
      r->seeded = true;
    }
  }
  if (r->buckets != NULL)
    HAP_TRY(hap_buckets_finish(r->buckets, err));
  end_iteration(r);
  return HAP_OK;
}

/* ---- pipeline stages: op by op ------------------------------------------------------------- */

static hap_status stage_only(const hap_run *r, const char *call, hap_err *err) {
  if (r->ls == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap-run: %s: the runner is not a pipeline stage's", call);
  return HAP_OK;
}

void hap_run_stage_begin(hap_run *r, double *start_s, double *end_s) {
  begin_iteration(r);
  r->iter_start = start_s;
  r->iter_end = end_s;
  for (int32_t s = 0; s < r->n_slots; s++)
    r->slots[s].mb = -1;
}

hap_status hap_run_stage_open(hap_run *r, int32_t mb, bool backward, hap_err *err) {
  HAP_TRY(stage_only(r, "open", err));
  if (mb < 0 || mb >= r->micro)
    return hap_err_set(err, HAP_EINVAL, "hap-run: micro-batch %d, expected 0..%d", mb,
                       r->micro - 1);
  int32_t slot = -1;
  for (int32_t s = 0; s < r->n_slots && slot < 0; s++)
    if (r->slots[s].mb == (backward ? mb : -1))
      slot = s;
  if (slot < 0 && backward)
    return hap_err_set(err, HAP_EINVAL,
                       "hap-run: the backward op of micro-batch %d before its forward op", mb);
  if (slot < 0)
    HAP_TRY(new_slot(r, &slot, err));
  switch_slot(r, slot);
  r->slots[slot].mb = mb;
  r->mb = mb;
  r->open_backward = backward;
  r->seeded = false;
  for (int32_t i = 0; i < r->n_props; i++) {
    rprop *p = &r->props[i];
    if (backward && p->grad_per_micro)
      p->grad_live = false;
    if (!backward && p->micro_vals != NULL) {
      size_t bytes = (size_t)hap_box_numel(&p->box) * p->elem;
      memcpy(p->val, (const char *)p->micro_vals + bytes * (size_t)mb, bytes);
    }
  }
  return HAP_OK;
}

/* The tasks of one part (TAIL: its gradient synchronisation, or with `updates` its updates). */
static hap_status run_part(hap_run *r, hap_pipe_part part, bool updates, hap_err *err) {
  for (int32_t t = 0; t < r->lw->n_tasks; t++) {
    if (r->ls->part[t] != part ||
        (part == HAP_PIPE_PART_TAIL && (r->lw->tasks[t].phase == HAP_PHASE_UPD) != updates))
      continue;
    HAP_TRY(run_timed(r, t, r->iter_start, r->iter_end, err));
  }
  return HAP_OK;
}

hap_status hap_run_stage_forward(hap_run *r, hap_err *err) {
  HAP_TRY(stage_only(r, "forward", err));
  return run_part(r, HAP_PIPE_PART_FWD, false, err);
}

hap_status hap_run_stage_backward(hap_run *r, hap_err *err) {
  HAP_TRY(stage_only(r, "backward", err));
  HAP_TRY(run_part(r, HAP_PIPE_PART_LOSS, false, err));
  HAP_TRY(seed_loss(r, err));
  r->seeded = true;
  return run_part(r, HAP_PIPE_PART_BWD, false, err);
}

void hap_run_stage_close(hap_run *r) {
  if (r->ls == NULL)
    return;
  if (r->open_backward)
    r->slots[r->cur_slot].mb = -1;
  else
    drop_activations(r); /* its boundary outputs are packed */
}

hap_status hap_run_stage_sync(hap_run *r, hap_err *err) {
  HAP_TRY(stage_only(r, "sync", err));
  return run_part(r, HAP_PIPE_PART_TAIL, false, err);
}

bool hap_run_stage_overflowed(const hap_run *r) { return r->scaler.dynamic && grads_overflowed(r); }

hap_status hap_run_stage_update(hap_run *r, bool skip, hap_err *err) {
  HAP_TRY(stage_only(r, "update", err));
  r->update_state = skip ? -1 : 1;
  HAP_TRY(run_part(r, HAP_PIPE_PART_TAIL, true, err));
  end_iteration(r);
  return HAP_OK;
}

/* A box of the exec graph in the micro-batch's coordinates: a 2-D program's replica holds its
 * slice of dim 0 of what the replica graph splits. */
static void to_micro(const hap_run *r, int32_t t, hap_box *b) {
  const hap_lowered *lw = r->lw;
  if (lw->replicas <= 1 || b->rank == 0)
    return;
  int64_t local = lw->local_graph->tensors[t].shape.dims[0];
  if (local * lw->replicas != r->ls->graph->tensors[t].shape.dims[0])
    return;
  b->lo[0] += r->replica * local;
  b->hi[0] += r->replica * local;
}

hap_status hap_run_stage_box(hap_run *r, int32_t t, int32_t dim, int32_t segment, hap_box *box,
                             hap_err *err) {
  HAP_TRY(stage_only(r, "box", err));
  HAP_TRY(layout_box(r, t, dim >= 0 ? (hap_layout)dim : HAP_LAYOUT_IDENTITY, segment, 1, r->rank,
                     box, err));
  to_micro(r, t, box);
  return HAP_OK;
}

hap_status hap_run_stage_port(hap_run *r, int32_t t, hap_pipe_holding h, bool gradient,
                              hap_box *box, void **data, size_t *elem, hap_err *err) {
  HAP_TRY(stage_only(r, "port", err));
  int32_t id = t >= 0 && t < r->g->n_tensors ? find_prop(r, t, h.layout, h.segment, h.granule) : -1;
  if (id < 0) {
    char buf[4];
    return hap_err_set(err, HAP_EINVAL, "hap-run: the stage never holds '%s' as %s",
                       t >= 0 && t < r->g->n_tensors ? r->g->tensors[t].name : "?",
                       hap_layout_name(h.layout, buf));
  }
  rprop *p = &r->props[id];
  *box = p->box;
  to_micro(r, t, box);
  *elem = gradient ? sizeof(float) : p->elem;
  *data = gradient ? (void *)grad_of(r, id, err) : p->val;
  return *data != NULL ? HAP_OK : HAP_ENOMEM;
}

hap_status hap_run_stage_reduce_scatter(hap_run *r, int32_t t, int32_t dim, int32_t segment,
                                        const float *src, hap_box *box, const float **out,
                                        hap_err *err) {
  HAP_TRY(stage_only(r, "reduce-scatter", err));
  hap_box *boxes = malloc((size_t)r->n * sizeof *boxes);
  if (boxes == NULL)
    return oom(err);
  hap_status st = boxes_of(r, t, (hap_layout)dim, segment, 1, boxes, err);
  float *dst = NULL;
  if (st == HAP_OK) {
    *box = boxes[r->rank];
    dst = scratch(r, SCRATCH_PORT, hap_box_numel(box) * (int64_t)sizeof(float), err);
    st = dst != NULL ? HAP_OK : HAP_ENOMEM;
  }
  if (st == HAP_OK)
    st = reduce_to_boxes(r, src, &r->g->tensors[t].shape, boxes, dst, false, err);
  free(boxes);
  if (st == HAP_OK) {
    to_micro(r, t, box);
    *out = dst;
  }
  return st;
}

hap_status hap_run_stage_all_gather(hap_run *r, int32_t t, int32_t dim, int32_t segment,
                                    const void *src, void *dst, hap_err *err) {
  HAP_TRY(stage_only(r, "all-gather", err));
  return collective(r, HAP_COLL_ALL_GATHER, t, (hap_layout)dim, segment, HAP_LAYOUT_IDENTITY, -1, 1,
                    src, dst, (size_t)hap_dtype_size(r->g->tensors[t].dtype), false, err);
}

hap_status hap_run_loss(hap_run *r, double *loss, hap_err *err) {
  int32_t id = r->head[r->g->loss];
  if (id < 0)
    return hap_err_set(err, HAP_EINVAL, "hap-run: no loss");
  double v = r->loss_owner ? r->loss_part : 0;
  double sum = 0; /* over the group, and over the replicas of a 2-D plan */
  HAP_TRY(r->world->ops->all_reduce(r->world, &v, &sum, 1, HAP_F64, HAP_REDUCE_SUM, err));
  *loss = sum * r->loss_scale;
  return HAP_OK;
}

hap_status hap_run_gather_grad(hap_run *r, int32_t tensor, float *full, hap_err *err) {
  int32_t src = r->lw->source_step[tensor];
  if (src < 0)
    return hap_err_set(err, HAP_EINVAL, "hap-run: '%s' is not sourced by the plan",
                       r->g->tensors[tensor].name);
  int32_t id =
      r->zero_shard[tensor] >= 0 ? r->zero_shard[tensor] : r->out[(size_t)src * HAP_MAX_OP_OUTPUTS];
  rprop *p = &r->props[id];
  float *g = grad_of(r, id, err); /* zero when no gradient reached it */
  if (g == NULL)
    return HAP_ENOMEM;
  int64_t total = hap_tensor_numel(&r->g->tensors[tensor]);
  float *whole = malloc((size_t)(total > 0 ? total : 1) * sizeof *whole);
  if (whole == NULL)
    return oom(err);
  hap_status st = HAP_OK;
  if (p->zero_rows) {
    st = gather_rows(r, id, g, whole, err); /* each rank summed its rows */
  } else if (p->layout < 0) {
    memcpy(whole, g, (size_t)total * sizeof *whole); /* replicated: already summed */
  } else {
    hap_box *boxes = malloc((size_t)r->n * 2 * sizeof *boxes);
    if (boxes == NULL) {
      free(whole);
      return oom(err);
    }
    st = boxes_of(r, tensor, p->layout, p->segment, p->granule, boxes, err);
    for (int32_t i = 0; i < r->n && st == HAP_OK; i++)
      boxes[r->n + i] = hap_box_full(&r->g->tensors[tensor].shape);
    if (st == HAP_OK)
      st = redistribute(r, g, boxes, whole, boxes + r->n, sizeof(float), false, err);
    free(boxes);
  }
  if (st == HAP_OK && r->rank == 0 && full != NULL)
    memcpy(full, whole, (size_t)total * sizeof *full);
  free(whole);
  return st;
}

hap_run_steps hap_run_steps_taken(const hap_run *r) {
  return (hap_run_steps){r->opt_steps, r->skipped_steps, r->scaler.scale};
}

int64_t hap_run_overlap_buckets(const hap_run *r) {
  return r->buckets != NULL ? hap_buckets_started(r->buckets) : -1;
}

bool hap_run_task_waits(const hap_run *r, int32_t t) {
  if (t < 0 || t >= r->lw->n_tasks)
    return false;
  const hap_task *k = &r->lw->tasks[t];
  if (k->kind == HAP_TASK_COLLECTIVE)
    return !hands_to_bucket(r, k);
  if (k->kind != HAP_TASK_UPDATE || r->buckets == NULL)
    return false;
  for (int32_t u = 0; u < t; u++) /* the first update completes the buckets */
    if (r->lw->tasks[u].kind == HAP_TASK_UPDATE)
      return false;
  return true;
}

int32_t hap_run_task_runs(const hap_run *r, int32_t t, double *own_s) {
  if (t < 0 || t >= r->lw->n_tasks) {
    *own_s = 0;
    return 0;
  }
  *own_s = r->own_s[t];
  return r->runs[t];
}

double hap_run_loss_part(const hap_run *r) {
  int32_t id = r->head[r->g->loss];
  if (id < 0)
    return 0;
  return r->loss_owner ? r->loss_part * r->loss_scale : 0;
}

void hap_run_copies_free(hap_run_copies *c) {
  if (c == NULL)
    return;
  free(c->box);
  free(c->offset);
  free(c->same_as);
  free(c->data);
  *c = (hap_run_copies){0};
}

/* What one rank tells the others about its copy. */
typedef struct copy_id {
  hap_box box;
  uint64_t digest; /* of the copy's bytes */
} copy_id;

static bool box_equal(const hap_box *a, const hap_box *b) {
  if (a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d])
      return false;
  return true;
}

/* FNV-1a over 64-bit words (and the tail bytes) of n floats. */
static uint64_t copy_digest(const float *v, int64_t n) {
  size_t bytes = (size_t)n * sizeof *v, words = bytes / 8;
  uint64_t h = HAP_FNV1A_OFFSET, w;
  const unsigned char *p = (const unsigned char *)v;
  for (size_t i = 0; i < words; i++) {
    memcpy(&w, p + 8 * i, 8);
    h = hap_fnv1a_word(h, w);
  }
  return hap_fnv1a_more(h, p + 8 * words, bytes - 8 * words);
}

bool hap_run_local_copy(hap_run *r, int32_t tensor, hap_run_quantity q, hap_box *box,
                        const float **data, hap_err *err) {
  int32_t src = tensor >= 0 && tensor < r->g->n_tensors ? r->lw->source_step[tensor] : -1;
  *data = NULL;
  if (src < 0)
    return false;
  int32_t id =
      r->zero_shard[tensor] >= 0 ? r->zero_shard[tensor] : r->out[(size_t)src * HAP_MAX_OP_OUTPUTS];
  rprop *p = &r->props[id];
  *box = p->box;
  *data = q == HAP_RUN_GRADIENT ? grad_of(r, id, err)
          : p->master != NULL   ? p->master /* mixed precision: the float32 master */
                                : (const float *)p->val;
  /* ZeRO: the gradient summed on this rank's rows, their float32 master; the value as gathered */
  if (p->zero_rows && (q == HAP_RUN_GRADIENT || p->master != NULL)) {
    int64_t rows = box->hi[0] - box->lo[0], row = rows > 0 ? hap_box_numel(box) / rows : 1;
    box->lo[0] += p->upd_lo / (row > 0 ? row : 1);
    box->hi[0] = box->lo[0] + p->upd_n / (row > 0 ? row : 1);
    if (q == HAP_RUN_GRADIENT && *data != NULL)
      *data += p->upd_lo;
  }
  return true;
}

hap_status hap_run_gather_copies(hap_run *r, int32_t tensor, hap_run_quantity q,
                                 hap_run_copies *out, hap_err *err) {
  *out = (hap_run_copies){0};
  hap_box box;
  const float *mine = NULL;
  if (!hap_run_local_copy(r, tensor, q, &box, &mine, err))
    return hap_err_set(err, HAP_EINVAL, "hap-run: tensor %d is not sourced by the plan",
                       (int)tensor);
  if (mine == NULL)
    return HAP_ENOMEM;
  return hap_run_gather_copy_of(r->world, &box, mine, out, err);
}

hap_status hap_run_gather_copy_of(hap_comm *w, const hap_box *box, const float *mine,
                                  hap_run_copies *out, hap_err *err) {
  *out = (hap_run_copies){0};
  int32_t n = w->size, me = w->rank;
  int64_t numel = hap_box_numel(box);
  copy_id my_id;
  memset(&my_id, 0, sizeof my_id); /* padding travels too */
  my_id.box = *box;
  my_id.digest = copy_digest(mine, numel);
  copy_id *ids = malloc((size_t)n * sizeof *ids);
  int64_t *counts = calloc((size_t)n * 4, sizeof *counts);
  int32_t *same_as = malloc((size_t)n * sizeof *same_as);
  int64_t *offset = malloc((size_t)n * sizeof *offset);
  hap_box *boxes = malloc((size_t)n * sizeof *boxes);
  float *data = NULL;
  hap_status st = !ids || !counts || !same_as || !offset || !boxes ? oom(err) : HAP_OK;
  if (st == HAP_OK)
    st = w->ops->all_gather(w, &my_id, ids, (int64_t)sizeof my_id, err);
  /* every rank decides alike which copies travel: one per distinct (box, digest) */
  int64_t *sb = counts, *sd = counts + n, *rb = counts + 2 * (size_t)n,
          *rd = counts + 3 * (size_t)n;
  int64_t total = 0;
  for (int32_t i = 0; i < n && st == HAP_OK; i++) {
    boxes[i] = ids[i].box;
    same_as[i] = -1;
    for (int32_t j = 0; j < i && same_as[i] < 0; j++)
      if (same_as[j] < 0 && ids[j].digest == ids[i].digest && box_equal(&ids[j].box, &ids[i].box))
        same_as[i] = j;
    bool sends = same_as[i] < 0;
    offset[i] = sends ? total / (int64_t)sizeof(float) : offset[same_as[i]];
    if (me == 0 && sends) {
      rd[i] = total;
      rb[i] = hap_box_numel(&boxes[i]) * (int64_t)sizeof(float);
      total += rb[i];
    }
  }
  if (st == HAP_OK && same_as[me] < 0)
    sb[0] = numel * (int64_t)sizeof(float); /* to rank 0 */
  if (st == HAP_OK && (data = malloc((size_t)(total > 0 ? total : 1))) == NULL)
    st = oom(err);
  if (st == HAP_OK)
    st = w->ops->all_to_allv(w, mine, sb, sd, data, rb, rd, err);
  if (st == HAP_OK && me == 0) {
    *out = (hap_run_copies){n, boxes, offset, same_as, data};
    boxes = NULL;
    offset = NULL;
    same_as = NULL;
    data = NULL;
  }
  free(ids);
  free(counts);
  free(same_as);
  free(offset);
  free(boxes);
  free(data);
  return st;
}
