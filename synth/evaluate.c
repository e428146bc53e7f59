/* evaluate.c — the synthesizer's context and cost evaluator: every triple (source, computation,
 * communication) is priced with the cluster's cost queries at the integer shard lengths the
 * program will run with, forward + backward (dual collectives) + gradient synchronisation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/vec.h"
#include "plan/replica.h"
#include "synth_internal.h"

/* A cached result: kind COMM (a -> b), SOURCE (a) or MEMORY (a, stored as `storage`: its
 * per-class bytes at memo_vals + vals), each a function of the properties and the ratios only. */
enum { MEMO_EMPTY = 0, MEMO_COMM, MEMO_SOURCE, MEMO_MEMORY };

struct syn_memo_entry {
  syn_prop a, b;
  int kind;
  hap_comm_op op;
  hap_coll_impl impl;
  hap_storage storage; /* MEMORY: part of the key */
  hap_storage made;    /* SOURCE: the storage chosen */
  double t;            /* COMM, SOURCE: s */
  size_t vals;
};

static bool prop_same(const syn_prop *a, const syn_prop *b) {
  return a->tensor == b->tensor && a->layout == b->layout && a->segment == b->segment &&
         a->granule == b->granule;
}

static uint64_t memo_hash(int kind, const syn_prop *a, const syn_prop *b, int extra) {
  int64_t v[10] = {kind,      a->tensor, a->layout,  a->segment, a->granule,
                   b->tensor, b->layout, b->segment, b->granule, extra};
  uint64_t h = HAP_KEY_HASH_BASIS;
  for (int i = 0; i < 10; i++) {
    h = hap_fnv1a_word(h, (uint64_t)v[i]);
    h ^= h >> 29;
  }
  return h;
}

/* The entry for (kind, a, b, storage), or NULL when absent. */
static const syn_memo_entry *memo_get(const syn_ctx *x, int kind, const syn_prop *a,
                                      const syn_prop *b, hap_storage storage) {
  if (x->cap_memo == 0)
    return NULL;
  size_t mask = x->cap_memo - 1;
  for (size_t i = memo_hash(kind, a, b, (int)storage) & mask;; i = (i + 1) & mask) {
    const syn_memo_entry *e = &x->memo[i];
    if (e->kind == MEMO_EMPTY)
      return NULL;
    if (e->kind == kind && e->storage == storage && prop_same(&e->a, a) && prop_same(&e->b, b))
      return e;
  }
}

/* Insert a new entry (absent: memo_get returned NULL); NULL when memory runs out (the caller just
 * does not cache). */
static syn_memo_entry *memo_put(syn_ctx *x, int kind, const syn_prop *a, const syn_prop *b,
                                hap_storage storage) {
  if ((x->n_memo + 1) * 2 > x->cap_memo) {
    size_t cap = x->cap_memo ? 2 * x->cap_memo : 1024;
    syn_memo_entry *t = calloc(cap, sizeof *t);
    if (t == NULL)
      return NULL;
    for (size_t i = 0; i < x->cap_memo; i++) {
      const syn_memo_entry *e = &x->memo[i];
      if (e->kind == MEMO_EMPTY)
        continue;
      size_t j = memo_hash(e->kind, &e->a, &e->b, (int)e->storage) & (cap - 1);
      while (t[j].kind != MEMO_EMPTY)
        j = (j + 1) & (cap - 1);
      t[j] = *e;
    }
    free(x->memo);
    x->memo = t;
    x->cap_memo = cap;
  }
  size_t mask = x->cap_memo - 1;
  size_t i = memo_hash(kind, a, b, (int)storage) & mask;
  while (x->memo[i].kind != MEMO_EMPTY)
    i = (i + 1) & mask;
  syn_memo_entry *e = &x->memo[i];
  *e = (syn_memo_entry){.a = *a, .b = *b, .kind = kind, .storage = storage};
  x->n_memo++;
  return e;
}

static void memo_clear(syn_ctx *x) {
  if (x->n_memo > 0)
    memset(x->memo, 0, x->cap_memo * sizeof *x->memo);
  x->n_memo = 0;
  x->n_memo_vals = 0;
}

static bool same_device_spec(const hap_device *a, const hap_device *b) {
  for (int t = 0; t < HAP_DTYPE_COUNT; t++)
    if (a->sustained_flops[t] != b->sustained_flops[t])
      return false;
  return strcmp(a->model, b->model) == 0 && a->memory_bw_Bps == b->memory_bw_Bps &&
         a->update_bw_Bps == b->update_bw_Bps && a->launch_s == b->launch_s && a->n_gemm == 0 &&
         b->n_gemm == 0 && a->n_kernels == 0 && b->n_kernels == 0;
}

static void clear_lengths(syn_ctx *x) {
  hap_shard_cache_clear(&x->lengths);
  memo_clear(x);
}

void syn_ctx_free(syn_ctx *x) {
  clear_lengths(x);
  hap_shard_cache_free(&x->lengths);
  free(x->memo);
  free(x->memo_vals);
  free(x->ratios);
  free(x->nodes);
  free(x->last_use);
  free(x->n_uses);
  free(x->h_suffix);
  free(x->avail);
  free(x->h_window);
  free(x->dev_class);
  free(x->mem_limit);
  free(x->mem_scratch);
  free(x->class_scratch);
  free(x->state);
  free(x->scope_start);
  hap_recompute_map_free(&x->rmap);
  memset(x, 0, sizeof *x);
}

/* Recomputation scopes: a node starts one when its layer differs from the previous node's. */
static void set_scopes(syn_ctx *x) {
  for (int32_t k = 0; k < x->g->n_nodes; k++)
    x->scope_start[k] = k == 0 || x->rmap.layer[k] != x->rmap.layer[k - 1];
}

hap_status syn_ctx_set_policy(syn_ctx *x, const hap_train_policy *pol, int32_t replicas,
                              hap_err *err) {
  hap_train_policy p = *pol;
  if (p.micro_batches == 0)
    p.micro_batches = 1;
  HAP_TRY(hap_policy_check(&p, err));
  x->pol = p;
  x->plain = hap_policy_is_default(&p);
  x->micro = p.micro_batches;
  x->replicas = replicas > 1 ? replicas : 1;
  /* a gradient reduction moves the gradient's bytes: the policy's for mixed precision, the
   * graph's own dtype (x->g is already in the compute precision) for fp32 */
  x->grad_scale = p.precision == HAP_PREC_FP32 || p.grad_accum == HAP_GRAD_HALF
                      ? 1
                      : hap_policy_grad_comm_bytes(&p) / 2;
  hap_recompute_map_free(&x->rmap);
  HAP_TRY(hap_recompute_map_build(x->g, p.recompute, &x->rmap, err));
  set_scopes(x);
  x->n_mem = x->rmap.n_dropped > 0 ? 3 : 1;
  x->h_window_ready = false;
  clear_lengths(x);
  return HAP_OK;
}

/* Which variants a strategy may use. Data parallelism: hap_variant_is_data_parallel (replica.h).
 * Megatron-style tensor parallelism inside a replica: any variant that does not split an
 * activation along its batch dim (dim 0), since the batch is split across replicas instead;
 * parameters may be whole or sharded (column-, row-, head-, vocab-parallel). */
/* The graph's sequence length: dim 1 of its first input of rank >= 2 ([batch, seq] tokens, a
 * stage's [batch, seq, width] boundary), or 0 when it has none. */
static int64_t sequence_extent(const hap_graph *g) {
  for (int32_t t = 0; t < g->n_tensors; t++)
    if (g->tensors[t].kind == HAP_TENSOR_INPUT && g->tensors[t].shape.rank >= 2)
      return g->tensors[t].shape.dims[1];
  return 0;
}

/* An activation of the sequence-parallel regions: rank >= 3, dim 1 the sequence. */
static bool seq_activation(const hap_graph *g, int32_t t, const bool *state, int64_t seq) {
  const hap_shape *s = &g->tensors[t].shape;
  return seq > 0 && !state[t] && s->rank >= 3 && s->dims[1] == seq;
}

/* Sequence parallelism on: no sequence activation computed whole on every device; off: none
 * split along the sequence. */
static bool sp_allows(const syn_ctx *x, int32_t k, const hap_variant *v, const bool *state,
                      hap_seq_parallel sp, int64_t seq) {
  const hap_node *node = &x->g->nodes[k];
  for (int o = 0; o < node->n_outputs; o++) {
    if (!seq_activation(x->g, node->outputs[o], state, seq))
      continue;
    if ((sp == HAP_SP_ON && v->out[o] == HAP_LAYOUT_IDENTITY) ||
        (sp == HAP_SP_OFF && v->out[o] == 1))
      return false;
  }
  for (int i = 0; i < node->n_inputs && sp == HAP_SP_OFF; i++)
    if (seq_activation(x->g, node->inputs[i], state, seq) && v->in[i] == 1)
      return false;
  return true;
}

static bool strategy_allows(const syn_ctx *x, int32_t k, const hap_variant *v, const bool *state,
                            hap_seq_parallel sp, int64_t seq) {
  if (x->strategy == HAP_STRATEGY_HAP || x->strategy == HAP_STRATEGY_ALPA)
    return true;
  if (x->strategy != HAP_STRATEGY_MEGATRON_TP)
    return hap_variant_is_data_parallel(x->g, k, v, state);
  const hap_node *node = &x->g->nodes[k];
  for (int i = 0; i < node->n_inputs; i++)
    if (!state[node->inputs[i]] && v->in[i] == 0)
      return false;
  for (int o = 0; o < node->n_outputs; o++)
    if (!state[node->outputs[o]] && v->out[o] == 0)
      return false;
  return sp == HAP_SP_FREE || sp_allows(x, k, v, state, sp, seq);
}

hap_status syn_ctx_init(syn_ctx *x, const hap_graph *g, const hap_cluster *c, hap_strategy s,
                        hap_seq_parallel sp, double memory_limit, hap_err *err) {
  memset(x, 0, sizeof *x);
  x->g = g;
  x->c = c;
  x->strategy = s;
  x->n = c->n_devices;
  x->n_segments = g->n_segments;
  x->ratios = calloc((size_t)x->n_segments * (size_t)x->n, sizeof *x->ratios);
  hap_shard_cache_init(&x->lengths, x->ratios, x->n_segments, x->n);
  x->nodes = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *x->nodes);
  x->last_use = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *x->last_use);
  x->n_uses = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *x->n_uses);
  x->h_suffix = calloc((size_t)g->n_nodes + 1, sizeof *x->h_suffix);
  x->h_window = calloc((size_t)g->n_nodes + 1, sizeof *x->h_window);
  x->avail = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *x->avail);
  x->dev_class = calloc((size_t)x->n, sizeof *x->dev_class);
  x->state = calloc(g->n_tensors > 0 ? (size_t)g->n_tensors : 1, sizeof *x->state);
  x->scope_start = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *x->scope_start);
  x->pol = hap_policy_default();
  x->plain = true;
  x->micro = 1;
  x->replicas = 1;
  x->grad_scale = 1;
  x->act_copies = 1;
  x->n_mem = 1;
  int32_t *ranks = malloc((size_t)x->n * sizeof *ranks);
  if (!x->ratios || !x->nodes || !x->last_use || !x->n_uses || !x->h_suffix || !x->h_window ||
      !x->avail || !x->dev_class || !x->state || !x->scope_start || !ranks) {
    free(ranks);
    syn_ctx_free(x);
    return hap_err_set(err, HAP_ENOMEM, "out of memory setting up the synthesizer");
  }
  for (int32_t i = 0; i < x->n; i++) {
    ranks[i] = i;
    x->dev_class[i] = -1;
    for (int32_t j = 0; j < i && x->dev_class[i] < 0; j++)
      if (same_device_spec(&c->devices[i], &c->devices[j]))
        x->dev_class[i] = x->dev_class[j];
    if (x->dev_class[i] < 0)
      x->dev_class[i] = x->n_classes++;
  }
  x->mem_limit = calloc((size_t)x->n_classes, sizeof *x->mem_limit);
  x->mem_scratch = malloc((size_t)x->n * sizeof *x->mem_scratch);
  x->class_scratch = malloc((size_t)x->n_classes * sizeof *x->class_scratch);
  if (!x->mem_limit || !x->mem_scratch || !x->class_scratch) {
    free(ranks);
    syn_ctx_free(x);
    return hap_err_set(err, HAP_ENOMEM, "out of memory setting up the synthesizer");
  }
  for (int32_t k = 0; k < x->n_classes; k++)
    x->mem_limit[k] = HUGE_VAL;
  for (int32_t i = 0; i < x->n; i++) {
    double lim = memory_limit > 0 ? memory_limit : c->devices[i].memory_bytes;
    x->mem_limit[x->dev_class[i]] = fmin(x->mem_limit[x->dev_class[i]], lim);
  }
  hap_status st = hap_group_init(c, ranks, x->n, &x->world, err);
  free(ranks);
  if (st != HAP_OK) {
    syn_ctx_free(x);
    return st;
  }
  for (int32_t t = 0; t < g->n_tensors; t++) {
    x->last_use[t] = -1;
    x->avail[t] = -1;
  }
  if ((st = hap_recompute_map_build(g, HAP_RECOMPUTE_NONE, &x->rmap, err)) != HAP_OK) {
    syn_ctx_free(x);
    return st;
  }
  set_scopes(x);
  bool *state = x->state;
  hap_graph_state_tensors(g, state);
  int64_t seq = sequence_extent(g);
  for (int32_t k = 0; k < g->n_nodes; k++) {
    syn_node *sn = &x->nodes[k];
    hap_graph_node_io(g, k, &sn->io);
    sn->segment = g->nodes[k].segment;
    sn->n_variants = hap_op_variants(g->nodes[k].op, &sn->io, sn->variants, HAP_MAX_VARIANTS);
    bool any = false;
    for (int v = 0; v < sn->n_variants; v++) {
      sn->allowed[v] = strategy_allows(x, k, &sn->variants[v], state, sp, seq);
      any = any || sn->allowed[v];
    }
    if (!any) {
      st = hap_err_set(err, HAP_EUNSUPPORTED, "node '%s' (%s) has no %s variant%s",
                       g->nodes[k].name, hap_op_name(g->nodes[k].op), hap_strategy_name(s),
                       sp == HAP_SP_ON    ? " with sequence parallelism"
                       : sp == HAP_SP_OFF ? " without sequence parallelism"
                                          : "");
      syn_ctx_free(x);
      return st;
    }
    for (int o = 0; o < g->nodes[k].n_outputs; o++)
      x->avail[g->nodes[k].outputs[o]] = k;
    for (int i = 0; i < g->nodes[k].n_inputs; i++) {
      int32_t t = g->nodes[k].inputs[i];
      if (x->avail[t] < 0)
        x->avail[t] = k; /* a source enters the states with its first consumer */
      bool repeat = false;
      for (int j = 0; j < i; j++)
        repeat = repeat || g->nodes[k].inputs[j] == t;
      x->last_use[t] = k;
      if (!repeat)
        x->n_uses[t]++;
    }
  }
  x->last_use[g->loss] = g->n_nodes;
  return HAP_OK;
}

bool syn_same_split(const syn_ctx *x, int32_t a, int32_t b) {
  return hap_ratio_rows_same(x->ratios, x->n_segments, x->n, a, b);
}

const int64_t *syn_lengths(syn_ctx *x, int64_t extent, int64_t granule, int32_t seg) {
  return hap_shard_cache_get(&x->lengths, extent, granule, seg);
}

double syn_node_policy_time(const syn_ctx *x, int32_t k, double fwd_s, double bwd_s) {
  double t = fwd_s + bwd_s;
  if (x->plain)
    return t;
  if (x->rmap.recomputed[k])
    t += fwd_s; /* the forward again inside the backward */
  return t * x->micro;
}

double syn_node_launches(const syn_ctx *x, int32_t k) {
  if (x->plain)
    return 2;
  return (x->rmap.recomputed[k] ? 3 : 2) * (double)x->micro;
}

void syn_comm_weights(const syn_ctx *x, int32_t t, double *fwd, double *bwd) {
  *fwd = *bwd = 1;
  if (x->plain)
    return;
  double k = x->state[t] ? 1 : x->micro; /* state is communicated once, batches per micro-batch */
  *fwd = k * (x->rmap.dropped[t] ? 2 : 1);
  *bwd = k;
}

double syn_node_time(syn_ctx *x, int32_t k, int v, double *per_device) {
  const syn_node *sn = &x->nodes[k];
  const hap_variant *var = &sn->variants[v];
  hap_op op = x->g->nodes[k].op;
  int64_t extent = hap_variant_extent(&sn->io, var);
  const int64_t *len = extent > 0 ? syn_lengths(x, extent, var->granule, sn->segment) : NULL;
  if (extent > 0 && len == NULL)
    return HUGE_VAL;
  /* Devices of one class holding the same length take the same time: price each pair once. */
  enum { MEMO = 16 };
  int32_t memo_class[MEMO];
  int64_t memo_len[MEMO];
  double memo_t[MEMO];
  int n_memo = 0;
  double worst = 0;
  for (int32_t i = 0; i < x->n; i++) {
    int64_t l = len ? len[i] : -1;
    double t = -1;
    for (int m = 0; m < n_memo; m++)
      if (memo_class[m] == x->dev_class[i] && memo_len[m] == l)
        t = memo_t[m];
    if (t < 0) {
      if (l == 0) {
        t = 0; /* nothing of this op lands on the device */
      } else if (l < 0) {
        t = syn_node_policy_time(x, k, hap_compute_time(x->c, i, op, &sn->io, false),
                                 hap_compute_time(x->c, i, op, &sn->io, true));
      } else {
        hap_attrs attrs;
        hap_op_io local;
        if (hap_op_local_io(op, &sn->io, var, l, &attrs, &local, NULL) != HAP_OK)
          return HUGE_VAL;
        t = syn_node_policy_time(x, k, hap_compute_time(x->c, i, op, &local, false),
                                 hap_compute_time(x->c, i, op, &local, true));
      }
      if (n_memo < MEMO) {
        memo_class[n_memo] = x->dev_class[i];
        memo_len[n_memo] = l;
        memo_t[n_memo++] = t;
      }
    }
    if (per_device)
      per_device[i] = t;
    if (t > worst)
      worst = t;
  }
  return worst;
}

/* The least any program pays to have parameter p->tensor as *p: sourced so directly, or sourced in
 * another layout and communicated once. */
static double param_bound(syn_ctx *x, const syn_prop *p) {
  hap_storage st;
  double best = syn_source_time(x, p, &st);
  const hap_tensor *t = &x->g->tensors[p->tensor];
  for (int l = -1; l < t->shape.rank; l++) {
    syn_prop from = {p->tensor, (hap_layout)l, l >= 0 ? p->segment : 0, 1};
    if (from.layout == p->layout && from.granule == p->granule)
      continue;
    double src = syn_source_time(x, &from, &st);
    hap_comm_op op;
    hap_coll_impl impl;
    if (isfinite(src))
      best = fmin(best, src + syn_comm_time(x, &from, p, &op, &impl));
  }
  return best;
}

hap_status syn_set_ratios(syn_ctx *x, const double *ratios, hap_err *err) {
  memcpy(x->ratios, ratios, (size_t)x->n_segments * (size_t)x->n * sizeof *ratios);
  clear_lengths(x);
  x->h_window_ready = false;
  const hap_graph *g = x->g;
  for (int32_t k = 0; k < g->n_nodes; k++) {
    syn_node *sn = &x->nodes[k];
    for (int v = 0; v < sn->n_variants; v++)
      sn->sfb_s[v] = NAN;
    for (int v = 0; v < sn->n_variants; v++) {
      sn->cost_s[v] = sn->allowed[v] ? syn_node_time(x, k, v, NULL) : HUGE_VAL;
      if (isnan(sn->cost_s[v]))
        return hap_err_set(err, HAP_EINVAL, "node '%s': variant %s costs NaN", g->nodes[k].name,
                           sn->variants[v].name);
      sn->bound_s[v] = sn->cost_s[v];
      const hap_variant *var = &sn->variants[v];
      for (int i = 0; i < g->nodes[k].n_inputs && isfinite(sn->bound_s[v]); i++) {
        int32_t t = g->nodes[k].inputs[i];
        if (g->tensors[t].kind != HAP_TENSOR_PARAMETER || x->n_uses[t] != 1)
          continue;
        syn_prop p = {t, var->in[i], var->in[i] >= 0 ? sn->segment : 0,
                      var->in[i] >= 0 ? var->granule : 1};
        double src = param_bound(x, &p);
        if (i == 1)
          src = fmin(src, syn_sfb_time(x, k, v));
        if (isfinite(src))
          sn->bound_s[v] += src;
      }
    }
  }
  x->h_suffix[g->n_nodes] = 0;
  for (int32_t k = g->n_nodes - 1; k >= 0; k--) {
    double best = HUGE_VAL;
    for (int v = 0; v < x->nodes[k].n_variants; v++)
      best = fmin(best, x->nodes[k].bound_s[v]);
    x->h_suffix[k] = x->h_suffix[k + 1] + (isfinite(best) ? best : 0);
  }
  return HAP_OK;
}

void syn_bytes(syn_ctx *x, const syn_prop *p, double *per_rank) {
  const hap_tensor *t = &x->g->tensors[p->tensor];
  double full = (double)hap_tensor_bytes(t);
  if (p->layout < 0) {
    for (int32_t i = 0; i < x->n; i++)
      per_rank[i] = full;
    return;
  }
  int64_t extent = t->shape.dims[p->layout];
  const int64_t *len = syn_lengths(x, extent, p->granule, p->segment);
  for (int32_t i = 0; i < x->n; i++)
    per_rank[i] = len ? full * (double)len[i] / (double)extent : full / x->n;
}

static void prop_memory(syn_ctx *x, const syn_prop *p, hap_storage storage, double *mem,
                        double *per_class);

void syn_prop_memory(syn_ctx *x, const syn_prop *p, hap_storage storage, double *mem,
                     double *per_class) {
  if (mem != NULL || per_class == NULL) {
    prop_memory(x, p, storage, mem, per_class);
    return;
  }
  static const syn_prop none = {-1, 0, 0, 0};
  size_t nc = (size_t)x->n_classes;
  const syn_memo_entry *e = memo_get(x, MEMO_MEMORY, p, &none, storage);
  if (e == NULL) {
    if (x->n_memo_vals + nc > x->cap_memo_vals) {
      int64_t cap = hap_vec_next_cap((int64_t)x->cap_memo_vals, (int64_t)(x->n_memo_vals + nc),
                                     64 * (int64_t)nc, INT64_MAX);
      double *v = hap_vec_realloc(x->memo_vals, cap, sizeof *v);
      if (v == NULL) {
        prop_memory(x, p, storage, NULL, per_class);
        return;
      }
      x->memo_vals = v;
      x->cap_memo_vals = (size_t)cap;
    }
    double *vals = x->memo_vals + x->n_memo_vals;
    memset(vals, 0, nc * sizeof *vals);
    prop_memory(x, p, storage, NULL, vals);
    syn_memo_entry *put = memo_put(x, MEMO_MEMORY, p, &none, storage);
    if (put != NULL) {
      put->vals = x->n_memo_vals;
      x->n_memo_vals += nc;
    }
    e = put;
    if (e == NULL) {
      for (size_t c = 0; c < nc; c++)
        per_class[c] += vals[c];
      return;
    }
  }
  const double *vals = x->memo_vals + e->vals;
  for (size_t c = 0; c < nc; c++)
    per_class[c] += vals[c];
}

/* How many devices hold a copy of what a parameter's source puts on each (its data-parallel
 * degree, which ZeRO divides by): every device of the group for a replicated parameter, times
 * the 2-D replicas. */
static double copies(const syn_ctx *x, const syn_prop *p, hap_storage storage) {
  bool whole = (storage == HAP_STORE_REPLICATED || storage == HAP_STORE_SFB) && p->layout < 0;
  return (whole ? (double)x->n : 1) * x->replicas;
}

hap_memory_breakdown syn_prop_rates(const syn_ctx *x, const syn_prop *p, hap_storage storage) {
  const hap_tensor *t = &x->g->tensors[p->tensor];
  hap_memory_breakdown r = {0};
  if (t->kind == HAP_TENSOR_BUFFER) {
    r.parameters = 1;
  } else if (t->kind != HAP_TENSOR_PARAMETER) {
    r.activations = 1;
  } else if (storage == HAP_STORE_INPUT || x->plain) {
    /* a communicated copy (or the default policy): the value and its gradient as the kernels
     * hold them */
    r.parameters = 1;
    r.gradients = 1;
  } else {
    /* a source: what the policy stores per element, over the element's bytes in g */
    double size = hap_dtype_size(t->dtype);
    hap_param_bytes b = hap_policy_param_bytes_zero(&x->pol, 1);
    if (x->pol.precision == HAP_PREC_FP32) /* fp32 keeps the graph's own dtype */
      b.weights = b.grads = size;
    double n_d = copies(x, p, storage);
    if (n_d > 1) {
      if (x->pol.zero >= 1)
        b.optimizer /= n_d;
      if (x->pol.zero >= 2)
        b.grads /= n_d;
      if (x->pol.zero >= 3)
        b.weights /= n_d;
    }
    r.parameters = b.weights / size;
    r.gradients = b.grads / size;
    r.optimizer = b.optimizer / size;
  }
  return r;
}

/* The shard of a ZeRO-stored parameter on every device, bytes: along dim 0 by the first
 * segment's ratios (what the executor holds); with a policy an even split of the flattened
 * tensor, as DeepSpeed partitions it (dim 0 may be shorter than the devices: in_proj [3, D, D]). */
static void zero_bytes(syn_ctx *x, int32_t tensor, double *b) {
  if (x->plain) {
    syn_prop shard = {tensor, 0, 0, 1};
    syn_bytes(x, &shard, b);
    return;
  }
  double full = (double)hap_tensor_bytes(&x->g->tensors[tensor]);
  for (int32_t i = 0; i < x->n; i++)
    b[i] = full / x->n;
}

/* Bytes of tensor p on every device (x->mem_scratch) as the storage holds them. */
static double *held(syn_ctx *x, const syn_prop *p, hap_storage storage) {
  const hap_tensor *t = &x->g->tensors[p->tensor];
  double *b = x->mem_scratch;
  if (t->kind == HAP_TENSOR_PARAMETER && storage == HAP_STORE_ZERO)
    zero_bytes(x, p->tensor, b); /* the gathered copy is transient */
  else
    syn_bytes(x, p, b);
  return b;
}

static double rate_total(const hap_memory_breakdown *r, double b) {
  return r->parameters * b + r->gradients * b + r->optimizer * b + r->activations * b;
}

/* How many micro-batches' copies of tensor t a device keeps: x->act_copies for a kept
 * activation, one for what is recomputed (the working set is one layer's, once) and for state. */
double syn_act_copies(const syn_ctx *x, int32_t t) {
  return x->n_mem > 1 && x->rmap.dropped[t] ? 1 : x->act_copies;
}

static void prop_memory(syn_ctx *x, const syn_prop *p, hap_storage storage, double *mem,
                        double *per_class) {
  hap_memory_breakdown r = syn_prop_rates(x, p, storage);
  r.activations *= syn_act_copies(x, p->tensor);
  const double *b = held(x, p, storage);
  if (per_class != NULL)
    for (int32_t c = 0; c < x->n_classes; c++)
      x->class_scratch[c] = 0;
  for (int32_t i = 0; i < x->n; i++) {
    double v = rate_total(&r, b[i]);
    if (mem != NULL)
      mem[i] += v;
    if (per_class != NULL && v > x->class_scratch[x->dev_class[i]])
      x->class_scratch[x->dev_class[i]] = v;
  }
  if (per_class != NULL)
    for (int32_t c = 0; c < x->n_classes; c++)
      per_class[c] += x->class_scratch[c];
}

void syn_prop_memory_parts(syn_ctx *x, const syn_prop *p, hap_storage storage,
                           hap_memory_breakdown *parts, double *total) {
  hap_memory_breakdown r = syn_prop_rates(x, p, storage);
  const double *b = held(x, p, storage);
  for (int32_t i = 0; i < x->n; i++) {
    total[i] += rate_total(&r, b[i]);
    if (parts != NULL) {
      parts[i].parameters += r.parameters * b[i];
      parts[i].gradients += r.gradients * b[i];
      parts[i].optimizer += r.optimizer * b[i];
      parts[i].activations += r.activations * b[i];
    }
  }
}

/* ---- search-state memory ---------------------------------------------------------------- */

void syn_mem_enter(const syn_ctx *x, int32_t k, double *mem) {
  if (x->n_mem > 1 && x->scope_start[k])
    memset(mem + (size_t)x->n_classes, 0, (size_t)x->n_classes * sizeof *mem);
}

void syn_mem_add(syn_ctx *x, const syn_prop *p, hap_storage storage, double *mem) {
  size_t nc = (size_t)x->n_classes;
  if (x->n_mem == 1 || !x->rmap.dropped[p->tensor]) {
    syn_prop_memory(x, p, storage, NULL, mem);
    return;
  }
  double *cur = mem + nc, *top = mem + 2 * nc;
  syn_prop_memory(x, p, storage, NULL, cur);
  for (size_t c = 0; c < nc; c++)
    top[c] = fmax(top[c], cur[c]);
}

double syn_mem_class(const syn_ctx *x, const double *mem, int32_t c) {
  return x->n_mem == 1 ? mem[c] : mem[c] + mem[2 * (size_t)x->n_classes + (size_t)c];
}

bool syn_mem_fits(const syn_ctx *x, const double *mem) {
  for (int32_t c = 0; c < x->n_classes; c++)
    if (syn_mem_class(x, mem, c) > x->mem_limit[c])
      return false;
  return true;
}

/* Forward collective (bf bytes, run wf times per iteration) + its dual in backward (bb bytes,
 * wb times), choosing padded (ring) vs grouped per tensor. */
static double gather_pair_w(syn_ctx *x, hap_coll_kind fwd, hap_coll_kind bwd, hap_coll_bytes bf,
                            hap_coll_bytes bb, double wf, double wb, hap_coll_impl *impl) {
  double ring = hap_coll_time(&x->world, fwd, HAP_IMPL_RING, bf) * wf +
                hap_coll_time(&x->world, bwd, HAP_IMPL_RING, bb) * wb;
  double grouped = hap_coll_time(&x->world, fwd, HAP_IMPL_GROUPED, bf) * wf +
                   hap_coll_time(&x->world, bwd, HAP_IMPL_GROUPED, bb) * wb;
  *impl = grouped < ring ? HAP_IMPL_GROUPED : HAP_IMPL_RING;
  return fmin(ring, grouped);
}

/* Forward collective + its dual in backward, once each. */
static double gather_pair(syn_ctx *x, hap_coll_kind fwd, hap_coll_kind bwd, hap_coll_bytes b,
                          hap_coll_impl *impl) {
  double ring = hap_coll_time(&x->world, fwd, HAP_IMPL_RING, b) +
                hap_coll_time(&x->world, bwd, HAP_IMPL_RING, b);
  double grouped = hap_coll_time(&x->world, fwd, HAP_IMPL_GROUPED, b) +
                   hap_coll_time(&x->world, bwd, HAP_IMPL_GROUPED, b);
  *impl = grouped < ring ? HAP_IMPL_GROUPED : HAP_IMPL_RING;
  return fmin(ring, grouped);
}

static double comm_time(syn_ctx *x, const syn_prop *from, const syn_prop *to, hap_comm_op *op,
                        hap_coll_impl *impl);

double syn_comm_time(syn_ctx *x, const syn_prop *from, const syn_prop *to, hap_comm_op *op,
                     hap_coll_impl *impl) {
  const syn_memo_entry *e = memo_get(x, MEMO_COMM, from, to, HAP_STORE_INPUT);
  if (e == NULL) {
    hap_comm_op o = HAP_COMM_SLICE; /* left so when no communication does it (HUGE_VAL) */
    hap_coll_impl im = HAP_IMPL_AUTO;
    double t = comm_time(x, from, to, &o, &im);
    syn_memo_entry *put = memo_put(x, MEMO_COMM, from, to, HAP_STORE_INPUT);
    if (put != NULL) {
      put->t = t;
      put->op = o;
      put->impl = im;
    }
    *op = o;
    *impl = im;
    return t;
  }
  *op = e->op;
  *impl = e->impl;
  return e->t;
}

/* One run of the all-to-all that moves a tensor's Gather dim from one segment's split to
 * another's (the same dim: hap_shard_moved), s; the gradient's way back moves the same bytes. */
static double reshard_time(syn_ctx *x, const syn_prop *from, const syn_prop *to) {
  const hap_tensor *t = &x->g->tensors[from->tensor];
  int64_t extent = t->shape.dims[from->layout];
  const int64_t *a = syn_lengths(x, extent, from->granule, from->segment);
  const int64_t *b = syn_lengths(x, extent, to->granule, to->segment);
  int64_t *moved = malloc((size_t)x->n * sizeof *moved);
  double *bytes = malloc((size_t)x->n * sizeof *bytes);
  double secs = HUGE_VAL;
  if (a != NULL && b != NULL && moved != NULL && bytes != NULL && extent > 0) {
    hap_shard_moved(a, b, x->n, moved);
    double per_unit = (double)hap_tensor_bytes(t) / (double)extent * hap_reshard_spread(x->n);
    for (int32_t i = 0; i < x->n; i++)
      bytes[i] = (double)moved[i] * per_unit;
    secs = hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE,
                         hap_coll_bytes_of(bytes, x->n));
  }
  free(moved);
  free(bytes);
  return secs;
}

static double comm_time(syn_ctx *x, const syn_prop *from, const syn_prop *to, hap_comm_op *op,
                        hap_coll_impl *impl) {
  double *bytes = malloc((size_t)x->n * sizeof *bytes);
  if (bytes == NULL)
    return HUGE_VAL;
  double t = HUGE_VAL;
  *impl = HAP_IMPL_AUTO;
  double wf, wb; /* runs per iteration, forward and backward */
  syn_comm_weights(x, from->tensor, &wf, &wb);
  hap_layout a = from->layout, b = to->layout;
  if (a >= 0 && b == HAP_LAYOUT_IDENTITY) {
    *op = HAP_COMM_ALL_GATHER;
    syn_bytes(x, from, bytes);
    hap_coll_bytes cb = hap_coll_bytes_of(bytes, x->n);
    t = x->plain
            ? gather_pair(x, HAP_COLL_ALL_GATHER, HAP_COLL_REDUCE_SCATTER, cb, impl)
            : gather_pair_w(x, HAP_COLL_ALL_GATHER, HAP_COLL_REDUCE_SCATTER, cb, cb, wf, wb, impl);
  } else if (a == HAP_LAYOUT_REDUCE && b >= 0) {
    *op = HAP_COMM_REDUCE_SCATTER;
    syn_bytes(x, to, bytes);
    hap_coll_bytes cb = hap_coll_bytes_of(bytes, x->n);
    t = x->plain
            ? gather_pair(x, HAP_COLL_REDUCE_SCATTER, HAP_COLL_ALL_GATHER, cb, impl)
            : gather_pair_w(x, HAP_COLL_REDUCE_SCATTER, HAP_COLL_ALL_GATHER, cb, cb, wf, wb, impl);
  } else if (a == HAP_LAYOUT_REDUCE && b == HAP_LAYOUT_IDENTITY) {
    *op = HAP_COMM_ALL_REDUCE;
    syn_bytes(x, to, bytes);
    hap_coll_bytes cb = hap_coll_bytes_of(bytes, x->n);
    t = (x->plain ? 2 : wf + wb) * hap_coll_time(&x->world, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, cb);
  } else if (a >= 0 && a == b && from->segment != to->segment) {
    *op = HAP_COMM_ALL_TO_ALL; /* one dim between two segments' splits: only the difference moves */
    *impl = HAP_IMPL_PAIRWISE;
    double moved_t = reshard_time(x, from, to);
    t = x->plain ? 2 * moved_t : moved_t * (wf + wb);
  } else if (a >= 0 && b >= 0 && (a != b || from->segment != to->segment)) {
    *op = HAP_COMM_ALL_TO_ALL;
    *impl = HAP_IMPL_PAIRWISE;
    syn_bytes(x, from, bytes);
    hap_coll_bytes fwd = hap_coll_bytes_of(bytes, x->n);
    syn_bytes(x, to, bytes);
    hap_coll_bytes bwd = hap_coll_bytes_of(bytes, x->n);
    t = x->plain ? hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, fwd) +
                       hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, bwd)
                 : hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, fwd) * wf +
                       hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, bwd) * wb;
  } else if (a == HAP_LAYOUT_IDENTITY && b >= 0) {
    *op = HAP_COMM_SLICE; /* local; the gradient stays a partial sum of the Identity tensor */
    t = 0;
  } else if (a == HAP_LAYOUT_IDENTITY && b == HAP_LAYOUT_REDUCE) {
    *op = HAP_COMM_KEEP_ONCE;
    t = 0;
  }
  free(bytes);
  return t;
}

static double source_time(syn_ctx *x, const syn_prop *to, hap_storage *storage);

double syn_source_time(syn_ctx *x, const syn_prop *to, hap_storage *storage) {
  static const syn_prop none = {-1, 0, 0, 0};
  const syn_memo_entry *e = memo_get(x, MEMO_SOURCE, to, &none, HAP_STORE_INPUT);
  if (e == NULL) {
    hap_storage st = HAP_STORE_INPUT;
    double t = source_time(x, to, &st);
    syn_memo_entry *put = memo_put(x, MEMO_SOURCE, to, &none, HAP_STORE_INPUT);
    if (put != NULL) {
      put->t = t;
      put->made = st;
    }
    *storage = st;
    return t;
  }
  *storage = e->made;
  return e->t;
}

/* 2-D plans: the all-reduce across replicas of the gradient a device holds under `to` (the
 * slowest device's), s; 0 without replicas. */
static double replica_sync_time(syn_ctx *x, const syn_prop *to, hap_storage storage) {
  const hap_tensor *t = &x->g->tensors[to->tensor];
  if (x->replica_groups == NULL || t->kind != HAP_TENSOR_PARAMETER || !t->requires_grad)
    return 0;
  double *bytes = malloc((size_t)x->n * sizeof *bytes);
  if (bytes == NULL)
    return HUGE_VAL;
  if (storage == HAP_STORE_ZERO)
    zero_bytes(x, to->tensor, bytes);
  else
    syn_bytes(x, to, bytes);
  double worst = 0;
  for (int32_t i = 0; i < x->n; i++) {
    const hap_group *rg = &x->replica_groups[i];
    double b = x->plain ? bytes[i] : bytes[i] * x->grad_scale;
    worst = fmax(worst, hap_coll_time(rg, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO,
                                      hap_coll_bytes_uniform(b, rg->n)));
  }
  free(bytes);
  return worst;
}

/* The optimizer update of what a parameter's source puts on each device, the slowest device's,
 * s: a memory-bound pass (hap_policy_update_bytes per element) at the device's update bandwidth;
 * ZeRO >= 1 updates 1/copies of it. Only with a policy: the default leaves the update to the
 * simulator, as before. */
static double update_time(syn_ctx *x, const syn_prop *to, hap_storage storage) {
  const hap_tensor *t = &x->g->tensors[to->tensor];
  if (x->plain || t->kind != HAP_TENSOR_PARAMETER || !t->requires_grad)
    return 0;
  const double *b = held(x, to, storage);
  double per_byte = hap_policy_update_bytes(&x->pol) / hap_dtype_size(t->dtype);
  double n_d = x->pol.zero >= 1 ? copies(x, to, storage) : 1;
  double worst = 0;
  for (int32_t i = 0; i < x->n; i++) {
    const hap_device *d = &x->c->devices[i];
    double bw = d->update_bw_Bps > 0 ? d->update_bw_Bps : d->memory_bw_Bps;
    if (bw > 0)
      worst = fmax(worst, b[i] * per_byte / n_d / bw);
  }
  return worst;
}

/* ZeRO storage: the shard all-gathered before use (per micro-batch; twice with policy zero=3,
 * which frees it after the forward and gathers it again for the backward), the gradient
 * reduce-scattered (per micro-batch). */
static double zero_time(syn_ctx *x, const syn_prop *shard) {
  double *bytes = malloc((size_t)x->n * sizeof *bytes);
  if (bytes == NULL)
    return HUGE_VAL;
  zero_bytes(x, shard->tensor, bytes);
  hap_coll_impl impl;
  hap_coll_bytes bw = hap_coll_bytes_of(bytes, x->n);
  double t;
  if (x->plain) {
    t = gather_pair(x, HAP_COLL_ALL_GATHER, HAP_COLL_REDUCE_SCATTER, bw, &impl);
  } else {
    for (int32_t i = 0; i < x->n; i++)
      bytes[i] *= x->grad_scale;
    hap_coll_bytes bg = hap_coll_bytes_of(bytes, x->n);
    double k = x->micro;
    t = gather_pair_w(x, HAP_COLL_ALL_GATHER, HAP_COLL_REDUCE_SCATTER, bw, bg,
                      k * (x->pol.zero >= 3 ? 2 : 1), k, &impl);
  }
  free(bytes);
  return t;
}

static double source_time(syn_ctx *x, const syn_prop *to, hap_storage *storage) {
  const hap_tensor *t = &x->g->tensors[to->tensor];
  if (to->layout == HAP_LAYOUT_REDUCE)
    return HUGE_VAL; /* a source is never a partial sum; keep_once makes one from Identity */
  if (t->kind == HAP_TENSOR_INPUT) {
    *storage = HAP_STORE_INPUT;
    return 0;
  }
  if (to->layout >= 0) {
    *storage = HAP_STORE_SHARDED;
    return replica_sync_time(x, to, HAP_STORE_SHARDED) + update_time(x, to, HAP_STORE_SHARDED);
  }
  *storage = HAP_STORE_REPLICATED;
  if (t->kind == HAP_TENSOR_BUFFER || !t->requires_grad)
    return 0;
  /* every gradient reduced once per iteration, in the gradient's precision */
  double grad_bytes = (double)hap_tensor_bytes(t) * (x->plain ? 1 : x->grad_scale);
  double replicated = hap_coll_time(&x->world, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO,
                                    hap_coll_bytes_uniform(grad_bytes, x->n));
  bool zero_ok = x->n > 1 && t->shape.rank > 0 && t->shape.dims[0] > 1;
  syn_prop shard = {to->tensor, 0, 0, 1};
  /* ZeRO-3: every parameter that can be is stored sharded and gathered for use (or those the
   * caller names) */
  bool forced_zero = x->zero_store != NULL && x->zero_store(x->zero_store_ctx, x->g, to->tensor);
  if (((!x->plain && x->pol.zero >= 3) || forced_zero) && zero_ok) {
    *storage = HAP_STORE_ZERO;
    return zero_time(x, &shard) + replica_sync_time(x, &shard, HAP_STORE_ZERO) +
           update_time(x, &shard, HAP_STORE_ZERO);
  }
  if (x->strategy != HAP_STRATEGY_HAP || x->n == 1)
    return replicated + replica_sync_time(x, to, HAP_STORE_REPLICATED) +
           update_time(x, to, HAP_STORE_REPLICATED);
  replicated += update_time(x, to, HAP_STORE_REPLICATED);
  /* ZeRO: stored sharded along dim 0 with the first segment's ratios, gathered for use. */
  if (zero_ok) {
    double zero = zero_time(x, &shard) + update_time(x, &shard, HAP_STORE_ZERO);
    if (zero < replicated) {
      *storage = HAP_STORE_ZERO;
      return zero;
    }
  }
  return replicated;
}

/* The weight-gradient GEMM of node k (dW only) on device i: over the whole batch when local is
 * NULL, else over the device's rows (io `local`), s. */
static double weight_grad_s(syn_ctx *x, int32_t k, int32_t i, const hap_op_io *local) {
  hap_op_io io = local != NULL ? *local : x->nodes[k].io;
  for (int j = 0; j < io.n_in; j++)
    io.in_grad[j] = j == 1;
  return hap_compute_time(x->c, i, x->g->nodes[k].op, &io, true);
}

static double sfb_time(syn_ctx *x, int32_t k, int v) {
  const syn_node *sn = &x->nodes[k];
  const hap_variant *var = &sn->variants[v];
  const hap_node *node = &x->g->nodes[k];
  bool dp = x->strategy == HAP_STRATEGY_DP_EV || x->strategy == HAP_STRATEGY_DP_CP;
  bool offered =
      x->strategy == HAP_STRATEGY_HAP ? x->sfb != HAP_SFB_USE_OFF : dp && x->sfb == HAP_SFB_USE_ALL;
  if (!offered || x->n < 2 || x->replica_groups != NULL || x->replicas != 1 || x->act_copies != 1 ||
      !hap_sfb_allowed(&x->pol, 1) || !hap_sfb_shape_ok(x->g, k, var))
    return HUGE_VAL;
  double *bytes = malloc((size_t)x->n * sizeof *bytes);
  int64_t extent = hap_variant_extent(&sn->io, var);
  const int64_t *len = extent > 0 ? syn_lengths(x, extent, var->granule, sn->segment) : NULL;
  if (bytes == NULL || len == NULL) {
    free(bytes);
    return HUGE_VAL;
  }
  double t = 0;
  for (int f = 0; f < 2; f++) { /* the input, then the output gradient */
    syn_prop p = {f == 0 ? node->inputs[0] : node->outputs[0], f == 0 ? var->in[0] : var->out[0],
                  sn->segment, var->granule};
    syn_bytes(x, &p, bytes);
    t += hap_coll_time(&x->world, HAP_COLL_ALL_GATHER, HAP_IMPL_AUTO,
                       hap_coll_bytes_of(bytes, x->n));
  }
  free(bytes);
  double extra = 0;
  for (int32_t i = 0; i < x->n; i++) {
    hap_attrs attrs;
    hap_op_io local;
    double mine = 0;
    if (len[i] > 0) {
      if (hap_op_local_io(node->op, &sn->io, var, len[i], &attrs, &local, NULL) != HAP_OK)
        return HUGE_VAL;
      mine = weight_grad_s(x, k, i, &local);
    }
    extra = fmax(extra, weight_grad_s(x, k, i, NULL) - mine);
  }
  syn_prop w = {node->inputs[1], HAP_LAYOUT_IDENTITY, 0, 1};
  return t + extra + update_time(x, &w, HAP_STORE_SFB);
}

double syn_sfb_time(syn_ctx *x, int32_t k, int v) {
  syn_node *sn = &x->nodes[k];
  if (isnan(sn->sfb_s[v]))
    sn->sfb_s[v] = sfb_time(x, k, v);
  return sn->sfb_s[v];
}
