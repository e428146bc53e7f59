/* kernel_parts.h — the pieces of a kernel call that both implementations of the ops use: the
 * CPU kernels (kernels/) and the GPU kernel programs (kx/). Shapes, attributes and sharding
 * flags of a validated call, host memory and BLAS, and each kernel family's shape plan, so the
 * two paths agree by construction. Callers pass calls that hap_kernel_check_* accepted. */
#ifndef HAP_KERNEL_PARTS_H
#define HAP_KERNEL_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* ---- shapes ---------------------------------------------------------------------------------- */

int64_t k_numel(const hap_shape *s);
/* Row-major strides (elements) of s. */
void k_strides(const hap_shape *s, int64_t *st);
/* Product of dims [from, to). */
int64_t k_prod(const hap_shape *s, int from, int to);
/* Strides of x (aligned right against out, NumPy broadcasting) per dim of out: 0 where x
 * broadcasts or lacks the dim. */
void k_bcast_strides(const hap_shape *x, const hap_shape *out, int64_t *st);
int k_norm_dim(int64_t d, int rank);

/* ---- attributes and flags -------------------------------------------------------------------- */

int64_t k_attr_i(const hap_op_io *io, hap_op op, const char *name);
double k_attr_f(const hap_op_io *io, hap_op op, const char *name);
const hap_attr_value *k_attr(const hap_op_io *io, hap_op op, const char *name);
bool k_flag(const hap_kernel_call *c, unsigned flag);
/* Input i (in variant->once) is zero on this device: BIAS_ONCE and rank != 0. */
bool k_once_zero(const hap_kernel_call *c, int input);
/* Backward: din[input] is fresh (hap_kernel_call.fresh_din): store the gradient, do not add. */
static inline bool k_fresh(const hap_kernel_call *c, int input) {
  return (c->fresh_din >> input & 1u) != 0;
}
/* The GEMM beta that adds to din[input], or overwrites it when it is fresh. */
static inline float k_beta(const hap_kernel_call *c, int input) {
  return k_fresh(c, input) ? 0.0f : 1.0f;
}
/* Zero din[input] (n floats) when it is fresh: for a path that only adds to it. */
void k_clear_fresh(const hap_kernel_call *c, float *const *din, int input, int64_t n);
/* A one-input add/sub's scalar is zero on this device. */
bool k_scalar_zero(const hap_kernel_call *c);

/* Global positions of a tensor's elements for GLOBAL_MASK: the local flat index f maps to
 * base + ((f / (inner * len)) * full_len + (f / inner) % len + off) * inner + f % inner, base being
 * the replica's first element (c->replica whole full tensors). */
typedef struct k_gpos {
  int64_t inner, len, full_len, off, base;
} k_gpos;
/* For input `input` of the call (its layout in the variant decides the sharded dim). */
void k_gpos_of_input(const hap_kernel_call *c, int input, k_gpos *g);
static inline int64_t k_gpos_at(const k_gpos *g, int64_t f) {
  int64_t outer = f / (g->inner * g->len), j = (f / g->inner) % g->len;
  return g->base + (outer * g->full_len + j + g->off) * g->inner + f % g->inner;
}

/* ---- memory and BLAS ------------------------------------------------------------------------- */

/* calloc of n elements of size bytes (at least one, so empty shards get a valid pointer);
 * NULL on failure, with err set. */
void *k_calloc(size_t n, size_t size, hap_err *err);
/* The same without zeroing, for scratch the caller writes in full before reading (large
 * buffers: calloc would clear them on every call). */
void *k_malloc(size_t n, size_t size, hap_err *err);
/* The state buffer a forward fills: in st when given (replacing what it held), else a scratch
 * buffer the kernel releases with k_state_end. Zero-filled when `zeroed`; otherwise the forward
 * must write every byte (multi_head_attention's 5 MB state for a small ViT layer was cleared on
 * every call). */
hap_status k_state_begin(hap_kernel_state *st, hap_op op, size_t n_bytes, bool zeroed, void **data,
                         hap_err *err);
void k_state_end(const hap_kernel_state *st, void *data);
/* The state backward reads: `given` when it matches (op, n_bytes), else recomputed by running
 * the forward into `tmp` (free it with hap_kernel_state_free). */
hap_status k_state_for_backward(const hap_kernel_call *c, const hap_kernel_state *given,
                                size_t n_bytes, hap_kernel_state *tmp, void **data, hap_err *err);

/* Row-major C[m, n] = alpha * op(A) op(B) + beta * C, op = transpose when ta / tb; leading dims
 * in elements. Handles empty m, n, k. beta 0 clears C with memset and adds (OpenBLAS 0.3.21's
 * own clearing pass made [1040, 256] GEMMs 14-17 % slower and [65, 64] ones 20-60 %). */
void k_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Every row of y [m, n] set to b [n]: a bias that a GEMM with beta 1 then adds to. */
void k_fill_rows(float *y, int64_t m, int64_t n, const float *b);

/* ---- shapes of the kernels, shared with the GPU programs (kx/kx.c) --------------------- */

typedef struct lin_dims {
  int64_t m, n, k;
} lin_dims;

typedef struct mm_plan {
  int64_t m, n, k, batches;
  hap_shape batch;                            /* output batch dims */
  int64_t sa[HAP_MAX_DIMS], sb[HAP_MAX_DIMS]; /* matrix strides of a, b per output batch dim */
} mm_plan;

lin_dims k_linear_dims(const hap_op_io *io);
void k_mm_plan_of(const hap_op_io *io, mm_plan *p);
/* Matrix offsets (in matrices) of a and b for output batch t. */
void k_mm_offsets(const mm_plan *p, int64_t t, int64_t *ia, int64_t *ib);

typedef struct k_rows {
  int64_t outer, len, inner;
} k_rows;

k_rows k_rows_of(const hap_kernel_call *c);
/* Per input dim: the output stride it maps to (0 when reduced), and the mean's divisor. */
void k_reduce_plan(const hap_kernel_call *c, int64_t *ost, double *scale);
/* Output element f (odometer over the output dims) reads input element base + sum idx_i st_i. */
typedef struct k_gather {
  int64_t base;
  int64_t st[HAP_MAX_DIMS];
  bool flat; /* reshape, flatten: the same flat order */
} k_gather;

void k_gather_plan(const hap_kernel_call *c, k_gather *p);

typedef struct ln_dims {
  int64_t rows, inner;
  double eps;
} ln_dims;

typedef struct loss_dims {
  int64_t n, classes, inner; /* input [n, classes, inner...] */
  double count;              /* divisor of "mean" (1 for "sum") */
} loss_dims;

ln_dims k_ln_dims_of(const hap_op_io *io);
loss_dims k_loss_dims_of(const hap_kernel_call *c);

/* Index value i of an int64 or int32 buffer. */
static inline int64_t k_index_at(const void *buf, hap_dtype dt, int64_t i) {
  return dt == HAP_I32 ? (int64_t)((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
}

#endif
