/* sweep.c — the what-if grid of hap-sim (sweep.h): axes, points, and building a point. */
#include "simulate/sweep.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/spec.h"
#include "cluster/cluster_io.h"
#include "model/zoo.h"

/* ---- axes ------------------------------------------------------------------------------------ */

static bool is_cluster_param(const char *key) {
  for (int i = 0; i < hap_cluster_param_count(); i++)
    if (strcmp(hap_cluster_param_get(i)->name, key) == 0)
      return true;
  return false;
}

/* The zoo model a model spec names (NULL for a file or an unknown name). */
static const hap_model_def *zoo_def(const char *model) {
  char name[128];
  size_t n = hap_spec_name_len(model, HAP_SPEC_PLAIN_NAME);
  if (n >= sizeof name)
    return NULL;
  memcpy(name, model, n);
  name[n] = '\0';
  return hap_zoo_find(name);
}

static bool is_model_opt(const char *model, const char *key) {
  const hap_model_def *def = zoo_def(model);
  for (int i = 0; def != NULL && i < def->n_opts; i++)
    if (strcmp(def->opts[i].name, key) == 0)
      return true;
  return false;
}

/* "gpus_per_host, hosts, ..., batch, layers, ..., device[MODEL]" into buf. */
static void valid_keys(const char *model, char *buf, size_t len) {
  size_t off = 0;
  for (int i = 0; i < hap_cluster_param_count() && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "",
                            hap_cluster_param_get(i)->name);
  const hap_model_def *def = zoo_def(model);
  for (int i = 0; def != NULL && i < def->n_opts && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, ", %s", def->opts[i].name);
  if (off < len)
    snprintf(buf + off, len - off, ", device[MODEL]");
}

/* The kind of axis `key` (and a's match for device[M]). */
static hap_status axis_kind(const hap_sweep *s, hap_sweep_axis *a, hap_err *err) {
  size_t kn = strlen(a->key);
  if (strncmp(a->key, "device[", 7) == 0 && kn > 8 && a->key[kn - 1] == ']') {
    a->kind = HAP_SWEEP_DEVICE;
    memcpy(a->match, a->key + 7, kn - 8);
  } else if (is_cluster_param(a->key)) {
    a->kind = HAP_SWEEP_CLUSTER;
  } else if (is_model_opt(s->model, a->key)) {
    a->kind = HAP_SWEEP_MODEL;
  } else {
    char keys[1024];
    valid_keys(s->model, keys, sizeof keys);
    return hap_err_set(err, HAP_EINVAL, "--sweep: unknown key '%s'; valid keys: %s", a->key, keys);
  }
  return HAP_OK;
}

/* "V1,V2,..." of axis a (given as `arg`) into a->values. */
static hap_status axis_values(hap_sweep_axis *a, const char *v, const char *arg, hap_err *err) {
  for (;;) {
    size_t n = strcspn(v, ",");
    if (n == 0 || n >= sizeof a->values[0] || a->n == HAP_SWEEP_MAX_VALUES)
      return hap_err_set(err, HAP_EINVAL, "--sweep %s: empty or too long value list in '%s'",
                         a->key, arg);
    char *value = a->values[a->n++];
    memcpy(value, v, n);
    value[n] = '\0';
    if (a->kind == HAP_SWEEP_DEVICE && hap_preset_find(value) == NULL) {
      const char *near = hap_preset_suggest(value);
      return hap_err_set(err, HAP_EINVAL, "--sweep %s: unknown device preset '%s'%s%s%s", a->key,
                         value, near ? " (did you mean '" : "", near ? near : "",
                         near ? "'?)" : "");
    }
    if (v[n] == '\0')
      return HAP_OK;
    v += n + 1;
  }
}

/* "KEY=V1,V2,..." -> the next axis of s. */
static hap_status add_axis(hap_sweep *s, const char *arg, hap_err *err) {
  const char *eq = strchr(arg, '=');
  if (eq == NULL || eq == arg || eq[1] == '\0' || (size_t)(eq - arg) >= HAP_SWEEP_TEXT_MAX)
    return hap_err_set(err, HAP_EINVAL, "--sweep '%s' is not of the form KEY=V1,V2,...", arg);
  if (s->n_axes == HAP_SWEEP_MAX_AXES)
    return hap_err_set(err, HAP_EINVAL, "at most %d --sweep axes", HAP_SWEEP_MAX_AXES);
  hap_sweep_axis *a = &s->axes[s->n_axes];
  memset(a, 0, sizeof *a);
  memcpy(a->key, arg, (size_t)(eq - arg));
  HAP_TRY(axis_kind(s, a, err));
  for (int i = 0; i < s->n_axes; i++)
    if (strcmp(s->axes[i].key, a->key) == 0)
      return hap_err_set(err, HAP_EINVAL, "--sweep: key '%s' is given twice", a->key);
  HAP_TRY(axis_values(a, eq + 1, arg, err));
  s->n_axes++;
  return HAP_OK;
}

hap_status hap_sweep_init(hap_sweep *s, const hap_sweep_config *cfg, hap_err *err) {
  memset(s, 0, sizeof *s);
  s->model = cfg->model;
  s->cluster = cfg->cluster;
  s->batch_per_device = cfg->batch_per_device;
  if (cfg->batch_per_device > 0 && zoo_def(cfg->model) == NULL)
    return hap_err_set(err, HAP_EINVAL, "--batch-per-device needs a zoo model, not the file '%s'",
                       cfg->model);
  for (int i = 0; cfg->batch_per_device > 0 && i < cfg->n_axes; i++)
    if (strncmp(cfg->axes[i], "batch=", 6) == 0)
      return hap_err_set(err, HAP_EINVAL,
                         "--batch-per-device and --sweep batch=... exclude each other");
  for (int i = 0; i < cfg->n_axes; i++)
    HAP_TRY(add_axis(s, cfg->axes[i], err));
  for (int i = 0; i < s->n_axes && cfg->cluster_is_profile; i++)
    if (s->axes[i].kind == HAP_SWEEP_CLUSTER)
      return hap_err_set(err, HAP_EINVAL,
                         "--sweep %s: cluster parameters apply to cluster specs and hap-cluster "
                         "files, not to the measured profile '%s' (device[M]=PRESET still works)",
                         s->axes[i].key, cfg->cluster);
  return HAP_OK;
}

int hap_sweep_points(const hap_sweep *s) {
  int n = 1;
  for (int i = 0; i < s->n_axes; i++)
    n *= s->axes[i].n;
  return n;
}

/* ---- points ---------------------------------------------------------------------------------- */

/* A spec being edited: the base text until the first set, then its parse. */
typedef struct edit {
  const char *base;
  hap_spec_names names;
  hap_spec spec;
  bool parsed; /* spec holds the base parsed (and edited) */
  bool malformed;
} edit;

static hap_status edit_set(edit *e, const char *key, const char *value, hap_err *err) {
  if (!e->parsed && !e->malformed) {
    hap_status st = hap_spec_parse(e->base, e->names, &e->spec, NULL);
    if (st == HAP_ENOMEM)
      return hap_err_set(err, st, "out of memory editing the spec '%s'", e->base);
    e->parsed = st == HAP_OK;
    e->malformed = st != HAP_OK; /* left as it is: loading it says why */
  }
  return e->parsed ? hap_spec_set(&e->spec, key, value, err) : HAP_OK;
}

/* The edited spec into buf[HAP_SWEEP_SPEC_MAX]; HAP_EINVAL when it does not fit. */
static hap_status edit_text(const edit *e, char *buf, hap_err *err) {
  if (e->parsed)
    return hap_spec_format(&e->spec, buf, HAP_SWEEP_SPEC_MAX, err);
  if ((size_t)snprintf(buf, HAP_SWEEP_SPEC_MAX, "%s", e->base) >= HAP_SWEEP_SPEC_MAX)
    return hap_err_set(err, HAP_EINVAL, "spec '%.40s...': longer than %d characters", e->base,
                       HAP_SWEEP_SPEC_MAX - 1);
  return HAP_OK;
}

hap_status hap_sweep_point_init(const hap_sweep *s, int p, hap_sweep_point *pt, hap_err *err) {
  memset(pt, 0, sizeof *pt);
  pt->index = p;
  for (int i = s->n_axes - 1, rem = p; i >= 0; i--) { /* the last axis varies fastest */
    pt->pos[i] = rem % s->axes[i].n;
    rem /= s->axes[i].n;
  }
  edit m = {.base = s->model, .names = HAP_SPEC_PLAIN_NAME};
  edit c = {.base = s->cluster, .names = HAP_SPEC_PATH_NAME};
  size_t off = 0;
  hap_status st = HAP_OK;
  for (int i = 0; i < s->n_axes && st == HAP_OK; i++) {
    const hap_sweep_axis *a = &s->axes[i];
    const char *v = a->values[pt->pos[i]];
    if (off < sizeof pt->label)
      off += (size_t)snprintf(pt->label + off, sizeof pt->label - off, "%s%s=%s", i ? " " : "",
                              a->key, v);
    if (a->kind == HAP_SWEEP_CLUSTER)
      st = edit_set(&c, a->key, v, err);
    else if (a->kind == HAP_SWEEP_MODEL)
      st = edit_set(&m, a->key, v, err);
  }
  hap_err quiet = {0};
  if (st == HAP_OK &&
      (edit_text(&m, pt->model, &quiet) != HAP_OK || edit_text(&c, pt->cluster, &quiet) != HAP_OK))
    st = hap_err_set(err, HAP_EINVAL, "a model or cluster spec is longer than %d characters",
                     HAP_SWEEP_SPEC_MAX);
  hap_spec_free(&m.spec);
  hap_spec_free(&c.spec);
  return st;
}

/* pt->model with batch=N set, and " batch=N" on the label. */
static hap_status set_batch(const hap_sweep *s, hap_sweep_point *pt, hap_err *err) {
  char batch[32];
  snprintf(batch, sizeof batch, "%lld", (long long)s->batch_per_device * pt->devices);
  edit m = {.base = pt->model, .names = HAP_SPEC_PLAIN_NAME};
  char model[HAP_SWEEP_SPEC_MAX];
  hap_err quiet = {0};
  hap_status st = edit_set(&m, "batch", batch, err);
  if (st == HAP_OK && edit_text(&m, model, &quiet) != HAP_OK)
    st = hap_err_set(err, HAP_EINVAL, "model spec too long: %s", pt->model);
  hap_spec_free(&m.spec);
  if (st != HAP_OK)
    return st;
  memcpy(pt->model, model, sizeof model);
  size_t off = strlen(pt->label);
  snprintf(pt->label + off, sizeof pt->label - off, "%sbatch=%s", pt->label[0] ? " " : "", batch);
  return HAP_OK;
}

hap_status hap_sweep_point_load(const hap_sweep *s, hap_sweep_point *pt,
                                hap_sweep_open_fn open_cluster, hap_graph **graph,
                                hap_cluster **cluster, hap_err *err) {
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  *graph = NULL;
  *cluster = NULL;
  pt->devices = 0;
  hap_status st = open_cluster(pt->cluster, &c, err);
  if (st == HAP_OK)
    pt->devices = c->n_devices;
  if (st == HAP_OK && s->batch_per_device > 0)
    st = set_batch(s, pt, err);
  if (st == HAP_OK)
    st = hap_model_load(pt->model, &g, err);
  for (int i = 0; i < s->n_axes && st == HAP_OK; i++) {
    const hap_sweep_axis *a = &s->axes[i];
    if (a->kind != HAP_SWEEP_DEVICE)
      continue;
    const hap_device_preset *pre = hap_preset_find(a->values[pt->pos[i]]); /* checked by init */
    if (pre == NULL || hap_sweep_substitute(c, a->match, pre) == 0)
      st = hap_err_set(err, HAP_EINVAL, "--sweep %s: no device of %s has a model containing '%s'",
                       a->key, pt->cluster, a->match);
  }
  if (st != HAP_OK) {
    hap_graph_destroy(g);
    hap_cluster_destroy(c);
    return st;
  }
  *graph = g;
  *cluster = c;
  return HAP_OK;
}

int hap_sweep_substitute(hap_cluster *c, const char *match, const hap_device_preset *preset) {
  size_t ml = strlen(match);
  int n = 0;
  for (int32_t i = 0; i < c->n_devices; i++) {
    hap_device *d = &c->devices[i];
    bool hit = false;
    for (const char *p = d->model; *p != '\0' && !hit; p++)
      hit = strncasecmp(p, match, ml) == 0;
    if (!hit)
      continue;
    hap_device proto;
    memset(&proto, 0, sizeof proto);
    hap_preset_to_device(preset, &proto);
    d->model = preset->name; /* static */
    d->kind = proto.kind;
    memcpy(d->peak_flops, proto.peak_flops, sizeof d->peak_flops);
    memcpy(d->sustained_flops, proto.sustained_flops, sizeof d->sustained_flops);
    d->memory_bytes = proto.memory_bytes;
    d->memory_bw_Bps = proto.memory_bw_Bps;
    d->launch_s = proto.launch_s;
    d->update_bw_Bps = proto.update_bw_Bps;
    d->n_gemm = 0; /* measurements of the old device do not apply */
    d->n_kernels = 0;
    n++;
  }
  return n;
}
