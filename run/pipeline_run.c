/* pipeline_run.c — a pipelined plan run op by op over MPI (pipeline_run.h). */
#include "run/pipeline_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "exec/clock.h"
#include "kernels/half.h"
#include "model/policy.h"
#include "run/box.h"

#include "fault.h"

/* A value a rank sends to itself (a pipeline of one group with several chunks): kept until the
 * receiving op takes it. */
typedef struct self_msg {
  int32_t xfer, micro, pair;
  void *data;
} self_msg;

/* A buffer a send reads until the iteration's sends completed. */
typedef struct send_buf {
  void *data;
  size_t bytes;
} send_buf;

/* A parameter used by several stages: its id in each (-1: not there), and the ranks that hold it
 * (Megatron-LM's embedding group). */
typedef struct tied_param {
  int32_t tensor;    /* the whole graph's */
  int32_t *in_stage; /* [n_stages] */
  hap_comm *holders; /* the ranks of the stages that use it (owned); NULL on the others */
} tied_param;

struct hap_pipe_run {
  hap_pipe_lowered *pw;
  hap_comm *world;
  hap_comm *group; /* this rank's device group (owned) */
  int32_t my_group, p, v;
  hap_run **runner;              /* [v]: stage chunk * p + my_group */
  double **start, **end;         /* [v][its n_tasks]: the last iteration's task times */
  volatile sig_atomic_t running; /* stage, -1 between ops */
  double *op_start, *op_end; /* [ops + 1]: the last iteration's ops and tails, s after its start */
  int32_t failed_stage;
  char failed[256];
  /* send buffers: the iteration's i-th send uses sent[i] (kept across iterations: the same sends
   * come every iteration, and a fresh buffer's page faults cost more than the copy) */
  send_buf *sent;
  int32_t n_sent, n_kept, cap_sent;
  self_msg *self;
  int32_t n_self, cap_self;
  tied_param *tied;
  int32_t n_tied;
  bool skip_tied_sum; /* HAP_FAULT=skip-tied-sum (tests only) */
  void *recv_buf;     /* receive scratch */
  size_t recv_bytes;
  void *gather_buf; /* all-gather shards */
  size_t gather_bytes;
};

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "hap-run: pipeline: out of memory");
}

static hap_box box_of_pair(const hap_pipe_box *b) {
  hap_box x;
  memset(&x, 0, sizeof x);
  x.rank = b->rank;
  for (int i = 0; i < b->rank; i++) {
    x.lo[i] = b->lo[i];
    x.hi[i] = b->hi[i];
  }
  return x;
}

/* A buffer of at least `bytes` in *buf (grown, contents undefined). */
static void *room(void **buf, size_t *have, size_t bytes, hap_err *err) {
  size_t want = bytes > 0 ? bytes : 1;
  if (*have < want) {
    free(*buf);
    *buf = malloc(want);
    *have = *buf != NULL ? want : 0;
    if (*buf == NULL)
      oom(err);
  }
  return *buf;
}

static bool same_box(const hap_box *a, const hap_box *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i])
      return false;
  return true;
}

static hap_run *runner_of(const hap_pipe_run *pr, int32_t stage) {
  return stage % pr->p == pr->my_group ? pr->runner[stage / pr->p] : NULL;
}

/* ---- creation ------------------------------------------------------------------------------ */

/* Whole-graph parameters held by more than one stage. */
static hap_status find_tied(hap_pipe_run *pr, hap_err *err) {
  const hap_pipe_lowered *pw = pr->pw;
  const hap_graph *g = pw->graph;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (tn->kind != HAP_TENSOR_PARAMETER || !tn->requires_grad)
      continue;
    int32_t holders = 0;
    for (int32_t k = 0; k < pw->n_stages; k++)
      holders += pw->stages[k].sg == NULL || pw->stages[k].sg->stage_of[t] >= 0;
    if (holders < 2)
      continue;
    tied_param *grown = realloc(pr->tied, (size_t)(pr->n_tied + 1) * sizeof *grown);
    if (grown == NULL)
      return oom(err);
    pr->tied = grown;
    tied_param *tp = &pr->tied[pr->n_tied++];
    *tp = (tied_param){t, NULL, NULL};
    if ((tp->in_stage = malloc((size_t)pw->n_stages * sizeof *tp->in_stage)) == NULL)
      return oom(err);
    bool mine = false;
    for (int32_t k = 0; k < pw->n_stages; k++) {
      tp->in_stage[k] = pw->stages[k].sg != NULL ? pw->stages[k].sg->stage_of[t] : t;
      mine = mine || (k % pr->p == pr->my_group && tp->in_stage[k] >= 0);
    }
    /* collective over the world, every rank in the same order */
    HAP_TRY(pr->world->ops->split(pr->world, mine ? 0 : -1, pr->world->rank, &tp->holders, err));
  }
  return HAP_OK;
}

hap_status hap_pipe_run_create(hap_pipe_lowered *pw, hap_comm *world, const hap_run_options *o,
                               hap_pipe_run **out, hap_err *err) {
  *out = NULL;
  const hap_pipeline *pl = pw->pipeline;
  if (world->size != pl->n_devices)
    return hap_err_set(err, HAP_EINVAL,
                       "hap-run: the pipelined plan is for %d devices (%d stages on %d groups) but "
                       "%d ranks are running (start it with mpirun -np %d)",
                       pl->n_devices, pl->n_stages, pl->n_groups, world->size, pl->n_devices);
  if (world->ops->send_start == NULL || world->ops->send_wait == NULL)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "hap-run: the %s communicator cannot send without waiting, which a "
                       "pipelined plan needs",
                       world->ops->name);
  if (pw->n_xfers > 32767)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "hap-run: %d boundary transfers, more than the 32767 message tags",
                       pw->n_xfers);
  hap_pipe_run *pr = calloc(1, sizeof *pr);
  if (pr == NULL)
    return oom(err);
  pr->pw = pw;
  pr->world = world;
  pr->p = pl->n_groups;
  pr->v = pl->chunks;
  pr->running = -1;
  pr->failed_stage = -1;
  pr->my_group = -1;
  for (int32_t gi = 0; gi < pl->n_groups && pr->my_group < 0; gi++) {
    int32_t n;
    const int32_t *dev = hap_pipeline_group(pl, gi, &n);
    for (int32_t i = 0; i < n; i++)
      if (dev[i] == world->rank)
        pr->my_group = gi;
  }
  hap_status st = world->ops->split(world, pr->my_group, world->rank, &pr->group, err);
  if (st == HAP_OK && ((pr->runner = calloc((size_t)pr->v, sizeof(hap_run *))) == NULL ||
                       (pr->start = calloc((size_t)pr->v, sizeof(double *))) == NULL ||
                       (pr->end = calloc((size_t)pr->v, sizeof(double *))) == NULL))
    st = oom(err);
  int32_t n_ops = hap_pipe_order_n_ops(pw->order, pr->my_group) + 1;
  if (st == HAP_OK && ((pr->op_start = calloc((size_t)n_ops, sizeof(double))) == NULL ||
                       (pr->op_end = calloc((size_t)n_ops, sizeof(double))) == NULL))
    st = oom(err);
  if (st == HAP_OK)
    st = find_tied(pr, err);
  hap_fault fault;
  if (st == HAP_OK &&
      (st = hap_fault_parse(getenv("HAP_FAULT"), pw->graph, world->size, &fault, err)) == HAP_OK)
    pr->skip_tied_sum = fault.kind == HAP_FAULT_SKIP_TIED_SUM;
  if (st == HAP_OK && pr->skip_tied_sum && pr->n_tied == 0)
    st = hap_err_set(err, HAP_EINVAL,
                     "HAP_FAULT: skip-tied-sum: no parameter is used by more than one stage");
  for (int32_t c = 0; c < pr->v && st == HAP_OK; c++) {
    int32_t k = c * pr->p + pr->my_group;
    const hap_pipe_lowered_stage *ls = &pw->stages[k];
    hap_run_stage so = {ls, pw->graph, pl->policy.micro_batches, world->rank, world->size};
    hap_run_options ro = *o;
    ro.stage = &so;
    size_t nt = (size_t)(ls->lw->n_tasks > 0 ? ls->lw->n_tasks : 1);
    if ((pr->start[c] = calloc(nt, sizeof(double))) == NULL ||
        (pr->end[c] = calloc(nt, sizeof(double))) == NULL) {
      st = oom(err);
      break;
    }
    const hap_graph *g = ls->sg != NULL ? ls->sg->graph : pw->graph;
    if ((st = hap_run_create(ls->lw, g, pr->group, &ro, &pr->runner[c], err)) != HAP_OK)
      hap_err_prefix(err, "stages[%d]", k);
  }
  if (st != HAP_OK) {
    hap_pipe_run_destroy(pr);
    return st;
  }
  *out = pr;
  return HAP_OK;
}

/* The iteration's sends completed: their buffers are free for the next (self-sends taken). */
static void end_sends(hap_pipe_run *pr) {
  pr->n_sent = 0;
  for (int32_t i = 0; i < pr->n_self; i++)
    free(pr->self[i].data);
  pr->n_self = 0;
}

/* The buffer of this iteration's next send, at least `bytes` (contents undefined). */
static void *next_send_buffer(hap_pipe_run *pr, size_t bytes, hap_err *err) {
  size_t want = bytes > 0 ? bytes : 1;
  if (pr->n_sent == pr->n_kept) {
    if (HAP_VEC_RESERVE(pr->sent, pr->cap_sent, pr->n_kept + 1, 16) != 0) {
      oom(err);
      return NULL;
    }
    pr->sent[pr->n_kept++] = (send_buf){NULL, 0};
  }
  send_buf *b = &pr->sent[pr->n_sent];
  if (b->bytes < want) {
    free(b->data);
    b->data = malloc(want);
    b->bytes = b->data != NULL ? want : 0;
    if (b->data == NULL) {
      oom(err);
      return NULL;
    }
  }
  pr->n_sent++;
  return b->data;
}

void hap_pipe_run_destroy(hap_pipe_run *pr) {
  if (pr == NULL)
    return;
  if (pr->world != NULL && pr->n_sent > 0) { /* an iteration that failed: its sends must end */
    hap_err ignored = {0};
    (void)pr->world->ops->send_wait(pr->world, &ignored);
  }
  end_sends(pr);
  for (int32_t i = 0; i < pr->n_kept; i++)
    free(pr->sent[i].data);
  free(pr->sent);
  free(pr->self);
  for (int32_t c = 0; c < pr->v; c++) {
    if (pr->runner != NULL)
      hap_run_destroy(pr->runner[c]);
    if (pr->start != NULL)
      free(pr->start[c]);
    if (pr->end != NULL)
      free(pr->end[c]);
  }
  free(pr->runner);
  free(pr->start);
  free(pr->end);
  for (int32_t i = 0; i < pr->n_tied; i++) {
    free(pr->tied[i].in_stage);
    hap_comm_destroy(pr->tied[i].holders);
  }
  free(pr->tied);
  free(pr->recv_buf);
  free(pr->gather_buf);
  free(pr->op_start);
  free(pr->op_end);
  hap_comm_destroy(pr->group);
  free(pr);
}

/* ---- boundary transfers -------------------------------------------------------------------- */

/* Start sending this rank's pairs of xfer x for the open micro-batch of its sending stage. */
static hap_status send_xfer(hap_pipe_run *pr, int32_t xi, int32_t micro, hap_err *err) {
  const hap_pipe_xfer *x = &pr->pw->xfers[xi];
  hap_run *r = runner_of(pr, x->from_stage);
  hap_box box;
  void *data = NULL;
  size_t elem = 0;
  HAP_TRY(hap_run_stage_port(r, x->send_tensor, x->held, x->gradient, &box, &data, &elem, err));
  if (x->reduce_scatter) { /* every device of the group takes part, sending or not */
    const float *shard = NULL;
    HAP_TRY(hap_run_stage_reduce_scatter(r, x->send_tensor, x->shard_dim, x->held.segment, data,
                                         &box, &shard, err));
    data = (void *)shard;
  }
  int32_t me = pr->world->rank;
  for (int32_t i = x->pair0; i < x->pair0 + x->n_pairs; i++) {
    const hap_pipe_pair *pp = &pr->pw->pairs[i];
    if (pp->src != me)
      continue;
    hap_box region = box_of_pair(&pp->box);
    int64_t bytes = hap_box_numel(&region) * (int64_t)elem;
    if (pp->dst == me) { /* kept for this rank's receiving op */
      void *own = malloc((size_t)(bytes > 0 ? bytes : 1));
      if (own == NULL || HAP_VEC_RESERVE(pr->self, pr->cap_self, pr->n_self + 1, 8) != 0) {
        free(own);
        return oom(err);
      }
      hap_box_pack(&region, data, &box, own, elem);
      pr->self[pr->n_self++] = (self_msg){xi, micro, i, own};
      continue;
    }
    void *buf = next_send_buffer(pr, (size_t)bytes, err);
    if (buf == NULL)
      return HAP_ENOMEM;
    hap_box_pack(&region, data, &box, buf, elem);
    HAP_TRY(pr->world->ops->send_start(pr->world, buf, bytes, pp->dst, xi, err));
  }
  return HAP_OK;
}

/* This rank's self-sent pair i of xfer x for `micro` (taken: the caller frees it), or NULL. */
static void *take_self(hap_pipe_run *pr, int32_t xi, int32_t micro, int32_t pair) {
  for (int32_t i = 0; i < pr->n_self; i++) {
    self_msg *m = &pr->self[i];
    if (m->xfer == xi && m->micro == micro && m->pair == pair) {
      void *data = m->data;
      pr->n_self--;
      *m = pr->self[pr->n_self];
      pr->self[pr->n_self].data = NULL;
      return data;
    }
  }
  return NULL;
}

/* Receive this rank's pairs of xfer x into the open micro-batch of its receiving stage. */
static hap_status recv_xfer(hap_pipe_run *pr, int32_t xi, int32_t micro, hap_err *err) {
  const hap_pipe_xfer *x = &pr->pw->xfers[xi];
  hap_run *r = runner_of(pr, x->to_stage);
  hap_box port, box;
  void *dst = NULL, *target;
  size_t elem = 0;
  HAP_TRY(hap_run_stage_port(r, x->recv_tensor, x->wanted, false, &port, &dst, &elem, err));
  box = port;
  target = dst;
  if (x->all_gather) { /* this rank's shard first */
    HAP_TRY(hap_run_stage_box(r, x->recv_tensor, x->gather_dim, x->wanted.segment, &box, err));
    if ((target = room(&pr->gather_buf, &pr->gather_bytes, (size_t)hap_box_numel(&box) * elem,
                       err)) == NULL)
      return HAP_ENOMEM;
  }
  bool add = x->partial && !x->reduce_scatter; /* several partial sums meet here */
  if (add)
    memset(target, 0, (size_t)hap_box_numel(&box) * elem);
  int32_t me = pr->world->rank;
  for (int32_t i = x->pair0; i < x->pair0 + x->n_pairs; i++) {
    const hap_pipe_pair *pp = &pr->pw->pairs[i];
    if (pp->dst != me)
      continue;
    hap_box region = box_of_pair(&pp->box);
    int64_t n = hap_box_numel(&region), bytes = n * (int64_t)elem;
    void *own = pp->src == me ? take_self(pr, xi, micro, i) : NULL;
    void *buf = own;
    if (pp->src == me && own == NULL)
      return hap_err_set(err, HAP_EINVAL,
                         "hap-run: pipeline: '%s' of micro-batch %d was never "
                         "sent to this rank",
                         pr->pw->graph->tensors[x->tensor].name, micro);
    if (buf == NULL) {
      if ((buf = room(&pr->recv_buf, &pr->recv_bytes, (size_t)bytes, err)) == NULL)
        return HAP_ENOMEM;
      HAP_TRY(pr->world->ops->recv(pr->world, buf, bytes, pp->src, xi, err));
    }
    if (add) { /* float32 partial sums */
      float *sum = malloc((size_t)(n > 0 ? n : 1) * sizeof *sum);
      if (sum == NULL) {
        free(own);
        return oom(err);
      }
      hap_box_pack(&region, target, &box, sum, elem);
      for (int64_t e = 0; e < n; e++)
        sum[e] += ((const float *)buf)[e];
      hap_box_unpack(&region, sum, target, &box, elem);
      free(sum);
    } else {
      hap_box_unpack(&region, buf, target, &box, elem);
    }
    free(own);
  }
  if (x->all_gather)
    HAP_TRY(hap_run_stage_all_gather(r, x->recv_tensor, x->gather_dim, x->wanted.segment, target,
                                     dst, err));
  return HAP_OK;
}

/* ---- the iteration ------------------------------------------------------------------------- */

static hap_status fail_in(hap_pipe_run *pr, int32_t stage, hap_status st) {
  if (pr->failed_stage < 0) {
    pr->failed_stage = stage;
    hap_run *r = runner_of(pr, stage);
    const char *task = r != NULL ? hap_run_failed_task(r) : NULL;
    snprintf(pr->failed, sizeof pr->failed, "stages[%d] %s%s%s", (int)stage, task ? "'" : "",
             task ? task : "(a boundary transfer)", task ? "'" : "");
  }
  return st;
}

/* One op: receive, run, send. */
static hap_status run_op(hap_pipe_run *pr, hap_pipe_op op, hap_err *err) {
  int32_t stage = op.chunk * pr->p + pr->my_group;
  hap_run *r = pr->runner[op.chunk];
  const hap_pipe_lowered *pw = pr->pw;
  pr->running = stage;
  HAP_TRY(hap_run_stage_open(r, op.micro, op.backward, err));
  for (int32_t i = 0; i < pw->n_xfers; i++)
    if (pw->xfers[i].to_stage == stage && pw->xfers[i].gradient == op.backward)
      HAP_TRY(recv_xfer(pr, i, op.micro, err));
  HAP_TRY(op.backward ? hap_run_stage_backward(r, err) : hap_run_stage_forward(r, err));
  for (int32_t i = 0; i < pw->n_xfers; i++)
    if (pw->xfers[i].from_stage == stage && pw->xfers[i].gradient == op.backward)
      HAP_TRY(send_xfer(pr, i, op.micro, err));
  hap_run_stage_close(r);
  return HAP_OK;
}

/* Tied parameters: every stage's gradient summed (collective over the ranks of the stages that
 * use it). Within a stage, one device per distinct box contributes. */
static hap_status sum_tied(hap_pipe_run *pr, hap_err *err) {
  const hap_graph *g = pr->pw->graph;
  const hap_train_policy *pol = &pr->pw->pipeline->policy;
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < pr->n_tied && st == HAP_OK; i++) {
    const tied_param *tp = &pr->tied[i];
    if (tp->holders == NULL)
      continue; /* none of this rank's stages uses it */
    const hap_shape *shape = &g->tensors[tp->tensor].shape;
    hap_box full = hap_box_full(shape);
    int64_t n = hap_box_numel(&full);
    float *sum = calloc((size_t)(n > 0 ? n : 1), sizeof *sum);
    hap_box *boxes = malloc((size_t)pr->group->size * sizeof *boxes);
    if (sum == NULL || boxes == NULL)
      st = oom(err);
    for (int32_t c = 0; c < pr->v && st == HAP_OK; c++) {
      int32_t k = c * pr->p + pr->my_group, t = tp->in_stage[k];
      hap_box box;
      memset(&box, 0, sizeof box); /* padding travels */
      const float *grad = NULL;
      bool holds =
          t >= 0 && hap_run_local_copy(pr->runner[c], t, HAP_RUN_GRADIENT, &box, &grad, err);
      if (holds && grad == NULL)
        st = HAP_ENOMEM;
      if (!holds)
        box.rank = -1;
      if (st == HAP_OK) /* the group's boxes: one contribution per distinct box */
        st = pr->group->ops->all_gather(pr->group, &box, boxes, (int64_t)sizeof box, err);
      bool first = holds;
      for (int32_t j = 0; j < pr->group->rank && first && st == HAP_OK; j++)
        first = !same_box(&boxes[j], &box);
      if (first && st == HAP_OK) {
        float *part = malloc((size_t)(n > 0 ? n : 1) * sizeof *part);
        if (part == NULL) {
          st = oom(err);
          break;
        }
        memset(part, 0, (size_t)n * sizeof *part);
        hap_box_unpack(&box, grad, part, &full, sizeof(float));
        for (int64_t e = 0; e < n; e++)
          sum[e] += part[e];
        free(part);
      }
    }
    if (st == HAP_OK)
      st = tp->holders->ops->all_reduce(tp->holders, sum, sum, n, HAP_F32, HAP_REDUCE_SUM, err);
    for (int32_t c = 0; c < pr->v && st == HAP_OK; c++) {
      int32_t k = c * pr->p + pr->my_group, t = tp->in_stage[k];
      hap_box box;
      const float *grad = NULL;
      if (t < 0 || !hap_run_local_copy(pr->runner[c], t, HAP_RUN_GRADIENT, &box, &grad, err) ||
          grad == NULL)
        continue;
      hap_box_pack(&box, sum, &full, (float *)grad, sizeof(float));
      if (pol->grad_accum == HAP_GRAD_HALF) /* stored as the stages store gradients */
        hap_round_array(hap_policy_compute_dtype(pol), (float *)grad, hap_box_numel(&box));
    }
    free(sum);
    free(boxes);
  }
  return st;
}

hap_status hap_pipe_run_iteration(hap_pipe_run *pr, hap_err *err) {
  const hap_pipe_order *order = pr->pw->order;
  pr->failed_stage = -1;
  pr->failed[0] = '\0';
  for (int32_t c = 0; c < pr->v; c++)
    hap_run_stage_begin(pr->runner[c], pr->start[c], pr->end[c]);
  int32_t n_ops = hap_pipe_order_n_ops(order, pr->my_group);
  double t0 = hap_clock_s();
  for (int32_t i = 0; i < n_ops; i++) {
    hap_pipe_op op = hap_pipe_order_op(order, pr->my_group, i);
    pr->op_start[i] = hap_clock_s() - t0;
    hap_status st = run_op(pr, op, err);
    pr->op_end[i] = hap_clock_s() - t0;
    if (st != HAP_OK)
      return fail_in(pr, op.chunk * pr->p + pr->my_group, st);
  }
  pr->op_start[n_ops] = hap_clock_s() - t0;
  for (int32_t c = 0; c < pr->v; c++) {
    pr->running = c * pr->p + pr->my_group;
    hap_status st = hap_run_stage_sync(pr->runner[c], err);
    if (st != HAP_OK)
      return fail_in(pr, pr->running, st);
  }
  pr->running = -1;
  if (!pr->skip_tied_sum)
    HAP_TRY(sum_tied(pr, err));
  bool skip = false;
  if (pr->pw->pipeline->policy.precision == HAP_PREC_FP16) { /* one decision for every stage */
    double mine = 0, any = 0;
    for (int32_t c = 0; c < pr->v; c++)
      mine = hap_run_stage_overflowed(pr->runner[c]) ? 1 : mine;
    HAP_TRY(pr->world->ops->all_reduce(pr->world, &mine, &any, 1, HAP_F64, HAP_REDUCE_MAX, err));
    skip = any > 0;
  }
  for (int32_t c = 0; c < pr->v; c++) {
    pr->running = c * pr->p + pr->my_group;
    hap_status st = hap_run_stage_update(pr->runner[c], skip, err);
    if (st != HAP_OK)
      return fail_in(pr, pr->running, st);
  }
  pr->running = -1;
  hap_status st = pr->world->ops->send_wait(pr->world, err);
  end_sends(pr);
  pr->op_end[n_ops] = hap_clock_s() - t0;
  return st;
}

/* ---- results ------------------------------------------------------------------------------- */

double hap_pipe_run_loss_part(const hap_pipe_run *pr) {
  double part = 0;
  for (int32_t c = 0; c < pr->v; c++)
    part += hap_run_loss_part(pr->runner[c]);
  return part;
}

hap_status hap_pipe_run_loss(hap_pipe_run *pr, double *loss, hap_err *err) {
  double part = hap_pipe_run_loss_part(pr);
  return pr->world->ops->all_reduce(pr->world, &part, loss, 1, HAP_F64, HAP_REDUCE_SUM, err);
}

hap_run_steps hap_pipe_run_steps_taken(const hap_pipe_run *pr) {
  return hap_run_steps_taken(pr->runner[0]);
}

hap_status hap_pipe_run_gather_copies(hap_pipe_run *pr, int32_t tensor, hap_run_quantity q,
                                      hap_run_copies *out, hap_err *err) {
  const hap_pipe_lowered *pw = pr->pw;
  hap_box box;
  memset(&box, 0, sizeof box);
  box.rank = tensor >= 0 && tensor < pw->graph->n_tensors ? pw->graph->tensors[tensor].shape.rank
                                                          : 0; /* empty */
  const float *data = NULL;
  bool held = false;
  for (int32_t c = 0; c < pr->v && !held; c++) {
    const hap_pipe_lowered_stage *ls = &pw->stages[c * pr->p + pr->my_group];
    int32_t t = ls->sg != NULL
                    ? (tensor >= 0 && tensor < pw->graph->n_tensors ? ls->sg->stage_of[tensor] : -1)
                    : tensor;
    held = t >= 0 && hap_run_local_copy(pr->runner[c], t, q, &box, &data, err);
    if (held && data == NULL)
      return HAP_ENOMEM;
  }
  float none = 0;
  return hap_run_gather_copy_of(pr->world, &box, held ? data : &none, out, err);
}

int32_t hap_pipe_run_stage_running(const hap_pipe_run *pr) { return (int32_t)pr->running; }

const char *hap_pipe_run_failed(const hap_pipe_run *pr) {
  return pr->failed_stage >= 0 ? pr->failed : NULL;
}

const double *hap_pipe_run_task_times(const hap_pipe_run *pr, int32_t stage, const double **end_s,
                                      int32_t *n_tasks) {
  *end_s = NULL;
  *n_tasks = 0;
  if (stage < 0 || stage >= pr->pw->n_stages || stage % pr->p != pr->my_group)
    return NULL;
  int32_t c = stage / pr->p;
  *end_s = pr->end[c];
  *n_tasks = pr->pw->stages[stage].lw->n_tasks;
  return pr->start[c];
}

double hap_pipe_run_busy_s(const hap_pipe_run *pr) {
  double busy = 0;
  for (int32_t c = 0; c < pr->v; c++) {
    const hap_pipe_lowered_stage *ls = &pr->pw->stages[c * pr->p + pr->my_group];
    for (int32_t t = 0; t < ls->lw->n_tasks; t++)
      if (ls->part[t] != HAP_PIPE_PART_TAIL)
        busy += pr->end[c][t] - pr->start[c][t];
  }
  return busy;
}

const double *hap_pipe_run_op_times(const hap_pipe_run *pr, const double **end_s, int32_t *n) {
  *n = hap_pipe_order_n_ops(pr->pw->order, pr->my_group) + 1;
  *end_s = pr->op_end;
  return pr->op_start;
}
