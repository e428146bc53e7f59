/* zoo.c — the model zoo: registry, model specs ("name:key=value,..."), loading a spec or a
 * hap-graph file, and the private graph builder (zoo_internal.h) the models are written with.
 * The models themselves live in zoo_text.c (mlp, bert-base, bert-moe, gpt) and zoo_vision.c
 * (vit, vgg19). */
#include "model/zoo.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json_write.h"
#include "base/spec.h"
#include "model/graph_io.h"
#include "zoo_internal.h"

/* ---- registry ------------------------------------------------------------------------------ */

static const hap_model_def *const zoo[] = {
    &hap_zoo_mlp, &hap_zoo_bert_base, &hap_zoo_vit, &hap_zoo_bert_moe, &hap_zoo_vgg19, &hap_zoo_gpt,
};
enum { ZOO_COUNT = (int)(sizeof zoo / sizeof zoo[0]) };

int hap_zoo_count(void) { return ZOO_COUNT; }

const hap_model_def *hap_zoo_get(int i) { return i >= 0 && i < ZOO_COUNT ? zoo[i] : NULL; }

/* Look a model up by a name that is not NUL-terminated. */
static const hap_model_def *find_model(const char *name, size_t len) {
  for (int i = 0; i < ZOO_COUNT; i++)
    if (strlen(zoo[i]->name) == len && strncmp(zoo[i]->name, name, len) == 0)
      return zoo[i];
  return NULL;
}

const hap_model_def *hap_zoo_find(const char *name) {
  return name ? find_model(name, strlen(name)) : NULL;
}

/* ---- spec parsing -------------------------------------------------------------------------- */

/* Largest integer option: keeps products of two options inside int64 in the builders. */
#define MOPT_INT_MAX 2147483647LL

/* "a, b, c" of the zoo's model names or of a model's options, into buf. */
static const char *list_models(char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < ZOO_COUNT && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", zoo[i]->name);
  return buf;
}

static const char *list_options(const hap_model_def *def, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < def->n_opts && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", def->opts[i].name);
  return buf;
}

/* The i-th entry of a comma-separated choice list as (pointer, length); false past the end. */
static bool choice_at(const char *choices, int i, const char **s, size_t *n) {
  const char *p = choices;
  for (int k = 0; k < i; k++) {
    p = strchr(p, ',');
    if (p == NULL)
      return false;
    p++;
  }
  *s = p;
  *n = strcspn(p, ",");
  return true;
}

/* Positive decimal integer up to MOPT_INT_MAX, digits only. */
static bool parse_int(const char *s, size_t n, double *out) {
  long long v = 0;
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (s[i] - '0');
    if (v > MOPT_INT_MAX)
      return false;
  }
  if (v <= 0)
    return false;
  *out = (double)v;
  return true;
}

static bool parse_choice(const char *choices, const char *s, size_t n, double *out) {
  const char *c;
  size_t cn;
  for (int i = 0; choice_at(choices, i, &c, &cn); i++) {
    if (cn == n && strncmp(c, s, n) == 0) {
      *out = i;
      return true;
    }
  }
  return false;
}

static hap_status bad_value(const hap_model_def *def, const hap_model_opt *o, const char *v,
                            size_t vn, hap_err *err) {
  const char *want = "a positive integer (at most 2147483647)";
  char choices[256];
  if (o->type == HAP_MOPT_FLOAT)
    want = "a finite number";
  else if (o->type == HAP_MOPT_CHOICE) {
    snprintf(choices, sizeof choices, "one of %s", o->choices);
    want = choices;
  }
  return hap_err_set(err, HAP_EINVAL, "model '%s': option '%s' is '%.*s', expected %s", def->name,
                     o->name, (int)vn, v, want);
}

/* Set option `key` to `value` in args. */
static hap_status parse_option(const hap_model_def *def, const char *key, const char *value,
                               hap_model_args *args, hap_err *err) {
  size_t vn = strlen(value);
  int k = 0;
  while (k < def->n_opts && strcmp(def->opts[k].name, key) != 0)
    k++;
  if (k == def->n_opts) {
    char names[512];
    return hap_err_set(err, HAP_ENOTFOUND, "model '%s' has no option '%s'; its options are: %s",
                       def->name, key, list_options(def, names, sizeof names));
  }
  const hap_model_opt *o = &def->opts[k];
  if (args->given & (1u << k))
    return hap_err_set(err, HAP_EINVAL, "model '%s': option '%s' is given twice", def->name,
                       o->name);
  bool ok = o->type == HAP_MOPT_INT     ? parse_int(value, vn, &args->v[k])
            : o->type == HAP_MOPT_FLOAT ? hap_spec_number(value, vn, &args->v[k])
                                        : parse_choice(o->choices, value, vn, &args->v[k]);
  if (!ok)
    return bad_value(def, o, value, vn, err);
  args->given |= 1u << k;
  return HAP_OK;
}

/* The options of `s` (a parse of `spec` naming model d) into args, checked in the order written:
 * an item's grammar fault (spec.h) is reported after the errors of the items before it. */
static hap_status parse_options(const char *spec, const hap_model_def *d, const hap_spec *s,
                                hap_model_args *args, hap_err *err) {
  memset(args, 0, sizeof *args);
  for (int k = 0; k < d->n_opts; k++)
    args->v[k] = d->opts[k].def;
  for (int i = 0; i < s->n; i++)
    HAP_TRY(parse_option(d, s->items[i].key, s->items[i].value, args, err));
  if (s->fault == HAP_SPEC_EMPTY_ITEM)
    return hap_err_set(err, HAP_EINVAL,
                       "model '%s': empty option in '%s', expected key=value[,key=value...]",
                       d->name, spec);
  if (s->fault == HAP_SPEC_NOT_KEY_VALUE)
    return hap_err_set(err, HAP_EINVAL, "model '%s': option '%s' is not of the form key=value",
                       d->name, s->bad);
  return HAP_OK;
}

hap_status hap_model_parse_spec(const char *spec, const hap_model_def **def, hap_model_args *args,
                                hap_err *err) {
  char names[256];
  if (spec == NULL || spec[0] == '\0')
    return hap_err_set(err, HAP_EINVAL, "empty model spec; the zoo has: %s",
                       list_models(names, sizeof names));
  hap_spec s;
  hap_status st = hap_spec_parse(spec, HAP_SPEC_PLAIN_NAME, &s, NULL);
  const hap_model_def *d = hap_zoo_find(s.name);
  if (st == HAP_ENOMEM)
    st = hap_err_set(err, HAP_ENOMEM, "out of memory reading the model spec '%s'", spec);
  else if (d == NULL)
    st = hap_err_set(err, HAP_ENOTFOUND, "unknown model '%s'; the zoo has: %s", s.name,
                     list_models(names, sizeof names));
  else
    st = parse_options(spec, d, &s, args, err);
  hap_spec_free(&s);
  if (st == HAP_OK)
    *def = d;
  return st;
}

hap_status hap_model_format_spec(const hap_model_def *def, const hap_model_args *args, char *buf,
                                 size_t len) {
  size_t off = (size_t)snprintf(buf, len, "%s", def->name);
  for (int k = 0; k < def->n_opts && off < len; k++) {
    const hap_model_opt *o = &def->opts[k];
    char num[40];
    const char *s = num;
    size_t sn;
    if (o->type == HAP_MOPT_CHOICE) {
      if (!choice_at(o->choices, (int)args->v[k], &s, &sn))
        return HAP_EINVAL;
    } else {
      hap_format_double(args->v[k], num, sizeof num);
      sn = strlen(num);
    }
    off += (size_t)snprintf(buf + off, len - off, "%c%s=%.*s", k ? ',' : ':', o->name, (int)sn, s);
  }
  return off < len ? HAP_OK : HAP_EINVAL;
}

hap_status hap_zoo_build(const char *spec, hap_graph **out, hap_err *err) {
  const hap_model_def *def = NULL;
  hap_model_args args;
  *out = NULL;
  hap_status st = hap_model_parse_spec(spec, &def, &args, err);
  if (st != HAP_OK || def == NULL)
    return st != HAP_OK ? st : HAP_EINVAL;
  hap_graph *g = hap_graph_create(def->name);
  if (g == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory building '%s'", def->name);
  st = def->build(g, &args, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "model '%s'", spec);
    hap_graph_destroy(g);
    return st;
  }
  *out = g;
  return HAP_OK;
}

static bool is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

hap_status hap_model_load(const char *spec, hap_graph **out, hap_err *err) {
  *out = NULL;
  if (spec != NULL && spec[0] != '\0' &&
      (strchr(spec, '/') != NULL || ends_with(spec, ".json") || is_file(spec)))
    return hap_graph_read_file(spec, out, err);
  return hap_zoo_build(spec, out, err);
}

/* ---- builder: state and errors ------------------------------------------------------------- */

hap_shape zb_shape_of(int32_t rank, const int64_t *dims) {
  hap_shape s = {.rank = rank};
  for (int32_t i = 0; i < rank && i < HAP_MAX_DIMS; i++)
    s.dims[i] = dims[i];
  return s;
}

void zb_init(zb *b, hap_graph *g, hap_err *err) {
  memset(b, 0, sizeof *b);
  b->g = g;
  b->err = err;
  b->st = HAP_OK;
}

void zb_scope(zb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->scope, sizeof b->scope, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof b->scope)
    zb_fail(b, HAP_EINVAL, "name scope '%s...' is too long", b->scope);
}

void zb_top(zb *b) { b->scope[0] = '\0'; }

static hap_status vfail(zb *b, hap_status st, const char *fmt, va_list ap) {
  if (b->st != HAP_OK)
    return b->st;
  char msg[sizeof b->err->msg];
  vsnprintf(msg, sizeof msg, fmt, ap);
  b->st = hap_err_set(b->err, st, "%s", msg);
  return b->st;
}

hap_status zb_fail(zb *b, hap_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(b, st, fmt, ap);
  va_end(ap);
  return b->st;
}

void zb_require(zb *b, bool ok, const char *fmt, ...) {
  if (ok)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfail(b, HAP_EINVAL, fmt, ap);
  va_end(ap);
}

void zb_require_prob(zb *b, const char *option, double p) {
  zb_require(b, p >= 0 && p < 1, "option '%s' is %g, expected a probability 0 <= p < 1", option, p);
}

void zb_require_divides(zb *b, const char *divisor, int64_t d, const char *option, int64_t v) {
  zb_require(b, d > 0 && v % d == 0, "option '%s' (%lld) must be a multiple of option '%s' (%lld)",
             option, (long long)v, divisor, (long long)d);
}

void zb_require_layers(zb *b, int64_t layers) {
  zb_require(b, layers <= ZB_MAX_LAYERS, "option 'layers' is %lld, expected at most %d",
             (long long)layers, ZB_MAX_LAYERS);
}

void zb_segment(zb *b, bool on) {
  if (on && b->st == HAP_OK)
    hap_graph_begin_segment(b->g);
}

const hap_shape *zb_shape(const zb *b, int32_t t) {
  static const hap_shape none = {0};
  return (b->st == HAP_OK && t >= 0 && t < b->g->n_tensors) ? &b->g->tensors[t].shape : &none;
}

/* Full name "<scope>.<name><suffix>" into buf (suffix may be ""); false (and an error) if long. */
static bool full_name(zb *b, char *buf, const char *name, const char *suffix) {
  int n = snprintf(buf, ZB_NAME_MAX, "%s%s%s%s", b->scope, b->scope[0] ? "." : "", name, suffix);
  if (n < 0 || n >= ZB_NAME_MAX) {
    zb_fail(b, HAP_EINVAL, "name '%s.%s%s' is too long", b->scope, name, suffix);
    return false;
  }
  return true;
}

/* ---- builder: tensors and nodes ------------------------------------------------------------ */

static int32_t leaf(zb *b, const char *name, hap_tensor_kind kind, hap_dtype dtype,
                    hap_shape shape) {
  char full[ZB_NAME_MAX];
  int32_t id = -1;
  if (b->st != HAP_OK || !full_name(b, full, name, ""))
    return -1;
  b->st = hap_graph_add_tensor(b->g, full, kind, dtype, &shape, &id, b->err);
  return b->st == HAP_OK ? id : -1;
}

int32_t zb_input(zb *b, const char *name, hap_dtype dtype, hap_shape shape) {
  return leaf(b, name, HAP_TENSOR_INPUT, dtype, shape);
}

int32_t zb_param(zb *b, const char *name, hap_shape shape) {
  return leaf(b, name, HAP_TENSOR_PARAMETER, HAP_F32, shape);
}

int32_t zb_buffer(zb *b, const char *name, hap_shape shape) {
  return leaf(b, name, HAP_TENSOR_BUFFER, HAP_F32, shape);
}

/* Node `name` with n_out outputs ("<node>.<output>" when several) into out. */
static void add_node(zb *b, const char *name, hap_op op, const int32_t *in, int32_t n_in,
                     const hap_attrs *attrs, int32_t *out) {
  char full[ZB_NAME_MAX];
  if (b->st != HAP_OK || !full_name(b, full, name, ""))
    return;
  b->st = hap_graph_add_node(b->g, full, op, in, n_in, attrs, NULL, out, b->err);
}

int32_t zb_node(zb *b, const char *name, hap_op op, const int32_t *in, int32_t n_in,
                const hap_attrs *attrs) {
  int32_t out[HAP_MAX_OP_OUTPUTS] = {-1, -1};
  add_node(b, name, op, in, n_in, attrs, out);
  return b->st == HAP_OK ? out[0] : -1;
}

/* Attribute setters that keep the sticky error. */
static void set_int(zb *b, hap_attrs *a, hap_op op, const char *attr, int64_t v) {
  if (b->st == HAP_OK)
    b->st = hap_attrs_set_int(a, op, attr, v, b->err);
}
static void set_float(zb *b, hap_attrs *a, hap_op op, const char *attr, double v) {
  if (b->st == HAP_OK)
    b->st = hap_attrs_set_float(a, op, attr, v, b->err);
}
static void set_ints(zb *b, hap_attrs *a, hap_op op, const char *attr, const hap_shape *v) {
  if (b->st == HAP_OK)
    b->st = hap_attrs_set_ints(a, op, attr, v->dims, v->rank, b->err);
}
static void set_str(zb *b, hap_attrs *a, hap_op op, const char *attr, const char *v) {
  if (b->st == HAP_OK)
    b->st = hap_attrs_set_str(a, op, attr, v, b->err);
}

/* A parameter of the current module: "<name>.<suffix>". */
static int32_t module_param(zb *b, const char *name, const char *suffix, hap_shape shape) {
  char rel[ZB_NAME_MAX];
  if (snprintf(rel, sizeof rel, "%s.%s", name, suffix) >= (int)sizeof rel) {
    zb_fail(b, HAP_EINVAL, "name '%s.%s' is too long", name, suffix);
    return -1;
  }
  return zb_param(b, rel, shape);
}

/* ---- builder: modules ---------------------------------------------------------------------- */

int32_t zb_linear(zb *b, const char *name, int32_t x, int64_t in, int64_t out, bool bias) {
  int32_t w = module_param(b, name, "weight", SHAPE(out, in));
  int32_t bi = bias ? module_param(b, name, "bias", SHAPE(out)) : -1;
  return zb_linear_with(b, name, x, w, bi);
}

int32_t zb_linear_with(zb *b, const char *name, int32_t x, int32_t weight, int32_t bias) {
  int32_t in[3] = {x, weight, bias};
  return zb_node(b, name, HAP_OP_LINEAR, in, bias >= 0 ? 3 : 2, NULL);
}

int32_t zb_conv2d(zb *b, const char *name, int32_t x, int64_t cin, int64_t cout, int64_t kernel,
                  int64_t stride, int64_t padding) {
  int32_t in[3] = {x, -1, -1};
  in[1] = module_param(b, name, "weight", SHAPE(cout, cin, kernel, kernel));
  in[2] = module_param(b, name, "bias", SHAPE(cout));
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_CONV2D);
  set_int(b, &a, HAP_OP_CONV2D, "stride", stride);
  set_int(b, &a, HAP_OP_CONV2D, "padding", padding);
  return zb_node(b, name, HAP_OP_CONV2D, in, 3, &a);
}

int32_t zb_layer_norm(zb *b, const char *name, int32_t x, int64_t width) {
  int32_t in[3] = {x, -1, -1};
  in[1] = module_param(b, name, "weight", SHAPE(width));
  in[2] = module_param(b, name, "bias", SHAPE(width));
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_LAYER_NORM);
  set_int(b, &a, HAP_OP_LAYER_NORM, "normalized_dims", 1);
  set_float(b, &a, HAP_OP_LAYER_NORM, "eps", 1e-5);
  return zb_node(b, name, HAP_OP_LAYER_NORM, in, 3, &a);
}

int32_t zb_self_attention(zb *b, const char *name, int32_t x, int32_t mask, int64_t width,
                          int64_t heads, double dropout) {
  /* q = k = v = x; parameters in PyTorch's order (statements keep the ids deterministic) */
  int32_t in[8] = {x, x, x, -1, -1, -1, -1, mask};
  in[3] = module_param(b, name, "in_proj_weight", SHAPE(3, width, width)); /* q, k, v blocks */
  in[4] = module_param(b, name, "in_proj_bias", SHAPE(3, width));
  in[5] = module_param(b, name, "out_proj.weight", SHAPE(width, width));
  in[6] = module_param(b, name, "out_proj.bias", SHAPE(width));
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_MULTI_HEAD_ATTENTION);
  set_int(b, &a, HAP_OP_MULTI_HEAD_ATTENTION, "heads", heads);
  set_float(b, &a, HAP_OP_MULTI_HEAD_ATTENTION, "dropout", dropout);
  return zb_node(b, name, HAP_OP_MULTI_HEAD_ATTENTION, in, mask >= 0 ? 8 : 7, &a);
}

/* ---- builder: plain ops -------------------------------------------------------------------- */

int32_t zb_embedding(zb *b, const char *name, int32_t idx, int32_t weight) {
  return zb_node(b, name, HAP_OP_EMBEDDING, (int32_t[]){idx, weight}, 2, NULL);
}

int32_t zb_unary(zb *b, const char *name, hap_op op, int32_t x) {
  return zb_node(b, name, op, &x, 1, NULL);
}

int32_t zb_pow(zb *b, const char *name, int32_t x, double exponent) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_POW);
  set_float(b, &a, HAP_OP_POW, "exponent", exponent);
  return zb_node(b, name, HAP_OP_POW, &x, 1, &a);
}

int32_t zb_dropout(zb *b, const char *name, int32_t x, double p) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_DROPOUT);
  set_float(b, &a, HAP_OP_DROPOUT, "p", p);
  return zb_node(b, name, HAP_OP_DROPOUT, &x, 1, &a);
}

int32_t zb_binary(zb *b, const char *name, hap_op op, int32_t x, int32_t y) {
  return zb_node(b, name, op, (int32_t[]){x, y}, 2, NULL);
}

int32_t zb_scalar(zb *b, const char *name, hap_op op, int32_t x, double scalar) {
  hap_attrs a;
  hap_attrs_init(&a, op);
  set_float(b, &a, op, "scalar", scalar);
  return zb_node(b, name, op, &x, 1, &a);
}

int32_t zb_softmax(zb *b, const char *name, hap_op op, int32_t x, int64_t dim) {
  hap_attrs a;
  hap_attrs_init(&a, op);
  set_int(b, &a, op, "dim", dim);
  return zb_node(b, name, op, &x, 1, &a);
}

int32_t zb_reduce(zb *b, const char *name, hap_op op, int32_t x, const int64_t *dims, int32_t n,
                  bool keepdim) {
  hap_attrs a;
  hap_attrs_init(&a, op);
  hap_shape d = zb_shape_of(n, dims);
  set_ints(b, &a, op, "dims", &d);
  set_int(b, &a, op, "keepdim", keepdim);
  return zb_node(b, name, op, &x, 1, &a);
}

int32_t zb_matmul(zb *b, const char *name, int32_t x, int32_t y) {
  return zb_binary(b, name, HAP_OP_MATMUL, x, y);
}

int32_t zb_einsum(zb *b, const char *name, const char *equation, int32_t x, int32_t y) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_EINSUM);
  set_str(b, &a, HAP_OP_EINSUM, "equation", equation);
  return zb_node(b, name, HAP_OP_EINSUM, (int32_t[]){x, y}, 2, &a);
}

int32_t zb_reshape(zb *b, const char *name, int32_t x, hap_shape shape) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  set_ints(b, &a, HAP_OP_RESHAPE, "shape", &shape);
  return zb_node(b, name, HAP_OP_RESHAPE, &x, 1, &a);
}

int32_t zb_flatten(zb *b, const char *name, int32_t x, int64_t start_dim) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_FLATTEN);
  set_int(b, &a, HAP_OP_FLATTEN, "start_dim", start_dim);
  return zb_node(b, name, HAP_OP_FLATTEN, &x, 1, &a);
}

int32_t zb_transpose(zb *b, const char *name, int32_t x, int64_t dim0, int64_t dim1) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_TRANSPOSE);
  set_int(b, &a, HAP_OP_TRANSPOSE, "dim0", dim0);
  set_int(b, &a, HAP_OP_TRANSPOSE, "dim1", dim1);
  return zb_node(b, name, HAP_OP_TRANSPOSE, &x, 1, &a);
}

int32_t zb_permute(zb *b, const char *name, int32_t x, hap_shape perm) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_PERMUTE);
  set_ints(b, &a, HAP_OP_PERMUTE, "dims", &perm);
  return zb_node(b, name, HAP_OP_PERMUTE, &x, 1, &a);
}

int32_t zb_max_pool2d(zb *b, const char *name, int32_t x, int64_t kernel, int64_t stride) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_MAX_POOL2D);
  set_int(b, &a, HAP_OP_MAX_POOL2D, "kernel", kernel);
  set_int(b, &a, HAP_OP_MAX_POOL2D, "stride", stride);
  return zb_node(b, name, HAP_OP_MAX_POOL2D, &x, 1, &a);
}

int32_t zb_adaptive_avg_pool2d(zb *b, const char *name, int32_t x, int64_t oh, int64_t ow) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_ADAPTIVE_AVG_POOL2D);
  hap_shape size = SHAPE(oh, ow);
  set_ints(b, &a, HAP_OP_ADAPTIVE_AVG_POOL2D, "output_size", &size);
  return zb_node(b, name, HAP_OP_ADAPTIVE_AVG_POOL2D, &x, 1, &a);
}

int32_t zb_cls_append(zb *b, const char *name, int32_t x, int32_t cls) {
  return zb_binary(b, name, HAP_OP_CLS_APPEND, x, cls);
}

int32_t zb_cls_select(zb *b, const char *name, int32_t x) {
  return zb_unary(b, name, HAP_OP_CLS_SELECT, x);
}

void zb_top2_gating(zb *b, const char *name, int32_t x, int32_t gate_weight, int64_t capacity,
                    int32_t out[2]) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_TOP2_GATING);
  set_int(b, &a, HAP_OP_TOP2_GATING, "capacity", capacity);
  out[0] = out[1] = -1;
  add_node(b, name, HAP_OP_TOP2_GATING, (int32_t[]){x, gate_weight}, 2, &a, out);
}

int32_t zb_loss(zb *b, const char *name, hap_op op, int32_t x, int32_t target,
                const char *reduction) {
  hap_attrs a;
  hap_attrs_init(&a, op);
  set_str(b, &a, op, "reduction", reduction);
  return zb_node(b, name, op, (int32_t[]){x, target}, 2, &a);
}

/* ---- builder: shared blocks and the end of a build ----------------------------------------- */

int32_t zb_encoder_attention(zb *b, int32_t x, int32_t mask, int64_t width, int64_t heads,
                             double dropout) {
  int32_t a = zb_self_attention(b, "self_attn", x, mask, width, heads, dropout);
  a = zb_dropout(b, "dropout1", a, dropout);
  int32_t h = zb_binary(b, "add1", HAP_OP_ADD, x, a);
  return zb_layer_norm(b, "norm1", h, width);
}

int32_t zb_encoder_layer(zb *b, int32_t x, int32_t mask, int64_t width, int64_t hidden,
                         int64_t heads, double dropout) {
  int32_t h = zb_encoder_attention(b, x, mask, width, heads, dropout);
  int32_t f = zb_linear(b, "linear1", h, width, hidden, true);
  f = zb_unary(b, "relu", HAP_OP_RELU, f);
  f = zb_dropout(b, "dropout", f, dropout);
  f = zb_linear(b, "linear2", f, hidden, width, true);
  f = zb_dropout(b, "dropout2", f, dropout);
  int32_t y = zb_binary(b, "add2", HAP_OP_ADD, h, f);
  return zb_layer_norm(b, "norm2", y, width);
}

hap_status zb_finish(zb *b, const hap_model_def *def, const hap_model_args *args, int32_t loss) {
  if (b->st != HAP_OK)
    return b->st;
  char spec[1024];
  if (hap_model_format_spec(def, args, spec, sizeof spec) != HAP_OK)
    return zb_fail(b, HAP_EINVAL, "canonical spec of '%s' does not fit in %zu bytes", def->name,
                   sizeof spec);
  if (hap_graph_set_source(b->g, spec) != HAP_OK)
    return zb_fail(b, HAP_ENOMEM, "out of memory recording the source of '%s'", def->name);
  b->st = hap_graph_set_loss(b->g, loss, b->err);
  if (b->st == HAP_OK)
    b->st = hap_graph_validate(b->g, b->err);
  return b->st;
}
