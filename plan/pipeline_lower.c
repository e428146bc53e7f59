/* pipeline_lower.c — a pipelined plan lowered: the stages' programs on one micro-batch, their
 * tasks sorted into parts, and the boundary transfers between stages (pipeline_lower.h). */
#include "plan/pipeline_lower.h"

#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "plan/replica.h"

static const char *const part_names[HAP_PIPE_PART_COUNT] = {"fwd", "loss", "bwd", "tail"};

const char *hap_pipe_part_name(hap_pipe_part p) {
  return (unsigned)p < HAP_PIPE_PART_COUNT ? part_names[p] : "?";
}

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "pipeline lowering: out of memory");
}

void hap_pipe_lowered_destroy(hap_pipe_lowered *pw) {
  if (pw == NULL)
    return;
  for (int32_t k = 0; k < pw->n_stages && pw->stages != NULL; k++) {
    hap_pipe_lowered_stage *s = &pw->stages[k];
    hap_lowered_destroy(s->lw);
    hap_graph_destroy(s->micro);
    hap_plan_destroy(s->plan);
    hap_cluster_destroy(s->gc);
    hap_stage_graph_destroy(s->sg);
    free(s->part);
  }
  free(pw->stages);
  hap_pipe_order_destroy(pw->order);
  free(pw->xfers);
  free(pw->pairs);
  free(pw);
}

/* ---- a stage's program and its parts -------------------------------------------------------- */

/* Is stage tensor t part of the stage loss (made for it, or the received gradient)? */
static bool loss_tensor(const hap_pipe_lowered_stage *s, int32_t t) {
  return s->sg != NULL && t >= 0 && s->sg->whole_of[t] < 0;
}

static hap_pipe_part part_of(const hap_pipe_lowered_stage *s, int32_t t) {
  const hap_lowered *lw = s->lw;
  const hap_task *k = &lw->tasks[t];
  if (k->phase == HAP_PHASE_UPD)
    return HAP_PIPE_PART_TAIL;
  if (k->phase == HAP_PHASE_BWD) {
    if (!hap_lowered_is_grad_sync(lw, t))
      return HAP_PIPE_PART_BWD;
    /* a ZeRO parameter's reduce-scatter runs every micro-batch; the rest once */
    const hap_step *st = &lw->plan->steps[k->step];
    bool zero_rs =
        k->span == HAP_SPAN_GROUP && st->kind == HAP_STEP_SOURCE && st->storage == HAP_STORE_ZERO;
    return zero_rs ? HAP_PIPE_PART_BWD : HAP_PIPE_PART_TAIL;
  }
  if (k->kind == HAP_TASK_COMPUTE) {
    const hap_node *n = &s->graph->nodes[k->node];
    return n->n_outputs > 0 && loss_tensor(s, n->outputs[0]) ? HAP_PIPE_PART_LOSS
                                                             : HAP_PIPE_PART_FWD;
  }
  return loss_tensor(s, k->tensor) ? HAP_PIPE_PART_LOSS : HAP_PIPE_PART_FWD;
}

static hap_status lower_stage(hap_pipe_lowered *pw, int32_t k, hap_err *err) {
  const hap_pipeline *pl = pw->pipeline;
  hap_pipe_lowered_stage *s = &pw->stages[k];
  HAP_TRY(hap_pipeline_stage_context(pl, k, pw->graph, pw->cluster, &s->sg, &s->gc, err));
  const hap_graph *whole = s->sg ? s->sg->graph : pw->graph;
  s->cluster = s->gc ? s->gc : pw->cluster;
  int32_t n;
  s->devices = hap_pipeline_group(pl, pl->stages[k].group, &n);
  int32_t m = pl->policy.micro_batches;
  if (m > 1)
    HAP_TRY(hap_graph_split_batch(whole, m, &s->micro, err));
  s->graph = s->micro ? s->micro : whole;
  if ((s->plan = hap_plan_copy(pl->stages[k].plan)) == NULL)
    return oom(err);
  s->plan->policy.micro_batches = 1; /* each op runs one micro-batch */
  HAP_TRY(hap_lower(s->plan, s->graph, &s->lw, err));
  if ((s->part = malloc((size_t)(s->lw->n_tasks ? s->lw->n_tasks : 1))) == NULL)
    return oom(err);
  for (int32_t t = 0; t < s->lw->n_tasks; t++)
    s->part[t] = (uint8_t)part_of(s, t);
  return HAP_OK;
}

/* ---- boxes ---------------------------------------------------------------------------------- */

typedef hap_pipe_holding holding;
typedef hap_pipe_box box;

/* The box of stage tensor t that local device d holds in `h`, in the micro-batch's coordinates
 * (a 2-D plan's replica r holds slice r of dim 0 of a tensor its replica graph splits). */
static hap_status box_of(hap_pipe_lowered_stage *s, int32_t t, holding h, int32_t d, box *out,
                         hap_err *err) {
  hap_lowered *lw = s->lw;
  const hap_shape *full = &s->graph->tensors[t].shape;
  const hap_shape *local = &lw->local_graph->tensors[t].shape;
  out->rank = full->rank;
  for (int i = 0; i < full->rank; i++) {
    out->lo[i] = 0;
    out->hi[i] = full->dims[i];
  }
  if (lw->replicas > 1 && full->rank > 0 && local->dims[0] * lw->replicas == full->dims[0]) {
    int32_t r = d / lw->group_size;
    out->lo[0] = r * local->dims[0];
    out->hi[0] = out->lo[0] + local->dims[0];
  }
  if (h.layout < 0 || h.layout >= full->rank)
    return HAP_OK; /* Identity or Reduce: the whole (replica's) box */
  int64_t extent = local->dims[h.layout];
  const int64_t *len = hap_lowered_lengths(lw, extent, h.granule > 1 ? h.granule : 1, h.segment);
  if (len == NULL)
    return oom(err);
  int64_t off = out->lo[h.layout]; /* a replica's slice of dim 0, else 0 */
  int32_t i = d % lw->group_size;
  for (int32_t j = 0; j < i; j++)
    off += len[j];
  out->lo[h.layout] = off;
  out->hi[h.layout] = off + len[i];
  return HAP_OK;
}

/* Elements of a ∩ b, the intersection in *x. */
static int64_t overlap(const box *a, const box *b, box *x) {
  int64_t v = 1;
  x->rank = a->rank;
  for (int i = 0; i < a->rank; i++) {
    x->lo[i] = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
    x->hi[i] = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];
    if (x->hi[i] <= x->lo[i])
      return 0;
    v *= x->hi[i] - x->lo[i];
  }
  return v;
}

static bool same_box(const box *a, const box *b) {
  for (int i = 0; i < a->rank; i++)
    if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i])
      return false;
  return true;
}

/* The layout stage tensor t is sourced in (its source step), or false. */
static bool sourced(const hap_lowered *lw, int32_t t, holding *h) {
  for (int32_t i = 0; i < lw->plan->n_steps; i++) {
    const hap_step *st = &lw->plan->steps[i];
    if (st->kind == HAP_STEP_SOURCE && st->tensor == t) {
      *h = (holding){st->to, st->segment, st->granule};
      return true;
    }
  }
  return false;
}

/* The layout the producing stage sends t from: the one the receiver wants when the stage makes
 * it, else the first it makes that is not a partial sum, else a partial sum. */
static bool made(const hap_pipe_lowered_stage *s, int32_t t, holding want, holding *h) {
  const hap_lowered *lw = s->lw;
  bool found = false;
  for (int32_t i = 0; i < lw->plan->n_steps; i++) {
    const hap_step *st = &lw->plan->steps[i];
    holding got;
    if (st->kind == HAP_STEP_COMM && st->tensor == t) {
      got = (holding){st->to, st->segment, st->granule};
    } else if (st->kind == HAP_STEP_COMPUTE) {
      const hap_node *n = &s->graph->nodes[st->node];
      int o = 0;
      while (o < n->n_outputs && n->outputs[o] != t)
        o++;
      if (o == n->n_outputs)
        continue;
      got = (holding){st->variant.out[o], st->segment, st->variant.granule};
    } else {
      continue;
    }
    if (got.layout == want.layout &&
        (got.layout < 0 || (got.segment == want.segment && got.granule == want.granule))) {
      *h = got;
      return true;
    }
    if (!found || (h->layout == HAP_LAYOUT_REDUCE && got.layout != HAP_LAYOUT_REDUCE)) {
      *h = got;
      found = true;
    }
  }
  return found;
}

typedef struct builder {
  hap_pipe_lowered *pw;
  int32_t cap_xfers, cap_pairs;
  box *src_boxes; /* scratch: one per sender */
} builder;

static hap_status push_pair(builder *b, int32_t src, int32_t dst, double bytes, const box *x,
                            hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  if (HAP_VEC_RESERVE(pw->pairs, b->cap_pairs, pw->n_pairs + 1, 64) != 0)
    return oom(err);
  pw->pairs[pw->n_pairs++] = (hap_pipe_pair){src, dst, bytes, *x};
  return HAP_OK;
}

/* The pairs of one transfer of stage tensors (ts in the sending stage a, td in the receiving
 * stage bb) from `hs` to `hd`; `partial`: every sender's box is a partial sum (all send). */
static hap_status add_pairs(builder *b, int32_t a, int32_t ts, holding hs, bool partial, int32_t bb,
                            int32_t td, holding hd, hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  hap_pipe_lowered_stage *sa = &pw->stages[a], *sb = &pw->stages[bb];
  int32_t na = sa->lw->n_devices, nb = sb->lw->n_devices;
  double elem = (double)hap_dtype_size(sa->lw->priced_graph->tensors[ts].dtype);
  box *src = b->src_boxes;
  for (int32_t i = 0; i < na; i++)
    HAP_TRY(box_of(sa, ts, hs, i, &src[i], err));
  for (int32_t j = 0; j < nb; j++) {
    box want;
    HAP_TRY(box_of(sb, td, hd, j, &want, err));
    for (int32_t i = 0; i < na; i++) {
      box x;
      int64_t v = overlap(&src[i], &want, &x);
      if (v == 0)
        continue;
      int32_t from = i;
      if (!partial) { /* one sender per distinct box: the (j mod k)-th */
        bool first = true;
        for (int32_t q = 0; q < i && first; q++)
          first = !same_box(&src[q], &src[i]);
        if (!first)
          continue;
        int32_t k = 0;
        for (int32_t q = i; q < na; q++)
          k += same_box(&src[q], &src[i]);
        for (int32_t q = i, pick = j % k; q < na; q++)
          if (same_box(&src[q], &src[i]) && pick-- == 0) {
            from = q;
            break;
          }
      }
      HAP_TRY(push_pair(b, sa->devices[from], sb->devices[j], (double)v * elem, &x, err));
    }
  }
  return HAP_OK;
}

/* The longest dim of stage tensor t (in lw's replica graph) that splits over the group, or -1. */
static int longest_dim(const hap_lowered *lw, int32_t t) {
  const hap_shape *sh = &lw->local_graph->tensors[t].shape;
  int d = -1;
  for (int i = 0; i < sh->rank; i++)
    if (sh->dims[i] >= lw->group_size && (d < 0 || sh->dims[i] > sh->dims[d]))
      d = i;
  return d;
}

static hap_status add_xfer(builder *b, int32_t tensor, bool gradient, int32_t from, int32_t to,
                           int32_t ts, holding hs, int32_t td, holding hd, hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  hap_pipe_xfer x = {.tensor = tensor,
                     .gradient = gradient,
                     .from_stage = from,
                     .to_stage = to,
                     .pair0 = pw->n_pairs,
                     .send_tensor = ts,
                     .recv_tensor = td,
                     .held = hs,
                     .wanted = hd,
                     .shard_dim = -1,
                     .gather_dim = -1};
  const hap_lowered *la = pw->stages[from].lw, *lb = pw->stages[to].lw;
  /* partial sums: a Reduce value, or the gradient of an input sourced whole on several devices
   * (the dual of Identity) */
  x.partial = hs.layout == HAP_LAYOUT_REDUCE ||
              (gradient && hs.layout == HAP_LAYOUT_IDENTITY && la->group_size > 1);
  int d = longest_dim(la, ts);
  if (x.partial && la->group_size > 1 && d >= 0) { /* reduce-scatter */
    x.reduce_scatter = true;
    x.shard_dim = d;
    x.shard_bytes = (double)hap_tensor_bytes(&la->priced_graph->tensors[ts]) / la->group_size;
    hs = (holding){(hap_layout)d, hs.segment, 1};
  }
  d = longest_dim(lb, td);
  if (hd.layout == HAP_LAYOUT_IDENTITY && lb->group_size > 1 && d >= 0) { /* then all-gather */
    x.all_gather = true;
    x.gather_dim = d;
    x.gather_shard_bytes =
        (double)hap_tensor_bytes(&lb->priced_graph->tensors[td]) / lb->group_size;
    hd = (holding){(hap_layout)d, hd.segment, 1};
  }
  HAP_TRY(add_pairs(b, from, ts, hs, x.partial && !x.reduce_scatter, to, td, hd, err));
  x.n_pairs = pw->n_pairs - x.pair0;
  if (HAP_VEC_RESERVE(pw->xfers, b->cap_xfers, pw->n_xfers + 1, 16) != 0)
    return oom(err);
  pw->xfers[pw->n_xfers++] = x;
  return HAP_OK;
}

/* Every boundary output of stage a: its value to each stage that sources it, and the gradient
 * back from each of those when a receives one. */
static hap_status stage_xfers(builder *b, int32_t a, hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  hap_pipe_lowered_stage *sa = &pw->stages[a];
  if (sa->sg == NULL)
    return HAP_OK;
  for (int32_t i = 0; i < sa->sg->n_out; i++) {
    int32_t x = sa->sg->boundary_out[i], ta = sa->sg->stage_of[x];
    for (int32_t bb = a + 1; bb < pw->n_stages; bb++) {
      hap_pipe_lowered_stage *sb = &pw->stages[bb];
      int32_t tb = sb->sg ? sb->sg->stage_of[x] : -1;
      holding want = {HAP_LAYOUT_IDENTITY, 0, 1}, from = want;
      if (tb < 0 || !sourced(sb->lw, tb, &want))
        continue;
      if (!made(sa, ta, want, &from))
        return hap_err_set(err, HAP_EINVAL,
                           "stages[%d]: boundary output '%s' is never made available", a,
                           pw->graph->tensors[x].name);
      HAP_TRY(add_xfer(b, x, false, a, bb, ta, from, tb, want, err));
      int32_t gin = sa->sg->grad_in[i];
      holding grad_want = {HAP_LAYOUT_IDENTITY, 0, 1};
      if (gin < 0 || !sourced(sa->lw, gin, &grad_want))
        continue;
      HAP_TRY(add_xfer(b, x, true, bb, a, tb, want, gin, grad_want, err));
    }
  }
  return HAP_OK;
}

hap_status hap_pipe_lower(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                          hap_pipe_lowered **out, hap_err *err) {
  *out = NULL;
  hap_pipe_lowered *pw = calloc(1, sizeof *pw);
  if (pw == NULL)
    return oom(err);
  pw->pipeline = pl;
  pw->graph = g;
  pw->cluster = c;
  pw->n_stages = pl->n_stages;
  hap_status st = hap_pipe_order_build(pl->schedule, pl->n_groups, pl->policy.micro_batches,
                                       pl->chunks, &pw->order, err);
  if (st == HAP_OK && (pw->stages = calloc((size_t)pl->n_stages, sizeof *pw->stages)) == NULL)
    st = oom(err);
  for (int32_t k = 0; k < pl->n_stages && st == HAP_OK; k++)
    if ((st = lower_stage(pw, k, err)) != HAP_OK)
      hap_err_prefix(err, "stages[%d]", k);
  builder b = {.pw = pw};
  if (st == HAP_OK && (b.src_boxes = malloc((size_t)c->n_devices * sizeof *b.src_boxes)) == NULL)
    st = oom(err);
  for (int32_t k = 0; k < pl->n_stages && st == HAP_OK; k++)
    st = stage_xfers(&b, k, err);
  free(b.src_boxes);
  if (st != HAP_OK) {
    hap_pipe_lowered_destroy(pw);
    return st;
  }
  *out = pw;
  return HAP_OK;
}

double hap_pipe_stage_memory(const hap_pipe_lowered *pw, int32_t k, int32_t d) {
  const hap_pipeline *pl = pw->pipeline;
  const hap_plan *sp = pl->stages[k].plan;
  if (!sp->memory_recorded || d < 0 || d >= sp->n_devices)
    return -1;
  double copies = (double)hap_pipe_order_in_flight(pw->order, pl->stages[k].group) / pl->chunks;
  hap_memory_breakdown mb = hap_memory_in_flight(&sp->device_memory[d], copies);
  return hap_memory_total(&mb);
}

bool hap_pipe_first_overflow(const hap_pipe_lowered *pw, double limit_bytes, int32_t *stage,
                             int32_t *device) {
  const hap_pipeline *pl = pw->pipeline;
  for (int32_t k = 0; k < pl->n_stages; k++) {
    int32_t n;
    const int32_t *dev = hap_pipeline_group(pl, pl->stages[k].group, &n);
    for (int32_t d = 0; d < n; d++) {
      double limit = limit_bytes > 0 ? limit_bytes : pw->cluster->devices[dev[d]].memory_bytes;
      if (hap_pipe_stage_memory(pw, k, d) > limit) {
        *stage = k;
        *device = d;
        return true;
      }
    }
  }
  return false;
}
