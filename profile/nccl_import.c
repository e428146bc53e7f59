/* nccl_import.c — a profile from nccl-tests logs (nccl_import.h). */
#include "profile/nccl_import.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/presets.h"
#include "profile/fit_rel.h"

/* Lower case without '-', '_' and spaces, into key (at most size - 1 characters). */
static void key_of(const char *s, char *key, size_t size) {
  size_t n = 0;
  for (; *s && n + 1 < size; s++)
    if (*s != '-' && *s != '_' && *s != ' ')
      key[n++] = (char)tolower((unsigned char)*s);
  key[n] = '\0';
}

const char *hap_nt_preset_for(const char *model) {
  char m[256];
  key_of(model, m, sizeof m);
  const char *family_only = NULL;
  for (int i = 0; i < hap_preset_count(); i++) {
    const hap_device_preset *p = hap_preset_get(i);
    if (p->kind != HAP_DEVICE_GPU)
      continue;
    char family[64], variant[64] = "";
    const char *dash = strchr(p->name, '-');
    snprintf(family, sizeof family, "%.*s", dash ? (int)(dash - p->name) : 63, p->name);
    if (dash)
      key_of(dash + 1, variant, sizeof variant);
    char fam[64];
    key_of(family, fam, sizeof fam);
    if (strstr(m, fam) == NULL)
      continue;
    if (variant[0] == '\0' || strstr(m, variant) != NULL)
      return p->name;
    if (family_only == NULL)
      family_only = p->name;
  }
  return family_only;
}

/* "P100-16GB, V100-16GB, ..., H200": the GPU presets' names. */
static void gpu_presets(char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < hap_preset_count() && len < size; i++) {
    const hap_device_preset *p = hap_preset_get(i);
    if (p->kind == HAP_DEVICE_GPU)
      len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", p->name);
  }
}

static bool same_ranks(const hap_nt_log *a, const hap_nt_log *b, int32_t *first_diff) {
  int32_t n = a->n_ranks < b->n_ranks ? a->n_ranks : b->n_ranks;
  for (int32_t r = 0; r < n; r++)
    if (strcmp(a->ranks[r].host, b->ranks[r].host) != 0 ||
        a->ranks[r].device != b->ranks[r].device) {
      *first_diff = r;
      return false;
    }
  *first_diff = n;
  return a->n_ranks == b->n_ranks;
}

/* Hosts and devices from log 0's ranks, with preset p's numbers. */
static hap_status add_devices(hap_profile *prof, const hap_nt_log *log, const char *path,
                              const hap_device_preset *p, hap_err *err) {
  for (int32_t r = 0; r < log->n_ranks; r++) {
    const hap_nt_rank *x = &log->ranks[r];
    bool known = false;
    for (int32_t h = 0; h < prof->n_hosts && !known; h++)
      known = strcmp(prof->hosts[h], x->host) == 0;
    if (!known)
      HAP_TRY(hap_profile_add_host(prof, x->host, err));
    char name[2 * HAP_NT_NAME_MAX];
    snprintf(name, sizeof name, "%s:%d", x->host, (int)x->device);
    if (hap_profile_find_device(prof, name) >= 0)
      return hap_err_set(err, HAP_EINVAL, "%s: rank %d is device %d of %s again", path, (int)r,
                         (int)x->device, x->host);
    int32_t idx = -1;
    HAP_TRY(hap_profile_add_device(prof, name, x->host, x->model, HAP_DEVICE_GPU, &idx, err));
    hap_profile_device *d = &prof->devices[idx];
    d->memory_bytes = (int64_t)p->memory_bytes;
    d->memory_bw_Bps = p->memory_bw_peak_Bps * HAP_PRESET_MEMORY_BW_FRACTION;
    d->launch_s = p->launch_s;
    memcpy(d->peak_flops, p->peak_flops, sizeof d->peak_flops);
  }
  return HAP_OK;
}

/* The rows with size > 0, which must grow; their count in *n. */
static hap_status sizes_of(const hap_nt_log *log, const char *path, int32_t *n, hap_err *err) {
  int64_t last = 0;
  *n = 0;
  for (int32_t i = 0; i < log->n_rows; i++) {
    int64_t b = log->rows[i].bytes;
    if (b == 0)
      continue;
    if (b <= last)
      return hap_err_set(err, HAP_EINVAL,
                         "%s: row %d: %lld B after %lld B, expected growing sizes (one sweep)",
                         path, (int)i + 1, (long long)b, (long long)last);
    last = b;
    (*n)++;
  }
  if (*n == 0)
    return hap_err_set(err, HAP_EINVAL, "%s: no row with a size > 0", path);
  return HAP_OK;
}

/* samples[j] / sizes[j] of the rows with size > 0: out-of-place (k = 0) or in-place (1) time. */
static void fill(const hap_nt_log *log, int k, int64_t *sizes, double *samples) {
  int32_t j = 0;
  for (int32_t i = 0; i < log->n_rows; i++) {
    if (log->rows[i].bytes == 0)
      continue;
    sizes[j] = log->rows[i].bytes;
    samples[j++] = log->rows[i].time_us[k] * 1e-6;
  }
}

static bool has_in_place(const hap_nt_log *log) {
  for (int32_t i = 0; i < log->n_rows; i++)
    if (log->rows[i].bytes > 0 && isnan(log->rows[i].time_us[1]))
      return false;
  return true;
}

static hap_status add_log(hap_profile *prof, const hap_nt_log *log, const char *path,
                          hap_err *err) {
  int32_t n_sizes = 0, n = log->n_ranks;
  HAP_TRY(sizes_of(log, path, &n_sizes, err));
  hap_coll_kind kind;
  if (!hap_nt_test_coll(log->test, &kind)) { /* sendrecv: the ring's pairs */
    if (n < 2)
      return hap_err_set(err, HAP_EINVAL, "%s: sendrecv_perf on one rank: no pair to price", path);
    for (int32_t r = 0; r < n; r++) {
      int32_t j = -1;
      HAP_TRY(hap_profile_add_p2p(prof, r, (r + 1) % n, n_sizes, 1, &j, err));
      fill(log, 0, prof->p2p[j].sizes_bytes, prof->p2p[j].samples_s);
    }
    return HAP_OK;
  }
  int32_t *ranks = malloc((size_t)n * sizeof *ranks);
  if (ranks == NULL)
    return hap_err_set(err, HAP_ENOMEM, "%s: out of memory", path);
  for (int32_t r = 0; r < n; r++)
    ranks[r] = r;
  hap_status st = HAP_OK;
  static const char *const groups[2] = {"world", "world:in-place"};
  for (int k = 0; k < (has_in_place(log) ? 2 : 1) && st == HAP_OK; k++) {
    int32_t j = -1;
    st = hap_profile_add_coll(prof, kind, groups[k], ranks, n, n_sizes, 1, &j, err);
    if (st == HAP_OK)
      fill(log, k, prof->colls[j].sizes_bytes, prof->colls[j].samples_s);
  }
  free(ranks);
  return st;
}

hap_status hap_profile_from_nccl_tests(const hap_nt_log *logs, const char *const *paths, int n,
                                       const char *preset, hap_profile **out, hap_err *err) {
  *out = NULL;
  if (n < 1)
    return hap_err_set(err, HAP_EINVAL, "import-nccl-tests: no log given");
  for (int i = 1; i < n; i++) {
    int32_t r = 0;
    if (!same_ranks(&logs[0], &logs[i], &r))
      return hap_err_set(err, HAP_EINVAL,
                         "%s: its ranks differ from those of %s (first at rank %d: %d ranks "
                         "against %d): import logs of one set of GPUs",
                         paths[i], paths[0], (int)r, (int)logs[i].n_ranks, (int)logs[0].n_ranks);
    for (int j = 0; j < i; j++)
      if (logs[j].test == logs[i].test)
        return hap_err_set(err, HAP_EINVAL, "%s: a second log of %s (the first: %s)", paths[i],
                           hap_nt_test_name(logs[i].test), paths[j]);
  }
  const char *name = preset ? preset : hap_nt_preset_for(logs[0].ranks[0].model);
  const hap_device_preset *p = name ? hap_preset_find(name) : NULL;
  if (p == NULL || p->kind != HAP_DEVICE_GPU) {
    char names[256] = "";
    gpu_presets(names, sizeof names);
    if (preset == NULL)
      return hap_err_set(err, HAP_EINVAL,
                         "%s: no device preset matches the GPU '%s': name one with --device (%s)",
                         paths[0], logs[0].ranks[0].model, names);
    const char *near = hap_preset_suggest(preset);
    return hap_err_set(err, HAP_EINVAL, "--device: '%s' is not a GPU preset%s%s%s (expected %s)",
                       preset, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "",
                       names);
  }
  hap_profile *prof = hap_profile_create();
  if (prof == NULL)
    return hap_err_set(err, HAP_ENOMEM, "import-nccl-tests: out of memory");
  char note[160];
  snprintf(note, sizeof note, "preset %s: published peak FLOP/s and memory; nothing measured",
           p->name);
  hap_status st = hap_profile_set_meta(prof, NULL, NULL, "nccl-tests", err);
  if (st == HAP_OK)
    st = hap_profile_set_env(prof, "nccl-tests.devices", note, err);
  if (st == HAP_OK)
    st = add_devices(prof, &logs[0], paths[0], p, err);
  for (int i = 0; i < n && st == HAP_OK; i++) {
    char key[64];
    snprintf(key, sizeof key, "nccl-tests.%s", hap_nt_test_name(logs[i].test));
    st = hap_profile_set_env(prof, key, paths[i], err);
    if (st == HAP_OK)
      st = add_log(prof, &logs[i], paths[i], err);
  }
  if (st == HAP_OK)
    st = hap_profile_compute_stats(prof, err);
  if (st == HAP_OK)
    st = hap_profile_fit_rel(prof, err);
  if (st == HAP_OK)
    st = hap_profile_validate(prof, err);
  if (st != HAP_OK) {
    hap_profile_destroy(prof);
    return st;
  }
  *out = prof;
  return HAP_OK;
}
