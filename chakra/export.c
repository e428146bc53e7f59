/* export.c — a simulated plan's lowered tasks as one Chakra trace per device (export.h). */
#include "chakra/export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chakra/et.h"

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "chakra: out of memory");
}

bool hap_chakra_path(const char *dir, const char *prefix, int32_t rank, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/%s.%d.et", dir, prefix, rank);
  return n > 0 && (size_t)n < len;
}

/* Chakra's CollectiveCommType of a hap collective. */
static int coll_type(hap_coll_kind k) {
  switch (k) {
  case HAP_COLL_ALL_REDUCE: return HAP_ET_ALL_REDUCE;
  case HAP_COLL_ALL_GATHER: return HAP_ET_ALL_GATHER;
  case HAP_COLL_REDUCE_SCATTER: return HAP_ET_REDUCE_SCATTER;
  case HAP_COLL_ALL_TO_ALL: return HAP_ET_ALL_TO_ALL;
  case HAP_COLL_BROADCAST: return HAP_ET_BROADCAST;
  default: return -1;
  }
}

/* What every device's trace shares: the collectives' bytes and the spans' NIC sharing. */
typedef struct shared {
  double *coll_bytes; /* [n_tasks * n_devices]: collective tasks' per-device bytes */
  int32_t sharers[2]; /* per hap_task_span */
  int32_t *ranks;     /* [n_devices] scratch */
} shared;

static hap_status ids(uint64_t **dst, int32_t *n, const int32_t *src, int32_t cnt, int64_t extra,
                      hap_err *err) {
  int32_t total = cnt + (extra >= 0 ? 1 : 0);
  if (total == 0)
    return HAP_OK;
  if ((*dst = malloc((size_t)total * sizeof **dst)) == NULL)
    return oom(err);
  for (int32_t i = 0; i < cnt; i++)
    (*dst)[i] = (uint64_t)src[i];
  if (extra >= 0)
    (*dst)[cnt] = (uint64_t)extra;
  *n = total;
  return HAP_OK;
}

/* Node t of device d. prev: the task before t on its stream, or -1. */
static hap_status task_node(const hap_plan_sim *ps, const shared *sh, int32_t t, int32_t d,
                            int32_t prev, hap_task_work *w, hap_et_rank *r, hap_err *err) {
  hap_lowered *lw = ps->lw;
  const hap_task *k = &lw->tasks[t];
  hap_et_node *n = hap_et_add_node(r);
  if (n == NULL)
    return oom(err);
  n->id = (uint64_t)t;
  HAP_TRY(hap_et_set_str(&n->name, k->name, err));
  HAP_TRY(hap_et_set_str(&n->kind, hap_task_kind_name(k->kind), err));
  const int32_t *deps = lw->deps + k->dep0;
  HAP_TRY(ids(&n->data_deps, &n->n_data_deps, deps, k->n_deps, -1, err));
  bool listed = prev < 0;
  for (int32_t i = 0; i < k->n_deps && !listed; i++)
    listed = deps[i] == prev;
  if (!listed)
    HAP_TRY(ids(&n->ctrl_deps, &n->n_ctrl_deps, NULL, 0, prev, err));
  double dur = hap_plan_sim_duration(ps, t, d);
  double start = ps->start_s[(size_t)ps->group[d] * (size_t)ps->n_tasks + (size_t)t];
  n->start_us = (uint64_t)llround(start * 1e6);
  n->duration_us = (uint64_t)llround(dur * 1e6);
  n->exact_us = dur * 1e6;
  n->is_cpu_op = 0;
  if (k->kind != HAP_TASK_COLLECTIVE) {
    HAP_TRY(hap_lowered_priced_work(lw, t, d, w, err));
    n->type = HAP_ET_COMP;
    n->num_ops = w->flops * k->repeats; /* every run in the iteration */
    n->tensor_size = w->bytes * k->repeats;
    return HAP_OK;
  }
  n->type = HAP_ET_COLL;
  n->comm_type = coll_type(k->coll);
  if (n->comm_type < 0)
    return hap_err_set(err, HAP_EUNSUPPORTED, "task '%s': collective '%s' has no Chakra type",
                       k->name, hap_coll_kind_name(k->coll));
  n->comm_size = sh->coll_bytes[(size_t)t * (size_t)ps->n_devices + (size_t)d];
  int32_t m = hap_lowered_coll_group(lw, t, d, sh->ranks);
  char pg[64];
  snprintf(pg, sizeof pg, "hap_%s%d", k->span == HAP_SPAN_GROUP ? "group" : "replicas",
           k->span == HAP_SPAN_GROUP ? d / lw->group_size : d % lw->group_size);
  HAP_TRY(hap_et_set_str(&n->pg_name, pg, err));
  if ((n->pg_ranks = malloc((size_t)m * sizeof *n->pg_ranks)) == NULL)
    return oom(err);
  for (int32_t i = 0; i < m; i++)
    n->pg_ranks[i] = sh->ranks[i];
  n->n_pg_ranks = m;
  HAP_TRY(hap_et_set_str(&n->coll_impl, hap_coll_impl_name(k->impl), err));
  n->nic_sharers = sh->sharers[k->span];
  n->repeats = k->repeats;
  if (k->recompute_of >= 0)
    n->recompute_of = k->recompute_of;
  return HAP_OK;
}

static hap_status device_trace(const hap_plan_sim *ps, const shared *sh, int32_t d,
                               hap_task_work *w, hap_et_rank **out, hap_err *err) {
  const hap_lowered *lw = ps->lw;
  const hap_device *dev = &ps->cluster->devices[d];
  hap_dtype dt = hap_policy_compute_dtype(&lw->plan->policy);
  hap_et_rank *r = hap_et_rank_create();
  if (r == NULL)
    return oom(err);
  *out = r;
  r->rank = d;
  r->world_size = ps->n_devices;
  r->flops_per_s = hap_device_flops(dev, dt);
  r->memory_Bps = dev->memory_bw_Bps;
  r->iteration_s = ps->iteration_s;
  const char *cl = ps->cluster->source ? ps->cluster->source : ps->cluster->name;
  HAP_TRY(hap_et_set_str(&r->device, dev->name, err));
  HAP_TRY(hap_et_set_str(&r->device_model, dev->model, err));
  HAP_TRY(hap_et_set_str(&r->dtype, hap_dtype_name(dt), err));
  HAP_TRY(hap_et_set_str(&r->cluster, cl ? cl : "", err));
  HAP_TRY(hap_et_set_str(&r->strategy, lw->plan->strategy, err));
  int32_t prev[2] = {-1, -1}; /* per stream: compute, communication */
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    int s = lw->tasks[t].kind == HAP_TASK_COLLECTIVE;
    HAP_TRY(task_node(ps, sh, t, d, prev[s], w, r, err));
    prev[s] = t;
  }
  return HAP_OK;
}

/* Remove <prefix>.<rank>.et for rank >= n (an earlier, larger export) until one is missing. */
static void remove_stale(const char *dir, const char *prefix, int32_t n) {
  char path[4096];
  for (int32_t r = n; r < INT32_MAX && hap_chakra_path(dir, prefix, r, path, sizeof path); r++)
    if (unlink(path) != 0)
      break;
}

hap_status hap_chakra_export(const hap_plan_sim *ps, const char *dir, const char *prefix,
                             int64_t *nodes, hap_err *err) {
  hap_lowered *lw = ps->lw;
  int32_t n = ps->n_devices;
  if (prefix[0] == '\0' || strchr(prefix, '/') != NULL)
    return hap_err_set(err, HAP_EINVAL, "--chakra-prefix '%s': expected a file name prefix",
                       prefix);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return hap_err_set(err, HAP_EIO, "%s: cannot create the directory: %s", dir, strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return hap_err_set(err, HAP_EIO, "%s: expected a directory", dir);
  size_t cells = (size_t)lw->n_tasks * (size_t)n;
  shared sh = {.coll_bytes = malloc((cells ? cells : 1) * sizeof(double)),
               .ranks = malloc((size_t)n * sizeof(int32_t))};
  hap_task_work *w = malloc(sizeof *w);
  hap_status st = sh.coll_bytes && sh.ranks && w ? HAP_OK : oom(err);
  for (int sp = 0; sp < 2 && st == HAP_OK; sp++)
    st = hap_plan_sim_nic_sharers(lw, ps->cluster, (hap_task_span)sp, &sh.sharers[sp], err);
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK; t++)
    if (lw->tasks[t].kind == HAP_TASK_COLLECTIVE)
      st = hap_lowered_coll_moved_bytes(lw, ps->cluster, t, sh.coll_bytes + (size_t)t * (size_t)n,
                                        err);
  int64_t total = 0;
  for (int32_t d = 0; d < n && st == HAP_OK; d++) {
    char path[4096];
    hap_et_rank *r = NULL;
    if (!hap_chakra_path(dir, prefix, d, path, sizeof path))
      st = hap_err_set(err, HAP_EINVAL, "%s: the path is too long", dir);
    if (st == HAP_OK && (st = device_trace(ps, &sh, d, w, &r, err)) != HAP_OK)
      hap_err_prefix(err, "%s", path);
    if (st == HAP_OK && (st = hap_et_write(path, r, err)) == HAP_OK)
      total += r->n_nodes;
    hap_et_rank_destroy(r);
  }
  if (st == HAP_OK)
    remove_stale(dir, prefix, n);
  free(sh.coll_bytes);
  free(sh.ranks);
  free(w);
  if (st == HAP_OK && nodes != NULL)
    *nodes = total;
  return st;
}
