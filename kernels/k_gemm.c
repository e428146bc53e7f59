/* k_gemm.c — the GEMM family: linear, matmul/bmm (broadcast batch dims), einsum (any valid
 * two-operand equation, reduced to one batched GEMM), conv2d (im2col + GEMM). Semantics:
 * docs/ops.md; GEMMs accumulate in float32 (OpenBLAS), bias and other sums in double. */
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kern_math.h"

/* Column sums of g [m, n] added to db [n] (double accumulation). */
hap_status k_add_col_sums(const float *g, int64_t m, int64_t n, float *db, hap_err *err) {
  double *acc = k_calloc((size_t)n, sizeof(double), err);
  if (acc == NULL)
    return HAP_ENOMEM;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      acc[j] += g[i * n + j];
  for (int64_t j = 0; j < n; j++)
    db[j] += (float)acc[j];
  free(acc);
  return HAP_OK;
}

/* ---- linear: y = x W^T + b over the last dim ------------------------------------------------ */

lin_dims k_linear_dims(const hap_op_io *io) {
  const hap_shape *x = &io->in[0];
  int64_t k = x->dims[x->rank - 1];
  return (lin_dims){k_prod(x, 0, x->rank - 1), io->in[1].dims[0], k};
}

hap_status k_linear_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  (void)err;
  lin_dims d = k_linear_dims(c->io);
  const float *x = c->in[0], *w = c->in[1];
  float *y = out[0];
  bool bias = c->io->n_in > 2 && !k_once_zero(c, 2);
  if (bias) /* y starts as the bias rows and the GEMM adds x W^T: no pass of its own */
    k_fill_rows(y, d.m, d.n, c->in[2]);
  k_sgemm(false, true, d.m, d.n, d.k, 1.0f, x, d.k, w, d.k, bias ? 1.0f : 0.0f, y, d.n);
  return HAP_OK;
}

hap_status k_linear_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  lin_dims d = k_linear_dims(io);
  const float *x = c->in[0], *w = c->in[1], *g = dout[0];
  if (io->in_grad[0]) /* dx [m, k] += g [m, n] W [n, k] */
    k_sgemm(false, false, d.m, d.k, d.n, 1.0f, g, d.n, w, d.k, k_beta(c, 0), din[0], d.k);
  if (io->in_grad[1]) /* dW [n, k] += g^T [n, m] x [m, k] */
    k_sgemm(true, false, d.n, d.k, d.m, 1.0f, g, d.n, x, d.k, k_beta(c, 1), din[1], d.k);
  if (io->n_in > 2 && io->in_grad[2]) {
    k_clear_fresh(c, din, 2, d.n);
    if (!k_once_zero(c, 2))
      return k_add_col_sums(g, d.m, d.n, din[2], err);
  }
  return HAP_OK;
}

/* ---- matmul, bmm ----------------------------------------------------------------------------- */

void k_mm_plan_of(const hap_op_io *io, mm_plan *p) {
  const hap_shape *a = &io->in[0], *b = &io->in[1], *o = &io->out[0];
  memset(p, 0, sizeof *p);
  p->m = a->dims[a->rank - 2];
  p->k = a->dims[a->rank - 1];
  p->n = b->dims[b->rank - 1];
  p->batch = *o;
  p->batch.rank -= 2;
  hap_shape ab = *a, bb = *b;
  ab.rank -= 2;
  bb.rank -= 2;
  k_bcast_strides(&ab, &p->batch, p->sa);
  k_bcast_strides(&bb, &p->batch, p->sb);
  p->batches = k_numel(&p->batch);
}

/* Matrix offsets (in matrices) of a and b for output batch t. */
void k_mm_offsets(const mm_plan *p, int64_t t, int64_t *ia, int64_t *ib) {
  *ia = *ib = 0;
  for (int d = p->batch.rank - 1; d >= 0; d--) {
    int64_t i = t % p->batch.dims[d];
    t /= p->batch.dims[d];
    *ia += i * p->sa[d];
    *ib += i * p->sb[d];
  }
}

hap_status k_matmul_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  (void)err;
  mm_plan p;
  k_mm_plan_of(c->io, &p);
  const float *a = c->in[0], *b = c->in[1];
  float *y = out[0];
  for (int64_t t = 0; t < p.batches; t++) {
    int64_t ia, ib;
    k_mm_offsets(&p, t, &ia, &ib);
    k_sgemm(false, false, p.m, p.n, p.k, 1.0f, a + ia * p.m * p.k, p.k, b + ib * p.k * p.n, p.n,
            0.0f, y + t * p.m * p.n, p.n);
  }
  return HAP_OK;
}

hap_status k_matmul_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  (void)err;
  mm_plan p;
  k_mm_plan_of(c->io, &p);
  const float *a = c->in[0], *b = c->in[1], *g = dout[0];
  for (int64_t t = 0; t < p.batches; t++) {
    int64_t ia, ib;
    k_mm_offsets(&p, t, &ia, &ib);
    const float *gt = g + t * p.m * p.n;
    if (c->io->in_grad[0]) /* da [m, k] += g [m, n] b^T */
      k_sgemm(false, true, p.m, p.k, p.n, 1.0f, gt, p.n, b + ib * p.k * p.n, p.n, 1.0f,
              din[0] + ia * p.m * p.k, p.k);
    if (c->io->in_grad[1]) /* db [k, n] += a^T g */
      k_sgemm(true, false, p.k, p.n, p.m, 1.0f, a + ia * p.m * p.k, p.k, gt, p.n, 1.0f,
              din[1] + ib * p.k * p.n, p.n);
  }
  return HAP_OK;
}

/* ---- einsum ---------------------------------------------------------------------------------- */

typedef struct ein_eq {
  char ix[3][HAP_MAX_DIMS + 1]; /* operand a, operand b, output */
} ein_eq;

static hap_status ein_parse(const hap_kernel_call *c, ein_eq *e, hap_err *err) {
  const char *eq = hap_attr_s(c->io->attrs, hap_op_attr_index(HAP_OP_EINSUM, "equation"));
  memset(e, 0, sizeof *e);
  int part = 0, n = 0;
  for (const char *p = eq; *p; p++) {
    if (*p >= 'a' && *p <= 'z') {
      if (n >= HAP_MAX_DIMS || part > 2)
        return hap_err_set(err, HAP_EUNSUPPORTED, "einsum '%s': too many indices", eq);
      e->ix[part][n++] = *p;
    } else if (*p == ',' && part == 0) {
      part = 1;
      n = 0;
    } else if (*p == '-' && p[1] == '>' && part == 1) {
      part = 2;
      n = 0;
      p++;
    } else {
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "einsum '%s': only two-operand equations of lowercase indices "
                         "('ab,bc->ac') are supported",
                         eq);
    }
  }
  if (part != 2)
    return hap_err_set(err, HAP_EUNSUPPORTED, "einsum '%s': expected 'ab,bc->ac'", eq);
  return HAP_OK;
}

/* Where a letter goes in the batched GEMM [T, M, K] x [T, K, N] -> [T, M, N]. */
enum { CL_T, CL_M, CL_N, CL_K, CL_SUM_A, CL_SUM_B, CL_BCAST, CL_COUNT };

/* out (op: idx_o) = sum over the rest of A (idx_a) * B (idx_b); overwrite or accumulate. Indices
 * only in A or only in B are summed first; indices only in the output broadcast. */
static hap_status ein_contract(const char *ia, const float *A, const hap_shape *sa, const char *ib,
                               const float *B, const hap_shape *sb, const char *io_, float *O,
                               const hap_shape *so, bool accumulate, hap_err *err) {
  int64_t ext[26] = {0};
  unsigned where[26] = {0}; /* bit 0: A, 1: B, 2: out */
  const char *ix[3] = {ia, ib, io_};
  const hap_shape *sh[3] = {sa, sb, so};
  for (int t = 0; t < 3; t++)
    for (int d = 0; ix[t][d]; d++) {
      ext[ix[t][d] - 'a'] = sh[t]->dims[d];
      where[ix[t][d] - 'a'] |= 1u << t;
    }
  /* Each class's letters in a fixed order (output order for T, M, N; A's order for K) and each
   * letter's stride inside its class block. */
  int cls[26];
  int64_t within[26] = {0}, size[CL_COUNT];
  for (int k = 0; k < CL_COUNT; k++)
    size[k] = 1;
  char order[26 + 1] = {0};
  int no = 0;
  for (int d = 0; io_[d]; d++)
    order[no++] = io_[d];
  for (int d = 0; ia[d]; d++)
    if (!strchr(io_, ia[d]))
      order[no++] = ia[d];
  for (int d = 0; ib[d]; d++)
    if (!strchr(io_, ib[d]) && !strchr(ia, ib[d]))
      order[no++] = ib[d];
  for (int i = no - 1; i >= 0; i--) { /* last letters vary fastest */
    int l = order[i] - 'a';
    unsigned w = where[l];
    cls[l] = w == 7u   ? CL_T
             : w == 5u ? CL_M
             : w == 6u ? CL_N
             : w == 3u ? CL_K
             : w == 1u ? CL_SUM_A
             : w == 2u ? CL_SUM_B
                       : CL_BCAST;
    within[l] = size[cls[l]];
    size[cls[l]] *= ext[l];
  }
  int64_t T = size[CL_T], M = size[CL_M], N = size[CL_N], K = size[CL_K];
  float *a2 = k_calloc((size_t)(T * M * K), sizeof(float), err);
  float *b2 = k_calloc((size_t)(T * K * N), sizeof(float), err);
  float *c2 = k_calloc((size_t)(T * M * N), sizeof(float), err);
  if (a2 == NULL || b2 == NULL || c2 == NULL) {
    free(a2);
    free(b2);
    free(c2);
    return HAP_ENOMEM;
  }
  /* Stride of each operand dim in the packed [T, M, K] / [T, K, N] / [T, M, N] layouts. */
  int64_t coef[3][HAP_MAX_DIMS] = {{0}};
  for (int t = 0; t < 3; t++)
    for (int d = 0; ix[t][d]; d++) {
      int l = ix[t][d] - 'a';
      int64_t w = within[l];
      switch (cls[l]) {
      case CL_T: coef[t][d] = w * (t == 0 ? M * K : t == 1 ? K * N : M * N); break;
      case CL_M: coef[t][d] = w * (t == 0 ? K : N); break;
      case CL_N: coef[t][d] = w; break;
      case CL_K: coef[t][d] = t == 0 ? w : w * N; break;
      default: coef[t][d] = 0; break; /* summed or broadcast */
      }
    }
  const float *src[2] = {A, B};
  float *dst[2] = {a2, b2};
  for (int t = 0; t < 2; t++) {
    int64_t n = k_numel(sh[t]), idx[HAP_MAX_DIMS] = {0}, at = 0;
    int r = sh[t]->rank;
    for (int64_t f = 0; f < n; f++) {
      dst[t][at] += src[t][f];
      for (int d = r - 1; d >= 0; d--) {
        idx[d]++;
        at += coef[t][d];
        if (idx[d] < sh[t]->dims[d])
          break;
        at -= coef[t][d] * sh[t]->dims[d];
        idx[d] = 0;
      }
    }
  }
  for (int64_t t = 0; t < T; t++)
    k_sgemm(false, false, M, N, K, 1.0f, a2 + t * M * K, K, b2 + t * K * N, N, 0.0f, c2 + t * M * N,
            N);
  int64_t n = k_numel(so), idx[HAP_MAX_DIMS] = {0}, at = 0;
  for (int64_t f = 0; f < n; f++) {
    O[f] = accumulate ? O[f] + c2[at] : c2[at];
    for (int d = so->rank - 1; d >= 0; d--) {
      idx[d]++;
      at += coef[2][d];
      if (idx[d] < so->dims[d])
        break;
      at -= coef[2][d] * so->dims[d];
      idx[d] = 0;
    }
  }
  free(a2);
  free(b2);
  free(c2);
  return HAP_OK;
}

hap_status k_einsum_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  ein_eq e;
  HAP_TRY(ein_parse(c, &e, err));
  const hap_op_io *io = c->io;
  return ein_contract(e.ix[0], c->in[0], &io->in[0], e.ix[1], c->in[1], &io->in[1], e.ix[2], out[0],
                      &io->out[0], false, err);
}

hap_status k_einsum_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  ein_eq e;
  HAP_TRY(ein_parse(c, &e, err));
  const hap_op_io *io = c->io;
  if (io->in_grad[0]) /* da = einsum(g, b -> a) */
    HAP_TRY(ein_contract(e.ix[2], dout[0], &io->out[0], e.ix[1], c->in[1], &io->in[1], e.ix[0],
                         din[0], &io->in[0], true, err));
  if (io->in_grad[1]) /* db = einsum(a, g -> b) */
    HAP_TRY(ein_contract(e.ix[0], c->in[0], &io->in[0], e.ix[2], dout[0], &io->out[0], e.ix[1],
                         din[1], &io->in[1], true, err));
  return HAP_OK;
}

/* ---- conv2d: im2col + GEMM per image --------------------------------------------------------- */

typedef struct conv_dims {
  int64_t n, c, h, w, o, kh, kw, ho, wo, stride, pad;
} conv_dims;

static conv_dims conv_dims_of(const hap_op_io *io) {
  const hap_shape *x = &io->in[0], *w = &io->in[1], *y = &io->out[0];
  return (conv_dims){x->dims[0],
                     x->dims[1],
                     x->dims[2],
                     x->dims[3],
                     w->dims[0],
                     w->dims[2],
                     w->dims[3],
                     y->dims[2],
                     y->dims[3],
                     k_attr_i(io, HAP_OP_CONV2D, "stride"),
                     k_attr_i(io, HAP_OP_CONV2D, "padding")};
}

/* The output columns ox whose input column jx = ox * stride + j - pad lies in [0, w): [*lo, *hi).
 */
static void conv_valid_cols(const conv_dims *d, int64_t j, int64_t *lo, int64_t *hi) {
  int64_t a = d->pad - j, b = d->w + d->pad - j; /* need a <= ox * stride < b */
  *lo = a <= 0 ? 0 : (a + d->stride - 1) / d->stride;
  *hi = b <= 0 ? 0 : (b + d->stride - 1) / d->stride;
  *hi = *hi < d->wo ? *hi : d->wo;
  *lo = *lo < *hi ? *lo : *hi;
}

/* dst[0 .. n) = src[0 .. n): memcpy for long runs, a plain loop for short ones (where a call
 * costs more than the copy). */
static void copy_run(float *dst, const float *src, int64_t n) {
  if (n >= 16) {
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; i++)
    dst[i] = src[i];
}

/* Small feature maps (conv_small): per kernel tap (i, j), the input offset in a channel plane that
 * each output position p reads, -1 in the padding; one table serves every channel and image, so a
 * column row is one flat gather with no per-row overhead. */
static int32_t *conv_taps(const conv_dims *d, hap_err *err) {
  int64_t hw = d->ho * d->wo;
  int32_t *t = k_malloc((size_t)(d->kh * d->kw * hw), sizeof(int32_t), err);
  if (t == NULL)
    return NULL;
  for (int64_t i = 0; i < d->kh; i++)
    for (int64_t j = 0; j < d->kw; j++)
      for (int64_t oy = 0; oy < d->ho; oy++)
        for (int64_t ox = 0; ox < d->wo; ox++) {
          int64_t iy = oy * d->stride + i - d->pad, jx = ox * d->stride + j - d->pad;
          bool in = iy >= 0 && iy < d->h && jx >= 0 && jx < d->w;
          t[(i * d->kw + j) * hw + oy * d->wo + ox] = in ? (int32_t)(iy * d->w + jx) : -1;
        }
  return t;
}

/* Stride 1 with output rows as wide as input rows ("same" padding along x): tap (i, j)'s column
 * row is the input plane shifted by (i - pad) * w + (j - pad) elements, so one contiguous run of it
 * is valid except where a column wrapped into the row above or below. */
static bool conv_flat(const conv_dims *d) { return d->stride == 1 && d->wo == d->w; }

/* Maps small enough for the tap tables: below 8 columns out for conv_flat (measured: its runs win
 * from 8), below 16 otherwise. */
static bool conv_small(const conv_dims *d) { return d->wo < (conv_flat(d) ? 8 : 16); }

/* Tap (i, j) of a conv_flat convolution: the positions [*p0, *p1) of the shifted run (output row
 * oy_lo's column lo to row oy_hi - 1's column hi - 1), the valid output rows [*oy_lo, *oy_hi) and
 * columns [*lo, *hi), and the shift from output to input position. Returns false when no output
 * position reads the input through this tap. */
static bool flat_tap(const conv_dims *d, int64_t i, int64_t j, int64_t *p0, int64_t *p1,
                     int64_t *oy_lo, int64_t *oy_hi, int64_t *lo, int64_t *hi, int64_t *shift) {
  *oy_lo = d->pad - i > 0 ? d->pad - i : 0;
  *oy_hi = d->h + d->pad - i < d->ho ? d->h + d->pad - i : d->ho;
  conv_valid_cols(d, j, lo, hi);
  if (*oy_hi <= *oy_lo || *hi <= *lo)
    return false;
  *p0 = *oy_lo * d->wo + *lo;
  *p1 = (*oy_hi - 1) * d->wo + *hi;
  *shift = (i - d->pad) * d->w + (j - d->pad);
  return true;
}

/* In a conv_flat row: zero the wrapped columns (outside [lo, hi)) of rows [oy_lo, oy_hi) that
 * lie inside the run [p0, p1). */
static void flat_zero_wrapped(const conv_dims *d, float *row, int64_t p0, int64_t p1, int64_t oy_lo,
                              int64_t oy_hi, int64_t lo, int64_t hi) {
  for (int64_t oy = oy_lo; oy < oy_hi; oy++) {
    for (int64_t p = oy * d->wo; p < oy * d->wo + lo; p++)
      if (p >= p0)
        row[p] = 0.0f;
    for (int64_t p = oy * d->wo + hi; p < (oy + 1) * d->wo; p++)
      if (p < p1)
        row[p] = 0.0f;
  }
}

/* dst[k] += src[k] for k < n. */
static void add_run(float *restrict dst, const float *restrict src, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    dst[k] += src[k];
}

/* col [C*kh*kw, ho*wo] (row r at col + r * ld) from one image x [C, H, W] (zero padding). Small
 * maps gather through `taps` (conv_taps); conv_flat maps copy each tap's shifted run at once;
 * others go row by row, the padding as zero runs and the inside as a copy. */
static void im2col(const conv_dims *d, const float *x, float *col, int64_t ld,
                   const int32_t *taps) {
  if (taps != NULL) {
    int64_t hw = d->ho * d->wo, n_taps = d->kh * d->kw;
    for (int64_t ci = 0; ci < d->c; ci++)
      for (int64_t t = 0; t < n_taps; t++) {
        const float *plane = x + ci * d->h * d->w;
        const int32_t *at = taps + t * hw;
        float *row = col + (ci * n_taps + t) * ld;
        for (int64_t p = 0; p < hw; p++) {
          int32_t a = at[p] >= 0 ? at[p] : 0;
          float v = plane[a];
          row[p] = at[p] >= 0 ? v : 0.0f;
        }
      }
    return;
  }
  if (conv_flat(d)) {
    int64_t hw = d->ho * d->wo;
    for (int64_t ci = 0; ci < d->c; ci++)
      for (int64_t i = 0; i < d->kh; i++)
        for (int64_t j = 0; j < d->kw; j++) {
          float *row = col + ((ci * d->kh + i) * d->kw + j) * ld;
          int64_t p0 = 0, p1 = 0, oy_lo, oy_hi, lo, hi, shift = 0;
          if (flat_tap(d, i, j, &p0, &p1, &oy_lo, &oy_hi, &lo, &hi, &shift)) {
            memcpy(row + p0, x + ci * d->h * d->w + p0 + shift, (size_t)(p1 - p0) * sizeof(float));
            flat_zero_wrapped(d, row, p0, p1, oy_lo, oy_hi, lo, hi);
          }
          memset(row, 0, (size_t)p0 * sizeof(float));
          memset(row + p1, 0, (size_t)(hw - p1) * sizeof(float));
        }
    return;
  }
  for (int64_t ci = 0; ci < d->c; ci++)
    for (int64_t i = 0; i < d->kh; i++)
      for (int64_t j = 0; j < d->kw; j++) {
        float *row = col + ((ci * d->kh + i) * d->kw + j) * ld;
        int64_t lo, hi;
        conv_valid_cols(d, j, &lo, &hi);
        for (int64_t oy = 0; oy < d->ho; oy++) {
          float *dst = row + oy * d->wo;
          int64_t iy = oy * d->stride + i - d->pad;
          if (iy < 0 || iy >= d->h) {
            for (int64_t ox = 0; ox < d->wo; ox++)
              dst[ox] = 0.0f;
            continue;
          }
          const float *src = x + (ci * d->h + iy) * d->w; /* ox reads src[ox * stride + off] */
          int64_t off = j - d->pad;
          for (int64_t ox = 0; ox < lo; ox++)
            dst[ox] = 0.0f;
          if (d->stride == 1 && hi > lo)
            copy_run(dst + lo, src + lo + off, hi - lo);
          else
            for (int64_t ox = lo; ox < hi; ox++)
              dst[ox] = src[ox * d->stride + off];
          for (int64_t ox = hi; ox < d->wo; ox++)
            dst[ox] = 0.0f;
        }
      }
}

/* dx [C, H, W] += the columns of col (row r at col + r * ld) scattered back (the inverse walk of
 * im2col, through `taps` for small maps). col is scratch: conv_flat maps overwrite its wrapped
 * columns with zeros. */
static void col2im(const conv_dims *d, float *col, int64_t ld, float *dx, const int32_t *taps) {
  if (taps != NULL) {
    int64_t hw = d->ho * d->wo, n_taps = d->kh * d->kw;
    for (int64_t ci = 0; ci < d->c; ci++)
      for (int64_t t = 0; t < n_taps; t++) {
        float *plane = dx + ci * d->h * d->w;
        const int32_t *at = taps + t * hw;
        const float *row = col + (ci * n_taps + t) * ld;
        for (int64_t p = 0; p < hw; p++)
          if (at[p] >= 0)
            plane[at[p]] += row[p];
      }
    return;
  }
  if (conv_flat(d)) { /* the wrapped columns zeroed in the scratch row, then one contiguous add */
    for (int64_t ci = 0; ci < d->c; ci++)
      for (int64_t i = 0; i < d->kh; i++)
        for (int64_t j = 0; j < d->kw; j++) {
          float *row = col + ((ci * d->kh + i) * d->kw + j) * ld;
          int64_t p0, p1, oy_lo, oy_hi, lo, hi, shift;
          if (!flat_tap(d, i, j, &p0, &p1, &oy_lo, &oy_hi, &lo, &hi, &shift))
            continue;
          flat_zero_wrapped(d, row, p0, p1, oy_lo, oy_hi, lo, hi);
          add_run(dx + ci * d->h * d->w + p0 + shift, row + p0, p1 - p0);
        }
    return;
  }
  for (int64_t ci = 0; ci < d->c; ci++)
    for (int64_t i = 0; i < d->kh; i++)
      for (int64_t j = 0; j < d->kw; j++) {
        const float *row = col + ((ci * d->kh + i) * d->kw + j) * ld;
        int64_t lo, hi;
        conv_valid_cols(d, j, &lo, &hi);
        for (int64_t oy = 0; oy < d->ho; oy++) {
          int64_t iy = oy * d->stride + i - d->pad;
          if (iy < 0 || iy >= d->h)
            continue;
          const float *src = row + oy * d->wo;
          float *dst = dx + (ci * d->h + iy) * d->w; /* ox adds to dst[ox * stride + off] */
          int64_t off = j - d->pad;
          for (int64_t ox = lo; ox < hi; ox++)
            dst[ox * d->stride + off] += src[ox];
        }
      }
}

/* Images per GEMM: small feature maps (fewer than 64 output positions) batch images until a
 * GEMM has about 256 columns, keeping the column buffer under 2^18 floats (1 MiB, a core's L2);
 * larger maps go one image at a time (a batch there only adds the regrouping copies). */
static int64_t conv_batch(const conv_dims *d) {
  int64_t hw = d->ho * d->wo, per_image = d->c * d->kh * d->kw * hw;
  if (hw <= 0 || hw >= 64 || per_image <= 0)
    return 1;
  int64_t nb = 256 / hw, fit = ((int64_t)1 << 18) / per_image;
  nb = nb < fit ? nb : fit;
  nb = nb < d->n ? nb : d->n;
  return nb > 1 ? nb : 1;
}

/* dst [O, m * hw] <-> src [m, O, hw]: the batch's images side by side per channel (to_cols), or
 * back. */
static void conv_regroup(const float *src, float *dst, int64_t m, int64_t o, int64_t hw,
                         bool to_cols) {
  for (int64_t k = 0; k < m; k++)
    for (int64_t c = 0; c < o; c++) {
      const float *a = to_cols ? src + (k * o + c) * hw : src + c * m * hw + k * hw;
      float *b = to_cols ? dst + c * m * hw + k * hw : dst + (k * o + c) * hw;
      copy_run(b, a, hw);
    }
}

hap_status k_conv2d_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  conv_dims d = conv_dims_of(c->io);
  int64_t ck = d.c * d.kh * d.kw, hw = d.ho * d.wo, nb = conv_batch(&d);
  float *col = k_malloc((size_t)(ck * nb * hw), sizeof(float), err); /* written in full */
  float *yt = nb > 1 ? k_malloc((size_t)(d.o * nb * hw), sizeof(float), err) : NULL;
  int32_t *taps = conv_small(&d) ? conv_taps(&d, err) : NULL;
  if (col == NULL || (nb > 1 && yt == NULL) || (conv_small(&d) && taps == NULL)) {
    free(col);
    free(yt);
    free(taps);
    return HAP_ENOMEM;
  }
  const float *x = c->in[0], *w = c->in[1];
  const float *b = c->io->n_in > 2 && !k_once_zero(c, 2) ? c->in[2] : NULL;
  float *y = out[0];
  for (int64_t i0 = 0; i0 < d.n; i0 += nb) {
    int64_t m = d.n - i0 < nb ? d.n - i0 : nb, ld = m * hw;
    for (int64_t k = 0; k < m; k++)
      im2col(&d, x + (i0 + k) * d.c * d.h * d.w, col + k * hw, ld, taps);
    float *yi = y + i0 * d.o * hw;
    /* y [O, m hw] = W [O, ck] col [ck, m hw], regrouped into [m, O, hw] */
    k_sgemm(false, false, d.o, ld, ck, 1.0f, w, ck, col, ld, 0.0f, m > 1 ? yt : yi, ld);
    if (m > 1)
      conv_regroup(yt, yi, m, d.o, hw, false);
    for (int64_t k = 0; b && k < m; k++)
      for (int64_t o = 0; o < d.o; o++)
        for (int64_t p = 0; p < hw; p++)
          yi[(k * d.o + o) * hw + p] += b[o];
  }
  free(taps);
  free(yt);
  free(col);
  return HAP_OK;
}

/* dst [n, m] = src [m, n] transposed. */
static void transpose_into(const float *src, int64_t m, int64_t n, float *dst) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      dst[j * m + i] = src[i * n + j];
}

/* The weight gradient as dW^T [ck, O] = col g^T, an NN GEMM, rather than dW = g col^T (NT), for
 * 16 to 64 output channels and maps of 64 positions or more: there OpenBLAS 0.3.21 runs the NN
 * form 1.1-1.7x faster (measured on VGG19's layers, docs/kernels.md), and transposing g (O rows)
 * costs little; with 256 channels (ViT's patch embedding) the transpose ate the gain. */
static bool conv_dw_transposed(const conv_dims *d) {
  return d->o >= 16 && d->o <= 64 && d->ho * d->wo >= 64;
}

/* db[o] += the sum of g [m, O, hw] over images and positions, in double. */
__attribute__((noinline)) static void conv_bias_grad(const float *g, int64_t m, int64_t o,
                                                     int64_t hw, double *db) {
  for (int64_t k = 0; k < m; k++)
    for (int64_t c = 0; c < o; c++)
      db[c] += k_sum_f64(g + (k * o + c) * hw, hw);
}

hap_status k_conv2d_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  conv_dims d = conv_dims_of(io);
  int64_t ck = d.c * d.kh * d.kw, hw = d.ho * d.wo, nb = conv_batch(&d);
  bool want_b = io->n_in > 2 && io->in_grad[2] && !k_once_zero(c, 2);
  float *col = k_malloc((size_t)(ck * nb * hw), sizeof(float), err); /* written in full */
  float *gt = nb > 1 ? k_malloc((size_t)(d.o * nb * hw), sizeof(float), err) : NULL;
  double *db = want_b ? k_calloc((size_t)d.o, sizeof(double), err) : NULL;
  int32_t *taps = conv_small(&d) ? conv_taps(&d, err) : NULL;
  bool dw_t = io->in_grad[1] && conv_dw_transposed(&d);
  float *g_t = dw_t ? k_malloc((size_t)(nb * hw * d.o), sizeof(float), err) : NULL;
  float *dw_sum = dw_t ? k_calloc((size_t)(ck * d.o), sizeof(float), err) : NULL; /* [ck, O] */
  if (col == NULL || (nb > 1 && gt == NULL) || (want_b && db == NULL) ||
      (conv_small(&d) && taps == NULL) || (dw_t && (g_t == NULL || dw_sum == NULL))) {
    free(col);
    free(gt);
    free(db);
    free(taps);
    free(g_t);
    free(dw_sum);
    return HAP_ENOMEM;
  }
  const float *x = c->in[0], *w = c->in[1], *g = dout[0];
  for (int64_t i0 = 0; i0 < d.n; i0 += nb) {
    int64_t m = d.n - i0 < nb ? d.n - i0 : nb, ld = m * hw;
    const float *gi = g + i0 * d.o * hw, *gc = gi; /* gc: g of the batch as [O, m hw] */
    if (m > 1) {
      conv_regroup(gi, gt, m, d.o, hw, true);
      gc = gt;
    }
    if (io->in_grad[1]) { /* dW [O, ck] += g [O, m hw] col^T */
      for (int64_t k = 0; k < m; k++)
        im2col(&d, x + (i0 + k) * d.c * d.h * d.w, col + k * hw, ld, taps);
      if (dw_t) { /* dW^T [ck, O] += col [ck, m hw] g^T [m hw, O] */
        transpose_into(gc, d.o, ld, g_t);
        k_sgemm(false, false, ck, d.o, ld, 1.0f, col, ld, g_t, d.o, 1.0f, dw_sum, d.o);
      } else {
        k_sgemm(false, true, d.o, ck, ld, 1.0f, gc, ld, col, ld, 1.0f, din[1], ck);
      }
    }
    if (io->in_grad[0]) { /* dcol [ck, m hw] = W^T g, scattered into dx */
      k_sgemm(true, false, ck, ld, d.o, 1.0f, w, ck, gc, ld, 0.0f, col, ld);
      for (int64_t k = 0; k < m; k++)
        col2im(&d, col + k * hw, ld, din[0] + (i0 + k) * d.c * d.h * d.w, taps);
    }
    if (db != NULL)
      conv_bias_grad(gi, m, d.o, hw, db);
  }
  for (int64_t o = 0; db && o < d.o; o++)
    din[2][o] += (float)db[o];
  for (int64_t o = 0; dw_t && o < d.o; o++)
    for (int64_t r = 0; r < ck; r++)
      din[1][o * ck + r] += dw_sum[r * d.o + o];
  free(g_t);
  free(dw_sum);
  free(taps);
  free(db);
  free(gt);
  free(col);
  return HAP_OK;
}
