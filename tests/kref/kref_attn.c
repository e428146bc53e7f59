/* kref_attn.c — float64 reference of multi_head_attention and top2_gating (docs/ops.md,
 * docs/kernels.md), written from their definitions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h" /* hap_kernel_keep: the documented dropout mask, nothing else */
#include "kref_internal.h"

/* ---- multi_head_attention -------------------------------------------------------------------- */

/* query [N, L, E], key and value [N, S, E]; in_proj_weight [3, P, E] (blocks q, k, v), in_proj_bias
 * [3, P], out_proj_weight [E, P], out_proj_bias [E], optional additive mask [L, S]. Head h uses
 * columns h*hd .. (h+1)*hd - 1 of the projections (hd = P / heads); its weights are the softmax
 * over keys of q.k / sqrt(hd) + mask, then dropout (weight (n, h, i, j) kept by its position in
 * [N, heads, L, S], scaled by 1 / (1 - p)); the context is their sum of value rows, and the
 * output the context projected by out_proj. */

/* y [rows, p] = x [rows, e] w [p, e]^T + b [p]. */
static void project(const double *x, int64_t rows, int64_t e, const double *w, const double *b,
                    int64_t p, double *y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < p; j++) {
      double s = b[j];
      for (int64_t t = 0; t < e; t++)
        s += x[r * e + t] * w[j * e + t];
      y[r * p + j] = s;
    }
}

hap_status kr_mha(const kr_call *c, hap_err *err) {
  const hap_op_io *io = c->io;
  int64_t n = io->in[0].dims[0], l = io->in[0].dims[1], e = io->in[0].dims[2];
  int64_t s = io->in[1].dims[1], p = io->in[3].dims[1], heads = kr_attr_i(c, "heads");
  int64_t hd = p / heads;
  double drop = kr_attr_f(c, "dropout"), scale = 1 / sqrt((double)hd);
  const double *w_in = kr_x(c, 3), *b_in = kr_x(c, 4), *w_out = kr_x(c, 5), *b_out = kr_x(c, 6);
  const double *mask = io->n_in > 7 ? kr_x(c, 7) : NULL;
  /* scratch: q [n l, p], k and v [n s, p], context [n l, p], one row of weights [s] */
  double *q = calloc((size_t)(2 * n * l * p + 2 * n * s * p + s), sizeof(double));
  if (q == NULL)
    return hap_err_set(err, HAP_ENOMEM, "kref multi_head_attention: out of memory");
  double *k = q + n * l * p, *v = k + n * s * p, *ctx = v + n * s * p, *a = ctx + n * l * p;
  project(kr_x(c, 0), n * l, e, w_in, b_in, p, q);
  project(kr_x(c, 1), n * s, e, w_in + p * e, b_in + p, p, k);
  project(kr_x(c, 2), n * s, e, w_in + 2 * p * e, b_in + 2 * p, p, v);
  for (int64_t b = 0; b < n; b++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < l; i++) {
        const double *qi = q + (b * l + i) * p + h * hd;
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < s; j++) {
          const double *kj = k + (b * s + j) * p + h * hd;
          double dot = 0;
          for (int64_t t = 0; t < hd; t++)
            dot += qi[t] * kj[t];
          a[j] = dot * scale + (mask != NULL ? mask[i * s + j] : 0);
          mx = fmax(mx, a[j]);
        }
        for (int64_t j = 0; j < s; j++) {
          a[j] = mx == -INFINITY ? 0 : exp(a[j] - mx); /* a fully masked row: zero context */
          z += a[j];
        }
        for (int64_t j = 0; j < s; j++) {
          int64_t pos = ((b * heads + h) * l + i) * s + j;
          double wgt = z > 0 ? a[j] / z : 0;
          a[j] = hap_kernel_keep(c->seed, pos, drop) ? wgt / (1 - drop) : 0;
        }
        double *ci = ctx + (b * l + i) * p + h * hd;
        for (int64_t t = 0; t < hd; t++) {
          double acc = 0;
          for (int64_t j = 0; j < s; j++)
            acc += a[j] * v[(b * s + j) * p + h * hd + t];
          ci[t] = acc;
        }
      }
  project(ctx, n * l, p, w_out, b_out, e, c->out[0]);
  free(q);
  return HAP_OK;
}

/* ---- top2_gating ----------------------------------------------------------------------------- */

/* input [B, S, D], gate_weight [D, E]; outputs dispatch and combine [B, S, E, C]. Per token the
 * gate probabilities are the softmax over experts of x W; the first choice is the most probable
 * expert, the second the most probable of the others (ties: the lower expert). Within a batch row,
 * slots of an expert are handed out in sequence order to every first choice, then to every second
 * choice; a slot >= C drops that assignment. A kept assignment (s, e, slot) has dispatch 1 and
 * combine p_e / (p_first + p_second), normalised over both choices even if one was dropped. */

hap_status kr_top2(const kr_call *c, hap_err *err) {
  const hap_op_io *io = c->io;
  int64_t nb = io->in[0].dims[0], ns = io->in[0].dims[1], d = io->in[0].dims[2];
  int64_t ne = io->in[1].dims[1], cap = kr_attr_i(c, "capacity");
  const double *x = kr_x(c, 0), *w = kr_x(c, 1);
  double *dispatch = c->out[0], *combine = c->out[1];
  int64_t n_out = nb * ns * ne * cap;
  memset(dispatch, 0, (size_t)n_out * sizeof(double));
  memset(combine, 0, (size_t)n_out * sizeof(double));
  /* scratch: probabilities [S, E] of one batch row, choices [S][2], slots used per expert [E] */
  double *prob = calloc((size_t)(ns * ne), sizeof(double));
  int64_t *choice = calloc((size_t)(2 * ns + ne), sizeof(int64_t));
  if (prob == NULL || choice == NULL) {
    free(prob);
    free(choice);
    return hap_err_set(err, HAP_ENOMEM, "kref top2_gating: out of memory");
  }
  int64_t *used = choice + 2 * ns;
  for (int64_t b = 0; b < nb; b++) {
    for (int64_t t = 0; t < ns; t++) {
      const double *xt = x + (b * ns + t) * d;
      double *pt = prob + t * ne, mx = -INFINITY, z = 0;
      for (int64_t k = 0; k < ne; k++) {
        double logit = 0;
        for (int64_t j = 0; j < d; j++)
          logit += xt[j] * w[j * ne + k];
        pt[k] = logit;
        mx = fmax(mx, logit);
      }
      for (int64_t k = 0; k < ne; k++)
        z += exp(pt[k] - mx);
      for (int64_t k = 0; k < ne; k++)
        pt[k] = exp(pt[k] - mx) / z;
      int64_t first = -1, second = -1;
      for (int64_t k = 0; k < ne; k++) /* strict >: the lower expert wins a tie */
        if (first < 0 || pt[k] > pt[first])
          first = k;
      for (int64_t k = 0; k < ne; k++)
        if (k != first && (second < 0 || pt[k] > pt[second]))
          second = k;
      choice[2 * t] = first;
      choice[2 * t + 1] = second;
    }
    for (int64_t k = 0; k < ne; k++)
      used[k] = 0;
    for (int rank = 0; rank < 2; rank++) /* every first choice of the row, then every second */
      for (int64_t t = 0; t < ns; t++) {
        int64_t ex = choice[2 * t + rank], slot = used[ex]++;
        if (slot >= cap)
          continue;
        const double *pt = prob + t * ne;
        int64_t at = ((b * ns + t) * ne + ex) * cap + slot;
        dispatch[at] = 1;
        combine[at] = pt[ex] / (pt[choice[2 * t]] + pt[choice[2 * t + 1]]);
      }
  }
  free(prob);
  free(choice);
  return HAP_OK;
}
