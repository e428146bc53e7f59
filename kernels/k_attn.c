/* k_attn.c — multi_head_attention (batch-first, q/k/v in-projection blocks, optional additive
 * mask, dropout on the attention weights) and top2_gating (GShard-style top-2 routing with
 * capacity). Semantics: docs/ops.md and docs/kernels.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kern_math.h"

/* ---- multi_head_attention -------------------------------------------------------------------- */

enum { MHA_Q, MHA_K, MHA_V, MHA_W_IN, MHA_B_IN, MHA_W_OUT, MHA_B_OUT, MHA_MASK };

typedef struct mha_dims {
  int64_t n, l, s, e, p, h, hd;
  double scale, drop;
  /* GLOBAL_MASK: the full [n, h, l, s] weights and this device's offsets into them */
  int64_t n_full, h_full, l_full, n_off, h_off, l_off;
} mha_dims;

static mha_dims mha_dims_of(const hap_kernel_call *c) {
  const hap_op_io *io = c->io;
  mha_dims d = {0};
  d.n = io->in[MHA_Q].dims[0];
  d.l = io->in[MHA_Q].dims[1];
  d.e = io->in[MHA_Q].dims[2];
  d.s = io->in[MHA_K].dims[1];
  d.p = io->in[MHA_W_IN].dims[1];
  d.h = k_attr_i(io, HAP_OP_MULTI_HEAD_ATTENTION, "heads");
  d.hd = d.h > 0 ? d.p / d.h : 0;
  d.scale = d.hd > 0 ? 1 / sqrt((double)d.hd) : 1;
  d.drop = k_attr_f(io, HAP_OP_MULTI_HEAD_ATTENTION, "dropout");
  d.n_full = d.n;
  d.h_full = d.h;
  d.l_full = d.l;
  if (c->shard != NULL) {
    const hap_op_io *full = c->shard->full;
    const hap_variant *v = c->shard->variant;
    d.n_full = full->in[MHA_Q].dims[0];
    d.l_full = full->in[MHA_Q].dims[1];
    d.h_full = k_attr_i(full, HAP_OP_MULTI_HEAD_ATTENTION, "heads");
    if (v->in[MHA_Q] == 0)
      d.n_off = c->shard->offset;
    else if (v->in[MHA_Q] == 1)
      d.l_off = c->shard->offset;
    if (v->in[MHA_W_IN] == 1 && v->granule > 0)
      d.h_off = c->shard->offset / v->granule;
  }
  d.n_off += (int64_t)c->replica * d.n_full; /* 2-D plans: this replica's rows of the batch */
  return d;
}

/* State: Q, K, V projections, softmax weights (before dropout), context (after). */
typedef struct mha_state {
  float *q, *k, *v, *a, *ctx;
} mha_state;

static size_t mha_state_floats(const mha_dims *d) {
  return (size_t)(2 * d->n * d->l * d->p + 2 * d->n * d->s * d->p + d->n * d->h * d->l * d->s);
}

static mha_state mha_state_at(const mha_dims *d, float *base) {
  mha_state s;
  s.q = base;
  s.k = s.q + d->n * d->l * d->p;
  s.v = s.k + d->n * d->s * d->p;
  s.a = s.v + d->n * d->s * d->p;
  s.ctx = s.a + d->n * d->h * d->l * d->s;
  return s;
}

/* Attention weights of (batch b, head h) with dropout applied: dst [l, s] from a [l, s] (may be
 * a), scaled by 1 / (1 - p) where kept. Whether weight (b, h, i, j) survives is decided by its
 * position in the full [n, heads, l, s] weights. */
static void mha_dropout(const hap_kernel_call *c, const mha_dims *d, int64_t b, int64_t h,
                        const float *a, float *dst) {
  float keep_scale = (float)(1 / (1 - d->drop));
  int64_t row0 = ((b + d->n_off) * d->h_full + h + d->h_off) * d->l_full + d->l_off;
  for (int64_t i = 0; i < d->l; i++)
    k_dropout_run(c->seed, d->drop, (row0 + i) * d->s, a + i * d->s, keep_scale, dst + i * d->s,
                  d->s, false);
}

/* y [rows, p] = b + x [rows, e] W^T (W [p, e], b [p]). */
static void project(const float *x, int64_t rows, int64_t e, int64_t p, const float *w,
                    const float *b, float *y) {
  k_fill_rows(y, rows, p, b);
  k_sgemm(false, true, rows, p, e, 1.0f, x, e, w, e, 1.0f, y, p);
}

hap_status k_mha_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                     hap_err *err) {
  const hap_op_io *io = c->io;
  mha_dims d = mha_dims_of(c);
  void *buf = NULL;
  HAP_TRY(k_state_begin(st, c->op, mha_state_floats(&d) * sizeof(float), false, &buf, err));
  float *drop = d.drop > 0 ? k_calloc((size_t)(d.l * d.s), sizeof(float), err) : NULL;
  if (d.drop > 0 && drop == NULL) {
    k_state_end(st, buf);
    return HAP_ENOMEM;
  }
  mha_state s = mha_state_at(&d, buf);
  const float *w_in = c->in[MHA_W_IN], *b_in = c->in[MHA_B_IN];
  const float *mask = io->n_in > MHA_MASK ? c->in[MHA_MASK] : NULL;
  project(c->in[MHA_Q], d.n * d.l, d.e, d.p, w_in, b_in, s.q);
  project(c->in[MHA_K], d.n * d.s, d.e, d.p, w_in + d.p * d.e, b_in + d.p, s.k);
  project(c->in[MHA_V], d.n * d.s, d.e, d.p, w_in + 2 * d.p * d.e, b_in + 2 * d.p, s.v);
  for (int64_t b = 0; b < d.n; b++)
    for (int64_t h = 0; h < d.h; h++) {
      float *a = s.a + (b * d.h + h) * d.l * d.s;
      const float *qh = s.q + b * d.l * d.p + h * d.hd, *kh = s.k + b * d.s * d.p + h * d.hd;
      k_sgemm(false, true, d.l, d.s, d.hd, (float)d.scale, qh, d.p, kh, d.p, 0.0f, a, d.s);
      for (int64_t i = 0; i < d.l; i++) {
        float *row = a + i * d.s;
        for (int64_t j = 0; mask && j < d.s; j++)
          row[j] += mask[i * d.s + j];
        k_softmax_row(row, row, d.s, false); /* a fully masked row: zeros */
      }
      const float *ad = a;
      if (drop) {
        mha_dropout(c, &d, b, h, a, drop);
        ad = drop;
      }
      k_sgemm(false, false, d.l, d.hd, d.s, 1.0f, ad, d.s, s.v + b * d.s * d.p + h * d.hd, d.p,
              0.0f, s.ctx + b * d.l * d.p + h * d.hd, d.p);
    }
  float *y = out[0];
  bool bias = !k_once_zero(c, MHA_B_OUT);
  if (bias)
    k_fill_rows(y, d.n * d.l, d.e, c->in[MHA_B_OUT]);
  k_sgemm(false, true, d.n * d.l, d.e, d.p, 1.0f, s.ctx, d.p, c->in[MHA_W_OUT], d.p,
          bias ? 1.0f : 0.0f, y, d.e);
  free(drop);
  k_state_end(st, buf);
  return HAP_OK;
}

hap_status k_mha_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                     const hap_kernel_state *st, hap_err *err) {
  const hap_op_io *io = c->io;
  mha_dims d = mha_dims_of(c);
  hap_kernel_state tmp;
  void *data = NULL;
  HAP_TRY(k_state_for_backward(c, st, mha_state_floats(&d) * sizeof(float), &tmp, &data, err));
  mha_state s = mha_state_at(&d, data);
  int64_t nl = d.n * d.l, ns = d.n * d.s;
  /* scratch: dctx [nl, p], dq [nl, p], dk, dv [ns, p], three [l, s] buffers; every element is
   * written before it is read (each (batch, head) writes its own block of dq, dk and dv once) */
  size_t n_scratch = (size_t)(2 * nl * d.p + 2 * ns * d.p + 3 * d.l * d.s);
  float *scratch = k_malloc(n_scratch, sizeof(float), err);
  if (scratch == NULL) {
    hap_kernel_state_free(&tmp);
    return HAP_ENOMEM;
  }
  float *dctx = scratch, *dq = dctx + nl * d.p, *dk = dq + nl * d.p, *dv = dk + ns * d.p;
  float *ad = dv + ns * d.p, *da = ad + d.l * d.s, *ds = da + d.l * d.s;
  const float *g = dout[0], *w_in = c->in[MHA_W_IN], *w_out = c->in[MHA_W_OUT];
  if (io->in_grad[MHA_W_OUT]) /* dW_out [e, p] += g^T ctx */
    k_sgemm(true, false, d.e, d.p, nl, 1.0f, g, d.e, s.ctx, d.p, k_beta(c, MHA_W_OUT),
            din[MHA_W_OUT], d.p);
  hap_status st_sum = HAP_OK;
  if (io->in_grad[MHA_B_OUT])
    k_clear_fresh(c, din, MHA_B_OUT, d.e);
  if (io->in_grad[MHA_B_OUT] && !k_once_zero(c, MHA_B_OUT))
    st_sum = k_add_col_sums(g, nl, d.e, din[MHA_B_OUT], err);
  k_sgemm(false, false, nl, d.p, d.e, 1.0f, g, d.e, w_out, d.p, 0.0f, dctx, d.p);
  if (io->n_in > MHA_MASK && io->in_grad[MHA_MASK]) /* summed over (batch, head) below */
    k_clear_fresh(c, din, MHA_MASK, k_numel(&io->in[MHA_MASK]));
  for (int64_t b = 0; b < d.n; b++)
    for (int64_t h = 0; h < d.h; h++) {
      const float *a = s.a + (b * d.h + h) * d.l * d.s;
      int64_t oq = b * d.l * d.p + h * d.hd, ok = b * d.s * d.p + h * d.hd;
      const float *adv = a;
      if (d.drop > 0) {
        mha_dropout(c, &d, b, h, a, ad);
        adv = ad;
      }
      /* d(dropped weights) [l, s] = dctx_h V_h^T; dV_h = dropped^T dctx_h */
      k_sgemm(false, true, d.l, d.s, d.hd, 1.0f, dctx + oq, d.p, s.v + ok, d.p, 0.0f, da, d.s);
      k_sgemm(true, false, d.s, d.hd, d.l, 1.0f, adv, d.s, dctx + oq, d.p, 0.0f, dv + ok, d.p);
      if (d.drop > 0) /* through the mask: kept weights were scaled, dropped ones are 0 */
        mha_dropout(c, &d, b, h, da, da);
      for (int64_t i = 0; i < d.l; i++) {
        double dot = k_dot_f64(da + i * d.s, a + i * d.s, d.s);
        for (int64_t j = 0; j < d.s; j++) {
          int64_t at = i * d.s + j;
          ds[at] = (float)(a[at] * (da[at] - dot));
        }
      }
      if (io->n_in > MHA_MASK && io->in_grad[MHA_MASK])
        for (int64_t i = 0; i < d.l * d.s; i++)
          din[MHA_MASK][i] += ds[i];
      k_sgemm(false, false, d.l, d.hd, d.s, (float)d.scale, ds, d.s, s.k + ok, d.p, 0.0f, dq + oq,
              d.p);
      k_sgemm(true, false, d.s, d.hd, d.l, (float)d.scale, ds, d.s, s.q + oq, d.p, 0.0f, dk + ok,
              d.p);
    }
  const float *dproj[3] = {dq, dk, dv};
  int64_t rows[3] = {nl, ns, ns};
  if (io->in_grad[MHA_B_IN])
    k_clear_fresh(c, din, MHA_B_IN, 3 * d.p);
  /* q, k and v in this order: when they share one gradient buffer (self-attention), q's fresh
   * write comes first and k and v add to it (kernels.c's table) */
  for (int t = 0; t < 3; t++) {
    const float *wt = w_in + t * d.p * d.e;
    if (io->in_grad[MHA_W_IN]) /* dW_in[t] [p, e] += dproj^T x */
      k_sgemm(true, false, d.p, d.e, rows[t], 1.0f, dproj[t], d.p, c->in[t], d.e,
              k_beta(c, MHA_W_IN), din[MHA_W_IN] + t * d.p * d.e, d.e);
    if (io->in_grad[MHA_B_IN] && st_sum == HAP_OK)
      st_sum = k_add_col_sums(dproj[t], rows[t], d.p, din[MHA_B_IN] + t * d.p, err);
    if (io->in_grad[t]) /* dx [rows, e] += dproj W_in[t] */
      k_sgemm(false, false, rows[t], d.e, d.p, 1.0f, dproj[t], d.p, wt, d.e, k_beta(c, t), din[t],
              d.e);
  }
  free(scratch);
  hap_kernel_state_free(&tmp);
  return st_sum;
}

/* ---- top2_gating ----------------------------------------------------------------------------- */

/* Per token (b, s): experts e1, e2 and their slots (-1: over capacity), then the gate
 * probabilities [B*S, E]. */
typedef struct top2_dims {
  int64_t tokens, b, s, d, e, cap;
} top2_dims;

static top2_dims top2_dims_of(const hap_op_io *io) {
  const hap_shape *x = &io->in[0];
  return (top2_dims){x->dims[0] * x->dims[1],
                     x->dims[0],
                     x->dims[1],
                     x->dims[2],
                     io->in[1].dims[1],
                     k_attr_i(io, HAP_OP_TOP2_GATING, "capacity")};
}

static size_t top2_state_bytes(const top2_dims *d) {
  return (size_t)(4 * d->tokens) * sizeof(int64_t) + (size_t)(d->tokens * d->e) * sizeof(float);
}

hap_status k_top2_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                      hap_err *err) {
  top2_dims d = top2_dims_of(c->io);
  void *buf = NULL;
  HAP_TRY(k_state_begin(st, c->op, top2_state_bytes(&d), true, &buf, err));
  int64_t *choice = buf; /* [tokens][e1, e2, slot1, slot2] */
  float *prob = (float *)(choice + 4 * d.tokens);
  int64_t *count = k_calloc((size_t)d.e, sizeof(int64_t), err);
  if (count == NULL) {
    k_state_end(st, buf);
    return HAP_ENOMEM;
  }
  k_sgemm(false, false, d.tokens, d.e, d.d, 1.0f, c->in[0], d.d, c->in[1], d.e, 0.0f, prob, d.e);
  for (int64_t t = 0; t < d.tokens; t++) {
    float *p = prob + t * d.e;
    double mx = -INFINITY, z = 0;
    for (int64_t k = 0; k < d.e; k++)
      mx = fmax(mx, p[k]);
    for (int64_t k = 0; k < d.e; k++)
      z += exp(p[k] - mx);
    for (int64_t k = 0; k < d.e; k++)
      p[k] = (float)(exp(p[k] - mx) / z);
    int64_t e1 = 0, e2 = -1;
    for (int64_t k = 1; k < d.e; k++)
      if (p[k] > p[e1])
        e1 = k;
    for (int64_t k = 0; k < d.e; k++)
      if (k != e1 && (e2 < 0 || p[k] > p[e2]))
        e2 = k;
    choice[4 * t] = e1;
    choice[4 * t + 1] = e2;
  }
  float *dispatch = out[0], *combine = out[1];
  int64_t n_out = d.tokens * d.e * d.cap;
  if (n_out > 0) {
    memset(dispatch, 0, (size_t)n_out * sizeof(float));
    memset(combine, 0, (size_t)n_out * sizeof(float));
  }
  for (int64_t b = 0; b < d.b; b++) {
    memset(count, 0, (size_t)d.e * sizeof(int64_t));
    for (int k = 0; k < 2; k++) /* every first choice of the row takes a slot before any second */
      for (int64_t s = 0; s < d.s; s++) {
        int64_t t = b * d.s + s, ex = choice[4 * t + k], slot = count[ex]++;
        choice[4 * t + 2 + k] = slot < d.cap ? slot : -1;
        if (slot >= d.cap)
          continue;
        const float *p = prob + t * d.e;
        double sum = (double)p[choice[4 * t]] + p[choice[4 * t + 1]];
        int64_t at = (t * d.e + ex) * d.cap + slot;
        dispatch[at] = 1.0f;
        combine[at] = (float)(p[ex] / sum);
      }
  }
  free(count);
  k_state_end(st, buf);
  return HAP_OK;
}

hap_status k_top2_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                      const hap_kernel_state *st, hap_err *err) {
  const hap_op_io *io = c->io;
  const float *gc = dout[1]; /* dispatch is piecewise constant: no gradient */
  if (gc == NULL)
    return HAP_OK;
  top2_dims d = top2_dims_of(io);
  hap_kernel_state tmp;
  void *data = NULL;
  HAP_TRY(k_state_for_backward(c, st, top2_state_bytes(&d), &tmp, &data, err));
  const int64_t *choice = data;
  const float *prob = (const float *)(choice + 4 * d.tokens);
  float *dl = k_calloc((size_t)(d.tokens * d.e), sizeof(float), err); /* d logits */
  if (dl == NULL) {
    hap_kernel_state_free(&tmp);
    return HAP_ENOMEM;
  }
  for (int64_t t = 0; t < d.tokens; t++) {
    const int64_t *ch = choice + 4 * t;
    const float *p = prob + t * d.e;
    double g1 = ch[2] >= 0 ? gc[(t * d.e + ch[0]) * d.cap + ch[2]] : 0;
    double g2 = ch[3] >= 0 ? gc[(t * d.e + ch[1]) * d.cap + ch[3]] : 0;
    double p1 = p[ch[0]], p2 = p[ch[1]], sum = p1 + p2;
    /* combine weights p1 / (p1 + p2) and p2 / (p1 + p2) */
    double dp1 = (g1 - g2) * p2 / (sum * sum), dp2 = (g2 - g1) * p1 / (sum * sum);
    double dot = dp1 * p1 + dp2 * p2;
    for (int64_t k = 0; k < d.e; k++) {
      double dpk = k == ch[0] ? dp1 : k == ch[1] ? dp2 : 0;
      dl[t * d.e + k] = (float)(p[k] * (dpk - dot));
    }
  }
  if (io->in_grad[0]) /* dx [tokens, d] += dl W^T */
    k_sgemm(false, true, d.tokens, d.d, d.e, 1.0f, dl, d.e, c->in[1], d.e, 1.0f, din[0], d.d);
  if (io->in_grad[1]) /* dW [d, e] += x^T dl */
    k_sgemm(true, false, d.d, d.e, d.tokens, 1.0f, c->in[0], d.d, dl, d.e, 1.0f, din[1], d.e);
  free(dl);
  hap_kernel_state_free(&tmp);
  return HAP_OK;
}
