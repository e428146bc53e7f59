/* cluster.c — building, querying and validating the cluster model (cluster.h). */
#include "cluster/cluster.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/strmap.h"
#include "base/vec.h"

typedef struct link_override {
  int32_t src, dst;
  hap_link link;
} link_override;

struct hap_cluster_impl {
  hap_arena strings;
  hap_strmap device_ids;
  hap_strmap host_ids;
  int32_t cap_hosts, cap_devices, cap_fits;
  /* per-pair overrides: open addressing on (src, dst); key -1 = empty */
  link_override *links;
  size_t cap_links, n_links;
};

static const char *const coll_names[HAP_COLL_KIND_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"};

const char *hap_coll_kind_name(hap_coll_kind k) {
  return (unsigned)k < HAP_COLL_KIND_COUNT ? coll_names[k] : "?";
}

hap_status hap_coll_kind_parse(const char *s, hap_coll_kind *out) {
  for (int i = 0; i < HAP_COLL_KIND_COUNT; i++) {
    if (strcmp(s, coll_names[i]) == 0) {
      *out = (hap_coll_kind)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

hap_cluster *hap_cluster_create(const char *name) {
  hap_cluster *c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  c->impl = calloc(1, sizeof *c->impl);
  if (c->impl == NULL) {
    free(c);
    return NULL;
  }
  hap_arena_init(&c->impl->strings);
  hap_strmap_init(&c->impl->device_ids);
  hap_strmap_init(&c->impl->host_ids);
  c->name = hap_arena_strdup(&c->impl->strings, name ? name : "");
  if (c->name == NULL) {
    hap_cluster_destroy(c);
    return NULL;
  }
  return c;
}

void hap_cluster_destroy(hap_cluster *c) {
  if (c == NULL)
    return;
  for (int32_t d = 0; d < c->n_devices; d++) {
    free(c->devices[d].gemm);
    free(c->devices[d].kernels);
  }
  for (int32_t f = 0; f < c->n_fits; f++) {
    free(c->fits[f].ranks);
    free(c->fits[f].points);
  }
  free(c->devices);
  free(c->hosts);
  free(c->fits);
  if (c->impl != NULL) {
    hap_arena_free(&c->impl->strings);
    hap_strmap_free(&c->impl->device_ids);
    hap_strmap_free(&c->impl->host_ids);
    free(c->impl->links);
    free(c->impl);
  }
  free(c);
}

hap_status hap_cluster_set_source(hap_cluster *c, const char *source) {
  c->source = source ? hap_arena_strdup(&c->impl->strings, source) : NULL;
  return (source && !c->source) ? HAP_ENOMEM : HAP_OK;
}

const char *hap_link_origin_name(hap_link_origin o) {
  switch (o) {
  case HAP_LINK_STATED: return "stated";
  case HAP_LINK_MEASURED: return "measured";
  case HAP_LINK_BORROWED: return "borrowed";
  case HAP_LINK_ASSUMED: return "assumed";
  }
  return "?";
}

hap_status hap_cluster_add_host(hap_cluster *c, const char *name, hap_link intra, hap_link nic,
                                int32_t *id, hap_err *err) {
  hap_cluster_impl *im = c->impl;
  if (name == NULL || name[0] == '\0')
    return hap_err_set(err, HAP_EINVAL, "host name is empty");
  if (hap_strmap_get(&im->host_ids, name) >= 0)
    return hap_err_set(err, HAP_EINVAL, "host '%s' is defined twice", name);
  if (HAP_VEC_RESERVE(c->hosts, im->cap_hosts, (int64_t)c->n_hosts + 1, 16) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding host '%s'", name);
  hap_host *h = &c->hosts[c->n_hosts];
  memset(h, 0, sizeof *h);
  h->name = hap_arena_strdup(&im->strings, name);
  if (h->name == NULL || hap_strmap_put(&im->host_ids, h->name, c->n_hosts) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding host '%s'", name);
  h->first_device = c->n_devices;
  h->intra = intra;
  h->nic = nic;
  if (id)
    *id = c->n_hosts;
  c->n_hosts++;
  return HAP_OK;
}

static int cmp_kernel(const void *a, const void *b) {
  const hap_kernel_sample *x = a, *y = b;
  if (x->op != y->op)
    return x->op < y->op ? -1 : 1;
  if (x->backward != y->backward)
    return x->backward ? 1 : -1;
  return (x->shape_key > y->shape_key) - (x->shape_key < y->shape_key);
}

hap_status hap_cluster_add_device(hap_cluster *c, const char *name, const hap_device *proto,
                                  int32_t *id, hap_err *err) {
  hap_cluster_impl *im = c->impl;
  if (c->n_hosts == 0)
    return hap_err_set(err, HAP_EINVAL, "device '%s' added before any host", name ? name : "");
  if (name == NULL || name[0] == '\0')
    return hap_err_set(err, HAP_EINVAL, "device name is empty");
  if (hap_strmap_get(&im->device_ids, name) >= 0)
    return hap_err_set(err, HAP_EINVAL, "device '%s' is defined twice", name);
  if (HAP_VEC_RESERVE(c->devices, im->cap_devices, (int64_t)c->n_devices + 1, 16) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding device '%s'", name);
  hap_device *d = &c->devices[c->n_devices];
  *d = *proto;
  d->gemm = NULL;
  d->kernels = NULL;
  d->n_gemm = d->n_kernels = 0;
  d->name = hap_arena_strdup(&im->strings, name);
  d->model = hap_arena_strdup(&im->strings, proto->model ? proto->model : "");
  if (d->name == NULL || d->model == NULL ||
      hap_strmap_put(&im->device_ids, d->name, c->n_devices) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding device '%s'", name);
  hap_host *h = &c->hosts[c->n_hosts - 1];
  d->host = c->n_hosts - 1;
  d->local_index = h->n_devices;
  if (proto->n_gemm > 0) {
    d->gemm = malloc((size_t)proto->n_gemm * sizeof *d->gemm);
    if (d->gemm == NULL)
      return hap_err_set(err, HAP_ENOMEM, "out of memory adding device '%s'", name);
    memcpy(d->gemm, proto->gemm, (size_t)proto->n_gemm * sizeof *d->gemm);
    d->n_gemm = proto->n_gemm;
  }
  if (proto->n_kernels > 0) {
    d->kernels = malloc((size_t)proto->n_kernels * sizeof *d->kernels);
    if (d->kernels == NULL)
      return hap_err_set(err, HAP_ENOMEM, "out of memory adding device '%s'", name);
    memcpy(d->kernels, proto->kernels, (size_t)proto->n_kernels * sizeof *d->kernels);
    d->n_kernels = proto->n_kernels;
    qsort(d->kernels, (size_t)d->n_kernels, sizeof *d->kernels, cmp_kernel);
  }
  h->n_devices++;
  if (id)
    *id = c->n_devices;
  c->n_devices++;
  return HAP_OK;
}

void hap_cluster_set_inter_latency(hap_cluster *c, double seconds) { c->inter_latency_s = seconds; }

static size_t pair_slot(size_t cap, int32_t src, int32_t dst) {
  uint64_t h = ((uint64_t)(uint32_t)src << 32 | (uint32_t)dst) * 0x9E3779B97F4A7C15ULL;
  return (size_t)(h >> 17) & (cap - 1);
}

hap_status hap_cluster_set_link(hap_cluster *c, int32_t src, int32_t dst, hap_link link,
                                hap_err *err) {
  hap_cluster_impl *im = c->impl;
  if (src < 0 || dst < 0 || src >= c->n_devices || dst >= c->n_devices)
    return hap_err_set(err, HAP_EINVAL, "link %d -> %d refers to no device", src, dst);
  if ((im->n_links + 1) * 2 > im->cap_links) {
    size_t cap = im->cap_links ? im->cap_links * 2 : 64;
    link_override *t = malloc(cap * sizeof *t);
    if (t == NULL)
      return hap_err_set(err, HAP_ENOMEM, "out of memory adding a link override");
    for (size_t i = 0; i < cap; i++)
      t[i].src = -1;
    for (size_t i = 0; i < im->cap_links; i++) {
      if (im->links[i].src < 0)
        continue;
      size_t j = pair_slot(cap, im->links[i].src, im->links[i].dst);
      while (t[j].src >= 0) // NOLINT(clang-analyzer-core.UndefinedBinaryOperatorResult)
        j = (j + 1) & (cap - 1);
      t[j] = im->links[i];
    }
    free(im->links);
    im->links = t;
    im->cap_links = cap;
  }
  size_t j = pair_slot(im->cap_links, src, dst);
  // NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult): every slot was set to -1
  while (im->links[j].src >= 0 && !(im->links[j].src == src && im->links[j].dst == dst))
    j = (j + 1) & (im->cap_links - 1);
  if (im->links[j].src < 0)
    im->n_links++;
  im->links[j] = (link_override){src, dst, link};
  return HAP_OK;
}

static int cmp_int32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static int cmp_point(const void *a, const void *b) {
  double x = ((const hap_coll_point *)a)->bytes, y = ((const hap_coll_point *)b)->bytes;
  return (x > y) - (x < y);
}

hap_ab_fit hap_ab_fit_one(double alpha_s, double beta_Bps) {
  hap_ab_fit f = {.n_pieces = 1, .upper_bytes = {INFINITY}};
  f.alpha_s[0] = alpha_s;
  f.beta_Bps[0] = beta_Bps;
  return f;
}

hap_ab_fit hap_ab_fit_two(double threshold_bytes, double alpha_small_s, double beta_small_Bps,
                          double alpha_large_s, double beta_large_Bps) {
  if (!(threshold_bytes > 0))
    return hap_ab_fit_one(alpha_large_s, beta_large_Bps);
  hap_ab_fit f = {.n_pieces = 2, .upper_bytes = {threshold_bytes, INFINITY}};
  f.alpha_s[0] = alpha_small_s;
  f.beta_Bps[0] = beta_small_Bps;
  f.alpha_s[1] = alpha_large_s;
  f.beta_Bps[1] = beta_large_Bps;
  return f;
}

double hap_ab_fit_time(const hap_ab_fit *f, double bytes) {
  int32_t i = 0;
  while (i + 1 < f->n_pieces && !(bytes < f->upper_bytes[i]))
    i++;
  return f->alpha_s[i] + bytes / f->beta_Bps[i];
}

/* How far (bytes) a query may be from a measured point and still be at it: half a byte, or a
 * relative 1e-9 of large sizes (profiles store whole bytes; the replay and the simulator compute
 * a size the same way, so it differs only by that rounding). */
static double point_tol(double bytes) { return fmax(0.5, 1e-9 * bytes); }

const hap_coll_point *hap_coll_fit_point(const hap_coll_fit *f, double bytes) {
  int32_t lo = 0, hi = f->n_points; /* binary search: the first point not below S's window */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (f->points[mid].bytes < bytes - point_tol(bytes))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < f->n_points && fabs(f->points[lo].bytes - bytes) <= point_tol(bytes))
    return &f->points[lo];
  return NULL;
}

double hap_coll_fit_time(const hap_coll_fit *f, double bytes) {
  const hap_coll_point *at = hap_coll_fit_point(f, bytes);
  return at != NULL ? at->seconds : hap_ab_fit_time(&f->fit, bytes);
}

const char *hap_ab_fit_check(const hap_ab_fit *f, char *buf, size_t len) {
  if (f->n_pieces < 1 || f->n_pieces > HAP_FIT_MAX_PIECES) {
    snprintf(buf, len, "has %d pieces, expected 1 to %d", f->n_pieces, HAP_FIT_MAX_PIECES);
    return buf;
  }
  for (int32_t i = 0; i < f->n_pieces; i++) {
    bool last = i + 1 == f->n_pieces;
    double u = f->upper_bytes[i], prev = i > 0 ? f->upper_bytes[i - 1] : 0;
    if (last ? !(u == INFINITY) : !(isfinite(u) && u > prev)) {
      snprintf(buf, len, "upper_bytes[%d] is %g, expected %s", i, u,
               last     ? "inf (the last piece has no upper bound)"
               : i == 0 ? "a finite size > 0"
                        : "a finite size above the previous bound (strictly increasing)");
      return buf;
    }
    if (!(isfinite(f->alpha_s[i]) && f->alpha_s[i] >= 0)) {
      snprintf(buf, len, "alpha_s[%d] is %g, expected a finite latency >= 0 s", i, f->alpha_s[i]);
      return buf;
    }
    if (!(isfinite(f->beta_Bps[i]) && f->beta_Bps[i] > 0)) {
      snprintf(buf, len, "beta_Bps[%d] is %g, expected a finite bandwidth > 0 bytes/s", i,
               f->beta_Bps[i]);
      return buf;
    }
  }
  return NULL;
}

hap_status hap_cluster_add_fit(hap_cluster *c, const hap_coll_fit *fit, hap_err *err) {
  if ((unsigned)fit->kind >= HAP_COLL_KIND_COUNT || fit->n_ranks < 1)
    return hap_err_set(err, HAP_EINVAL, "collective fit: bad kind or empty group");
  for (int32_t i = 0; i < fit->n_ranks; i++)
    if (fit->ranks[i] < 0 || fit->ranks[i] >= c->n_devices)
      return hap_err_set(err, HAP_EINVAL, "collective fit (%s): rank %d refers to no device",
                         hap_coll_kind_name(fit->kind), fit->ranks[i]);
  if (HAP_VEC_RESERVE(c->fits, c->impl->cap_fits, (int64_t)c->n_fits + 1, 16) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding a collective fit");
  for (int32_t i = 0; i < fit->n_points; i++)
    if (!(isfinite(fit->points[i].bytes) && fit->points[i].bytes > 0 &&
          isfinite(fit->points[i].seconds) && fit->points[i].seconds > 0))
      return hap_err_set(err, HAP_EINVAL,
                         "collective fit (%s): point %d is (%g bytes, %g s), expected both finite "
                         "and > 0",
                         hap_coll_kind_name(fit->kind), i, fit->points[i].bytes,
                         fit->points[i].seconds);
  hap_coll_fit *f = &c->fits[c->n_fits];
  *f = *fit;
  f->ranks = malloc((size_t)fit->n_ranks * sizeof *f->ranks);
  f->points = malloc(((size_t)fit->n_points + 1) * sizeof *f->points);
  if (f->ranks == NULL || f->points == NULL) {
    free(f->ranks);
    free(f->points);
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding a collective fit");
  }
  memcpy(f->ranks, fit->ranks, (size_t)fit->n_ranks * sizeof *f->ranks);
  qsort(f->ranks, (size_t)f->n_ranks, sizeof *f->ranks, cmp_int32);
  if (fit->n_points > 0)
    memcpy(f->points, fit->points, (size_t)fit->n_points * sizeof *f->points);
  qsort(f->points, (size_t)f->n_points, sizeof *f->points, cmp_point);
  char why[96] = "";
  for (int32_t i = 1; i < f->n_ranks && why[0] == '\0'; i++)
    if (f->ranks[i] == f->ranks[i - 1])
      snprintf(why, sizeof why, "device %d appears twice", f->ranks[i]);
  for (int32_t i = 1; i < f->n_points && why[0] == '\0'; i++)
    if (f->points[i].bytes - f->points[i - 1].bytes <= point_tol(f->points[i].bytes))
      snprintf(why, sizeof why, "two points at %g bytes, expected one time per size",
               f->points[i].bytes);
  if (why[0] != '\0') {
    free(f->ranks);
    free(f->points);
    f->ranks = NULL;
    f->points = NULL;
    return hap_err_set(err, HAP_EINVAL, "collective fit (%s): %s", hap_coll_kind_name(fit->kind),
                       why);
  }
  c->n_fits++;
  return HAP_OK;
}

hap_link hap_cluster_link(const hap_cluster *c, int32_t src, int32_t dst) {
  const hap_cluster_impl *im = c->impl;
  if (im->n_links > 0) {
    size_t j = pair_slot(im->cap_links, src, dst);
    while (im->links[j].src >= 0) {
      if (im->links[j].src == src && im->links[j].dst == dst)
        return im->links[j].link;
      j = (j + 1) & (im->cap_links - 1);
    }
  }
  const hap_host *a = &c->hosts[c->devices[src].host];
  const hap_host *b = &c->hosts[c->devices[dst].host];
  if (a == b)
    return a->intra;
  hap_link l;
  l.bandwidth_Bps = fmin(a->nic.bandwidth_Bps, b->nic.bandwidth_Bps);
  l.latency_s = a->nic.latency_s + b->nic.latency_s + c->inter_latency_s;
  return l;
}

int32_t hap_cluster_n_link_overrides(const hap_cluster *c) { return (int32_t)c->impl->n_links; }

bool hap_cluster_next_link_override(const hap_cluster *c, size_t *cursor, int32_t *src,
                                    int32_t *dst, hap_link *link) {
  const hap_cluster_impl *im = c->impl;
  for (size_t j = *cursor; j < im->cap_links; j++) {
    if (im->links[j].src < 0)
      continue;
    *src = im->links[j].src;
    *dst = im->links[j].dst;
    *link = im->links[j].link;
    *cursor = j + 1;
    return true;
  }
  *cursor = im->cap_links;
  return false;
}

const hap_coll_fit *hap_cluster_find_fit(const hap_cluster *c, hap_coll_kind kind,
                                         const int32_t *ranks, int32_t n) {
  if (c->n_fits == 0 || n < 1)
    return NULL;
  int32_t stack[256];
  int32_t *sorted = n <= 256 ? stack : malloc((size_t)n * sizeof *sorted);
  if (sorted == NULL)
    return NULL;
  memcpy(sorted, ranks, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_int32);
  const hap_coll_fit *found = NULL;
  for (int32_t f = 0; f < c->n_fits && !found; f++) {
    const hap_coll_fit *fit = &c->fits[f];
    if (fit->kind == kind && fit->n_ranks == n &&
        memcmp(fit->ranks, sorted, (size_t)n * sizeof *sorted) == 0)
      found = fit;
  }
  if (sorted != stack)
    free(sorted);
  return found;
}

int32_t hap_cluster_find_device(const hap_cluster *c, const char *name) {
  return hap_strmap_get(&c->impl->device_ids, name);
}

int32_t hap_cluster_find_host(const hap_cluster *c, const char *name) {
  return hap_strmap_get(&c->impl->host_ids, name);
}

static bool positive(double x) { return isfinite(x) && x > 0; }
static bool non_negative(double x) { return isfinite(x) && x >= 0; }

static hap_status check_link(const hap_link *l, const char *what, const char *name, hap_err *err) {
  if (!positive(l->bandwidth_Bps))
    return hap_err_set(err, HAP_EINVAL, "%s '%s': bandwidth_Bps is %g, expected > 0", what, name,
                       l->bandwidth_Bps);
  if (!non_negative(l->latency_s))
    return hap_err_set(err, HAP_EINVAL, "%s '%s': latency_s is %g, expected >= 0", what, name,
                       l->latency_s);
  return HAP_OK;
}

hap_status hap_cluster_validate(const hap_cluster *c, hap_err *err) {
  if (c->n_hosts == 0 || c->n_devices == 0)
    return hap_err_set(err, HAP_EINVAL, "cluster '%s' has no %s", c->name,
                       c->n_hosts == 0 ? "hosts" : "devices");
  if (!non_negative(c->inter_latency_s))
    return hap_err_set(err, HAP_EINVAL, "cluster '%s': inter_latency_s is %g, expected >= 0",
                       c->name, c->inter_latency_s);
  for (int32_t h = 0; h < c->n_hosts; h++) {
    const hap_host *host = &c->hosts[h];
    if (host->n_devices == 0)
      return hap_err_set(err, HAP_EINVAL, "host '%s' has no devices", host->name);
    HAP_TRY(check_link(&host->intra, "host", host->name, err));
    HAP_TRY(check_link(&host->nic, "host NIC", host->name, err));
  }
  for (int32_t i = 0; i < c->n_devices; i++) {
    const hap_device *d = &c->devices[i];
    bool any = false;
    for (int t = 0; t < HAP_DTYPE_COUNT; t++) {
      if (!non_negative(d->peak_flops[t]) || !non_negative(d->sustained_flops[t]))
        return hap_err_set(err, HAP_EINVAL, "device '%s': FLOP/s for %s must be >= 0", d->name,
                           hap_dtype_name((hap_dtype)t));
      any = any || (hap_dtype_is_float((hap_dtype)t) && d->sustained_flops[t] > 0);
    }
    if (!any)
      return hap_err_set(err, HAP_EINVAL,
                         "device '%s': sustained_flops is 0 for every float dtype, expected > 0",
                         d->name);
    if (!positive(d->memory_bytes))
      return hap_err_set(err, HAP_EINVAL, "device '%s': memory_bytes is %g, expected > 0", d->name,
                         d->memory_bytes);
    if (!positive(d->memory_bw_Bps))
      return hap_err_set(err, HAP_EINVAL, "device '%s': memory_bw_Bps is %g, expected > 0", d->name,
                         d->memory_bw_Bps);
    if (!non_negative(d->update_bw_Bps))
      return hap_err_set(err, HAP_EINVAL, "device '%s': update_bw_Bps is %g, expected >= 0",
                         d->name, d->update_bw_Bps);
    if (!non_negative(d->launch_s))
      return hap_err_set(err, HAP_EINVAL, "device '%s': launch_s is %g, expected >= 0", d->name,
                         d->launch_s);
    for (int32_t k = 0; k < d->n_gemm; k++)
      if (!positive(d->gemm[k].flops_per_s) || d->gemm[k].m <= 0 || d->gemm[k].n <= 0 ||
          d->gemm[k].k <= 0)
        return hap_err_set(err, HAP_EINVAL, "device '%s': GEMM sample %d is not positive", d->name,
                           k);
    for (int32_t k = 0; k < d->n_kernels; k++)
      if (!non_negative(d->kernels[k].seconds))
        return hap_err_set(err, HAP_EINVAL, "device '%s': kernel sample %d has a negative time",
                           d->name, k);
  }
  for (int32_t f = 0; f < c->n_fits; f++) {
    const hap_coll_fit *fit = &c->fits[f];
    char why[160];
    if (hap_ab_fit_check(&fit->fit, why, sizeof why) != NULL)
      return hap_err_set(err, HAP_EINVAL, "collective fit %d (%s over %d ranks): %s", f,
                         hap_coll_kind_name(fit->kind), fit->n_ranks, why);
  }
  return HAP_OK;
}

hap_dtype hap_io_compute_dtype(const hap_op_io *io) {
  for (int i = 0; i < io->n_in; i++)
    if (hap_dtype_is_float(io->in_dtype[i]))
      return io->in_dtype[i];
  return io->out_dtype[0];
}

/* Mixed into the key of an application computed in float16 or bfloat16 (+ the dtype). */
#define KEY_HALF_SALT 0x68616c6600000000ULL /* "half" */

/* Mixed into the key of a backward application with the mask of float inputs it computes no
 * gradient for. */
#define KEY_NO_GRAD_SALT 0x6e6f677200000000ULL /* "nogr" */

uint64_t hap_kernel_key(const hap_op_io *io, bool backward) {
  uint64_t h = hap_kernel_shape_key(io);
  uint64_t skipped = 0; /* bit i: float input i gets no gradient */
  for (int i = 0; backward && i < io->n_in; i++)
    if (hap_dtype_is_float(io->in_dtype[i]) && !io->in_grad[i])
      skipped |= 1ULL << i;
  return skipped != 0 ? hap_fnv1a_word(h, KEY_NO_GRAD_SALT + skipped) : h;
}

uint64_t hap_kernel_shape_key(const hap_op_io *io) {
  uint64_t h = HAP_KEY_HASH_BASIS; /* FNV-1a over ranks and dims */
  for (int i = 0; i < io->n_in; i++) {
    h = hap_fnv1a_word(h, (uint64_t)(uint32_t)io->in[i].rank);
    for (int d = 0; d < io->in[i].rank; d++)
      h = hap_fnv1a_word(h, (uint64_t)io->in[i].dims[d]);
  }
  hap_dtype format = hap_io_compute_dtype(io);
  if (format == HAP_F16 || format == HAP_BF16)
    h = hap_fnv1a_word(h, KEY_HALF_SALT + (uint64_t)format);
  return h;
}

const hap_kernel_sample *hap_device_kernel(const hap_device *d, hap_op op, bool backward,
                                           uint64_t shape_key) {
  const hap_kernel_sample probe = {.op = op, .backward = backward, .shape_key = shape_key};
  int32_t lo = 0, hi = d->n_kernels - 1;
  while (lo <= hi) {
    int32_t mid = lo + (hi - lo) / 2;
    int c = cmp_kernel(&d->kernels[mid], &probe); /* the order hap_cluster_add_device sorts in */
    if (c == 0)
      return &d->kernels[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return NULL;
}

double hap_device_flops(const hap_device *d, hap_dtype dtype) {
  double r = d->sustained_flops[dtype];
  return r > 0 ? r : d->sustained_flops[HAP_F32];
}

double hap_gemm_rate(const hap_device *d, hap_dtype dtype, double m, double n, double k) {
  double lm = log(m), ln = log(n), lk = log(k);
  double wsum = 0, acc = 0;
  for (int32_t i = 0; i < d->n_gemm; i++) {
    const hap_gemm_sample *s = &d->gemm[i];
    if (s->dtype != dtype)
      continue;
    double dm = lm - log((double)s->m), dn = ln - log((double)s->n), dk = lk - log((double)s->k);
    double d2 = dm * dm + dn * dn + dk * dk;
    if (d2 < 1e-18)
      return s->flops_per_s;
    double w = 1 / (d2 * d2); /* inverse distance weighting, power 4: nearest samples dominate */
    wsum += w;
    acc += w * log(s->flops_per_s);
  }
  return wsum > 0 ? exp(acc / wsum) : hap_device_flops(d, dtype);
}
