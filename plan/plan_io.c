/* plan_io.c — hap-plan JSON files: reader (jansson) and canonical writer (hap_jw).
 *
 * Format "hap-plan", version "1.0". One JSON object:
 *   "format"     required  "hap-plan"
 *   "version"    required  "MAJOR.MINOR"; major > 1 is refused (HAP_EVERSION)
 *   "strategy"   required  non-empty text: "hap", "dp-ev", ...
 *   "graph"      required  {"name", "digest", "spec"?}: the graph the plan was made for; the digest
 *                          (16 hex digits, hap_graph_digest) must be the given graph's; "spec":
 *                          the zoo spec or graph file it was loaded from (hap_plan.specs)
 *   "cluster"    required  {"name", "digest", "devices", "spec"?}: likewise, and the device names
 *                          in order
 *   "replicas"   optional  2-D device groups (hap_plan.replicas), an integer >= 1 dividing the
 *                          devices; absent means 1. Ratios and lengths are then per device of a
 *                          group, and extents those of one replica's graph (hap_graph_split_batch)
 *   "policy"     optional  the training policy (model/policy.h), every field given:
 *                          {"precision", "optimizer", "zero", "recompute", "micro_batches",
 *                          "grad_accum"}; absent means the default (fp32, sgd, 0, none, 1, half).
 *                          With micro_batches k > 1, extents are those of one micro-batch
 *                          (hap_plan_step_graph)
 *   "segments"   required  one {"ratios", "lengths"} per graph segment: ratios per device;
 *                          lengths (optional) {"EXTENT" or "EXTENT/GRANULE": [per-device ints]}
 *                          for every (extent, granule) a step shards in the segment
 *   "steps"      required  the program in forward order, one object per step:
 *     source   {"kind", "tensor", "storage", "to", "granule"?, "segment", "predicted_s"}
 *     compute  {"kind", "node", "variant", "inputs", "outputs", "granule"?, "flags"?, "once"?,
 *               "segment", "predicted_s"}
 *     comm     {"kind", "tensor", "op", "from", "to", "impl", "from_segment"?, "granule"?,
 *               "segment", "predicted_s"}
 *   "predicted"  required  {"iteration_s", "devices": [{"compute_s", "comm_s", "memory_bytes",
 *                          "memory"?}]}; "memory" (on every device or none) is memory_bytes by
 *                          component: {"parameters", "gradients", "optimizer", "activations",
 *                          "comm_buffers", "workspace"}, bytes
 * Names (tensors, nodes, devices) resolve against the given graph and cluster. A compute step's
 * layouts, granule, flags and once select the variant among hap_op_variants; its "variant" name
 * must be that variant's. Then hap_plan_validate runs, then the lengths are checked.
 * Compatibility: unknown keys are errors in files of version <= 1.0, ignored in a newer 1.x.
 * Writing is canonical: keys in the order above, one step per line, optional keys written only
 * when they differ from their defaults (granule 1, from_segment = segment, no once; "policy" and
 * "memory" only with a policy other than the default, so default plans read as before), doubles in
 * the shortest form that reads back bit-exactly.
 * Errors are one line:
 *   "<file>: <json path>: <what is wrong, what was expected>"   schema errors
 *   "<file>: line L, column C: <parser message>"                 JSON syntax errors
 *   "<file>: steps[K]: <step, node or tensor>: <expectation>"    hap_plan_validate errors */
#include "plan/plan_io.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json_read.h"
#include "base/json_write.h"
#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "plan/replica.h"
#include "plan_io_internal.h"

/* Variant flag names, by bit (sharding.h HAP_VARIANT_*). */
static const char *const flag_names[] = {"bias_once", "global_count", "global_mask", "local_rows"};
#define N_FLAGS ((int)(sizeof flag_names / sizeof flag_names[0]))

/* ---- shard lengths implied by the steps ----------------------------------------------------- */

/* One (segment, extent, granule) some step shards. */
typedef struct lkey {
  int32_t segment;
  int64_t extent, granule;
} lkey;

static int lkey_cmp(const void *pa, const void *pb) {
  const lkey *a = pa, *b = pb;
  if (a->segment != b->segment)
    return a->segment < b->segment ? -1 : 1;
  if (a->extent != b->extent)
    return a->extent < b->extent ? -1 : 1;
  return (a->granule > b->granule) - (a->granule < b->granule);
}

static void push_key(lkey *keys, int32_t *n, const hap_tensor *t, hap_layout l, int32_t segment,
                     int64_t granule) {
  if (l >= 0 && l < t->shape.rank)
    keys[(*n)++] = (lkey){segment, t->shape.dims[l], granule > 1 ? granule : 1};
}

/* The distinct keys of a validated plan, sorted by (segment, extent, granule). */
static hap_status collect_lengths(const hap_plan *p, const hap_graph *g, lkey **out, int32_t *n,
                                  hap_err *err) {
  lkey *keys = malloc((2 * (size_t)p->n_steps + 1) * sizeof *keys);
  if (keys == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory collecting shard lengths");
  int32_t m = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind == HAP_STEP_COMPUTE) {
      hap_op_io io;
      hap_graph_node_io(g, s->node, &io);
      int64_t extent = hap_variant_extent(&io, &s->variant);
      if (extent > 0)
        keys[m++] = (lkey){s->segment, extent, s->variant.granule};
    } else {
      const hap_tensor *t = &g->tensors[s->tensor];
      if (s->kind == HAP_STEP_COMM)
        push_key(keys, &m, t, s->from, s->from_segment, s->granule);
      push_key(keys, &m, t, s->to, s->segment, s->granule);
    }
  }
  qsort(keys, (size_t)m, sizeof *keys, lkey_cmp);
  int32_t d = 0;
  for (int32_t i = 0; i < m; i++)
    if (d == 0 || lkey_cmp(&keys[d - 1], &keys[i]) != 0)
      keys[d++] = keys[i];
  *out = keys;
  *n = d;
  return HAP_OK;
}

/* "256" or "4096/64". */
static const char *lkey_name(const lkey *k, char *buf, size_t len) {
  if (k->granule == 1)
    snprintf(buf, len, "%lld", (long long)k->extent);
  else
    snprintf(buf, len, "%lld/%lld", (long long)k->extent, (long long)k->granule);
  return buf;
}

/* "[23, 21, ...]" (the first 8). */
static const char *ints_str(const int64_t *v, int32_t n, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "[");
  for (int32_t i = 0; i < n && i < 8 && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (o < len)
    snprintf(buf + o, len - o, "%s]", n > 8 ? ", ..." : "");
  return buf;
}

/* ---- reader helpers ------------------------------------------------------------------------- */

typedef struct reader {
  hap_jr jr; /* label, error record, strictness */
  const hap_graph *g;
  const hap_cluster *c;
  hap_plan *p;
  json_t **lengths;    /* [n_segments] each segment's "lengths" (borrowed), or NULL */
  hap_graph *split;    /* one replica's graph when replicas > 1 (owned) */
  const hap_graph *lg; /* the graph the steps' shapes come from: split, else g */
} reader;

/* Required member `key` of `obj` as a number. */
static hap_status num_member(reader *r, const json_t *obj, const char *path, const char *key,
                             const char *expected, double *out) {
  json_t *m;
  hap_jpath p;
  HAP_TRY(hap_jr_member(&r->jr, obj, path, key, true, expected, &m));
  return hap_jr_want_num(&r->jr, m, hap_jpath_key(p, path, key), expected, out);
}

/* ---- header, graph and cluster -------------------------------------------------------------- */

static hap_status read_header(reader *r, const json_t *root) {
  static const char *const keys[] = {"format",  "version",   "strategy", "graph",
                                     "cluster", "replicas",  "policy",   "segments",
                                     "steps",   "predicted", NULL};
  return hap_jr_read_header(
      &r->jr, root, HAP_PLAN_FORMAT, HAP_PLAN_VERSION_MAJOR, HAP_PLAN_VERSION_MINOR, keys,
      "format, version, strategy, graph, cluster, replicas, policy, segments, steps, predicted");
}

/* Exactly 16 hex digits. */
static hap_status read_digest(hap_jr *jr, const json_t *obj, const char *path, uint64_t *out) {
  json_t *m;
  const char *s;
  hap_jpath p;
  hap_jquote b;
  HAP_TRY(hap_jr_member(jr, obj, path, "digest", true, "a digest of 16 hex digits", &m));
  HAP_TRY(
      hap_jr_want_str(jr, m, hap_jpath_key(p, path, "digest"), "a digest of 16 hex digits", &s));
  uint64_t d = 0;
  size_t n = 0;
  for (; n < 17 && s[n]; n++) {
    char ch = s[n];
    int x = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                     : -1;
    if (x < 0)
      break;
    d = d << 4 | (uint64_t)x;
  }
  if (n != 16 || s[n] != '\0')
    return hap_jr_fail(jr, HAP_EPARSE, p,
                       "is \"%s\", expected 16 hex digits such as \"0123456789abcdef\"",
                       hap_json_quote(s, b));
  *out = d;
  return HAP_OK;
}

/* {"name", "digest"} at `path`; the digest must be `have` (of the object named `have_name`), and
 * the name `have_name` too when `name_counts` (a cluster's name is where it was read from, which
 * its digest leaves out). */
static hap_status read_ref(hap_jr *jr, const json_t *root, const char *path, const char *what,
                           const char *have_name, bool name_counts, uint64_t have,
                           const char **name, uint64_t *digest, const char **spec) {
  json_t *obj, *m;
  hap_jpath p;
  hap_jquote b;
  char want[96];
  snprintf(want, sizeof want, "the %s the plan was made for {\"name\", \"digest\", ...}", what);
  HAP_TRY(hap_jr_member(jr, root, "", path, true, want, &obj));
  HAP_TRY(hap_jr_want_type(jr, obj, JSON_OBJECT, path, want));
  HAP_TRY(hap_jr_member(jr, obj, path, "name", true, "a name", &m));
  HAP_TRY(hap_jr_want_name(jr, m, hap_jpath_key(p, path, "name"), name));
  HAP_TRY(read_digest(jr, obj, path, digest));
  HAP_TRY(hap_jr_member(jr, obj, path, "spec", false, NULL, &m));
  *spec = NULL;
  if (m != NULL)
    HAP_TRY(hap_jr_want_name(jr, m, hap_jpath_key(p, path, "spec"), spec));
  if (*digest != have || (name_counts && strcmp(*name, have_name) != 0))
    return hap_jr_fail(
        jr, HAP_EINVAL, path,
        "made for %s '%s' digest %016llx, this %s '%s' has digest %016llx; re-run hap-synth", what,
        hap_json_quote(*name, b), (unsigned long long)*digest, what, have_name,
        (unsigned long long)have);
  return HAP_OK;
}

static hap_status read_devices(hap_jr *jr, const json_t *root, const hap_cluster *c) {
  json_t *obj = json_object_get(root, "cluster"), *arr;
  HAP_TRY(
      hap_jr_member(jr, obj, "cluster", "devices", true, "the device names in rank order", &arr));
  HAP_TRY(hap_jr_want_type(jr, arr, JSON_ARRAY, "cluster.devices", "an array of device names"));
  if (json_array_size(arr) != (size_t)c->n_devices)
    return hap_jr_fail(jr, HAP_EPARSE, "cluster.devices",
                       "has %zu entries, expected %d (the devices of cluster '%s')",
                       json_array_size(arr), c->n_devices, c->name);
  for (int32_t i = 0; i < c->n_devices; i++) {
    hap_jpath p;
    hap_jquote b;
    const char *s;
    HAP_TRY(hap_jr_want_name(jr, json_array_get(arr, (size_t)i),
                             hap_jpath_index(p, "cluster.devices", (size_t)i), &s));
    if (strcmp(s, c->devices[i].name) != 0)
      return hap_jr_fail(jr, HAP_EPARSE, p, "is '%s', expected '%s' (device %d of cluster '%s')",
                         hap_json_quote(s, b), c->devices[i].name, i, c->name);
  }
  return HAP_OK;
}

hap_status hap_plan_read_refs(hap_jr *jr, const json_t *root, const hap_graph *g,
                              const hap_cluster *c, hap_plan_refs *out) {
  json_t *m;
  uint64_t have_g, have_c;
  HAP_TRY(hap_jr_member(jr, root, "", "strategy", true, "the strategy that made the plan", &m));
  HAP_TRY(hap_jr_want_name(jr, m, "strategy", &out->strategy));
  hap_err e = {0};
  hap_status st = hap_graph_digest(g, &have_g, &e);
  if (st == HAP_OK)
    st = hap_cluster_digest(c, &have_c, &e);
  if (st != HAP_OK)
    return hap_err_set(jr->err, st, "%s: %s", jr->label, e.msg);
  HAP_TRY(read_ref(jr, root, "graph", "graph", g->name, true, have_g, &out->graph_name,
                   &out->graph_digest, &out->model_spec));
  HAP_TRY(read_ref(jr, root, "cluster", "cluster", c->name, false, have_c, &out->cluster_name,
                   &out->cluster_digest, &out->cluster_spec));
  static const char *const gkeys[] = {"name", "digest", "spec", NULL};
  static const char *const ckeys[] = {"name", "digest", "devices", "spec", NULL};
  HAP_TRY(
      hap_jr_check_keys(jr, json_object_get(root, "graph"), "graph", gkeys, "name, digest, spec"));
  HAP_TRY(hap_jr_check_keys(jr, json_object_get(root, "cluster"), "cluster", ckeys,
                            "name, digest, devices, spec"));
  return read_devices(jr, root, c);
}

/* "replicas" (optional): the plan's groups, and one replica's graph for the steps' shapes. */
static hap_status read_replicas(reader *r, const json_t *root) {
  r->lg = r->g;
  json_t *m;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "replicas", false, NULL, &m));
  if (m == NULL)
    return HAP_OK;
  int64_t n = 1;
  HAP_TRY(hap_jr_want_int(&r->jr, m, "replicas", 1, r->p->n_devices,
                          "a number of device groups >= 1", &n));
  hap_err e = {0};
  if (hap_plan_set_replicas(r->p, (int32_t)n, &e) != HAP_OK)
    return hap_jr_fail(&r->jr, e.status, "replicas", "%lld, expected a divisor of the %d devices",
                       (long long)n, r->p->n_devices);
  return HAP_OK;
}

/* "policy" (optional): every field, each checked as the spec parser checks it. */
static hap_status read_policy(reader *r, const json_t *root) {
  static const char *const keys[] = {"precision",     "optimizer",  "zero", "recompute",
                                     "micro_batches", "grad_accum", NULL};
  static const bool numeric[] = {false, false, true, false, true, false};
  json_t *obj;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "policy", false, NULL, &obj));
  if (obj == NULL)
    return HAP_OK;
  const char *want = "a training policy {\"precision\", \"optimizer\", \"zero\", "
                     "\"recompute\", \"micro_batches\", \"grad_accum\"}";
  HAP_TRY(hap_jr_want_type(&r->jr, obj, JSON_OBJECT, "policy", want));
  HAP_TRY(hap_jr_check_keys(&r->jr, obj, "policy", keys,
                            "precision, optimizer, zero, recompute, micro_batches, grad_accum"));
  hap_train_policy pol = hap_policy_default();
  for (int i = 0; keys[i] != NULL; i++) {
    json_t *m;
    hap_jpath p;
    hap_jpath_key(p, "policy", keys[i]);
    HAP_TRY(hap_jr_member(&r->jr, obj, "policy", keys[i], true,
                          numeric[i] ? "an integer" : "a name", &m));
    char value[64];
    if (numeric[i]) {
      int64_t v;
      HAP_TRY(hap_jr_want_int(&r->jr, m, p, INT32_MIN, INT32_MAX, "an integer", &v));
      snprintf(value, sizeof value, "%lld", (long long)v);
    } else {
      const char *str;
      HAP_TRY(hap_jr_want_text(&r->jr, m, p, "a name", &str));
      hap_jquote b;
      snprintf(value, sizeof value, "%s", hap_json_quote(str, b));
    }
    hap_err e = {0};
    if (hap_policy_set(&pol, keys[i], value, &e) != HAP_OK) {
      /* "policy: unknown precision 'x', expected ..." -> "<file>: policy.precision: ..." */
      const char *why = strncmp(e.msg, "policy: ", 8) == 0 ? e.msg + 8 : e.msg;
      return hap_jr_fail(&r->jr, HAP_EPARSE, p, "%s", why);
    }
  }
  r->p->policy = pol;
  return HAP_OK;
}

/* The graph the steps' shapes come from: one micro-batch of one replica. */
static hap_status step_graph(reader *r) {
  hap_err e = {0};
  if (hap_plan_step_graph(r->p, r->g, &r->split, &e) != HAP_OK) {
    bool micro = r->p->policy.micro_batches > 1;
    const char *field = micro ? "policy" : "replicas", *why = e.msg;
    if (strncmp(why, field, strlen(field)) == 0 && strncmp(why + strlen(field), ": ", 2) == 0)
      why += strlen(field) + 2; /* the path names the field already */
    return hap_jr_fail(&r->jr, HAP_EINVAL, field, "%s", why);
  }
  r->lg = r->split != NULL ? r->split : r->g;
  return HAP_OK;
}

/* Header, strategy, graph and cluster; then the plan is created. */
static hap_status read_top(reader *r, const json_t *root) {
  HAP_TRY(read_header(r, root));
  hap_plan_refs refs;
  HAP_TRY(hap_plan_read_refs(&r->jr, root, r->g, r->c, &refs));
  r->p = hap_plan_create(refs.strategy, refs.graph_name, refs.graph_digest, refs.cluster_name,
                         refs.cluster_digest, r->c->n_devices, r->g->n_segments);
  r->lengths = calloc((size_t)r->g->n_segments, sizeof(json_t *));
  if (r->p == NULL || r->lengths == NULL ||
      hap_plan_specs_set(&r->p->specs, refs.model_spec, refs.cluster_spec) != HAP_OK)
    return hap_err_set(r->jr.err, HAP_ENOMEM, "%s: out of memory", r->jr.label);
  HAP_TRY(read_replicas(r, root));
  HAP_TRY(read_policy(r, root));
  return step_graph(r);
}

/* ---- segments ------------------------------------------------------------------------------- */

static hap_status read_segment(reader *r, const json_t *v, size_t s) {
  static const char *const keys[] = {"ratios", "lengths", NULL};
  hap_jpath path, p;
  hap_jpath_index(path, "segments", s);
  HAP_TRY(
      hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, "a segment object {\"ratios\", \"lengths\"}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys, "ratios, lengths"));
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "ratios", true, "an array of per-device ratios", &arr));
  hap_jpath_key(p, path, "ratios");
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, p, "an array of per-device ratios"));
  int32_t n = r->p->group_size;
  if (json_array_size(arr) != (size_t)n)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "has %zu entries, expected %d (one per device%s)",
                       json_array_size(arr), n, r->p->replicas > 1 ? " of a group" : "");
  for (int32_t i = 0; i < n; i++) {
    hap_jpath pi;
    HAP_TRY(hap_jr_want_num(&r->jr, json_array_get(arr, (size_t)i),
                            hap_jpath_index(pi, p, (size_t)i), "a ratio (a number >= 0)",
                            &r->p->ratios[s * (size_t)n + (size_t)i]));
  }
  HAP_TRY(hap_jr_member(&r->jr, v, path, "lengths", false, NULL, &r->lengths[s]));
  if (r->lengths[s] != NULL)
    HAP_TRY(hap_jr_want_type(&r->jr, r->lengths[s], JSON_OBJECT, hap_jpath_key(p, path, "lengths"),
                             "an object {\"EXTENT\": [per-device lengths]}"));
  return HAP_OK;
}

static hap_status read_segments(reader *r, const json_t *root) {
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "segments", true, "an array of segments", &arr));
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "segments", "an array of segments"));
  if (json_array_size(arr) != (size_t)r->g->n_segments)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "segments",
                       "has %zu entries, expected %d (the segments of graph '%s')",
                       json_array_size(arr), r->g->n_segments, r->g->name);
  for (size_t s = 0; s < json_array_size(arr); s++)
    HAP_TRY(read_segment(r, json_array_get(arr, s), s));
  return HAP_OK;
}

/* ---- steps ---------------------------------------------------------------------------------- */

static hap_status read_tensor(reader *r, const json_t *v, const char *path, int32_t *out) {
  json_t *m;
  const char *s;
  hap_jpath p;
  hap_jquote b;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "tensor", true, "a tensor name", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "tensor"), "a tensor name", &s));
  *out = hap_graph_find_tensor(r->g, s);
  if (*out < 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "unknown tensor '%s', expected a tensor of graph '%s'", hap_json_quote(s, b),
                       r->g->name);
  return HAP_OK;
}

static hap_status parse_layout(reader *r, const json_t *v, const char *path, hap_layout *out) {
  const char *s;
  hap_jquote b;
  HAP_TRY(hap_jr_want_str(&r->jr, v, path, "a layout: I, R or G0..G7", &s));
  if (hap_layout_parse(s, out) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "unknown layout '%s', expected I, R or G0..G7",
                       hap_json_quote(s, b));
  return HAP_OK;
}

static hap_status layout_member(reader *r, const json_t *v, const char *path, const char *key,
                                hap_layout *out) {
  json_t *m;
  hap_jpath p;
  HAP_TRY(hap_jr_member(&r->jr, v, path, key, true, "a layout: I, R or G0..G7", &m));
  return parse_layout(r, m, hap_jpath_key(p, path, key), out);
}

/* Optional integer member in [lo, hi]; *out keeps its value when absent. */
static hap_status opt_int(reader *r, const json_t *v, const char *path, const char *key, int64_t lo,
                          int64_t hi, const char *expected, int64_t *out) {
  json_t *m = json_object_get(v, key);
  hap_jpath p;
  return m == NULL ? HAP_OK
                   : hap_jr_want_int(&r->jr, m, hap_jpath_key(p, path, key), lo, hi, expected, out);
}

static hap_status read_source(reader *r, const json_t *v, const char *path, hap_step *s) {
  static const char *const keys[] = {"kind",    "tensor",  "storage",     "to",
                                     "granule", "segment", "predicted_s", NULL};
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys,
                            "kind, tensor, storage, to, granule, segment, predicted_s"));
  HAP_TRY(read_tensor(r, v, path, &s->tensor));
  json_t *m;
  const char *str;
  hap_jpath p;
  hap_jquote b;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "storage", true, "input, replicated, sharded, zero or sfb",
                        &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "storage"), "a storage name", &str));
  if (hap_storage_parse(str, &s->storage) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "unknown storage '%s', expected input, replicated, sharded, zero or sfb",
                       hap_json_quote(str, b));
  return layout_member(r, v, path, "to", &s->to);
}

static hap_status read_comm(reader *r, const json_t *v, const char *path, hap_step *s) {
  static const char *const keys[] = {"kind", "tensor",       "op",      "from",    "to",
                                     "impl", "from_segment", "granule", "segment", "predicted_s",
                                     NULL};
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys,
                            "kind, tensor, op, from, to, impl, from_segment, granule, segment, "
                            "predicted_s"));
  HAP_TRY(read_tensor(r, v, path, &s->tensor));
  json_t *m;
  const char *str;
  hap_jpath p;
  hap_jquote b;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "op", true, "a communication op", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "op"), "a communication op", &str));
  if (hap_comm_op_parse(str, &s->comm) != HAP_OK)
    return hap_jr_fail(
        &r->jr, HAP_EPARSE, p,
        "unknown op '%s', expected all_gather, reduce_scatter, all_reduce, all_to_all, "
        "slice or keep_once",
        hap_json_quote(str, b));
  HAP_TRY(layout_member(r, v, path, "from", &s->from));
  HAP_TRY(layout_member(r, v, path, "to", &s->to));
  HAP_TRY(hap_jr_member(&r->jr, v, path, "impl", true, "an implementation such as \"ring\"", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "impl"),
                          "an implementation such as \"ring\"", &str));
  if (hap_coll_impl_parse(str, &s->impl) != HAP_OK)
    return hap_jr_fail(
        &r->jr, HAP_EPARSE, p,
        "unknown impl '%s', expected auto, ring, tree, hierarchical, pairwise or grouped",
        hap_json_quote(str, b));
  int64_t from_segment = s->segment;
  char want[64];
  snprintf(want, sizeof want, "a segment 0..%d", r->p->n_segments - 1);
  HAP_TRY(opt_int(r, v, path, "from_segment", 0, r->p->n_segments - 1, want, &from_segment));
  s->from_segment = (int32_t)from_segment;
  return HAP_OK;
}

/* "flags": names; "once": input indices. */
static hap_status read_flags(reader *r, const json_t *v, const char *path, int n_in,
                             hap_variant *var) {
  json_t *m = json_object_get(v, "flags");
  hap_jpath p, pi;
  hap_jquote b;
  if (m != NULL) {
    hap_jpath_key(p, path, "flags");
    HAP_TRY(hap_jr_want_type(&r->jr, m, JSON_ARRAY, p, "an array of flag names"));
    for (size_t i = 0; i < json_array_size(m); i++) {
      const char *s;
      int f = 0;
      HAP_TRY(hap_jr_want_str(&r->jr, json_array_get(m, i), hap_jpath_index(pi, p, i),
                              "a flag name", &s));
      while (f < N_FLAGS && strcmp(s, flag_names[f]) != 0)
        f++;
      if (f == N_FLAGS)
        return hap_jr_fail(&r->jr, HAP_EPARSE, pi,
                           "unknown flag '%s', expected bias_once, global_count, global_mask or "
                           "local_rows",
                           hap_json_quote(s, b));
      var->flags |= (uint8_t)(1u << f);
    }
  }
  if ((m = json_object_get(v, "once")) != NULL) {
    hap_jpath_key(p, path, "once");
    HAP_TRY(hap_jr_want_type(&r->jr, m, JSON_ARRAY, p, "an array of input indices"));
    char want[64];
    snprintf(want, sizeof want, "an input index 0..%d", n_in - 1);
    for (size_t i = 0; i < json_array_size(m); i++) {
      int64_t idx = 0;
      HAP_TRY(hap_jr_want_int(&r->jr, json_array_get(m, i), hap_jpath_index(pi, p, i), 0, n_in - 1,
                              want, &idx));
      var->once |= (uint8_t)(1u << idx);
    }
  }
  return HAP_OK;
}

/* "inputs" or "outputs": exactly n layouts. */
static hap_status read_layouts(reader *r, const json_t *v, const char *path, const char *key, int n,
                               const char *node, hap_layout *out) {
  json_t *m;
  hap_jpath p, pi;
  HAP_TRY(hap_jr_member(&r->jr, v, path, key, true, "an array of layouts", &m));
  hap_jpath_key(p, path, key);
  HAP_TRY(hap_jr_want_type(&r->jr, m, JSON_ARRAY, p, "an array of layouts"));
  if (json_array_size(m) != (size_t)n)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "has %zu entries, expected %d (the %s of node '%s')",
                       json_array_size(m), n, key, node);
  for (int i = 0; i < n; i++)
    HAP_TRY(
        parse_layout(r, json_array_get(m, (size_t)i), hap_jpath_index(pi, p, (size_t)i), &out[i]));
  return HAP_OK;
}

/* Index in `offered` (filled) of the variant with v's layouts, granule, flags and once; -1. */
static int find_variant(const hap_graph *g, int32_t node, const hap_variant *v,
                        hap_variant offered[HAP_MAX_VARIANTS]) {
  const hap_node *nd = &g->nodes[node];
  hap_op_io io;
  hap_graph_node_io(g, node, &io);
  int n = hap_op_variants(nd->op, &io, offered, HAP_MAX_VARIANTS);
  for (int i = 0; i < n; i++) {
    const hap_variant *o = &offered[i];
    bool eq = o->granule == v->granule && o->flags == v->flags && o->once == v->once;
    for (int k = 0; eq && k < nd->n_inputs; k++)
      eq = o->in[k] == v->in[k];
    for (int k = 0; eq && k < nd->n_outputs; k++)
      eq = o->out[k] == v->out[k];
    if (eq)
      return i;
  }
  return -1;
}

/* The variant the layouts select among the op's; the file's name must be its name. A variant the
 * op does not offer is kept (without a name) for hap_plan_validate to report. */
static hap_status match_variant(reader *r, const json_t *v, const char *path, hap_step *s) {
  json_t *m;
  const char *name;
  hap_jpath p;
  hap_jquote b;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "variant", true, "the variant's name", &m));
  HAP_TRY(hap_jr_want_name(&r->jr, m, hap_jpath_key(p, path, "variant"), &name));
  hap_variant offered[HAP_MAX_VARIANTS];
  int i = find_variant(r->lg, s->node, &s->variant, offered);
  if (i < 0) {
    s->variant.name = NULL;
    return HAP_OK;
  }
  if (strcmp(name, offered[i].name) != 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "is '%s', but these layouts are op %s's variant '%s', expected that name",
                       hap_json_quote(name, b), hap_op_name(r->g->nodes[s->node].op),
                       offered[i].name);
  s->variant = offered[i];
  return HAP_OK;
}

static hap_status read_compute(reader *r, const json_t *v, const char *path, hap_step *s) {
  static const char *const keys[] = {"kind",    "node",        "variant", "inputs",
                                     "outputs", "granule",     "flags",   "once",
                                     "segment", "predicted_s", NULL};
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys,
                            "kind, node, variant, inputs, outputs, granule, flags, once, segment, "
                            "predicted_s"));
  json_t *m;
  const char *str;
  hap_jpath p;
  hap_jquote b;
  HAP_TRY(hap_jr_member(&r->jr, v, path, "node", true, "a node name", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "node"), "a node name", &str));
  s->node = hap_graph_find_node(r->g, str);
  if (s->node < 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "unknown node '%s', expected a node of graph '%s'",
                       hap_json_quote(str, b), r->g->name);
  const hap_node *node = &r->g->nodes[s->node];
  hap_variant *var = &s->variant;
  HAP_TRY(read_layouts(r, v, path, "inputs", node->n_inputs, node->name, var->in));
  HAP_TRY(read_layouts(r, v, path, "outputs", node->n_outputs, node->name, var->out));
  var->granule = 1;
  HAP_TRY(opt_int(r, v, path, "granule", 1, INT64_MAX, "a granule >= 1", &var->granule));
  HAP_TRY(read_flags(r, v, path, node->n_inputs, var));
  return match_variant(r, v, path, s);
}

static hap_status read_step(reader *r, const json_t *v, size_t k) {
  hap_jpath path, p;
  hap_jquote b;
  hap_jpath_index(path, "steps", k);
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, "a step object {\"kind\", ...}"));
  json_t *m;
  const char *str;
  hap_step s = {.tensor = -1, .node = -1, .granule = 1};
  HAP_TRY(hap_jr_member(&r->jr, v, path, "kind", true, "source, compute or comm", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "kind"), "a step kind", &str));
  if (hap_step_kind_parse(str, &s.kind) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "unknown kind '%s', expected source, compute or comm",
                       hap_json_quote(str, b));
  int64_t segment = 0;
  char want[64];
  snprintf(want, sizeof want, "a segment 0..%d", r->p->n_segments - 1);
  HAP_TRY(hap_jr_member(&r->jr, v, path, "segment", true, want, &m));
  HAP_TRY(hap_jr_want_int(&r->jr, m, hap_jpath_key(p, path, "segment"), 0, r->p->n_segments - 1,
                          want, &segment));
  s.segment = s.from_segment = (int32_t)segment;
  HAP_TRY(num_member(r, v, path, "predicted_s", "a time in seconds", &s.predicted_s));
  if (s.kind != HAP_STEP_COMPUTE)
    HAP_TRY(opt_int(r, v, path, "granule", 1, INT64_MAX, "a granule >= 1", &s.granule));
  switch (s.kind) {
  case HAP_STEP_SOURCE: HAP_TRY(read_source(r, v, path, &s)); break;
  case HAP_STEP_COMPUTE: HAP_TRY(read_compute(r, v, path, &s)); break;
  case HAP_STEP_COMM: HAP_TRY(read_comm(r, v, path, &s)); break;
  case HAP_STEP_KIND_COUNT: break;
  }
  hap_err e = {0};
  if (hap_plan_add_step(r->p, &s, &e) != HAP_OK)
    return hap_err_set(r->jr.err, HAP_ENOMEM, "%s: %s", r->jr.label, e.msg);
  return HAP_OK;
}

static hap_status read_steps(reader *r, const json_t *root) {
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "steps", true, "an array of steps", &arr));
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "steps", "an array of steps"));
  if (json_array_size(arr) > INT32_MAX / 2)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "steps", "too many steps");
  for (size_t k = 0; k < json_array_size(arr); k++)
    HAP_TRY(read_step(r, json_array_get(arr, k), k));
  return HAP_OK;
}

/* ---- predictions ---------------------------------------------------------------------------- */

/* predicted.devices[i].memory: on every device or on none (the first device decides). */
static hap_status read_memory(reader *r, const json_t *d, const char *path, int32_t i) {
  static const char *const keys[] = {
      "parameters",   "gradients", "optimizer",         "activations",
      "comm_buffers", "workspace", "recompute_working", NULL};
  const char *want = "memory_bytes by component {\"parameters\", \"gradients\", \"optimizer\", "
                     "\"activations\", \"comm_buffers\", \"workspace\"}";
  json_t *m;
  hap_jpath p;
  HAP_TRY(hap_jr_member(&r->jr, d, path, "memory", i > 0 && r->p->memory_recorded, want, &m));
  if (m == NULL)
    return HAP_OK;
  if (i > 0 && !r->p->memory_recorded)
    return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(p, path, "memory"),
                       "present, but predicted.devices[0] has none: expected it on every device "
                       "or on none");
  hap_jpath_key(p, path, "memory");
  HAP_TRY(hap_jr_want_type(&r->jr, m, JSON_OBJECT, p, want));
  HAP_TRY(hap_jr_check_keys(&r->jr, m, p, keys,
                            "parameters, gradients, optimizer, activations, comm_buffers, "
                            "workspace, recompute_working"));
  hap_memory_breakdown *mb = &r->p->device_memory[i];
  for (int k = 0; k < HAP_MEMORY_PARTS; k++)
    HAP_TRY(num_member(r, m, p, hap_memory_part_name(k), "a byte count", hap_memory_part(mb, k)));
  if (json_object_get(m, "recompute_working") != NULL) {
    HAP_TRY(num_member(r, m, p, "recompute_working", "a byte count", &mb->recompute_working));
    if (!(mb->recompute_working >= 0) || mb->recompute_working > mb->activations) {
      hap_jpath q;
      return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(q, p, "recompute_working"),
                         "%.17g, expected a byte count >= 0 and at most activations (%.17g): "
                         "the working set is part of them",
                         mb->recompute_working, mb->activations);
    }
  }
  r->p->memory_recorded = true;
  return HAP_OK;
}

static hap_status read_predicted(reader *r, const json_t *root) {
  static const char *const keys[] = {"iteration_s", "devices", NULL};
  static const char *const dkeys[] = {"compute_s", "comm_s", "memory_bytes", "memory", NULL};
  json_t *obj, *arr;
  hap_plan *pl = r->p;
  HAP_TRY(
      hap_jr_member(&r->jr, root, "", "predicted", true, "{\"iteration_s\", \"devices\"}", &obj));
  HAP_TRY(
      hap_jr_want_type(&r->jr, obj, JSON_OBJECT, "predicted", "{\"iteration_s\", \"devices\"}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, obj, "predicted", keys, "iteration_s, devices"));
  HAP_TRY(num_member(r, obj, "predicted", "iteration_s", "a time in seconds",
                     &pl->predicted_iteration_s));
  HAP_TRY(hap_jr_member(&r->jr, obj, "predicted", "devices", true,
                        "an array of per-device predictions", &arr));
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "predicted.devices",
                           "an array of per-device predictions"));
  if (json_array_size(arr) != (size_t)pl->n_devices)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "predicted.devices",
                       "has %zu entries, expected %d (one per device)", json_array_size(arr),
                       pl->n_devices);
  for (int32_t i = 0; i < pl->n_devices; i++) {
    hap_jpath p;
    json_t *d = json_array_get(arr, (size_t)i);
    hap_jpath_index(p, "predicted.devices", (size_t)i);
    HAP_TRY(hap_jr_want_type(&r->jr, d, JSON_OBJECT, p,
                             "{\"compute_s\", \"comm_s\", \"memory_bytes\"}"));
    HAP_TRY(hap_jr_check_keys(&r->jr, d, p, dkeys, "compute_s, comm_s, memory_bytes, memory"));
    HAP_TRY(num_member(r, d, p, "compute_s", "a time in seconds", &pl->device_compute_s[i]));
    HAP_TRY(num_member(r, d, p, "comm_s", "a time in seconds", &pl->device_comm_s[i]));
    HAP_TRY(num_member(r, d, p, "memory_bytes", "a byte count", &pl->device_memory_bytes[i]));
    HAP_TRY(read_memory(r, d, p, i));
  }
  return HAP_OK;
}

/* ---- lengths -------------------------------------------------------------------------------- */

/* "EXTENT" or "EXTENT/GRANULE" with positive decimal numbers (no sign, no leading zero). */
static bool parse_lkey(const char *s, int64_t *extent, int64_t *granule) {
  int64_t *part[2] = {extent, granule};
  *granule = 1;
  for (int k = 0; k < 2; k++) {
    int64_t v = 0;
    int n = 0;
    for (; s[n] >= '0' && s[n] <= '9'; n++)
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[n] - '0', &v))
        return false;
    if (n == 0 || s[0] == '0')
      return false;
    *part[k] = v;
    s += n;
    if (*s == '\0')
      return true;
    if (k == 1 || *s++ != '/')
      return false;
  }
  return false;
}

/* "8, 16/4" or "none": the keys of segment `seg`. */
static const char *lkeys_str(const lkey *keys, int32_t n, int32_t seg, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i < n && o < len; i++) {
    char kb[48];
    if (keys[i].segment == seg)
      o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "",
                            lkey_name(&keys[i], kb, sizeof kb));
  }
  if (o == 0)
    snprintf(buf, len, "none");
  return buf;
}

/* The file's lengths of one key against the ratios. */
static hap_status check_one_length(reader *r, const json_t *arr, const char *path, const lkey *k,
                                   int64_t *want, int64_t *got) {
  const hap_plan *p = r->p;
  int32_t n = p->group_size;
  HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, path, "an array of per-device lengths"));
  if (json_array_size(arr) != (size_t)n)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "has %zu entries, expected %d (one per device)",
                       json_array_size(arr), n);
  for (int32_t i = 0; i < n; i++) {
    hap_jpath pi;
    HAP_TRY(hap_jr_want_int(&r->jr, json_array_get(arr, (size_t)i),
                            hap_jpath_index(pi, path, (size_t)i), 0, INT64_MAX, "a length >= 0",
                            &got[i]));
  }
  hap_err e = {0};
  hap_status st = hap_shard_lengths(k->extent, k->granule,
                                    &p->ratios[(size_t)k->segment * (size_t)n], n, want, &e);
  if (st != HAP_OK)
    return hap_jr_fail(&r->jr, st, path, "%s", e.msg);
  if (memcmp(want, got, (size_t)n * sizeof *want) != 0) {
    char gb[160], wb[160];
    return hap_jr_fail(&r->jr, HAP_EINVAL, path, "%s does not match the ratios, expected %s",
                       ints_str(got, n, gb, sizeof gb), ints_str(want, n, wb, sizeof wb));
  }
  return HAP_OK;
}

/* Segment `seg`'s "lengths": exactly the keys the steps shard, each matching the ratios. */
static hap_status check_segment_lengths(reader *r, const lkey *keys, int32_t n_keys, int32_t seg,
                                        int64_t *want, int64_t *got) {
  const json_t *obj = r->lengths[seg];
  hap_jpath path, p;
  char list[256];
  hap_jpath_key(path, hap_jpath_index(p, "segments", (size_t)seg), "lengths");
  for (int32_t i = 0; i < n_keys; i++) {
    char kb[48];
    if (keys[i].segment != seg)
      continue;
    json_t *arr = json_object_get(obj, lkey_name(&keys[i], kb, sizeof kb));
    if (arr == NULL)
      return hap_jr_fail(
          &r->jr, HAP_EINVAL, path,
          "has no \"%s\", expected the lengths of every extent sharded in segment %d (%s)", kb, seg,
          lkeys_str(keys, n_keys, seg, list, sizeof list));
    HAP_TRY(check_one_length(r, arr, hap_jpath_key(p, path, kb), &keys[i], want, got));
  }
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)obj, key, val) {
    lkey k = {.segment = seg};
    bool known = parse_lkey(key, &k.extent, &k.granule);
    if (known && bsearch(&k, keys, (size_t)n_keys, sizeof k, lkey_cmp) != NULL)
      continue;
    hap_jquote b;
    return hap_jr_fail(&r->jr, HAP_EINVAL, hap_jpath_key(p, path, hap_json_quote(key, b)),
                       "no step shards %s in segment %d, expected only the keys: %s",
                       known ? "this extent" : "such a key (\"EXTENT\" or \"EXTENT/GRANULE\")", seg,
                       lkeys_str(keys, n_keys, seg, list, sizeof list));
  }
  return HAP_OK;
}

static hap_status check_lengths(reader *r) {
  lkey *keys;
  int32_t n;
  hap_err e = {0};
  if (collect_lengths(r->p, r->lg, &keys, &n, &e) != HAP_OK)
    return hap_err_set(r->jr.err, e.status, "%s: %s", r->jr.label, e.msg);
  int64_t *want = malloc(2 * (size_t)r->p->group_size * sizeof *want);
  hap_status st =
      want ? HAP_OK : hap_err_set(r->jr.err, HAP_ENOMEM, "%s: out of memory", r->jr.label);
  for (int32_t s = 0; st == HAP_OK && s < r->p->n_segments; s++)
    if (r->lengths[s] != NULL)
      st = check_segment_lengths(r, keys, n, s, want, want + r->p->group_size);
  free(want);
  free(keys);
  return st;
}

/* ---- reading: the whole file ---------------------------------------------------------------- */

static hap_status read_plan(reader *r, const json_t *root) {
  HAP_TRY(read_top(r, root));
  HAP_TRY(read_segments(r, root));
  HAP_TRY(read_steps(r, root));
  HAP_TRY(read_predicted(r, root));
  hap_err e = {0};
  hap_status st = hap_plan_validate(r->p, r->g, r->c, &e);
  if (st != HAP_OK)
    return hap_err_set(r->jr.err, st, "%s: %s", r->jr.label, e.msg);
  return check_lengths(r);
}

int hap_plan_version_major(const json_t *root) {
  const char *v = json_string_value(json_object_get(root, "version"));
  if (v == NULL)
    return 0;
  char *end = NULL;
  long major = strtol(v, &end, 10);
  return end != v && *end == '.' && major > 0 && major < 1000 ? (int)major : 0;
}

hap_status hap_plan_from_object(const json_t *root, const char *label, const hap_graph *g,
                                const hap_cluster *c, hap_plan **out, hap_err *err) {
  *out = NULL;
  reader r = {
      .jr = {.label = label ? label : "<json>", .err = err, .strict = true}, .g = g, .c = c};
  hap_status st;
  if (hap_plan_version_major(root) == HAP_PIPELINE_VERSION_MAJOR)
    st = hap_jr_fail(&r.jr, HAP_EINVAL, "version",
                     "a pipelined plan (format %d.x: \"stages\"), expected a one-stage plan "
                     "(format 1.x) here",
                     HAP_PIPELINE_VERSION_MAJOR);
  else
    st = read_plan(&r, root);
  free(r.lengths);
  hap_graph_destroy(r.split);
  if (st != HAP_OK) {
    hap_plan_destroy(r.p);
    hap_jr_one_line(err);
    return st;
  }
  *out = r.p;
  return HAP_OK;
}

hap_status hap_plan_from_json(const char *json, size_t len, const char *label, const hap_graph *g,
                              const hap_cluster *c, hap_plan **out, hap_err *err) {
  *out = NULL;
  hap_jr jr = {.label = label ? label : "<json>", .err = err, .strict = true};
  json_t *root;
  HAP_TRY(hap_jr_load(&jr, json, len, HAP_PLAN_FORMAT, &root));
  hap_status st = hap_plan_from_object(root, jr.label, g, c, out, err);
  json_decref(root);
  return st;
}

hap_status hap_plan_read_file(const char *path, const hap_graph *g, const hap_cluster *c,
                              hap_plan **out, hap_err *err) {
  char *data;
  size_t len;
  *out = NULL;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_status st = hap_plan_from_json(data, len, path, g, c, out, err);
  free(data);
  return st;
}

/* "PATH.spec" of root (optional) into *out (a copy; NULL when absent). */
static hap_status read_spec(hap_jr *jr, const json_t *root, const char *path, char **out) {
  json_t *obj = NULL, *m = NULL;
  const char *s = NULL;
  hap_jpath p;
  char want[96];
  snprintf(want, sizeof want, "the %s the plan was made for {\"name\", \"digest\", ...}", path);
  HAP_TRY(hap_jr_member(jr, root, "", path, true, want, &obj));
  HAP_TRY(hap_jr_want_type(jr, obj, JSON_OBJECT, path, want));
  HAP_TRY(hap_jr_member(jr, obj, path, "spec", false, NULL, &m));
  if (m == NULL)
    return HAP_OK;
  HAP_TRY(hap_jr_want_name(jr, m, hap_jpath_key(p, path, "spec"), &s));
  if ((*out = strdup(s)) == NULL)
    return hap_jr_oom(jr);
  return HAP_OK;
}

hap_status hap_plan_file_specs(const char *path, hap_plan_specs *out, hap_err *err) {
  *out = (hap_plan_specs){0};
  char *data;
  size_t len;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_jr jr = {.label = path, .err = err, .strict = true};
  json_t *root = NULL;
  hap_status st = hap_jr_load(&jr, data, len, HAP_PLAN_FORMAT, &root);
  free(data);
  if (st == HAP_OK)
    st = read_spec(&jr, root, "graph", &out->model);
  if (st == HAP_OK)
    st = read_spec(&jr, root, "cluster", &out->cluster);
  json_decref(root);
  if (st != HAP_OK)
    hap_plan_specs_free(out);
  return st;
}

hap_status hap_plan_default_specs(const char *path, const char **model, const char **cluster,
                                  const char *model_hint, const char *cluster_hint,
                                  hap_plan_specs *specs, hap_err *err) {
  *specs = (hap_plan_specs){0};
  if (*model != NULL && *cluster != NULL)
    return HAP_OK;
  HAP_TRY(hap_plan_file_specs(path, specs, err));
  bool no_model = *model == NULL && specs->model == NULL;
  if (no_model || (*cluster == NULL && specs->cluster == NULL)) {
    hap_plan_specs_free(specs);
    return hap_err_set(err, HAP_EINVAL,
                       "%s: the plan does not record its %s (made by an older hap-synth, or "
                       "edited): give %s",
                       path, no_model ? "model" : "cluster", no_model ? model_hint : cluster_hint);
  }
  if (*model == NULL)
    *model = specs->model;
  if (*cluster == NULL)
    *cluster = specs->cluster;
  return HAP_OK;
}

/* ---- writer --------------------------------------------------------------------------------- */

static void write_layout(hap_jw *w, hap_layout l) {
  char b[4];
  hap_jw_str(w, hap_layout_name(l, b));
}

static void write_layouts(hap_jw *w, const hap_layout *l, int n) {
  hap_jw_begin_array_inline(w);
  for (int i = 0; i < n; i++)
    write_layout(w, l[i]);
  hap_jw_end_array(w);
}

/* The name of the offered variant that step `s` (validated) uses. */
static const char *variant_name(const hap_graph *g, const hap_step *s) {
  hap_variant offered[HAP_MAX_VARIANTS];
  int i = find_variant(g, s->node, &s->variant, offered);
  return i >= 0 ? offered[i].name : "?";
}

static void write_compute(hap_jw *w, const hap_graph *g, const hap_step *s) {
  const hap_node *node = &g->nodes[s->node];
  hap_jw_key(w, "node");
  hap_jw_str(w, node->name);
  hap_jw_key(w, "variant");
  hap_jw_str(w, variant_name(g, s));
  hap_jw_key(w, "inputs");
  write_layouts(w, s->variant.in, node->n_inputs);
  hap_jw_key(w, "outputs");
  write_layouts(w, s->variant.out, node->n_outputs);
  hap_jw_key(w, "granule");
  hap_jw_int(w, s->variant.granule);
  hap_jw_key(w, "flags");
  hap_jw_begin_array_inline(w);
  for (int f = 0; f < N_FLAGS; f++)
    if (s->variant.flags & (1u << f))
      hap_jw_str(w, flag_names[f]);
  hap_jw_end_array(w);
  if (s->variant.once != 0) {
    hap_jw_key(w, "once");
    hap_jw_begin_array_inline(w);
    for (int i = 0; i < 8; i++)
      if (s->variant.once & (1u << i))
        hap_jw_int(w, i);
    hap_jw_end_array(w);
  }
}

static void write_step(hap_jw *w, const hap_graph *g, const hap_step *s) {
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "kind");
  hap_jw_str(w, hap_step_kind_name(s->kind));
  bool gather = s->to >= 0;
  if (s->kind == HAP_STEP_COMPUTE) {
    write_compute(w, g, s);
  } else {
    hap_jw_key(w, "tensor");
    hap_jw_str(w, g->tensors[s->tensor].name);
  }
  if (s->kind == HAP_STEP_SOURCE) {
    hap_jw_key(w, "storage");
    hap_jw_str(w, hap_storage_name(s->storage));
  } else if (s->kind == HAP_STEP_COMM) {
    hap_jw_key(w, "op");
    hap_jw_str(w, hap_comm_op_name(s->comm));
    hap_jw_key(w, "from");
    write_layout(w, s->from);
    gather = gather || s->from >= 0;
  }
  if (s->kind != HAP_STEP_COMPUTE) {
    hap_jw_key(w, "to");
    write_layout(w, s->to);
  }
  if (s->kind == HAP_STEP_COMM) {
    hap_jw_key(w, "impl");
    hap_jw_str(w, hap_coll_impl_name(s->impl));
    if (s->from_segment != s->segment) {
      hap_jw_key(w, "from_segment");
      hap_jw_int(w, s->from_segment);
    }
  }
  if (s->kind != HAP_STEP_COMPUTE && gather && s->granule > 1) {
    hap_jw_key(w, "granule");
    hap_jw_int(w, s->granule);
  }
  hap_jw_key(w, "segment");
  hap_jw_int(w, s->segment);
  hap_jw_key(w, "predicted_s");
  hap_jw_double(w, s->predicted_s);
  hap_jw_end_object(w);
}

void hap_plan_write_refs(hap_jw *w, int major, int minor, const char *strategy,
                         uint64_t graph_digest, uint64_t cluster_digest,
                         const hap_plan_specs *specs, const hap_graph *g, const hap_cluster *c) {
  char version[32], digest[24];
  snprintf(version, sizeof version, "%d.%d", major, minor);
  hap_jw_key(w, "format");
  hap_jw_str(w, HAP_PLAN_FORMAT);
  hap_jw_key(w, "version");
  hap_jw_str(w, version);
  hap_jw_key(w, "strategy");
  hap_jw_str(w, strategy);
  hap_jw_key(w, "graph");
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "name");
  hap_jw_str(w, g->name);
  hap_jw_key(w, "digest");
  snprintf(digest, sizeof digest, "%016llx", (unsigned long long)graph_digest);
  hap_jw_str(w, digest);
  if (specs->model != NULL) {
    hap_jw_key(w, "spec");
    hap_jw_str(w, specs->model);
  }
  hap_jw_end_object(w);
  hap_jw_key(w, "cluster");
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "name");
  hap_jw_str(w, c->name);
  hap_jw_key(w, "digest");
  snprintf(digest, sizeof digest, "%016llx", (unsigned long long)cluster_digest);
  hap_jw_str(w, digest);
  hap_jw_key(w, "devices");
  hap_jw_begin_array_inline(w);
  for (int32_t i = 0; i < c->n_devices; i++)
    hap_jw_str(w, c->devices[i].name);
  hap_jw_end_array(w);
  if (specs->cluster != NULL) {
    hap_jw_key(w, "spec");
    hap_jw_str(w, specs->cluster);
  }
  hap_jw_end_object(w);
}

/* One line per segment: its ratios and the lengths of every key it shards. */
static hap_status write_segments(hap_jw *w, const hap_plan *p, const lkey *keys, int32_t n_keys,
                                 hap_err *err) {
  int32_t n = p->group_size;
  int64_t *len = malloc((size_t)n * sizeof *len);
  if (len == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory writing the plan");
  hap_status st = HAP_OK;
  hap_jw_key(w, "segments");
  hap_jw_begin_array(w);
  for (int32_t s = 0; s < p->n_segments && st == HAP_OK; s++) {
    const double *r = &p->ratios[(size_t)s * (size_t)n];
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "ratios");
    hap_jw_begin_array_inline(w);
    for (int32_t i = 0; i < n; i++)
      hap_jw_double(w, r[i]);
    hap_jw_end_array(w);
    hap_jw_key(w, "lengths");
    hap_jw_begin_object_inline(w);
    for (int32_t k = 0; k < n_keys && st == HAP_OK; k++) {
      char kb[48];
      if (keys[k].segment != s)
        continue;
      st = hap_shard_lengths(keys[k].extent, keys[k].granule, r, n, len, err);
      hap_jw_key(w, lkey_name(&keys[k], kb, sizeof kb));
      hap_jw_begin_array_inline(w);
      for (int32_t i = 0; i < n && st == HAP_OK; i++)
        hap_jw_int(w, len[i]);
      hap_jw_end_array(w);
    }
    hap_jw_end_object(w);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
  free(len);
  return st;
}

/* Only a policy other than the default is written (default plans keep their bytes). */
static void write_policy(hap_jw *w, const hap_plan *p) {
  const hap_train_policy *pol = &p->policy;
  if (hap_policy_is_default(pol))
    return;
  hap_jw_key(w, "policy");
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "precision");
  hap_jw_str(w, hap_precision_name(pol->precision));
  hap_jw_key(w, "optimizer");
  hap_jw_str(w, hap_optimizer_name(pol->optimizer));
  hap_jw_key(w, "zero");
  hap_jw_int(w, pol->zero);
  hap_jw_key(w, "recompute");
  hap_jw_str(w, hap_recompute_name(pol->recompute));
  hap_jw_key(w, "micro_batches");
  hap_jw_int(w, pol->micro_batches);
  hap_jw_key(w, "grad_accum");
  hap_jw_str(w, hap_grad_accum_name(pol->grad_accum));
  hap_jw_end_object(w);
}

static void write_predicted(hap_jw *w, const hap_plan *p) {
  hap_jw_key(w, "predicted");
  hap_jw_begin_object(w);
  hap_jw_key(w, "iteration_s");
  hap_jw_double(w, p->predicted_iteration_s);
  hap_jw_key(w, "devices");
  hap_jw_begin_array(w);
  for (int32_t i = 0; i < p->n_devices; i++) {
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "compute_s");
    hap_jw_double(w, p->device_compute_s[i]);
    hap_jw_key(w, "comm_s");
    hap_jw_double(w, p->device_comm_s[i]);
    hap_jw_key(w, "memory_bytes");
    hap_jw_double(w, p->device_memory_bytes[i]);
    if (p->memory_recorded && !hap_policy_is_default(&p->policy)) {
      hap_jw_key(w, "memory");
      hap_jw_begin_object_inline(w);
      for (int k = 0; k < HAP_MEMORY_PARTS; k++) {
        hap_jw_key(w, hap_memory_part_name(k));
        hap_jw_double(w, hap_memory_part_get(&p->device_memory[i], k));
      }
      if (p->device_memory[i].recompute_working > 0) {
        hap_jw_key(w, "recompute_working");
        hap_jw_double(w, p->device_memory[i].recompute_working);
      }
      hap_jw_end_object(w);
    }
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
  hap_jw_end_object(w);
}

/* The strategy is written as it is: printable ASCII, so it always reads back. */
static hap_status check_strategy(const hap_plan *p, hap_err *err) {
  bool ok = p->strategy != NULL && p->strategy[0] != '\0';
  for (const char *s = p->strategy; ok && *s; s++)
    ok = *s >= 0x20 && *s < 0x7F;
  if (!ok)
    return hap_err_set(err, HAP_EINVAL,
                       "strategy: must be non-empty printable ASCII such as \"hap\"");
  return HAP_OK;
}

hap_status hap_plan_write_object(hap_jw *w, const hap_plan *p, const hap_graph *g,
                                 const hap_cluster *c, hap_err *err) {
  HAP_TRY(check_strategy(p, err));
  HAP_TRY(hap_plan_validate(p, g, c, err));
  lkey *keys;
  int32_t n_keys;
  hap_graph *split = NULL;
  HAP_TRY(hap_plan_step_graph(p, g, &split, err));
  const hap_graph *lg = split ? split : g; /* the steps' shapes */
  hap_status st = collect_lengths(p, lg, &keys, &n_keys, err);
  if (st != HAP_OK) {
    hap_graph_destroy(split);
    return st;
  }
  hap_jw_begin_object(w);
  hap_plan_write_refs(w, HAP_PLAN_VERSION_MAJOR, HAP_PLAN_VERSION_MINOR, p->strategy,
                      p->graph_digest, p->cluster_digest, &p->specs, g, c);
  if (p->replicas > 1) {
    hap_jw_key(w, "replicas");
    hap_jw_int(w, p->replicas);
  }
  write_policy(w, p);
  st = write_segments(w, p, keys, n_keys, err);
  free(keys);
  if (st != HAP_OK) {
    hap_graph_destroy(split);
    return st;
  }
  hap_jw_key(w, "steps");
  hap_jw_begin_array(w);
  for (int32_t k = 0; k < p->n_steps; k++)
    write_step(w, lg, &p->steps[k]);
  hap_graph_destroy(split);
  hap_jw_end_array(w);
  write_predicted(w, p);
  hap_jw_end_object(w);
  return HAP_OK;
}

hap_status hap_plan_write(const hap_plan *p, const hap_graph *g, const hap_cluster *c, FILE *f,
                          hap_err *err) {
  hap_jw w;
  hap_jw_init(&w, f, 2);
  HAP_TRY(hap_plan_write_object(&w, p, g, c, err));
  if (!hap_jw_finish(&w))
    return hap_err_set(err, HAP_EIO, "cannot write the plan for graph '%s': write failed", g->name);
  return HAP_OK;
}

hap_status hap_plan_write_file(const hap_plan *p, const hap_graph *g, const hap_cluster *c,
                               const char *path, hap_err *err) {
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  hap_err e = {0};
  hap_status st = hap_plan_write(p, g, c, af.f, &e);
  if (st != HAP_OK) {
    hap_atomic_abort(&af);
    return hap_err_set(err, st, "%s: %s", path, e.msg);
  }
  return hap_atomic_commit(&af, err);
}
