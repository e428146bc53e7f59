/* engine_report.c — what a finished run reports: per-device busy/idle accounting, the critical
 * path; and, for a run that stopped with tasks left, the deadlock message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"

/* ---- per-device accounting ---- */

/* Sum of run times of the tasks in stream `key` (in order, so their intervals are disjoint). */
static double stream_busy(const hap_sim *s, int32_t key) {
  const sim_run *r = &s->run;
  double busy_s = 0;
  for (int32_t i = r->st_off[key]; i < r->st_off[key + 1]; i++) {
    int32_t t = r->st_list[i];
    busy_s += r->end_s[t] - r->start_s[t];
  }
  return busy_s;
}

/* Time both streams of a device run at once: a merge of two sorted disjoint interval lists. */
static double stream_overlap(const hap_sim *s, int32_t key_a, int32_t key_b) {
  const sim_run *r = &s->run;
  int32_t i = r->st_off[key_a], j = r->st_off[key_b];
  double overlap_s = 0;
  while (i < r->st_off[key_a + 1] && j < r->st_off[key_b + 1]) {
    int32_t a = r->st_list[i], b = r->st_list[j];
    double lo = r->start_s[a] > r->start_s[b] ? r->start_s[a] : r->start_s[b];
    double hi = r->end_s[a] < r->end_s[b] ? r->end_s[a] : r->end_s[b];
    if (hi > lo)
      overlap_s += hi - lo;
    if (r->end_s[a] < r->end_s[b])
      i++;
    else
      j++;
  }
  return overlap_s;
}

static void device_stats(const hap_sim *s, int32_t d, double makespan_s,
                         hap_sim_device_stats *out) {
  const sim_run *r = &s->run;
  int32_t kc = d * HAP_SIM_N_STREAMS + HAP_SIM_COMPUTE, km = d * HAP_SIM_N_STREAMS + HAP_SIM_COMM;
  memset(out, 0, sizeof *out);
  out->busy_s[HAP_SIM_COMPUTE] = stream_busy(s, kc);
  out->busy_s[HAP_SIM_COMM] = stream_busy(s, km);
  for (int st = 0; st < HAP_SIM_N_STREAMS; st++)
    out->stream_idle_s[st] = makespan_s - out->busy_s[st];
  out->overlap_s = stream_overlap(s, kc, km);
  out->active_s = out->busy_s[HAP_SIM_COMPUTE] + out->busy_s[HAP_SIM_COMM] - out->overlap_s;
  out->idle_s = makespan_s - out->active_s;
  out->comm_s = out->busy_s[HAP_SIM_COMM];
  out->exposed_comm_s = out->comm_s - out->overlap_s;
  out->n_tasks = (r->st_off[km + 1] - r->st_off[km]) + (r->st_off[kc + 1] - r->st_off[kc]);
}

/* ---- critical path ---- */

/* The task that finished last (lowest id among ties); a collective is represented by the member
 * whose arrival started it. */
static int32_t last_task(const hap_sim *s) {
  const sim_run *r = &s->run;
  int32_t best = -1;
  for (int32_t t = 0; t < s->n_tasks; t++)
    if (best < 0 || r->end_s[t] > r->end_s[best])
      best = t;
  if (best >= 0 && s->kind[best] == HAP_SIM_COLLECTIVE)
    best = r->co_last[s->aux[best]];
  return best;
}

/* Walk back from the last task; each step records how it waited for the one before it. */
static int32_t critical_path(const hap_sim *s, hap_sim_step *path) {
  const sim_run *r = &s->run;
  int32_t n = 0;
  for (int32_t x = last_task(s); x >= 0 && n < s->n_tasks;) {
    int32_t pred = r->crit[x];
    hap_sim_edge via = (hap_sim_edge)r->crit_via[x];
    if (s->kind[x] == HAP_SIM_COLLECTIVE && r->co_last[s->aux[x]] != x) {
      pred = r->co_last[s->aux[x]];
      via = HAP_SIM_EDGE_COLLECTIVE;
    }
    path[n++] = (hap_sim_step){x, via};
    x = pred;
  }
  for (int32_t i = 0; i < n / 2; i++) {
    hap_sim_step tmp = path[i];
    path[i] = path[n - 1 - i];
    path[n - 1 - i] = tmp;
  }
  return n;
}

hap_status sim_report(hap_sim *s, hap_err *err) {
  (void)err;
  sim_run *r = &s->run;
  double makespan_s = 0;
  for (int32_t t = 0; t < s->n_tasks; t++)
    if (r->end_s[t] > makespan_s)
      makespan_s = r->end_s[t];
  for (int32_t d = 0; d < s->n_devices; d++)
    device_stats(s, d, makespan_s, &r->dev_stats[d]);
  hap_sim_results *res = &r->results;
  res->makespan_s = makespan_s;
  res->n_events = r->n_events;
  res->n_tasks = s->n_tasks;
  res->n_devices = s->n_devices;
  res->devices = r->dev_stats;
  res->n_critical = critical_path(s, r->path);
  res->critical = r->path;
  return HAP_OK;
}

/* ---- deadlock ---- */

#define SIM_DEADLOCK_LIST 16 /* devices named before "... and N more" */

/* Append to buf (of size cap) at *len, truncating; *len never passes cap - 1. */
static void appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len + 1 >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0)
    *len = *len + (size_t)n < cap - 1 ? *len + (size_t)n : cap - 1;
}

/* The stuck task of device d: the lower id of its two stream heads, or -1 if it ran everything. */
static int32_t stuck_task(const hap_sim *s, int32_t d) {
  const sim_run *r = &s->run;
  int32_t best = -1;
  for (int st = 0; st < HAP_SIM_N_STREAMS; st++) {
    int32_t key = d * HAP_SIM_N_STREAMS + st;
    int32_t i = r->st_off[key] + r->st_next[key];
    if (i < r->st_off[key + 1] && (best < 0 || r->st_list[i] < best))
      best = r->st_list[i];
  }
  return best;
}

/* One unfinished dependency of t, or -1. */
static int32_t unfinished_dep(const hap_sim *s, int32_t t) {
  for (int64_t e = 0; e < s->n_edges; e++)
    if (s->edge_task[e] == t && s->run.end_s[s->edge_on[e]] < 0)
      return s->edge_on[e];
  return -1;
}

/* One member of collective c that has not arrived, or -1. */
static int32_t missing_member(const hap_sim *s, int32_t c) {
  const sim_run *r = &s->run;
  for (int32_t i = r->co_off[c]; i < r->co_off[c + 1]; i++)
    if (r->ready_s[r->co_list[i]] < 0)
      return r->co_list[i];
  return -1;
}

static void describe_stuck(const hap_sim *s, int32_t d, int32_t t, char *buf, size_t cap,
                           size_t *len) {
  appendf(buf, cap, len, "device %d: \"%s\"", d, sim_task_name(s, t));
  int32_t dep = s->run.pending[t] > 0 ? unfinished_dep(s, t) : -1;
  if (dep >= 0) {
    appendf(buf, cap, len, " waits for \"%s\" (device %d, %s stream)", sim_task_name(s, dep),
            s->device[dep], hap_sim_stream_name((hap_sim_stream)s->stream[dep]));
    return;
  }
  if (s->kind[t] == HAP_SIM_COLLECTIVE) {
    int32_t m = missing_member(s, s->aux[t]);
    if (m >= 0) {
      appendf(buf, cap, len, " (collective) waits for device %d to reach \"%s\"", s->device[m],
              sim_task_name(s, m));
      return;
    }
  }
  appendf(buf, cap, len, " never started");
}

hap_status sim_deadlock_error(const hap_sim *s, hap_err *err) {
  char buf[sizeof err->msg];
  size_t len = 0;
  appendf(buf, sizeof buf, &len,
          "simulator: deadlock: %d of %d tasks never ran (stuck at t = %.9g s); ",
          s->n_tasks - s->run.n_done, s->n_tasks, s->run.now_s);
  int32_t listed = 0, more = 0;
  for (int32_t d = 0; d < s->n_devices; d++) {
    int32_t t = stuck_task(s, d);
    if (t < 0)
      continue;
    if (listed == SIM_DEADLOCK_LIST || len + 160 > sizeof buf) { /* keep room for the tail */
      more++;
      continue;
    }
    if (listed > 0)
      appendf(buf, sizeof buf, &len, "; ");
    describe_stuck(s, d, t, buf, sizeof buf, &len);
    listed++;
  }
  if (more > 0)
    appendf(buf, sizeof buf, &len, "; and %d more devices", more);
  buf[len] = '\0';
  return hap_err_set(err, HAP_EINVAL, "%s", buf);
}
