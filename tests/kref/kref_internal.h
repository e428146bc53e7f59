/* kref_internal.h — what the reference's op files share: the call, shapes, attributes. */
#ifndef HAP_KREF_INTERNAL_H
#define HAP_KREF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kref.h"

typedef struct kr_call {
  hap_op op;
  const hap_op_io *io;
  uint64_t seed;         /* dropout masks */
  const void *const *in; /* double (float inputs) or int64 (index inputs) */
  double *const *out;
} kr_call;

typedef hap_status (*kr_fn)(const kr_call *c, hap_err *err);

static inline const double *kr_x(const kr_call *c, int i) { return c->in[i]; }
static inline const int64_t *kr_ix(const kr_call *c, int i) { return c->in[i]; }

/* ---- shapes (kref.c) ----------------------------------------------------------------------- */

int64_t kr_numel(const hap_shape *s);
/* A dim attribute: negative counts from the end. */
int kr_dim(int64_t d, int rank);
/* Row-major index of flat position f, and back. */
void kr_unravel(const hap_shape *s, int64_t f, int64_t *idx);
int64_t kr_ravel(const hap_shape *s, const int64_t *idx);
/* Flat position in x of the element that output index idx (rank `rank`) reads under NumPy
 * broadcasting: x aligned right, its size-1 dims pinned at 0. */
int64_t kr_bcast_at(const hap_shape *x, const int64_t *idx, int rank);

/* ---- attributes (kref.c), by name from the op's schema -------------------------------------- */

int64_t kr_attr_i(const kr_call *c, const char *name);
double kr_attr_f(const kr_call *c, const char *name);
const char *kr_attr_s(const kr_call *c, const char *name);
const hap_attr_value *kr_attr(const kr_call *c, const char *name);

/* ---- the ops, by file ----------------------------------------------------------------------- */

/* kref_gemm.c */
hap_status kr_linear(const kr_call *c, hap_err *err);
hap_status kr_matmul(const kr_call *c, hap_err *err); /* matmul and bmm */
hap_status kr_einsum(const kr_call *c, hap_err *err);
hap_status kr_conv2d(const kr_call *c, hap_err *err);
/* kref_nn.c */
hap_status kr_max_pool2d(const kr_call *c, hap_err *err);
hap_status kr_avg_pool2d(const kr_call *c, hap_err *err);
hap_status kr_embedding(const kr_call *c, hap_err *err);
hap_status kr_layer_norm(const kr_call *c, hap_err *err);
hap_status kr_loss(const kr_call *c, hap_err *err); /* nll_loss and cross_entropy */
/* kref_attn.c */
hap_status kr_mha(const kr_call *c, hap_err *err);
hap_status kr_top2(const kr_call *c, hap_err *err);
/* kref_elem.c */
hap_status kr_unary(const kr_call *c, hap_err *err);   /* relu .. dropout */
hap_status kr_binary(const kr_call *c, hap_err *err);  /* add, sub, mul, div */
hap_status kr_softmax(const kr_call *c, hap_err *err); /* softmax and log_softmax */
hap_status kr_reduce(const kr_call *c, hap_err *err);  /* sum and mean */
/* kref_layout.c */
hap_status kr_layout(const kr_call *c, hap_err *err); /* reshape .. narrow, cls_select */
hap_status kr_cls_append(const kr_call *c, hap_err *err);

#endif
