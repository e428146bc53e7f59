/* engine_run.c — one simulation: preparation (durations, pending counts, collective times,
 * resource slots as flat arrays) and the event loop. Events at one time are a FIFO and the
 * distinct times a heap (devices in step make most events ties), so an event is O(1) when its time
 * is pending already and O(log times) else, plus the tasks it enables; a transfer joining or
 * leaving re-rates only the transfers that share one of its resources. Per-stream busy time, each
 * device's overlap of its two streams and the last task to end are summed as tasks finish (in the
 * order a pass over the finished run would take them), so the report needs no pass over the tasks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "engine_internal.h"

_Static_assert(HAP_SIM_N_STREAMS == 2, "a device's overlap merges exactly two streams");

#define RUN_ALLOC(field, count)                                                                    \
  (r->field = sim_mem_zalloc((size_t)(count) * sizeof *r->field)) != NULL
#define RUN_FREE(field, count) sim_mem_free(r->field, (size_t)(count) * sizeof *r->field)

void sim_run_free(sim_run *r) {
  RUN_FREE(dur_s, r->n_tasks);
  RUN_FREE(t_s, r->n_tasks);
  RUN_FREE(pending, r->n_tasks);
  free(r->ov_task);
  free(r->ov_count);
  free(r->succ);
  RUN_FREE(crit, r->n_tasks);
  RUN_FREE(path, r->n_tasks);
  RUN_FREE(st_head, r->n_keys);
  RUN_FREE(st_busy, r->n_keys);
  RUN_FREE(st_busy_s, r->n_keys);
  RUN_FREE(mg_cur, 2 * r->n_devices);
  RUN_FREE(mg_overlap_s, r->n_devices);
  RUN_FREE(dev_stats, r->n_devices);
  RUN_FREE(co_arrived, r->n_coll);
  RUN_FREE(co_last, r->n_coll);
  RUN_FREE(co_dur_s, r->n_coll);
  RUN_FREE(co_start_s, r->n_coll);
  RUN_FREE(xf_left_bytes, r->n_xfers);
  RUN_FREE(xf_rate_Bps, r->n_xfers);
  RUN_FREE(xf_since_s, r->n_xfers);
  RUN_FREE(xf_end_s, r->n_xfers);
  RUN_FREE(xf_version, r->n_xfers);
  RUN_FREE(xf_mark, r->n_xfers);
  RUN_FREE(path_pos, r->n_path);
  RUN_FREE(rs_list, r->n_path);
  RUN_FREE(rs_off, r->n_res + 1);
  RUN_FREE(rs_count, r->n_res);
  free(r->ev);
  free(r->slot);
  free(r->heap);
  free(r->hash);
  memset(r, 0, sizeof *r);
}

static hap_status alloc_run(hap_sim *s, hap_err *err) {
  sim_run *r = &s->run;
  r->n_tasks = s->n_tasks;
  r->n_keys = (int64_t)s->n_devices * HAP_SIM_N_STREAMS;
  r->n_devices = s->n_devices;
  r->n_coll = s->n_collectives;
  r->n_xfers = s->n_xfers;
  r->n_path = s->n_path;
  r->n_res = s->n_res;
  int64_t n = r->n_tasks, nd = r->n_devices;
  bool ok = (s->n_fn == 0 || RUN_ALLOC(dur_s, n)) && RUN_ALLOC(t_s, n) && RUN_ALLOC(pending, n) &&
            RUN_ALLOC(crit, n) && RUN_ALLOC(path, n) && RUN_ALLOC(st_head, r->n_keys) &&
            RUN_ALLOC(st_busy, r->n_keys) && RUN_ALLOC(st_busy_s, r->n_keys) &&
            RUN_ALLOC(mg_cur, 2 * nd) && RUN_ALLOC(mg_overlap_s, nd) && RUN_ALLOC(dev_stats, nd) &&
            RUN_ALLOC(co_arrived, r->n_coll) && RUN_ALLOC(co_last, r->n_coll) &&
            RUN_ALLOC(co_dur_s, r->n_coll) && RUN_ALLOC(co_start_s, r->n_coll) &&
            RUN_ALLOC(xf_left_bytes, r->n_xfers) && RUN_ALLOC(xf_rate_Bps, r->n_xfers) &&
            RUN_ALLOC(xf_since_s, r->n_xfers) && RUN_ALLOC(xf_end_s, r->n_xfers) &&
            RUN_ALLOC(xf_version, r->n_xfers) && RUN_ALLOC(xf_mark, r->n_xfers) &&
            RUN_ALLOC(path_pos, r->n_path) && RUN_ALLOC(rs_list, r->n_path) &&
            RUN_ALLOC(rs_off, r->n_res + 1) && RUN_ALLOC(rs_count, r->n_res);
  r->ev_free = r->slot_free = -1;
  r->hash_cap = 1024;
  r->hash = ok ? malloc((size_t)r->hash_cap * sizeof *r->hash) : NULL;
  if (r->hash == NULL)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for %d tasks", s->n_tasks);
  for (int32_t i = 0; i < r->hash_cap; i++)
    r->hash[i] = -1;
  r->last_task = -1;
  return HAP_OK;
}

/* Durations from the callback for HAP_SIM_DURATION_FN (the others as added). */
static hap_status resolve_durations(hap_sim *s, const hap_sim_options *opt, hap_err *err) {
  if (s->run.dur_s == NULL)
    return HAP_OK;
  for (int32_t t = 0; t < s->n_tasks; t++) {
    double d = s->duration_s[t];
    if ((s->flags[t] & SIM_F_DURATION_FN) != 0) {
      if (opt == NULL || opt->duration_fn == NULL)
        return hap_err_set(err, HAP_EINVAL,
                           "simulator: task \"%s\" asks for a duration callback but the run has "
                           "none",
                           sim_task_name(s, t));
      hap_sim_record rec;
      sim_fill_record(s, t, NULL, false, &rec);
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

/* The overflow entry of task t (pending SIM_PENDING_MANY): a binary search. */
static int32_t overflow_index(const sim_run *r, int32_t t) {
  int32_t lo = 0, hi = r->n_ov - 1;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (r->ov_task[mid] < t)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Each task's count of dependencies (a byte; counts from SIM_PENDING_MANY on in the overflow
 * table); each stream's head and each device's overlap merge at their first tasks. */
static hap_status init_tasks(hap_sim *s, hap_err *err) {
  sim_run *r = &s->run;
  for (int32_t e = 0; e < s->n_edges; e++) {
    int32_t y = s->edge_task[e];
    r->pending[y] += r->pending[y] < SIM_PENDING_MANY;
  }
  int32_t n_ov = 0;
  for (int32_t t = 0; t < s->n_tasks; t++)
    n_ov += r->pending[t] == SIM_PENDING_MANY;
  if (n_ov > 0) {
    r->ov_task = malloc((size_t)n_ov * sizeof *r->ov_task);
    r->ov_count = calloc((size_t)n_ov, sizeof *r->ov_count);
    if (r->ov_task == NULL || r->ov_count == NULL)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
    for (int32_t t = 0; t < s->n_tasks; t++)
      if (r->pending[t] == SIM_PENDING_MANY)
        r->ov_task[r->n_ov++] = t;
    for (int32_t e = 0; e < s->n_edges; e++)
      if (r->pending[s->edge_task[e]] == SIM_PENDING_MANY)
        r->ov_count[overflow_index(r, s->edge_task[e])]++;
  }
  for (int64_t k = 0; k < r->n_keys; k++)
    r->st_head[k] = r->mg_cur[k] = s->st_first[k];
  return HAP_OK;
}

/* One dependency of y finished: true when it was the last. */
static bool release(sim_run *r, int32_t y) {
  if (r->pending[y] != SIM_PENDING_MANY)
    return --r->pending[y] == 0;
  if (--r->ov_count[overflow_index(r, y)] > 0)
    return false;
  r->pending[y] = 0;
  return true;
}

/* Every collective's members on distinct devices, and its run time: its slowest member's
 * duration. */
static hap_status init_collectives(hap_sim *s, hap_err *err) {
  sim_run *r = &s->run;
  int32_t *owner = malloc((size_t)s->n_devices * sizeof *owner); /* member seen per device */
  if (owner == NULL)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
  for (int32_t d = 0; d < s->n_devices; d++)
    owner[d] = -1;
  hap_status st = HAP_OK;
  for (int32_t c = 0; c < s->n_collectives && st == HAP_OK; c++) {
    r->co_last[c] = -1;
    double dur_s = 0;
    for (int32_t t = s->co_first[c]; t >= 0; t = s->mb_next[s->aux[t]]) {
      int32_t d = s->key[t] / HAP_SIM_N_STREAMS;
      int32_t prev = owner[d];
      if (prev >= 0 && s->mb_coll[s->aux[prev]] == c) {
        st = hap_err_set(err, HAP_EINVAL,
                         "simulator: collective %d has two members on device %d: \"%s\" and "
                         "\"%s\"",
                         c, d, sim_task_name(s, prev), sim_task_name(s, t));
        break;
      }
      owner[d] = t;
      dur_s = fmax(dur_s, sim_dur(s, t));
    }
    r->co_dur_s[c] = dur_s;
  }
  free(owner);
  return st;
}

/* Slots for the transfers active on each resource: one per path entry crossing it. */
static void init_resources(hap_sim *s) {
  sim_run *r = &s->run;
  for (int64_t p = 0; p < s->n_path; p++)
    r->rs_off[s->path_res[p] + 1]++;
  for (int32_t k = 0; k < s->n_res; k++)
    r->rs_off[k + 1] += r->rs_off[k];
}

/* ---- event queue ---- */

static uint64_t time_bits(double t_s) {
  double t = t_s + 0.0; /* -0 as +0 */
  uint64_t u;
  memcpy(&u, &t, sizeof u);
  return u;
}

static double bits_time(uint64_t u) {
  double t;
  memcpy(&t, &u, sizeof t);
  return t;
}

static int32_t hash_home(const sim_run *r, uint64_t t_bits) {
  return (int32_t)((t_bits * 0x9e3779b97f4a7c15u) >> 32) & (r->hash_cap - 1);
}

/* The hash position of time t_bits's slot, or of the empty cell where it would go. */
static int32_t hash_find(const sim_run *r, uint64_t t_bits) {
  int32_t i = hash_home(r, t_bits);
  while (r->hash[i] >= 0 && r->slot[r->hash[i]].t_bits != t_bits)
    i = (i + 1) & (r->hash_cap - 1);
  return i;
}

/* Double the hash table (kept at most half full). */
static bool hash_grow(sim_run *r) {
  int32_t old_cap = r->hash_cap, *old = r->hash;
  if (old_cap > INT32_MAX / 2)
    return false;
  int32_t *h = malloc((size_t)old_cap * 2 * sizeof *h);
  if (h == NULL)
    return false;
  r->hash = h;
  r->hash_cap = old_cap * 2;
  for (int32_t i = 0; i < r->hash_cap; i++)
    h[i] = -1;
  for (int32_t i = 0; i < old_cap; i++)
    if (old[i] >= 0)
      h[hash_find(r, r->slot[old[i]].t_bits)] = old[i];
  free(old);
  return true;
}

/* Remove the cell at i, moving later cells of its probe run back (no tombstones). */
static void hash_remove(sim_run *r, int32_t i) {
  int32_t mask = r->hash_cap - 1;
  r->hash[i] = -1;
  for (int32_t j = (i + 1) & mask; r->hash[j] >= 0; j = (j + 1) & mask) {
    int32_t home = hash_home(r, r->slot[r->hash[j]].t_bits);
    /* the cell at j may move to i when its home is not within (i, j] (cyclically) */
    if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
      r->hash[i] = r->hash[j];
      r->hash[j] = -1;
      i = j;
    }
  }
  r->hash_len--;
}

static bool slot_before(const sim_run *r, int32_t a, int32_t b) {
  return r->slot[a].t_bits < r->slot[b].t_bits;
}

/* Slot sl into the heap (sized with the slot pool: it holds at most every slot). */
static void heap_push(sim_run *r, int32_t sl) {
  int32_t i = r->heap_len++;
  while (i > 0) {
    int32_t parent = (i - 1) / 2;
    if (!slot_before(r, sl, r->heap[parent]))
      break;
    r->heap[i] = r->heap[parent];
    i = parent;
  }
  r->heap[i] = sl;
}

static void heap_pop(sim_run *r) {
  int32_t last = r->heap[--r->heap_len], i = 0, n = r->heap_len;
  for (;;) {
    int32_t child = 2 * i + 1;
    if (child >= n)
      break;
    if (child + 1 < n && slot_before(r, r->heap[child + 1], r->heap[child]))
      child++;
    if (!slot_before(r, r->heap[child], last))
      break;
    r->heap[i] = r->heap[child];
    i = child;
  }
  if (n > 0)
    r->heap[i] = last;
}

/* Room for one more slot (the heap grows with the slot pool) and one more event. */
static bool reserve_queue(sim_run *r) {
  if (r->slot_free < 0) {
    int32_t cap = (int32_t)hap_vec_next_cap(r->slot_cap, (int64_t)r->slot_cap + 1, 256, INT32_MAX);
    if (cap < 0)
      return false;
    sim_slot *sl = realloc(r->slot, (size_t)cap * sizeof *sl);
    if (sl == NULL)
      return false;
    r->slot = sl;
    int32_t *h = realloc(r->heap, (size_t)cap * sizeof *h);
    if (h == NULL)
      return false;
    r->heap = h;
    for (int32_t i = cap - 1; i >= r->slot_cap; i--) {
      r->slot[i].head = r->slot_free; /* the free list through head */
      r->slot_free = i;
    }
    r->slot_cap = cap;
  }
  if (r->ev_free < 0) {
    int32_t cap = (int32_t)hap_vec_next_cap(r->ev_cap, (int64_t)r->ev_cap + 1, 1024, INT32_MAX);
    if (cap < 0)
      return false;
    sim_event *ev = realloc(r->ev, (size_t)cap * sizeof *ev);
    if (ev == NULL)
      return false;
    r->ev = ev;
    for (int32_t i = cap - 1; i >= r->ev_cap; i--) {
      r->ev[i].next = r->ev_free;
      r->ev_free = i;
    }
    r->ev_cap = cap;
  }
  return 2 * ((int64_t)r->hash_len + 1) <= r->hash_cap || hash_grow(r);
}

static hap_status push_event(sim_run *r, double t_s, sim_event_kind kind, int32_t id,
                             uint32_t version, hap_err *err) {
  if (!reserve_queue(r))
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for events");
  uint64_t t_bits = time_bits(t_s);
  int32_t e = r->ev_free;
  r->ev_free = r->ev[e].next;
  r->ev[e] = (sim_event){id, (uint32_t)kind | (version << 2), -1};
  int32_t h = hash_find(r, t_bits), sl = r->hash[h];
  if (sl >= 0) { /* a time pending already: last in its line */
    r->ev[r->slot[sl].tail].next = e;
    r->slot[sl].tail = e;
    return HAP_OK;
  }
  sl = r->slot_free;
  r->slot_free = r->slot[sl].head;
  r->slot[sl] = (sim_slot){t_bits, e, e};
  r->hash[h] = sl;
  r->hash_len++;
  heap_push(r, sl);
  return HAP_OK;
}

/* The next event (the queue is not empty); its time in *t_s. */
static sim_event pop_event(sim_run *r, double *t_s) {
  int32_t sl = r->heap[0], e = r->slot[sl].head;
  sim_event ev = r->ev[e];
  *t_s = bits_time(r->slot[sl].t_bits);
  r->ev[e].next = r->ev_free;
  r->ev_free = e;
  r->slot[sl].head = ev.next;
  if (ev.next < 0) { /* the time's last event: the slot goes */
    heap_pop(r);
    hash_remove(r, hash_find(r, r->slot[sl].t_bits));
    r->slot[sl].head = r->slot_free;
    r->slot_free = sl;
  }
  return ev;
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
  r->xf_left_bytes[x] = s->xf_bytes[x];
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
  r->t_s[t] = now;
  r->st_busy[s->key[t]] = 1;
  switch (sim_kind(s, t)) {
  case HAP_SIM_FIXED: return push_event(r, now + sim_dur(s, t), SIM_EV_FINISH, t, 0, err);
  case HAP_SIM_COLLECTIVE: {
    int32_t c = s->mb_coll[s->aux[t]];
    if (++r->co_arrived[c] < s->co_size[c])
      return HAP_OK;
    r->co_last[c] = t;
    r->co_start_s[c] = now;
    return push_event(r, now + r->co_dur_s[c], SIM_EV_COLL_END, c, 0, err);
  }
  case HAP_SIM_TRANSFER: {
    int32_t x = s->aux[t];
    double lat_s = s->xf_latency_s[x];
    if (s->xf_bytes[x] <= 0)
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
  int32_t h = r->st_head[key];
  if (h >= 0 && r->pending[h] == 0)
    return begin_task(s, h, err);
  return HAP_OK;
}

/* Device d's two streams as one merge of their run intervals in order of their ends (what a pass
 * over the finished run would do): advance while both current intervals have ended, adding their
 * overlap. */
static void merge_overlap(hap_sim *s, int32_t d) {
  sim_run *r = &s->run;
  int32_t *cur = r->mg_cur + (int64_t)d * HAP_SIM_N_STREAMS;
  while (cur[0] >= 0 && cur[1] >= 0 && sim_finished(s, cur[0]) && sim_finished(s, cur[1])) {
    int32_t a = cur[0], b = cur[1];
    double start_a = sim_start(s, a), start_b = sim_start(s, b);
    double end_a = sim_end(s, a), end_b = sim_end(s, b);
    double lo = start_a > start_b ? start_a : start_b;
    double hi = end_a < end_b ? end_a : end_b;
    if (hi > lo)
      r->mg_overlap_s[d] += hi - lo;
    if (end_a < end_b)
      cur[0] = s->st_next[a];
    else
      cur[1] = s->st_next[b];
  }
}

/* Task t ends now: free its stream, release its dependents. The finish that enables a task
 * last is its critical predecessor (events arrive in time order). */
static hap_status finish_task(hap_sim *s, int32_t t, hap_err *err) {
  sim_run *r = &s->run;
  int32_t key = s->key[t];
  double end_s = r->now_s;
  if (sim_kind(s, t) == HAP_SIM_TRANSFER)
    r->xf_end_s[s->aux[t]] = end_s;
  r->st_busy_s[key] += end_s - sim_start(s, t);
  if (r->last_task < 0 || end_s > r->last_end_s) {
    r->last_task = t;
    r->last_end_s = end_s;
  } else if (end_s == r->last_end_s && t < r->last_task) {
    r->last_task = t;
  }
  r->n_done++;
  r->st_busy[key] = 0;
  int32_t h = s->st_next[t];
  r->st_head[key] = h;
  if (h >= 0) {
    r->crit[h] = (uint32_t)t + 1;
  }
  merge_overlap(s, key / HAP_SIM_N_STREAMS);
  /* the dependents in order of addition: their list runs newest first */
  int32_t n_succ = 0;
  for (int32_t e = s->dep_head[t]; e >= 0; e = s->edge_next[e]) {
    if (n_succ == r->succ_cap) {
      int32_t cap = (int32_t)hap_vec_next_cap(r->succ_cap, (int64_t)n_succ + 1, 64, INT32_MAX);
      int32_t *p = cap > 0 ? realloc(r->succ, (size_t)cap * sizeof *p) : NULL;
      if (p == NULL)
        return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
      r->succ = p;
      r->succ_cap = cap;
    }
    r->succ[n_succ++] = s->edge_task[e];
  }
  for (int32_t i = n_succ - 1; i >= 0; i--) {
    int32_t y = r->succ[i];
    r->crit[y] = ((uint32_t)t + 1) | SIM_CRIT_DEP;
    if (!release(r, y))
      continue;
    int32_t ky = s->key[y];
    if (!r->st_busy[ky] && r->st_head[ky] == y)
      HAP_TRY(begin_task(s, y, err));
  }
  return try_stream(s, key, err);
}

static hap_status dispatch(hap_sim *s, sim_event ev, hap_err *err) {
  switch ((sim_event_kind)(ev.kind_version & 3u)) {
  case SIM_EV_FINISH: return finish_task(s, ev.id, err);
  case SIM_EV_COLL_END:
    for (int32_t t = s->co_first[ev.id]; t >= 0; t = s->mb_next[s->aux[t]])
      HAP_TRY(finish_task(s, t, err));
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
  HAP_TRY(init_tasks(s, err));
  HAP_TRY(init_collectives(s, err));
  init_resources(s);
  for (int32_t key = 0; key < s->n_devices * HAP_SIM_N_STREAMS; key++)
    HAP_TRY(try_stream(s, key, err));
  while (r->heap_len > 0) {
    double t_s;
    sim_event ev = pop_event(r, &t_s);
    if (stale(r, ev))
      continue;
    r->now_s = t_s;
    r->n_events++;
    HAP_TRY(dispatch(s, ev, err));
  }
  return HAP_OK;
}
