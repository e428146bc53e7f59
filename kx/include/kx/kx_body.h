/* kx_body.h — the element bodies of kernel programs (kx.h), one source for two compilers: C11 (the
 * host executor in kx.c, which the CPU unit tests run) and CUDA C++ (kernels_run.cu, one thread
 * per index). Only <stdint.h>-level types here, so the .cu file needs nothing of the C headers.
 * Each body computes exactly what the CPU kernel (kernels/) computes for that index: the same
 * formulas, the same double accumulations and float roundings; sums over many indices go through
 * kx_add_d (an atomic add on a GPU, a plain add on the host). */
#ifndef HAP_KX_BODY_H
#define HAP_KX_BODY_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __CUDACC__
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#define KX_FN static __device__ inline
#else
#define KX_FN static inline
#endif

/* Buffers a pass names by slot. */
enum {
  HAP_KX_IN = 0,       /* 8: forward inputs */
  HAP_KX_OUT = 8,      /* 2: forward outputs */
  HAP_KX_DOUT = 10,    /* 2: output gradients */
  HAP_KX_DIN = 12,     /* 8: input gradients (accumulated) */
  HAP_KX_SCRATCH = 20, /* doubles, prog.scratch of them */
  HAP_KX_FLAG = 21,    /* one int64: the first bad index position */
  HAP_KX_SLOTS = 22,
  HAP_KX_NONE = -1
};

typedef enum hap_kx_kind {
  HAP_KX_GEMM = 0,    /* executor: C = alpha op(A) op(B) + beta C per batch */
  HAP_KX_ZERO,        /* scratch[i] = 0 */
  HAP_KX_FLAG_INIT,   /* flag = INT64_MAX (count 1) */
  HAP_KX_INDEX_CHECK, /* flag = min i with index a[i] outside [lo, hi) */
  HAP_KX_ROW_BIAS,    /* c[i] += a[i % n] (unless ZA) */
  HAP_KX_COL_SUM,     /* scratch[off + i % n] += a[i] */
  HAP_KX_SCRATCH_OUT, /* c[i] (+)= (float)(scratch[off + i] * scale / div) */
  HAP_KX_UNARY_F,     /* c = f(a), sub = op */
  HAP_KX_UNARY_B,     /* d += f'(a, b = y) * g */
  HAP_KX_BINARY_F,    /* c = a op b (broadcast), sub = op */
  HAP_KX_BINARY_B,    /* scratch[ia] += ga, scratch[off + ib] += gb */
  HAP_KX_SOFTMAX_F,   /* per row (outer x inner), sub: 1 = log_softmax */
  HAP_KX_SOFTMAX_B,
  HAP_KX_REDUCE_F, /* scratch[map(i)] += a[i] */
  HAP_KX_REDUCE_B, /* d[i] += (float)(g[map(i)] * scale) */
  HAP_KX_COPY,     /* bytes: c[i] = a[i] */
  HAP_KX_ADD,      /* d[i] += g[i] */
  HAP_KX_GATHER_F, /* c[i] = a[base + map(i)], sub = element bytes */
  HAP_KX_GATHER_B, /* d[base + map(i)] += g[i] */
  HAP_KX_CLS_F,
  HAP_KX_CLS_B,   /* d[i] += g[x part] */
  HAP_KX_CLS_SUM, /* scratch[i % h] += g[class token row] */
  HAP_KX_EMBED_F, /* sub = index bytes */
  HAP_KX_EMBED_B, /* d[row] += g (atomic) */
  HAP_KX_LN_F,    /* per row */
  HAP_KX_LN_B,    /* per row: dx, and scratch[j], scratch[inner + j] for dw, db */
  HAP_KX_LOSS_F,  /* per target: scratch[0] -= log p */
  HAP_KX_LOSS_B,  /* per target */
  HAP_KX_KIND_COUNT
} hap_kx_kind;

/* Flags of a pass. */
enum {
  HAP_KX_ZA = 1,      /* input a is zero here (BIAS_ONCE, rank != 0) */
  HAP_KX_ZB = 2,      /* input b is zero here */
  HAP_KX_SCALAR = 4,  /* binary: b is the scalar p0 */
  HAP_KX_ACC = 8,     /* SCRATCH_OUT: accumulate (else overwrite) */
  HAP_KX_WANT_A = 16, /* backward: gradient of a (input 0) wanted */
  HAP_KX_WANT_B = 32, /* gradient of b (input 1) */
  HAP_KX_LOCAL = 64,  /* embedding: vocab-parallel rows [off, off + rows) */
  HAP_KX_CE = 128,    /* loss: cross_entropy (else nll_loss) */
  HAP_KX_HAS_W = 256, /* layer_norm weight, bias */
  HAP_KX_HAS_B = 512,
  HAP_KX_FIRST = 1024 /* cls_append: the token at position 0 (else last) */
};

typedef struct hap_kx_pass {
  int32_t kind, sub, flags;
  int32_t a, b, c, d, g; /* slots (HAP_KX_NONE: unused) */
  int64_t count;         /* indices the body runs for */
  int32_t rank;          /* of dims, for map() */
  int64_t dims[8], sa[8], sb[8];
  int64_t n, len, inner, off, full_len, gpos_off, lo, hi, base, rows;
  int64_t gpos_base; /* dropout: the replica's first global position (2-D plans), else 0 */
  double p0, scale, div;
  uint64_t seed;
  /* GEMM: per batch t (batch dims in dims/rank, a's and b's matrix strides in sa/sb), operand
   * X at slot + sel(t) * st, sel 0: t, 1: a's batch, 2: b's batch */
  int32_t ta, tb, a_sel, b_sel, c_sel;
  int64_t m, k, lda, ldb, ldc, a_st, b_st, c_st, batches;
  float alpha, beta;
} hap_kx_pass;

/* UNARY sub-kinds. */
enum {
  HAP_KX_RELU,
  HAP_KX_GELU,
  HAP_KX_SIGMOID,
  HAP_KX_TANH,
  HAP_KX_RSQRT,
  HAP_KX_POW,
  HAP_KX_DROPOUT
};
/* BINARY sub-kinds. */
enum { HAP_KX_ADDOP, HAP_KX_SUBOP, HAP_KX_MULOP, HAP_KX_DIVOP };

/* The pointers of one run, by slot (a struct so a CUDA launch can take it by value). */
typedef struct hap_kx_ptrs {
  void *p[HAP_KX_SLOTS];
} hap_kx_ptrs;

/* ---- helpers ------------------------------------------------------------------------------- */

#define KX_INV_SQRT2    0.70710678118654752440
#define KX_INV_SQRT_2PI 0.39894228040143267794
#define KX_F(s, k)      ((float *)(s)[k])
#define KX_CF(s, k)     ((const float *)(s)[k])
#define KX_D(s, k)      ((double *)(s)[k])

/* scratch += v: atomic on a GPU. The active threads of a warp that add to the same address sum
 * their values first and one of them adds that (sums into one scalar, a loss or a bias gradient,
 * would otherwise queue every thread's atomic on one address). */
KX_FN void kx_add_d(double *a, double v) {
#ifdef __CUDACC__
  namespace cg = cooperative_groups;
  cg::coalesced_group same = cg::labeled_partition(cg::coalesced_threads(), a);
  double sum = cg::reduce(same, v, cg::plus<double>());
  if (same.thread_rank() == 0)
    atomicAdd(a, sum);
#else
  *a += v;
#endif
}

KX_FN void kx_add_f(float *a, float v) {
#ifdef __CUDACC__
  atomicAdd(a, v);
#else
  *a += v;
#endif
}

KX_FN void kx_min_i64(int64_t *a, int64_t v) {
#ifdef __CUDACC__
  atomicMin((long long *)a, (long long)v);
#else
  if (v < *a)
    *a = v;
#endif
}

/* Offset of flat index f (odometer over dims[0..rank)) under strides st. */
KX_FN int64_t kx_map(const hap_kx_pass *p, const int64_t *st, int64_t f) {
  int64_t at = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    at += (f % p->dims[d]) * st[d];
    f /= p->dims[d];
  }
  return at;
}

KX_FN int64_t kx_index(const void *buf, int32_t bytes, int64_t i) {
  return bytes == 4 ? (int64_t)((const int32_t *)buf)[i] : (int64_t)((const int64_t *)buf)[i];
}

/* hap_kernel_keep (kernels/kernels.c), bit for bit. */
KX_FN uint64_t kx_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

KX_FN bool kx_keep(uint64_t seed, int64_t pos, double p) {
  if (p <= 0)
    return true;
  uint64_t z = kx_mix64(kx_mix64(seed ^ 0x6a09e667f3bcc909ULL) +
                        ((uint64_t)pos + 1) * 0x9e3779b97f4a7c15ULL);
  double u = (double)(z >> 11) * 1.1102230246251565404e-16; /* 2^-53: uniform in [0, 1) */
  return u >= p;
}

/* Global position of local flat index f (k_gpos_at). */
KX_FN int64_t kx_gpos(const hap_kx_pass *p, int64_t f) {
  int64_t outer = f / (p->inner * p->len), j = (f / p->inner) % p->len;
  return p->gpos_base + (outer * p->full_len + j + p->gpos_off) * p->inner + f % p->inner;
}

KX_FN float kx_binary(int32_t op, float a, float b) {
  switch (op) {
  case HAP_KX_ADDOP: return a + b;
  case HAP_KX_SUBOP: return a - b;
  case HAP_KX_MULOP: return a * b;
  default: return a / b;
  }
}

/* log-sum-exp over `classes` values strided by `inner` (lse_at). */
KX_FN double kx_lse(const float *x, int64_t classes, int64_t inner) {
  double mx = -INFINITY, z = 0;
  for (int64_t k = 0; k < classes; k++)
    mx = fmax(mx, (double)x[k * inner]);
  if (mx == -INFINITY)
    return mx;
  for (int64_t k = 0; k < classes; k++)
    z += exp((double)x[k * inner] - mx);
  return mx + log(z);
}

/* ---- bodies ------------------------------------------------------------------------------- */

KX_FN void kx_unary_f(const hap_kx_pass *p, void *const *s, int64_t i) {
  float v = KX_CF(s, p->a)[i];
  float *y = KX_F(s, p->c);
  switch (p->sub) {
  case HAP_KX_RELU: y[i] = v > 0 ? v : 0.0f; break;
  case HAP_KX_GELU: y[i] = (float)(0.5 * (double)v * (1 + erf((double)v * KX_INV_SQRT2))); break;
  case HAP_KX_SIGMOID: y[i] = (float)(1 / (1 + exp(-(double)v))); break;
  case HAP_KX_TANH: y[i] = (float)tanh((double)v); break;
  case HAP_KX_RSQRT: y[i] = (float)(1 / sqrt((double)v)); break;
  case HAP_KX_POW: y[i] = (float)pow((double)v, p->p0); break;
  default: y[i] = kx_keep(p->seed, kx_gpos(p, i), p->p0) ? v * (float)p->scale : 0.0f; break;
  }
}

KX_FN void kx_unary_b(const hap_kx_pass *p, void *const *s, int64_t i) {
  const float *x = KX_CF(s, p->a), *y = KX_CF(s, p->b), *g = KX_CF(s, p->g);
  float *dx = KX_F(s, p->d);
  switch (p->sub) {
  case HAP_KX_RELU: dx[i] += x[i] > 0 ? g[i] : 0.0f; break;
  case HAP_KX_GELU: {
    double v = x[i];
    double d = 0.5 * (1 + erf(v * KX_INV_SQRT2)) + v * KX_INV_SQRT_2PI * exp(-0.5 * v * v);
    dx[i] += (float)((double)g[i] * d);
    break;
  }
  case HAP_KX_SIGMOID: dx[i] += g[i] * y[i] * (1 - y[i]); break;
  case HAP_KX_TANH: dx[i] += g[i] * (1 - y[i] * y[i]); break;
  case HAP_KX_RSQRT: dx[i] += -0.5f * y[i] * y[i] * y[i] * g[i]; break;
  case HAP_KX_POW: dx[i] += (float)((double)g[i] * p->p0 * pow((double)x[i], p->p0 - 1)); break;
  default:
    if (kx_keep(p->seed, kx_gpos(p, i), p->p0))
      dx[i] += g[i] * (float)p->scale;
    break;
  }
}

KX_FN void kx_binary_f(const hap_kx_pass *p, void *const *s, int64_t i) {
  float av = (p->flags & HAP_KX_ZA) ? 0.0f : KX_CF(s, p->a)[kx_map(p, p->sa, i)];
  float bv = (p->flags & HAP_KX_SCALAR) ? (float)p->p0
             : (p->flags & HAP_KX_ZB)   ? 0.0f
                                        : KX_CF(s, p->b)[kx_map(p, p->sb, i)];
  KX_F(s, p->c)[i] = kx_binary(p->sub, av, bv);
}

KX_FN void kx_binary_b(const hap_kx_pass *p, void *const *s, int64_t i) {
  bool scalar = (p->flags & HAP_KX_SCALAR) != 0;
  int64_t ia = kx_map(p, p->sa, i), ib = scalar ? 0 : kx_map(p, p->sb, i);
  double av = (p->flags & HAP_KX_ZA) ? 0.0 : (double)KX_CF(s, p->a)[ia];
  double bv = scalar ? p->p0 : (p->flags & HAP_KX_ZB) ? 0.0 : (double)KX_CF(s, p->b)[ib];
  double gv = KX_CF(s, p->g)[i];
  double *ga = (p->flags & HAP_KX_WANT_A) ? KX_D(s, HAP_KX_SCRATCH) + ia : NULL;
  double *gb = (p->flags & HAP_KX_WANT_B) ? KX_D(s, HAP_KX_SCRATCH) + p->off + ib : NULL;
  double da, db;
  switch (p->sub) {
  case HAP_KX_ADDOP: da = gv, db = gv; break;
  case HAP_KX_SUBOP: da = gv, db = -gv; break;
  case HAP_KX_MULOP: da = gv * bv, db = gv * av; break;
  default: da = gv / bv, db = -(gv * av / (bv * bv)); break;
  }
  if (ga != NULL)
    kx_add_d(ga, da);
  if (gb != NULL)
    kx_add_d(gb, db);
}

/* Row r of (outer, len, inner): its first element. */
KX_FN int64_t kx_row_base(const hap_kx_pass *p, int64_t r) {
  return (r / p->inner) * p->len * p->inner + r % p->inner;
}

KX_FN void kx_softmax_f(const hap_kx_pass *p, void *const *s, int64_t r) {
  const float *x = KX_CF(s, p->a);
  float *y = KX_F(s, p->c);
  int64_t base = kx_row_base(p, r), in = p->inner;
  bool log_form = p->sub != 0;
  double mx = -INFINITY, z = 0;
  for (int64_t j = 0; j < p->len; j++)
    mx = fmax(mx, (double)x[base + j * in]);
  if (mx == -INFINITY) {
    for (int64_t j = 0; j < p->len; j++)
      y[base + j * in] = log_form ? -INFINITY : 0.0f;
    return;
  }
  for (int64_t j = 0; j < p->len; j++)
    z += exp((double)x[base + j * in] - mx);
  double lz = log(z);
  for (int64_t j = 0; j < p->len; j++) {
    double t = (double)x[base + j * in] - mx;
    y[base + j * in] = (float)(log_form ? t - lz : exp(t) / z);
  }
}

KX_FN void kx_softmax_b(const hap_kx_pass *p, void *const *s, int64_t r) {
  const float *y = KX_CF(s, p->b), *g = KX_CF(s, p->g);
  float *dx = KX_F(s, p->d);
  int64_t base = kx_row_base(p, r), in = p->inner;
  bool log_form = p->sub != 0;
  double sum = 0;
  for (int64_t j = 0; j < p->len; j++) {
    int64_t at = base + j * in;
    sum += log_form ? (double)g[at] : (double)g[at] * y[at];
  }
  for (int64_t j = 0; j < p->len; j++) {
    int64_t at = base + j * in;
    dx[at] += (float)(log_form ? g[at] - exp((double)y[at]) * sum : y[at] * (g[at] - sum));
  }
}

KX_FN void kx_gather_f(const hap_kx_pass *p, void *const *s, int64_t i) {
  int64_t at = p->base + kx_map(p, p->sa, i);
  switch (p->sub) {
  case 1: ((uint8_t *)s[p->c])[i] = ((const uint8_t *)s[p->a])[at]; break;
  case 2: ((uint16_t *)s[p->c])[i] = ((const uint16_t *)s[p->a])[at]; break;
  case 4: ((uint32_t *)s[p->c])[i] = ((const uint32_t *)s[p->a])[at]; break;
  default: ((uint64_t *)s[p->c])[i] = ((const uint64_t *)s[p->a])[at]; break;
  }
}

/* cls_append: [nb, len, n] and cls [n] -> [nb, len + 1, n], the token last (HAP_KX_FIRST:
 * first). */
KX_FN void kx_cls_f(const hap_kx_pass *p, void *const *s, int64_t i) {
  int64_t h = p->n, sl = p->len, first = (p->flags & HAP_KX_FIRST) ? 1 : 0;
  int64_t c = i % h, j = (i / h) % (sl + 1), b = i / ((sl + 1) * h);
  float v;
  if (j != (first ? 0 : sl))
    v = KX_CF(s, p->a)[(b * sl + j - first) * h + c];
  else
    v = (p->flags & HAP_KX_ZB) ? 0.0f : KX_CF(s, p->b)[c];
  KX_F(s, p->c)[i] = v;
}

/* The local row of embedding id t, or -1 (a zero row; ids outside [0, hi) are flagged). */
KX_FN int64_t kx_embed_row(const hap_kx_pass *p, void *const *s, int64_t t) {
  int64_t id = kx_index(s[p->a], p->sub, t);
  if (id < 0 || id >= p->hi)
    return -1;
  int64_t r = (p->flags & HAP_KX_LOCAL) ? id - p->off : id;
  return r >= 0 && r < p->rows ? r : -1;
}

KX_FN void kx_ln_f(const hap_kx_pass *p, void *const *s, int64_t r) {
  const float *xr = KX_CF(s, p->a) + r * p->inner;
  const float *w = (p->flags & HAP_KX_HAS_W) ? KX_CF(s, p->b) : NULL;
  const float *bias = (p->flags & HAP_KX_HAS_B) ? KX_CF(s, p->d) : NULL;
  float *y = KX_F(s, p->c) + r * p->inner;
  double mean = 0, var = 0;
  for (int64_t j = 0; j < p->inner; j++)
    mean += xr[j];
  mean /= (double)p->inner;
  for (int64_t j = 0; j < p->inner; j++)
    var += (xr[j] - mean) * (xr[j] - mean);
  var /= (double)p->inner;
  double rstd = 1 / sqrt(var + p->p0);
  for (int64_t j = 0; j < p->inner; j++) {
    double v = (xr[j] - mean) * rstd;
    if (w)
      v *= w[j];
    if (bias)
      v += bias[j];
    y[j] = (float)v;
  }
}

/* dx of row r (when WANT_A), and dw, db sums into scratch[0 .. 2 inner). */
KX_FN void kx_ln_b(const hap_kx_pass *p, void *const *s, int64_t r) {
  const float *xr = KX_CF(s, p->a) + r * p->inner, *gr = KX_CF(s, p->g) + r * p->inner;
  const float *w = (p->flags & HAP_KX_HAS_W) ? KX_CF(s, p->b) : NULL;
  double *acc = KX_D(s, HAP_KX_SCRATCH);
  double m = 0, var = 0;
  for (int64_t j = 0; j < p->inner; j++)
    m += xr[j];
  m /= (double)p->inner;
  for (int64_t j = 0; j < p->inner; j++)
    var += (xr[j] - m) * (xr[j] - m);
  var /= (double)p->inner;
  /* the CPU kernel keeps mean and rstd as float */
  double mean = (float)m, rstd = (float)(1 / sqrt(var + p->p0));
  double s1 = 0, s2 = 0;
  for (int64_t j = 0; j < p->inner; j++) {
    double xh = (xr[j] - mean) * rstd;
    double dxh = w ? (double)gr[j] * w[j] : gr[j];
    s1 += dxh;
    s2 += dxh * xh;
    kx_add_d(&acc[j], (double)gr[j] * xh);
    kx_add_d(&acc[p->inner + j], gr[j]);
  }
  if (!(p->flags & HAP_KX_WANT_A))
    return;
  s1 /= (double)p->inner;
  s2 /= (double)p->inner;
  float *dx = KX_F(s, p->d) + r * p->inner;
  for (int64_t j = 0; j < p->inner; j++) {
    double xh = (xr[j] - mean) * rstd;
    double dxh = w ? (double)gr[j] * w[j] : gr[j];
    dx[j] += (float)(rstd * (dxh - s1 - xh * s2));
  }
}

/* Loss target t of (n, inner): x [n, classes = len, inner]. */
KX_FN void kx_loss_f(const hap_kx_pass *p, void *const *s, int64_t t) {
  int64_t cls = kx_index(s[p->b], p->sub, t);
  if (cls < 0 || cls >= p->len)
    return; /* flagged */
  int64_t i = t / p->inner, j = t % p->inner;
  const float *x = KX_CF(s, p->a) + i * p->len * p->inner + j;
  double lp = x[cls * p->inner];
  if (p->flags & HAP_KX_CE)
    lp -= kx_lse(x, p->len, p->inner);
  kx_add_d(KX_D(s, HAP_KX_SCRATCH), -lp);
}

KX_FN void kx_loss_b(const hap_kx_pass *p, void *const *s, int64_t t) {
  int64_t cls = kx_index(s[p->b], p->sub, t);
  if (cls < 0 || cls >= p->len)
    return;
  int64_t i = t / p->inner, j = t % p->inner, base = i * p->len * p->inner + j;
  const float *x = KX_CF(s, p->a);
  float *dx = KX_F(s, p->d);
  double scale = KX_CF(s, p->g)[0] / p->div;
  if (p->flags & HAP_KX_CE) {
    double lse = kx_lse(x + base, p->len, p->inner);
    for (int64_t k = 0; k < p->len; k++)
      dx[base + k * p->inner] += (float)(scale * exp((double)x[base + k * p->inner] - lse));
  }
  dx[base + cls * p->inner] -= (float)scale;
}

/* One index of a non-GEMM pass. */
KX_FN void hap_kx_body(const hap_kx_pass *p, void *const *s, int64_t i) {
  switch (p->kind) {
  case HAP_KX_ZERO: KX_D(s, HAP_KX_SCRATCH)[i] = 0; break;
  case HAP_KX_FLAG_INIT: *(int64_t *)s[HAP_KX_FLAG] = INT64_MAX; break;
  case HAP_KX_INDEX_CHECK: {
    int64_t v = kx_index(s[p->a], p->sub, i);
    if (v < p->lo || v >= p->hi)
      kx_min_i64((int64_t *)s[HAP_KX_FLAG], i);
    break;
  }
  case HAP_KX_ROW_BIAS: KX_F(s, p->c)[i] += KX_CF(s, p->a)[i % p->n]; break;
  case HAP_KX_COL_SUM:
    kx_add_d(KX_D(s, HAP_KX_SCRATCH) + p->off + i % p->n, KX_CF(s, p->g)[i]);
    break;
  case HAP_KX_SCRATCH_OUT: {
    float v = (float)(KX_D(s, HAP_KX_SCRATCH)[p->off + i] * p->scale / p->div);
    if (p->flags & HAP_KX_ACC)
      KX_F(s, p->c)[i] += v;
    else
      KX_F(s, p->c)[i] = v;
    break;
  }
  case HAP_KX_UNARY_F: kx_unary_f(p, s, i); break;
  case HAP_KX_UNARY_B: kx_unary_b(p, s, i); break;
  case HAP_KX_BINARY_F: kx_binary_f(p, s, i); break;
  case HAP_KX_BINARY_B: kx_binary_b(p, s, i); break;
  case HAP_KX_SOFTMAX_F: kx_softmax_f(p, s, i); break;
  case HAP_KX_SOFTMAX_B: kx_softmax_b(p, s, i); break;
  case HAP_KX_REDUCE_F:
    kx_add_d(KX_D(s, HAP_KX_SCRATCH) + kx_map(p, p->sa, i), KX_CF(s, p->a)[i]);
    break;
  case HAP_KX_REDUCE_B:
    KX_F(s, p->d)[i] += (float)(KX_CF(s, p->g)[kx_map(p, p->sa, i)] * p->scale);
    break;
  case HAP_KX_COPY: ((uint8_t *)s[p->c])[i] = ((const uint8_t *)s[p->a])[i]; break;
  case HAP_KX_ADD: KX_F(s, p->d)[i] += KX_CF(s, p->g)[i]; break;
  case HAP_KX_GATHER_F: kx_gather_f(p, s, i); break;
  case HAP_KX_GATHER_B: KX_F(s, p->d)[p->base + kx_map(p, p->sa, i)] += KX_CF(s, p->g)[i]; break;
  case HAP_KX_CLS_F: kx_cls_f(p, s, i); break;
  case HAP_KX_CLS_B: {
    int64_t per = p->len * p->n, xo = (p->flags & HAP_KX_FIRST) ? p->n : 0; /* per batch row */
    KX_F(s, p->d)[i] += KX_CF(s, p->g)[(i / per) * (p->len + 1) * p->n + xo + i % per];
    break;
  }
  case HAP_KX_CLS_SUM: {
    int64_t b = i / p->n, c = i % p->n;
    int64_t row = (p->flags & HAP_KX_FIRST) ? 0 : p->len; /* the token's */
    kx_add_d(KX_D(s, HAP_KX_SCRATCH) + c, KX_CF(s, p->g)[(b * (p->len + 1) + row) * p->n + c]);
    break;
  }
  case HAP_KX_EMBED_F: {
    int64_t r = kx_embed_row(p, s, i / p->inner), j = i % p->inner;
    KX_F(s, p->c)[i] = r >= 0 ? KX_CF(s, p->b)[r * p->inner + j] : 0.0f;
    break;
  }
  case HAP_KX_EMBED_B: {
    int64_t r = kx_embed_row(p, s, i / p->inner), j = i % p->inner;
    if (r >= 0)
      kx_add_f(KX_F(s, p->d) + r * p->inner + j, KX_CF(s, p->g)[i]);
    break;
  }
  case HAP_KX_LN_F: kx_ln_f(p, s, i); break;
  case HAP_KX_LN_B: kx_ln_b(p, s, i); break;
  case HAP_KX_LOSS_F: kx_loss_f(p, s, i); break;
  case HAP_KX_LOSS_B: kx_loss_b(p, s, i); break;
  default: break;
  }
}

#endif
