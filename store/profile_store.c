/* profile_store.c — the hap-profile model (building, validation, statistics, merging, loading into
 * the cluster model) and its HDF5 writer; the reader is profile_read.c.
 *
 * HDF5 layout, format "hap-profile", version "2.2". Strings are variable-length UTF-8 scalars
 * (h5py reads them as str) except inside compound tables, where they are fixed-length.
 *   /                       attrs format, version ("MAJOR.MINOR"), created (ISO-8601 UTC), tool,
 *                           backend (str), hosts (str[H])
 *   /env                    attrs <KEY> = <value> (str), in creation order
 *   /devices/<i>            i = 0..D-1; attrs name, host, model, kind ("gpu" | "cpu") (str),
 *                           memory_bytes (int64), memory_bw_Bps, launch_s (float64),
 *                           update_bw_Bps (float64, the SGD update's bytes/s; 2.1, only when
 *                           measured: a 2.0 file has none and prices updates at memory_bw_Bps),
 *                           peak_flops_<dtype> (float64; only the known ones)
 *   /devices/<i>/gemm       compound[G] {m, n, k int64; dtype char[16]; seconds, flops_per_s f64}
 *   /devices/<i>/kernels    compound[K] {op char[32]; direction char[4] ("fwd" | "bwd");
 *                           shape_key uint64; shape char[128]; p50_s, p95_s f64; reps int64;
 *                           mean_s f64 (2.2; 0 = not recorded, as in a 2.1 file, which lacks it)}
 *   /p2p/<src>-<dst>        attrs src, dst, warmup, iters (int64), latency_s, bandwidth_Bps (f64:
 *                           the one-piece link), FIT; sizes_bytes int64[N], samples_s
 *                           f64[N, reps], p50_s, p95_s f64[N]
 *   /collectives/<kind>/<group>
 *                           attrs ranks (int64[n]), warmup, iters (int64), FIT; the four datasets
 *                           of /p2p plus algbw_Bps, busbw_Bps f64[N]
 *   FIT                     attrs fit_upper_bytes, fit_alpha_s, fit_beta_Bps (f64[P], 1 <= P <= 8):
 *                           piece i serves fit_upper_bytes[i-1] <= S < fit_upper_bytes[i] with
 *                           t = fit_alpha_s[i] + S / fit_beta_Bps[i]; the last bound is inf
 * Version 1.x files (read, never written) have no FIT: a collective has threshold_bytes,
 * alpha_small_s, beta_small_Bps, alpha_large_s, beta_large_Bps (two pieces) and a p2p pair's
 * pieces are its latency_s / bandwidth_Bps.
 * Every dataset has a "units" attribute (str). Groups track link and attribute creation order, so
 * readers see sweeps and environment entries in the order they were written. Readers refuse a
 * newer major version and ignore groups, datasets and attributes they do not know. */
#include "store/profile_store.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/vec.h"
#include "hap_config.h"
#include "profile_h5.h"

/* ---- building ------------------------------------------------------------------------------- */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL)
    memcpy(d, s, n);
  return d;
}

/* Replace *field with a copy of v; -1 on allocation failure (the old value stays). */
static int set_str(char **field, const char *v) {
  char *d = dup_str(v);
  if (d == NULL)
    return -1;
  free(*field);
  *field = d;
  return 0;
}

static void utc_now(char *buf, size_t len) {
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm) == NULL || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(buf, len, "1970-01-01T00:00:00Z");
}

hap_profile *hap_profile_create(void) {
  hap_profile *p = calloc(1, sizeof *p);
  if (p == NULL)
    return NULL;
  char now[32];
  utc_now(now, sizeof now);
  p->version_major = HAP_PROFILE_VERSION_MAJOR;
  p->version_minor = HAP_PROFILE_VERSION_MINOR;
  p->created = dup_str(now);
  p->tool = dup_str("hap-profile " HAP_VERSION);
  p->backend = dup_str("");
  if (p->created == NULL || p->tool == NULL || p->backend == NULL) {
    hap_profile_destroy(p);
    return NULL;
  }
  return p;
}

static void free_device(hap_profile_device *d) {
  free(d->name);
  free(d->host);
  free(d->model);
  free(d->gemm);
  free(d->kernels);
}

static void free_p2p(hap_profile_p2p *s) {
  free(s->sizes_bytes);
  free(s->samples_s);
  free(s->p50_s);
  free(s->p95_s);
}

static void free_coll(hap_profile_coll *c) {
  free(c->group);
  free(c->ranks);
  free(c->sizes_bytes);
  free(c->samples_s);
  free(c->p50_s);
  free(c->p95_s);
  free(c->algbw_Bps);
  free(c->busbw_Bps);
}

void hap_profile_destroy(hap_profile *p) {
  if (p == NULL)
    return;
  free(p->created);
  free(p->tool);
  free(p->backend);
  free(p->source);
  for (int32_t i = 0; i < p->n_hosts; i++)
    free(p->hosts[i]);
  free(p->hosts);
  for (int32_t i = 0; i < p->n_env; i++) {
    free(p->env[i].key);
    free(p->env[i].value);
  }
  free(p->env);
  for (int32_t i = 0; i < p->n_devices; i++)
    free_device(&p->devices[i]);
  free(p->devices);
  for (int32_t i = 0; i < p->n_p2p; i++)
    free_p2p(&p->p2p[i]);
  free(p->p2p);
  for (int32_t i = 0; i < p->n_colls; i++)
    free_coll(&p->colls[i]);
  free(p->colls);
  free(p);
}

static hap_status oom(hap_err *err, const char *what) {
  return hap_err_set(err, HAP_ENOMEM, "out of memory adding %s to a profile", what);
}

hap_status hap_profile_set_meta(hap_profile *p, const char *created, const char *tool,
                                const char *backend, hap_err *err) {
  if ((created && set_str(&p->created, created) != 0) || (tool && set_str(&p->tool, tool) != 0) ||
      (backend && set_str(&p->backend, backend) != 0))
    return oom(err, "the root attributes");
  return HAP_OK;
}

hap_status hap_profile_add_host(hap_profile *p, const char *name, hap_err *err) {
  if (name == NULL)
    return hap_err_set(err, HAP_EINVAL, "profile host name is NULL");
  if (HAP_VEC_RESERVE(p->hosts, p->cap_hosts, (int64_t)p->n_hosts + 1, 8) != 0)
    return oom(err, "a host");
  p->hosts[p->n_hosts] = dup_str(name);
  if (p->hosts[p->n_hosts] == NULL)
    return oom(err, "a host");
  p->n_hosts++;
  return HAP_OK;
}

const char *hap_profile_get_env(const hap_profile *p, const char *key) {
  for (int32_t i = 0; i < p->n_env; i++)
    if (strcmp(p->env[i].key, key) == 0)
      return p->env[i].value;
  return NULL;
}

hap_status hap_profile_set_env(hap_profile *p, const char *key, const char *value, hap_err *err) {
  if (key == NULL || value == NULL)
    return hap_err_set(err, HAP_EINVAL, "profile environment key or value is NULL");
  for (int32_t i = 0; i < p->n_env; i++)
    if (strcmp(p->env[i].key, key) == 0)
      return set_str(&p->env[i].value, value) == 0 ? HAP_OK : oom(err, "an environment entry");
  if (HAP_VEC_RESERVE(p->env, p->cap_env, (int64_t)p->n_env + 1, 8) != 0)
    return oom(err, "an environment entry");
  hap_profile_kv *kv = &p->env[p->n_env];
  kv->key = dup_str(key);
  kv->value = dup_str(value);
  if (kv->key == NULL || kv->value == NULL) {
    free(kv->key);
    free(kv->value);
    return oom(err, "an environment entry");
  }
  p->n_env++;
  return HAP_OK;
}

hap_status hap_profile_add_device(hap_profile *p, const char *name, const char *host,
                                  const char *model, hap_device_kind kind, int32_t *index,
                                  hap_err *err) {
  if (name == NULL || host == NULL || model == NULL)
    return hap_err_set(err, HAP_EINVAL, "profile device name, host or model is NULL");
  if (HAP_VEC_RESERVE(p->devices, p->cap_devices, (int64_t)p->n_devices + 1, 8) != 0)
    return oom(err, "a device");
  hap_profile_device *d = &p->devices[p->n_devices];
  memset(d, 0, sizeof *d);
  d->name = dup_str(name);
  d->host = dup_str(host);
  d->model = dup_str(model);
  d->kind = kind;
  if (d->name == NULL || d->host == NULL || d->model == NULL) {
    free_device(d);
    return oom(err, "a device");
  }
  if (index != NULL)
    *index = p->n_devices;
  p->n_devices++;
  return HAP_OK;
}

hap_status hap_profile_add_gemm(hap_profile_device *d, const hap_profile_gemm *row, hap_err *err) {
  if (HAP_VEC_RESERVE(d->gemm, d->cap_gemm, (int64_t)d->n_gemm + 1, 8) != 0)
    return oom(err, "a GEMM row");
  d->gemm[d->n_gemm++] = *row;
  return HAP_OK;
}

hap_status hap_profile_add_kernel(hap_profile_device *d, const hap_profile_kernel *row,
                                  hap_err *err) {
  if (HAP_VEC_RESERVE(d->kernels, d->cap_kernels, (int64_t)d->n_kernels + 1, 8) != 0)
    return oom(err, "a kernel row");
  d->kernels[d->n_kernels] = *row;
  d->kernels[d->n_kernels].shape[HAP_PROFILE_SHAPE_MAX - 1] = '\0';
  d->n_kernels++;
  return HAP_OK;
}

/* Allocate the zeroed arrays of a sweep: sizes and each per_size[i] of n_sizes, samples of
 * n_sizes * reps. */
static hap_status sweep_alloc(int32_t n_sizes, int32_t reps, int64_t **sizes, double **samples,
                              double **per_size[], int n_per_size, hap_err *err) {
  if (n_sizes < 1 || reps < 1)
    return hap_err_set(err, HAP_EINVAL, "a sweep needs >= 1 size and >= 1 repetition, got %d x %d",
                       n_sizes, reps);
  if ((int64_t)n_sizes * reps > INT32_MAX)
    return hap_err_set(err, HAP_EOVERFLOW, "a sweep of %d sizes x %d repetitions is too large",
                       n_sizes, reps);
  *sizes = calloc((size_t)n_sizes, sizeof **sizes);
  *samples = calloc((size_t)n_sizes * (size_t)reps, sizeof **samples);
  bool ok = *sizes != NULL && *samples != NULL;
  for (int i = 0; i < n_per_size; i++) {
    *per_size[i] = calloc((size_t)n_sizes, sizeof **per_size[i]);
    ok = ok && *per_size[i] != NULL;
  }
  return ok ? HAP_OK : oom(err, "a sweep");
}

hap_status hap_profile_add_p2p(hap_profile *p, int32_t src, int32_t dst, int32_t n_sizes,
                               int32_t reps, int32_t *index, hap_err *err) {
  if (HAP_VEC_RESERVE(p->p2p, p->cap_p2p, (int64_t)p->n_p2p + 1, 8) != 0)
    return oom(err, "a p2p sweep");
  hap_profile_p2p *s = &p->p2p[p->n_p2p];
  memset(s, 0, sizeof *s);
  double **per_size[] = {&s->p50_s, &s->p95_s};
  hap_status st = sweep_alloc(n_sizes, reps, &s->sizes_bytes, &s->samples_s, per_size, 2, err);
  if (st != HAP_OK) {
    free_p2p(s);
    return st;
  }
  s->src = src;
  s->dst = dst;
  s->n_sizes = n_sizes;
  s->reps = reps;
  s->iters = 1;
  if (index != NULL)
    *index = p->n_p2p;
  p->n_p2p++;
  return HAP_OK;
}

hap_status hap_profile_add_coll(hap_profile *p, hap_coll_kind kind, const char *group,
                                const int32_t *ranks, int32_t n_ranks, int32_t n_sizes,
                                int32_t reps, int32_t *index, hap_err *err) {
  if (group == NULL || ranks == NULL || n_ranks < 1)
    return hap_err_set(err, HAP_EINVAL, "a profile collective needs a group name and >= 1 rank");
  if (HAP_VEC_RESERVE(p->colls, p->cap_colls, (int64_t)p->n_colls + 1, 8) != 0)
    return oom(err, "a collective sweep");
  hap_profile_coll *c = &p->colls[p->n_colls];
  memset(c, 0, sizeof *c);
  double **per_size[] = {&c->p50_s, &c->p95_s, &c->algbw_Bps, &c->busbw_Bps};
  hap_status st = sweep_alloc(n_sizes, reps, &c->sizes_bytes, &c->samples_s, per_size, 4, err);
  c->group = dup_str(group);
  c->ranks = malloc((size_t)n_ranks * sizeof *c->ranks);
  if (st == HAP_OK && (c->group == NULL || c->ranks == NULL))
    st = oom(err, "a collective sweep");
  if (st != HAP_OK) {
    free_coll(c);
    return st;
  }
  memcpy(c->ranks, ranks, (size_t)n_ranks * sizeof *c->ranks);
  c->kind = kind;
  c->n_ranks = n_ranks;
  c->n_sizes = n_sizes;
  c->reps = reps;
  c->iters = 1;
  if (index != NULL)
    *index = p->n_colls;
  p->n_colls++;
  return HAP_OK;
}

int32_t hap_profile_find_device(const hap_profile *p, const char *name) {
  for (int32_t i = 0; i < p->n_devices; i++)
    if (strcmp(p->devices[i].name, name) == 0)
      return i;
  return -1;
}

const hap_profile_p2p *hap_profile_find_p2p(const hap_profile *p, int32_t src, int32_t dst) {
  for (int32_t i = 0; i < p->n_p2p; i++)
    if (p->p2p[i].src == src && p->p2p[i].dst == dst)
      return &p->p2p[i];
  return NULL;
}

const hap_profile_coll *hap_profile_find_coll(const hap_profile *p, hap_coll_kind kind,
                                              const char *group) {
  for (int32_t i = 0; i < p->n_colls; i++)
    if (p->colls[i].kind == kind && strcmp(p->colls[i].group, group) == 0)
      return &p->colls[i];
  return NULL;
}

/* ---- validation ----------------------------------------------------------------------------- */

typedef char objbuf[320]; /* a profile path like /collectives/all_reduce/host:v100-0 */

static void p2p_path(objbuf obj, const hap_profile_p2p *s) {
  snprintf(obj, sizeof(objbuf), "/p2p/%d-%d", s->src, s->dst);
}

static void coll_path(objbuf obj, const hap_profile_coll *c) {
  snprintf(obj, sizeof(objbuf), "/collectives/%s/%.200s", hap_coll_kind_name(c->kind), c->group);
}

static bool finite_ge0(double x) { return isfinite(x) && x >= 0; }
static bool finite_gt0(double x) { return isfinite(x) && x > 0; }

/* "<obj>: <field> is <v>, expected a finite number >= 0" (or > 0 when `positive`). */
static hap_status check_num(const char *obj, const char *field, double v, bool positive,
                            hap_err *err) {
  if (positive ? finite_gt0(v) : finite_ge0(v))
    return HAP_OK;
  return hap_err_set(err, HAP_EINVAL, "%s: %s is %g, expected a finite number %s", obj, field, v,
                     positive ? "> 0" : ">= 0");
}

/* Every element of a[0..n) as check_num; in a 2-D array (cols > 0) the index reads [i][j]. */
static hap_status check_array(const char *obj, const char *field, const double *a, int64_t n,
                              int32_t cols, bool positive, hap_err *err) {
  for (int64_t i = 0; i < n; i++) {
    if (positive ? finite_gt0(a[i]) : finite_ge0(a[i]))
      continue;
    char where[96];
    if (cols > 0)
      snprintf(where, sizeof where, "%s[%lld][%lld]", field, (long long)(i / cols),
               (long long)(i % cols));
    else
      snprintf(where, sizeof where, "%s[%lld]", field, (long long)i);
    return check_num(obj, where, a[i], positive, err);
  }
  return HAP_OK;
}

static hap_status check_text(const char *obj, const char *field, const char *s, hap_err *err) {
  if (s != NULL && s[0] != '\0')
    return HAP_OK;
  return hap_err_set(err, HAP_EINVAL, "%s: %s is empty, expected a non-empty string", obj, field);
}

/* What p2p and collective sweeps share. */
typedef struct sweep_view {
  int32_t n_sizes, reps, warmup, iters;
  const int64_t *sizes_bytes;
  const double *samples_s, *p50_s, *p95_s;
} sweep_view;

static hap_status check_sweep(const char *obj, const sweep_view *s, hap_err *err) {
  if (s->n_sizes < 1 || s->reps < 1)
    return hap_err_set(err, HAP_EINVAL, "%s: %d sizes x %d repetitions, expected at least 1 x 1",
                       obj, s->n_sizes, s->reps);
  if (s->warmup < 0 || s->iters < 1)
    return hap_err_set(err, HAP_EINVAL, "%s: warmup %d, iters %d: expected warmup >= 0, iters >= 1",
                       obj, s->warmup, s->iters);
  for (int32_t i = 0; i < s->n_sizes; i++) {
    if (s->sizes_bytes[i] < 0)
      return hap_err_set(err, HAP_EINVAL, "%s: sizes_bytes[%d] is %lld, expected >= 0", obj, i,
                         (long long)s->sizes_bytes[i]);
    if (i > 0 && s->sizes_bytes[i] <= s->sizes_bytes[i - 1])
      return hap_err_set(
          err, HAP_EINVAL,
          "%s: sizes_bytes[%d] = %lld after %lld, expected strictly increasing sizes", obj, i,
          (long long)s->sizes_bytes[i], (long long)s->sizes_bytes[i - 1]);
  }
  HAP_TRY(check_array(obj, "samples_s", s->samples_s, (int64_t)s->n_sizes * s->reps, s->reps, true,
                      err));
  HAP_TRY(check_array(obj, "p50_s", s->p50_s, s->n_sizes, 0, false, err));
  return check_array(obj, "p95_s", s->p95_s, s->n_sizes, 0, false, err);
}

static hap_status check_root(const hap_profile *p, hap_err *err) {
  HAP_TRY(check_text("/", "created", p->created, err));
  HAP_TRY(check_text("/", "tool", p->tool, err));
  HAP_TRY(check_text("/", "backend", p->backend, err));
  if (p->n_hosts < 1)
    return hap_err_set(err, HAP_EINVAL, "/: hosts is empty, expected at least one host name");
  for (int32_t h = 0; h < p->n_hosts; h++) {
    if (p->hosts[h][0] == '\0')
      return hap_err_set(err, HAP_EINVAL, "/: hosts[%d] is empty, expected a host name", h);
    for (int32_t o = 0; o < h; o++)
      if (strcmp(p->hosts[o], p->hosts[h]) == 0)
        return hap_err_set(err, HAP_EINVAL, "/: hosts[%d] '%.200s' repeats hosts[%d]", h,
                           p->hosts[h], o);
  }
  for (int32_t i = 0; i < p->n_env; i++) {
    HAP_TRY(check_text("/env", "an attribute name", p->env[i].key, err));
    for (int32_t o = 0; o < i; o++)
      if (strcmp(p->env[o].key, p->env[i].key) == 0)
        return hap_err_set(err, HAP_EINVAL, "/env: '%.200s' is set twice", p->env[i].key);
  }
  return HAP_OK;
}

static int32_t find_host(const hap_profile *p, const char *name) {
  for (int32_t h = 0; h < p->n_hosts; h++)
    if (strcmp(p->hosts[h], name) == 0)
      return h;
  return -1;
}

static hap_status check_gemm(const char *obj, const hap_profile_device *d, hap_err *err) {
  for (int32_t r = 0; r < d->n_gemm; r++) {
    const hap_profile_gemm *g = &d->gemm[r];
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || (unsigned)g->dtype >= HAP_DTYPE_COUNT)
      return hap_err_set(err, HAP_EINVAL,
                         "%s/gemm: row %d: m, n, k = %lld, %lld, %lld with dtype %d, expected "
                         "positive sizes and a known dtype",
                         obj, r, (long long)g->m, (long long)g->n, (long long)g->k, (int)g->dtype);
    if (!finite_gt0(g->seconds) || !finite_gt0(g->flops_per_s))
      return hap_err_set(err, HAP_EINVAL,
                         "%s/gemm: row %d: seconds %g, flops_per_s %g, expected finite numbers > 0",
                         obj, r, g->seconds, g->flops_per_s);
  }
  return HAP_OK;
}

typedef struct kernel_key {
  int32_t op, backward, row;
  uint64_t shape_key;
} kernel_key;

static int cmp_kernel_key(const void *a, const void *b) {
  const kernel_key *x = a, *y = b;
  if (x->op != y->op)
    return x->op < y->op ? -1 : 1;
  if (x->backward != y->backward)
    return x->backward < y->backward ? -1 : 1;
  if (x->shape_key != y->shape_key)
    return x->shape_key < y->shape_key ? -1 : 1;
  return (x->row > y->row) - (x->row < y->row);
}

static hap_status check_kernels(const char *obj, const hap_profile_device *d, hap_err *err) {
  for (int32_t r = 0; r < d->n_kernels; r++) {
    const hap_profile_kernel *k = &d->kernels[r];
    if ((unsigned)k->op >= HAP_OP_COUNT || k->reps < 1 ||
        memchr(k->shape, '\0', sizeof k->shape) == NULL)
      return hap_err_set(err, HAP_EINVAL,
                         "%s/kernels: row %d: op %d, reps %d, expected a known op, reps >= 1 and "
                         "a shape string shorter than %d bytes",
                         obj, r, (int)k->op, k->reps, HAP_PROFILE_SHAPE_MAX);
    if (!finite_ge0(k->p50_s) || !finite_ge0(k->p95_s) || !finite_ge0(k->mean_s))
      return hap_err_set(err, HAP_EINVAL,
                         "%s/kernels: row %d: p50_s %g, p95_s %g, mean_s %g, expected finite "
                         "numbers >= 0",
                         obj, r, k->p50_s, k->p95_s, k->mean_s);
  }
  if (d->n_kernels < 2)
    return HAP_OK;
  kernel_key *keys = malloc((size_t)d->n_kernels * sizeof *keys);
  if (keys == NULL)
    return hap_err_set(err, HAP_ENOMEM, "%s/kernels: out of memory checking rows", obj);
  for (int32_t r = 0; r < d->n_kernels; r++)
    keys[r] =
        (kernel_key){(int32_t)d->kernels[r].op, d->kernels[r].backward, r, d->kernels[r].shape_key};
  qsort(keys, (size_t)d->n_kernels, sizeof *keys, cmp_kernel_key);
  hap_status st = HAP_OK;
  for (int32_t i = 1; i < d->n_kernels && st == HAP_OK; i++)
    if (keys[i].op == keys[i - 1].op && keys[i].backward == keys[i - 1].backward &&
        keys[i].shape_key == keys[i - 1].shape_key)
      st = hap_err_set(err, HAP_EINVAL,
                       "%s/kernels: rows %d and %d both time %s %s at shape_key %#llx, expected "
                       "one row per (op, direction, shape)",
                       obj, keys[i - 1].row, keys[i].row, hap_op_name((hap_op)keys[i].op),
                       keys[i].backward ? "bwd" : "fwd", (unsigned long long)keys[i].shape_key);
  free(keys);
  return st;
}

static hap_status check_device(const hap_profile *p, int32_t i, hap_err *err) {
  const hap_profile_device *d = &p->devices[i];
  objbuf obj;
  snprintf(obj, sizeof obj, "/devices/%d", i);
  HAP_TRY(check_text(obj, "name", d->name, err));
  HAP_TRY(check_text(obj, "model", d->model, err));
  for (int32_t o = 0; o < i; o++)
    if (strcmp(p->devices[o].name, d->name) == 0)
      return hap_err_set(err, HAP_EINVAL, "%s: name '%.200s' is also the name of /devices/%d", obj,
                         d->name, o);
  if (find_host(p, d->host) < 0)
    return hap_err_set(err, HAP_EINVAL, "%s: host '%.200s' is not one of the root attribute hosts",
                       obj, d->host);
  if (d->kind != HAP_DEVICE_GPU && d->kind != HAP_DEVICE_CPU)
    return hap_err_set(err, HAP_EINVAL, "%s: kind %d, expected gpu or cpu", obj, (int)d->kind);
  if (d->memory_bytes <= 0)
    return hap_err_set(err, HAP_EINVAL, "%s: memory_bytes is %lld, expected > 0", obj,
                       (long long)d->memory_bytes);
  HAP_TRY(check_num(obj, "memory_bw_Bps", d->memory_bw_Bps, true, err));
  HAP_TRY(check_num(obj, "launch_s", d->launch_s, false, err));
  HAP_TRY(check_num(obj, "update_bw_Bps", d->update_bw_Bps, false, err));
  for (int t = 0; t < HAP_DTYPE_COUNT; t++) {
    char field[64];
    snprintf(field, sizeof field, "peak_flops_%s", hap_dtype_name((hap_dtype)t));
    HAP_TRY(check_num(obj, field, d->peak_flops[t], false, err));
  }
  HAP_TRY(check_gemm(obj, d, err));
  return check_kernels(obj, d, err);
}

/* A piecewise fit: the rules of hap_ab_fit_check, named as the file's FIT attributes. */
static hap_status check_fit(const char *obj, const hap_ab_fit *f, hap_err *err) {
  char why[160];
  if (hap_ab_fit_check(f, why, sizeof why) != NULL)
    return hap_err_set(err, HAP_EINVAL, "%s: fit_%s", obj, why);
  return HAP_OK;
}

static hap_status check_p2p(const hap_profile *p, int32_t j, hap_err *err) {
  const hap_profile_p2p *s = &p->p2p[j];
  objbuf obj;
  p2p_path(obj, s);
  if (s->src < 0 || s->dst < 0 || s->src >= p->n_devices || s->dst >= p->n_devices ||
      s->src == s->dst)
    return hap_err_set(err, HAP_EINVAL,
                       "%s: src %d, dst %d, expected two different devices of 0..%d", obj, s->src,
                       s->dst, p->n_devices - 1);
  for (int32_t o = 0; o < j; o++)
    if (p->p2p[o].src == s->src && p->p2p[o].dst == s->dst)
      return hap_err_set(err, HAP_EINVAL, "%s: the pair is measured twice", obj);
  sweep_view v = {s->n_sizes,     s->reps,      s->warmup, s->iters,
                  s->sizes_bytes, s->samples_s, s->p50_s,  s->p95_s};
  HAP_TRY(check_sweep(obj, &v, err));
  HAP_TRY(check_num(obj, "latency_s", s->fit.latency_s, false, err));
  HAP_TRY(check_num(obj, "bandwidth_Bps", s->fit.bandwidth_Bps, true, err));
  return check_fit(obj, &s->pieces, err);
}

static hap_status check_group_name(const hap_profile_coll *c, hap_err *err) {
  const char *g = c->group;
  if (g[0] == '\0' || strchr(g, '/') != NULL || strcmp(g, ".") == 0 || strcmp(g, "..") == 0)
    return hap_err_set(err, HAP_EINVAL,
                       "/collectives/%s: group '%.200s', expected a non-empty name without '/'",
                       hap_coll_kind_name(c->kind), g);
  return HAP_OK;
}

static hap_status check_coll(const hap_profile *p, int32_t j, hap_err *err) {
  const hap_profile_coll *c = &p->colls[j];
  if ((unsigned)c->kind >= HAP_COLL_KIND_COUNT)
    return hap_err_set(err, HAP_EINVAL, "/collectives: collective %d has unknown kind %d", j,
                       (int)c->kind);
  HAP_TRY(check_group_name(c, err));
  objbuf obj;
  coll_path(obj, c);
  for (int32_t o = 0; o < j; o++)
    if (p->colls[o].kind == c->kind && strcmp(p->colls[o].group, c->group) == 0)
      return hap_err_set(err, HAP_EINVAL, "%s: the group is measured twice", obj);
  if (c->n_ranks < 1)
    return hap_err_set(err, HAP_EINVAL, "%s: ranks is empty, expected device indices", obj);
  for (int32_t r = 0; r < c->n_ranks; r++) {
    if (c->ranks[r] < 0 || c->ranks[r] >= p->n_devices)
      return hap_err_set(err, HAP_EINVAL, "%s: ranks[%d] is %d, expected a device of 0..%d", obj, r,
                         c->ranks[r], p->n_devices - 1);
    for (int32_t o = 0; o < r; o++)
      if (c->ranks[o] == c->ranks[r])
        return hap_err_set(err, HAP_EINVAL, "%s: ranks[%d] repeats device %d", obj, r, c->ranks[r]);
  }
  sweep_view v = {c->n_sizes,     c->reps,      c->warmup, c->iters,
                  c->sizes_bytes, c->samples_s, c->p50_s,  c->p95_s};
  HAP_TRY(check_sweep(obj, &v, err));
  HAP_TRY(check_array(obj, "algbw_Bps", c->algbw_Bps, c->n_sizes, 0, false, err));
  HAP_TRY(check_array(obj, "busbw_Bps", c->busbw_Bps, c->n_sizes, 0, false, err));
  return check_fit(obj, &c->fit, err);
}

hap_status hap_profile_validate(const hap_profile *p, hap_err *err) {
  HAP_TRY(check_root(p, err));
  if (p->n_devices < 1)
    return hap_err_set(err, HAP_EINVAL, "/devices: no devices, expected at least one");
  for (int32_t i = 0; i < p->n_devices; i++)
    HAP_TRY(check_device(p, i, err));
  for (int32_t h = 0; h < p->n_hosts; h++) {
    bool used = false;
    for (int32_t i = 0; i < p->n_devices && !used; i++)
      used = strcmp(p->devices[i].host, p->hosts[h]) == 0;
    if (!used)
      return hap_err_set(err, HAP_EINVAL, "/: host '%.200s' has no devices", p->hosts[h]);
  }
  for (int32_t j = 0; j < p->n_p2p; j++)
    HAP_TRY(check_p2p(p, j, err));
  for (int32_t j = 0; j < p->n_colls; j++)
    HAP_TRY(check_coll(p, j, err));
  return HAP_OK;
}

/* ---- statistics and fits -------------------------------------------------------------------- */

/* p50 / p95 of every size of a sweep. */
static hap_status sweep_stats(const char *obj, int32_t n_sizes, int32_t reps,
                              const double *samples_s, double *p50_s, double *p95_s, hap_err *err) {
  HAP_TRY(check_array(obj, "samples_s", samples_s, (int64_t)n_sizes * reps, reps, true, err));
  for (int32_t i = 0; i < n_sizes; i++)
    if (hap_p50_p95(samples_s + (size_t)i * (size_t)reps, reps, &p50_s[i], &p95_s[i]) != HAP_OK)
      return hap_err_set(err, HAP_ENOMEM, "%s: out of memory computing percentiles", obj);
  return HAP_OK;
}

hap_status hap_profile_compute_stats(hap_profile *p, hap_err *err) {
  objbuf obj;
  for (int32_t j = 0; j < p->n_p2p; j++) {
    hap_profile_p2p *s = &p->p2p[j];
    p2p_path(obj, s);
    HAP_TRY(sweep_stats(obj, s->n_sizes, s->reps, s->samples_s, s->p50_s, s->p95_s, err));
  }
  for (int32_t j = 0; j < p->n_colls; j++) {
    hap_profile_coll *c = &p->colls[j];
    coll_path(obj, c);
    HAP_TRY(sweep_stats(obj, c->n_sizes, c->reps, c->samples_s, c->p50_s, c->p95_s, err));
    double factor = hap_busbw_factor(c->kind, c->n_ranks);
    for (int32_t i = 0; i < c->n_sizes; i++) {
      c->algbw_Bps[i] = (double)c->sizes_bytes[i] / c->p50_s[i];
      c->busbw_Bps[i] = c->algbw_Bps[i] * factor;
    }
  }
  return HAP_OK;
}

static double *sizes_as_double(const int64_t *sizes, int32_t n) {
  double *d = malloc((size_t)n * sizeof *d);
  if (d != NULL)
    for (int32_t i = 0; i < n; i++)
      d[i] = (double)sizes[i];
  return d;
}

static hap_status fit_failed(const char *obj, hap_status st, hap_err *err) {
  if (st == HAP_ENOMEM)
    return hap_err_set(err, st, "%s: out of memory fitting alpha-beta", obj);
  return hap_err_set(err, st,
                     "%s: cannot fit alpha-beta, expected strictly increasing sizes (one > 0) and "
                     "p50_s > 0 (run hap_profile_compute_stats first)",
                     obj);
}

hap_status hap_profile_fit(hap_profile *p, hap_err *err) {
  objbuf obj;
  for (int32_t j = 0; j < p->n_p2p; j++) {
    hap_profile_p2p *s = &p->p2p[j];
    p2p_path(obj, s);
    double *x = sizes_as_double(s->sizes_bytes, s->n_sizes);
    hap_status st = x == NULL ? HAP_ENOMEM
                              : hap_fit_alpha_beta(x, s->p50_s, s->n_sizes, &s->fit.latency_s,
                                                   &s->fit.bandwidth_Bps);
    free(x);
    if (st != HAP_OK)
      return fit_failed(obj, st, err);
    s->pieces = hap_ab_fit_one(s->fit.latency_s, s->fit.bandwidth_Bps);
  }
  for (int32_t j = 0; j < p->n_colls; j++) {
    hap_profile_coll *c = &p->colls[j];
    coll_path(obj, c);
    double *x = sizes_as_double(c->sizes_bytes, c->n_sizes);
    hap_piecewise_fit two = {0};
    hap_status st = x == NULL ? HAP_ENOMEM : hap_fit_piecewise(x, c->p50_s, c->n_sizes, &two);
    free(x);
    if (st != HAP_OK)
      return fit_failed(obj, st, err);
    c->fit = hap_ab_fit_two(two.threshold_bytes, two.alpha_small_s, two.beta_small_Bps,
                            two.alpha_large_s, two.beta_large_Bps);
  }
  return HAP_OK;
}

/* ---- merging -------------------------------------------------------------------------------- */

static hap_status copy_device(hap_profile *m, const hap_profile_device *d, hap_err *err) {
  int32_t i;
  HAP_TRY(hap_profile_add_device(m, d->name, d->host, d->model, d->kind, &i, err));
  hap_profile_device *c = &m->devices[i];
  c->memory_bytes = d->memory_bytes;
  c->memory_bw_Bps = d->memory_bw_Bps;
  c->launch_s = d->launch_s;
  c->update_bw_Bps = d->update_bw_Bps;
  memcpy(c->peak_flops, d->peak_flops, sizeof c->peak_flops);
  for (int32_t r = 0; r < d->n_gemm; r++)
    HAP_TRY(hap_profile_add_gemm(c, &d->gemm[r], err));
  for (int32_t r = 0; r < d->n_kernels; r++)
    HAP_TRY(hap_profile_add_kernel(c, &d->kernels[r], err));
  return HAP_OK;
}

static void copy_sweep_arrays(int64_t *sizes, double *samples, const int64_t *from_sizes,
                              const double *from_samples, int32_t n_sizes, int32_t reps) {
  memcpy(sizes, from_sizes, (size_t)n_sizes * sizeof *sizes);
  memcpy(samples, from_samples, (size_t)n_sizes * (size_t)reps * sizeof *samples);
}

static hap_status copy_p2p(hap_profile *m, const hap_profile_p2p *s, int32_t offset, hap_err *err) {
  int32_t j;
  HAP_TRY(hap_profile_add_p2p(m, s->src + offset, s->dst + offset, s->n_sizes, s->reps, &j, err));
  hap_profile_p2p *c = &m->p2p[j];
  copy_sweep_arrays(c->sizes_bytes, c->samples_s, s->sizes_bytes, s->samples_s, s->n_sizes,
                    s->reps);
  memcpy(c->p50_s, s->p50_s, (size_t)s->n_sizes * sizeof *c->p50_s);
  memcpy(c->p95_s, s->p95_s, (size_t)s->n_sizes * sizeof *c->p95_s);
  c->warmup = s->warmup;
  c->iters = s->iters;
  c->fit = s->fit;
  c->pieces = s->pieces;
  return HAP_OK;
}

static hap_status copy_coll(hap_profile *m, const hap_profile_coll *s, const char *group,
                            int32_t offset, hap_err *err) {
  int32_t *ranks = malloc((size_t)s->n_ranks * sizeof *ranks);
  if (ranks == NULL)
    return oom(err, "a collective sweep");
  for (int32_t r = 0; r < s->n_ranks; r++)
    ranks[r] = s->ranks[r] + offset;
  int32_t j;
  hap_status st =
      hap_profile_add_coll(m, s->kind, group, ranks, s->n_ranks, s->n_sizes, s->reps, &j, err);
  free(ranks);
  if (st != HAP_OK)
    return st;
  hap_profile_coll *c = &m->colls[j];
  size_t n = (size_t)s->n_sizes * sizeof(double);
  copy_sweep_arrays(c->sizes_bytes, c->samples_s, s->sizes_bytes, s->samples_s, s->n_sizes,
                    s->reps);
  memcpy(c->p50_s, s->p50_s, n);
  memcpy(c->p95_s, s->p95_s, n);
  memcpy(c->algbw_Bps, s->algbw_Bps, n);
  memcpy(c->busbw_Bps, s->busbw_Bps, n);
  c->warmup = s->warmup;
  c->iters = s->iters;
  c->fit = s->fit;
  return HAP_OK;
}

/* Merge one part's collectives, renaming a group already taken for its kind. */
static hap_status merge_colls(hap_profile *m, const hap_profile *part, int k, int32_t offset,
                              hap_err *err) {
  for (int32_t j = 0; j < part->n_colls; j++) {
    const hap_profile_coll *s = &part->colls[j];
    char group[512];
    snprintf(group, sizeof group, "%s", s->group);
    if (hap_profile_find_coll(m, s->kind, group) != NULL)
      snprintf(group, sizeof group, "%s@%s", s->group, part->hosts[0]);
    if (strlen(group) + 1 >= sizeof group || hap_profile_find_coll(m, s->kind, group) != NULL)
      return hap_err_set(err, HAP_EINVAL,
                         "merge: part %d: collective %s group '%.200s' is taken (also as "
                         "'%.200s@%.200s')",
                         k, hap_coll_kind_name(s->kind), s->group, s->group, part->hosts[0]);
    HAP_TRY(copy_coll(m, s, group, offset, err));
  }
  return HAP_OK;
}

/* Keep `key` as is if every part that sets it agrees; else one "<key>@<host>" per part. */
static hap_status merge_env(hap_profile *m, hap_profile *const *parts, int n, hap_err *err) {
  for (int k = 0; k < n; k++) {
    for (int32_t e = 0; e < parts[k]->n_env; e++) {
      const hap_profile_kv *kv = &parts[k]->env[e];
      bool agree = true;
      for (int o = 0; o < n && agree; o++) {
        const char *v = hap_profile_get_env(parts[o], kv->key);
        agree = v == NULL || strcmp(v, kv->value) == 0;
      }
      char key[512];
      if (agree)
        snprintf(key, sizeof key, "%s", kv->key);
      else
        snprintf(key, sizeof key, "%s@%s", kv->key, parts[k]->hosts[0]);
      HAP_TRY(hap_profile_set_env(m, key, kv->value, err));
    }
  }
  return HAP_OK;
}

static hap_status merge_part(hap_profile *m, hap_profile *const *parts, int k, hap_err *err) {
  const hap_profile *part = parts[k];
  int32_t offset = m->n_devices;
  for (int32_t h = 0; h < part->n_hosts; h++) {
    if (find_host(m, part->hosts[h]) >= 0)
      return hap_err_set(err, HAP_EINVAL,
                         "merge: host '%.200s' of part %d is already in an earlier part",
                         part->hosts[h], k);
    HAP_TRY(hap_profile_add_host(m, part->hosts[h], err));
  }
  for (int32_t i = 0; i < part->n_devices; i++) {
    if (hap_profile_find_device(m, part->devices[i].name) >= 0)
      return hap_err_set(err, HAP_EINVAL,
                         "merge: device '%.200s' of part %d is already in an earlier part",
                         part->devices[i].name, k);
    HAP_TRY(copy_device(m, &part->devices[i], err));
  }
  for (int32_t j = 0; j < part->n_p2p; j++)
    HAP_TRY(copy_p2p(m, &part->p2p[j], offset, err));
  return merge_colls(m, part, k, offset, err);
}

hap_status hap_profile_merge(hap_profile *const *parts, int n, hap_profile **out, hap_err *err) {
  *out = NULL;
  if (n < 1)
    return hap_err_set(err, HAP_EINVAL, "merge: no profiles to merge");
  for (int k = 0; k < n; k++) {
    hap_status st = hap_profile_validate(parts[k], err);
    if (st != HAP_OK) {
      hap_err_prefix(err, "merge: part %d (%s)", k,
                     parts[k]->source ? parts[k]->source : "in memory");
      return st;
    }
    if (strcmp(parts[k]->backend, parts[0]->backend) != 0)
      return hap_err_set(err, HAP_EINVAL, "merge: part %d has backend '%.100s', part 0 '%.100s'", k,
                         parts[k]->backend, parts[0]->backend);
  }
  hap_profile *m = hap_profile_create();
  if (m == NULL)
    return hap_err_set(err, HAP_ENOMEM, "merge: out of memory");
  hap_status st = hap_profile_set_meta(m, NULL, parts[0]->tool, parts[0]->backend, err);
  for (int k = 0; k < n && st == HAP_OK; k++)
    st = merge_part(m, parts, k, err);
  if (st == HAP_OK)
    st = merge_env(m, parts, n, err);
  if (st == HAP_OK) {
    st = hap_profile_validate(m, err);
    if (st != HAP_OK)
      hap_err_prefix(err, "merge");
  }
  if (st != HAP_OK) {
    hap_profile_destroy(m);
    return st;
  }
  *out = m;
  return HAP_OK;
}

/* ---- loading into the cluster model --------------------------------------------------------- */

/* Median latency and bandwidth of the fitted p2p links accepted by `want` (host of each device in
 * dev_host; `h` the host asked about). Returns false when no link matches. */
typedef bool (*link_filter)(int32_t src_host, int32_t dst_host, int32_t h);

static bool intra_of(int32_t a, int32_t b, int32_t h) { return a == h && b == h; }
static bool intra_any(int32_t a, int32_t b, int32_t h) { return (void)h, a == b; }
static bool nic_of(int32_t a, int32_t b, int32_t h) { return a != b && (a == h || b == h); }
static bool nic_any(int32_t a, int32_t b, int32_t h) { return (void)h, a != b; }

static hap_status median_link(const hap_profile *p, const int32_t *dev_host, link_filter want,
                              int32_t h, hap_link *out, bool *found) {
  *found = false;
  if (p->n_p2p == 0)
    return HAP_OK;
  double *lat = malloc((size_t)p->n_p2p * sizeof *lat);
  double *bw = malloc((size_t)p->n_p2p * sizeof *bw);
  hap_status st = lat && bw ? HAP_OK : HAP_ENOMEM;
  int32_t n = 0;
  for (int32_t j = 0; j < p->n_p2p && st == HAP_OK; j++) {
    const hap_profile_p2p *s = &p->p2p[j];
    if (!want(dev_host[s->src], dev_host[s->dst], h))
      continue;
    lat[n] = s->fit.latency_s;
    bw[n] = s->fit.bandwidth_Bps;
    n++;
  }
  double unused;
  if (st == HAP_OK && n > 0) {
    st = hap_p50_p95(lat, n, &out->latency_s, &unused);
    if (st == HAP_OK)
      st = hap_p50_p95(bw, n, &out->bandwidth_Bps, &unused);
    *found = st == HAP_OK;
  }
  free(lat);
  free(bw);
  return st;
}

/* Host h's intra link and NIC, and where each came from (hap_profile_to_cluster). */
static hap_status host_links(const hap_profile *p, const int32_t *dev_host, int32_t h,
                             hap_host *out) {
  bool found;
  out->intra_origin = HAP_LINK_MEASURED;
  HAP_TRY(median_link(p, dev_host, intra_of, h, &out->intra, &found));
  if (!found) {
    out->intra_origin = HAP_LINK_BORROWED;
    HAP_TRY(median_link(p, dev_host, intra_any, h, &out->intra, &found));
  }
  if (!found) {
    out->intra_origin = HAP_LINK_ASSUMED;
    out->intra = HAP_PROFILE_DEFAULT_INTRA;
  }
  out->nic_origin = HAP_LINK_MEASURED;
  HAP_TRY(median_link(p, dev_host, nic_of, h, &out->nic, &found));
  if (!found) {
    out->nic_origin = HAP_LINK_BORROWED;
    HAP_TRY(median_link(p, dev_host, nic_any, h, &out->nic, &found));
  }
  if (found) {
    out->nic.latency_s /= 2; /* a path between hosts crosses two NICs */
  } else {
    out->nic_origin = HAP_LINK_ASSUMED;
    out->nic = HAP_PROFILE_DEFAULT_NIC;
  }
  return HAP_OK;
}

/* Add profile device d to the cluster's last host. */
static hap_status add_cluster_device(hap_cluster *c, const hap_profile_device *d, hap_err *err) {
  hap_device proto = {0};
  proto.model = d->model;
  proto.kind = d->kind;
  proto.memory_bytes = (double)d->memory_bytes;
  proto.memory_bw_Bps = d->memory_bw_Bps;
  proto.launch_s = d->launch_s;
  proto.update_bw_Bps = d->update_bw_Bps;
  memcpy(proto.peak_flops, d->peak_flops, sizeof proto.peak_flops);
  bool measured[HAP_DTYPE_COUNT] = {false};
  hap_gemm_sample *gemm = calloc((size_t)d->n_gemm + 1, sizeof *gemm);
  hap_kernel_sample *kern = calloc((size_t)d->n_kernels + 1, sizeof *kern);
  if (gemm == NULL || kern == NULL) {
    free(gemm);
    free(kern);
    return hap_err_set(err, HAP_ENOMEM, "out of memory loading device '%s'", d->name);
  }
  for (int32_t r = 0; r < d->n_gemm; r++) {
    const hap_profile_gemm *g = &d->gemm[r];
    gemm[r] = (hap_gemm_sample){g->m, g->n, g->k, g->dtype, g->flops_per_s};
    if (!measured[g->dtype] || g->flops_per_s > proto.sustained_flops[g->dtype])
      proto.sustained_flops[g->dtype] = g->flops_per_s;
    measured[g->dtype] = true;
  }
  for (int t = 0; t < HAP_DTYPE_COUNT; t++)
    if (!measured[t])
      proto.sustained_flops[t] = d->peak_flops[t];
  for (int32_t r = 0; r < d->n_kernels; r++) {
    const hap_profile_kernel *k = &d->kernels[r];
    double price_s = k->mean_s > 0 ? k->mean_s : k->p50_s;
    kern[r] = (hap_kernel_sample){k->op, k->backward, k->shape_key, price_s};
  }
  proto.n_gemm = d->n_gemm;
  proto.gemm = gemm;
  proto.n_kernels = d->n_kernels;
  proto.kernels = kern;
  hap_status st = hap_cluster_add_device(c, d->name, &proto, NULL, err);
  free(gemm);
  free(kern);
  return st;
}

bool hap_profile_is_plan_group(const char *group) {
  size_t n = strlen(HAP_PROFILE_PLAN_GROUP);
  return strncmp(group, HAP_PROFILE_PLAN_GROUP, n) == 0 && (group[n] == '\0' || group[n] == ':');
}

/* Do two collectives run over the same devices (in any order)? */
static bool same_devices(const hap_profile_coll *a, const hap_profile_coll *b) {
  if (a->n_ranks != b->n_ranks)
    return false;
  for (int32_t i = 0; i < a->n_ranks; i++) {
    bool found = false;
    for (int32_t k = 0; k < b->n_ranks && !found; k++)
      found = a->ranks[i] == b->ranks[k];
    if (!found)
      return false;
  }
  return true;
}

/* pc's fit, with the points (size, price: HAP_PROFILE_PRICE_ENV) of every plan group of its kind
 * over its devices (pc's own when it is one), into c. */
static hap_status add_cluster_fit(const hap_profile *p, const hap_profile_coll *pc,
                                  const int32_t *perm, hap_cluster *c, hap_err *err) {
  int32_t n_points = 0;
  for (int32_t j = 0; j < p->n_colls; j++)
    if (p->colls[j].kind == pc->kind && hap_profile_is_plan_group(p->colls[j].group) &&
        same_devices(&p->colls[j], pc))
      n_points += p->colls[j].n_sizes;
  int32_t *ranks = malloc((size_t)pc->n_ranks * sizeof *ranks);
  hap_coll_point *points = malloc(((size_t)n_points + 1) * sizeof *points);
  const char *price = hap_profile_get_env(p, HAP_PROFILE_PRICE_ENV);
  bool mean = price != NULL && strcmp(price, "mean") == 0;
  hap_status st = HAP_OK;
  if (ranks == NULL || points == NULL)
    st = HAP_ENOMEM;
  for (int32_t r = 0; r < pc->n_ranks && st == HAP_OK; r++)
    ranks[r] = perm[pc->ranks[r]];
  n_points = 0;
  for (int32_t j = 0; j < p->n_colls && st == HAP_OK; j++) {
    const hap_profile_coll *x = &p->colls[j];
    if (x->kind != pc->kind || !hap_profile_is_plan_group(x->group) || !same_devices(x, pc))
      continue;
    for (int32_t i = 0; i < x->n_sizes && st == HAP_OK; i++) {
      hap_coll_point *pt = &points[n_points++];
      pt->bytes = (double)x->sizes_bytes[i];
      pt->seconds = x->p50_s[i];
      if (mean)
        st = hap_trimmed_mean(x->samples_s + (size_t)i * (size_t)x->reps, x->reps, HAP_PRICE_TRIM,
                              &pt->seconds);
    }
  }
  if (st != HAP_OK)
    st = hap_err_set(err, HAP_ENOMEM, "out of memory loading collective fits");
  hap_coll_fit fit = {pc->kind, pc->n_ranks, ranks, pc->fit, n_points, points};
  if (st == HAP_OK && hap_cluster_find_fit(c, pc->kind, ranks, pc->n_ranks) == NULL)
    st = hap_cluster_add_fit(c, &fit, err);
  free(ranks);
  free(points);
  return st;
}

static hap_status add_cluster_fits(const hap_profile *p, const int32_t *perm, hap_cluster *c,
                                   hap_err *err) {
  for (int32_t j = 0; j < p->n_p2p; j++) {
    const hap_profile_p2p *s = &p->p2p[j];
    HAP_TRY(hap_cluster_set_link(c, perm[s->src], perm[s->dst], s->fit, err));
  }
  /* the sweeps' fits first (a plan group's points join the sweep over its devices), then plan
   * groups over devices no sweep covered, with their own fits */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t j = 0; j < p->n_colls; j++)
      if (hap_profile_is_plan_group(p->colls[j].group) == (pass == 1))
        HAP_TRY(add_cluster_fit(p, &p->colls[j], perm, c, err));
  return HAP_OK;
}

/* Build hosts and devices; perm[i] gets the cluster id of profile device i. */
static hap_status build_cluster(const hap_profile *p, hap_cluster *c, int32_t *dev_host,
                                int32_t *perm, hap_err *err) {
  for (int32_t i = 0; i < p->n_devices; i++)
    dev_host[i] = find_host(p, p->devices[i].host);
  int32_t next = 0;
  for (int32_t h = 0; h < p->n_hosts; h++) {
    hap_host links = {0};
    int32_t id = -1;
    if (host_links(p, dev_host, h, &links) != HAP_OK)
      return hap_err_set(err, HAP_ENOMEM, "out of memory loading host links");
    HAP_TRY(hap_cluster_add_host(c, p->hosts[h], links.intra, links.nic, &id, err));
    c->hosts[id].intra_origin = links.intra_origin;
    c->hosts[id].nic_origin = links.nic_origin;
    for (int32_t i = 0; i < p->n_devices; i++) {
      if (dev_host[i] != h)
        continue;
      HAP_TRY(add_cluster_device(c, &p->devices[i], err));
      perm[i] = next++;
    }
  }
  return add_cluster_fits(p, perm, c, err);
}

hap_status hap_profile_to_cluster(const hap_profile *p, hap_cluster **out, hap_err *err) {
  *out = NULL;
  const char *label = p->source ? p->source : "profile";
  hap_status st = hap_profile_validate(p, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "%s", label);
    return st;
  }
  hap_cluster *c = hap_cluster_create(label);
  int32_t *dev_host = malloc((size_t)p->n_devices * sizeof *dev_host);
  int32_t *perm = malloc((size_t)p->n_devices * sizeof *perm);
  if (c == NULL || dev_host == NULL || perm == NULL ||
      hap_cluster_set_source(c, p->source) != HAP_OK)
    st = hap_err_set(err, HAP_ENOMEM, "out of memory building the cluster");
  if (st == HAP_OK)
    st = build_cluster(p, c, dev_host, perm, err);
  if (st == HAP_OK)
    st = hap_cluster_validate(c, err);
  if (st != HAP_OK)
    hap_err_prefix(err, "%s", label);
  free(dev_host);
  free(perm);
  if (st != HAP_OK) {
    hap_cluster_destroy(c);
    return st;
  }
  *out = c;
  return HAP_OK;
}

/* ---- HDF5 shared helpers (profile_h5.h) ----------------------------------------------------- */

void hap_h5_silence(void) { (void)H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct detail_ctx {
  char *buf;
  size_t len;
  bool done;
} detail_ctx;

static herr_t detail_cb(unsigned n, const H5E_error2_t *e, void *data) {
  (void)n;
  detail_ctx *d = data;
  if (!d->done && e->desc != NULL && e->desc[0] != '\0') {
    snprintf(d->buf, d->len, "%s", e->desc);
    d->done = true;
  }
  return 0;
}

const char *hap_h5_detail(char *buf, size_t len) {
  buf[0] = '\0';
  detail_ctx d = {buf, len, false};
  (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, detail_cb, &d);
  return buf;
}

static hid_t str_type(size_t n) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t >= 0 && (H5Tset_size(t, n) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0)) {
    H5Tclose(t);
    t = -1;
  }
  return t;
}

hid_t hap_h5_gemm_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(hap_h5_gemm_row));
  hid_t s = str_type(HAP_H5_DTYPE_MAX);
  bool ok =
      t >= 0 && s >= 0 && H5Tinsert(t, "m", HOFFSET(hap_h5_gemm_row, m), H5T_NATIVE_INT64) >= 0 &&
      H5Tinsert(t, "n", HOFFSET(hap_h5_gemm_row, n), H5T_NATIVE_INT64) >= 0 &&
      H5Tinsert(t, "k", HOFFSET(hap_h5_gemm_row, k), H5T_NATIVE_INT64) >= 0 &&
      H5Tinsert(t, "dtype", HOFFSET(hap_h5_gemm_row, dtype), s) >= 0 &&
      H5Tinsert(t, "seconds", HOFFSET(hap_h5_gemm_row, seconds), H5T_NATIVE_DOUBLE) >= 0 &&
      H5Tinsert(t, "flops_per_s", HOFFSET(hap_h5_gemm_row, flops_per_s), H5T_NATIVE_DOUBLE) >= 0;
  if (s >= 0)
    H5Tclose(s);
  if (!ok && t >= 0) {
    H5Tclose(t);
    t = -1;
  }
  return t;
}

hid_t hap_h5_kernel_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(hap_h5_kernel_row));
  hid_t op = str_type(HAP_H5_OP_MAX), dir = str_type(HAP_H5_DIR_MAX);
  hid_t shape = str_type(HAP_PROFILE_SHAPE_MAX);
  bool ok =
      t >= 0 && op >= 0 && dir >= 0 && shape >= 0 &&
      H5Tinsert(t, "op", HOFFSET(hap_h5_kernel_row, op), op) >= 0 &&
      H5Tinsert(t, "direction", HOFFSET(hap_h5_kernel_row, direction), dir) >= 0 &&
      H5Tinsert(t, "shape_key", HOFFSET(hap_h5_kernel_row, shape_key), H5T_NATIVE_UINT64) >= 0 &&
      H5Tinsert(t, "shape", HOFFSET(hap_h5_kernel_row, shape), shape) >= 0 &&
      H5Tinsert(t, "p50_s", HOFFSET(hap_h5_kernel_row, p50_s), H5T_NATIVE_DOUBLE) >= 0 &&
      H5Tinsert(t, "p95_s", HOFFSET(hap_h5_kernel_row, p95_s), H5T_NATIVE_DOUBLE) >= 0 &&
      H5Tinsert(t, "reps", HOFFSET(hap_h5_kernel_row, reps), H5T_NATIVE_INT64) >= 0 &&
      H5Tinsert(t, "mean_s", HOFFSET(hap_h5_kernel_row, mean_s), H5T_NATIVE_DOUBLE) >= 0;
  hid_t parts[] = {op, dir, shape};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i] >= 0)
      H5Tclose(parts[i]);
  if (!ok && t >= 0) {
    H5Tclose(t);
    t = -1;
  }
  return t;
}

/* ---- HDF5 writer ---------------------------------------------------------------------------- */

typedef struct writer {
  const char *file; /* the final path, for messages */
  hap_err *err;
  hid_t gcpl; /* group creation: track link and attribute creation order */
} writer;

/* Record "<file>: <obj>: cannot write <what> (HDF5: <detail>)"; call before closing handles. */
static hap_status w_fail(const writer *w, const char *obj, const char *what, const char *name) {
  char detail[200];
  hap_h5_detail(detail, sizeof detail);
  return hap_err_set(w->err, HAP_EHDF5, "%s: %s: cannot write %s%s%s%s%s", w->file, obj, what, name,
                     detail[0] ? " (HDF5: " : "", detail, detail[0] ? ")" : "");
}

/* A string attribute: scalar when n < 0, else 1-D of n; variable-length UTF-8. */
static hap_status put_strs(const writer *w, hid_t loc, const char *obj, const char *name,
                           const char *const *v, int32_t n) {
  hap_status st = HAP_EHDF5;
  hid_t type = H5Tcopy(H5T_C_S1), space = -1, attr = -1;
  hsize_t dim = n < 0 ? 1 : (hsize_t)n;
  if (type < 0 || H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0)
    goto out;
  space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
  if (space < 0)
    goto out;
  attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0 || (dim > 0 && H5Awrite(attr, type, (const void *)v) < 0))
    goto out;
  st = HAP_OK;
out:
  if (st != HAP_OK)
    w_fail(w, obj, "attribute ", name);
  if (attr >= 0)
    H5Aclose(attr);
  if (space >= 0)
    H5Sclose(space);
  if (type >= 0)
    H5Tclose(type);
  return st;
}

static hap_status put_str(const writer *w, hid_t loc, const char *obj, const char *name,
                          const char *v) {
  return put_strs(w, loc, obj, name, &v, -1);
}

/* A numeric attribute of n values (scalar when n < 0). */
static hap_status put_num(const writer *w, hid_t loc, const char *obj, const char *name,
                          hid_t ftype, hid_t mtype, const void *v, int32_t n) {
  hap_status st = HAP_EHDF5;
  hsize_t dim = n < 0 ? 1 : (hsize_t)n;
  hid_t space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL), attr = -1;
  if (space < 0)
    goto out;
  attr = H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0 || (dim > 0 && H5Awrite(attr, mtype, v) < 0))
    goto out;
  st = HAP_OK;
out:
  if (st != HAP_OK)
    w_fail(w, obj, "attribute ", name);
  if (attr >= 0)
    H5Aclose(attr);
  if (space >= 0)
    H5Sclose(space);
  return st;
}

static hap_status put_i64(const writer *w, hid_t loc, const char *obj, const char *name,
                          int64_t v) {
  return put_num(w, loc, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, -1);
}

static hap_status put_f64(const writer *w, hid_t loc, const char *obj, const char *name, double v) {
  return put_num(w, loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, -1);
}

/* A dataset of `rank` dims with a "units" attribute. */
static hap_status put_data(const writer *w, hid_t loc, const char *obj, const char *name,
                           hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                           const void *data, const char *units) {
  hap_status st = HAP_EHDF5;
  objbuf path;
  snprintf(path, sizeof path, "%s/%s", obj, name);
  hsize_t numel = 1;
  for (int i = 0; i < rank; i++)
    numel *= dims[i];
  hid_t space = H5Screate_simple(rank, dims, NULL), dset = -1;
  if (space < 0)
    goto out;
  dset = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (dset < 0 || (numel > 0 && H5Dwrite(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
    goto out;
  st = put_str(w, dset, path, "units", units);
out:
  if (st != HAP_OK)
    w_fail(w, path, "the dataset", "");
  if (dset >= 0)
    H5Dclose(dset);
  if (space >= 0)
    H5Sclose(space);
  return st;
}

static hap_status put_f64s(const writer *w, hid_t loc, const char *obj, const char *name,
                           const double *v, int32_t n, int32_t cols, const char *units) {
  hsize_t dims[2] = {(hsize_t)n, (hsize_t)cols};
  return put_data(w, loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, cols > 0 ? 2 : 1, dims, v,
                  units);
}

/* Create group `name` under loc (obj is loc's path, `path` gets the new one). */
static hid_t new_group(const writer *w, hid_t loc, const char *obj, const char *name, objbuf path) {
  if (strcmp(obj, "/") == 0)
    snprintf(path, sizeof(objbuf), "/%s", name);
  else
    snprintf(path, sizeof(objbuf), "%s/%s", obj, name);
  hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
  if (g < 0)
    w_fail(w, path, "the group", "");
  return g;
}

/* A compound table of n rows (hap_h5_*_row) from its memory type; the file type is packed. */
static hap_status put_table(const writer *w, hid_t loc, const char *obj, const char *name,
                            hid_t mtype, const void *rows, int32_t n, const char *units) {
  hid_t ftype = mtype >= 0 ? H5Tcopy(mtype) : -1;
  hap_status st = HAP_EHDF5;
  if (ftype < 0 || H5Tpack(ftype) < 0) {
    w_fail(w, obj, "the row type of ", name);
  } else {
    hsize_t dim = (hsize_t)n;
    st = put_data(w, loc, obj, name, ftype, mtype, 1, &dim, rows, units);
  }
  if (ftype >= 0)
    H5Tclose(ftype);
  return st;
}

static hap_status write_gemm(const writer *w, hid_t g, const char *obj,
                             const hap_profile_device *d) {
  hap_h5_gemm_row *rows = calloc((size_t)d->n_gemm + 1, sizeof *rows);
  if (rows == NULL)
    return hap_err_set(w->err, HAP_ENOMEM, "%s: %s/gemm: out of memory", w->file, obj);
  for (int32_t r = 0; r < d->n_gemm; r++) {
    const hap_profile_gemm *s = &d->gemm[r];
    rows[r].m = s->m;
    rows[r].n = s->n;
    rows[r].k = s->k;
    snprintf(rows[r].dtype, sizeof rows[r].dtype, "%s", hap_dtype_name(s->dtype));
    rows[r].seconds = s->seconds;
    rows[r].flops_per_s = s->flops_per_s;
  }
  hid_t mtype = hap_h5_gemm_type();
  hap_status st = put_table(w, g, obj, "gemm", mtype, rows, d->n_gemm,
                            "m, n, k: elements; seconds: s; flops_per_s: FLOP/s");
  if (mtype >= 0)
    H5Tclose(mtype);
  free(rows);
  return st;
}

static hap_status write_kernels(const writer *w, hid_t g, const char *obj,
                                const hap_profile_device *d) {
  hap_h5_kernel_row *rows = calloc((size_t)d->n_kernels + 1, sizeof *rows);
  if (rows == NULL)
    return hap_err_set(w->err, HAP_ENOMEM, "%s: %s/kernels: out of memory", w->file, obj);
  for (int32_t r = 0; r < d->n_kernels; r++) {
    const hap_profile_kernel *k = &d->kernels[r];
    snprintf(rows[r].op, sizeof rows[r].op, "%s", hap_op_name(k->op));
    snprintf(rows[r].direction, sizeof rows[r].direction, "%s", k->backward ? "bwd" : "fwd");
    rows[r].shape_key = k->shape_key;
    snprintf(rows[r].shape, sizeof rows[r].shape, "%s", k->shape);
    rows[r].p50_s = k->p50_s;
    rows[r].p95_s = k->p95_s;
    rows[r].reps = k->reps;
    rows[r].mean_s = k->mean_s;
  }
  hid_t mtype = hap_h5_kernel_type();
  hap_status st = put_table(w, g, obj, "kernels", mtype, rows, d->n_kernels,
                            "shape_key: hap_kernel_shape_key; p50_s, p95_s, mean_s: s; reps: runs");
  if (mtype >= 0)
    H5Tclose(mtype);
  free(rows);
  return st;
}

static hap_status write_device(const writer *w, hid_t devs, int32_t i,
                               const hap_profile_device *d) {
  char name[16];
  objbuf obj;
  snprintf(name, sizeof name, "%d", i);
  hid_t g = new_group(w, devs, "/devices", name, obj);
  if (g < 0)
    return HAP_EHDF5;
  hap_status st = put_str(w, g, obj, "name", d->name);
  if (st == HAP_OK)
    st = put_str(w, g, obj, "host", d->host);
  if (st == HAP_OK)
    st = put_str(w, g, obj, "model", d->model);
  if (st == HAP_OK)
    st = put_str(w, g, obj, "kind", d->kind == HAP_DEVICE_GPU ? "gpu" : "cpu");
  if (st == HAP_OK)
    st = put_i64(w, g, obj, "memory_bytes", d->memory_bytes);
  if (st == HAP_OK)
    st = put_f64(w, g, obj, "memory_bw_Bps", d->memory_bw_Bps);
  if (st == HAP_OK)
    st = put_f64(w, g, obj, "launch_s", d->launch_s);
  if (st == HAP_OK && d->update_bw_Bps > 0)
    st = put_f64(w, g, obj, "update_bw_Bps", d->update_bw_Bps);
  for (int t = 0; t < HAP_DTYPE_COUNT && st == HAP_OK; t++) {
    char attr[64];
    snprintf(attr, sizeof attr, "peak_flops_%s", hap_dtype_name((hap_dtype)t));
    if (d->peak_flops[t] > 0)
      st = put_f64(w, g, obj, attr, d->peak_flops[t]);
  }
  if (st == HAP_OK)
    st = write_gemm(w, g, obj, d);
  if (st == HAP_OK)
    st = write_kernels(w, g, obj, d);
  H5Gclose(g);
  return st;
}

/* The datasets of a sweep: sizes_bytes, samples_s, p50_s, p95_s. */
static hap_status write_sweep(const writer *w, hid_t g, const char *obj, const sweep_view *s) {
  hsize_t n = (hsize_t)s->n_sizes;
  hap_status st = put_data(w, g, obj, "sizes_bytes", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n,
                           s->sizes_bytes, "bytes");
  if (st == HAP_OK)
    st = put_f64s(w, g, obj, "samples_s", s->samples_s, s->n_sizes, s->reps, "s");
  if (st == HAP_OK)
    st = put_f64s(w, g, obj, "p50_s", s->p50_s, s->n_sizes, 0, "s");
  if (st == HAP_OK)
    st = put_f64s(w, g, obj, "p95_s", s->p95_s, s->n_sizes, 0, "s");
  if (st == HAP_OK)
    st = put_i64(w, g, obj, "warmup", s->warmup);
  if (st == HAP_OK)
    st = put_i64(w, g, obj, "iters", s->iters);
  return st;
}

/* FIT: fit_upper_bytes (bytes; the last inf), fit_alpha_s (s), fit_beta_Bps (bytes/s), f64[P]. */
static hap_status write_fit(const writer *w, hid_t g, const char *obj, const hap_ab_fit *f) {
  hap_status st = put_num(w, g, obj, "fit_upper_bytes", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                          f->upper_bytes, f->n_pieces);
  if (st == HAP_OK)
    st = put_num(w, g, obj, "fit_alpha_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, f->alpha_s,
                 f->n_pieces);
  if (st == HAP_OK)
    st = put_num(w, g, obj, "fit_beta_Bps", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, f->beta_Bps,
                 f->n_pieces);
  return st;
}

static hap_status write_p2p(const writer *w, hid_t p2p, const hap_profile_p2p *s) {
  char name[32];
  objbuf obj;
  snprintf(name, sizeof name, "%d-%d", s->src, s->dst);
  hid_t g = new_group(w, p2p, "/p2p", name, obj);
  if (g < 0)
    return HAP_EHDF5;
  sweep_view v = {s->n_sizes,     s->reps,      s->warmup, s->iters,
                  s->sizes_bytes, s->samples_s, s->p50_s,  s->p95_s};
  hap_status st = put_i64(w, g, obj, "src", s->src);
  if (st == HAP_OK)
    st = put_i64(w, g, obj, "dst", s->dst);
  if (st == HAP_OK)
    st = put_f64(w, g, obj, "latency_s", s->fit.latency_s);
  if (st == HAP_OK)
    st = put_f64(w, g, obj, "bandwidth_Bps", s->fit.bandwidth_Bps);
  if (st == HAP_OK)
    st = write_fit(w, g, obj, &s->pieces);
  if (st == HAP_OK)
    st = write_sweep(w, g, obj, &v);
  H5Gclose(g);
  return st;
}

static hap_status write_coll(const writer *w, hid_t kind_g, const char *kind_obj,
                             const hap_profile_coll *c) {
  objbuf obj;
  hid_t g = new_group(w, kind_g, kind_obj, c->group, obj);
  if (g < 0)
    return HAP_EHDF5;
  hap_status st = HAP_OK;
  int64_t *ranks = malloc((size_t)c->n_ranks * sizeof *ranks);
  if (ranks == NULL)
    st = hap_err_set(w->err, HAP_ENOMEM, "%s: %s: out of memory", w->file, obj);
  for (int32_t r = 0; r < c->n_ranks && st == HAP_OK; r++)
    ranks[r] = c->ranks[r];
  if (st == HAP_OK)
    st = put_num(w, g, obj, "ranks", H5T_STD_I64LE, H5T_NATIVE_INT64, ranks, c->n_ranks);
  free(ranks);
  if (st == HAP_OK)
    st = write_fit(w, g, obj, &c->fit);
  sweep_view v = {c->n_sizes,     c->reps,      c->warmup, c->iters,
                  c->sizes_bytes, c->samples_s, c->p50_s,  c->p95_s};
  if (st == HAP_OK)
    st = write_sweep(w, g, obj, &v);
  if (st == HAP_OK)
    st = put_f64s(w, g, obj, "algbw_Bps", c->algbw_Bps, c->n_sizes, 0, "B/s");
  if (st == HAP_OK)
    st = put_f64s(w, g, obj, "busbw_Bps", c->busbw_Bps, c->n_sizes, 0, "B/s");
  H5Gclose(g);
  return st;
}

static hap_status write_collectives(const writer *w, hid_t root, const hap_profile *p) {
  objbuf obj;
  hid_t g = new_group(w, root, "/", "collectives", obj);
  if (g < 0)
    return HAP_EHDF5;
  hap_status st = HAP_OK;
  for (int k = 0; k < HAP_COLL_KIND_COUNT && st == HAP_OK; k++) {
    bool any = false;
    for (int32_t j = 0; j < p->n_colls && !any; j++)
      any = p->colls[j].kind == (hap_coll_kind)k;
    if (!any)
      continue;
    objbuf kind_obj;
    hid_t kg = new_group(w, g, obj, hap_coll_kind_name((hap_coll_kind)k), kind_obj);
    st = kg < 0 ? HAP_EHDF5 : HAP_OK;
    for (int32_t j = 0; j < p->n_colls && st == HAP_OK; j++)
      if (p->colls[j].kind == (hap_coll_kind)k)
        st = write_coll(w, kg, kind_obj, &p->colls[j]);
    if (kg >= 0)
      H5Gclose(kg);
  }
  H5Gclose(g);
  return st;
}

static hap_status write_root(const writer *w, hid_t root, const hap_profile *p) {
  char version[32];
  snprintf(version, sizeof version, "%d.%d", HAP_PROFILE_VERSION_MAJOR, HAP_PROFILE_VERSION_MINOR);
  hap_status st = put_str(w, root, "/", "format", HAP_PROFILE_FORMAT);
  if (st == HAP_OK)
    st = put_str(w, root, "/", "version", version);
  if (st == HAP_OK)
    st = put_str(w, root, "/", "created", p->created);
  if (st == HAP_OK)
    st = put_str(w, root, "/", "tool", p->tool);
  if (st == HAP_OK)
    st = put_str(w, root, "/", "backend", p->backend);
  if (st == HAP_OK)
    st = put_strs(w, root, "/", "hosts", (const char *const *)p->hosts, p->n_hosts);
  return st;
}

static hap_status write_env(const writer *w, hid_t root, const hap_profile *p) {
  objbuf obj;
  hid_t g = new_group(w, root, "/", "env", obj);
  if (g < 0)
    return HAP_EHDF5;
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < p->n_env && st == HAP_OK; i++)
    st = put_str(w, g, obj, p->env[i].key, p->env[i].value);
  H5Gclose(g);
  return st;
}

static hap_status write_contents(const writer *w, hid_t file, const hap_profile *p) {
  objbuf obj;
  HAP_TRY(write_root(w, file, p));
  HAP_TRY(write_env(w, file, p));
  hid_t g = new_group(w, file, "/", "devices", obj);
  if (g < 0)
    return HAP_EHDF5;
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < p->n_devices && st == HAP_OK; i++)
    st = write_device(w, g, i, &p->devices[i]);
  H5Gclose(g);
  HAP_TRY(st);
  g = new_group(w, file, "/", "p2p", obj);
  if (g < 0)
    return HAP_EHDF5;
  for (int32_t j = 0; j < p->n_p2p && st == HAP_OK; j++)
    st = write_p2p(w, g, &p->p2p[j]);
  H5Gclose(g);
  HAP_TRY(st);
  return write_collectives(w, file, p);
}

/* Write the whole profile into the (already created, empty) file `tmp`. */
static hap_status write_file(const char *tmp, const char *path, const hap_profile *p,
                             hap_err *err) {
  writer w = {path, err, -1};
  hap_status st = HAP_EHDF5;
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), file = -1;
  w.gcpl = H5Pcreate(H5P_GROUP_CREATE);
  /* 1.8-style metadata (checksummed object headers, readable by HDF5 >= 1.8), none newer */
  if (fapl < 0 || w.gcpl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
      H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V110) < 0 ||
      H5Pset_link_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
      H5Pset_attr_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0) {
    w_fail(&w, "/", "property lists", "");
    goto out;
  }
  file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (file < 0) {
    w_fail(&w, "/", "the temporary file ", tmp);
    goto out;
  }
  st = write_contents(&w, file, p);
  if (st == HAP_OK && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) {
    st = w_fail(&w, "/", "the file (flush)", "");
  }
out:
  if (file >= 0 && H5Fclose(file) < 0 && st == HAP_OK)
    st = w_fail(&w, "/", "the file (close)", "");
  if (w.gcpl >= 0)
    H5Pclose(w.gcpl);
  if (fapl >= 0)
    H5Pclose(fapl);
  return st;
}

/* fsync `path` (a file or a directory); 0 or an errno. */
static int sync_path(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0)
    return errno;
  int e = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return e;
}

static void sync_parent(const char *path) {
  objbuf dir;
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    slash[1] = '\0';
  else
    *slash = '\0';
  (void)sync_path(dir, O_RDONLY | O_DIRECTORY);
}

hap_status hap_profile_write(const hap_profile *p, const char *path, hap_err *err) {
  hap_status st = hap_profile_validate(p, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "%s", path);
    return st;
  }
  char tmp[4200];
  if (path[0] == '\0' ||
      (size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
    return hap_err_set(err, HAP_EINVAL, "%.200s: expected a non-empty path shorter than 4096",
                       path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    return hap_err_set(err, HAP_EIO, "%s: cannot create the temporary file %s: %s", path, tmp,
                       strerror(errno));
  close(fd);
  hap_h5_silence();
  st = write_file(tmp, path, p, err);
  int e = 0;
  if (st == HAP_OK && (e = sync_path(tmp, O_RDONLY)) == 0 && rename(tmp, path) != 0)
    e = errno;
  if (st == HAP_OK && e != 0)
    st = hap_err_set(err, HAP_EIO, "%s: cannot sync and rename the temporary file onto it: %s",
                     path, strerror(e));
  if (st != HAP_OK) {
    unlink(tmp);
    return st;
  }
  sync_parent(path);
  return HAP_OK;
}
