/* engine_report.c — what a finished run reports: per-device busy/idle accounting, the critical
 * path; and, for a run that stopped with tasks left, the deadlock message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"

/* ---- per-device accounting ---- */

/* Busy time per stream and the overlap of a device's two streams were summed as tasks finished
 * (engine_run.c), in stream order and in the order of a merge of the two streams. */
static void device_stats(const hap_sim *s, int32_t d, double makespan_s,
                         hap_sim_device_stats *out) {
  const sim_run *r = &s->run;
  int32_t kc = d * HAP_SIM_N_STREAMS + HAP_SIM_COMPUTE, km = d * HAP_SIM_N_STREAMS + HAP_SIM_COMM;
  memset(out, 0, sizeof *out);
  out->busy_s[HAP_SIM_COMPUTE] = r->st_busy_s[kc];
  out->busy_s[HAP_SIM_COMM] = r->st_busy_s[km];
  for (int st = 0; st < HAP_SIM_N_STREAMS; st++)
    out->stream_idle_s[st] = makespan_s - out->busy_s[st];
  out->overlap_s = r->mg_overlap_s[d];
  out->active_s = out->busy_s[HAP_SIM_COMPUTE] + out->busy_s[HAP_SIM_COMM] - out->overlap_s;
  out->idle_s = makespan_s - out->active_s;
  out->comm_s = out->busy_s[HAP_SIM_COMM];
  out->exposed_comm_s = out->comm_s - out->overlap_s;
  out->n_tasks = s->st_count[km] + s->st_count[kc];
}

/* ---- critical path ---- */

/* The task that finished last (lowest id among ties, tracked as tasks finished); a collective is
 * represented by the member whose arrival started it. */
static int32_t last_task(const hap_sim *s) {
  const sim_run *r = &s->run;
  int32_t best = r->last_task;
  if (best >= 0 && sim_kind(s, best) == HAP_SIM_COLLECTIVE)
    best = r->co_last[s->mb_coll[s->aux[best]]];
  return best;
}

/* Walk back from the last task; each step records how it waited for the one before it. */
static int32_t critical_path(const hap_sim *s, hap_sim_step *path) {
  const sim_run *r = &s->run;
  int32_t n = 0;
  for (int32_t x = last_task(s); x >= 0 && n < s->n_tasks;) {
    int32_t pred = (int32_t)(r->crit[x] & ~SIM_CRIT_DEP) - 1;
    hap_sim_edge via = r->crit[x] == 0             ? HAP_SIM_EDGE_START
                       : r->crit[x] & SIM_CRIT_DEP ? HAP_SIM_EDGE_DEPENDENCY
                                                   : HAP_SIM_EDGE_STREAM;
    if (sim_kind(s, x) == HAP_SIM_COLLECTIVE) {
      int32_t last = r->co_last[s->mb_coll[s->aux[x]]];
      if (last != x) {
        pred = last;
        via = HAP_SIM_EDGE_COLLECTIVE;
      }
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
  double makespan_s = r->last_task >= 0 && r->last_end_s > 0 ? r->last_end_s : 0;
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
  /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): started on the line above */
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
    int32_t h = r->st_head[d * HAP_SIM_N_STREAMS + st];
    if (h >= 0 && (best < 0 || h < best))
      best = h;
  }
  return best;
}

/* The unfinished dependency of t on the edge added first, or -1 (edges are listed per task waited
 * on: a pass over every list, once, for the message). */
static int32_t unfinished_dep(const hap_sim *s, int32_t t) {
  int32_t best_e = -1, best = -1;
  for (int32_t on = 0; on < s->n_tasks; on++)
    for (int32_t e = s->dep_head[on]; e >= 0; e = s->edge_next[e])
      if (s->edge_task[e] == t && !sim_finished(s, on) && (best_e < 0 || e < best_e)) {
        best_e = e;
        best = on;
      }
  return best;
}

/* One member of collective c that has not arrived (neither finished nor holding its stream), or
 * -1. */
static int32_t missing_member(const hap_sim *s, int32_t c) {
  const sim_run *r = &s->run;
  for (int32_t t = s->co_first[c]; t >= 0; t = s->mb_next[s->aux[t]]) {
    int32_t key = s->key[t];
    bool arrived = sim_finished(s, t) || (r->st_head[key] == t && r->st_busy[key]);
    if (!arrived)
      return t;
  }
  return -1;
}

static void describe_stuck(const hap_sim *s, int32_t d, int32_t t, char *buf, size_t cap,
                           size_t *len) {
  appendf(buf, cap, len, "device %d: \"%s\"", d, sim_task_name(s, t));
  int32_t dep = s->run.pending[t] > 0 ? unfinished_dep(s, t) : -1;
  if (dep >= 0) {
    appendf(buf, cap, len, " waits for \"%s\" (device %d, %s stream)", sim_task_name(s, dep),
            s->key[dep] / HAP_SIM_N_STREAMS,
            hap_sim_stream_name((hap_sim_stream)(s->key[dep] % HAP_SIM_N_STREAMS)));
    return;
  }
  if (sim_kind(s, t) == HAP_SIM_COLLECTIVE) {
    int32_t m = missing_member(s, s->mb_coll[s->aux[t]]);
    if (m >= 0) {
      appendf(buf, cap, len, " (collective) waits for device %d to reach \"%s\"",
              s->key[m] / HAP_SIM_N_STREAMS, sim_task_name(s, m));
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
