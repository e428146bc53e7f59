/* engine.c — building task lists (validated as they are added) and reading results. The event
 * loop is in engine_run.c, statistics and the critical path in engine_report.c. */
#include "simulate/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "engine_internal.h"

#define SIM_MAX_IDS INT32_MAX

static bool finite_nonneg(double x) { return isfinite(x) && x >= 0; }

hap_status hap_sim_create(int32_t n_devices, hap_sim **out, hap_err *err) {
  if (out == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no output pointer");
  *out = NULL;
  if (n_devices < 1 || n_devices > SIM_MAX_IDS / HAP_SIM_N_STREAMS - 1)
    return hap_err_set(err, HAP_EINVAL, "simulator: %d devices (expected 1..%d)", n_devices,
                       SIM_MAX_IDS / HAP_SIM_N_STREAMS - 1);
  hap_sim *s = calloc(1, sizeof *s);
  if (s == NULL)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
  s->n_devices = n_devices;
  *out = s;
  return HAP_OK;
}

void hap_sim_destroy(hap_sim *s) {
  if (s == NULL)
    return;
  sim_run_free(&s->run);
  free(s->name_off);
  free(s->device);
  free(s->stream);
  free(s->kind);
  free(s->duration_s);
  free(s->flops);
  free(s->bytes);
  free(s->aux);
  free(s->names);
  free(s->edge_task);
  free(s->edge_on);
  free(s->xf_task);
  free(s->xf_latency_s);
  free(s->xf_path_off);
  free(s->path_res);
  free(s->res_bw_Bps);
  free(s->res_name_off);
  free(s);
}

/* Copy a name into the pool; its offset in *off. */
static hap_status push_name(hap_sim *s, const char *name, size_t *off, hap_err *err) {
  size_t len = strlen(name) + 1;
  if (s->names_len + len > (size_t)INT64_MAX ||
      HAP_VEC_RESERVE64(s->names, s->names_cap, (int64_t)(s->names_len + len), 4096) != 0)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for names");
  memcpy(s->names + s->names_len, name, len);
  *off = s->names_len;
  s->names_len += len;
  return HAP_OK;
}

hap_status hap_sim_add_resource(hap_sim *s, const char *name, double bandwidth_Bps, int32_t *id,
                                hap_err *err) {
  if (s == NULL || name == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: resource without a name");
  if (!isfinite(bandwidth_Bps) || bandwidth_Bps <= 0)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: resource \"%s\": bandwidth %g bytes/s (expected > 0, finite)",
                       name, bandwidth_Bps);
  if (s->n_res == SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many resources");
  if (s->n_res == s->cap_res) {
    int64_t cap = hap_vec_next_cap(s->cap_res, (int64_t)s->n_res + 1, 16, SIM_MAX_IDS);
    double *bw = hap_vec_realloc(s->res_bw_Bps, cap, sizeof *bw);
    if (bw != NULL)
      s->res_bw_Bps = bw;
    size_t *off = hap_vec_realloc(s->res_name_off, cap, sizeof *off);
    if (off != NULL)
      s->res_name_off = off;
    if (bw == NULL || off == NULL)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for resources");
    s->cap_res = (int32_t)cap;
  }
  HAP_TRY(push_name(s, name, &s->res_name_off[s->n_res], err));
  s->res_bw_Bps[s->n_res] = bandwidth_Bps;
  if (id != NULL)
    *id = s->n_res;
  s->n_res++;
  s->has_results = false;
  return HAP_OK;
}

hap_status hap_sim_set_bandwidth(hap_sim *s, int32_t resource, double bandwidth_Bps, hap_err *err) {
  if (s == NULL || resource < 0 || resource >= s->n_res)
    return hap_err_set(err, HAP_EINVAL, "simulator: no resource %d", resource);
  if (!isfinite(bandwidth_Bps) || bandwidth_Bps <= 0)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: resource \"%s\": bandwidth %g bytes/s (expected > 0, finite)",
                       s->names + s->res_name_off[resource], bandwidth_Bps);
  s->res_bw_Bps[resource] = bandwidth_Bps;
  s->has_results = false;
  return HAP_OK;
}

hap_status hap_sim_new_collective(hap_sim *s, int32_t *id, hap_err *err) {
  if (s == NULL || id == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no collective output");
  if (s->n_collectives == SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many collectives");
  *id = s->n_collectives++;
  s->has_results = false;
  return HAP_OK;
}

static hap_status reserve_tasks(hap_sim *s, hap_err *err) {
  if (s->n_tasks < s->cap_tasks)
    return HAP_OK;
  if (s->n_tasks == SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many tasks (%d)", s->n_tasks);
  int64_t cap = hap_vec_next_cap(s->cap_tasks, (int64_t)s->n_tasks + 1, 16, SIM_MAX_IDS);
  bool ok = true;
  /* Each array is replaced as soon as it has grown, so a failure leaves every array valid. */
#define SIM_GROW(field)                                                                            \
  do {                                                                                             \
    void *p_ = hap_vec_realloc(s->field, cap, sizeof *s->field);                                   \
    if (p_ != NULL)                                                                                \
      s->field = p_;                                                                               \
    else                                                                                           \
      ok = false;                                                                                  \
  } while (0)
  SIM_GROW(name_off);
  SIM_GROW(device);
  SIM_GROW(stream);
  SIM_GROW(kind);
  SIM_GROW(duration_s);
  SIM_GROW(flops);
  SIM_GROW(bytes);
  SIM_GROW(aux);
#undef SIM_GROW
  if (!ok)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for %lld tasks", (long long)cap);
  s->cap_tasks = (int32_t)cap;
  return HAP_OK;
}

static hap_status reserve_edges(hap_sim *s, int64_t more, hap_err *err) {
  if (s->n_edges + more <= s->cap_edges)
    return HAP_OK;
  int64_t cap = hap_vec_next_cap(s->cap_edges, s->n_edges + more, 16, INT64_MAX);
  int32_t *a = hap_vec_realloc(s->edge_task, cap, sizeof *a);
  if (a != NULL)
    s->edge_task = a;
  int32_t *b = hap_vec_realloc(s->edge_on, cap, sizeof *b);
  if (b != NULL)
    s->edge_on = b;
  if (a == NULL || b == NULL)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for dependencies");
  s->cap_edges = cap;
  return HAP_OK;
}

static hap_status reserve_transfer(hap_sim *s, int32_t n_path, hap_err *err) {
  if (s->n_xfers + 1 >= s->cap_xfers) {
    int64_t cap = hap_vec_next_cap(s->cap_xfers, (int64_t)s->n_xfers + 2, 16, SIM_MAX_IDS);
    int32_t *task = hap_vec_realloc(s->xf_task, cap, sizeof *task);
    if (task != NULL)
      s->xf_task = task;
    double *lat = hap_vec_realloc(s->xf_latency_s, cap, sizeof *lat);
    if (lat != NULL)
      s->xf_latency_s = lat;
    int64_t *off = hap_vec_realloc(s->xf_path_off, cap, sizeof *off);
    if (off != NULL)
      s->xf_path_off = off;
    if (task == NULL || lat == NULL || off == NULL)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for transfers");
    if (s->cap_xfers == 0)
      s->xf_path_off[0] = 0;
    s->cap_xfers = (int32_t)cap;
  }
  if (s->n_path + n_path > s->cap_path) {
    int64_t cap = hap_vec_next_cap(s->cap_path, s->n_path + n_path, 16, INT64_MAX);
    int32_t *p = hap_vec_realloc(s->path_res, cap, sizeof *p);
    if (p == NULL)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for transfer paths");
    s->path_res = p;
    s->cap_path = cap;
  }
  return HAP_OK;
}

/* Everything about `t` that does not depend on the engine's state beyond sizes. */
static hap_status check_task(const hap_sim *s, const hap_sim_task *t, hap_err *err) {
  const char *nm = t->name;
  if (t->device < 0 || t->device >= s->n_devices)
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\": device %d (expected 0..%d)", nm,
                       t->device, s->n_devices - 1);
  if ((unsigned)t->stream >= HAP_SIM_N_STREAMS)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": stream %d (expected compute or comm)", nm,
                       (int)t->stream);
  if ((unsigned)t->kind > HAP_SIM_TRANSFER)
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\": kind %d", nm, (int)t->kind);
  if (t->kind != HAP_SIM_TRANSFER && t->duration_s != HAP_SIM_DURATION_FN &&
      !finite_nonneg(t->duration_s))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": duration %g s (expected >= 0, finite, or "
                       "HAP_SIM_DURATION_FN)",
                       nm, t->duration_s);
  if (!finite_nonneg(t->flops) || !finite_nonneg(t->bytes))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": flops %g, bytes %g (expected >= 0, finite)", nm,
                       t->flops, t->bytes);
  if (t->n_deps < 0 || (t->n_deps > 0 && t->deps == NULL))
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\": %d dependencies without an array",
                       nm, t->n_deps);
  for (int32_t i = 0; i < t->n_deps; i++)
    if (t->deps[i] < 0 || t->deps[i] >= s->n_tasks)
      return hap_err_set(err, HAP_EINVAL,
                         "simulator: task \"%s\": dependency %d is not a task added before it "
                         "(0..%d)",
                         nm, t->deps[i], s->n_tasks - 1);
  if (t->kind == HAP_SIM_COLLECTIVE && (t->collective < 0 || t->collective >= s->n_collectives))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": collective %d (expected an id from "
                       "hap_sim_new_collective)",
                       nm, t->collective);
  if (t->kind != HAP_SIM_TRANSFER)
    return HAP_OK;
  if (!finite_nonneg(t->latency_s))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: transfer \"%s\": latency %g s (expected >= 0, finite)", nm,
                       t->latency_s);
  if (t->n_path < 1 || t->path == NULL)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: transfer \"%s\": empty path (expected >= 1 resource)", nm);
  for (int32_t i = 0; i < t->n_path; i++) {
    if (t->path[i] < 0 || t->path[i] >= s->n_res)
      return hap_err_set(err, HAP_EINVAL,
                         "simulator: transfer \"%s\": resource %d (expected 0..%d)", nm, t->path[i],
                         s->n_res - 1);
    for (int32_t j = 0; j < i; j++)
      if (t->path[j] == t->path[i])
        return hap_err_set(err, HAP_EINVAL,
                           "simulator: transfer \"%s\": resource \"%s\" appears twice in its path",
                           nm, s->names + s->res_name_off[t->path[i]]);
  }
  return HAP_OK;
}

hap_status hap_sim_add_task(hap_sim *s, const hap_sim_task *t, int32_t *id, hap_err *err) {
  if (s == NULL || t == NULL || t->name == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: task without a name");
  HAP_TRY(check_task(s, t, err));
  HAP_TRY(reserve_tasks(s, err));
  HAP_TRY(reserve_edges(s, t->n_deps, err));
  if (t->kind == HAP_SIM_TRANSFER)
    HAP_TRY(reserve_transfer(s, t->n_path, err));
  int32_t k = s->n_tasks;
  if (k > 0 && strcmp(t->name, s->names + s->name_off[k - 1]) == 0)
    s->name_off[k] = s->name_off[k - 1]; /* one task on many devices: its name stored once */
  else
    HAP_TRY(push_name(s, t->name, &s->name_off[k], err));
  s->device[k] = t->device;
  s->stream[k] = (uint8_t)t->stream;
  s->kind[k] = (uint8_t)t->kind;
  s->duration_s[k] = t->kind == HAP_SIM_TRANSFER ? 0 : t->duration_s;
  s->flops[k] = t->flops;
  s->bytes[k] = t->bytes;
  s->aux[k] = -1;
  if (t->kind == HAP_SIM_COLLECTIVE)
    s->aux[k] = t->collective;
  if (t->kind == HAP_SIM_TRANSFER) {
    int32_t x = s->n_xfers++;
    s->aux[k] = x;
    s->xf_task[x] = k;
    s->xf_latency_s[x] = t->latency_s;
    memcpy(s->path_res + s->n_path, t->path, (size_t)t->n_path * sizeof *t->path);
    s->n_path += t->n_path;
    s->xf_path_off[x + 1] = s->n_path;
  }
  for (int32_t i = 0; i < t->n_deps; i++) {
    s->edge_task[s->n_edges] = k;
    s->edge_on[s->n_edges] = t->deps[i];
    s->n_edges++;
  }
  s->n_tasks++;
  s->has_results = false;
  if (id != NULL)
    *id = k;
  return HAP_OK;
}

hap_status hap_sim_add_dep(hap_sim *s, int32_t task, int32_t on, hap_err *err) {
  if (s == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no engine");
  if (task < 0 || task >= s->n_tasks || on < 0 || on >= s->n_tasks)
    return hap_err_set(err, HAP_EINVAL, "simulator: dependency %d -> %d: no such task (0..%d)", on,
                       task, s->n_tasks - 1);
  if (task == on)
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\" cannot depend on itself",
                       sim_task_name(s, task));
  HAP_TRY(reserve_edges(s, 1, err));
  s->edge_task[s->n_edges] = task;
  s->edge_on[s->n_edges] = on;
  s->n_edges++;
  s->has_results = false;
  return HAP_OK;
}

int32_t hap_sim_n_tasks(const hap_sim *s) { return s != NULL ? s->n_tasks : 0; }
int32_t hap_sim_n_devices(const hap_sim *s) { return s != NULL ? s->n_devices : 0; }

void sim_fill_record(const hap_sim *s, int32_t t, bool with_times, hap_sim_record *r) {
  r->task = t;
  r->name = sim_task_name(s, t);
  r->device = s->device[t];
  r->stream = (hap_sim_stream)s->stream[t];
  r->kind = (hap_sim_kind)s->kind[t];
  r->collective = r->kind == HAP_SIM_COLLECTIVE ? s->aux[t] : -1;
  r->ready_s = with_times ? s->run.ready_s[t] : 0;
  r->start_s = with_times ? s->run.start_s[t] : 0;
  r->end_s = with_times ? s->run.end_s[t] : 0;
  r->flops = s->flops[t];
  r->bytes = s->bytes[t];
}

hap_status hap_sim_run(hap_sim *s, const hap_sim_options *opt, hap_err *err) {
  if (s == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no engine");
  s->has_results = false;
  HAP_TRY(sim_run_all(s, opt, err));
  if (s->run.n_done < s->n_tasks)
    return sim_deadlock_error(s, err);
  HAP_TRY(sim_report(s, err));
  s->has_results = true;
  return HAP_OK;
}

const hap_sim_results *hap_sim_results_get(const hap_sim *s) {
  return s != NULL && s->has_results ? &s->run.results : NULL;
}

hap_status hap_sim_task_record(const hap_sim *s, int32_t task, hap_sim_record *out, hap_err *err) {
  if (s == NULL || out == NULL || !s->has_results)
    return hap_err_set(err, HAP_EINVAL, "simulator: no results (run hap_sim_run first)");
  if (task < 0 || task >= s->n_tasks)
    return hap_err_set(err, HAP_EINVAL, "simulator: no task %d (0..%d)", task, s->n_tasks - 1);
  sim_fill_record(s, task, true, out);
  return HAP_OK;
}

hap_status hap_sim_visit(const hap_sim *s, hap_sim_visit_fn fn, void *ctx, hap_err *err) {
  if (s == NULL || fn == NULL || !s->has_results)
    return hap_err_set(err, HAP_EINVAL, "simulator: no results to visit (run hap_sim_run first)");
  for (int32_t t = 0; t < s->n_tasks; t++) {
    hap_sim_record r;
    sim_fill_record(s, t, true, &r);
    HAP_TRY(fn(ctx, &r, err));
  }
  return HAP_OK;
}

const char *hap_sim_stream_name(hap_sim_stream st) {
  switch (st) {
  case HAP_SIM_COMPUTE: return "compute";
  case HAP_SIM_COMM: return "comm";
  case HAP_SIM_N_STREAMS: break;
  }
  return "unknown";
}

const char *hap_sim_kind_name(hap_sim_kind k) {
  switch (k) {
  case HAP_SIM_FIXED: return "fixed";
  case HAP_SIM_COLLECTIVE: return "collective";
  case HAP_SIM_TRANSFER: return "transfer";
  }
  return "unknown";
}

const char *hap_sim_edge_name(hap_sim_edge e) {
  switch (e) {
  case HAP_SIM_EDGE_START: return "start";
  case HAP_SIM_EDGE_STREAM: return "stream";
  case HAP_SIM_EDGE_DEPENDENCY: return "dependency";
  case HAP_SIM_EDGE_COLLECTIVE: return "collective";
  }
  return "unknown";
}
