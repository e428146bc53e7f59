/* balance.c — the sharding-ratio LP for a fixed program (HAP's Eq. 3, with its flaws fixed:
 * constant terms kept, no caps, real collective formulas). Variables: the ratio r[s][i] of every
 * segment s and device i, one epigraph variable t_j per program step, and per segment the smallest
 * ratio m_s (grouped collectives pay for sum - min). Minimise sum_j t_j subject to, for every step:
 *   computation sharded over segment s:  t_j >= launch_i + slope_ij * r[s][i]   for every device i
 *                                        (slope: the device's time for the whole extent, taken
 *                                        from its cost at the current shard, so GEMM-rate effects
 *                                        are linearised around the current ratios)
 *   padded collective (ring), and an all-to-all from one layout to another:
 *                                        t_j >= c0 + c1 * S * r[s][i]          for every device i
 *   grouped collective:                  t_j >= c0 + c1 * S * (1 - m_s),  m_s <= r[s][i]
 *   a Gather crossing from segment s to t (an all-to-all between them, or a Gather they share
 *   while their ratios agree): u >= +-c1 * S * sum_{j<k} (r[s][j] - r[t][j]) at every boundary k
 *                                        where the device class changes (crossing_rows)
 *   anything else:                       t_j >= its current time (a constant)
 * and sum_i r[s][i] = 1, and for every device class its memory (parameters twice, everything kept
 * for the backward pass once; a Gather's share is r[s][class] of the tensor) within its limit.
 * Devices with identical specs get one variable per segment (the model is
 * symmetric in them, so some optimum gives them equal ratios): rows scale with the number of
 * device classes, not devices. Steps with the same rows (equal coefficients and bounds: a repeated
 * layer's steps) share one epigraph variable weighted by their count, and steps whose time does not
 * depend on the ratios (constant rows only) add a constant, no variable: the optimum is the same,
 * and the LP grows with the distinct steps, not with the layers (the simplex is superlinear in its
 * size). The alternation in synth.c re-prices the program exactly (integer shard lengths) under the
 * new ratios and keeps them only if the program got cheaper (else tries each segment's row alone).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/vec.h"
#include "synth/lp.h"
#include "synth_internal.h"

bool syn_balance(syn_ctx *x, const int8_t *variants, double *ratios, hap_err *err);

/* One epigraph row of a step: t + coef * x[var] >= lo (var -1: t >= lo). */
typedef struct step_row {
  int var;
  double coef, lo;
} step_row;

typedef struct lp_build {
  syn_ctx *x;
  hap_lp *lp;
  int *r;         /* [n_segments][n_classes] variable ids */
  int32_t *rep;   /* [n_classes] a device of each class */
  int32_t *count; /* [n_classes] devices in each class */
  int *m;         /* [n_segments] min-ratio variable ids, -1 until needed */
  int *ids;
  double *coefs;
  step_row *rows; /* the current step's rows, [n_classes + 1] */
  int n_rows;
} lp_build;

static void add_step_row(lp_build *b, int var, double coef, double lo) {
  b->rows[b->n_rows++] = (step_row){var, coef, lo};
}

/* Time of node k under variant v on device d holding `len` of the sharded index, s. */
static double node_time_at(syn_ctx *x, int32_t k, int v, int32_t d, int64_t len) {
  const syn_node *sn = &x->nodes[k];
  hap_op op = x->g->nodes[k].op;
  hap_attrs attrs;
  hap_op_io local;
  if (hap_op_local_io(op, &sn->io, &sn->variants[v], len, &attrs, &local, NULL) != HAP_OK)
    return HUGE_VAL;
  return syn_node_policy_time(x, k, hap_compute_time(x->c, d, op, &local, false),
                              hap_compute_time(x->c, d, op, &local, true));
}

static hap_status min_var(lp_build *b, int32_t s, hap_err *err) {
  if (b->m[s] >= 0)
    return HAP_OK;
  HAP_TRY(hap_lp_add_var(b->lp, 0, 1, 0, &b->m[s], err));
  int32_t nc = b->x->n_classes;
  for (int32_t i = 0; i < nc; i++) {
    int ids[2] = {b->m[s], b->r[(size_t)s * (size_t)nc + (size_t)i]};
    double c[2] = {1, -1};
    HAP_TRY(hap_lp_add_row(b->lp, ids, c, 2, -INFINITY, 0, err)); /* m_s <= r_si */
  }
  return HAP_OK;
}

/* t >= c0 + c1S * r[s][i] for every i (padded), or t >= c0 + c1S * (1 - m_s) (grouped). */
static hap_status collective_rows(lp_build *b, int32_t s, bool grouped, double c0, double c1S,
                                  hap_err *err) {
  int32_t nc = b->x->n_classes;
  if (grouped) {
    HAP_TRY(min_var(b, s, err));
    add_step_row(b, b->m[s], c1S, c0 + c1S);
    return HAP_OK;
  }
  for (int32_t i = 0; i < nc; i++)
    add_step_row(b, b->r[(size_t)s * (size_t)nc + (size_t)i], -c1S, c0);
  return HAP_OK;
}

/* Forward + backward time of a gather-type pair with every rank's bytes given by `b`, each run as
 * often per iteration as the policy says (syn_comm_weights). */
static double pair_time(const syn_ctx *x, int32_t tensor, hap_coll_kind fwd, hap_coll_kind bwd,
                        hap_coll_impl impl, hap_coll_bytes b) {
  if (x->plain)
    return hap_coll_time(&x->world, fwd, impl, b) + hap_coll_time(&x->world, bwd, impl, b);
  double wf, wb;
  syn_comm_weights(x, tensor, &wf, &wb);
  return hap_coll_time(&x->world, fwd, impl, b) * wf + hap_coll_time(&x->world, bwd, impl, b) * wb;
}

static hap_status comm_step(lp_build *b, const hap_step *step, double current, hap_err *err) {
  syn_ctx *x = b->x;
  const hap_tensor *tensor = &x->g->tensors[step->tensor];
  double S = (double)hap_tensor_bytes(tensor);
  int32_t n = x->n;
  hap_coll_kind fwd, bwd;
  hap_layout g_layout;
  if (step->comm == HAP_COMM_ALL_GATHER) {
    fwd = HAP_COLL_ALL_GATHER, bwd = HAP_COLL_REDUCE_SCATTER, g_layout = step->from;
  } else if (step->comm == HAP_COMM_REDUCE_SCATTER) {
    fwd = HAP_COLL_REDUCE_SCATTER, bwd = HAP_COLL_ALL_GATHER, g_layout = step->to;
  } else if (step->comm == HAP_COMM_ALL_TO_ALL && step->from >= 0 && step->from == step->to) {
    add_step_row(b, -1, 0, 0); /* between segments: crossing_rows prices it */
    return HAP_OK;
  } else if (step->comm == HAP_COMM_ALL_TO_ALL && step->from_segment == step->segment) {
    /* one layout to another: every rank sends its shard (forward) and its gradient's (backward),
     * both split by the step's segment: t >= c0 + c1S * r[s][i] */
    double c0 = pair_time(x, step->tensor, HAP_COLL_ALL_TO_ALL, HAP_COLL_ALL_TO_ALL,
                          HAP_IMPL_PAIRWISE, hap_coll_bytes_uniform(1, n));
    double c1S = pair_time(x, step->tensor, HAP_COLL_ALL_TO_ALL, HAP_COLL_ALL_TO_ALL,
                           HAP_IMPL_PAIRWISE, hap_coll_bytes_uniform(S, n)) -
                 c0;
    if (!isfinite(c0) || !isfinite(c1S)) {
      add_step_row(b, -1, 0, current);
      return HAP_OK;
    }
    return collective_rows(b, step->segment, false, c0, c1S, err);
  } else {
    /* all-reduce is a constant; all-to-all and local ops: their current time */
    add_step_row(b, -1, 0, current);
    return HAP_OK;
  }
  (void)g_layout;
  bool grouped = step->impl == HAP_IMPL_GROUPED;
  hap_coll_bytes zero = {0, 0, grouped ? S : 0, n};
  double c0 = pair_time(x, step->tensor, fwd, bwd, step->impl, zero);
  hap_coll_bytes full = grouped ? (hap_coll_bytes){S, S, S, n} : (hap_coll_bytes){S, 0, S, n};
  double c1S = grouped ? c0 - pair_time(x, step->tensor, fwd, bwd, step->impl, full)
                       : pair_time(x, step->tensor, fwd, bwd, step->impl, full) - c0;
  if (grouped) /* grouped: c0 is the time at min = 0; t = c0 - c1S * m */
    return collective_rows(b, step->segment, true, c0 - c1S, c1S, err);
  return collective_rows(b, step->segment, false, c0, c1S, err);
}

static bool variant_eq(const hap_variant *a, const hap_variant *b) {
  return memcmp(a->in, b->in, sizeof a->in) == 0 && memcmp(a->out, b->out, sizeof a->out) == 0 &&
         a->granule == b->granule && a->flags == b->flags && a->once == b->once;
}

static void compute_step(lp_build *b, const hap_step *step) {
  syn_ctx *x = b->x;
  int32_t k = step->node;
  const syn_node *sn = &x->nodes[k];
  int v = -1;
  for (int i = 0; i < sn->n_variants && v < 0; i++)
    if (variant_eq(&sn->variants[i], &step->variant))
      v = i;
  int64_t extent = v >= 0 ? hap_variant_extent(&sn->io, &sn->variants[v]) : 0;
  if (v < 0 || extent <= 0) {
    add_step_row(b, -1, 0, step->predicted_s);
    return;
  }
  int64_t granule = sn->variants[v].granule;
  const int64_t *len = syn_lengths(x, extent, granule, sn->segment);
  int64_t probe = granule * (int64_t)fmax(1, round((double)extent / (double)granule / x->n));
  int32_t nc = x->n_classes;
  for (int32_t cl = 0; cl < nc; cl++) {
    int32_t i = b->rep[cl];
    int64_t at = len && len[i] > 0 ? len[i] : probe;
    double launch = x->c->devices[i].launch_s;
    double ti = node_time_at(x, k, v, i, at);
    if (!isfinite(ti)) {
      b->n_rows = 0;
      add_step_row(b, -1, 0, step->predicted_s);
      return;
    }
    double nl = syn_node_launches(x, k); /* fwd + bwd launches (per micro-batch, recomputed) */
    double slope = fmax(0, ti - nl * launch) * (double)extent / (double)at;
    add_step_row(b, b->r[(size_t)sn->segment * (size_t)nc + (size_t)cl], -slope, nl * launch);
  }
}

/* Add to coef[s * nc + c] / *constant the bytes one property puts on a device of each class. */
static void prop_memory_terms(const syn_ctx *x, int32_t tensor, hap_layout layout, int32_t seg,
                              hap_storage storage, double *coef, double *constant) {
  const hap_tensor *t = &x->g->tensors[tensor];
  double bytes = (double)hap_tensor_bytes(t);
  syn_prop p = {tensor, layout, seg, 1};
  hap_memory_breakdown r = syn_prop_rates(x, &p, storage);
  double factor =
      r.parameters + r.gradients + r.optimizer + r.activations * syn_act_copies(x, tensor);
  if (storage == HAP_STORE_ZERO && !x->plain) {
    bytes /= x->n; /* an even split of the flattened tensor (evaluate.c, zero_bytes) */
    layout = HAP_LAYOUT_IDENTITY;
  } else if (storage == HAP_STORE_ZERO) {
    layout = 0; /* stored sharded along dim 0 with the first segment's ratios */
    seg = 0;
  }
  for (int32_t c = 0; c < x->n_classes; c++) {
    if (layout >= 0)
      coef[(size_t)seg * (size_t)x->n_classes + (size_t)c] += factor * bytes;
    else
      constant[c] += factor * bytes;
  }
}

/* The LP's memory terms of one class: coef [nv] over the ratio variables, and a constant. */
typedef struct mem_terms {
  double *coef, *constant; /* [n_classes][nv], [n_classes] */
} mem_terms;

/* Add one step's properties' terms to m (per[] is scratch of nv). */
static void step_memory_terms(const syn_ctx *x, const hap_step *s, bool dropped_only, double *per,
                              mem_terms *m) {
  int32_t nc = x->n_classes, nv = x->n_segments * nc;
  memset(per, 0, (size_t)nv * sizeof *per);
  if (s->kind == HAP_STEP_SOURCE || s->kind == HAP_STEP_COMM) {
    if (x->n_mem == 1 || x->rmap.dropped[s->tensor] == dropped_only)
      prop_memory_terms(x, s->tensor, s->to, s->segment,
                        s->kind == HAP_STEP_SOURCE ? s->storage : HAP_STORE_INPUT, per,
                        m->constant);
  } else {
    const hap_node *node = &x->g->nodes[s->node];
    for (int o = 0; o < node->n_outputs; o++)
      if (x->n_mem == 1 || x->rmap.dropped[node->outputs[o]] == dropped_only)
        prop_memory_terms(x, node->outputs[o], s->variant.out[o], s->segment, HAP_STORE_INPUT, per,
                          m->constant);
  }
  /* per[seg * nc + c] is the class-independent coefficient of r[seg][c] */
  for (int32_t c = 0; c < nc; c++)
    for (int32_t sg = 0; sg < x->n_segments; sg++)
      m->coef[(size_t)c * (size_t)nv + (size_t)sg * (size_t)nc + (size_t)c] +=
          per[(size_t)sg * (size_t)nc + (size_t)c];
}

/* Class c's terms at the installed ratios, bytes. */
static double terms_value(const syn_ctx *x, const mem_terms *m, int32_t c, const int32_t *rep) {
  int32_t nc = x->n_classes, nv = x->n_segments * nc;
  double v = m->constant[c];
  for (int32_t sg = 0; sg < x->n_segments; sg++)
    for (int32_t k = 0; k < nc; k++)
      v += m->coef[(size_t)c * (size_t)nv + (size_t)sg * (size_t)nc + (size_t)k] *
           x->ratios[(size_t)sg * (size_t)x->n + (size_t)rep[k]];
  return v;
}

/* Memory rows: per class, sum over the program's properties within the class's limit; with
 * recomputation, plus the layer whose dropped tensors weigh most at the installed ratios (the
 * working set of the backward pass). */
static hap_status memory_rows(lp_build *b, const hap_plan *plan, hap_err *err) {
  syn_ctx *x = b->x;
  int32_t nc = x->n_classes, nv = x->n_segments * nc;
  size_t cells = (size_t)nv * (size_t)nc;
  /* kept, the current layer's dropped, the largest layer's dropped per class */
  mem_terms kept = {calloc(cells, sizeof(double)), calloc((size_t)nc, sizeof(double))};
  mem_terms cur = {calloc(cells, sizeof(double)), calloc((size_t)nc, sizeof(double))};
  mem_terms top = {calloc(cells, sizeof(double)), calloc((size_t)nc, sizeof(double))};
  double *top_value = calloc((size_t)nc, sizeof(double));
  int *ids = malloc((size_t)nv * sizeof *ids);
  double *vals = malloc((size_t)nv * sizeof *vals);
  double *per = malloc((size_t)nv * sizeof *per);
  hap_status st = HAP_OK;
  if (!kept.coef || !kept.constant || !cur.coef || !cur.constant || !top.coef || !top.constant ||
      !top_value || !ids || !vals || !per) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory building memory rows");
    goto out;
  }
  int32_t node = -1; /* the node whose steps come next: the scope they belong to */
  for (int32_t j = 0; j < plan->n_steps; j++) {
    const hap_step *s = &plan->steps[j];
    if (x->n_mem > 1) {
      int32_t next = -1; /* the first compute step from here on */
      for (int32_t i = j; i < plan->n_steps && next < 0; i++)
        if (plan->steps[i].kind == HAP_STEP_COMPUTE)
          next = plan->steps[i].node;
      if (next != node && next >= 0 && x->scope_start[next]) {
        memset(cur.coef, 0, cells * sizeof(double));
        memset(cur.constant, 0, (size_t)nc * sizeof(double));
      }
      node = next;
      step_memory_terms(x, s, true, per, &cur);
      for (int32_t c = 0; c < nc; c++) {
        double v = terms_value(x, &cur, c, b->rep);
        if (v > top_value[c]) {
          top_value[c] = v;
          memcpy(top.coef + (size_t)c * (size_t)nv, cur.coef + (size_t)c * (size_t)nv,
                 (size_t)nv * sizeof(double));
          top.constant[c] = cur.constant[c];
        }
      }
    }
    step_memory_terms(x, s, false, per, &kept);
  }
  for (int32_t c = 0; c < nc && st == HAP_OK; c++) {
    if (!isfinite(x->mem_limit[c]))
      continue;
    int k = 0;
    for (int32_t v = 0; v < nv; v++) {
      double a = kept.coef[(size_t)c * (size_t)nv + (size_t)v] +
                 (x->n_mem > 1 ? top.coef[(size_t)c * (size_t)nv + (size_t)v] : 0);
      if (a != 0) {
        ids[k] = b->r[v];
        vals[k++] = a;
      }
    }
    double constant = kept.constant[c] + (x->n_mem > 1 ? top.constant[c] : 0);
    st = hap_lp_add_row(b->lp, ids, vals, k, -INFINITY, x->mem_limit[c] - constant, err);
  }
out:
  free(kept.coef);
  free(kept.constant);
  free(cur.coef);
  free(cur.constant);
  free(top.coef);
  free(top.constant);
  free(top_value);
  free(ids);
  free(vals);
  free(per);
  return st;
}

static uint64_t rows_hash(const step_row *r, int n) {
  uint64_t h = HAP_KEY_HASH_BASIS ^ (uint64_t)n;
  for (int i = 0; i < n; i++) {
    uint64_t v[3] = {(uint64_t)(int64_t)r[i].var, 0, 0};
    memcpy(&v[1], &r[i].coef, sizeof(double));
    memcpy(&v[2], &r[i].lo, sizeof(double));
    for (int j = 0; j < 3; j++) {
      h = hap_fnv1a_word(h, v[j]);
      h ^= h >> 29;
    }
  }
  return h;
}

/* The same rows, in the same order (values never NaN: the LP layer refuses those). Equal rows with
 * zeros of different signs may hash apart and stay separate, which is harmless. */
static bool rows_same(const step_row *a, int na, const step_row *b, int nb) {
  if (na != nb)
    return false;
  for (int i = 0; i < na; i++)
    if (a[i].var != b[i].var || a[i].coef != b[i].coef || a[i].lo != b[i].lo)
      return false;
  return true;
}

/* The epigraph rows of every step: one variable per distinct set of rows that involves a ratio,
 * with objective weight = the number of steps that have it, in order of first appearance. */
static hap_status step_rows(lp_build *b, const hap_plan *plan, hap_err *err) {
  int32_t nc = b->x->n_classes, ns = plan->n_steps;
  size_t per = (size_t)nc + 1, cap = 16;
  while (cap < 2 * (size_t)(ns > 0 ? ns : 1))
    cap *= 2;
  step_row *all = malloc((size_t)(ns > 0 ? ns : 1) * per * sizeof *all); /* [distinct][per] */
  int *n_all = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *n_all);
  double *weight = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *weight);
  int32_t *table = malloc(cap * sizeof *table); /* open addressing: distinct index or -1 */
  hap_status st = HAP_OK;
  if (!all || !n_all || !weight || !table) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory building the ratio LP");
    goto out;
  }
  for (size_t i = 0; i < cap; i++)
    table[i] = -1;
  int32_t n_distinct = 0;
  for (int32_t j = 0; j < ns; j++) {
    const hap_step *step = &plan->steps[j];
    b->rows = all + (size_t)n_distinct * per;
    b->n_rows = 0;
    if (step->kind == HAP_STEP_COMPUTE)
      compute_step(b, step);
    else if (step->kind == HAP_STEP_COMM &&
             (st = comm_step(b, step, step->predicted_s, err)) != HAP_OK)
      goto out;
    bool constant = true;
    for (int i = 0; i < b->n_rows; i++)
      constant = constant && b->rows[i].var < 0;
    if (constant)
      continue; /* sources and ratio-independent steps: a constant in the objective */
    size_t slot = rows_hash(b->rows, b->n_rows) & (cap - 1);
    while (table[slot] >= 0 &&
           !rows_same(all + (size_t)table[slot] * per, n_all[table[slot]], b->rows, b->n_rows))
      slot = (slot + 1) & (cap - 1);
    if (table[slot] >= 0) {
      weight[table[slot]] += 1;
      continue;
    }
    table[slot] = n_distinct;
    n_all[n_distinct] = b->n_rows;
    weight[n_distinct++] = 1;
  }
  for (int32_t d = 0; d < n_distinct && st == HAP_OK; d++) {
    int t;
    if ((st = hap_lp_add_var(b->lp, 0, INFINITY, weight[d], &t, err)) != HAP_OK)
      break;
    for (int i = 0; i < n_all[d] && st == HAP_OK; i++) {
      const step_row *r = &all[(size_t)d * per + (size_t)i];
      int ids[2] = {t, r->var};
      double c[2] = {1, r->coef};
      st = hap_lp_add_row(b->lp, ids, c, r->var < 0 ? 1 : 2, r->lo, INFINITY, err);
    }
  }
out:
  b->rows = NULL;
  free(all);
  free(n_all);
  free(weight);
  free(table);
  return st;
}

/* ---- segment boundaries ------------------------------------------------------------------ */

/* A Gather that crosses into a segment with other ratios moves only the difference of the two
 * contiguous splits (hap_shard_moved). Boundary k of the split (between devices k-1 and k, in
 * rank order) shifts by shift_k = sum_{j<k} (r[s][j] - r[t][j]) of the extent, and the devices
 * beside it send or receive at least |shift_k| of it. The shift is linear along a run of devices of
 * one class, so the boundaries where the class changes bound it: each crossing gets an epigraph
 * variable u >= c1S * |shift_k| there, with c1S the all-to-all's seconds for moving the whole
 * tensor less its latency. u is 0 while the two segments' ratios agree (then no step exists). */
static hap_status crossing_rows(lp_build *b, int32_t tensor, int32_t from_seg, int32_t to_seg,
                                hap_err *err) {
  syn_ctx *x = b->x;
  int32_t n = x->n, nc = x->n_classes;
  double S = (double)hap_tensor_bytes(&x->g->tensors[tensor]) * hap_reshard_spread(n);
  double w = 2;
  if (!x->plain) {
    double wf, wb;
    syn_comm_weights(x, tensor, &wf, &wb);
    w = wf + wb;
  }
  double c1S = w * (hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE,
                                  hap_coll_bytes_uniform(S, n)) -
                    hap_coll_time(&x->world, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE,
                                  hap_coll_bytes_uniform(1, n)));
  if (!(c1S > 0) || !isfinite(c1S))
    return HAP_OK;
  int u;
  HAP_TRY(hap_lp_add_var(b->lp, 0, INFINITY, 1, &u, err));
  int *ids = malloc((size_t)(2 * nc + 1) * sizeof *ids);
  double *coefs = malloc((size_t)(2 * nc + 1) * sizeof *coefs);
  int32_t *before = calloc((size_t)nc, sizeof *before); /* devices of each class before k */
  hap_status st = ids && coefs && before ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "out of memory");
  for (int32_t k = 1; k < n && st == HAP_OK; k++) {
    before[x->dev_class[k - 1]]++;
    if (x->dev_class[k - 1] == x->dev_class[k])
      continue;
    for (int sign = -1; sign <= 1 && st == HAP_OK; sign += 2) {
      int m = 0;
      ids[m] = u;
      coefs[m++] = 1;
      for (int32_t c = 0; c < nc; c++) {
        if (before[c] == 0)
          continue;
        ids[m] = b->r[(size_t)from_seg * (size_t)nc + (size_t)c];
        coefs[m++] = -sign * c1S * before[c];
        ids[m] = b->r[(size_t)to_seg * (size_t)nc + (size_t)c];
        coefs[m++] = sign * c1S * before[c];
      }
      st = hap_lp_add_row(b->lp, ids, coefs, m, 0, INFINITY, err);
    }
  }
  free(ids);
  free(coefs);
  free(before);
  return st;
}

/* A Gather of a tensor available under some segment's ratios (chained per tensor). */
typedef struct avail_gather {
  hap_layout layout;
  int32_t segment;
  int64_t granule;
  int32_t next;
} avail_gather;

/* Whether the chain from `e` holds (layout, seg, gran); *other gets a segment it holds the same
 * layout and granule under, -1 if none. */
static bool find_gather(const avail_gather *av, int32_t e, hap_layout layout, int32_t seg,
                        int64_t gran, int32_t *other) {
  bool found = false;
  for (; e >= 0 && av != NULL; e = av[e].next)
    if (av[e].layout == layout && av[e].granule == gran) {
      found = found || av[e].segment == seg;
      *other = av[e].segment;
    }
  return found;
}

/* Every crossing of the program: an explicit all-to-all between two segments of one layout, or a
 * compute step that reads a Gather made under another segment whose ratios are (for now) the
 * same, which becomes one once the ratios differ. */
static hap_status segment_crossings(lp_build *b, const hap_plan *plan, hap_err *err) {
  syn_ctx *x = b->x;
  if (x->n_segments < 2)
    return HAP_OK;
  int32_t nt = x->g->n_tensors;
  int32_t *head = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *head);
  avail_gather *av = NULL;
  int32_t n_av = 0, cap_av = 0;
  hap_status st = head ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "out of memory");
  for (int32_t t = 0; t < nt && head != NULL; t++)
    head[t] = -1;
  for (int32_t j = 0; j < plan->n_steps && st == HAP_OK; j++) {
    const hap_step *s = &plan->steps[j];
    int32_t tensors[HAP_MAX_OP_INPUTS + HAP_MAX_OP_OUTPUTS];
    hap_layout layouts[HAP_MAX_OP_INPUTS + HAP_MAX_OP_OUTPUTS];
    bool reads[HAP_MAX_OP_INPUTS + HAP_MAX_OP_OUTPUTS];
    int m = 0;
    int64_t gran = 1;
    if (s->kind == HAP_STEP_COMPUTE) {
      const hap_node *node = &x->g->nodes[s->node];
      gran = s->variant.granule > 1 ? s->variant.granule : 1;
      for (int i = 0; i < node->n_inputs; i++, m++) {
        tensors[m] = node->inputs[i];
        layouts[m] = s->variant.in[i];
        reads[m] = true;
      }
      for (int o = 0; o < node->n_outputs; o++, m++) {
        tensors[m] = node->outputs[o];
        layouts[m] = s->variant.out[o];
        reads[m] = false;
      }
    } else {
      gran = s->granule > 1 ? s->granule : 1;
      if (s->kind == HAP_STEP_COMM && s->comm == HAP_COMM_ALL_TO_ALL && s->from >= 0 &&
          s->from == s->to && s->from_segment != s->segment)
        st = crossing_rows(b, s->tensor, s->from_segment, s->segment, err);
      tensors[m] = s->tensor;
      layouts[m] = s->to;
      reads[m++] = false;
    }
    for (int i = 0; i < m && st == HAP_OK; i++) {
      if (layouts[i] < 0)
        continue;
      int32_t other = -1;
      if (find_gather(av, head[tensors[i]], layouts[i], s->segment, gran, &other))
        continue;
      if (reads[i] && other >= 0 && (st = crossing_rows(b, tensors[i], other, s->segment, err)))
        break;
      if (HAP_VEC_RESERVE(av, cap_av, n_av + 1, 64)) {
        st = hap_err_set(err, HAP_ENOMEM, "out of memory");
        break;
      }
      av[n_av] = (avail_gather){layouts[i], s->segment, gran, head[tensors[i]]};
      head[tensors[i]] = n_av++;
    }
  }
  free(head);
  free(av);
  return st;
}

/* A row that equals an earlier segment's up to the solver's rounding (1e-9 per ratio) becomes
 * that row exactly, so the two segments share their Gathers (hap_plan_same_split). */
static void same_as_earlier(double *ratios, int32_t s, int32_t n) {
  double *row = ratios + (size_t)s * (size_t)n;
  for (int32_t e = 0; e < s; e++) {
    const double *earlier = ratios + (size_t)e * (size_t)n;
    bool close = true;
    for (int32_t i = 0; i < n && close; i++)
      close = fabs(row[i] - earlier[i]) <= 1e-9;
    if (close) {
      memcpy(row, earlier, (size_t)n * sizeof *row);
      return;
    }
  }
}

static hap_status build_and_solve(lp_build *b, const hap_plan *plan, double *ratios, hap_err *err) {
  syn_ctx *x = b->x;
  int32_t n = x->n, nc = x->n_classes;
  for (int32_t i = 0; i < nc; i++) {
    b->count[i] = 0;
    b->rep[i] = 0;
  }
  for (int32_t i = n - 1; i >= 0; i--) {
    b->rep[x->dev_class[i]] = i;
    b->count[x->dev_class[i]]++;
  }
  for (int32_t s = 0; s < x->n_segments; s++) {
    b->m[s] = -1;
    for (int32_t i = 0; i < nc; i++)
      HAP_TRY(hap_lp_add_var(b->lp, 0, 1, 0, &b->r[(size_t)s * (size_t)nc + (size_t)i], err));
    for (int32_t i = 0; i < nc; i++) {
      b->ids[i] = b->r[(size_t)s * (size_t)nc + (size_t)i];
      b->coefs[i] = b->count[i];
    }
    HAP_TRY(hap_lp_add_row(b->lp, b->ids, b->coefs, nc, 1, 1, err));
  }
  HAP_TRY(memory_rows(b, plan, err));
  HAP_TRY(step_rows(b, plan, err));
  HAP_TRY(segment_crossings(b, plan, err));
  double *sol = malloc((size_t)hap_lp_n_vars(b->lp) * sizeof *sol);
  if (sol == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory solving the ratio LP");
  hap_status st = hap_lp_solve(b->lp, sol, NULL, err);
  if (st == HAP_OK) {
    for (int32_t s = 0; s < x->n_segments; s++) {
      double sum = 0;
      for (int32_t i = 0; i < n; i++) {
        double r = fmax(0, sol[b->r[(size_t)s * (size_t)nc + (size_t)x->dev_class[i]]]);
        ratios[(size_t)s * (size_t)n + (size_t)i] = r;
        sum += r;
      }
      for (int32_t i = 0; i < n; i++)
        ratios[(size_t)s * (size_t)n + (size_t)i] /= sum;
      same_as_earlier(ratios, s, n);
    }
  }
  free(sol);
  return st;
}

/* New ratios for the program `variants` (under the ratios installed in x). Returns false, leaving
 * `ratios` as they were, when the LP cannot be built or solved; the program keeps its ratios. */
bool syn_balance(syn_ctx *x, const int8_t *variants, double *ratios, hap_err *err) {
  (void)err; /* a failed LP is not fatal: the alternation simply stops */
  hap_plan *plan = hap_plan_create("balance", "", 0, "", 0, x->n, x->n_segments);
  lp_build b = {x, hap_lp_create("ratios"), NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
  b.r = calloc((size_t)x->n_segments * (size_t)x->n_classes, sizeof *b.r);
  b.rep = calloc((size_t)x->n_classes, sizeof *b.rep);
  b.count = malloc((size_t)x->n_classes * sizeof *b.count);
  b.m = malloc((size_t)x->n_segments * sizeof *b.m);
  b.ids = malloc((size_t)x->n * sizeof *b.ids);
  b.coefs = malloc((size_t)x->n * sizeof *b.coefs);
  double *next = malloc((size_t)x->n_segments * (size_t)x->n * sizeof *next);
  bool ok = false;
  double cost;
  hap_err local = {0};
  if (plan && b.lp && b.r && b.rep && b.count && b.m && b.ids && b.coefs && next &&
      syn_replay(x, variants, plan, &cost, &local) == HAP_OK &&
      build_and_solve(&b, plan, next, &local) == HAP_OK) {
    memcpy(ratios, next, (size_t)x->n_segments * (size_t)x->n * sizeof *next);
    ok = true;
  }
  free(next);
  free(b.r);
  free(b.rep);
  free(b.count);
  free(b.m);
  free(b.ids);
  free(b.coefs);
  hap_lp_destroy(b.lp);
  hap_plan_destroy(plan);
  return ok;
}
