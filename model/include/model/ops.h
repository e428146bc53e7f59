/* ops.h — the op table: for each op kind its inputs, outputs, attribute schema, shape inference,
 * forward/backward FLOPs and bytes moved. Everything that needs to know about an op asks here.
 * Ownership: the table is static and immutable; hap_op_io and hap_attrs are caller-owned values.
 *
 * Cost conventions (docs/ops.md has the full table):
 *  - FLOPs are real FLOPs: a multiply-add counts 2. GEMM-like ops (linear, matmul, bmm, conv2d,
 *    einsum, the projections inside multi_head_attention) count every multiply-add.
 *  - Elementwise ops count arithmetic operations per element, a transcendental (exp, tanh, erf,
 *    rsqrt) counting 1.
 *  - Backward FLOPs cover only the gradients that are needed: an input whose `in_grad` is false
 *    (a data input, an index tensor) gets no gradient kernel.
 *  - Bytes are those a fused kernel must move: forward reads every input and writes every output;
 *    backward reads the output gradients and the saved inputs and writes the needed input
 * gradients. */
#ifndef HAP_OPS_H
#define HAP_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define HAP_MAX_DIMS       8
#define HAP_MAX_OP_INPUTS  8
#define HAP_MAX_OP_OUTPUTS 2
#define HAP_MAX_ATTRS      6
#define HAP_ATTR_STR_MAX   32

typedef enum hap_dtype {
  HAP_F32 = 0,
  HAP_F16,
  HAP_BF16,
  HAP_F64,
  HAP_I64,
  HAP_I32,
  HAP_BOOL,
  HAP_DTYPE_COUNT
} hap_dtype;

const char *hap_dtype_name(hap_dtype d); /* "float32", ... */
int hap_dtype_size(hap_dtype d);         /* bytes per element */
bool hap_dtype_is_float(hap_dtype d);
hap_status hap_dtype_parse(const char *s, hap_dtype *out); /* HAP_ENOTFOUND if unknown */

typedef struct hap_shape {
  int32_t rank; /* 0 (scalar) .. HAP_MAX_DIMS */
  int64_t dims[HAP_MAX_DIMS];
} hap_shape;

/* Number of elements; HAP_EOVERFLOW if the product does not fit in int64. Dims must be >= 0. */
hap_status hap_shape_numel(const hap_shape *s, int64_t *numel);
/* numel without the overflow check, as a double (for cost formulas). */
double hap_shape_numel_f(const hap_shape *s);
bool hap_shape_eq(const hap_shape *a, const hap_shape *b);
/* "[256, 128, 768]"; returns buf. */
const char *hap_shape_str(const hap_shape *s, char *buf, size_t len);

#define HAP_OP_LIST(X)                                                                             \
  X(LINEAR, "linear")                                                                              \
  X(MATMUL, "matmul")                                                                              \
  X(BMM, "bmm")                                                                                    \
  X(EINSUM, "einsum")                                                                              \
  X(CONV2D, "conv2d")                                                                              \
  X(MAX_POOL2D, "max_pool2d")                                                                      \
  X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d")                                                    \
  X(EMBEDDING, "embedding")                                                                        \
  X(LAYER_NORM, "layer_norm")                                                                      \
  X(MULTI_HEAD_ATTENTION, "multi_head_attention")                                                  \
  X(RELU, "relu")                                                                                  \
  X(GELU, "gelu")                                                                                  \
  X(SIGMOID, "sigmoid")                                                                            \
  X(TANH, "tanh")                                                                                  \
  X(RSQRT, "rsqrt")                                                                                \
  X(POW, "pow")                                                                                    \
  X(DROPOUT, "dropout")                                                                            \
  X(ADD, "add")                                                                                    \
  X(SUB, "sub")                                                                                    \
  X(MUL, "mul")                                                                                    \
  X(DIV, "div")                                                                                    \
  X(SOFTMAX, "softmax")                                                                            \
  X(LOG_SOFTMAX, "log_softmax")                                                                    \
  X(SUM, "sum")                                                                                    \
  X(MEAN, "mean")                                                                                  \
  X(RESHAPE, "reshape")                                                                            \
  X(FLATTEN, "flatten")                                                                            \
  X(TRANSPOSE, "transpose")                                                                        \
  X(PERMUTE, "permute")                                                                            \
  X(NARROW, "narrow")                                                                              \
  X(CLS_APPEND, "cls_append")                                                                      \
  X(CLS_SELECT, "cls_select")                                                                      \
  X(TOP2_GATING, "top2_gating")                                                                    \
  X(NLL_LOSS, "nll_loss")                                                                          \
  X(CROSS_ENTROPY, "cross_entropy")

typedef enum hap_op {
#define HAP_OP_ENUM_(id, str) HAP_OP_##id,
  HAP_OP_LIST(HAP_OP_ENUM_)
#undef HAP_OP_ENUM_
      HAP_OP_COUNT
} hap_op;

typedef enum hap_attr_type {
  HAP_ATTR_INT,
  HAP_ATTR_FLOAT,
  HAP_ATTR_BOOL,
  HAP_ATTR_INTS, /* list of up to HAP_MAX_DIMS ints */
  HAP_ATTR_STR   /* up to HAP_ATTR_STR_MAX-1 bytes */
} hap_attr_type;

typedef struct hap_attr_spec {
  const char *name;
  hap_attr_type type;
  bool required;     /* no default: the graph must give it */
  int64_t def_i;     /* default for INT and BOOL */
  double def_f;      /* default for FLOAT */
  const char *def_s; /* default for STR (NULL: required) */
  int32_t def_n;     /* default length for INTS */
  int64_t def_v[4];  /* default values for INTS */
  const char *doc;
} hap_attr_spec;

typedef struct hap_attr_value {
  union {
    int64_t i; /* INT, BOOL (0/1) */
    double f;  /* FLOAT */
    struct {
      int32_t n;
      int64_t v[HAP_MAX_DIMS];
    } ints;
    char s[HAP_ATTR_STR_MAX];
  } u;
} hap_attr_value;

/* Attribute values of one node, in the order of its op's schema. */
typedef struct hap_attrs {
  uint32_t given; /* bit i: attribute i was set explicitly (else it holds its default) */
  hap_attr_value v[HAP_MAX_ATTRS];
} hap_attrs;

/* Shapes and types of one application of an op. Infer fills `out*` from `in*` and `attrs`;
 * cost reads everything. `in_grad[i]`: input i needs a gradient (set by the caller for cost). */
typedef struct hap_op_io {
  const hap_attrs *attrs;
  int32_t n_in;
  hap_shape in[HAP_MAX_OP_INPUTS];
  hap_dtype in_dtype[HAP_MAX_OP_INPUTS];
  bool in_grad[HAP_MAX_OP_INPUTS];
  int32_t n_out;
  hap_shape out[HAP_MAX_OP_OUTPUTS];
  hap_dtype out_dtype[HAP_MAX_OP_OUTPUTS];
} hap_op_io;

typedef struct hap_op_cost {
  double fwd_flops;         /* FLOP */
  double bwd_flops;         /* FLOP */
  double fwd_bytes_read;    /* bytes */
  double fwd_bytes_written; /* bytes */
  double bwd_bytes_read;    /* bytes */
  double bwd_bytes_written; /* bytes */
} hap_op_cost;

typedef struct hap_op_def {
  const char *name;
  const char *doc;
  int8_t min_in, max_in; /* accepted input count */
  int8_t n_out;
  const char *in_names[HAP_MAX_OP_INPUTS];
  const char *out_names[HAP_MAX_OP_OUTPUTS];
  uint8_t param_inputs; /* bit i: input i is normally a trainable parameter */
  int8_t n_attrs;
  hap_attr_spec attrs[HAP_MAX_ATTRS];
  /* Fill io->out and io->out_dtype (n_out is set by the caller). On failure write one line
   * explaining what was expected into why[why_len] and return HAP_EINVAL. */
  hap_status (*infer)(hap_op_io *io, char *why, size_t why_len);
  void (*cost)(const hap_op_io *io, hap_op_cost *cost);
} hap_op_def;

const hap_op_def *hap_op_get(hap_op op);
const char *hap_op_name(hap_op op);
hap_status hap_op_lookup(const char *name, hap_op *out); /* HAP_ENOTFOUND if unknown */

/* Index of attribute `name` in op's schema, or -1. */
int hap_op_attr_index(hap_op op, const char *name);

/* Fill every attribute with its default; required ones are left unset. */
void hap_attrs_init(hap_attrs *a, hap_op op);
/* Set by name; HAP_ENOTFOUND for an unknown name, HAP_EINVAL for a type mismatch or bad value. */
hap_status hap_attrs_set_int(hap_attrs *a, hap_op op, const char *name, int64_t v, hap_err *err);
hap_status hap_attrs_set_float(hap_attrs *a, hap_op op, const char *name, double v, hap_err *err);
hap_status hap_attrs_set_ints(hap_attrs *a, hap_op op, const char *name, const int64_t *v,
                              int32_t n, hap_err *err);
hap_status hap_attrs_set_str(hap_attrs *a, hap_op op, const char *name, const char *v,
                             hap_err *err);
/* Check every required attribute is given. */
hap_status hap_attrs_check(const hap_attrs *a, hap_op op, hap_err *err);
bool hap_attrs_eq(const hap_attrs *a, const hap_attrs *b, hap_op op);

/* Getters by schema index (no checks; used by op implementations). */
static inline int64_t hap_attr_i(const hap_attrs *a, int idx) { return a->v[idx].u.i; }
static inline double hap_attr_f(const hap_attrs *a, int idx) { return a->v[idx].u.f; }
static inline const char *hap_attr_s(const hap_attrs *a, int idx) { return a->v[idx].u.s; }

/* Check arity and attributes, then infer output shapes/dtypes into io. Errors name the op and say
 * what was expected. */
hap_status hap_op_infer(hap_op op, hap_op_io *io, hap_err *err);
/* For GEMM-like ops (linear, matmul, bmm, einsum, conv2d, multi_head_attention, top2_gating): the
 * dims of the one GEMM (m x k times k x n) whose sustained rate prices the op; false for others. */
bool hap_op_gemm_dims(hap_op op, const hap_op_io *io, double *m, double *n, double *k);

/* Forward/backward FLOPs and bytes of one application (io must have passed hap_op_infer). */
void hap_op_cost_of(hap_op op, const hap_op_io *io, hap_op_cost *cost);

#endif
