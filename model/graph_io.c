/* graph_io.c — hap-graph JSON files: reader (jansson) and canonical writer (hap_jw).
 *
 * Format "hap-graph", version "1.0". One JSON object:
 *   "format"   required  "hap-graph"
 *   "version"  required  "MAJOR.MINOR" string; major > 1 is refused (HAP_EVERSION)
 *   "name"     required  string, the model name
 *   "source"   optional  string, how the file was made ("hap-model export mlp:layers=2")
 *   "tensors"  required  array of tensor objects; a tensor's id is its index
 *   "nodes"    required  array of node objects, in any order (written in topological order)
 *   "loss"     required  name of the loss tensor: a scalar floating-point activation
 * Tensor: {"name", "kind", "dtype", "shape"}, all required, and "grad"
 *   name   non-empty, unique among tensors, no control characters
 *   kind   "input" | "parameter" | "buffer" | "activation"
 *   dtype  "float32" | "float16" | "bfloat16" | "float64" | "int64" | "int32" | "bool"
 *   shape  array of 0..8 positive integers ([] is a scalar); numel * dtype size fits in int64
 *   grad   optional, inputs only: true when the input's gradient is wanted (a pipeline stage's
 *          boundary input, model/stage.h); written only when true
 * Node: {"name", "op", "inputs", "outputs", "attrs", "segment"}
 *   name     required, non-empty, unique among nodes, no control characters
 *   op       required, an op of the op table (ops.h, docs/ops.md)
 *   inputs   required, tensor names, as many as the op takes (a name may repeat: x + x)
 *   outputs  required, names of activations, exactly as many as the op produces; every activation
 *            is the output of exactly one node, and its declared shape and dtype must equal what
 *            the op infers from the inputs
 *   attrs    optional object; keys from the op's schema, values typed by it: int → JSON integer,
 *            float → any number, bool → true/false, ints → array of <= 8 integers, str → string
 *            of < 32 bytes; omitted attributes take their defaults, required ones must be given
 *   segment  optional integer 0..(number of nodes), default 0; non-decreasing in execution order
 * JSON: UTF-8; duplicate keys and integers beyond int64 are errors.
 * Compatibility: a key not listed here is an error in files of version <= 1.0 (catches typos)
 *   and is ignored in files of a newer minor version (1.x may add optional keys).
 * Writing is canonical: keys in the order above, one tensor or node per line, every attribute of
 *   the op's schema in schema order (defaults included), 2-space indent, floats in the shortest
 *   form that reads back bit-exactly (always with a '.' or an exponent).
 * Errors are one line:
 *   "<file>: <json path>: <what is wrong, what was expected>"   schema errors
 *   "<file>: line L, column C: <parser message>"                 JSON syntax errors
 *   "<file>: <graph message naming the node or tensor>"          hap_graph_validate errors */
#include "model/graph_io.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/json_write.h"
#include "base/utf8.h"

/* ---- reader helpers ------------------------------------------------------------------------- */

typedef struct reader {
  hap_jr jr; /* label, error record, strictness */
  hap_graph *g;
  int32_t *producer; /* per tensor: index of the node that outputs it in the file, or -1 */
} reader;

/* ---- header --------------------------------------------------------------------------------- */

static hap_status read_header(reader *r, const json_t *root) {
  static const char *const keys[] = {"format",  "version", "name", "source",
                                     "tensors", "nodes",   "loss", NULL};
  return hap_jr_read_header(&r->jr, root, HAP_GRAPH_FORMAT, HAP_GRAPH_VERSION_MAJOR,
                            HAP_GRAPH_VERSION_MINOR, keys,
                            "format, version, name, source, tensors, nodes, loss");
}

/* ---- tensors -------------------------------------------------------------------------------- */

static hap_status read_shape(reader *r, const json_t *v, const char *path, hap_dtype dtype,
                             hap_shape *shape) {
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_ARRAY, path, "an array of dims such as [256, 768]"));
  size_t n = json_array_size(v);
  if (n > HAP_MAX_DIMS)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "has %zu dims, expected at most %d", n,
                       HAP_MAX_DIMS);
  memset(shape, 0, sizeof *shape);
  shape->rank = (int32_t)n;
  for (size_t i = 0; i < n; i++) {
    hap_jpath p;
    HAP_TRY(hap_jr_want_int(&r->jr, json_array_get(v, i), hap_jpath_index(p, path, i), 1, INT64_MAX,
                            "a positive integer", &shape->dims[i]));
  }
  int64_t numel, bytes;
  if (hap_shape_numel(shape, &numel) != HAP_OK ||
      __builtin_mul_overflow(numel, (int64_t)hap_dtype_size(dtype), &bytes)) {
    char sb[160];
    return hap_jr_fail(&r->jr, HAP_EOVERFLOW, path,
                       "%s of %s has more bytes than int64 holds, expected a size below 2^63 bytes",
                       hap_shape_str(shape, sb, sizeof sb), hap_dtype_name(dtype));
  }
  return HAP_OK;
}

static hap_status read_tensor(reader *r, const json_t *v, size_t i) {
  static const char *const keys[] = {"name", "kind", "dtype", "shape", "grad", NULL};
  hap_jpath path, p;
  hap_jquote b;
  hap_jpath_index(path, "tensors", i);
  HAP_TRY(
      hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, "a tensor object {\"name\", \"kind\", ...}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys, "name, kind, dtype, shape, grad"));
  json_t *m;
  const char *name, *s;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "name", true, "the tensor's name", &m));
  HAP_TRY(hap_jr_want_name(&r->jr, m, hap_jpath_key(p, path, "name"), &name));
  int32_t prev = hap_graph_find_tensor(r->g, name);
  if (prev >= 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "tensor '%s' is already defined by tensors[%d], expected unique names",
                       hap_json_quote(name, b), prev);

  hap_tensor_kind kind;
  HAP_TRY(
      hap_jr_member(&r->jr, v, path, "kind", true, "input, parameter, buffer or activation", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "kind"), "a tensor kind string", &s));
  if (hap_tensor_kind_parse(s, &kind) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "unknown kind '%s', expected input, parameter, buffer or activation",
                       hap_json_quote(s, b));

  hap_dtype dtype;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "dtype", true, "a dtype such as \"float32\"", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "dtype"), "a dtype string", &s));
  if (hap_dtype_parse(s, &dtype) != HAP_OK)
    return hap_jr_fail(
        &r->jr, HAP_EPARSE, p,
        "unknown dtype '%s', expected float32, float16, bfloat16, float64, int64, int32 or bool",
        hap_json_quote(s, b));

  hap_shape shape;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "shape", true, "an array of dims such as [256, 768]", &m));
  HAP_TRY(read_shape(r, m, hap_jpath_key(p, path, "shape"), dtype, &shape));

  bool grad = false;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "grad", false, "true or false", &m));
  if (m != NULL) {
    HAP_TRY(hap_jr_want_bool(&r->jr, m, hap_jpath_key(p, path, "grad"), &grad));
    if (grad && (kind != HAP_TENSOR_INPUT || !hap_dtype_is_float(dtype)))
      return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(p, path, "grad"),
                         "only a floating-point input can want a gradient, this is a %s %s",
                         hap_dtype_name(dtype), hap_tensor_kind_name(kind));
  }

  hap_err e = {0};
  int32_t id;
  hap_status st = hap_graph_add_tensor(r->g, name, kind, dtype, &shape, &id, &e);
  if (st == HAP_OK && grad)
    st = hap_graph_want_grad(r->g, id, &e);
  if (st != HAP_OK)
    return hap_jr_fail(&r->jr, st, path, "%s", e.msg);
  return HAP_OK;
}

static hap_status read_tensors(reader *r, const json_t *root) {
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "tensors", true, "an array of tensors", &arr));
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "tensors", "an array of tensors"));
  if (json_array_size(arr) > INT32_MAX / 2)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "tensors", "too many tensors");
  for (size_t i = 0; i < json_array_size(arr); i++)
    HAP_TRY(read_tensor(r, json_array_get(arr, i), i));
  return HAP_OK;
}

/* ---- attributes ----------------------------------------------------------------------------- */

static const char *attr_type_name(hap_attr_type t) {
  switch (t) {
  case HAP_ATTR_INT: return "an integer";
  case HAP_ATTR_FLOAT: return "a number";
  case HAP_ATTR_BOOL: return "true or false";
  case HAP_ATTR_INTS: return "an array of integers";
  case HAP_ATTR_STR: return "a string";
  }
  return "?";
}

/* "a, b, c": the op's attribute names. */
static const char *attr_list(const hap_op_def *def, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < def->n_attrs && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", def->attrs[i].name);
  return buf;
}

/* Check the JSON type of `v` against the schema, then store it through the ops.h setters. */
static hap_status read_attr(reader *r, const json_t *v, const char *path, hap_op op, int idx,
                            hap_attrs *a) {
  const hap_attr_spec *spec = &hap_op_get(op)->attrs[idx];
  hap_err e = {0};
  hap_status st = HAP_OK;
  bool type_ok = false;
  switch (spec->type) {
  case HAP_ATTR_INT:
    if ((type_ok = json_is_integer(v)))
      st = hap_attrs_set_int(a, op, spec->name, (int64_t)json_integer_value(v), &e);
    break;
  case HAP_ATTR_BOOL:
    if ((type_ok = json_is_boolean(v)))
      st = hap_attrs_set_int(a, op, spec->name, json_is_true(v) ? 1 : 0, &e);
    break;
  case HAP_ATTR_FLOAT:
    if ((type_ok = json_is_number(v)))
      st = hap_attrs_set_float(a, op, spec->name, json_number_value(v), &e);
    break;
  case HAP_ATTR_STR:
    if ((type_ok = json_is_string(v))) {
      if (strlen(json_string_value(v)) != json_string_length(v))
        return hap_jr_fail(&r->jr, HAP_EPARSE, path, "contains a NUL byte, expected plain text");
      st = hap_attrs_set_str(a, op, spec->name, json_string_value(v), &e);
    }
    break;
  case HAP_ATTR_INTS: {
    if (!(type_ok = json_is_array(v)))
      break;
    size_t n = json_array_size(v);
    if (n > HAP_MAX_DIMS)
      return hap_jr_fail(&r->jr, HAP_EPARSE, path, "has %zu entries, expected at most %d", n,
                         HAP_MAX_DIMS);
    int64_t vals[HAP_MAX_DIMS];
    for (size_t k = 0; k < n; k++) {
      hap_jpath p;
      HAP_TRY(hap_jr_want_int(&r->jr, json_array_get(v, k), hap_jpath_index(p, path, k), INT64_MIN,
                              INT64_MAX, "an integer", &vals[k]));
    }
    st = hap_attrs_set_ints(a, op, spec->name, vals, (int32_t)n, &e);
    break;
  }
  }
  if (!type_ok)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "expected %s (attribute '%s' of op '%s'), got %s",
                       attr_type_name(spec->type), spec->name, hap_op_name(op), hap_json_kind(v));
  if (st != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "%s", e.msg);
  return HAP_OK;
}

static hap_status read_attrs(reader *r, const json_t *v, const char *path, hap_op op,
                             hap_attrs *a) {
  const hap_op_def *def = hap_op_get(op);
  char names[256];
  hap_attrs_init(a, op);
  if (v != NULL) {
    HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, "an object of attributes"));
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
      hap_jpath p;
      hap_jquote b;
      hap_jpath_key(p, path, hap_json_quote(key, b));
      int idx = hap_op_attr_index(op, key);
      if (idx < 0 && def->n_attrs == 0)
        return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                           "op '%s' takes no attributes, expected \"attrs\": {}", def->name);
      if (idx < 0)
        return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                           "op '%s' has no such attribute, expected one of: %s", def->name,
                           attr_list(def, names, sizeof names));
      HAP_TRY(read_attr(r, val, p, op, idx, a));
    }
  }
  for (int i = 0; i < def->n_attrs; i++) {
    if (def->attrs[i].required && !(a->given & (1u << i)))
      return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                         "missing required attribute '%s' of op '%s' (%s: %s)", def->attrs[i].name,
                         def->name, attr_type_name(def->attrs[i].type), def->attrs[i].doc);
  }
  return HAP_OK;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

/* Tensor id of the name at v; errors name the path. */
static hap_status read_ref(reader *r, const json_t *v, const char *path, int32_t *id) {
  const char *s;
  hap_jquote b;
  HAP_TRY(hap_jr_want_str(&r->jr, v, path, "a tensor name", &s));
  *id = hap_graph_find_tensor(r->g, s);
  if (*id < 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                       "unknown tensor '%s', expected the name of a tensor in \"tensors\"",
                       hap_json_quote(s, b));
  return HAP_OK;
}

static hap_status read_inputs(reader *r, const json_t *v, const char *path, hap_op op, int32_t *ids,
                              int32_t *n) {
  const hap_op_def *def = hap_op_get(op);
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_ARRAY, path, "an array of tensor names"));
  size_t cnt = json_array_size(v);
  if (cnt < (size_t)def->min_in || cnt > (size_t)def->max_in) {
    if (def->min_in == def->max_in)
      return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                         "has %zu entries, expected %d (op '%s' takes %d input%s)", cnt,
                         def->min_in, def->name, def->min_in, def->min_in == 1 ? "" : "s");
    return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                       "has %zu entries, expected %d to %d (inputs of op '%s')", cnt, def->min_in,
                       def->max_in, def->name);
  }
  for (size_t i = 0; i < cnt; i++) {
    hap_jpath p;
    HAP_TRY(read_ref(r, json_array_get(v, i), hap_jpath_index(p, path, i), &ids[i]));
  }
  *n = (int32_t)cnt;
  return HAP_OK;
}

/* Outputs must be activations that no earlier node produces. */
static hap_status read_outputs(reader *r, const json_t *v, const char *path, hap_op op,
                               int32_t node, int32_t *ids, int32_t *n) {
  const hap_op_def *def = hap_op_get(op);
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_ARRAY, path, "an array of tensor names"));
  size_t cnt = json_array_size(v);
  if (cnt != (size_t)def->n_out)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                       "has %zu entries, expected %d (op '%s' produces %d output%s)", cnt,
                       def->n_out, def->name, def->n_out, def->n_out == 1 ? "" : "s");
  for (size_t i = 0; i < cnt; i++) {
    hap_jpath p;
    hap_jquote b;
    HAP_TRY(read_ref(r, json_array_get(v, i), hap_jpath_index(p, path, i), &ids[i]));
    const hap_tensor *t = &r->g->tensors[ids[i]];
    if (t->kind != HAP_TENSOR_ACTIVATION)
      return hap_jr_fail(
          &r->jr, HAP_EPARSE, p,
          "'%s' is a %s, expected an activation (only activations are computed by nodes)",
          hap_json_quote(t->name, b), hap_tensor_kind_name(t->kind));
    int32_t prev = r->producer[ids[i]];
    if (prev == node)
      return hap_jr_fail(&r->jr, HAP_EPARSE, p, "lists '%s' twice, expected distinct outputs",
                         hap_json_quote(t->name, b));
    if (prev >= 0)
      return hap_jr_fail(
          &r->jr, HAP_EPARSE, p,
          "activation '%s' is already produced by nodes[%d] '%s', expected exactly one producer",
          hap_json_quote(t->name, b), prev, r->g->nodes[prev].name);
    r->producer[ids[i]] = node;
  }
  *n = (int32_t)cnt;
  return HAP_OK;
}

static hap_status read_node(reader *r, const json_t *v, size_t i, size_t n_nodes) {
  static const char *const keys[] = {"name", "inputs", "outputs", "op", "attrs", "segment", NULL};
  hap_jpath path, p;
  hap_jquote b;
  hap_jpath_index(path, "nodes", i);
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, "a node object {\"name\", \"op\", ...}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys, "name, op, inputs, outputs, attrs, segment"));
  json_t *m;
  const char *name, *s;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "name", true, "the node's name", &m));
  HAP_TRY(hap_jr_want_name(&r->jr, m, hap_jpath_key(p, path, "name"), &name));
  int32_t prev = hap_graph_find_node(r->g, name);
  if (prev >= 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "node '%s' is already defined by nodes[%d], expected unique names",
                       hap_json_quote(name, b), prev);

  hap_op op;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "op", true, "an op name such as \"linear\"", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "op"), "an op name such as \"linear\"",
                          &s));
  if (hap_op_lookup(s, &op) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "unknown op '%s', expected an op of the op table (docs/ops.md)",
                       hap_json_quote(s, b));

  int32_t ins[HAP_MAX_OP_INPUTS], outs[HAP_MAX_OP_OUTPUTS], n_in = 0, n_out = 0;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "inputs", true, "an array of tensor names", &m));
  HAP_TRY(read_inputs(r, m, hap_jpath_key(p, path, "inputs"), op, ins, &n_in));
  HAP_TRY(hap_jr_member(&r->jr, v, path, "outputs", true, "an array of tensor names", &m));
  HAP_TRY(read_outputs(r, m, hap_jpath_key(p, path, "outputs"), op, (int32_t)i, outs, &n_out));

  hap_attrs attrs;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "attrs", false, NULL, &m));
  HAP_TRY(read_attrs(r, m, hap_jpath_key(p, path, "attrs"), op, &attrs));

  int64_t segment = 0;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "segment", false, NULL, &m));
  if (m != NULL) {
    char want[64];
    snprintf(want, sizeof want, "an integer 0..%zu", n_nodes);
    HAP_TRY(hap_jr_want_int(&r->jr, m, hap_jpath_key(p, path, "segment"), 0, (int64_t)n_nodes, want,
                            &segment));
  }

  hap_err e = {0};
  hap_status st =
      hap_graph_link_node(r->g, name, op, ins, n_in, outs, n_out, &attrs, (int32_t)segment, &e);
  if (st != HAP_OK)
    return hap_jr_fail(&r->jr, st, path, "%s", e.msg);
  return HAP_OK;
}

static hap_status read_nodes(reader *r, const json_t *root) {
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "nodes", true, "an array of nodes", &arr));
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "nodes", "an array of nodes"));
  size_t n = json_array_size(arr);
  if (n > INT32_MAX / 2)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "nodes", "too many nodes");
  r->producer = malloc((size_t)(r->g->n_tensors ? r->g->n_tensors : 1) * sizeof *r->producer);
  if (r->producer == NULL)
    return hap_err_set(r->jr.err, HAP_ENOMEM, "%s: out of memory", r->jr.label);
  for (int32_t t = 0; t < r->g->n_tensors; t++)
    r->producer[t] = -1;
  for (size_t i = 0; i < n; i++)
    HAP_TRY(read_node(r, json_array_get(arr, i), i, n));
  for (int32_t t = 0; t < r->g->n_tensors; t++) {
    hap_jpath p;
    hap_jquote b;
    const hap_tensor *ten = &r->g->tensors[t];
    if (ten->kind == HAP_TENSOR_ACTIVATION && r->producer[t] < 0)
      return hap_jr_fail(
          &r->jr, HAP_EPARSE, hap_jpath_index(p, "tensors", (size_t)t),
          "activation '%s' is produced by no node, expected it among the \"outputs\" of "
          "one node (or kind input, parameter or buffer)",
          hap_json_quote(ten->name, b));
  }
  return HAP_OK;
}

static hap_status read_loss(reader *r, const json_t *root) {
  json_t *m;
  int32_t id;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "loss", true, "the name of the scalar loss tensor", &m));
  HAP_TRY(read_ref(r, m, "loss", &id));
  hap_err e = {0};
  hap_status st = hap_graph_set_loss(r->g, id, &e);
  return st == HAP_OK ? HAP_OK : hap_jr_fail(&r->jr, st, "loss", "%s", e.msg);
}

static hap_status read_graph(reader *r, const json_t *root) {
  HAP_TRY(read_header(r, root));
  json_t *m;
  const char *name, *source = NULL;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "name", true, "the model name (a string)", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, "name", "the model name (a string)", &name));
  HAP_TRY(hap_jr_member(&r->jr, root, "", "source", false, NULL, &m));
  if (m != NULL)
    HAP_TRY(hap_jr_want_str(&r->jr, m, "source", "a string saying how the file was made", &source));
  r->g = hap_graph_create(name);
  if (r->g == NULL || hap_graph_set_source(r->g, source) != HAP_OK)
    return hap_err_set(r->jr.err, HAP_ENOMEM, "%s: out of memory", r->jr.label);
  HAP_TRY(read_tensors(r, root));
  HAP_TRY(read_nodes(r, root));
  HAP_TRY(read_loss(r, root));
  hap_err e = {0};
  hap_status st = hap_graph_validate(r->g, &e);
  if (st != HAP_OK)
    return hap_err_set(r->jr.err, st, "%s: %s", r->jr.label, e.msg);
  return HAP_OK;
}

hap_status hap_graph_from_json(const char *json, size_t len, const char *label, hap_graph **out,
                               hap_err *err) {
  *out = NULL;
  reader r = {.jr = {.label = label ? label : "<json>", .err = err, .strict = true}};
  json_t *root;
  HAP_TRY(hap_jr_load(&r.jr, json, len, HAP_GRAPH_FORMAT, &root));
  hap_status st = read_graph(&r, root);
  json_decref(root);
  free(r.producer);
  if (st != HAP_OK) {
    hap_graph_destroy(r.g);
    hap_jr_one_line(err);
    return st;
  }
  *out = r.g;
  return HAP_OK;
}

hap_status hap_graph_read_file(const char *path, hap_graph **out, hap_err *err) {
  char *data;
  size_t len;
  *out = NULL;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_status st = hap_graph_from_json(data, len, path, out, err);
  free(data);
  return st;
}

/* ---- writer --------------------------------------------------------------------------------- */

/* A name the reader accepts back: non-empty UTF-8 without control characters. */
static hap_status check_name(const char *what, int32_t i, const char *name, hap_err *err) {
  bool ok = name != NULL && name[0] != '\0' && hap_utf8_valid(name);
  for (const unsigned char *p = (const unsigned char *)name; ok && *p; p++)
    ok = *p >= 0x20 && *p != 0x7F;
  if (!ok) {
    hap_jquote b;
    return hap_err_set(err, HAP_EINVAL,
                       "%s[%d] '%s': name must be non-empty UTF-8 without control characters", what,
                       i, hap_json_quote(name ? name : "", b));
  }
  return HAP_OK;
}

/* Refuse what could not be read back, so written files always round-trip. */
static hap_status check_writable(const hap_graph *g, hap_err *err) {
  if (g->loss < 0 || g->loss >= g->n_tensors)
    return hap_err_set(err, HAP_EINVAL, "graph '%s' has no loss tensor; validate it before writing",
                       g->name);
  if (!hap_utf8_valid(g->name) || (g->source && !hap_utf8_valid(g->source)))
    return hap_err_set(err, HAP_EINVAL, "graph name or source is not valid UTF-8");
  for (int32_t t = 0; t < g->n_tensors; t++)
    HAP_TRY(check_name("tensors", t, g->tensors[t].name, err));
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    const hap_op_def *def = hap_op_get(node->op);
    HAP_TRY(check_name("nodes", n, node->name, err));
    for (int i = 0; def && i < def->n_attrs; i++) {
      const hap_attr_value *v = &node->attrs.v[i];
      if ((def->attrs[i].type == HAP_ATTR_FLOAT && !isfinite(v->u.f)) ||
          (def->attrs[i].type == HAP_ATTR_STR && !hap_utf8_valid(v->u.s)))
        return hap_err_set(err, HAP_EINVAL,
                           "nodes[%d] '%s': attribute '%s' is not finite or not UTF-8", n,
                           node->name, def->attrs[i].name);
    }
  }
  return HAP_OK;
}

static void write_tensor(hap_jw *w, const hap_tensor *t) {
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "name");
  hap_jw_str(w, t->name);
  hap_jw_key(w, "kind");
  hap_jw_str(w, hap_tensor_kind_name(t->kind));
  hap_jw_key(w, "dtype");
  hap_jw_str(w, hap_dtype_name(t->dtype));
  hap_jw_key(w, "shape");
  hap_jw_begin_array_inline(w);
  for (int d = 0; d < t->shape.rank; d++)
    hap_jw_int(w, t->shape.dims[d]);
  hap_jw_end_array(w);
  if (t->grad_wanted) {
    hap_jw_key(w, "grad");
    hap_jw_bool(w, true);
  }
  hap_jw_end_object(w);
}

/* Every attribute of the op's schema, in schema order, defaults included. */
static void write_attrs(hap_jw *w, const hap_node *n) {
  const hap_op_def *def = hap_op_get(n->op);
  hap_jw_begin_object_inline(w);
  for (int i = 0; i < def->n_attrs; i++) {
    const hap_attr_value *v = &n->attrs.v[i];
    hap_jw_key(w, def->attrs[i].name);
    switch (def->attrs[i].type) {
    case HAP_ATTR_INT: hap_jw_int(w, v->u.i); break;
    case HAP_ATTR_BOOL: hap_jw_bool(w, v->u.i != 0); break;
    case HAP_ATTR_FLOAT: hap_jw_double(w, v->u.f); break;
    case HAP_ATTR_STR: hap_jw_str(w, v->u.s); break;
    case HAP_ATTR_INTS:
      hap_jw_begin_array_inline(w);
      for (int k = 0; k < v->u.ints.n && k < HAP_MAX_DIMS; k++)
        hap_jw_int(w, v->u.ints.v[k]);
      hap_jw_end_array(w);
      break;
    }
  }
  hap_jw_end_object(w);
}

static void write_refs(hap_jw *w, const hap_graph *g, const int32_t *ids, int32_t n) {
  hap_jw_begin_array_inline(w);
  for (int32_t i = 0; i < n; i++)
    hap_jw_str(w, g->tensors[ids[i]].name);
  hap_jw_end_array(w);
}

static void write_node(hap_jw *w, const hap_graph *g, const hap_node *n) {
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "name");
  hap_jw_str(w, n->name);
  hap_jw_key(w, "op");
  hap_jw_str(w, hap_op_name(n->op));
  hap_jw_key(w, "inputs");
  write_refs(w, g, n->inputs, n->n_inputs);
  hap_jw_key(w, "outputs");
  write_refs(w, g, n->outputs, n->n_outputs);
  hap_jw_key(w, "attrs");
  write_attrs(w, n);
  hap_jw_key(w, "segment");
  hap_jw_int(w, n->segment);
  hap_jw_end_object(w);
}

hap_status hap_graph_write(const hap_graph *g, FILE *f, hap_err *err) {
  HAP_TRY(check_writable(g, err));
  char version[32];
  snprintf(version, sizeof version, "%d.%d", HAP_GRAPH_VERSION_MAJOR, HAP_GRAPH_VERSION_MINOR);
  hap_jw w;
  hap_jw_init(&w, f, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "format");
  hap_jw_str(&w, HAP_GRAPH_FORMAT);
  hap_jw_key(&w, "version");
  hap_jw_str(&w, version);
  hap_jw_key(&w, "name");
  hap_jw_str(&w, g->name);
  if (g->source != NULL) {
    hap_jw_key(&w, "source");
    hap_jw_str(&w, g->source);
  }
  hap_jw_key(&w, "tensors");
  hap_jw_begin_array(&w);
  for (int32_t t = 0; t < g->n_tensors; t++)
    write_tensor(&w, &g->tensors[t]);
  hap_jw_end_array(&w);
  hap_jw_key(&w, "nodes");
  hap_jw_begin_array(&w);
  for (int32_t n = 0; n < g->n_nodes; n++)
    write_node(&w, g, &g->nodes[n]);
  hap_jw_end_array(&w);
  hap_jw_key(&w, "loss");
  hap_jw_str(&w, g->tensors[g->loss].name);
  hap_jw_end_object(&w);
  if (!hap_jw_finish(&w))
    return hap_err_set(err, HAP_EIO, "cannot write graph '%s': write failed", g->name);
  return HAP_OK;
}

hap_status hap_graph_write_file(const hap_graph *g, const char *path, hap_err *err) {
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  hap_err e = {0};
  hap_status st = hap_graph_write(g, af.f, &e);
  if (st != HAP_OK) {
    hap_atomic_abort(&af);
    return hap_err_set(err, st, "%s: %s", path, e.msg);
  }
  return hap_atomic_commit(&af, err);
}

hap_status hap_graph_digest(const hap_graph *g, uint64_t *out, hap_err *err) {
  hap_graph canon = *g; /* a shallow copy without the provenance */
  canon.source = NULL;
  hap_digest_stream ds;
  if (!hap_digest_open(&ds))
    return hap_err_set(err, HAP_ENOMEM, "graph '%s': out of memory computing its digest", g->name);
  hap_status st = hap_graph_write(&canon, ds.f, err);
  if (!hap_digest_close(&ds, st == HAP_OK ? out : NULL) && st == HAP_OK)
    st = hap_err_set(err, HAP_ENOMEM, "graph '%s': out of memory computing its digest", g->name);
  return st;
}
