/* kref.c — the float64 reference's entry point (kref.h): dispatch by op, and the shape and
 * attribute helpers the op files share. */
#include <string.h>

#include "kref_internal.h"

/* ---- shapes ---------------------------------------------------------------------------------- */

int64_t kr_numel(const hap_shape *s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++)
    n *= s->dims[d];
  return n;
}

int kr_dim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }

void kr_unravel(const hap_shape *s, int64_t f, int64_t *idx) {
  for (int d = s->rank - 1; d >= 0; d--) {
    idx[d] = f % s->dims[d];
    f /= s->dims[d];
  }
}

int64_t kr_ravel(const hap_shape *s, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < s->rank; d++)
    f = f * s->dims[d] + idx[d];
  return f;
}

int64_t kr_bcast_at(const hap_shape *x, const int64_t *idx, int rank) {
  int64_t f = 0;
  for (int d = 0; d < x->rank; d++) {
    int64_t i = x->dims[d] == 1 ? 0 : idx[d + rank - x->rank];
    f = f * x->dims[d] + i;
  }
  return f;
}

/* ---- attributes ------------------------------------------------------------------------------ */

const hap_attr_value *kr_attr(const kr_call *c, const char *name) {
  return &c->io->attrs->v[hap_op_attr_index(c->op, name)];
}
int64_t kr_attr_i(const kr_call *c, const char *name) { return kr_attr(c, name)->u.i; }
double kr_attr_f(const kr_call *c, const char *name) { return kr_attr(c, name)->u.f; }
const char *kr_attr_s(const kr_call *c, const char *name) { return kr_attr(c, name)->u.s; }

/* ---- dispatch -------------------------------------------------------------------------------- */

static const kr_fn table[HAP_OP_COUNT] = {
    [HAP_OP_LINEAR] = kr_linear,
    [HAP_OP_MATMUL] = kr_matmul,
    [HAP_OP_BMM] = kr_matmul,
    [HAP_OP_EINSUM] = kr_einsum,
    [HAP_OP_CONV2D] = kr_conv2d,
    [HAP_OP_MAX_POOL2D] = kr_max_pool2d,
    [HAP_OP_ADAPTIVE_AVG_POOL2D] = kr_avg_pool2d,
    [HAP_OP_EMBEDDING] = kr_embedding,
    [HAP_OP_LAYER_NORM] = kr_layer_norm,
    [HAP_OP_MULTI_HEAD_ATTENTION] = kr_mha,
    [HAP_OP_RELU] = kr_unary,
    [HAP_OP_GELU] = kr_unary,
    [HAP_OP_SIGMOID] = kr_unary,
    [HAP_OP_TANH] = kr_unary,
    [HAP_OP_RSQRT] = kr_unary,
    [HAP_OP_POW] = kr_unary,
    [HAP_OP_DROPOUT] = kr_unary,
    [HAP_OP_ADD] = kr_binary,
    [HAP_OP_SUB] = kr_binary,
    [HAP_OP_MUL] = kr_binary,
    [HAP_OP_DIV] = kr_binary,
    [HAP_OP_SOFTMAX] = kr_softmax,
    [HAP_OP_LOG_SOFTMAX] = kr_softmax,
    [HAP_OP_SUM] = kr_reduce,
    [HAP_OP_MEAN] = kr_reduce,
    [HAP_OP_RESHAPE] = kr_layout,
    [HAP_OP_FLATTEN] = kr_layout,
    [HAP_OP_TRANSPOSE] = kr_layout,
    [HAP_OP_PERMUTE] = kr_layout,
    [HAP_OP_NARROW] = kr_layout,
    [HAP_OP_CLS_APPEND] = kr_cls_append,
    [HAP_OP_CLS_SELECT] = kr_layout,
    [HAP_OP_TOP2_GATING] = kr_top2,
    [HAP_OP_NLL_LOSS] = kr_loss,
    [HAP_OP_CROSS_ENTROPY] = kr_loss,
};

bool hap_kref_has(hap_op op) { return (unsigned)op < HAP_OP_COUNT && table[op] != NULL; }

bool hap_kref_index_input(hap_op op, int i) {
  return (op == HAP_OP_EMBEDDING && i == 0) ||
         ((op == HAP_OP_NLL_LOSS || op == HAP_OP_CROSS_ENTROPY) && i == 1);
}

hap_status hap_kref_forward(hap_op op, const hap_op_io *io, uint64_t seed, const void *const *in,
                            double *const *out, hap_err *err) {
  if (!hap_kref_has(op))
    return hap_err_set(err, HAP_EUNSUPPORTED, "kref: no float64 reference for op %d", (int)op);
  if (io == NULL || io->attrs == NULL || in == NULL || out == NULL)
    return hap_err_set(err, HAP_EINVAL, "kref %s: missing io, attributes or buffers",
                       hap_op_name(op));
  for (int i = 0; i < io->n_in; i++)
    if (in[i] == NULL)
      return hap_err_set(err, HAP_EINVAL, "kref %s: input %d has no buffer", hap_op_name(op), i);
  for (int o = 0; o < io->n_out; o++)
    if (out[o] == NULL)
      return hap_err_set(err, HAP_EINVAL, "kref %s: output %d has no buffer", hap_op_name(op), o);
  kr_call c = {.op = op, .io = io, .seed = seed, .in = in, .out = out};
  return table[op](&c, err);
}
