/* init.c — deterministic initial values of parameters, buffers and inputs (init.h).
 *
 * Generator: every element is a pure function of (seed, tensor name, global row-major index):
 *   key = mix(seed ^ mix(fnv1a(name)))      one key per tensor
 *   r   = mix(key ^ mix(index))             one 64-bit draw per element
 *   u   = (r >> 11) * 2^-53                 uniform in [0, 1)
 * where mix is SplitMix64's finaliser (golden-ratio increment, two xor-shift-multiply rounds). No
 * sequential state, so any box of any tensor is filled independently of every other.
 *
 * Rules. The rule of a tensor comes from its kind and the first consumer (in node order) that
 * defines one; "a" is the bound of a uniform [-a, a], a = 1 / sqrt(fan_in):
 *   parameters
 *     linear        weight [N, K]: fan_in K; bias [N]: the weight's a
 *     conv2d        weight [O, C, kh, kw]: fan_in C*kh*kw; bias [O]: the weight's a
 *     matmul, bmm   operand a [..., M, K]: fan_in K; operand b [..., K, N]: fan_in K
 *     einsum        fan_in = product of the extents of the operand's indices absent from the
 *                   output (the contracted ones; 1 when none): MoE w1 [E,D,F] D, w2 [E,F,D] F
 *     multi_head_attention  in_proj_weight [3, P, E]: fan_in E; in_proj_bias: that a;
 *                   out_proj_weight [E, P]: fan_in P; out_proj_bias: that a
 *     top2_gating   gate_weight [D, E]: fan_in D
 *     embedding     weight: uniform [-1, 1]
 *     layer_norm    weight 1, bias 0
 *     cls_append    class token: uniform [-0.02, 0.02]
 *     mul, div      a parameter factor (a primitive layer norm's scale): 1
 *     add, sub      a parameter term added to a GEMM's output (linear, matmul, bmm, einsum,
 *                   conv2d) is that GEMM's bias: the a of the GEMM's parameter operand; added to
 *                   the output of a mul by a parameter (a primitive layer norm's shift): 0;
 *                   otherwise a learned position embedding: uniform [-0.02, 0.02]
 *     layout ops (transpose, reshape, ...) define nothing: the next consumer decides
 *     no rule found: a = 1 / sqrt(last dim) (1 for a scalar)
 *   buffers (the zoo's two, recognised by name, or by use for the mask)
 *     causal mask   name "mask" or ending in "mask", or the mask input of multi_head_attention:
 *                   over the last two dims [L, S], 0 where s <= l and -inf where s > l (the
 *                   zoo's square causal mask, PyTorch's generate_square_subsequent_mask)
 *     sinusoidal    last name component "pe", or a name containing "pos_enc": over the last two
 *                   dims [S, D], position p = index along dim -2, feature j along dim -1:
 *                   sin(p * w) for even j and cos(p * w) for odd j, w = 10000^-(j - j % 2) / D
 *                   (PyTorch's PositionalEncoding, as the zoo's bert-base / bert-moe use it)
 *     any other buffer: uniform [-1, 1]
 *   inputs
 *     float32       uniform [-1, 1]
 *     int64, int32  uniform integers in [0, range): range is the smallest of the consumers'
 *                   (embedding indices: rows of the weight; nll_loss / cross_entropy targets:
 *                   the class dim 1 of the scores), looking through layout ops (reshape,
 *                   flatten, transpose, permute, narrow, cls_select) to their consumers. No such
 *                   consumer: HAP_EUNSUPPORTED. */
#include "run/init.h"

#include <math.h>
#include <string.h>

/* ---- generator ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 0x100000001B3ULL;
  }
  return h;
}

/* Uniform in [0, 1) for element `index` of the tensor with key `key`. */
static double unit_at(uint64_t key, int64_t index) {
  uint64_t r = mix64(key ^ mix64((uint64_t)index));
  return (double)(r >> 11) * 0x1.0p-53;
}

/* ---- rules ---------------------------------------------------------------------------------- */

typedef enum rule_kind {
  RULE_UNIFORM,  /* uniform [-a, a] */
  RULE_CONST,    /* every element c */
  RULE_CAUSAL,   /* 0 on and below the diagonal of the last two dims, -inf above */
  RULE_SINUSOID, /* sinusoidal position encoding over the last two dims */
  RULE_INTEGER   /* uniform integers in [0, range) */
} rule_kind;

typedef struct rule {
  rule_kind kind;
  double a;      /* UNIFORM: bound; CONST: the value */
  int64_t range; /* INTEGER */
} rule;

static rule uniform_fan_in(double fan_in) {
  return (rule){.kind = RULE_UNIFORM, .a = 1.0 / sqrt(fan_in > 0 ? fan_in : 1.0)};
}

static int64_t last_dim(const hap_shape *s, int from_end) {
  return s->rank >= from_end ? s->dims[s->rank - from_end] : 1;
}

static bool is_gemm(hap_op op) {
  return op == HAP_OP_LINEAR || op == HAP_OP_MATMUL || op == HAP_OP_BMM || op == HAP_OP_EINSUM ||
         op == HAP_OP_CONV2D;
}

static bool is_layout(hap_op op) {
  return op == HAP_OP_RESHAPE || op == HAP_OP_FLATTEN || op == HAP_OP_TRANSPOSE ||
         op == HAP_OP_PERMUTE || op == HAP_OP_NARROW || op == HAP_OP_CLS_SELECT;
}

static const hap_shape *in_shape(const hap_graph *g, const hap_node *n, int i) {
  return &g->tensors[n->inputs[i]].shape;
}

/* Fan-in of einsum operand i: the product of the extents of its indices absent from the output. */
static double einsum_fan_in(const hap_graph *g, const hap_node *n, int i) {
  int idx = hap_op_attr_index(HAP_OP_EINSUM, "equation");
  const char *eq = idx >= 0 ? hap_attr_s(&n->attrs, idx) : "";
  const char *arrow = strstr(eq, "->");
  const char *comma = strchr(eq, ',');
  if (!arrow || !comma || comma > arrow)
    return 1;
  const char *op = i == 0 ? eq : comma + 1;
  const char *op_end = i == 0 ? comma : arrow;
  const char *outs = arrow + 2;
  const hap_shape *s = in_shape(g, n, i);
  double fan_in = 1;
  for (int k = 0; op + k < op_end && k < s->rank; k++)
    if (!strchr(outs, op[k]))
      fan_in *= (double)s->dims[k];
  return fan_in;
}

/* The rule a GEMM-like node gives its parameter operand i (weight or bias); false if none. */
static bool gemm_rule(const hap_graph *g, const hap_node *n, int i, rule *r) {
  switch (n->op) {
  case HAP_OP_LINEAR: /* weight [N, K], bias [N] */
    if (i == 1 || i == 2) {
      *r = uniform_fan_in((double)last_dim(in_shape(g, n, 1), 1));
      return true;
    }
    return false;
  case HAP_OP_CONV2D: /* weight [O, C, kh, kw], bias [O] */
    if (i == 1 || i == 2) {
      const hap_shape *w = in_shape(g, n, 1);
      *r = uniform_fan_in(w->rank == 4 ? (double)(w->dims[1] * w->dims[2] * w->dims[3]) : 1.0);
      return true;
    }
    return false;
  case HAP_OP_MATMUL:
  case HAP_OP_BMM:
    if (i == 0 || i == 1) {
      *r = uniform_fan_in((double)last_dim(in_shape(g, n, i), i == 0 ? 1 : 2));
      return true;
    }
    return false;
  case HAP_OP_EINSUM:
    if (i == 0 || i == 1) {
      *r = uniform_fan_in(einsum_fan_in(g, n, i));
      return true;
    }
    return false;
  default: return false;
  }
}

/* The bias rule of a GEMM node: the rule of its (first) parameter operand. */
static bool gemm_bias_rule(const hap_graph *g, const hap_node *n, rule *r) {
  for (int j = 0; j < n->n_inputs; j++)
    if (g->tensors[n->inputs[j]].kind == HAP_TENSOR_PARAMETER && gemm_rule(g, n, j, r))
      return true;
  return gemm_rule(g, n, n->op == HAP_OP_LINEAR || n->op == HAP_OP_CONV2D ? 1 : 0, r);
}

static bool has_param_input(const hap_graph *g, const hap_node *n) {
  for (int j = 0; j < n->n_inputs; j++)
    if (g->tensors[n->inputs[j]].kind == HAP_TENSOR_PARAMETER)
      return true;
  return false;
}

/* The rule node n gives the parameter at its input i; false when n defines none. */
static bool param_rule_of_use(const hap_graph *g, const hap_node *n, int i, rule *r) {
  if (gemm_rule(g, n, i, r))
    return true;
  switch (n->op) {
  case HAP_OP_MULTI_HEAD_ATTENTION:
    if (i == 3 || i == 4) { /* in_proj [3, P, E] */
      *r = uniform_fan_in((double)last_dim(in_shape(g, n, 3), 1));
      return true;
    }
    if (i == 5 || i == 6) { /* out_proj [E, P] */
      *r = uniform_fan_in((double)last_dim(in_shape(g, n, 5), 1));
      return true;
    }
    return false;
  case HAP_OP_TOP2_GATING: /* gate [D, E] */
    if (i == 1) {
      *r = uniform_fan_in((double)last_dim(in_shape(g, n, 1), 2));
      return true;
    }
    return false;
  case HAP_OP_EMBEDDING:
    if (i == 1) {
      *r = (rule){.kind = RULE_UNIFORM, .a = 1.0};
      return true;
    }
    return false;
  case HAP_OP_LAYER_NORM:
    if (i == 1 || i == 2) {
      *r = (rule){.kind = RULE_CONST, .a = i == 1 ? 1.0 : 0.0};
      return true;
    }
    return false;
  case HAP_OP_CLS_APPEND:
    if (i == 1) {
      *r = (rule){.kind = RULE_UNIFORM, .a = 0.02};
      return true;
    }
    return false;
  case HAP_OP_MUL:
  case HAP_OP_DIV: *r = (rule){.kind = RULE_CONST, .a = 1.0}; return true;
  case HAP_OP_ADD:
  case HAP_OP_SUB: {
    if (n->n_inputs < 2) {
      *r = (rule){.kind = RULE_UNIFORM, .a = 0.02};
      return true;
    }
    int32_t other = n->inputs[1 - i];
    int32_t p = g->tensors[other].producer;
    if (p >= 0 && is_gemm(g->nodes[p].op) && gemm_bias_rule(g, &g->nodes[p], r))
      return true;
    if (p >= 0 && (g->nodes[p].op == HAP_OP_MUL || g->nodes[p].op == HAP_OP_DIV) &&
        has_param_input(g, &g->nodes[p])) {
      *r = (rule){.kind = RULE_CONST, .a = 0.0};
      return true;
    }
    *r = (rule){.kind = RULE_UNIFORM, .a = 0.02};
    return true;
  }
  default: return false;
  }
}

static rule param_rule(const hap_graph *g, int32_t t) {
  rule r;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] == t && param_rule_of_use(g, node, i, &r))
        return r;
  }
  return uniform_fan_in((double)last_dim(&g->tensors[t].shape, 1));
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static rule buffer_rule(const hap_graph *g, int32_t t) {
  const char *name = g->tensors[t].name;
  const char *dot = strrchr(name, '.');
  const char *last = dot ? dot + 1 : name;
  if (ends_with(name, "mask"))
    return (rule){.kind = RULE_CAUSAL};
  if (strcmp(last, "pe") == 0 || strstr(name, "pos_enc"))
    return (rule){.kind = RULE_SINUSOID};
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    if (node->op == HAP_OP_MULTI_HEAD_ATTENTION && node->n_inputs > 7 && node->inputs[7] == t)
      return (rule){.kind = RULE_CAUSAL};
  }
  return (rule){.kind = RULE_UNIFORM, .a = 1.0};
}

/* Smallest index range the consumers of tensor t (and of layout ops over it) accept; 0 if none
 * gives one. `depth` bounds the walk through layout chains. */
static int64_t index_range(const hap_graph *g, int32_t t, int depth) {
  int64_t best = 0;
  if (depth > 64)
    return 0;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++) {
      if (node->inputs[i] != t)
        continue;
      int64_t r = 0;
      if (node->op == HAP_OP_EMBEDDING && i == 0)
        r = in_shape(g, node, 1)->dims[0];
      else if ((node->op == HAP_OP_NLL_LOSS || node->op == HAP_OP_CROSS_ENTROPY) && i == 1)
        r = in_shape(g, node, 0)->dims[1];
      else if (is_layout(node->op) && i == 0)
        r = index_range(g, node->outputs[0], depth + 1);
      if (r > 0 && (best == 0 || r < best))
        best = r;
    }
  }
  return best;
}

/* ---- filling -------------------------------------------------------------------------------- */

/* Value of a float rule at global index gi with position (l, s) in the last two dims. */
static double float_at(const rule *r, uint64_t key, int64_t gi, int64_t l, int64_t s,
                       int64_t width) {
  switch (r->kind) {
  case RULE_UNIFORM: return r->a * (2.0 * unit_at(key, gi) - 1.0);
  case RULE_CONST: return r->a;
  case RULE_CAUSAL: return s > l ? -INFINITY : 0.0;
  case RULE_SINUSOID: {
    double w = exp(-(double)(s - s % 2) * log(10000.0) / (double)width);
    return s % 2 == 0 ? sin((double)l * w) : cos((double)l * w);
  }
  case RULE_INTEGER: break;
  }
  return 0.0;
}

static int64_t int_at(const rule *r, uint64_t key, int64_t gi) {
  int64_t v = (int64_t)(unit_at(key, gi) * (double)r->range);
  return v < r->range ? v : r->range - 1;
}

/* ---- given values (hap_init_set_values) ------------------------------------------------------ */

static const hap_init_value *given;
static int32_t n_given;

void hap_init_set_values(const hap_init_value *values, int32_t n) {
  given = n > 0 ? values : NULL;
  n_given = n > 0 ? n : 0;
}

/* Box b of the given whole tensor v (checked against tn) into out. */
static hap_status fill_given(const hap_tensor *tn, const hap_init_value *v, const hap_box *b,
                             void *out, hap_err *err) {
  bool same = v->dtype == tn->dtype && v->shape.rank == tn->shape.rank;
  for (int k = 0; same && k < tn->shape.rank; k++)
    same = v->shape.dims[k] == tn->shape.dims[k];
  if (!same)
    return hap_err_set(err, HAP_EINVAL,
                       "init: the given values of %s '%s' differ from the graph's in dtype or "
                       "shape (%s, rank %d; expected %s, rank %d)",
                       hap_tensor_kind_name(tn->kind), tn->name, hap_dtype_name(v->dtype),
                       (int)v->shape.rank, hap_dtype_name(tn->dtype), (int)tn->shape.rank);
  int n = tn->shape.rank;
  size_t esz = (size_t)hap_dtype_size(tn->dtype);
  int64_t stride[HAP_MAX_DIMS], idx[HAP_MAX_DIMS], acc = 1;
  for (int k = n - 1; k >= 0; k--) {
    stride[k] = acc;
    acc *= tn->shape.dims[k];
  }
  if (n == 0) {
    memcpy(out, v->data, esz);
    return HAP_OK;
  }
  for (int k = 0; k < n; k++)
    idx[k] = b->lo[k];
  int64_t row = b->hi[n - 1] - b->lo[n - 1];
  char *dst = out;
  for (;;) {
    int64_t gi = 0;
    for (int k = 0; k < n; k++)
      gi += idx[k] * stride[k];
    memcpy(dst, (const char *)v->data + (size_t)gi * esz, (size_t)row * esz);
    dst += (size_t)row * esz;
    int k = n - 2;
    while (k >= 0) {
      if (++idx[k] < b->hi[k])
        break;
      idx[k] = b->lo[k];
      k--;
    }
    if (k < 0)
      break;
  }
  return HAP_OK;
}

hap_status hap_init_fill(const hap_graph *g, int32_t t, uint64_t seed, const hap_box *b, void *out,
                         hap_err *err) {
  if (!g || t < 0 || t >= g->n_tensors)
    return hap_err_set(err, HAP_EINVAL, "init: tensor id %d out of range", (int)t);
  const hap_tensor *tn = &g->tensors[t];
  const hap_shape *s = &tn->shape;
  if (tn->kind == HAP_TENSOR_ACTIVATION)
    return hap_err_set(err, HAP_EINVAL,
                       "init: tensor '%s' is an activation, expected a parameter, buffer or input",
                       tn->name);
  if (b->rank != s->rank)
    return hap_err_set(err, HAP_EINVAL, "init: box of tensor '%s' has rank %d, expected %d",
                       tn->name, (int)b->rank, (int)s->rank);
  for (int k = 0; k < s->rank; k++)
    if (b->lo[k] < 0 || b->hi[k] < b->lo[k] || b->hi[k] > s->dims[k])
      return hap_err_set(err, HAP_EINVAL,
                         "init: box of tensor '%s' is [%lld, %lld) in dim %d, expected within "
                         "[0, %lld)",
                         tn->name, (long long)b->lo[k], (long long)b->hi[k], k,
                         (long long)s->dims[k]);
  bool is_int = tn->dtype == HAP_I64 || tn->dtype == HAP_I32;
  if (tn->dtype != HAP_F32 && !(is_int && tn->kind == HAP_TENSOR_INPUT))
    return hap_err_set(err, HAP_EUNSUPPORTED, "init: %s '%s' is %s, expected float32%s",
                       hap_tensor_kind_name(tn->kind), tn->name, hap_dtype_name(tn->dtype),
                       tn->kind == HAP_TENSOR_INPUT ? ", int64 or int32" : "");

  if (hap_box_numel(b) > 0)
    for (int32_t i = 0; i < n_given; i++)
      if (strcmp(given[i].name, tn->name) == 0)
        return fill_given(tn, &given[i], b, out, err);

  rule r;
  if (tn->kind == HAP_TENSOR_PARAMETER) {
    r = param_rule(g, t);
  } else if (tn->kind == HAP_TENSOR_BUFFER) {
    r = buffer_rule(g, t);
    if ((r.kind == RULE_CAUSAL || r.kind == RULE_SINUSOID) && s->rank < 2)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "init: buffer '%s' (a %s) has rank %d, expected at least 2", tn->name,
                         r.kind == RULE_CAUSAL ? "causal mask" : "position encoding", (int)s->rank);
  } else if (is_int) {
    r = (rule){.kind = RULE_INTEGER, .range = index_range(g, t, 0)};
    if (r.range <= 0)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "init: input '%s' (%s) has no consumer that gives its range (expected "
                         "embedding indices or a loss target)",
                         tn->name, hap_dtype_name(tn->dtype));
  } else {
    r = (rule){.kind = RULE_UNIFORM, .a = 1.0};
  }

  int64_t n_el = hap_box_numel(b);
  if (n_el == 0)
    return HAP_OK;
  uint64_t key = mix64(seed ^ mix64(fnv1a(tn->name)));
  int n = s->rank;
  int64_t stride[HAP_MAX_DIMS]; /* row-major strides of the full tensor, elements */
  int64_t acc = 1;
  for (int k = n - 1; k >= 0; k--) {
    stride[k] = acc;
    acc *= s->dims[k];
  }
  int64_t idx[HAP_MAX_DIMS];
  for (int k = 0; k < n; k++)
    idx[k] = b->lo[k];
  int64_t row = n > 0 ? b->hi[n - 1] - b->lo[n - 1] : 1;
  int64_t width = n > 0 ? s->dims[n - 1] : 1;
  int64_t pos = 0; /* elements written */
  for (;;) {
    int64_t gi = 0;
    for (int k = 0; k < n - 1; k++)
      gi += idx[k] * stride[k];
    int64_t s0 = n > 0 ? idx[n - 1] : 0;
    int64_t l = n >= 2 ? idx[n - 2] : 0;
    gi += s0;
    for (int64_t j = 0; j < row; j++, pos++) {
      if (r.kind == RULE_INTEGER) {
        int64_t v = int_at(&r, key, gi + j);
        if (tn->dtype == HAP_I64)
          ((int64_t *)out)[pos] = v;
        else
          ((int32_t *)out)[pos] = (int32_t)v;
      } else {
        ((float *)out)[pos] = (float)float_at(&r, key, gi + j, l, s0 + j, width);
      }
    }
    int k = n - 2;
    while (k >= 0) {
      if (++idx[k] < b->hi[k])
        break;
      idx[k] = b->lo[k];
      k--;
    }
    if (k < 0)
      break;
  }
  return HAP_OK;
}
