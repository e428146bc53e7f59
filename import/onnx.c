/* onnx.c — ONNX ModelProto into a hap graph (onnx.h).
 *
 * Values: every ONNX value name maps to a hap tensor (graph inputs, float initializers used as
 * tensors: parameters, node outputs: activations), to a constant (initializers and Constant
 * outputs read as attributes: shapes, axes, scalar operands), or to "unknown" (the output of a
 * node that could not be mapped: nodes reading one are skipped, and only reported when their own
 * op type is one hap has no mapping for, so every unsupported op is listed once).
 * Op mapping (docs/import.md lists it): Gemm (transB=1, alpha=beta=1) -> linear; MatMul ->
 * matmul; Conv -> conv2d; MaxPool -> max_pool2d; AveragePool with kernel = stride ->
 * adaptive_avg_pool2d; GlobalAveragePool -> adaptive_avg_pool2d [1, 1]; Relu, Sigmoid, Tanh,
 * Softmax, LogSoftmax; Add, Sub, Mul, Div (a one-element constant operand as the scalar);
 * Pow (constant exponent), Sqrt -> pow; Reciprocal -> pow -1; Flatten, Reshape -> reshape;
 * Transpose -> permute; ReduceMean, ReduceSum; Gather on an initializer (axis 0) -> embedding;
 * Gather of constant indices (one, or an ascending run), Slice, Split -> narrow; Where on a
 * constant condition with a one-element fill -> add (mul) of buffers; Expand + Concat of a class
 * token (last or first) -> cls_append; GELU written out with Erf (find_gelus), Gelu -> gelu;
 * LayerNormalization -> layer_norm; BatchNormalization -> its parts; Identity and Dropout -> the
 * same tensor. Constants read as tensors become buffers whose values hap_onnx_parse hands back. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/strmap.h"
#include "import/onnx.h"
#include "onnx.pb-c.h"

/* ONNX TensorProto.DataType values hap reads. */
enum {
  T_FLOAT = 1,
  T_INT32 = 6,
  T_INT64 = 7,
  T_BOOL = 9,
  T_FLOAT16 = 10,
  T_DOUBLE = 11,
  T_BF16 = 16
};

#define UNKNOWN (-2) /* a value an unmapped node produced */

typedef struct ctx {
  const char *path;
  hap_err *err;
  const Onnx__GraphProto *gp;
  hap_graph *g;
  hap_strmap val;    /* value name -> hap tensor id, or UNKNOWN */
  hap_strmap init;   /* initializer name -> index in gp->initializer */
  hap_strmap konst;  /* Constant node output -> node index */
  hap_strmap folded; /* value computed here from constants (shape arithmetic) -> index in fv */
  struct fval *fv;
  int32_t n_fv, cap_fv;
  char *report; /* unsupported nodes, one line each */
  size_t report_len;
  int n_bad;
  char bad_ops[512];   /* distinct unsupported op types, ", "-separated */
  char why[400];       /* the current node's reason */
  const char *buffers; /* hap_onnx_options.buffers */
  hap_strmap expand;   /* Expand output -> node index: a class token awaiting its Concat */
  size_t cur;          /* the node being mapped */
  struct fuse {        /* per node: GELU written out (x * 0.5 * (1 + erf(x / sqrt 2))) */
    uint8_t kind;      /* FUSE_NONE, FUSE_SKIP (inside one), FUSE_GELU (its last node) */
    const char *x;     /* FUSE_GELU: GELU's input */
  } * fuse;
  struct made { /* buffers whose values the import computed (a mask, constant indices) */
    int32_t tensor;
    void *data; /* float32 or int64, the tensor's dtype */
  } * made;
  int32_t n_made, cap_made;
} ctx;

enum { FUSE_NONE = 0, FUSE_SKIP, FUSE_GELU };

/* ---- constants ------------------------------------------------------------------------------ */

/* A small value folded from constants: the shape arithmetic exporters write (Shape, Gather,
 * Unsqueeze, Concat, Slice, Mul, ... on sizes), computed here so that Reshape and Slice see
 * numbers. Values as doubles (exact for sizes); is_int: integer division and casts truncate. */
#define FOLD_MAX 4096 /* elements: sizes and small masks, never a weight */
typedef struct fval {
  int32_t rank;
  int64_t dims[HAP_MAX_DIMS];
  int64_t n;
  bool is_int;
  double *v;
} fval;

/* A constant's value (held as a double) read as a dim, index or axis. One no int64 holds (NaN,
 * infinite, beyond +-2^62) reads as NOT_AN_INT, which every range check after it refuses: a plain
 * cast of it is undefined behaviour (fuzz_onnx found one in a Reshape's shape). */
#define NOT_AN_INT ((int64_t)1 << 62)
static int64_t as_i64(double v) { return v > -0x1p62 && v < 0x1p62 ? (int64_t)v : NOT_AN_INT; }

static const fval *folded(const ctx *c, const char *name) {
  int32_t i = hap_strmap_get(&c->folded, name);
  return i >= 0 ? &c->fv[i] : NULL;
}

static const Onnx__TensorProto *constant(const ctx *c, const char *name) {
  int32_t i = hap_strmap_get(&c->init, name);
  if (i >= 0)
    return c->gp->initializer[i];
  i = hap_strmap_get(&c->konst, name);
  if (i < 0)
    return NULL;
  const Onnx__NodeProto *n = c->gp->node[i];
  for (size_t a = 0; a < n->n_attribute; a++)
    if (n->attribute[a]->name != NULL && strcmp(n->attribute[a]->name, "value") == 0)
      return n->attribute[a]->t;
  return NULL;
}

static bool numel_of(const Onnx__TensorProto *t, int64_t *n) {
  int64_t v = 1;
  for (size_t k = 0; k < t->n_dims; k++) {
    if (t->dims[k] < 0 || (t->dims[k] > 0 && v > INT64_MAX / t->dims[k]))
      return false;
    v *= t->dims[k];
  }
  *n = v;
  return true;
}

/* Up to `cap` values of constant t as doubles; false (with c->why) when it is not a readable
 * float or integer tensor. */
static bool const_values(ctx *c, const char *name, double *out, int64_t cap, int64_t *n) {
  const fval *f = folded(c, name);
  if (f != NULL) {
    if (f->n > cap) {
      snprintf(c->why, sizeof c->why, "'%s': expected at most %lld values", name, (long long)cap);
      return false;
    }
    memcpy(out, f->v, (size_t)f->n * sizeof *out);
    *n = f->n;
    return true;
  }
  const Onnx__TensorProto *t = constant(c, name);
  if (t == NULL) {
    snprintf(c->why, sizeof c->why, "input '%s' must be a constant (an initializer or Constant)",
             name);
    return false;
  }
  int64_t cnt;
  int dt = t->has_data_type ? t->data_type : 0;
  size_t esz = dt == T_FLOAT || dt == T_INT32    ? 4
               : dt == T_INT64 || dt == T_DOUBLE ? 8
               : dt == T_BOOL                    ? 1
                                                 : 0;
  if (!numel_of(t, &cnt) || cnt > cap || esz == 0) {
    snprintf(c->why, sizeof c->why, "constant '%s': expected at most %lld float or integer values",
             name, (long long)cap);
    return false;
  }
  size_t have = t->has_raw_data                 ? t->raw_data.len / esz
                : dt == T_FLOAT                 ? t->n_float_data
                : dt == T_INT64                 ? t->n_int64_data
                : dt == T_INT32 || dt == T_BOOL ? t->n_int32_data
                                                : t->n_double_data;
  if ((t->has_raw_data && t->raw_data.len != (size_t)cnt * esz) || have != (size_t)cnt) {
    snprintf(c->why, sizeof c->why, "constant '%s': holds %zu values, its dims say %lld", name,
             have, (long long)cnt);
    return false;
  }
  for (int64_t i = 0; i < cnt; i++) {
    if (t->has_raw_data) {
      const uint8_t *p = t->raw_data.data + (size_t)i * esz;
      float f32;
      int32_t i32;
      int64_t i64;
      double d;
      if (dt == T_FLOAT) {
        memcpy(&f32, p, 4);
        out[i] = f32;
      } else if (dt == T_INT32) {
        memcpy(&i32, p, 4);
        out[i] = i32;
      } else if (dt == T_BOOL) {
        out[i] = p[0] != 0;
      } else if (dt == T_INT64) {
        memcpy(&i64, p, 8);
        out[i] = (double)i64;
      } else {
        memcpy(&d, p, 8);
        out[i] = d;
      }
    } else {
      out[i] = dt == T_FLOAT                   ? t->float_data[i]
               : dt == T_INT64                 ? (double)t->int64_data[i]
               : dt == T_INT32 || dt == T_BOOL ? t->int32_data[i]
                                               : t->double_data[i];
    }
  }
  *n = cnt;
  return true;
}

/* ---- attributes ----------------------------------------------------------------------------- */

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t a = 0; a < n->n_attribute; a++)
    if (n->attribute[a]->name != NULL && strcmp(n->attribute[a]->name, name) == 0)
      return n->attribute[a];
  return NULL;
}

static int64_t attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = attr(n, name);
  return a != NULL && a->has_i ? a->i : def;
}

static double attr_f(const Onnx__NodeProto *n, const char *name, double def) {
  const Onnx__AttributeProto *a = attr(n, name);
  return a != NULL && a->has_f ? a->f : def;
}

/* The ints of attribute `name` (NULL when absent). */
static const int64_t *attr_ints(const Onnx__NodeProto *n, const char *name, size_t *count) {
  const Onnx__AttributeProto *a = attr(n, name);
  *count = a != NULL ? a->n_ints : 0;
  return a != NULL ? a->ints : NULL;
}

/* All `count` ints equal (true for none) -> *v (def when none). */
static bool all_same(const int64_t *v, size_t count, int64_t def, int64_t *out) {
  *out = count > 0 ? v[0] : def;
  for (size_t k = 1; k < count; k++)
    if (v[k] != v[0])
      return false;
  return true;
}

/* ---- values --------------------------------------------------------------------------------- */

static bool fail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, ap);
  va_end(ap);
  return false;
}

static bool dtype_of(int32_t onnx, hap_dtype *out) {
  switch (onnx) {
  case T_FLOAT: *out = HAP_F32; return true;
  case T_DOUBLE: *out = HAP_F64; return true;
  case T_FLOAT16: *out = HAP_F16; return true;
  case T_BF16: *out = HAP_BF16; return true;
  case T_INT64: *out = HAP_I64; return true;
  case T_INT32: *out = HAP_I32; return true;
  case T_BOOL: *out = HAP_BOOL; return true;
  default: return false;
  }
}

/* Whether `name` is one of the comma-separated `list` (NULL: none). */
static bool listed(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; p != NULL && *p != '\0';) {
    size_t n = strcspn(p, ",");
    if (n == len && strncmp(p, name, len) == 0)
      return true;
    p += n + (p[n] == ',');
  }
  return false;
}

static bool as_const(ctx *c, const char *name, struct fval *f);
static bool const_tensor(ctx *c, const char *name, struct fval *f, int32_t *id);

/* The hap tensor of value `name`: mapped before, a float initializer made a parameter (a buffer
 * when hap_onnx_options.buffers names it) now, or a constant (a Constant node's output or a value
 * folded here) made a buffer holding its values. */
static bool tensor_of(ctx *c, const char *name, bool buffer, int32_t *id);
static bool tensor(ctx *c, const char *name, int32_t *id) { return tensor_of(c, name, false, id); }

/* tensor(), with an initializer made a buffer whatever --buffers says when `buffer` (state no
 * gradient reaches, such as batch norm's running statistics). */
static bool tensor_of(ctx *c, const char *name, bool buffer, int32_t *id) {
  *id = hap_strmap_get(&c->val, name);
  if (*id >= 0)
    return true;
  if (hap_strmap_get(&c->expand, name) >= 0)
    return fail(c,
                "'%s' is an Expand, which hap maps only as a class token joined by Concat "
                "([x, expand(token)] or [expand(token), x] along dim 1: cls_append)",
                name);
  int32_t i = hap_strmap_get(&c->init, name);
  if (i < 0) {
    struct fval f;
    if (as_const(c, name, &f))
      return const_tensor(c, name, &f, id);
    return fail(c, "input '%s' is not produced by any node, graph input or initializer", name);
  }
  const Onnx__TensorProto *t = c->gp->initializer[i];
  hap_dtype dt;
  hap_shape s = {.rank = (int32_t)t->n_dims};
  if (t->n_dims > HAP_MAX_DIMS || !dtype_of(t->has_data_type ? t->data_type : 0, &dt))
    return fail(c, "initializer '%s': expected a float or integer tensor of at most %d dims", name,
                HAP_MAX_DIMS);
  for (size_t k = 0; k < t->n_dims; k++)
    s.dims[k] = t->dims[k];
  hap_err e = {0};
  bool trainable = dt == HAP_F32 && !buffer && !listed(c->buffers, name);
  if (hap_graph_add_tensor(c->g, name, trainable ? HAP_TENSOR_PARAMETER : HAP_TENSOR_BUFFER, dt, &s,
                           id, &e) != HAP_OK)
    return fail(c, "initializer '%s': %s", name, e.msg);
  return hap_strmap_put(&c->val, name, *id) == 0 || fail(c, "out of memory");
}

static const hap_shape *shape_of(const ctx *c, int32_t id) { return &c->g->tensors[id].shape; }

/* Build node `n` as hap op `op` over `ins`, its first output named as n's. */
static bool emit(ctx *c, const Onnx__NodeProto *n, hap_op op, const int32_t *ins, int32_t n_in,
                 const hap_attrs *a) {
  const char *out = n->output[0];
  const char *name = n->name != NULL && n->name[0] != '\0' ? n->name : out;
  if (hap_graph_find_node(c->g, name) >= 0)
    name = out;
  hap_err e = {0};
  int32_t id;
  if (hap_graph_add_node(c->g, name, op, ins, n_in, a, &out, &id, &e) != HAP_OK)
    return fail(c, "%s", e.msg);
  return hap_strmap_put(&c->val, out, id) == 0 || fail(c, "out of memory");
}

static bool alias(ctx *c, const Onnx__NodeProto *n, int32_t id) {
  return hap_strmap_put(&c->val, n->output[0], id) == 0 || fail(c, "out of memory");
}

/* ---- the ops -------------------------------------------------------------------------------- */

#define SET(call)                                                                                  \
  do {                                                                                             \
    hap_err e_ = {0};                                                                              \
    if ((call) != HAP_OK)                                                                          \
      return fail(c, "%s", e_.msg);                                                                \
  } while (0)
#define ERR (&e_)

static bool map_gemm(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  if (attr_i(n, "transA", 0) != 0 || attr_i(n, "transB", 0) != 1 ||
      attr_f(n, "alpha", 1.0) != 1.0 || attr_f(n, "beta", 1.0) != 1.0)
    return fail(c, "hap maps Gemm with transA=0, transB=1, alpha=beta=1 (a linear layer)");
  if (n->n_input == 3 && shape_of(c, in[2])->rank != 1)
    return fail(c, "Gemm's C must be a bias vector [N]");
  return emit(c, n, HAP_OP_LINEAR, in, (int32_t)n->n_input, NULL);
}

static bool map_conv(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  size_t nd, np, ns, nk;
  const int64_t *dil = attr_ints(n, "dilations", &nd), *pads = attr_ints(n, "pads", &np);
  const int64_t *strides = attr_ints(n, "strides", &ns);
  attr_ints(n, "kernel_shape", &nk);
  int64_t d, p, s;
  const Onnx__AttributeProto *ap = attr(n, "auto_pad");
  if (ap != NULL && ap->has_s && !(ap->s.len == 6 && memcmp(ap->s.data, "NOTSET", 6) == 0))
    return fail(c, "auto_pad other than NOTSET");
  if (attr_i(n, "group", 1) != 1 || !all_same(dil, nd, 1, &d) || d != 1)
    return fail(c, "groups or dilations other than 1");
  if (!all_same(pads, np, 0, &p) || !all_same(strides, ns, 1, &s) || (nk != 0 && nk != 2))
    return fail(c, "hap's conv2d takes one padding and one stride for both spatial dims");
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_CONV2D);
  SET(hap_attrs_set_int(&a, HAP_OP_CONV2D, "stride", s, ERR));
  SET(hap_attrs_set_int(&a, HAP_OP_CONV2D, "padding", p, ERR));
  return emit(c, n, HAP_OP_CONV2D, in, (int32_t)n->n_input, &a);
}

static bool map_pool(ctx *c, const Onnx__NodeProto *n, int32_t *in, bool max) {
  size_t nk, np, ns, nd;
  const int64_t *k = attr_ints(n, "kernel_shape", &nk), *pads = attr_ints(n, "pads", &np);
  const int64_t *strides = attr_ints(n, "strides", &ns);
  const int64_t *dil = attr_ints(n, "dilations", &nd);
  int64_t kk, p, s, d;
  if (attr_i(n, "ceil_mode", 0) != 0 || !all_same(dil, nd, 1, &d) || d != 1 || n->n_output > 1)
    return fail(c, "ceil_mode, dilations or an indices output");
  if (nk != 2 || !all_same(k, nk, 0, &kk) || !all_same(pads, np, 0, &p) ||
      !all_same(strides, ns, kk, &s))
    return fail(c, "hap pools with one square kernel, stride and padding");
  if (max) {
    hap_attrs a;
    hap_attrs_init(&a, HAP_OP_MAX_POOL2D);
    SET(hap_attrs_set_int(&a, HAP_OP_MAX_POOL2D, "kernel", kk, ERR));
    SET(hap_attrs_set_int(&a, HAP_OP_MAX_POOL2D, "stride", s, ERR));
    SET(hap_attrs_set_int(&a, HAP_OP_MAX_POOL2D, "padding", p, ERR));
    return emit(c, n, HAP_OP_MAX_POOL2D, in, 1, &a);
  }
  const hap_shape *x = shape_of(c, in[0]);
  if (x->rank != 4 || p != 0 || s != kk || x->dims[2] % kk != 0 || x->dims[3] % kk != 0)
    return fail(c, "hap maps AveragePool whose stride is its kernel, dividing the input, without "
                   "padding (an adaptive average pool)");
  int64_t out[2] = {x->dims[2] / kk, x->dims[3] / kk};
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_ADAPTIVE_AVG_POOL2D);
  SET(hap_attrs_set_ints(&a, HAP_OP_ADAPTIVE_AVG_POOL2D, "output_size", out, 2, ERR));
  return emit(c, n, HAP_OP_ADAPTIVE_AVG_POOL2D, in, 1, &a);
}

static bool map_global_pool(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  int64_t out[2] = {1, 1};
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_ADAPTIVE_AVG_POOL2D);
  SET(hap_attrs_set_ints(&a, HAP_OP_ADAPTIVE_AVG_POOL2D, "output_size", out, 2, ERR));
  return emit(c, n, HAP_OP_ADAPTIVE_AVG_POOL2D, in, 1, &a);
}

static bool map_reshape_to(ctx *c, const Onnx__NodeProto *n, int32_t x, const int64_t *dims,
                           int32_t rank) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  SET(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", dims, rank, ERR));
  return emit(c, n, HAP_OP_RESHAPE, &x, 1, &a);
}

static bool map_flatten(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  const hap_shape *x = shape_of(c, in[0]);
  int64_t axis = attr_i(n, "axis", 1);
  axis = axis < 0 ? axis + x->rank : axis;
  if (axis < 0 || axis > x->rank)
    return fail(c, "axis %lld out of range for rank %d", (long long)attr_i(n, "axis", 1),
                (int)x->rank);
  int64_t d[2] = {1, 1};
  for (int k = 0; k < x->rank; k++)
    d[k < axis ? 0 : 1] *= x->dims[k];
  return map_reshape_to(c, n, in[0], d, 2);
}

static bool map_reshape(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  double v[HAP_MAX_DIMS];
  int64_t cnt;
  if (n->n_input != 2 || !const_values(c, n->input[1], v, HAP_MAX_DIMS, &cnt))
    return false;
  const hap_shape *x = shape_of(c, in[0]);
  int64_t d[HAP_MAX_DIMS];
  for (int64_t k = 0; k < cnt; k++) {
    d[k] = as_i64(v[k]);
    if (d[k] == 0 && attr_i(n, "allowzero", 0) == 0) {
      if (k >= x->rank)
        return fail(c, "shape entry %lld is 0 (copy) beyond the input's rank", (long long)k);
      d[k] = x->dims[k];
    }
  }
  return map_reshape_to(c, n, in[0], d, (int32_t)cnt);
}

static bool map_transpose(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  const hap_shape *x = shape_of(c, in[0]);
  size_t np;
  const int64_t *perm = attr_ints(n, "perm", &np);
  int64_t p[HAP_MAX_DIMS];
  for (int k = 0; k < x->rank; k++)
    p[k] = np > 0 ? (k < (int)np ? perm[k] : -1) : x->rank - 1 - k;
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_PERMUTE);
  SET(hap_attrs_set_ints(&a, HAP_OP_PERMUTE, "dims", p, x->rank, ERR));
  return emit(c, n, HAP_OP_PERMUTE, in, 1, &a);
}

static bool map_softmax(ctx *c, const Onnx__NodeProto *n, int32_t *in, hap_op op) {
  hap_attrs a;
  hap_attrs_init(&a, op);
  SET(hap_attrs_set_int(&a, op, "dim", attr_i(n, "axis", -1), ERR));
  return emit(c, n, op, in, 1, &a);
}

static bool is_scalar_const(ctx *c, const char *name, double *v) {
  int64_t cnt;
  char keep[sizeof c->why];
  memcpy(keep, c->why, sizeof keep);
  bool ok = hap_strmap_get(&c->val, name) < 0 && constant(c, name) != NULL &&
            const_values(c, name, v, 1, &cnt) && cnt == 1;
  memcpy(c->why, keep, sizeof keep);
  return ok;
}

/* Add, Sub, Mul, Div: two tensors, or a tensor and a one-element constant (the scalar). */
static bool map_binary(ctx *c, const Onnx__NodeProto *n, hap_op op) {
  double s;
  int32_t x;
  if (n->n_input != 2)
    return fail(c, "expected 2 inputs");
  if (is_scalar_const(c, n->input[1], &s) ||
      (is_scalar_const(c, n->input[0], &s) && (op == HAP_OP_ADD || op == HAP_OP_MUL))) {
    bool first = hap_strmap_get(&c->val, n->input[1]) < 0 && constant(c, n->input[1]) != NULL;
    if (!tensor(c, n->input[first ? 0 : 1], &x))
      return false;
    hap_attrs a;
    hap_attrs_init(&a, op);
    SET(hap_attrs_set_float(&a, op, "scalar", s, ERR));
    return emit(c, n, op, &x, 1, &a);
  }
  int32_t in[2];
  if (!tensor(c, n->input[0], &in[0]) || !tensor(c, n->input[1], &in[1]))
    return false;
  return emit(c, n, op, in, 2, NULL);
}

static bool map_pow(ctx *c, const Onnx__NodeProto *n, int32_t x, double exponent) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_POW);
  SET(hap_attrs_set_float(&a, HAP_OP_POW, "exponent", exponent, ERR));
  return emit(c, n, HAP_OP_POW, &x, 1, &a);
}

static bool map_reduce(ctx *c, const Onnx__NodeProto *n, int32_t *in, hap_op op) {
  size_t na;
  const int64_t *axes = attr_ints(n, "axes", &na);
  double v[HAP_MAX_DIMS];
  int64_t dims[HAP_MAX_DIMS], cnt = (int64_t)na;
  if (n->n_input >= 2 && n->input[1][0] != '\0') {
    if (!const_values(c, n->input[1], v, HAP_MAX_DIMS, &cnt))
      return false;
    for (int64_t k = 0; k < cnt; k++)
      dims[k] = as_i64(v[k]);
  } else {
    for (size_t k = 0; k < na && k < HAP_MAX_DIMS; k++)
      dims[k] = axes[k];
  }
  hap_attrs a;
  hap_attrs_init(&a, op);
  SET(hap_attrs_set_ints(&a, op, "dims", dims, (int32_t)cnt, ERR));
  SET(hap_attrs_set_int(&a, op, "keepdim", attr_i(n, "keepdims", 1) != 0, ERR));
  return emit(c, n, op, in, 1, &a);
}

static bool map_gather(ctx *c, const Onnx__NodeProto *n) {
  int32_t in[2];
  if (attr_i(n, "axis", 0) != 0 || hap_strmap_get(&c->init, n->input[0]) < 0)
    return fail(c, "hap maps Gather along axis 0 of an initializer (an embedding table)");
  if (!tensor(c, n->input[1], &in[0]) || !tensor(c, n->input[0], &in[1]))
    return false;
  return emit(c, n, HAP_OP_EMBEDDING, in, 2, NULL);
}

static bool map_layer_norm(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  const hap_shape *x = shape_of(c, in[0]);
  int64_t axis = attr_i(n, "axis", -1);
  axis = axis < 0 ? axis + x->rank : axis;
  if (n->n_output > 1 || axis < 0 || axis >= x->rank)
    return fail(c, "mean or inverse-deviation outputs, or an axis out of range");
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_LAYER_NORM);
  SET(hap_attrs_set_int(&a, HAP_OP_LAYER_NORM, "normalized_dims", x->rank - axis, ERR));
  SET(hap_attrs_set_float(&a, HAP_OP_LAYER_NORM, "eps", attr_f(n, "epsilon", 1e-5), ERR));
  return emit(c, n, HAP_OP_LAYER_NORM, in, (int32_t)n->n_input, &a);
}

/* An intermediate node of a decomposition: node and output named `base` + `suffix`. */
static bool part(ctx *c, const char *base, const char *suffix, hap_op op, const int32_t *ins,
                 int32_t n_in, const hap_attrs *a, int32_t *id) {
  char name[800];
  snprintf(name, sizeof name, "%.440s%.300s", base, suffix);
  const char *out = name;
  hap_err e = {0};
  if (hap_graph_add_node(c->g, name, op, ins, n_in, a, &out, id, &e) != HAP_OK)
    return fail(c, "%s", e.msg);
  return true;
}

/* Parameter or buffer `name` ([C]) reshaped to [C, 1, ...] for `rank`-dim inputs; a buffer
 * whatever --buffers says when `buffer`. */
static bool column(ctx *c, const char *base, const char *name, int32_t rank, bool buffer,
                   int32_t *id) {
  int32_t t;
  if (!tensor_of(c, name, buffer, &t))
    return false;
  const hap_shape *s = shape_of(c, t);
  if (s->rank != 1)
    return fail(c, "'%s' must be a vector [C]", name);
  int64_t dims[HAP_MAX_DIMS] = {s->dims[0]};
  for (int k = 1; k < rank - 1; k++)
    dims[k] = 1;
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  SET(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", dims, rank - 1, ERR));
  char suffix[300];
  snprintf(suffix, sizeof suffix, ".%.280s.col", name);
  return part(c, base, suffix, HAP_OP_RESHAPE, &t, 1, &a, id);
}

/* BatchNormalization as hap ops (docs/import.md): in training (training_mode = 1, or the
 * statistics outputs of opsets before 14) by the batch's mean and biased variance over every dim
 * but the channels, else by the running statistics; then scale and bias as [C, 1, ...]. */
static bool map_batch_norm(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  const char *o = n->output[0];
  const hap_shape *x = shape_of(c, in[0]);
  int32_t rank = x->rank;
  if (rank < 2 || n->n_input != 5)
    return fail(c, "expected X [N, C, ...], scale, B, mean and var");
  bool training = attr_i(n, "training_mode", 0) != 0;
  for (size_t j = 1; j < n->n_output; j++)
    training = training || n->output[j][0] != '\0';
  double eps = attr_f(n, "epsilon", 1e-5);
  int32_t d = -1, var = -1, t = -1, w = -1, b = -1;
  int32_t m = -1, ins[2];
  if (training) {
    int64_t dims[HAP_MAX_DIMS] = {0};
    for (int k = 2; k < rank; k++)
      dims[k - 1] = k;
    hap_attrs red;
    hap_attrs_init(&red, HAP_OP_MEAN);
    SET(hap_attrs_set_ints(&red, HAP_OP_MEAN, "dims", dims, rank - 1, ERR));
    SET(hap_attrs_set_int(&red, HAP_OP_MEAN, "keepdim", 1, ERR));
    hap_attrs sq;
    hap_attrs_init(&sq, HAP_OP_POW);
    SET(hap_attrs_set_float(&sq, HAP_OP_POW, "exponent", 2.0, ERR));
    if (!part(c, o, ".mean", HAP_OP_MEAN, in, 1, &red, &m))
      return false;
    ins[0] = in[0];
    ins[1] = m;
    if (!part(c, o, ".centered", HAP_OP_SUB, ins, 2, NULL, &d) ||
        !part(c, o, ".square", HAP_OP_POW, &d, 1, &sq, &t) ||
        !part(c, o, ".var", HAP_OP_MEAN, &t, 1, &red, &var))
      return false;
  } else {
    if (!column(c, o, n->input[3], rank, true, &m))
      return false;
    ins[0] = in[0];
    ins[1] = m;
    if (!part(c, o, ".centered", HAP_OP_SUB, ins, 2, NULL, &d) ||
        !column(c, o, n->input[4], rank, true, &var))
      return false;
  }
  hap_attrs add_eps;
  hap_attrs_init(&add_eps, HAP_OP_ADD);
  SET(hap_attrs_set_float(&add_eps, HAP_OP_ADD, "scalar", eps, ERR));
  if (!part(c, o, ".var_eps", HAP_OP_ADD, &var, 1, &add_eps, &t) ||
      !part(c, o, ".rstd", HAP_OP_RSQRT, &t, 1, NULL, &t))
    return false;
  ins[0] = d;
  ins[1] = t;
  if (!part(c, o, ".normed", HAP_OP_MUL, ins, 2, NULL, &t) ||
      !column(c, o, n->input[1], rank, false, &w))
    return false;
  ins[0] = t;
  ins[1] = w;
  if (!part(c, o, ".scaled", HAP_OP_MUL, ins, 2, NULL, &t) ||
      !column(c, o, n->input[2], rank, false, &b))
    return false;
  ins[0] = t;
  ins[1] = b;
  return emit(c, n, HAP_OP_ADD, ins, 2, NULL);
}

/* ---- shape arithmetic, folded ---------------------------------------------------------------- */

/* Whether value `name` feeds only comparisons and conditions: every reader is Equal, Cast to
 * bool, Where's condition, or a Slice, Reshape, Unsqueeze or Squeeze of it whose output is such a
 * value too. A float initializer read so is a mask (GPT-2's causal `bias` buffer): a constant. */
static bool mask_only(const ctx *c, const char *name, int depth) {
  int readers = 0;
  if (depth > 16)
    return false;
  for (size_t i = 0; i < c->gp->n_output; i++)
    if (c->gp->output[i]->name != NULL && strcmp(c->gp->output[i]->name, name) == 0)
      return false;
  for (size_t i = 0; i < c->gp->n_node; i++) {
    const Onnx__NodeProto *n = c->gp->node[i];
    for (size_t k = 0; k < n->n_input; k++) {
      if (strcmp(n->input[k], name) != 0)
        continue;
      readers++;
      const char *t = n->op_type != NULL ? n->op_type : "";
      bool through = k == 0 && n->n_output >= 1 &&
                     (strcmp(t, "Slice") == 0 || strcmp(t, "Reshape") == 0 ||
                      strcmp(t, "Unsqueeze") == 0 || strcmp(t, "Squeeze") == 0);
      if (strcmp(t, "Equal") == 0 || (strcmp(t, "Cast") == 0 && attr_i(n, "to", 0) == T_BOOL) ||
          (strcmp(t, "Where") == 0 && k == 0))
        continue;
      if (!through || !mask_only(c, n->output[0], depth + 1))
        return false;
    }
  }
  return readers > 0;
}

/* Value `name` as a small constant into *f (f->v malloc'd): folded before, or an initializer or
 * Constant of at most FOLD_MAX elements that is not a float weight. */
static bool as_const(ctx *c, const char *name, fval *f) {
  const fval *have = folded(c, name);
  *f = (fval){0};
  if (have != NULL) {
    *f = *have;
    f->v = malloc((size_t)(have->n > 0 ? have->n : 1) * sizeof *f->v);
    if (f->v != NULL)
      memcpy(f->v, have->v, (size_t)have->n * sizeof *f->v);
    return f->v != NULL;
  }
  const Onnx__TensorProto *t = constant(c, name);
  int64_t n;
  if (t == NULL || !numel_of(t, &n) || n > FOLD_MAX || t->n_dims > HAP_MAX_DIMS)
    return false;
  int dt = t->has_data_type ? t->data_type : 0;
  if (hap_strmap_get(&c->init, name) >= 0 && dt == T_FLOAT && n > 1 && !mask_only(c, name, 0))
    return false; /* a weight */
  f->v = malloc((size_t)(n > 0 ? n : 1) * sizeof *f->v);
  char keep[sizeof c->why];
  memcpy(keep, c->why, sizeof keep);
  int64_t got = 0;
  bool ok = f->v != NULL && const_values(c, name, f->v, n, &got) && got == n;
  memcpy(c->why, keep, sizeof keep);
  if (!ok) {
    free(f->v);
    f->v = NULL;
    return false;
  }
  f->rank = (int32_t)t->n_dims;
  for (size_t k = 0; k < t->n_dims; k++)
    f->dims[k] = t->dims[k];
  f->n = n;
  f->is_int = dt == T_INT64 || dt == T_INT32 || dt == T_BOOL;
  return true;
}

/* Keep f as the value of `name` (owning f->v). */
static bool keep_folded(ctx *c, const char *name, fval *f) {
  if (c->n_fv == c->cap_fv) {
    int32_t cap = c->cap_fv ? 2 * c->cap_fv : 16;
    fval *v = realloc(c->fv, (size_t)cap * sizeof *v);
    if (v == NULL) {
      free(f->v);
      return fail(c, "out of memory");
    }
    c->fv = v;
    c->cap_fv = cap;
  }
  c->fv[c->n_fv] = *f;
  if (hap_strmap_put(&c->folded, name, c->n_fv) != 0)
    return fail(c, "out of memory");
  c->n_fv++;
  return true;
}

/* A buffer tensor `name` holding constant f (float32, or int64 when f->is_int); its values are
 * kept for hap_onnx_parse's values. Takes f->v. */
static bool const_tensor(ctx *c, const char *name, fval *f, int32_t *id) {
  hap_shape s = {.rank = f->rank};
  memcpy(s.dims, f->dims, sizeof s.dims);
  int64_t numel = 0;
  bool fits = hap_shape_numel(&s, &numel) == HAP_OK && numel == f->n;
  void *data = fits ? malloc((size_t)(f->n > 0 ? f->n : 1) * 8) : NULL;
  if (fits && data != NULL && c->n_made == c->cap_made) {
    int32_t cap = c->cap_made ? 2 * c->cap_made : 8;
    struct made *m = realloc(c->made, (size_t)cap * sizeof *m);
    if (m != NULL) {
      c->made = m;
      c->cap_made = cap;
    }
  }
  if (!fits || data == NULL || c->n_made == c->cap_made) {
    free(f->v);
    free(data);
    return fits ? fail(c, "out of memory")
                : fail(c, "constant '%s': %lld values do not fill its dims", name, (long long)f->n);
  }
  for (int64_t i = 0; i < f->n; i++)
    if (f->is_int)
      ((int64_t *)data)[i] = as_i64(f->v[i]);
    else
      ((float *)data)[i] = (float)f->v[i];
  hap_dtype dt = f->is_int ? HAP_I64 : HAP_F32;
  free(f->v);
  f->v = NULL;
  hap_err e = {0};
  if (hap_graph_add_tensor(c->g, name, HAP_TENSOR_BUFFER, dt, &s, id, &e) != HAP_OK) {
    free(data);
    return fail(c, "constant '%s': %s", name, e.msg);
  }
  c->made[c->n_made++] = (struct made){.tensor = *id, .data = data};
  /* the map borrows its keys: the graph's copy of the name outlives it (name may be a buffer) */
  return hap_strmap_put(&c->val, c->g->tensors[*id].name, *id) == 0 || fail(c, "out of memory");
}

/* Slice of constant x (starts, ends, axes, steps as ONNX's inputs 1-4, step 1) into *out. */
static bool fold_slice(const fval *in, size_t k, fval *out) {
  const fval *x = &in[0];
  int64_t lo[HAP_MAX_DIMS], hi[HAP_MAX_DIMS];
  if (k < 3 || in[1].n != in[2].n || (k > 3 && in[3].n != in[1].n) || (k > 4 && in[4].n != in[1].n))
    return false;
  for (int d = 0; d < x->rank; d++) {
    lo[d] = 0;
    hi[d] = x->dims[d];
  }
  for (int64_t i = 0; i < in[1].n; i++) {
    int64_t a = k > 3 ? as_i64(in[3].v[i]) : i;
    a = a < 0 ? a + x->rank : a;
    if (a < 0 || a >= x->rank || (k > 4 && in[4].v[i] != 1))
      return false;
    double size = (double)x->dims[a], l = in[1].v[i], h = in[2].v[i];
    if (isnan(l) || isnan(h))
      return false;
    l = l < 0 ? l + size : l;
    h = h < 0 ? h + size : h;
    l = l < 0 ? 0 : l > size ? size : l;
    h = h < l ? l : h > size ? size : h;
    lo[a] = (int64_t)l;
    hi[a] = (int64_t)h;
  }
  *out = (fval){.rank = x->rank, .n = 1, .is_int = x->is_int};
  for (int d = 0; d < x->rank; d++) {
    out->dims[d] = hi[d] - lo[d];
    out->n *= out->dims[d];
  }
  out->v = malloc((size_t)(out->n + 1) * sizeof *out->v);
  if (out->v == NULL)
    return false;
  int64_t idx[HAP_MAX_DIMS] = {0};
  for (int64_t i = 0; i < out->n; i++) {
    int64_t at = 0;
    for (int d = 0; d < x->rank; d++)
      at = at * x->dims[d] + lo[d] + idx[d];
    out->v[i] = x->v[at];
    for (int d = x->rank - 1; d >= 0 && ++idx[d] == out->dims[d]; d--)
      idx[d] = 0;
  }
  return true;
}

/* Reshape of constant x to shape s (0 copies a dim unless allowzero, one -1 inferred) into *out
 * (takes x->v). */
static bool fold_reshape(fval *x, const fval *s, bool allowzero, fval *out) {
  if (s->rank != 1 || s->n > HAP_MAX_DIMS)
    return false;
  *out = (fval){.rank = (int32_t)s->n, .n = x->n, .is_int = x->is_int};
  int64_t known = 1, infer = -1;
  for (int64_t d = 0; d < s->n; d++) {
    int64_t v = as_i64(s->v[d]);
    if (v == 0 && !allowzero)
      v = d < x->rank ? x->dims[d] : -2;
    if (v == -1 && infer < 0)
      infer = d;
    else if (v < 0 || v > x->n || (v > 0 && known > x->n / v))
      return false; /* a dim no reshape of x's n elements has */
    else
      known *= v;
    out->dims[d] = v;
  }
  if (infer >= 0)
    out->dims[infer] = known > 0 && x->n % known == 0 ? x->n / known : -1;
  if ((infer >= 0 && out->dims[infer] < 0) || (infer < 0 && known != x->n))
    return false;
  out->v = x->v;
  x->v = NULL;
  return true;
}

/* ConstantOfShape: shape s, every element the `value` attribute's one element (default 0.0). */
static bool fold_constant_of_shape(const Onnx__NodeProto *n, const fval *s, fval *out) {
  double v = 0;
  bool is_int = false;
  const Onnx__AttributeProto *a = attr(n, "value");
  if (a != NULL && a->t != NULL) {
    const Onnx__TensorProto *t = a->t;
    int64_t cnt = 0;
    int dt = t->has_data_type ? t->data_type : 0;
    bool ok = numel_of(t, &cnt) && cnt == 1;
    if (ok && t->has_raw_data && t->raw_data.len == 8 && dt == T_INT64) {
      int64_t i64;
      memcpy(&i64, t->raw_data.data, 8);
      v = (double)i64;
    } else if (ok && t->has_raw_data && t->raw_data.len == 4 && dt == T_FLOAT) {
      float f32;
      memcpy(&f32, t->raw_data.data, 4);
      v = f32;
    } else if (ok && !t->has_raw_data && dt == T_INT64 && t->n_int64_data == 1) {
      v = (double)t->int64_data[0];
    } else if (ok && !t->has_raw_data && dt == T_FLOAT && t->n_float_data == 1) {
      v = t->float_data[0];
    } else {
      return false;
    }
    is_int = dt == T_INT64;
  }
  if (s->rank != 1 || s->n > HAP_MAX_DIMS)
    return false;
  *out = (fval){.rank = (int32_t)s->n, .n = 1, .is_int = is_int};
  for (int64_t d = 0; d < s->n; d++) {
    out->dims[d] = as_i64(s->v[d]);
    if (out->dims[d] < 0 || out->dims[d] > FOLD_MAX)
      return false;
    out->n *= out->dims[d];
    if (out->n > FOLD_MAX)
      return false;
  }
  if ((out->v = malloc((size_t)(out->n + 1) * sizeof *out->v)) == NULL)
    return false;
  for (int64_t i = 0; i < out->n; i++)
    out->v[i] = v;
  return true;
}

static double arith(char op, double a, double b, bool is_int) {
  switch (op) {
  case 'A': return a + b;
  case 'S': return a - b;
  case 'M': return a * b;
  case 'E': return a == b;
  default: break;
  }
  if (!is_int)
    return a / b;
  int64_t q = as_i64(b) != 0 ? as_i64(a) / as_i64(b) : 0; /* ONNX integer Div truncates */
  return (double)q;
}

/* Node n computed here when it is shape arithmetic over constants (or Shape of a tensor);
 * false when it is not (then it is mapped as an op). */
static bool try_fold(ctx *c, const Onnx__NodeProto *n, bool *done) {
  const char *t = n->op_type;
  *done = false;
  fval in[5] = {{0}}, out = {0};
  size_t k = n->n_input < 5 ? n->n_input : 5;
  if (strcmp(t, "Shape") == 0) {
    int32_t id = n->n_input == 1 ? hap_strmap_get(&c->val, n->input[0]) : -1;
    const fval *f = n->n_input == 1 && id < 0 ? folded(c, n->input[0]) : NULL;
    hap_shape fs = {.rank = f != NULL ? f->rank : 0};
    if (f != NULL)
      memcpy(fs.dims, f->dims, sizeof fs.dims);
    if (id < 0 && f == NULL)
      return true;
    const hap_shape *sh = id >= 0 ? shape_of(c, id) : &fs;
    out = (fval){.rank = 1, .dims = {sh->rank}, .n = sh->rank, .is_int = true};
    out.v = malloc((size_t)(sh->rank + 1) * sizeof *out.v);
    if (out.v == NULL)
      return fail(c, "out of memory");
    for (int d = 0; d < sh->rank; d++)
      out.v[d] = (double)sh->dims[d];
    *done = true;
    return keep_folded(c, n->output[0], &out);
  }
  static const char *const ops[] = {
      "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast",    "Add",   "Sub",
      "Mul",    "Div",       "Equal",   "Slice",  "Reshape", "Where", "ConstantOfShape"};
  bool known_op = false;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    known_op = known_op || strcmp(t, ops[i]) == 0;
  if (!known_op || n->n_input == 0 || n->n_input > 5 || n->n_output != 1)
    return true;
  size_t got = 0;
  for (; got < k; got++)
    if (!as_const(c, n->input[got], &in[got]))
      break;
  bool ok = true;
  if (got == k) {
    *done = true;
    if (strcmp(t, "Gather") == 0 && attr_i(n, "axis", 0) == 0 && in[0].rank == 1 && k == 2) {
      out = (fval){.rank = in[1].rank, .n = in[1].n, .is_int = in[0].is_int};
      memcpy(out.dims, in[1].dims, sizeof out.dims);
      out.v = malloc((size_t)(out.n + 1) * sizeof *out.v);
      for (int64_t i = 0; out.v != NULL && i < out.n; i++) {
        int64_t j = as_i64(in[1].v[i]);
        j = j < 0 ? j + in[0].n : j;
        ok = ok && j >= 0 && j < in[0].n;
        out.v[i] = ok ? in[0].v[j] : 0;
      }
    } else if (strcmp(t, "Unsqueeze") == 0 || strcmp(t, "Squeeze") == 0) {
      out = in[0];
      in[0].v = NULL;
      size_t na;
      const int64_t *axes = attr_ints(n, "axes", &na);
      int64_t ax[HAP_MAX_DIMS];
      for (size_t i = 0; i < na && i < HAP_MAX_DIMS; i++)
        ax[i] = axes[i];
      if (k == 2)
        for (int64_t i = 0; i < in[1].n && i < HAP_MAX_DIMS; i++, na = (size_t)i)
          ax[i] = as_i64(in[1].v[i]);
      if (t[0] == 'U') {
        for (size_t i = 0; i < na && ok; i++) {
          int64_t a = ax[i] < 0 ? ax[i] + out.rank + 1 : ax[i];
          ok = out.rank < HAP_MAX_DIMS && a >= 0 && a <= out.rank;
          for (int64_t d = out.rank; ok && d > a; d--)
            out.dims[d] = out.dims[d - 1];
          if (ok) {
            out.dims[a] = 1;
            out.rank++;
          }
        }
      } else {
        int32_t r = 0;
        for (int32_t d = 0; d < out.rank; d++)
          if (out.dims[d] != 1)
            out.dims[r++] = out.dims[d];
        out.rank = r;
      }
    } else if (strcmp(t, "Concat") == 0) {
      int64_t total = 0;
      for (size_t i = 0; i < k; i++) {
        ok = ok && in[i].rank <= 1;
        total += in[i].n;
      }
      out = (fval){.rank = 1, .dims = {total}, .n = total, .is_int = in[0].is_int};
      out.v = malloc((size_t)(total + 1) * sizeof *out.v);
      for (size_t i = 0, at = 0; out.v != NULL && ok && i < k; at += (size_t)in[i].n, i++)
        memcpy(out.v + at, in[i].v, (size_t)in[i].n * sizeof *out.v);
    } else if (strcmp(t, "Cast") == 0) {
      int64_t to = attr_i(n, "to", T_FLOAT);
      out = in[0];
      in[0].v = NULL;
      out.is_int = to == T_INT64 || to == T_INT32 || to == T_BOOL;
      for (int64_t i = 0; out.is_int && i < out.n; i++)
        out.v[i] = to == T_BOOL ? out.v[i] != 0 : (double)as_i64(out.v[i]);
    } else if (strcmp(t, "Slice") == 0) {
      ok = fold_slice(in, k, &out);
    } else if (strcmp(t, "Reshape") == 0 && k == 2) {
      ok = fold_reshape(&in[0], &in[1], attr_i(n, "allowzero", 0) != 0, &out);
    } else if (strcmp(t, "ConstantOfShape") == 0 && k == 1) {
      ok = fold_constant_of_shape(n, &in[0], &out);
    } else if (strcmp(t, "Where") == 0 && k == 3) { /* same sizes, or single values */
      const fval *big = in[0].n >= in[1].n ? &in[0] : &in[1];
      big = big->n >= in[2].n ? big : &in[2];
      for (size_t i = 0; i < 3; i++)
        ok = ok && (in[i].n == big->n || in[i].n == 1);
      out = (fval){.rank = big->rank, .n = big->n, .is_int = in[1].is_int && in[2].is_int};
      memcpy(out.dims, big->dims, sizeof out.dims);
      out.v = ok ? malloc((size_t)(out.n + 1) * sizeof *out.v) : NULL;
      for (int64_t i = 0; out.v != NULL && i < out.n; i++)
        out.v[i] = in[0].v[in[0].n == 1 ? 0 : i] != 0 ? in[1].v[in[1].n == 1 ? 0 : i]
                                                      : in[2].v[in[2].n == 1 ? 0 : i];
    } else if (k == 2) { /* Add Sub Mul Div Equal, one side possibly a single value */
      const fval *big = in[0].n >= in[1].n ? &in[0] : &in[1];
      ok = in[0].n == in[1].n || in[0].n == 1 || in[1].n == 1;
      out = (fval){.rank = big->rank, .n = big->n, .is_int = in[0].is_int && in[1].is_int};
      memcpy(out.dims, big->dims, sizeof out.dims);
      out.v = malloc((size_t)(out.n + 1) * sizeof *out.v);
      char op = t[0] == 'E' ? 'E' : t[0] == 'D' ? 'D' : t[0] == 'M' ? 'M' : t[0];
      for (int64_t i = 0; out.v != NULL && ok && i < out.n; i++)
        out.v[i] =
            arith(op, in[0].v[in[0].n == 1 ? 0 : i], in[1].v[in[1].n == 1 ? 0 : i], out.is_int);
      out.is_int = out.is_int || op == 'E';
    } else {
      ok = false;
    }
  }
  for (size_t i = 0; i < k; i++)
    free(in[i].v);
  if (!*done)
    return true;
  if (!ok || out.v == NULL) {
    free(out.v);
    return fail(c, "shape arithmetic over constants that does not fit (indices, ranks, sizes)");
  }
  return keep_folded(c, n->output[0], &out);
}

/* Slice of a tensor (constant starts, ends, axes, steps of 1) -> one narrow per sliced dim. */
static bool map_slice(ctx *c, const Onnx__NodeProto *n, const int32_t *in) {
  double st[HAP_MAX_DIMS], en[HAP_MAX_DIMS], ax[HAP_MAX_DIMS], sp[HAP_MAX_DIMS];
  int64_t ns, ne, na = 0, nsp = 0;
  if (n->n_input < 3 || !const_values(c, n->input[1], st, HAP_MAX_DIMS, &ns) ||
      !const_values(c, n->input[2], en, HAP_MAX_DIMS, &ne) || ns != ne ||
      (n->n_input > 3 && n->input[3][0] && !const_values(c, n->input[3], ax, HAP_MAX_DIMS, &na)) ||
      (n->n_input > 4 && n->input[4][0] && !const_values(c, n->input[4], sp, HAP_MAX_DIMS, &nsp)))
    return fail(c, "hap maps Slice with constant starts, ends and axes");
  int32_t cur = in[0];
  for (int64_t i = 0; i < ns; i++) {
    const hap_shape *x = shape_of(c, cur);
    int64_t a = i < na ? as_i64(ax[i]) : i;
    a = a < 0 ? a + x->rank : a;
    if (a < 0 || a >= x->rank || (i < nsp && sp[i] != 1))
      return fail(c, "hap maps Slice along existing dims with step 1");
    int64_t size = x->dims[a];
    if (isnan(st[i]) || isnan(en[i]))
      return fail(c, "a Slice bound is not a number");
    double lo = st[i] < 0 ? st[i] + (double)size : st[i];
    double hi = en[i] < 0 ? en[i] + (double)size : en[i];
    lo = lo < 0 ? 0 : lo > (double)size ? (double)size : lo;
    hi = hi < lo ? lo : hi > (double)size ? (double)size : hi;
    if ((int64_t)lo == 0 && (int64_t)hi == size)
      continue;
    if (hi <= lo)
      return fail(c, "an empty slice");
    hap_attrs at;
    hap_attrs_init(&at, HAP_OP_NARROW);
    SET(hap_attrs_set_int(&at, HAP_OP_NARROW, "dim", a, ERR));
    SET(hap_attrs_set_int(&at, HAP_OP_NARROW, "start", (int64_t)lo, ERR));
    SET(hap_attrs_set_int(&at, HAP_OP_NARROW, "length", (int64_t)hi - (int64_t)lo, ERR));
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".narrow%lld", (long long)i);
    if (!part(c, n->output[0], suffix, HAP_OP_NARROW, &cur, 1, &at, &cur))
      return false;
  }
  return alias(c, n, cur);
}

/* Whether any node or graph output reads value `name` (an optional output left unused). */
static bool used(const ctx *c, const char *name) {
  for (size_t i = 0; i < c->gp->n_node; i++)
    for (size_t j = 0; j < c->gp->node[i]->n_input; j++)
      if (strcmp(c->gp->node[i]->input[j], name) == 0)
        return true;
  for (size_t i = 0; i < c->gp->n_output; i++)
    if (c->gp->output[i]->name != NULL && strcmp(c->gp->output[i]->name, name) == 0)
      return true;
  return false;
}

/* Dropout: in training (opset 12+: a training_mode input that is true) with a ratio > 0, hap's
 * dropout; else (inference) the same tensor. */
static bool map_dropout(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  if (n->n_output > 1 && used(c, n->output[1]))
    return fail(c, "Dropout's mask output is used");
  double ratio = attr_f(n, "ratio", 0.5), training = 0;
  int64_t cnt;
  if (n->n_input >= 2 && n->input[1][0] != '\0' &&
      (!const_values(c, n->input[1], &ratio, 1, &cnt) || cnt != 1))
    return false;
  if (n->n_input >= 3 && n->input[2][0] != '\0' &&
      (!const_values(c, n->input[2], &training, 1, &cnt) || cnt != 1))
    return false;
  if (training == 0 || ratio <= 0)
    return alias(c, n, in[0]);
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_DROPOUT);
  SET(hap_attrs_set_float(&a, HAP_OP_DROPOUT, "p", ratio, ERR));
  return emit(c, n, HAP_OP_DROPOUT, in, 1, &a);
}

/* SoftmaxCrossEntropyLoss (scores [N, C, ...], labels [N, ...]; mean or sum, no class weights,
 * no ignore_index, no log-probability output) -> cross_entropy. */
static bool map_cross_entropy(ctx *c, const Onnx__NodeProto *n, int32_t *in) {
  const Onnx__AttributeProto *r = attr(n, "reduction");
  const char *red = "mean";
  if (r != NULL && r->has_s && r->s.len == 3 && memcmp(r->s.data, "sum", 3) == 0)
    red = "sum";
  else if (r != NULL && r->has_s && !(r->s.len == 4 && memcmp(r->s.data, "mean", 4) == 0))
    return fail(c, "reduction other than mean or sum");
  if (n->n_input > 2 || attr_i(n, "ignore_index", -1) >= 0 ||
      (n->n_output > 1 && used(c, n->output[1])))
    return fail(c, "class weights, an ignore_index >= 0, or the log-probability output used");
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_CROSS_ENTROPY);
  SET(hap_attrs_set_str(&a, HAP_OP_CROSS_ENTROPY, "reduction", red, ERR));
  return emit(c, n, HAP_OP_CROSS_ENTROPY, in, 2, &a);
}

/* Where(cond, a, b) with a constant condition, one branch a one-element constant (the fill) and
 * the other a tensor x: for a fill of -inf or +inf, x + M with M the fill where the output takes
 * it, 0 elsewhere (masked_fill's mask); for a finite fill, x * K + V (K 0 there, 1 elsewhere; V
 * the fill there, 0 elsewhere). M, K and V become buffers named after the output. */
static bool map_where(ctx *c, const Onnx__NodeProto *n) {
  fval cond, m, v = {0};
  double fill;
  int32_t x, mid = -1, vid = -1, t = -1, ins[2];
  if (n->n_input != 3 || hap_strmap_get(&c->val, n->input[0]) >= 0 ||
      !as_const(c, n->input[0], &cond))
    return fail(c, "hap maps Where with a constant condition (a mask)");
  bool fill_first = is_scalar_const(c, n->input[1], &fill);
  if ((!fill_first && !is_scalar_const(c, n->input[2], &fill)) ||
      !tensor(c, n->input[fill_first ? 2 : 1], &x)) {
    free(cond.v);
    return c->why[0] ? false
                     : fail(c, "hap maps Where whose one branch is a one-element constant (a "
                               "masked_fill) and the other a tensor");
  }
  bool inf = isinf(fill);
  m = cond;
  if (!inf) {
    v = cond;
    v.v = malloc((size_t)(cond.n + 1) * sizeof *v.v);
    if (v.v == NULL) {
      free(cond.v);
      return fail(c, "out of memory");
    }
  }
  for (int64_t i = 0; i < cond.n; i++) {
    bool takes = (cond.v[i] != 0) == fill_first; /* this element is the fill */
    m.v[i] = inf ? (takes ? fill : 0) : (takes ? 0 : 1);
    if (!inf)
      v.v[i] = takes ? fill : 0;
  }
  m.is_int = v.is_int = false;
  char name[600];
  snprintf(name, sizeof name, "%.500s.%s", n->output[0], inf ? "mask" : "keep");
  if (!const_tensor(c, name, &m, &mid)) {
    free(v.v);
    return false;
  }
  ins[0] = x;
  ins[1] = mid;
  if (inf)
    return emit(c, n, HAP_OP_ADD, ins, 2, NULL);
  snprintf(name, sizeof name, "%.500s.fill", n->output[0]);
  if (!part(c, n->output[0], ".kept", HAP_OP_MUL, ins, 2, NULL, &t)) {
    free(v.v);
    return false;
  }
  if (!const_tensor(c, name, &v, &vid))
    return false;
  ins[0] = t;
  ins[1] = vid;
  return emit(c, n, HAP_OP_ADD, ins, 2, NULL);
}

/* Split along `axis` into the outputs' sizes (the split input; before opset 13 the attribute;
 * else equal parts) -> one narrow per output, named as it. */
static bool map_split(ctx *c, const Onnx__NodeProto *n, const int32_t *in) {
  const hap_shape *x = shape_of(c, in[0]);
  int64_t axis = attr_i(n, "axis", 0), sizes[64] = {0}, total = 0;
  axis = axis < 0 ? axis + x->rank : axis;
  size_t k = n->n_output, na;
  const int64_t *split = attr_ints(n, "split", &na);
  double v[64];
  int64_t cnt = 0;
  if (axis < 0 || axis >= x->rank || k > 64)
    return fail(c, "axis out of range, or more than 64 outputs");
  if (n->n_input >= 2 && n->input[1][0] != '\0') {
    if (!const_values(c, n->input[1], v, 64, &cnt))
      return false;
  } else {
    int64_t equal = x->dims[axis] / (int64_t)k; /* equal parts */
    cnt = split != NULL ? (int64_t)na : (int64_t)k;
    for (int64_t j = 0; j < cnt && j < 64; j++)
      v[j] = (double)(split != NULL ? split[j] : equal);
  }
  bool sized = true;
  for (int64_t j = 0; j < cnt && j < 64; j++) {
    sized = sized && v[j] >= 1 && v[j] <= (double)x->dims[axis];
    sizes[j] = sized ? as_i64(v[j]) : 0;
    total += sizes[j];
  }
  if (!sized || cnt != (int64_t)k || total != x->dims[axis])
    return fail(c, "split sizes that do not cover dim %lld (%lld) in %zu positive parts",
                (long long)axis, (long long)x->dims[axis], k);
  for (size_t j = 0, start = 0; j < k; start += (size_t)sizes[j], j++) {
    hap_attrs a;
    hap_attrs_init(&a, HAP_OP_NARROW);
    SET(hap_attrs_set_int(&a, HAP_OP_NARROW, "dim", axis, ERR));
    SET(hap_attrs_set_int(&a, HAP_OP_NARROW, "start", (int64_t)start, ERR));
    SET(hap_attrs_set_int(&a, HAP_OP_NARROW, "length", sizes[j], ERR));
    const char *out = n->output[j];
    int32_t id;
    hap_err e = {0};
    if (out[0] == '\0')
      continue;
    if (hap_graph_add_node(c->g, out, HAP_OP_NARROW, in, 1, &a, &out, &id, &e) != HAP_OK)
      return fail(c, "%s", e.msg);
    if (hap_strmap_put(&c->val, out, id) != 0)
      return fail(c, "out of memory");
  }
  return true;
}

/* Gather with constant indices: one index (the dim dropped) or a contiguous ascending run of
 * them along `axis` of any tensor -> narrow (+ reshape for one index). */
static bool map_gather_const(ctx *c, const Onnx__NodeProto *n, fval *idx) {
  int32_t x, cur;
  int64_t first = 0;
  bool ok = tensor(c, n->input[0], &x) && idx->n >= 1 && idx->rank <= 1;
  const hap_shape *s = ok ? shape_of(c, x) : NULL;
  int64_t axis = attr_i(n, "axis", 0);
  axis = s != NULL && axis < 0 ? axis + s->rank : axis;
  ok = ok && axis >= 0 && axis < s->rank;
  for (int64_t i = 0; ok && i < idx->n; i++) {
    int64_t j = as_i64(idx->v[i]);
    j = j < 0 ? j + s->dims[axis] : j;
    first = i == 0 ? j : first;
    ok = j >= 0 && j < s->dims[axis] && j == first + i;
  }
  int32_t rank = idx->rank;
  free(idx->v);
  idx->v = NULL;
  if (!ok)
    return c->why[0] ? false
                     : fail(c, "hap maps Gather with constant indices as one index or an "
                               "ascending run of them, inside the dim");
  hap_shape out = *s;
  out.dims[axis] = idx->n;
  cur = x;
  if (idx->n < s->dims[axis]) {
    hap_attrs a;
    hap_attrs_init(&a, HAP_OP_NARROW);
    SET(hap_attrs_set_int(&a, HAP_OP_NARROW, "dim", axis, ERR));
    SET(hap_attrs_set_int(&a, HAP_OP_NARROW, "start", first, ERR));
    SET(hap_attrs_set_int(&a, HAP_OP_NARROW, "length", idx->n, ERR));
    if (rank == 1)
      return emit(c, n, HAP_OP_NARROW, &x, 1, &a);
    if (!part(c, n->output[0], ".narrow", HAP_OP_NARROW, &x, 1, &a, &cur))
      return false;
  } else if (rank == 1) {
    return alias(c, n, x);
  }
  int64_t dims[HAP_MAX_DIMS];
  for (int k = 0, r = 0; k < out.rank; k++)
    if (k != axis)
      dims[r++] = out.dims[k];
  return map_reshape_to(c, n, cur, dims, out.rank - 1);
}

/* Expand: held (no hap op) until the Concat that appends it as a class token reads it. */
static bool map_expand(ctx *c, const Onnx__NodeProto *n) {
  return hap_strmap_put(&c->expand, n->output[0], (int32_t)c->cur) == 0 || fail(c, "out of memory");
}

/* Concat of tensors: only [x, Expand(token)] or [Expand(token), x] along dim 1, x [N, S, H],
 * token [1, 1, H] expanded to [N, 1, H] -> cls_append (first = 1 for the token first, as
 * torchvision's ViT). */
static bool map_concat(ctx *c, const Onnx__NodeProto *n) {
  int32_t e0 = n->n_input == 2 ? hap_strmap_get(&c->expand, n->input[0]) : -1;
  int32_t e1 = n->n_input == 2 ? hap_strmap_get(&c->expand, n->input[1]) : -1;
  if ((e0 < 0) == (e1 < 0))
    return fail(c, "hap maps Concat of tensors only as a class token joined to x ([x, "
                   "expand(token)] or [expand(token), x] along dim 1: cls_append)");
  bool first = e0 >= 0;
  const Onnx__NodeProto *ex = c->gp->node[first ? e0 : e1];
  int32_t in[2];
  fval to;
  if (!tensor(c, n->input[first ? 1 : 0], &in[0]) || ex->n_input != 2 ||
      !tensor(c, ex->input[0], &in[1]))
    return false;
  if (!as_const(c, ex->input[1], &to))
    return fail(c, "the Expand's shape is not a constant");
  const hap_shape *x = shape_of(c, in[0]), *t = shape_of(c, in[1]);
  int64_t axis = attr_i(n, "axis", 0);
  axis = axis < 0 ? axis + x->rank : axis;
  bool ok = x->rank == 3 && axis == 1 && t->rank == 3 && t->dims[0] == 1 && t->dims[1] == 1 &&
            t->dims[2] == x->dims[2] && to.rank == 1 && to.n == 3;
  for (int k = 0; ok && k < 3; k++) { /* broadcast [1, 1, H] with `to` gives [N, 1, H] */
    int64_t want = k == 0 ? x->dims[0] : k == 1 ? 1 : x->dims[2], v = as_i64(to.v[k]);
    ok = v == want || (v == 1 && t->dims[k] == want) || (v == -1 && t->dims[k] == want);
  }
  free(to.v);
  if (!ok)
    return fail(c, "hap's cls_append joins x [N, S, H] and a token [1, 1, H] expanded to [N, 1, "
                   "H] along dim 1");
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_CLS_APPEND);
  SET(hap_attrs_set_int(&a, HAP_OP_CLS_APPEND, "first", first, ERR));
  return emit(c, n, HAP_OP_CLS_APPEND, in, 2, &a);
}

/* The op types hap maps; data_inputs: how many leading inputs are tensors (-1: all); min_in: the
 * fewest inputs the mapping reads. */
typedef struct known_op {
  const char *type;
  int data_inputs, min_in;
} known_op;
static const known_op known[] = {{"Gemm", -1, 2},
                                 {"MatMul", -1, 2},
                                 {"Conv", -1, 2},
                                 {"MaxPool", 1, 1},
                                 {"AveragePool", 1, 1},
                                 {"GlobalAveragePool", 1, 1},
                                 {"Relu", 1, 1},
                                 {"Sigmoid", 1, 1},
                                 {"Tanh", 1, 1},
                                 {"Softmax", 1, 1},
                                 {"LogSoftmax", 1, 1},
                                 {"Add", 0, 2},
                                 {"Sub", 0, 2},
                                 {"Mul", 0, 2},
                                 {"Div", 0, 2},
                                 {"Pow", 1, 2},
                                 {"Sqrt", 1, 1},
                                 {"Reciprocal", 1, 1},
                                 {"Flatten", 1, 1},
                                 {"Reshape", 1, 2},
                                 {"Transpose", 1, 1},
                                 {"ReduceMean", 1, 1},
                                 {"ReduceSum", 1, 1},
                                 {"Gather", 0, 2},
                                 {"LayerNormalization", -1, 1},
                                 {"Identity", 1, 1},
                                 {"Dropout", 1, 1},
                                 {"Constant", 0, 0},
                                 {"SoftmaxCrossEntropyLoss", 2, 2},
                                 {"BatchNormalization", 1, 5},
                                 {"Slice", 1, 3},
                                 {"Split", 1, 1},
                                 {"Where", 0, 3},
                                 {"Expand", 0, 2},
                                 {"Concat", 0, 1},
                                 {"Gelu", 1, 1}};

static const known_op *find_known(const char *type) {
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(known[i].type, type) == 0)
      return &known[i];
  return NULL;
}

/* Node n mapped; false with c->why when it cannot be. */
static bool map_node(ctx *c, const Onnx__NodeProto *n, const known_op *k) {
  const char *t = n->op_type;
  int32_t in[8] = {0};
  int data =
      k->data_inputs < 0 || k->data_inputs > (int)n->n_input ? (int)n->n_input : k->data_inputs;
  if (n->n_input > 8 || n->n_input < (size_t)k->min_in || n->n_output < 1)
    return fail(c, "expected %d to 8 inputs and at least one output", k->min_in);
  for (int i = 0; i < data; i++)
    if (n->input[i][0] == '\0')
      return fail(c, "input %d is left empty (an optional input hap does not map)", i);
    else if (!tensor(c, n->input[i], &in[i]))
      return false;
  if (strcmp(t, "Gemm") == 0)
    return map_gemm(c, n, in);
  if (strcmp(t, "MatMul") == 0)
    return emit(c, n, HAP_OP_MATMUL, in, 2, NULL);
  if (strcmp(t, "Conv") == 0)
    return map_conv(c, n, in);
  if (strcmp(t, "MaxPool") == 0 || strcmp(t, "AveragePool") == 0)
    return map_pool(c, n, in, t[1] == 'a');
  if (strcmp(t, "GlobalAveragePool") == 0)
    return map_global_pool(c, n, in);
  if (strcmp(t, "Relu") == 0)
    return emit(c, n, HAP_OP_RELU, in, 1, NULL);
  if (strcmp(t, "Gelu") == 0) { /* opset 20 */
    const Onnx__AttributeProto *ap = attr(n, "approximate");
    if (ap != NULL && ap->has_s && !(ap->s.len == 4 && memcmp(ap->s.data, "none", 4) == 0))
      return fail(c, "approximate other than none (hap's gelu is the erf form)");
    return emit(c, n, HAP_OP_GELU, in, 1, NULL);
  }
  if (strcmp(t, "Sigmoid") == 0)
    return emit(c, n, HAP_OP_SIGMOID, in, 1, NULL);
  if (strcmp(t, "Tanh") == 0)
    return emit(c, n, HAP_OP_TANH, in, 1, NULL);
  if (strcmp(t, "Softmax") == 0 || strcmp(t, "LogSoftmax") == 0)
    return map_softmax(c, n, in, t[0] == 'L' ? HAP_OP_LOG_SOFTMAX : HAP_OP_SOFTMAX);
  if (strcmp(t, "Add") == 0 || strcmp(t, "Sub") == 0 || strcmp(t, "Mul") == 0 ||
      strcmp(t, "Div") == 0)
    return map_binary(c, n,
                      t[0] == 'A'   ? HAP_OP_ADD
                      : t[0] == 'S' ? HAP_OP_SUB
                      : t[0] == 'M' ? HAP_OP_MUL
                                    : HAP_OP_DIV);
  if (strcmp(t, "Pow") == 0) {
    double e;
    int64_t cnt;
    if (n->n_input != 2 || !const_values(c, n->input[1], &e, 1, &cnt) || cnt != 1)
      return fail(c, "hap maps Pow with a one-element constant exponent");
    return map_pow(c, n, in[0], e);
  }
  if (strcmp(t, "Sqrt") == 0 || strcmp(t, "Reciprocal") == 0)
    return map_pow(c, n, in[0], t[0] == 'S' ? 0.5 : -1.0);
  if (strcmp(t, "Flatten") == 0)
    return map_flatten(c, n, in);
  if (strcmp(t, "Reshape") == 0)
    return map_reshape(c, n, in);
  if (strcmp(t, "Transpose") == 0)
    return map_transpose(c, n, in);
  if (strcmp(t, "ReduceMean") == 0 || strcmp(t, "ReduceSum") == 0)
    return map_reduce(c, n, in, t[6] == 'M' ? HAP_OP_MEAN : HAP_OP_SUM);
  if (strcmp(t, "Gather") == 0) {
    fval idx;
    if (n->n_input == 2 && hap_strmap_get(&c->val, n->input[1]) < 0 &&
        as_const(c, n->input[1], &idx))
      return map_gather_const(c, n, &idx);
    return map_gather(c, n);
  }
  if (strcmp(t, "Split") == 0)
    return map_split(c, n, in);
  if (strcmp(t, "Where") == 0)
    return map_where(c, n);
  if (strcmp(t, "Expand") == 0)
    return map_expand(c, n);
  if (strcmp(t, "Concat") == 0)
    return map_concat(c, n);
  if (strcmp(t, "LayerNormalization") == 0)
    return map_layer_norm(c, n, in);
  if (strcmp(t, "Dropout") == 0)
    return map_dropout(c, n, in);
  if (strcmp(t, "Identity") == 0)
    return alias(c, n, in[0]);
  if (strcmp(t, "SoftmaxCrossEntropyLoss") == 0)
    return map_cross_entropy(c, n, in);
  if (strcmp(t, "BatchNormalization") == 0)
    return map_batch_norm(c, n, in);
  if (strcmp(t, "Slice") == 0)
    return map_slice(c, n, in);
  return fail(c, "no hap mapping for this op");
}

/* ---- GELU written out ------------------------------------------------------------------------ */

/* The index of the only node reading value `name`; -1 when none, several, or a graph output. */
static int64_t sole_reader(const ctx *c, const char *name) {
  int64_t at = -1;
  for (size_t i = 0; i < c->gp->n_output; i++)
    if (c->gp->output[i]->name != NULL && strcmp(c->gp->output[i]->name, name) == 0)
      return -1;
  for (size_t i = 0; i < c->gp->n_node; i++)
    for (size_t k = 0; k < c->gp->node[i]->n_input; k++)
      if (strcmp(c->gp->node[i]->input[k], name) == 0) {
        if (at >= 0)
          return -1;
        at = (int64_t)i;
      }
  return at;
}

/* Node i is binary op `type` over `operand` and a one-element constant near `value` (either
 * order); its other input's name to *other when given. */
static bool is_op_with(ctx *c, int64_t i, const char *type, double value, const char **other) {
  if (i < 0)
    return false;
  const Onnx__NodeProto *n = c->gp->node[i];
  double v;
  if (strcmp(n->op_type, type) != 0 || n->n_input != 2 || n->n_output != 1)
    return false;
  int k = is_scalar_const(c, n->input[1], &v) ? 1 : is_scalar_const(c, n->input[0], &v) ? 0 : -1;
  if (k < 0 || (k == 0 && strcmp(type, "Div") == 0) || fabs(v - value) > 1e-6 * fabs(value))
    return false;
  if (other != NULL)
    *other = n->input[1 - k];
  return true;
}

/* Node i is Mul of values a and b, in either order. */
static bool is_mul_of(const ctx *c, int64_t i, const char *a, const char *b) {
  if (i < 0)
    return false;
  const Onnx__NodeProto *n = c->gp->node[i];
  return strcmp(n->op_type, "Mul") == 0 && n->n_input == 2 && n->n_output == 1 &&
         ((strcmp(n->input[0], a) == 0 && strcmp(n->input[1], b) == 0) ||
          (strcmp(n->input[0], b) == 0 && strcmp(n->input[1], a) == 0));
}

/* Marks every GELU torch.onnx.export writes out, x * 0.5 * (1 + erf(x / sqrt 2)), in c->fuse:
 * d = x / sqrt 2 (or x * (1 / sqrt 2)) -> e = Erf -> a = e + 1 -> then x * a * 0.5 in one of
 * its orders, each intermediate read only by the next. */
static void find_gelus(ctx *c) {
  const double root2 = 1.4142135623730951;
  for (size_t ie = 0; ie < c->gp->n_node; ie++) {
    const Onnx__NodeProto *e = c->gp->node[ie];
    if (strcmp(e->op_type, "Erf") != 0 || e->n_input != 1 || e->n_output != 1)
      continue;
    int64_t id = -1, ia = sole_reader(c, e->output[0]), last = -1, half = -1;
    for (size_t j = 0; j < ie && id < 0; j++)
      if (c->gp->node[j]->n_output >= 1 && strcmp(c->gp->node[j]->output[0], e->input[0]) == 0)
        id = (int64_t)j;
    const char *x = NULL, *one = NULL;
    if (id < 0 || sole_reader(c, e->input[0]) != (int64_t)ie ||
        !(is_op_with(c, id, "Div", root2, &x) || is_op_with(c, id, "Mul", 1 / root2, &x)) ||
        !is_op_with(c, ia, "Add", 1.0, &one) || strcmp(one, e->output[0]) != 0)
      continue;
    const char *a = c->gp->node[ia]->output[0], *h = NULL;
    int64_t im = sole_reader(c, a);
    if (is_mul_of(c, im, x, a) && is_op_with(c, sole_reader(c, c->gp->node[im]->output[0]), "Mul",
                                             0.5, NULL)) { /* (x * a) * 0.5 */
      last = sole_reader(c, c->gp->node[im]->output[0]);
    } else if (is_op_with(c, im, "Mul", 0.5, NULL)) { /* x * (a * 0.5) */
      last = is_mul_of(c, sole_reader(c, c->gp->node[im]->output[0]), x, c->gp->node[im]->output[0])
                 ? sole_reader(c, c->gp->node[im]->output[0])
                 : -1;
    } else if (im >= 0 && strcmp(c->gp->node[im]->op_type, "Mul") == 0) { /* (x * 0.5) * a */
      const Onnx__NodeProto *m = c->gp->node[im];
      h = strcmp(m->input[0], a) == 0 ? m->input[1] : m->input[0];
      for (size_t j = 0; j < c->gp->n_node && half < 0 && sole_reader(c, h) == im; j++)
        if (c->gp->node[j]->n_output >= 1 && strcmp(c->gp->node[j]->output[0], h) == 0)
          half = (int64_t)j;
      const char *hx = NULL;
      last = half >= 0 && is_op_with(c, half, "Mul", 0.5, &hx) && strcmp(hx, x) == 0 ? im : -1;
    }
    if (last < 0)
      continue;
    c->fuse[id].kind = c->fuse[ie].kind = c->fuse[ia].kind = FUSE_SKIP;
    if (im != last)
      c->fuse[im].kind = FUSE_SKIP;
    if (half >= 0)
      c->fuse[half].kind = FUSE_SKIP;
    c->fuse[last] = (struct fuse){.kind = FUSE_GELU, .x = x};
  }
}

/* ---- the graph ------------------------------------------------------------------------------ */

static hap_status note_bad(ctx *c, const Onnx__NodeProto *n) {
  char line[700];
  int len = snprintf(line, sizeof line, "%s: node '%s' (op '%s'): %s\n", c->path,
                     n->name != NULL && n->name[0] ? n->name : n->output[0], n->op_type, c->why);
  char *r = realloc(c->report, c->report_len + (size_t)len + 1);
  if (r == NULL)
    return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  memcpy(r + c->report_len, line, (size_t)len + 1);
  c->report = r;
  c->report_len += (size_t)len;
  c->n_bad++;
  char quoted[80];
  snprintf(quoted, sizeof quoted, "%.70s", n->op_type);
  if (strstr(c->bad_ops, quoted) == NULL) {
    size_t at = strlen(c->bad_ops);
    snprintf(c->bad_ops + at, sizeof c->bad_ops - at, "%s%s", at ? ", " : "", quoted);
  }
  return HAP_OK;
}

static hap_status add_inputs(ctx *c) {
  for (size_t i = 0; i < c->gp->n_input; i++) {
    const Onnx__ValueInfoProto *v = c->gp->input[i];
    if (v->name == NULL || hap_strmap_get(&c->init, v->name) >= 0)
      continue; /* an initializer listed as an input too */
    const Onnx__TypeProto *tp = v->type;
    const Onnx__TypeProto__Tensor *tt =
        tp != NULL && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? tp->tensor_type
                                                                            : NULL;
    hap_dtype dt;
    if (tt == NULL || !tt->has_elem_type || !dtype_of(tt->elem_type, &dt) || tt->shape == NULL ||
        tt->shape->n_dim > HAP_MAX_DIMS)
      return hap_err_set(c->err, HAP_EPARSE,
                         "%s: graph.input[%zu] '%s': expected a float or integer tensor with a "
                         "shape of at most %d dims",
                         c->path, i, v->name, HAP_MAX_DIMS);
    hap_shape s = {.rank = (int32_t)tt->shape->n_dim};
    for (size_t k = 0; k < tt->shape->n_dim; k++) {
      const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[k];
      if (d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
          d->dim_value <= 0)
        return hap_err_set(c->err, HAP_EUNSUPPORTED,
                           "%s: graph.input[%zu] '%s': dim %zu is %s, expected a fixed size "
                           "(export with fixed shapes, without dynamic_axes)",
                           c->path, i, v->name, k,
                           d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                               ? "symbolic"
                               : "not positive");
      s.dims[k] = d->dim_value;
    }
    int32_t id;
    hap_err e = {0};
    if (hap_graph_add_tensor(c->g, v->name, HAP_TENSOR_INPUT, dt, &s, &id, &e) != HAP_OK)
      return hap_err_set(c->err, e.status, "%s: graph.input[%zu]: %s", c->path, i, e.msg);
    if (hap_strmap_put(&c->val, v->name, id) != 0)
      return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  }
  return HAP_OK;
}

/* Every node in file order (torch.onnx.export writes them topologically; a node whose input is
 * not yet known is reported). */
static hap_status add_nodes(ctx *c) {
  for (size_t i = 0; i < c->gp->n_node; i++) {
    const Onnx__NodeProto *n = c->gp->node[i];
    if (n->op_type == NULL || n->n_output == 0 || n->output[0] == NULL)
      return hap_err_set(c->err, HAP_EPARSE, "%s: graph.node[%zu]: no op_type or no output",
                         c->path, i);
    if (strcmp(n->op_type, "Constant") == 0 && (n->domain == NULL || n->domain[0] == '\0') &&
        hap_strmap_put(&c->konst, n->output[0], (int32_t)i) != 0)
      return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  }
  c->fuse = calloc(c->gp->n_node + 1, sizeof *c->fuse);
  if (c->fuse == NULL)
    return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  find_gelus(c);
  for (size_t i = 0; i < c->gp->n_node; i++) {
    const Onnx__NodeProto *n = c->gp->node[i];
    const known_op *k = find_known(n->op_type);
    bool after_bad = false;
    for (size_t j = 0; j < n->n_input && c->fuse[i].kind == FUSE_NONE; j++)
      after_bad = after_bad || hap_strmap_get(&c->val, n->input[j]) == UNKNOWN;
    if (c->fuse[i].kind == FUSE_GELU)
      after_bad = hap_strmap_get(&c->val, c->fuse[i].x) == UNKNOWN;
    c->why[0] = '\0';
    c->cur = i;
    bool ok;
    bool fold_done = false;
    if (c->fuse[i].kind == FUSE_SKIP)
      continue; /* inside a GELU: its last node maps it */
    if (c->fuse[i].kind == FUSE_GELU) {
      int32_t x;
      ok = !after_bad && tensor(c, c->fuse[i].x, &x) && emit(c, n, HAP_OP_GELU, &x, 1, NULL);
      fold_done = ok;
    }
    if (fold_done)
      continue;
    if (c->fuse[i].kind == FUSE_NONE && !after_bad && !try_fold(c, n, &fold_done)) {
      HAP_TRY(note_bad(c, n));
      fold_done = true;
      if (hap_strmap_put(&c->val, n->output[0], UNKNOWN) != 0)
        return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
    }
    if (fold_done)
      continue;
    if (k != NULL && strcmp(n->op_type, "Constant") == 0)
      ok = hap_strmap_put(&c->konst, n->output[0], (int32_t)i) == 0 || fail(c, "out of memory");
    else if (k == NULL && !after_bad && strcmp(n->op_type, "Erf") == 0)
      ok = fail(c, "hap maps Erf only inside GELU written out, x * 0.5 * (1 + erf(x / sqrt(2))) "
                   "(-> gelu)");
    else if ((k != NULL && after_bad) || c->fuse[i].kind == FUSE_GELU)
      ok = false; /* downstream of an unsupported node: not reported again (a GELU whose input
                     failed: c->why says why when it is new) */
    else if (k == NULL || (n->domain != NULL && n->domain[0] != '\0'))
      ok = fail(c, "no hap mapping for this op%s%s", n->domain && n->domain[0] ? " of domain " : "",
                n->domain ? n->domain : "");
    else
      ok = map_node(c, n, k);
    if (ok)
      continue;
    if (c->why[0] != '\0')
      HAP_TRY(note_bad(c, n));
    for (size_t j = 0; j < n->n_output; j++)
      if (hap_strmap_put(&c->val, n->output[j], UNKNOWN) != 0)
        return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  }
  return HAP_OK;
}

hap_status hap_onnx_loss_parse(const char *s, hap_onnx_loss *out) {
  static const char *names[] = {"output", "mean", "sum", "cross_entropy"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = (hap_onnx_loss)i;
      return HAP_OK;
    }
  return HAP_EINVAL;
}

static hap_status add_loss(ctx *c, hap_onnx_loss how) {
  if (c->gp->n_output < 1 || c->gp->output[0]->name == NULL)
    return hap_err_set(c->err, HAP_EPARSE, "%s: graph.output: empty, expected the model's output",
                       c->path);
  const char *name = c->gp->output[0]->name;
  int32_t out = hap_strmap_get(&c->val, name);
  if (out < 0)
    return hap_err_set(c->err, HAP_EPARSE, "%s: graph.output[0] '%s': no node produces it", c->path,
                       name);
  const hap_shape *s = shape_of(c, out);
  hap_err e = {0};
  int32_t loss = out;
  const char *loss_name = "loss";
  if (how == HAP_ONNX_LOSS_OUTPUT && s->rank != 0)
    return hap_err_set(c->err, HAP_EINVAL,
                       "%s: graph.output[0] '%s' has %d dims, not a scalar loss: give --loss "
                       "mean|sum|cross_entropy",
                       c->path, name, (int)s->rank);
  if (how == HAP_ONNX_LOSS_MEAN || how == HAP_ONNX_LOSS_SUM) {
    hap_op op = how == HAP_ONNX_LOSS_MEAN ? HAP_OP_MEAN : HAP_OP_SUM;
    if (hap_graph_add_node(c->g, "loss", op, &out, 1, NULL, &loss_name, &loss, &e) != HAP_OK)
      return hap_err_set(c->err, e.status, "%s: --loss: %s", c->path, e.msg);
  } else if (how == HAP_ONNX_LOSS_CROSS_ENTROPY) {
    if (s->rank < 2)
      return hap_err_set(c->err, HAP_EINVAL,
                         "%s: --loss cross_entropy: output '%s' has %d dims, expected [N, C, ...]",
                         c->path, name, (int)s->rank);
    hap_shape ts = {.rank = s->rank - 1};
    ts.dims[0] = s->dims[0];
    for (int k = 2; k < s->rank; k++)
      ts.dims[k - 1] = s->dims[k];
    int32_t in[2] = {out, -1};
    if (hap_graph_add_tensor(c->g, "target", HAP_TENSOR_INPUT, HAP_I64, &ts, &in[1], &e) !=
            HAP_OK ||
        hap_graph_add_node(c->g, "loss", HAP_OP_CROSS_ENTROPY, in, 2, NULL, &loss_name, &loss,
                           &e) != HAP_OK)
      return hap_err_set(c->err, e.status, "%s: --loss: %s", c->path, e.msg);
  }
  if (hap_graph_set_loss(c->g, loss, &e) != HAP_OK || hap_graph_validate(c->g, &e) != HAP_OK)
    return hap_err_set(c->err, e.status, "%s: %s", c->path, e.msg);
  return HAP_OK;
}

/* Initializer i holds exactly its dims' worth of data (raw or typed; external data is not read). */
static hap_status check_data(ctx *c, size_t i, const Onnx__TensorProto *t, int64_t cnt) {
  int dt = t->has_data_type ? t->data_type : 0;
  size_t esz = dt == T_FLOAT || dt == T_INT32    ? 4
               : dt == T_INT64 || dt == T_DOUBLE ? 8
               : dt == T_FLOAT16 || dt == T_BF16 ? 2
               : dt == T_BOOL                    ? 1
                                                 : 0;
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return hap_err_set(c->err, HAP_EUNSUPPORTED,
                       "%s: graph.initializer[%zu] '%s': data in an external file, expected it "
                       "inside the model",
                       c->path, i, t->name);
  if (esz == 0)
    return hap_err_set(c->err, HAP_EUNSUPPORTED,
                       "%s: graph.initializer[%zu] '%s': data type %d, expected a float, integer "
                       "or bool tensor",
                       c->path, i, t->name, dt);
  size_t have = t->has_raw_data  ? t->raw_data.len
                : dt == T_FLOAT  ? t->n_float_data * esz
                : dt == T_INT64  ? t->n_int64_data * esz
                : dt == T_DOUBLE ? t->n_double_data * esz
                                 : t->n_int32_data * esz; /* int32, bool and 16-bit floats */
  if (dt == T_FLOAT16 || dt == T_BF16 || dt == T_BOOL)
    have = t->has_raw_data ? have : t->n_int32_data * esz;
  if ((uint64_t)cnt > SIZE_MAX / esz || have != (size_t)cnt * esz)
    return hap_err_set(c->err, HAP_EPARSE,
                       "%s: graph.initializer[%zu] '%s': holds %zu bytes of data, its dims say "
                       "%lld elements of %zu bytes",
                       c->path, i, t->name, have, (long long)cnt, esz);
  return HAP_OK;
}

static hap_status build(ctx *c, const hap_onnx_options *o) {
  for (size_t i = 0; i < c->gp->n_initializer; i++) {
    const Onnx__TensorProto *t = c->gp->initializer[i];
    int64_t cnt;
    if (t->name == NULL || t->name[0] == '\0' || !numel_of(t, &cnt))
      return hap_err_set(c->err, HAP_EPARSE,
                         "%s: graph.initializer[%zu]: expected a name and non-negative dims",
                         c->path, i);
    HAP_TRY(check_data(c, i, t, cnt));
    if (hap_strmap_put(&c->init, t->name, (int32_t)i) != 0)
      return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  }
  HAP_TRY(add_inputs(c));
  HAP_TRY(add_nodes(c));
  if (c->n_bad > 0)
    return hap_err_set(c->err, HAP_EUNSUPPORTED, "%s: %d unsupported node%s, nothing written: %s",
                       c->path, c->n_bad, c->n_bad > 1 ? "s" : "", c->bad_ops);
  return add_loss(c, o->loss);
}

/* Initializer t's numbers as hap dtype dt (float32 from FLOAT, int64 from INT64, int32 from
 * INT32; check_data vouched for the sizes); NULL for other types. */
static void *initializer_data(const Onnx__TensorProto *t, hap_dtype dt, int64_t n) {
  int type = t->has_data_type ? t->data_type : 0;
  bool ok = (dt == HAP_F32 && type == T_FLOAT) || (dt == HAP_I64 && type == T_INT64) ||
            (dt == HAP_I32 && type == T_INT32);
  size_t bytes = (size_t)n * (size_t)hap_dtype_size(dt);
  void *v = ok ? malloc(bytes + 1) : NULL;
  if (v == NULL)
    return NULL;
  if (t->has_raw_data)
    memcpy(v, t->raw_data.data, bytes);
  else if (type == T_FLOAT)
    memcpy(v, t->float_data, bytes);
  else if (type == T_INT64)
    memcpy(v, t->int64_data, bytes);
  else
    memcpy(v, t->int32_data, bytes);
  return v;
}

/* values[t] for every parameter and buffer t whose numbers the file holds or the import made. */
static hap_status collect_values(ctx *c, void ***values) {
  void **v = calloc((size_t)c->g->n_tensors + 1, sizeof *v);
  if (v == NULL)
    return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory", c->path);
  for (int32_t i = 0; i < c->n_made; i++) {
    v[c->made[i].tensor] = c->made[i].data;
    c->made[i].data = NULL;
  }
  for (int32_t t = 0; t < c->g->n_tensors; t++) {
    const hap_tensor *tn = &c->g->tensors[t];
    int32_t i = hap_strmap_get(&c->init, tn->name);
    int64_t n;
    if (v[t] != NULL || i < 0 || tn->kind == HAP_TENSOR_ACTIVATION ||
        tn->kind == HAP_TENSOR_INPUT || !numel_of(c->gp->initializer[i], &n))
      continue;
    v[t] = initializer_data(c->gp->initializer[i], tn->dtype, n);
  }
  *values = v;
  return HAP_OK;
}

void hap_onnx_values_free(void **values, const hap_graph *g) {
  for (int32_t t = 0; values != NULL && g != NULL && t < g->n_tensors; t++)
    free(values[t]);
  free(values);
}

hap_status hap_onnx_parse(const char *path, const uint8_t *data, size_t len,
                          const hap_onnx_options *o, hap_graph **out, void ***values, char **report,
                          hap_err *err) {
  *out = NULL;
  if (values != NULL)
    *values = NULL;
  if (report != NULL)
    *report = NULL;
  hap_onnx_options def = {0};
  o = o != NULL ? o : &def;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, data);
  if (m == NULL || m->graph == NULL) {
    if (m != NULL)
      onnx__model_proto__free_unpacked(m, NULL);
    return hap_err_set(err, HAP_EPARSE,
                       "%s: not an ONNX model (the bytes do not decode as a ModelProto with a "
                       "graph)",
                       path);
  }
  const char *name = o->name                               ? o->name
                     : m->graph->name && m->graph->name[0] ? m->graph->name
                                                           : "onnx";
  ctx c = {
      .path = path, .err = err, .gp = m->graph, .g = hap_graph_create(name), .buffers = o->buffers};
  hap_strmap_init(&c.val);
  hap_strmap_init(&c.init);
  hap_strmap_init(&c.konst);
  hap_strmap_init(&c.folded);
  char source[300];
  snprintf(source, sizeof source, "hap-model import %s", path);
  hap_status st = c.g != NULL ? hap_graph_set_source(c.g, source)
                              : hap_err_set(err, HAP_ENOMEM, "%s: out of memory", path);
  hap_strmap_init(&c.expand);
  if (st == HAP_OK)
    st = build(&c, o);
  if (st == HAP_OK && values != NULL)
    st = collect_values(&c, values);
  hap_strmap_free(&c.val);
  hap_strmap_free(&c.init);
  hap_strmap_free(&c.konst);
  hap_strmap_free(&c.folded);
  hap_strmap_free(&c.expand);
  for (int32_t i = 0; i < c.n_fv; i++)
    free(c.fv[i].v);
  free(c.fv);
  for (int32_t i = 0; i < c.n_made; i++)
    free(c.made[i].data);
  free(c.made);
  free(c.fuse);
  onnx__model_proto__free_unpacked(m, NULL);
  if (report != NULL && st == HAP_EUNSUPPORTED) { /* a malformed part reported alone */
    *report = c.report;
    c.report = NULL;
  }
  free(c.report);
  if (st != HAP_OK) {
    hap_graph_destroy(c.g);
    return st;
  }
  *out = c.g;
  return HAP_OK;
}

hap_status hap_onnx_import(const char *path, const hap_onnx_options *o, hap_graph **out,
                           void ***values, char **report, hap_err *err) {
  char *data = NULL;
  size_t len = 0;
  *out = NULL;
  if (report != NULL)
    *report = NULL;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_status st = hap_onnx_parse(path, (const uint8_t *)data, len, o, out, values, report, err);
  free(data);
  return st;
}
