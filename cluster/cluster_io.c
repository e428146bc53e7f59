/* cluster_io.c — hap-cluster JSON files: reader (jansson), explicit-form writer (hap_jw), cluster
 * specs with parameters, and the lookup of bundled clusters.
 *
 * Format "hap-cluster", version "1.0". One JSON object (docs/clusters.md has examples):
 *   "format", "version"  required  "hap-cluster", "MAJOR.MINOR" (major > 1 refused: HAP_EVERSION)
 *   "name"               required  the cluster's name
 *   "doc", "source"      optional  free text; how the file was made
 *   "inter_latency_s"    optional  extra latency of every path between two hosts, s (default 0)
 *   "defaults"           optional  {"intra_host": LINK, "nic": LINK}: links of groups that omit
 * them "hosts"              required  non-empty array of host groups "links"              optional
 * per-pair overrides {"src", "dst", "bandwidth_Bps", "latency_s", "symmetric" (default false: src
 * -> dst only)} "collectives"        optional  fits {"kind", "ranks", "alpha_large_s",
 * "beta_large_Bps", "threshold_bytes" (default 0), "alpha_small_s", "beta_small_Bps" (default: the
 * large values)} or, for more pieces, {"kind", "ranks", "pieces": [{"below_bytes", "alpha_s",
 * "beta_Bps"}, ..., {"alpha_s", "beta_Bps"}]} (bounds increasing, the last piece unbounded) LINK:
 * {"bandwidth_Bps" (> 0, bytes/s per direction), "latency_s" (>= 0)}; a group's link takes each
 * value it omits from "defaults". Host group: {"name", "count" (default 1), "doc", "intra_host",
 * "nic", and either "device" (a preset name or a DEVICE) with "devices_per_host", or "devices" (an
 * array of DEVICEs that may carry a "name")}. Hosts are named NAME (count 1) or NAME-0 ..
 * NAME-(count-1); devices
 *   "<host>:<index>" unless named.
 * DEVICE: {"preset", "model", "kind" ("gpu" | "cpu"), "peak_flops" and "sustained_flops"
 *   ({dtype: FLOP/s >= 0}), "memory_bytes" (> 0), "memory_bw_Bps" (> 0, sustained), "launch_s"
 *   (>= 0), "update_bw_Bps" (>= 0: the SGD update's bytes/s, 12 per element; 0 or absent: priced
 *   at memory_bw_Bps), "gemm" ([{"m", "n", "k", "dtype", "flops_per_s"}]), "kernels" ([{"op",
 * "backward", "shape_key" ("0x" + hex), "seconds"}])}. With a preset every other key overrides one
 * value (nothing is rescaled); without one, sustained_flops, memory_bytes and memory_bw_Bps are
 *   required, kind defaults to gpu, launch_s to the kind's preset value, model to "custom", and a
 *   dtype without a peak takes its sustained rate as peak.
 * Spec parameters (hap_cluster_param_get) override values after defaults and groups are merged.
 * JSON: UTF-8, duplicate keys are errors; unknown keys are errors up to version 1.0 and ignored in
 *   newer minor versions. Errors: "<file>: <json path>: <what is wrong, what was expected>". */
#include "cluster/cluster_io.h"

#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/json_write.h"
#include "base/spec.h"
#include "base/utf8.h"
#include "base/vec.h"
#include "cluster/presets.h"

#define GROUP_MAX_HOSTS  65536   /* "count" of one host group */
#define HOST_MAX_DEVICES 4096    /* devices of one host */
#define NAME_MAX_LEN     200     /* bytes of a host group, host or device name */
#define SAMPLES_MAX      1000000 /* GEMM or kernel samples of one device */

/* ---- spec parameters ------------------------------------------------------------------------ */

enum {
  P_GPUS_PER_HOST,
  P_HOSTS,
  P_INTER_GBPS,
  P_INTER_LATENCY_US,
  P_INTRA_GBPS,
  P_INTRA_LATENCY_US,
  P_COUNT
};

static const hap_cluster_param_def param_defs[P_COUNT] = {
    [P_GPUS_PER_HOST] = {"gpus_per_host", "devices per host of every host group (1..4096)"},
    [P_HOSTS] = {"hosts", "hosts in every host group (1..65536)"},
    [P_INTER_GBPS] = {"inter_gbps", "every host's NIC bandwidth, Gb/s (X * 1e9 / 8 bytes/s)"},
    [P_INTER_LATENCY_US] = {"inter_latency_us",
                            "latency of a path between hosts, us (NIC latencies become 0)"},
    [P_INTRA_GBPS] = {"intra_gbps", "bandwidth between two devices of one host, Gb/s"},
    [P_INTRA_LATENCY_US] = {"intra_latency_us", "latency between two devices of one host, us"},
};

typedef struct cl_params {
  double v[P_COUNT]; /* as given: counts, Gb/s, us */
  unsigned given;    /* bit i: parameter i was given */
} cl_params;

int hap_cluster_param_count(void) { return P_COUNT; }

const hap_cluster_param_def *hap_cluster_param_get(int i) {
  return i >= 0 && i < P_COUNT ? &param_defs[i] : NULL;
}

static bool has(const cl_params *p, int i) { return (p->given >> i) & 1u; }

static const char *param_list(char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < P_COUNT && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", param_defs[i].name);
  return buf;
}

static hap_status parse_param(const char *label, const char *key, const char *value, cl_params *p,
                              hap_err *err) {
  int k = 0;
  while (k < P_COUNT && strcmp(param_defs[k].name, key) != 0)
    k++;
  if (k == P_COUNT) {
    char names[256];
    return hap_err_set(err, HAP_ENOTFOUND, "%s: unknown parameter '%s'; valid parameters: %s",
                       label, key, param_list(names, sizeof names));
  }
  if (has(p, k))
    return hap_err_set(err, HAP_EINVAL, "%s: parameter '%s' is given twice", label,
                       param_defs[k].name);
  double v = 0;
  bool ok = hap_spec_number(value, strlen(value), &v);
  const char *want = "a number";
  switch (k) {
  case P_GPUS_PER_HOST:
    ok = ok && v == floor(v) && v >= 1 && v <= HOST_MAX_DEVICES;
    want = "an integer 1..4096";
    break;
  case P_HOSTS:
    ok = ok && v == floor(v) && v >= 1 && v <= GROUP_MAX_HOSTS;
    want = "an integer 1..65536";
    break;
  case P_INTER_GBPS:
  case P_INTRA_GBPS:
    ok = ok && v > 0;
    want = "a bandwidth in Gb/s > 0";
    break;
  default:
    ok = ok && v >= 0;
    want = "a latency in microseconds >= 0";
    break;
  }
  if (!ok)
    return hap_err_set(err, HAP_EINVAL, "%s: parameter '%s' is '%s', expected %s", label,
                       param_defs[k].name, value, want);
  p->v[k] = v;
  p->given |= 1u << k;
  return HAP_OK;
}

/* "key=value,key=value" (NULL: none), checked in the order written (spec.h). */
static hap_status parse_params(const char *label, const char *s, cl_params *p, hap_err *err) {
  memset(p, 0, sizeof *p);
  hap_spec sp;
  hap_status st = hap_spec_parse_params(s, &sp, NULL);
  if (st == HAP_ENOMEM)
    st = hap_err_set(err, HAP_ENOMEM, "%s: out of memory reading the parameters", label);
  else
    st = HAP_OK;
  for (int i = 0; i < sp.n && st == HAP_OK; i++)
    st = parse_param(label, sp.items[i].key, sp.items[i].value, p, err);
  if (st == HAP_OK && sp.fault == HAP_SPEC_EMPTY_ITEM)
    st = hap_err_set(err, HAP_EINVAL,
                     "%s: empty parameter, expected key=value[,key=value...] with keys %s", label,
                     "gpus_per_host, hosts, inter_gbps, inter_latency_us, intra_gbps, "
                     "intra_latency_us");
  else if (st == HAP_OK && sp.fault == HAP_SPEC_NOT_KEY_VALUE)
    st = hap_err_set(err, HAP_EINVAL, "%s: parameter '%s' is not of the form key=value", label,
                     sp.bad);
  hap_spec_free(&sp);
  return st;
}

/* ---- reader helpers (the conventions of graph_io.c) ----------------------------------------- */

/* One link as read: each value may be missing (then taken from "defaults"). */
typedef struct link_spec {
  double bw, lat; /* bytes/s, s */
  bool has_bw, has_lat;
} link_spec;

typedef struct reader {
  hap_jr jr; /* label, error record, strictness */
  const cl_params *params;
  hap_cluster *c;
  link_spec def_intra, def_nic;
  int32_t *group_of_host; /* host id -> index in "hosts" */
  int32_t cap_hosts;
} reader;

/* A host group or device name: non-empty plain text of at most NAME_MAX_LEN bytes. */
static hap_status want_name(reader *r, const json_t *v, const char *path, const char **out) {
  HAP_TRY(hap_jr_want_name(&r->jr, v, path, out));
  if (strlen(*out) > NAME_MAX_LEN) {
    hap_jquote b;
    return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                       "'%s' is longer than %d bytes, expected a shorter name",
                       hap_json_quote(*out, b), NAME_MAX_LEN);
  }
  return HAP_OK;
}

/* ---- header --------------------------------------------------------------------------------- */

static hap_status read_header(reader *r, const json_t *root) {
  static const char *const keys[] = {"format", "version",         "name",     "doc",
                                     "source", "inter_latency_s", "defaults", "hosts",
                                     "links",  "collectives",     NULL};
  return hap_jr_read_header(&r->jr, root, HAP_CLUSTER_FORMAT, HAP_CLUSTER_VERSION_MAJOR,
                            HAP_CLUSTER_VERSION_MINOR, keys,
                            "format, version, name, doc, source, inter_latency_s, defaults, hosts, "
                            "links, collectives");
}

/* ---- links ---------------------------------------------------------------------------------- */

#define LINK_EXPECTED "a link {\"bandwidth_Bps\": bytes/s, \"latency_s\": s}"

static hap_status read_link(reader *r, const json_t *v, const char *path, link_spec *l) {
  static const char *const keys[] = {"bandwidth_Bps", "latency_s", NULL};
  hap_jpath p;
  json_t *m;
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, LINK_EXPECTED));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys, "bandwidth_Bps, latency_s"));
  if ((m = json_object_get(v, "bandwidth_Bps")) != NULL) {
    HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, path, "bandwidth_Bps"), HAP_JR_POSITIVE,
                               "a bandwidth in bytes/s", &l->bw));
    l->has_bw = true;
  }
  if ((m = json_object_get(v, "latency_s")) != NULL) {
    HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, path, "latency_s"), HAP_JR_NON_NEGATIVE,
                               "a latency in s", &l->lat));
    l->has_lat = true;
  }
  return HAP_OK;
}

static hap_status read_defaults(reader *r, const json_t *root) {
  static const char *const keys[] = {"intra_host", "nic", NULL};
  json_t *v, *m;
  hap_jpath p;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "defaults", false, NULL, &v));
  if (v == NULL)
    return HAP_OK;
  HAP_TRY(
      hap_jr_want_type(&r->jr, v, JSON_OBJECT, "defaults", "an object {\"intra_host\", \"nic\"}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, "defaults", keys, "intra_host, nic"));
  if ((m = json_object_get(v, "intra_host")) != NULL)
    HAP_TRY(read_link(r, m, hap_jpath_key(p, "defaults", "intra_host"), &r->def_intra));
  if ((m = json_object_get(v, "nic")) != NULL)
    HAP_TRY(read_link(r, m, hap_jpath_key(p, "defaults", "nic"), &r->def_nic));
  return HAP_OK;
}

/* The group's link `key`: defaults, then the group's own values, then spec parameters
 * (negative: not given). */
static hap_status final_link(reader *r, const json_t *group, const char *gpath, const char *key,
                             const link_spec *def, double param_bw, double param_lat,
                             hap_link *out) {
  link_spec l = *def;
  hap_jpath p;
  json_t *m = json_object_get(group, key);
  hap_jpath_key(p, gpath, key);
  if (m != NULL)
    HAP_TRY(read_link(r, m, p, &l));
  if (param_bw >= 0) {
    l.bw = param_bw;
    l.has_bw = true;
  }
  if (param_lat >= 0) {
    l.lat = param_lat;
    l.has_lat = true;
  }
  if (!l.has_bw && !l.has_lat)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "missing, expected %s here or in defaults.%s",
                       LINK_EXPECTED, key);
  if (!l.has_bw || !l.has_lat) {
    const char *field = l.has_bw ? "latency_s" : "bandwidth_Bps";
    hap_jpath f;
    return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(f, p, field),
                       "missing, expected %s here or in defaults.%s",
                       l.has_bw ? "a latency in s >= 0" : "a bandwidth in bytes/s > 0", key);
  }
  out->bandwidth_Bps = l.bw;
  out->latency_s = l.lat;
  return HAP_OK;
}

/* ---- devices -------------------------------------------------------------------------------- */

#define DTYPES_EXPECTED "float32, float16, bfloat16, float64, int64, int32 or bool"
#define DEVICE_EXPECTED "a preset name such as \"V100-16GB\" or a device object"

static const char *kind_name(hap_device_kind k) { return k == HAP_DEVICE_CPU ? "cpu" : "gpu"; }

static hap_status want_dtype(reader *r, const json_t *v, const char *path, hap_dtype *out) {
  const char *s;
  hap_jquote b;
  HAP_TRY(hap_jr_want_str(&r->jr, v, path, "a dtype string such as \"float32\"", &s));
  if (hap_dtype_parse(s, out) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "unknown dtype '%s', expected " DTYPES_EXPECTED,
                       hap_json_quote(s, b));
  return HAP_OK;
}

/* {dtype: FLOP/s}: sets out[] and given[] for the dtypes present. */
static hap_status read_flops(reader *r, const json_t *v, const char *path, double *out,
                             bool *given) {
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path,
                           "an object {dtype: FLOP/s} such as {\"float32\": 1e13}"));
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)v, key, val) {
    hap_jpath p;
    hap_jquote b;
    hap_dtype t;
    hap_jpath_key(p, path, hap_json_quote(key, b));
    if (hap_dtype_parse(key, &t) != HAP_OK)
      return hap_jr_fail(&r->jr, HAP_EPARSE, p, "unknown dtype '%s', expected " DTYPES_EXPECTED,
                         hap_json_quote(key, b));
    HAP_TRY(hap_jr_want_amount(&r->jr, val, p, HAP_JR_NON_NEGATIVE, "a rate in FLOP/s", &out[t]));
    given[t] = true;
  }
  return HAP_OK;
}

static hap_status read_gemm(reader *r, const json_t *v, const char *path, hap_device *d) {
  static const char *const keys[] = {"m", "n", "k", "dtype", "flops_per_s", NULL};
  HAP_TRY(hap_jr_want_array(&r->jr, v, path, "an array of GEMM samples", SAMPLES_MAX));
  size_t n = json_array_size(v);
  if (n == 0)
    return HAP_OK;
  d->gemm = calloc(n, sizeof *d->gemm);
  if (d->gemm == NULL)
    return hap_jr_oom(&r->jr);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(v, i);
    hap_gemm_sample *g = &d->gemm[i];
    hap_jpath ep, p;
    json_t *m;
    hap_jpath_index(ep, path, i);
    HAP_TRY(hap_jr_want_type(&r->jr, e, JSON_OBJECT, ep,
                             "a GEMM sample {\"m\", \"n\", \"k\", \"dtype\", ...}"));
    HAP_TRY(hap_jr_check_keys(&r->jr, e, ep, keys, "m, n, k, dtype, flops_per_s"));
    int64_t *dims[3] = {&g->m, &g->n, &g->k};
    static const char *const dim_keys[3] = {"m", "n", "k"};
    for (int k = 0; k < 3; k++) {
      HAP_TRY(hap_jr_member(&r->jr, e, ep, dim_keys[k], true, "a positive integer", &m));
      HAP_TRY(hap_jr_want_int(&r->jr, m, hap_jpath_key(p, ep, dim_keys[k]), 1, INT64_MAX,
                              "a positive integer", dims[k]));
    }
    HAP_TRY(hap_jr_member(&r->jr, e, ep, "dtype", true, "a dtype such as \"float32\"", &m));
    HAP_TRY(want_dtype(r, m, hap_jpath_key(p, ep, "dtype"), &g->dtype));
    HAP_TRY(hap_jr_member(&r->jr, e, ep, "flops_per_s", true, "a rate in FLOP/s > 0", &m));
    HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, ep, "flops_per_s"), HAP_JR_POSITIVE,
                               "a rate in FLOP/s", &g->flops_per_s));
    d->n_gemm = (int32_t)(i + 1);
  }
  return HAP_OK;
}

/* "0x" followed by 1..16 hex digits. */
static bool parse_shape_key(const char *s, uint64_t *out) {
  if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
    return false;
  uint64_t v = 0;
  size_t n = 0;
  for (s += 2; *s; s++, n++) {
    int c = tolower((unsigned char)*s);
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0 || n >= 16)
      return false;
    v = v << 4 | (uint64_t)digit;
  }
  *out = v;
  return n > 0;
}

static hap_status read_kernel(reader *r, const json_t *e, const char *ep, hap_kernel_sample *k) {
  static const char *const keys[] = {"op", "backward", "shape_key", "seconds", NULL};
  hap_jpath p;
  hap_jquote b;
  json_t *m;
  const char *s;
  HAP_TRY(
      hap_jr_want_type(&r->jr, e, JSON_OBJECT, ep, "a kernel sample {\"op\", \"backward\", ...}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, e, ep, keys, "op, backward, shape_key, seconds"));
  HAP_TRY(hap_jr_member(&r->jr, e, ep, "op", true, "an op name such as \"linear\"", &m));
  HAP_TRY(
      hap_jr_want_str(&r->jr, m, hap_jpath_key(p, ep, "op"), "an op name such as \"linear\"", &s));
  if (hap_op_lookup(s, &k->op) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "unknown op '%s', expected an op of the op table (docs/ops.md)",
                       hap_json_quote(s, b));
  HAP_TRY(hap_jr_member(&r->jr, e, ep, "backward", true, "true or false", &m));
  HAP_TRY(hap_jr_want_bool(&r->jr, m, hap_jpath_key(p, ep, "backward"), &k->backward));
  HAP_TRY(hap_jr_member(&r->jr, e, ep, "shape_key", true, "a hex string such as \"0x1f\"", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, ep, "shape_key"),
                          "a hex string such as \"0x1f\"", &s));
  if (!parse_shape_key(s, &k->shape_key))
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "is \"%s\", expected \"0x\" and 1 to 16 hex digits",
                       hap_json_quote(s, b));
  HAP_TRY(hap_jr_member(&r->jr, e, ep, "seconds", true, "a time in s >= 0", &m));
  return hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, ep, "seconds"), HAP_JR_NON_NEGATIVE,
                            "a time in s", &k->seconds);
}

static hap_status read_kernels(reader *r, const json_t *v, const char *path, hap_device *d) {
  HAP_TRY(hap_jr_want_array(&r->jr, v, path, "an array of kernel samples", SAMPLES_MAX));
  size_t n = json_array_size(v);
  if (n == 0)
    return HAP_OK;
  d->kernels = calloc(n, sizeof *d->kernels);
  if (d->kernels == NULL)
    return hap_jr_oom(&r->jr);
  for (size_t i = 0; i < n; i++) {
    hap_jpath ep;
    HAP_TRY(read_kernel(r, json_array_get(v, i), hap_jpath_index(ep, path, i), &d->kernels[i]));
    d->n_kernels = (int32_t)(i + 1);
  }
  return HAP_OK;
}

static void device_free(hap_device *d) {
  free(d->gemm);
  free(d->kernels);
  d->gemm = NULL;
  d->kernels = NULL;
}

static hap_status want_preset(reader *r, const json_t *v, const char *path,
                              const hap_device_preset **out) {
  const char *s;
  hap_jquote b;
  HAP_TRY(hap_jr_want_str(&r->jr, v, path, "a device preset name such as \"V100-16GB\"", &s));
  *out = hap_preset_find(s);
  if (*out != NULL)
    return HAP_OK;
  const char *hint = hap_preset_suggest(s);
  if (hint != NULL)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "unknown device preset '%s' (did you mean '%s'?)",
                       hap_json_quote(s, b), hint);
  char list[512];
  size_t o = 0;
  list[0] = '\0';
  for (int i = 0; i < hap_preset_count() && o < sizeof list; i++)
    o +=
        (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", hap_preset_get(i)->name);
  return hap_jr_fail(&r->jr, HAP_EPARSE, path, "unknown device preset '%s', expected one of %s",
                     hap_json_quote(s, b), list);
}

/* peak_flops and sustained_flops; a custom device's dtype without a peak takes its sustained rate.
 */
static hap_status read_rates(reader *r, const json_t *v, const char *path, bool custom,
                             hap_device *d) {
  hap_jpath p;
  json_t *m;
  bool peak_given[HAP_DTYPE_COUNT] = {false}, sus_given[HAP_DTYPE_COUNT] = {false};
  if ((m = json_object_get(v, "peak_flops")) != NULL)
    HAP_TRY(read_flops(r, m, hap_jpath_key(p, path, "peak_flops"), d->peak_flops, peak_given));
  HAP_TRY(hap_jr_member(&r->jr, v, path, "sustained_flops", custom,
                        "an object {dtype: FLOP/s} (required without a preset)", &m));
  if (m != NULL)
    HAP_TRY(
        read_flops(r, m, hap_jpath_key(p, path, "sustained_flops"), d->sustained_flops, sus_given));
  for (int t = 0; custom && t < HAP_DTYPE_COUNT; t++)
    if (!peak_given[t])
      d->peak_flops[t] = d->sustained_flops[t];
  for (int t = 0; t < HAP_DTYPE_COUNT; t++)
    if (hap_dtype_is_float((hap_dtype)t) && d->sustained_flops[t] > 0)
      return HAP_OK;
  return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(p, path, "sustained_flops"),
                     "no float dtype has a rate > 0, expected e.g. {\"float32\": 1.2e13}");
}

/* The values a device object may set besides its preset (all required ones when `custom`). */
static hap_status read_device_values(reader *r, const json_t *v, const char *path, bool custom,
                                     hap_device *d) {
  hap_jpath p;
  json_t *m;
  const char *s;
  hap_jquote b;
  if ((m = json_object_get(v, "model")) != NULL)
    HAP_TRY(hap_jr_want_text(&r->jr, m, hap_jpath_key(p, path, "model"),
                             "a model name such as \"V100-16GB\"", &d->model));
  if ((m = json_object_get(v, "kind")) != NULL) {
    HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, path, "kind"), "\"gpu\" or \"cpu\"", &s));
    if (strcmp(s, "gpu") != 0 && strcmp(s, "cpu") != 0)
      return hap_jr_fail(&r->jr, HAP_EPARSE, p, "is \"%s\", expected \"gpu\" or \"cpu\"",
                         hap_json_quote(s, b));
    d->kind = s[0] == 'c' ? HAP_DEVICE_CPU : HAP_DEVICE_GPU;
    if (custom)
      d->launch_s = d->kind == HAP_DEVICE_CPU ? HAP_PRESET_CPU_LAUNCH_S : HAP_PRESET_GPU_LAUNCH_S;
  }
  HAP_TRY(read_rates(r, v, path, custom, d));
  HAP_TRY(hap_jr_member(&r->jr, v, path, "memory_bytes", custom, "a size in bytes > 0", &m));
  if (m != NULL)
    HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, path, "memory_bytes"), HAP_JR_POSITIVE,
                               "a size in bytes", &d->memory_bytes));
  HAP_TRY(
      hap_jr_member(&r->jr, v, path, "memory_bw_Bps", custom, "a bandwidth in bytes/s > 0", &m));
  if (m != NULL)
    HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, path, "memory_bw_Bps"), HAP_JR_POSITIVE,
                               "a bandwidth in bytes/s", &d->memory_bw_Bps));
  if ((m = json_object_get(v, "launch_s")) != NULL)
    HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, path, "launch_s"), HAP_JR_NON_NEGATIVE,
                               "a time in s", &d->launch_s));
  if ((m = json_object_get(v, "update_bw_Bps")) != NULL)
    HAP_TRY(hap_jr_want_amount(
        &r->jr, m, hap_jpath_key(p, path, "update_bw_Bps"), HAP_JR_NON_NEGATIVE,
        "a bandwidth in bytes/s (0: priced at memory_bw_Bps)", &d->update_bw_Bps));
  if ((m = json_object_get(v, "gemm")) != NULL)
    HAP_TRY(read_gemm(r, m, hap_jpath_key(p, path, "gemm"), d));
  if ((m = json_object_get(v, "kernels")) != NULL)
    HAP_TRY(read_kernels(r, m, hap_jpath_key(p, path, "kernels"), d));
  return HAP_OK;
}

/* A device: a preset name, or an object. `name` (may be NULL) receives an explicit "name", which
 * is allowed only where `name` is non-NULL. On failure the caller still frees `d`. */
static hap_status read_device(reader *r, const json_t *v, const char *path, hap_device *d,
                              const char **name) {
  /* "name" first: keys + 1 is the list without it */
  static const char *const keys[] = {
      "name",       "preset",          "model",        "kind",
      "peak_flops", "sustained_flops", "memory_bytes", "memory_bw_Bps",
      "launch_s",   "update_bw_Bps",   "gemm",         "kernels",
      NULL};
  const hap_device_preset *preset = NULL;
  memset(d, 0, sizeof *d);
  if (json_is_string(v)) {
    HAP_TRY(want_preset(r, v, path, &preset));
    hap_preset_to_device(preset, d);
    return HAP_OK;
  }
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, DEVICE_EXPECTED));
  HAP_TRY(hap_jr_check_keys(
      &r->jr, v, path, name ? keys : keys + 1,
      name ? "name, preset, model, kind, peak_flops, sustained_flops, memory_bytes, "
             "memory_bw_Bps, launch_s, update_bw_Bps, gemm, kernels"
           : "preset, model, kind, peak_flops, sustained_flops, memory_bytes, "
             "memory_bw_Bps, launch_s, update_bw_Bps, gemm, kernels"));
  hap_jpath p;
  json_t *m;
  if (name != NULL && (m = json_object_get(v, "name")) != NULL)
    HAP_TRY(want_name(r, m, hap_jpath_key(p, path, "name"), name));
  if ((m = json_object_get(v, "preset")) != NULL) {
    HAP_TRY(want_preset(r, m, hap_jpath_key(p, path, "preset"), &preset));
    hap_preset_to_device(preset, d);
  } else {
    d->model = "custom";
    d->kind = HAP_DEVICE_GPU;
    d->launch_s = HAP_PRESET_GPU_LAUNCH_S;
  }
  return read_device_values(r, v, path, preset == NULL, d);
}

/* ---- host groups ---------------------------------------------------------------------------- */

/* A group's devices, read once and added to each of its hosts. */
typedef struct group_devices {
  int32_t n;
  hap_device *protos; /* n, or 1 shared by all when `shared` */
  const char **names; /* n explicit names (NULL entries: "<host>:<i>") */
  bool shared;        /* "device" + "devices_per_host" */
} group_devices;

static void group_devices_free(group_devices *g) {
  for (int32_t i = 0; g->protos && i < (g->shared ? 1 : g->n); i++)
    device_free(&g->protos[i]);
  free(g->protos);
  free(g->names);
}

static hap_status read_group_devices(reader *r, const json_t *v, const char *gpath,
                                     group_devices *gd) {
  hap_jpath p;
  json_t *dev = json_object_get(v, "device"), *list = json_object_get(v, "devices");
  json_t *per = json_object_get(v, "devices_per_host");
  const cl_params *prm = r->params;
  if (dev != NULL && list != NULL)
    return hap_jr_fail(&r->jr, HAP_EPARSE, gpath,
                       "has both \"device\" and \"devices\", expected one of them");
  if (list != NULL) {
    if (per != NULL)
      return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(p, gpath, "devices_per_host"),
                         "not allowed with a \"devices\" list (its length is the device count)");
    if (has(prm, P_GPUS_PER_HOST))
      return hap_jr_fail(
          &r->jr, HAP_EPARSE, hap_jpath_key(p, gpath, "devices"),
          "parameter gpus_per_host cannot resize a group that lists its devices, expected "
          "\"device\" with \"devices_per_host\"");
    HAP_TRY(hap_jr_want_array(&r->jr, list, hap_jpath_key(p, gpath, "devices"),
                              "an array of devices", HOST_MAX_DEVICES));
    gd->n = (int32_t)json_array_size(list);
    if (gd->n == 0)
      return hap_jr_fail(&r->jr, HAP_EPARSE, p, "is empty, expected at least one device");
    gd->protos = calloc((size_t)gd->n, sizeof *gd->protos);
    gd->names = calloc((size_t)gd->n, sizeof *gd->names);
    if (gd->protos == NULL || gd->names == NULL)
      return hap_jr_oom(&r->jr);
    for (int32_t i = 0; i < gd->n; i++) {
      hap_jpath ep;
      hap_jpath_index(ep, p, (size_t)i);
      HAP_TRY(read_device(r, json_array_get(list, (size_t)i), ep, &gd->protos[i], &gd->names[i]));
    }
    return HAP_OK;
  }
  if (dev == NULL)
    return hap_jr_fail(
        &r->jr, HAP_EPARSE, gpath,
        "has no devices, expected \"device\" with \"devices_per_host\", or a \"devices\" "
        "list");
  int64_t n = 0;
  HAP_TRY(hap_jr_member(&r->jr, v, gpath, "devices_per_host", true, "an integer 1..4096", &per));
  HAP_TRY(hap_jr_want_int(&r->jr, per, hap_jpath_key(p, gpath, "devices_per_host"), 1,
                          HOST_MAX_DEVICES, "an integer 1..4096", &n));
  gd->n = has(prm, P_GPUS_PER_HOST) ? (int32_t)prm->v[P_GPUS_PER_HOST] : (int32_t)n;
  gd->shared = true;
  gd->protos = calloc(1, sizeof *gd->protos);
  if (gd->protos == NULL)
    return hap_jr_oom(&r->jr);
  return read_device(r, dev, hap_jpath_key(p, gpath, "device"), gd->protos, NULL);
}

/* Add host `name` of group `gi` and its devices. */
static hap_status add_host(reader *r, size_t gi, const char *gpath, const char *name,
                           hap_link intra, hap_link nic, const group_devices *gd) {
  hap_jpath p;
  hap_jquote b;
  hap_err e = {0};
  int32_t prev = hap_cluster_find_host(r->c, name);
  if (prev >= 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(p, gpath, "name"),
                       "host '%s' is already defined by hosts[%d], expected unique host names",
                       hap_json_quote(name, b), r->group_of_host[prev]);
  if (HAP_VEC_RESERVE(r->group_of_host, r->cap_hosts, (int64_t)r->c->n_hosts + 1, 16) != 0)
    return hap_jr_oom(&r->jr);
  r->group_of_host[r->c->n_hosts] = (int32_t)gi;
  hap_status st = hap_cluster_add_host(r->c, name, intra, nic, NULL, &e);
  if (st != HAP_OK)
    return hap_jr_fail(&r->jr, st, gpath, "%s", e.msg);
  for (int32_t i = 0; i < gd->n; i++) {
    char dname[NAME_MAX_LEN + 24]; /* host name + ":4095" */
    const char *use = gd->names && gd->names[i] ? gd->names[i] : dname;
    snprintf(dname, sizeof dname, "%s:%d", name, i);
    int32_t other = hap_cluster_find_device(r->c, use);
    if (other >= 0) {
      hap_jpath dp, np;
      hap_jquote hb;
      if (gd->shared)
        hap_jpath_key(np, gpath, "device");
      else
        hap_jpath_key(np, hap_jpath_index(dp, hap_jpath_key(p, gpath, "devices"), (size_t)i),
                      "name");
      return hap_jr_fail(
          &r->jr, HAP_EPARSE, np,
          "device '%s' is already defined on host '%s', expected unique device names",
          hap_json_quote(use, b), hap_json_quote(r->c->hosts[r->c->devices[other].host].name, hb));
    }
    st = hap_cluster_add_device(r->c, use, &gd->protos[gd->shared ? 0 : i], NULL, &e);
    if (st != HAP_OK)
      return hap_jr_fail(&r->jr, st, gpath, "%s", e.msg);
  }
  return HAP_OK;
}

static hap_status read_group_hosts(reader *r, const json_t *v, size_t gi, const char *gpath,
                                   const group_devices *gd) {
  static const double not_given = -1;
  const cl_params *prm = r->params;
  hap_jpath p;
  json_t *m;
  const char *name;
  HAP_TRY(hap_jr_member(&r->jr, v, gpath, "name", true, "the host group's name", &m));
  HAP_TRY(want_name(r, m, hap_jpath_key(p, gpath, "name"), &name));
  int64_t count = 1;
  if ((m = json_object_get(v, "count")) != NULL)
    HAP_TRY(hap_jr_want_int(&r->jr, m, hap_jpath_key(p, gpath, "count"), 1, GROUP_MAX_HOSTS,
                            "an integer 1..65536", &count));
  if (has(prm, P_HOSTS))
    count = (int64_t)prm->v[P_HOSTS];
  int64_t total = r->c->n_devices + count * gd->n;
  if (total > HAP_CLUSTER_MAX_DEVICES)
    return hap_jr_fail(&r->jr, HAP_EPARSE, gpath,
                       "the cluster would have %lld devices, expected at most %d", (long long)total,
                       HAP_CLUSTER_MAX_DEVICES);

  hap_link intra = {0}, nic = {0};
  double intra_bw = has(prm, P_INTRA_GBPS) ? prm->v[P_INTRA_GBPS] * 1e9 / 8 : not_given;
  double intra_lat = has(prm, P_INTRA_LATENCY_US) ? prm->v[P_INTRA_LATENCY_US] * 1e-6 : not_given;
  double nic_bw = has(prm, P_INTER_GBPS) ? prm->v[P_INTER_GBPS] * 1e9 / 8 : not_given;
  double nic_lat = has(prm, P_INTER_LATENCY_US) ? 0 : not_given;
  HAP_TRY(final_link(r, v, gpath, "intra_host", &r->def_intra, intra_bw, intra_lat, &intra));
  HAP_TRY(final_link(r, v, gpath, "nic", &r->def_nic, nic_bw, nic_lat, &nic));

  for (int64_t h = 0; h < count; h++) {
    char host[NAME_MAX_LEN + 8]; /* group name + "-65535" */
    if (count == 1)
      snprintf(host, sizeof host, "%s", name);
    else
      snprintf(host, sizeof host, "%s-%lld", name, (long long)h);
    HAP_TRY(add_host(r, gi, gpath, host, intra, nic, gd));
  }
  return HAP_OK;
}

static hap_status read_group(reader *r, const json_t *v, size_t gi) {
  static const char *const keys[] = {
      "name", "doc", "count", "devices_per_host", "device", "devices", "intra_host", "nic", NULL};
  hap_jpath gpath, p;
  json_t *m;
  const char *s;
  hap_jpath_index(gpath, "hosts", gi);
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, gpath,
                           "a host group {\"name\", \"count\", \"device\", ...}"));
  HAP_TRY(
      hap_jr_check_keys(&r->jr, v, gpath, keys,
                        "name, doc, count, devices_per_host, device, devices, intra_host, nic"));
  if ((m = json_object_get(v, "doc")) != NULL)
    HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, gpath, "doc"), "a string", &s));
  group_devices gd = {0};
  hap_status st = read_group_devices(r, v, gpath, &gd);
  if (st == HAP_OK)
    st = read_group_hosts(r, v, gi, gpath, &gd);
  group_devices_free(&gd);
  return st;
}

static hap_status read_hosts(reader *r, const json_t *root) {
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "hosts", true, "an array of host groups", &arr));
  HAP_TRY(
      hap_jr_want_array(&r->jr, arr, "hosts", "an array of host groups", HAP_CLUSTER_MAX_DEVICES));
  if (json_array_size(arr) == 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "hosts", "is empty, expected at least one host group");
  for (size_t i = 0; i < json_array_size(arr); i++)
    HAP_TRY(read_group(r, json_array_get(arr, i), i));
  return HAP_OK;
}

/* ---- link overrides and collective fits ----------------------------------------------------- */

static hap_status want_device(reader *r, const json_t *v, const char *path, int32_t *id) {
  const char *s;
  hap_jquote b, b2;
  HAP_TRY(hap_jr_want_str(&r->jr, v, path, "a device name such as \"host:0\"", &s));
  *id = hap_cluster_find_device(r->c, s);
  if (*id < 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path,
                       "unknown device '%s', expected a device name such as '%s'",
                       hap_json_quote(s, b), hap_json_quote(r->c->devices[0].name, b2));
  return HAP_OK;
}

static hap_status read_link_override(reader *r, const json_t *v, const char *lpath) {
  static const char *const keys[] = {"src", "dst", "bandwidth_Bps", "latency_s", "symmetric", NULL};
  hap_jpath p;
  json_t *m;
  int32_t src, dst;
  hap_link l;
  bool symmetric = false;
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, lpath,
                           "a link {\"src\", \"dst\", \"bandwidth_Bps\", ...}"));
  HAP_TRY(
      hap_jr_check_keys(&r->jr, v, lpath, keys, "src, dst, bandwidth_Bps, latency_s, symmetric"));
  HAP_TRY(hap_jr_member(&r->jr, v, lpath, "src", true, "a device name", &m));
  HAP_TRY(want_device(r, m, hap_jpath_key(p, lpath, "src"), &src));
  HAP_TRY(hap_jr_member(&r->jr, v, lpath, "dst", true, "a device name", &m));
  HAP_TRY(want_device(r, m, hap_jpath_key(p, lpath, "dst"), &dst));
  if (src == dst)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "is the same device as src, expected two different devices");
  HAP_TRY(hap_jr_member(&r->jr, v, lpath, "bandwidth_Bps", true, "a bandwidth in bytes/s > 0", &m));
  HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, lpath, "bandwidth_Bps"), HAP_JR_POSITIVE,
                             "a bandwidth in bytes/s", &l.bandwidth_Bps));
  HAP_TRY(hap_jr_member(&r->jr, v, lpath, "latency_s", true, "a latency in s >= 0", &m));
  HAP_TRY(hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, lpath, "latency_s"), HAP_JR_NON_NEGATIVE,
                             "a latency in s", &l.latency_s));
  if ((m = json_object_get(v, "symmetric")) != NULL)
    HAP_TRY(hap_jr_want_bool(&r->jr, m, hap_jpath_key(p, lpath, "symmetric"), &symmetric));
  hap_err e = {0};
  hap_status st = hap_cluster_set_link(r->c, src, dst, l, &e);
  if (st == HAP_OK && symmetric)
    st = hap_cluster_set_link(r->c, dst, src, l, &e);
  return st == HAP_OK ? HAP_OK : hap_jr_fail(&r->jr, st, lpath, "%s", e.msg);
}

/* Device names into ranks[]; `seen` (one entry per device, all -1) records where each was listed.
 */
static hap_status read_ranks(reader *r, const json_t *v, const char *path, int32_t *ranks,
                             int32_t *seen, int32_t *n) {
  size_t cnt = json_array_size(v);
  if (cnt == 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, path, "is empty, expected at least one device name");
  for (size_t i = 0; i < cnt; i++) {
    hap_jpath p;
    hap_jquote b;
    HAP_TRY(want_device(r, json_array_get(v, i), hap_jpath_index(p, path, i), &ranks[i]));
    if (seen[ranks[i]] >= 0)
      return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                         "device '%s' is already listed at [%d], expected distinct ranks",
                         hap_json_quote(r->c->devices[ranks[i]].name, b), seen[ranks[i]]);
    seen[ranks[i]] = (int32_t)i;
  }
  *n = (int32_t)cnt;
  return HAP_OK;
}

/* Required number `key` of a fit (or its default when `def` >= 0 and the key is absent). */
static hap_status fit_num(reader *r, const json_t *v, const char *fpath, const char *key,
                          hap_jr_range range, const char *what, double def, double *out) {
  hap_jpath p;
  json_t *m = json_object_get(v, key);
  if (m == NULL && def >= 0) {
    *out = def;
    return HAP_OK;
  }
  HAP_TRY(hap_jr_member(&r->jr, v, fpath, key, true, what, &m));
  return hap_jr_want_amount(&r->jr, m, hap_jpath_key(p, fpath, key), range, what, out);
}

/* "pieces": [{"below_bytes", "alpha_s", "beta_Bps"}, ..., {"alpha_s", "beta_Bps"}] (the last
 * without a bound). */
static hap_status read_pieces(reader *r, const json_t *arr, const char *ppath, hap_ab_fit *f) {
  static const char *const keys[] = {"below_bytes", "alpha_s", "beta_Bps", NULL};
  HAP_TRY(hap_jr_want_array(&r->jr, arr, ppath, "an array of pieces", HAP_FIT_MAX_PIECES));
  size_t n = json_array_size(arr);
  if (n == 0)
    return hap_jr_fail(&r->jr, HAP_EPARSE, ppath, "is empty, expected 1 to %d pieces",
                       HAP_FIT_MAX_PIECES);
  f->n_pieces = (int32_t)n;
  for (size_t i = 0; i < n; i++) {
    hap_jpath ip, p;
    json_t *v = json_array_get(arr, i);
    hap_jpath_index(ip, ppath, i);
    HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, ip,
                             "a piece {\"below_bytes\", \"alpha_s\", \"beta_Bps\"}"));
    HAP_TRY(hap_jr_check_keys(&r->jr, v, ip, keys, "below_bytes, alpha_s, beta_Bps"));
    f->upper_bytes[i] = INFINITY;
    if (i + 1 < n) {
      HAP_TRY(fit_num(r, v, ip, "below_bytes", HAP_JR_POSITIVE, "a size in bytes", -1,
                      &f->upper_bytes[i]));
      if (i > 0 && !(f->upper_bytes[i] > f->upper_bytes[i - 1]))
        return hap_jr_fail(&r->jr, HAP_EPARSE, hap_jpath_key(p, ip, "below_bytes"),
                           "is %g, expected a size above the previous piece's %g (increasing)",
                           f->upper_bytes[i], f->upper_bytes[i - 1]);
    } else if (json_object_get(v, "below_bytes") != NULL) {
      return hap_jr_fail(
          &r->jr, HAP_EPARSE, hap_jpath_key(p, ip, "below_bytes"),
          "is set on the last piece, expected none (the last piece has no upper bound)");
    }
    HAP_TRY(
        fit_num(r, v, ip, "alpha_s", HAP_JR_NON_NEGATIVE, "a latency in s", -1, &f->alpha_s[i]));
    HAP_TRY(fit_num(r, v, ip, "beta_Bps", HAP_JR_POSITIVE, "a bandwidth in bytes/s", -1,
                    &f->beta_Bps[i]));
  }
  return HAP_OK;
}

/* "points": [{"bytes", "s"}, ...] (hap-cluster 1.1: times measured at exact sizes, cluster.h);
 * *out is malloc'd (n_points + 1 entries). */
static hap_status read_points(reader *r, const json_t *arr, const char *ppath, hap_coll_point **out,
                              int32_t *n_points) {
  static const char *const keys[] = {"bytes", "s", NULL};
  HAP_TRY(hap_jr_want_array(&r->jr, arr, ppath, "an array of measured points", 1 << 20));
  size_t n = json_array_size(arr);
  hap_coll_point *pts = malloc((n + 1) * sizeof *pts);
  if (pts == NULL)
    return hap_jr_oom(&r->jr);
  hap_status st = HAP_OK;
  for (size_t i = 0; i < n && st == HAP_OK; i++) {
    hap_jpath ip;
    json_t *v = json_array_get(arr, i);
    hap_jpath_index(ip, ppath, i);
    st = hap_jr_want_type(&r->jr, v, JSON_OBJECT, ip, "a point {\"bytes\", \"s\"}");
    if (st == HAP_OK)
      st = hap_jr_check_keys(&r->jr, v, ip, keys, "bytes, s");
    if (st == HAP_OK)
      st = fit_num(r, v, ip, "bytes", HAP_JR_POSITIVE, "a size in bytes", -1, &pts[i].bytes);
    if (st == HAP_OK)
      st = fit_num(r, v, ip, "s", HAP_JR_POSITIVE, "a time in s", -1, &pts[i].seconds);
  }
  if (st != HAP_OK) {
    free(pts);
    return st;
  }
  *out = pts;
  *n_points = (int32_t)n;
  return HAP_OK;
}

/* The two-piece keys of hap-cluster 1.0 (threshold_bytes 0 = one piece). */
static hap_status read_two_piece(reader *r, const json_t *v, const char *fpath, hap_ab_fit *f) {
  double thr = 0, as = 0, bs = 0, al = 0, bl = 0;
  HAP_TRY(fit_num(r, v, fpath, "alpha_large_s", HAP_JR_NON_NEGATIVE, "a latency in s", -1, &al));
  HAP_TRY(
      fit_num(r, v, fpath, "beta_large_Bps", HAP_JR_POSITIVE, "a bandwidth in bytes/s", -1, &bl));
  HAP_TRY(fit_num(r, v, fpath, "threshold_bytes", HAP_JR_NON_NEGATIVE, "a size in bytes", 0, &thr));
  HAP_TRY(fit_num(r, v, fpath, "alpha_small_s", HAP_JR_NON_NEGATIVE, "a latency in s", al, &as));
  HAP_TRY(
      fit_num(r, v, fpath, "beta_small_Bps", HAP_JR_POSITIVE, "a bandwidth in bytes/s", bl, &bs));
  *f = hap_ab_fit_two(thr, as, bs, al, bl);
  return HAP_OK;
}

static hap_status read_fit(reader *r, const json_t *v, const char *fpath) {
  static const char *const keys[] = {
      "kind",          "ranks",          "threshold_bytes", "alpha_small_s", "beta_small_Bps",
      "alpha_large_s", "beta_large_Bps", "pieces",          "points",        NULL};
  static const char *const two_piece[] = {"threshold_bytes", "alpha_small_s", "beta_small_Bps",
                                          "alpha_large_s", "beta_large_Bps"};
  hap_jpath p;
  hap_jquote b;
  json_t *m;
  const char *s;
  hap_coll_fit fit = {0};
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, fpath,
                           "a collective fit {\"kind\", \"ranks\", ...}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, fpath, keys,
                            "kind, ranks, pieces, threshold_bytes, alpha_small_s, beta_small_Bps, "
                            "alpha_large_s, beta_large_Bps, points"));
  HAP_TRY(hap_jr_member(&r->jr, v, fpath, "kind", true, "a collective such as \"all_reduce\"", &m));
  HAP_TRY(hap_jr_want_str(&r->jr, m, hap_jpath_key(p, fpath, "kind"),
                          "a collective such as \"all_reduce\"", &s));
  if (hap_coll_kind_parse(s, &fit.kind) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p,
                       "unknown collective '%s', expected all_reduce, all_gather, reduce_scatter, "
                       "all_to_all or broadcast",
                       hap_json_quote(s, b));
  if ((m = json_object_get(v, "pieces")) != NULL) {
    for (size_t k = 0; k < sizeof two_piece / sizeof two_piece[0]; k++)
      if (json_object_get(v, two_piece[k]) != NULL)
        return hap_jr_fail(
            &r->jr, HAP_EPARSE, hap_jpath_key(p, fpath, two_piece[k]),
            "is set together with pieces, expected either pieces or the two-piece keys");
    HAP_TRY(read_pieces(r, m, hap_jpath_key(p, fpath, "pieces"), &fit.fit));
  } else {
    HAP_TRY(read_two_piece(r, v, fpath, &fit.fit));
  }
  HAP_TRY(hap_jr_member(&r->jr, v, fpath, "ranks", true, "an array of device names", &m));
  HAP_TRY(hap_jr_want_array(&r->jr, m, hap_jpath_key(p, fpath, "ranks"), "an array of device names",
                            (size_t)r->c->n_devices));
  int32_t *ranks = malloc((json_array_size(m) + (size_t)r->c->n_devices + 1) * sizeof *ranks);
  if (ranks == NULL)
    return hap_jr_oom(&r->jr);
  int32_t *seen = ranks + json_array_size(m);
  for (int32_t d = 0; d < r->c->n_devices; d++)
    seen[d] = -1;
  hap_status st = read_ranks(r, m, p, ranks, seen, &fit.n_ranks);
  if (st == HAP_OK && (m = json_object_get(v, "points")) != NULL)
    st = read_points(r, m, hap_jpath_key(p, fpath, "points"), &fit.points, &fit.n_points);
  hap_err e = {0};
  fit.ranks = ranks;
  if (st == HAP_OK)
    st = hap_cluster_add_fit(r->c, &fit, &e);
  free(ranks);
  free(fit.points);
  return st == HAP_OK || e.status == HAP_OK ? st : hap_jr_fail(&r->jr, st, fpath, "%s", e.msg);
}

static hap_status read_overrides(reader *r, const json_t *root) {
  json_t *arr;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "links", false, NULL, &arr));
  if (arr != NULL) {
    HAP_TRY(hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "links", "an array of link overrides"));
    for (size_t i = 0; i < json_array_size(arr); i++) {
      hap_jpath p;
      HAP_TRY(read_link_override(r, json_array_get(arr, i), hap_jpath_index(p, "links", i)));
    }
  }
  HAP_TRY(hap_jr_member(&r->jr, root, "", "collectives", false, NULL, &arr));
  if (arr != NULL) {
    HAP_TRY(
        hap_jr_want_type(&r->jr, arr, JSON_ARRAY, "collectives", "an array of collective fits"));
    for (size_t i = 0; i < json_array_size(arr); i++) {
      hap_jpath p;
      HAP_TRY(read_fit(r, json_array_get(arr, i), hap_jpath_index(p, "collectives", i)));
    }
  }
  return HAP_OK;
}

/* ---- the document --------------------------------------------------------------------------- */

static hap_status read_cluster(reader *r, const json_t *root, const char *source) {
  HAP_TRY(read_header(r, root));
  json_t *m;
  const char *name, *s;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "name", true, "the cluster's name (a string)", &m));
  HAP_TRY(want_name(r, m, "name", &name));
  if ((m = json_object_get(root, "doc")) != NULL)
    HAP_TRY(hap_jr_want_str(&r->jr, m, "doc", "a string", &s));
  if ((m = json_object_get(root, "source")) != NULL)
    HAP_TRY(
        hap_jr_want_text(&r->jr, m, "source", "a string saying how the file was made", &source));
  double inter_latency = 0;
  if ((m = json_object_get(root, "inter_latency_s")) != NULL)
    HAP_TRY(hap_jr_want_amount(&r->jr, m, "inter_latency_s", HAP_JR_NON_NEGATIVE, "a latency in s",
                               &inter_latency));
  if (has(r->params, P_INTER_LATENCY_US))
    inter_latency = r->params->v[P_INTER_LATENCY_US] * 1e-6;
  r->c = hap_cluster_create(name);
  if (r->c == NULL || hap_cluster_set_source(r->c, source) != HAP_OK)
    return hap_jr_oom(&r->jr);
  hap_cluster_set_inter_latency(r->c, inter_latency);
  HAP_TRY(read_defaults(r, root));
  HAP_TRY(read_hosts(r, root));
  HAP_TRY(read_overrides(r, root));
  hap_err e = {0};
  hap_status st = hap_cluster_validate(r->c, &e);
  if (st != HAP_OK)
    return hap_err_set(r->jr.err, st, "%s: %s", r->jr.label, e.msg);
  return HAP_OK;
}

/* Parse with already-checked parameters; `source` is recorded unless the file names its own. */
static hap_status parse_cluster(const char *json, size_t len, const char *label, const char *source,
                                const cl_params *params, hap_cluster **out, hap_err *err) {
  *out = NULL;
  reader r = {.jr = {.label = label, .err = err, .strict = true}, .params = params};
  json_t *root;
  HAP_TRY(hap_jr_load(&r.jr, json, len, HAP_CLUSTER_FORMAT, &root));
  hap_status st = read_cluster(&r, root, source);
  json_decref(root);
  free(r.group_of_host);
  if (st != HAP_OK) {
    hap_cluster_destroy(r.c);
    hap_jr_one_line(err);
    return st;
  }
  *out = r.c;
  return HAP_OK;
}

/* "label:params" (or label) into buf: the default source of a cluster read with parameters. */
static const char *with_params(char *buf, size_t len, const char *label, const char *params) {
  if (snprintf(buf, len, "%s%s%s", label, params ? ":" : "", params ? params : "") >= (int)len)
    buf[len - 1] = '\0';
  return buf;
}

hap_status hap_cluster_from_json(const char *json, size_t len, const char *label,
                                 const char *params, hap_cluster **out, hap_err *err) {
  cl_params p;
  char source[1024];
  *out = NULL;
  label = label ? label : "<json>";
  HAP_TRY(parse_params(label, params, &p, err));
  return parse_cluster(json, len, label, with_params(source, sizeof source, label, params), &p, out,
                       err);
}

hap_status hap_cluster_read_file(const char *path, const char *params, hap_cluster **out,
                                 hap_err *err) {
  char *data;
  size_t len;
  *out = NULL;
  cl_params p;
  HAP_TRY(parse_params(path, params, &p, err));
  HAP_TRY(hap_read_file(path, &data, &len, err));
  char source[1024];
  hap_status st = parse_cluster(data, len, path, with_params(source, sizeof source, path, params),
                                &p, out, err);
  free(data);
  return st;
}

/* ---- specs and bundled clusters ------------------------------------------------------------- */

#define DIR_LEN 4096

static bool is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

static bool is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The i-th candidate datasets directory (0: $HAP_DATASETS, 1: next to the executable, 2: the
 * source tree); false when it is not configured. */
static bool datasets_candidate(int i, char *buf, size_t len) {
  if (i == 0) {
    const char *env = getenv("HAP_DATASETS");
    return env != NULL && env[0] != '\0' && snprintf(buf, len, "%s", env) < (int)len;
  }
  if (i == 1) {
    char exe[DIR_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
      return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL)
      return false;
    *slash = '\0';
    return snprintf(buf, len, "%s/../share/hap/datasets", exe) < (int)len;
  }
#ifdef HAP_DATASETS_DIR
  if (i == 2)
    return snprintf(buf, len, "%s", HAP_DATASETS_DIR) < (int)len;
#endif
  return false;
}

/* The first candidate directory holding clusters/, as "<dir>/clusters". */
static bool clusters_dir(char *buf, size_t len) {
  char dir[DIR_LEN];
  for (int i = 0; i < 3; i++)
    if (datasets_candidate(i, dir, sizeof dir) &&
        snprintf(buf, len, "%s/clusters", dir) < (int)len && is_dir(buf))
      return true;
  return false;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The *.json names (without the suffix) of `dir`, sorted, as "a, b, c". */
static hap_status list_json(const char *dir, char *buf, size_t len, hap_err *err) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return hap_err_set(err, HAP_EIO, "%s: cannot open the bundled clusters directory", dir);
  char *names[256];
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < 256;)
    if (e->d_name[0] != '.' && ends_with(e->d_name, ".json") &&
        (names[n] = strndup(e->d_name, strlen(e->d_name) - 5)) != NULL)
      n++;
  closedir(d);
  qsort(names, n, sizeof *names, cmp_str);
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (o < len)
      o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", names[i]);
    free(names[i]);
  }
  return HAP_OK;
}

hap_status hap_cluster_bundled_names(char *buf, size_t len, hap_err *err) {
  char dir[DIR_LEN];
  if (len > 0)
    buf[0] = '\0';
  if (!clusters_dir(dir, sizeof dir))
    return hap_err_set(err, HAP_ENOTFOUND,
                       "no bundled clusters found (set HAP_DATASETS to hap's datasets directory)");
  return list_json(dir, buf, len, err);
}

/* Letters, digits, '.', '_' and '-', not starting with '.': a name, never a path. */
static bool bundled_name_ok(const char *s, size_t n) {
  if (n == 0 || s[0] == '.')
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
      return false;
  return true;
}

/* Path of bundled cluster `name` (n bytes) into buf. */
static hap_status find_bundled(const char *spec, const char *name, size_t n, char *buf, size_t len,
                               hap_err *err) {
  char dir[DIR_LEN], names[512];
  if (!clusters_dir(dir, sizeof dir))
    return hap_err_set(err, HAP_ENOTFOUND,
                       "unknown cluster '%.*s': no bundled clusters found (set HAP_DATASETS to "
                       "hap's datasets directory, or give a path to a hap-cluster file)",
                       (int)n, name);
  if (bundled_name_ok(name, n) &&
      snprintf(buf, len, "%s/%.*s.json", dir, (int)n, name) < (int)len && is_file(buf))
    return HAP_OK;
  HAP_TRY(list_json(dir, names, sizeof names, err));
  return hap_err_set(err, HAP_ENOTFOUND,
                     "cluster spec '%s': unknown cluster '%.*s'; bundled clusters: %s (or give a "
                     "path to a hap-cluster file)",
                     spec, (int)n, name, names);
}

hap_status hap_cluster_load(const char *spec, hap_cluster **out, hap_err *err) {
  char label[1200], path[DIR_LEN];
  *out = NULL;
  if (spec == NULL || spec[0] == '\0')
    return hap_err_set(err, HAP_EINVAL,
                       "empty cluster spec, expected NAME[:key=value,...] or a "
                       "hap-cluster file");
  /* the whole spec as a file, else NAME before the first ':' after the last '/' */
  size_t n = is_file(spec) ? strlen(spec) : hap_spec_name_len(spec, HAP_SPEC_PATH_NAME);
  const char *params = spec[n] == ':' ? spec + n + 1 : NULL;
  snprintf(label, sizeof label, "cluster spec '%s'", spec);
  cl_params p;
  HAP_TRY(parse_params(label, params, &p, err));
  if (n >= sizeof path)
    return hap_err_set(err, HAP_EINVAL, "cluster spec '%.40s...': the path is too long", spec);
  memcpy(path, spec, n);
  path[n] = '\0';
  if (strchr(path, '/') == NULL && !ends_with(path, ".json") && !is_file(path))
    HAP_TRY(find_bundled(spec, spec, n, path, sizeof path, err));
  char *data;
  size_t len;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_status st = parse_cluster(data, len, path, spec, &p, out, err);
  free(data);
  return st;
}

/* ---- writer --------------------------------------------------------------------------------- */

/* Text the reader accepts back: UTF-8 without control characters; names also non-empty and at
 * most NAME_MAX_LEN bytes. */
static bool text_ok(const char *s, bool is_name) {
  if (s == NULL || !hap_utf8_valid(s) || (is_name && (s[0] == '\0' || strlen(s) > NAME_MAX_LEN)))
    return false;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7F)
      return false;
  return true;
}

/* Refuse what could not be read back, so written files always round-trip. */
static hap_status check_writable(const hap_cluster *c, hap_err *err) {
  hap_jquote b;
  HAP_TRY(hap_cluster_validate(c, err));
  if (!text_ok(c->name, true) || (c->source && !text_ok(c->source, false)))
    return hap_err_set(err, HAP_EINVAL,
                       "cluster '%s': name or source is empty, too long, not UTF-8 or holds "
                       "control characters",
                       hap_json_quote(c->name ? c->name : "", b));
  if (c->n_devices > HAP_CLUSTER_MAX_DEVICES)
    return hap_err_set(err, HAP_EINVAL, "cluster '%s' has %d devices, more than a file holds (%d)",
                       hap_json_quote(c->name, b), c->n_devices, HAP_CLUSTER_MAX_DEVICES);
  for (int32_t h = 0; h < c->n_hosts; h++)
    if (!text_ok(c->hosts[h].name, true) || c->hosts[h].n_devices > HOST_MAX_DEVICES)
      return hap_err_set(err, HAP_EINVAL,
                         "host %d '%s': name must be 1..%d bytes of UTF-8 without control "
                         "characters, and at most %d devices",
                         h, hap_json_quote(c->hosts[h].name ? c->hosts[h].name : "", b),
                         NAME_MAX_LEN, HOST_MAX_DEVICES);
  for (int32_t d = 0; d < c->n_devices; d++)
    if (!text_ok(c->devices[d].name, true) || !text_ok(c->devices[d].model, false))
      return hap_err_set(err, HAP_EINVAL,
                         "device %d '%s': name and model must be UTF-8 without control "
                         "characters (name 1..%d bytes)",
                         d, hap_json_quote(c->devices[d].name ? c->devices[d].name : "", b),
                         NAME_MAX_LEN);
  return HAP_OK;
}

void hap_cluster_write_link(hap_jw *w, const char *key, hap_link l) {
  hap_jw_key(w, key);
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "bandwidth_Bps");
  hap_jw_double(w, l.bandwidth_Bps);
  hap_jw_key(w, "latency_s");
  hap_jw_double(w, l.latency_s);
  hap_jw_end_object(w);
}

/* Every dtype with a non-zero peak or sustained rate, so both read back exactly. */
static void write_flops(hap_jw *w, const char *key, const hap_device *d, const double *v) {
  hap_jw_key(w, key);
  hap_jw_begin_object_inline(w);
  for (int t = 0; t < HAP_DTYPE_COUNT; t++) {
    if (d->peak_flops[t] == 0 && d->sustained_flops[t] == 0)
      continue;
    hap_jw_key(w, hap_dtype_name((hap_dtype)t));
    hap_jw_double(w, v[t]);
  }
  hap_jw_end_object(w);
}

static void write_samples(hap_jw *w, const hap_device *d) {
  if (d->n_gemm > 0) {
    hap_jw_key(w, "gemm");
    hap_jw_begin_array(w);
    for (int32_t i = 0; i < d->n_gemm; i++) {
      const hap_gemm_sample *g = &d->gemm[i];
      hap_jw_begin_object_inline(w);
      hap_jw_key(w, "m");
      hap_jw_int(w, g->m);
      hap_jw_key(w, "n");
      hap_jw_int(w, g->n);
      hap_jw_key(w, "k");
      hap_jw_int(w, g->k);
      hap_jw_key(w, "dtype");
      hap_jw_str(w, hap_dtype_name(g->dtype));
      hap_jw_key(w, "flops_per_s");
      hap_jw_double(w, g->flops_per_s);
      hap_jw_end_object(w);
    }
    hap_jw_end_array(w);
  }
  if (d->n_kernels > 0) {
    hap_jw_key(w, "kernels");
    hap_jw_begin_array(w);
    for (int32_t i = 0; i < d->n_kernels; i++) {
      const hap_kernel_sample *k = &d->kernels[i];
      char key[24];
      snprintf(key, sizeof key, "0x%016" PRIx64, k->shape_key);
      hap_jw_begin_object_inline(w);
      hap_jw_key(w, "op");
      hap_jw_str(w, hap_op_name(k->op));
      hap_jw_key(w, "backward");
      hap_jw_bool(w, k->backward);
      hap_jw_key(w, "shape_key");
      hap_jw_str(w, key);
      hap_jw_key(w, "seconds");
      hap_jw_double(w, k->seconds);
      hap_jw_end_object(w);
    }
    hap_jw_end_array(w);
  }
}

/* One line per device; devices with measured samples get a block with one sample per line. */
static void write_device(hap_jw *w, const hap_device *d) {
  if (d->n_gemm > 0 || d->n_kernels > 0)
    hap_jw_begin_object(w);
  else
    hap_jw_begin_object_inline(w);
  hap_jw_key(w, "name");
  hap_jw_str(w, d->name);
  hap_jw_key(w, "model");
  hap_jw_str(w, d->model ? d->model : "");
  hap_jw_key(w, "kind");
  hap_jw_str(w, kind_name(d->kind));
  write_flops(w, "peak_flops", d, d->peak_flops);
  write_flops(w, "sustained_flops", d, d->sustained_flops);
  hap_jw_key(w, "memory_bytes");
  hap_jw_double(w, d->memory_bytes);
  hap_jw_key(w, "memory_bw_Bps");
  hap_jw_double(w, d->memory_bw_Bps);
  hap_jw_key(w, "launch_s");
  hap_jw_double(w, d->launch_s);
  if (d->update_bw_Bps > 0) {
    hap_jw_key(w, "update_bw_Bps");
    hap_jw_double(w, d->update_bw_Bps);
  }
  write_samples(w, d);
  hap_jw_end_object(w);
}

static void write_host(hap_jw *w, const hap_cluster *c, const hap_host *h) {
  hap_jw_begin_object(w);
  hap_jw_key(w, "name");
  hap_jw_str(w, h->name);
  hap_cluster_write_link(w, "intra_host", h->intra);
  hap_cluster_write_link(w, "nic", h->nic);
  hap_jw_key(w, "devices");
  hap_jw_begin_array(w);
  for (int32_t i = 0; i < h->n_devices; i++)
    write_device(w, &c->devices[h->first_device + i]);
  hap_jw_end_array(w);
  hap_jw_end_object(w);
}

typedef struct override {
  int32_t src, dst;
  hap_link link;
} override;

static int cmp_override(const void *a, const void *b) {
  const override *x = a, *y = b;
  if (x->src != y->src)
    return x->src < y->src ? -1 : 1;
  return (x->dst > y->dst) - (x->dst < y->dst);
}

static hap_status write_overrides(hap_jw *w, const hap_cluster *c, hap_err *err) {
  int32_t n = hap_cluster_n_link_overrides(c);
  if (n <= 0)
    return HAP_OK;
  override *o = malloc((size_t)n * sizeof *o);
  if (o == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory writing cluster '%s'", c->name);
  size_t cursor = 0;
  int32_t k = 0;
  while (k < n && hap_cluster_next_link_override(c, &cursor, &o[k].src, &o[k].dst, &o[k].link))
    k++;
  qsort(o, (size_t)k, sizeof *o, cmp_override);
  hap_jw_key(w, "links");
  hap_jw_begin_array(w);
  for (int32_t i = 0; i < k; i++) {
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "src");
    hap_jw_str(w, c->devices[o[i].src].name);
    hap_jw_key(w, "dst");
    hap_jw_str(w, c->devices[o[i].dst].name);
    hap_jw_key(w, "bandwidth_Bps");
    hap_jw_double(w, o[i].link.bandwidth_Bps);
    hap_jw_key(w, "latency_s");
    hap_jw_double(w, o[i].link.latency_s);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
  free(o);
  return HAP_OK;
}

static void write_fits(hap_jw *w, const hap_cluster *c) {
  if (c->n_fits == 0)
    return;
  hap_jw_key(w, "collectives");
  hap_jw_begin_array(w);
  for (int32_t i = 0; i < c->n_fits; i++) {
    const hap_coll_fit *f = &c->fits[i];
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "kind");
    hap_jw_str(w, hap_coll_kind_name(f->kind));
    hap_jw_key(w, "ranks");
    hap_jw_begin_array_inline(w);
    for (int32_t k = 0; k < f->n_ranks; k++)
      hap_jw_str(w, c->devices[f->ranks[k]].name);
    hap_jw_end_array(w);
    const hap_ab_fit *ab = &f->fit;
    if (ab->n_pieces <= 2) { /* the 1.0 keys, as before */
      int32_t large = ab->n_pieces - 1;
      hap_jw_key(w, "threshold_bytes");
      hap_jw_double(w, ab->n_pieces == 2 ? ab->upper_bytes[0] : 0);
      hap_jw_key(w, "alpha_small_s");
      hap_jw_double(w, ab->alpha_s[0]);
      hap_jw_key(w, "beta_small_Bps");
      hap_jw_double(w, ab->beta_Bps[0]);
      hap_jw_key(w, "alpha_large_s");
      hap_jw_double(w, ab->alpha_s[large]);
      hap_jw_key(w, "beta_large_Bps");
      hap_jw_double(w, ab->beta_Bps[large]);
    } else {
      hap_jw_key(w, "pieces");
      hap_jw_begin_array_inline(w);
      for (int32_t k = 0; k < ab->n_pieces; k++) {
        hap_jw_begin_object_inline(w);
        if (k + 1 < ab->n_pieces) {
          hap_jw_key(w, "below_bytes");
          hap_jw_double(w, ab->upper_bytes[k]);
        }
        hap_jw_key(w, "alpha_s");
        hap_jw_double(w, ab->alpha_s[k]);
        hap_jw_key(w, "beta_Bps");
        hap_jw_double(w, ab->beta_Bps[k]);
        hap_jw_end_object(w);
      }
      hap_jw_end_array(w);
    }
    if (f->n_points > 0) {
      hap_jw_key(w, "points");
      hap_jw_begin_array_inline(w);
      for (int32_t k = 0; k < f->n_points; k++) {
        hap_jw_begin_object_inline(w);
        hap_jw_key(w, "bytes");
        hap_jw_double(w, f->points[k].bytes);
        hap_jw_key(w, "s");
        hap_jw_double(w, f->points[k].seconds);
        hap_jw_end_object(w);
      }
      hap_jw_end_array(w);
    }
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
}

hap_status hap_cluster_write(const hap_cluster *c, FILE *f, hap_err *err) {
  HAP_TRY(check_writable(c, err));
  /* the oldest version that holds it (so a cluster without 1.1's points digests as before) */
  int32_t minor = 0;
  for (int32_t i = 0; i < c->n_fits; i++)
    minor = c->fits[i].n_points > 0 ? HAP_CLUSTER_VERSION_MINOR : minor;
  char version[32];
  snprintf(version, sizeof version, "%d.%d", HAP_CLUSTER_VERSION_MAJOR, minor);
  hap_jw w;
  hap_jw_init(&w, f, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "format");
  hap_jw_str(&w, HAP_CLUSTER_FORMAT);
  hap_jw_key(&w, "version");
  hap_jw_str(&w, version);
  hap_jw_key(&w, "name");
  hap_jw_str(&w, c->name);
  if (c->source != NULL) {
    hap_jw_key(&w, "source");
    hap_jw_str(&w, c->source);
  }
  hap_jw_key(&w, "inter_latency_s");
  hap_jw_double(&w, c->inter_latency_s);
  hap_jw_key(&w, "hosts");
  hap_jw_begin_array(&w);
  for (int32_t h = 0; h < c->n_hosts; h++)
    write_host(&w, c, &c->hosts[h]);
  hap_jw_end_array(&w);
  HAP_TRY(write_overrides(&w, c, err));
  write_fits(&w, c);
  hap_jw_end_object(&w);
  if (!hap_jw_finish(&w))
    return hap_err_set(err, HAP_EIO, "cannot write cluster '%s': write failed", c->name);
  return HAP_OK;
}

hap_status hap_cluster_write_file(const hap_cluster *c, const char *path, hap_err *err) {
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  hap_err e = {0};
  hap_status st = hap_cluster_write(c, af.f, &e);
  if (st != HAP_OK) {
    hap_atomic_abort(&af);
    return hap_err_set(err, st, "%s: %s", path, e.msg);
  }
  return hap_atomic_commit(&af, err);
}

hap_status hap_cluster_digest(const hap_cluster *c, uint64_t *out, hap_err *err) {
  /* a shallow copy without the provenance or the name: the name of a profile is the path it was
   * loaded from, so a byte-identical copy elsewhere must digest the same */
  hap_cluster canon = *c;
  canon.source = NULL;
  canon.name = "cluster";
  hap_digest_stream ds;
  if (!hap_digest_open(&ds))
    return hap_err_set(err, HAP_ENOMEM, "cluster '%s': out of memory computing its digest",
                       c->name);
  hap_status st = hap_cluster_write(&canon, ds.f, err);
  if (!hap_digest_close(&ds, st == HAP_OK ? out : NULL) && st == HAP_OK)
    st = hap_err_set(err, HAP_ENOMEM, "cluster '%s': out of memory computing its digest", c->name);
  return st;
}
