/* engine_run.c — one simulation: preparation (durations, stream queues, dependents, collective
 * members, resource slots as flat arrays) and the event loop over a binary heap. Each event is
 * O(log events) plus the tasks it enables; a transfer joining or leaving re-rates only the
 * transfers that share one of its resources. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "engine_internal.h"

void sim_run_free(sim_run *r) {
  free(r->dur_s);
  free(r->ready_s);
  free(r->start_s);
  free(r->end_s);
  free(r->pending);
  free(r->crit);
  free(r->crit_via);
  free(r->succ_off);
  free(r->succ);
  free(r->st_off);
  free(r->st_list);
  free(r->st_next);
  free(r->st_busy);
  free(r->co_off);
  free(r->co_list);
  free(r->co_arrived);
  free(r->co_last);
  free(r->co_dur_s);
  free(r->xf_left_bytes);
  free(r->xf_rate_Bps);
  free(r->xf_since_s);
  free(r->xf_version);
  free(r->xf_mark);
  free(r->path_pos);
  free(r->rs_off);
  free(r->rs_list);
  free(r->rs_count);
  free(r->heap);
  free(r->dev_stats);
  free(r->path);
  memset(r, 0, sizeof *r);
}

/* n elements of `elem` bytes, zeroed (at least one, so that empty arrays are not NULL). */
static void *zalloc(int64_t n, size_t elem) { return calloc(n > 0 ? (size_t)n : 1, elem); }

static hap_status alloc_run(hap_sim *s, hap_err *err) {
  sim_run *r = &s->run;
  int64_t n = s->n_tasks, keys = (int64_t)s->n_devices * HAP_SIM_N_STREAMS;
  int64_t nc = s->n_collectives, nx = s->n_xfers, nr = s->n_res;
  r->dur_s = zalloc(n, sizeof *r->dur_s);
  r->ready_s = zalloc(n, sizeof *r->ready_s);
  r->start_s = zalloc(n, sizeof *r->start_s);
  r->end_s = zalloc(n, sizeof *r->end_s);
  r->pending = zalloc(n, sizeof *r->pending);
  r->crit = zalloc(n, sizeof *r->crit);
  r->crit_via = zalloc(n, sizeof *r->crit_via);
  r->succ_off = zalloc(n + 1, sizeof *r->succ_off);
  r->succ = zalloc(s->n_edges, sizeof *r->succ);
  r->st_off = zalloc(keys + 1, sizeof *r->st_off);
  r->st_list = zalloc(n, sizeof *r->st_list);
  r->st_next = zalloc(keys, sizeof *r->st_next);
  r->st_busy = zalloc(keys, sizeof *r->st_busy);
  r->co_off = zalloc(nc + 1, sizeof *r->co_off);
  r->co_list = zalloc(n, sizeof *r->co_list);
  r->co_arrived = zalloc(nc, sizeof *r->co_arrived);
  r->co_last = zalloc(nc, sizeof *r->co_last);
  r->co_dur_s = zalloc(nc, sizeof *r->co_dur_s);
  r->xf_left_bytes = zalloc(nx, sizeof *r->xf_left_bytes);
  r->xf_rate_Bps = zalloc(nx, sizeof *r->xf_rate_Bps);
  r->xf_since_s = zalloc(nx, sizeof *r->xf_since_s);
  r->xf_version = zalloc(nx, sizeof *r->xf_version);
  r->xf_mark = zalloc(nx, sizeof *r->xf_mark);
  r->path_pos = zalloc(s->n_path, sizeof *r->path_pos);
  r->rs_off = zalloc(nr + 1, sizeof *r->rs_off);
  r->rs_list = zalloc(s->n_path, sizeof *r->rs_list);
  r->rs_count = zalloc(nr, sizeof *r->rs_count);
  r->dev_stats = zalloc(s->n_devices, sizeof *r->dev_stats);
  r->path = zalloc(n, sizeof *r->path);
  r->heap_cap = 1024;
  r->heap = zalloc(r->heap_cap, sizeof *r->heap);
  bool ok = r->dur_s && r->ready_s && r->start_s && r->end_s && r->pending && r->crit &&
            r->crit_via && r->succ_off && r->succ && r->st_off && r->st_list && r->st_next &&
            r->st_busy && r->co_off && r->co_list && r->co_arrived && r->co_last && r->co_dur_s &&
            r->xf_left_bytes && r->xf_rate_Bps && r->xf_since_s && r->xf_version && r->xf_mark &&
            r->path_pos && r->rs_off && r->rs_list && r->rs_count && r->dev_stats && r->path &&
            r->heap;
  if (!ok)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for %d tasks", s->n_tasks);
  return HAP_OK;
}

/* Durations: as added, or from the callback for HAP_SIM_DURATION_FN. */
static hap_status resolve_durations(hap_sim *s, const hap_sim_options *opt, hap_err *err) {
  for (int32_t t = 0; t < s->n_tasks; t++) {
    double d = s->duration_s[t];
    if (d == HAP_SIM_DURATION_FN) {
      if (opt == NULL || opt->duration_fn == NULL)
        return hap_err_set(err, HAP_EINVAL,
                           "simulator: task \"%s\" asks for a duration callback but the run has "
                           "none",
                           sim_task_name(s, t));
      hap_sim_record rec;
      sim_fill_record(s, t, false, &rec);
      HAP_TRY(opt->duration_fn(opt->ctx, &rec, &d, err));
      if (!isfinite(d) || d < 0)
        return hap_err_set(err, HAP_EINVAL,
                           "simulator: task \"%s\": the duration callback returned %g s (expected "
                           ">= 0, finite)",
                           sim_task_name(s, t), d);
    }
    s->run.dur_s[t] = d;
  }
  return HAP_OK;
}

/* Counting sort of the tasks into their streams, keeping the order of addition. */
static void build_streams(hap_sim *s) {
  sim_run *r = &s->run;
  int32_t keys = s->n_devices * HAP_SIM_N_STREAMS;
  for (int32_t t = 0; t < s->n_tasks; t++)
    r->st_off[s->device[t] * HAP_SIM_N_STREAMS + s->stream[t] + 1]++;
  for (int32_t k = 0; k < keys; k++)
    r->st_off[k + 1] += r->st_off[k];
  for (int32_t t = 0; t < s->n_tasks; t++) {
    int32_t k = s->device[t] * HAP_SIM_N_STREAMS + s->stream[t];
    r->st_list[r->st_off[k] + r->st_next[k]++] = t;
  }
  memset(r->st_next, 0, (size_t)keys * sizeof *r->st_next);
}

/* The dependents of every task (CSR by the task waited on) and each task's pending count. */
static void build_dependents(hap_sim *s) {
  sim_run *r = &s->run;
  for (int64_t e = 0; e < s->n_edges; e++) {
    r->succ_off[s->edge_on[e] + 1]++;
    r->pending[s->edge_task[e]]++;
  }
  for (int32_t t = 0; t < s->n_tasks; t++)
    r->succ_off[t + 1] += r->succ_off[t];
  /* fill with succ_off[on] as the cursor: it ends at the next task's start; shift back after */
  for (int64_t e = 0; e < s->n_edges; e++)
    r->succ[r->succ_off[s->edge_on[e]]++] = s->edge_task[e];
  for (int32_t t = s->n_tasks; t > 0; t--)
    r->succ_off[t] = r->succ_off[t - 1];
  r->succ_off[0] = 0;
}

/* Members of every collective (CSR, in order of addition), each on a distinct device, and the
 * collective's run time: its slowest member's duration. */
static hap_status build_collectives(hap_sim *s, hap_err *err) {
  sim_run *r = &s->run;
  int32_t nc = s->n_collectives;
  for (int32_t t = 0; t < s->n_tasks; t++)
    if (s->kind[t] == HAP_SIM_COLLECTIVE)
      r->co_off[s->aux[t] + 1]++;
  for (int32_t c = 0; c < nc; c++)
    r->co_off[c + 1] += r->co_off[c];
  for (int32_t t = 0; t < s->n_tasks; t++)
    if (s->kind[t] == HAP_SIM_COLLECTIVE) {
      int32_t c = s->aux[t];
      r->co_list[r->co_off[c] + r->co_arrived[c]++] = t;
    }
  int32_t *owner = malloc((size_t)s->n_devices * sizeof *owner); /* member seen per device */
  if (owner == NULL)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
  for (int32_t d = 0; d < s->n_devices; d++)
    owner[d] = -1;
  hap_status st = HAP_OK;
  for (int32_t c = 0; c < nc && st == HAP_OK; c++) {
    r->co_arrived[c] = 0;
    r->co_last[c] = -1;
    double dur_s = 0;
    for (int32_t i = r->co_off[c]; i < r->co_off[c + 1]; i++) {
      int32_t m = r->co_list[i], d = s->device[m];
      int32_t prev = owner[d];
      if (prev >= 0 && s->aux[prev] == c) {
        st = hap_err_set(err, HAP_EINVAL,
                         "simulator: collective %d has two members on device %d: \"%s\" and "
                         "\"%s\"",
                         c, d, sim_task_name(s, prev), sim_task_name(s, m));
        break;
      }
      owner[d] = m;
      dur_s = fmax(dur_s, r->dur_s[m]);
    }
    r->co_dur_s[c] = dur_s;
  }
  free(owner);
  return st;
}

/* Slots for the transfers active on each resource: one per path entry crossing it. */
static void build_resources(hap_sim *s) {
  sim_run *r = &s->run;
  for (int64_t p = 0; p < s->n_path; p++)
    r->rs_off[s->path_res[p] + 1]++;
  for (int32_t k = 0; k < s->n_res; k++)
    r->rs_off[k + 1] += r->rs_off[k];
}

/* ---- event heap: a binary min-heap on (time, insertion order) ---- */

static bool ev_before(const sim_event *a, const sim_event *b) {
  return a->t_s < b->t_s || (a->t_s == b->t_s && a->seq < b->seq);
}

static hap_status push_event(sim_run *r, double t_s, sim_event_kind kind, int32_t id,
                             uint32_t version, hap_err *err) {
  if (HAP_VEC_RESERVE64(r->heap, r->heap_cap, r->heap_len + 1, 1024) != 0)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for events");
  sim_event ev = {t_s, r->seq++, id, (uint32_t)kind | (version << 2)};
  int64_t i = r->heap_len++;
  while (i > 0) {
    int64_t parent = (i - 1) / 2;
    if (!ev_before(&ev, &r->heap[parent]))
      break;
    r->heap[i] = r->heap[parent];
    i = parent;
  }
  r->heap[i] = ev;
  return HAP_OK;
}

static sim_event pop_event(sim_run *r) {
  sim_event top = r->heap[0];
  sim_event last = r->heap[--r->heap_len];
  int64_t i = 0, n = r->heap_len;
  for (;;) {
    int64_t child = 2 * i + 1;
    if (child >= n)
      break;
    if (child + 1 < n && ev_before(&r->heap[child + 1], &r->heap[child]))
      child++;
    if (!ev_before(&r->heap[child], &last))
      break;
    r->heap[i] = r->heap[child];
    i = child;
  }
  if (n > 0)
    r->heap[i] = last;
  return top;
}

/* ---- streams ---- */

static int32_t stream_key(const hap_sim *s, int32_t t) {
  return s->device[t] * HAP_SIM_N_STREAMS + s->stream[t];
}

/* The task at the head of stream `key`, or -1 when it has run everything. */
static int32_t stream_head(const sim_run *r, int32_t key) {
  int32_t i = r->st_off[key] + r->st_next[key];
  return i < r->st_off[key + 1] ? r->st_list[i] : -1;
}

/* ---- transfers ---- */

#define SIM_VERSION_MASK 0x3fffffffu /* versions wrap in the 30 bits an event holds */

/* Rate of transfer x: the smallest fair share over its resources, bytes/s. */
static double fair_rate(const hap_sim *s, int32_t x) {
  double rate = HUGE_VAL;
  for (int64_t p = s->xf_path_off[x]; p < s->xf_path_off[x + 1]; p++) {
    int32_t res = s->path_res[p];
    rate = fmin(rate, s->res_bw_Bps[res] / s->run.rs_count[res]);
  }
  return rate;
}

/* Bring x's remaining bytes up to now and, if its share changed, schedule its new end. */
static hap_status rerate_one(hap_sim *s, int32_t x, hap_err *err) {
  sim_run *r = &s->run;
  double rate = fair_rate(s, x);
  if (rate == r->xf_rate_Bps[x])
    return HAP_OK;
  double left = r->xf_left_bytes[x] - r->xf_rate_Bps[x] * (r->now_s - r->xf_since_s[x]);
  r->xf_left_bytes[x] = left > 0 ? left : 0;
  r->xf_since_s[x] = r->now_s;
  r->xf_rate_Bps[x] = rate;
  r->xf_version[x] = (r->xf_version[x] + 1) & SIM_VERSION_MASK;
  return push_event(r, r->now_s + r->xf_left_bytes[x] / rate, SIM_EV_XFER_DONE, x, r->xf_version[x],
                    err);
}

/* Re-rate every transfer active on one of x's resources (each once). */
static hap_status rerate_around(hap_sim *s, int32_t x, hap_err *err) {
  sim_run *r = &s->run;
  if (++r->epoch == 0) {
    memset(r->xf_mark, 0, (size_t)s->n_xfers * sizeof *r->xf_mark);
    r->epoch = 1;
  }
  for (int64_t p = s->xf_path_off[x]; p < s->xf_path_off[x + 1]; p++) {
    int32_t res = s->path_res[p];
    for (int32_t i = 0; i < r->rs_count[res]; i++) {
      int32_t y = r->rs_list[r->rs_off[res] + i];
      if (r->xf_mark[y] == r->epoch)
        continue;
      r->xf_mark[y] = r->epoch;
      HAP_TRY(rerate_one(s, y, err));
    }
  }
  return HAP_OK;
}

/* Transfer x's bytes start to flow: it takes a slot on each of its resources. */
static hap_status join_transfer(hap_sim *s, int32_t x, hap_err *err) {
  sim_run *r = &s->run;
  for (int64_t p = s->xf_path_off[x]; p < s->xf_path_off[x + 1]; p++) {
    int32_t res = s->path_res[p];
    r->path_pos[p] = r->rs_count[res];
    r->rs_list[r->rs_off[res] + r->rs_count[res]++] = x;
  }
  r->xf_left_bytes[x] = s->bytes[s->xf_task[x]];
  r->xf_rate_Bps[x] = 0;
  r->xf_since_s[x] = r->now_s;
  return rerate_around(s, x, err);
}

/* Transfer x's last byte arrived: free its slots (swap with the last) and re-rate the rest. */
static hap_status leave_transfer(hap_sim *s, int32_t x, hap_err *err) {
  sim_run *r = &s->run;
  for (int64_t p = s->xf_path_off[x]; p < s->xf_path_off[x + 1]; p++) {
    int32_t res = s->path_res[p], pos = r->path_pos[p];
    int32_t moved = r->rs_list[r->rs_off[res] + --r->rs_count[res]];
    r->rs_list[r->rs_off[res] + pos] = moved;
    for (int64_t q = s->xf_path_off[moved]; q < s->xf_path_off[moved + 1]; q++)
      if (s->path_res[q] == res)
        r->path_pos[q] = pos;
  }
  r->xf_left_bytes[x] = 0;
  r->xf_rate_Bps[x] = 0;
  return rerate_around(s, x, err);
}

/* ---- tasks ---- */

/* Task t is at the head of its free stream with its dependencies done: it starts now (a
 * collective member arrives and holds its stream until every member has). */
static hap_status begin_task(hap_sim *s, int32_t t, hap_err *err) {
  sim_run *r = &s->run;
  double now = r->now_s;
  r->ready_s[t] = now;
  r->st_busy[stream_key(s, t)] = 1;
  switch ((hap_sim_kind)s->kind[t]) {
  case HAP_SIM_FIXED:
    r->start_s[t] = now;
    return push_event(r, now + r->dur_s[t], SIM_EV_FINISH, t, 0, err);
  case HAP_SIM_COLLECTIVE: {
    int32_t c = s->aux[t];
    if (++r->co_arrived[c] < r->co_off[c + 1] - r->co_off[c])
      return HAP_OK;
    r->co_last[c] = t;
    for (int32_t i = r->co_off[c]; i < r->co_off[c + 1]; i++)
      r->start_s[r->co_list[i]] = now;
    return push_event(r, now + r->co_dur_s[c], SIM_EV_COLL_END, c, 0, err);
  }
  case HAP_SIM_TRANSFER: {
    int32_t x = s->aux[t];
    double lat_s = s->xf_latency_s[x];
    r->start_s[t] = now;
    if (s->bytes[t] <= 0)
      return push_event(r, now + lat_s, SIM_EV_FINISH, t, 0, err);
    if (lat_s > 0)
      return push_event(r, now + lat_s, SIM_EV_XFER_JOIN, x, 0, err);
    return join_transfer(s, x, err);
  }
  }
  return HAP_OK;
}

/* Start the head of stream `key` if the stream is free and the head's dependencies are done. */
static hap_status try_stream(hap_sim *s, int32_t key, hap_err *err) {
  sim_run *r = &s->run;
  if (r->st_busy[key])
    return HAP_OK;
  int32_t h = stream_head(r, key);
  if (h >= 0 && r->pending[h] == 0)
    return begin_task(s, h, err);
  return HAP_OK;
}

/* Task t ends now: free its stream, release its dependents. The finish that enables a task
 * last is its critical predecessor (events arrive in time order). */
static hap_status finish_task(hap_sim *s, int32_t t, hap_err *err) {
  sim_run *r = &s->run;
  int32_t key = stream_key(s, t);
  r->end_s[t] = r->now_s;
  r->n_done++;
  r->st_busy[key] = 0;
  r->st_next[key]++;
  int32_t h = stream_head(r, key);
  if (h >= 0) {
    r->crit[h] = t;
    r->crit_via[h] = HAP_SIM_EDGE_STREAM;
  }
  for (int64_t i = r->succ_off[t]; i < r->succ_off[t + 1]; i++) {
    int32_t y = r->succ[i];
    r->crit[y] = t;
    r->crit_via[y] = HAP_SIM_EDGE_DEPENDENCY;
    if (--r->pending[y] > 0)
      continue;
    int32_t ky = stream_key(s, y);
    if (!r->st_busy[ky] && stream_head(r, ky) == y)
      HAP_TRY(begin_task(s, y, err));
  }
  return try_stream(s, key, err);
}

static hap_status dispatch(hap_sim *s, sim_event ev, hap_err *err) {
  sim_run *r = &s->run;
  switch ((sim_event_kind)(ev.kind_version & 3u)) {
  case SIM_EV_FINISH: return finish_task(s, ev.id, err);
  case SIM_EV_COLL_END:
    for (int32_t i = r->co_off[ev.id]; i < r->co_off[ev.id + 1]; i++)
      HAP_TRY(finish_task(s, r->co_list[i], err));
    return HAP_OK;
  case SIM_EV_XFER_JOIN: return join_transfer(s, ev.id, err);
  case SIM_EV_XFER_DONE:
    HAP_TRY(leave_transfer(s, ev.id, err));
    return finish_task(s, s->xf_task[ev.id], err);
  }
  return HAP_OK;
}

static bool stale(const sim_run *r, sim_event ev) {
  return (ev.kind_version & 3u) == SIM_EV_XFER_DONE &&
         (ev.kind_version >> 2) != r->xf_version[ev.id];
}

hap_status sim_run_all(hap_sim *s, const hap_sim_options *opt, hap_err *err) {
  sim_run_free(&s->run);
  sim_run *r = &s->run;
  HAP_TRY(alloc_run(s, err));
  HAP_TRY(resolve_durations(s, opt, err));
  build_streams(s);
  build_dependents(s);
  HAP_TRY(build_collectives(s, err));
  build_resources(s);
  for (int32_t t = 0; t < s->n_tasks; t++) {
    r->ready_s[t] = r->start_s[t] = r->end_s[t] = -1;
    r->crit[t] = -1;
    r->crit_via[t] = HAP_SIM_EDGE_START;
  }
  for (int32_t key = 0; key < s->n_devices * HAP_SIM_N_STREAMS; key++)
    HAP_TRY(try_stream(s, key, err));
  while (r->heap_len > 0) {
    sim_event ev = pop_event(r);
    if (stale(r, ev))
      continue;
    r->now_s = ev.t_s;
    r->n_events++;
    HAP_TRY(dispatch(s, ev, err));
  }
  return HAP_OK;
}
