/* run.c — the report of a hap-trace (hap-run --trace; hap-sim --trace too, simulated lanes only):
 * simulated and measured Gantt lanes per rank, each rank's simulated and measured span, the
 * histogram of the measured tasks' errors against the simulation, and the largest differences.
 * The trace's pids say the rank and timeline: 2 rank + 1 simulated, 2 rank + 2 measured
 * (docs/formats.md); times are microseconds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

enum { MAX_PID = 1 << 17, MAX_LANE_RANKS = 16, MAX_BINS = 60, TOP_DIFFS = 15 };

typedef struct tev {
  const char *name, *cat;
  int64_t pid, tid;
  double ts, dur, sim_dur, err; /* us, us, us (NAN: none), % (NAN: none) */
} tev;

typedef struct run {
  const char *tool, *strategy;
  int n_ev;
  tev *ev;
  int64_t max_pid;
  const char **pnames; /* [max_pid + 1]: process_name by pid, NULL when none */
} run;

static void run_free(void *data) {
  run *r = data;
  if (r == NULL)
    return;
  free(r->ev);
  free(r->pnames);
  free(r);
}

static hap_status read_args(const hap_jr *r, const json_t *o, const char *path, tev *e) {
  const json_t *args;
  hap_jpath ap;
  HAP_TRY(rep_get_object(r, o, path, "args", false, "an object", &args));
  if (args == NULL)
    return HAP_OK;
  hap_jpath_key(ap, path, "args");
  HAP_TRY(rep_get_amount(r, args, ap, "sim_dur_us", false, HAP_JR_NON_NEGATIVE,
                         "a simulated duration in us", &e->sim_dur));
  return rep_get_num(r, args, ap, "err_pct", false, "an error in percent (a number)", &e->err);
}

/* One event: "X" kept in ev (when non-NULL), "process_name" metadata in names; others skipped. */
static hap_status read_event(const hap_jr *r, const json_t *o, const char *path, tev *e,
                             bool *complete, const char **pname) {
  const char *ph;
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "an event object {\"ph\", ...}"));
  HAP_TRY(rep_get_text(r, o, path, "ph", true, &ph));
  *complete = false;
  *pname = NULL;
  if (strcmp(ph, "M") == 0) {
    const char *name;
    HAP_TRY(rep_get_text(r, o, path, "name", true, &name));
    if (strcmp(name, "process_name") != 0)
      return HAP_OK;
    const json_t *args;
    hap_jpath ap;
    HAP_TRY(rep_get_int(r, o, path, "pid", true, 1, MAX_PID, "a process id 1..131072", &e->pid));
    HAP_TRY(rep_get_object(r, o, path, "args", true, "an object {\"name\"}", &args));
    return rep_get_text(r, args, hap_jpath_key(ap, path, "args"), "name", true, pname);
  }
  if (strcmp(ph, "X") != 0)
    return HAP_OK;
  *complete = true;
  e->cat = "";
  e->sim_dur = e->err = NAN;
  HAP_TRY(rep_get_text(r, o, path, "name", true, &e->name));
  HAP_TRY(rep_get_text(r, o, path, "cat", false, &e->cat));
  HAP_TRY(rep_get_int(r, o, path, "pid", true, 1, MAX_PID, "a process id 1..131072", &e->pid));
  HAP_TRY(rep_get_int(r, o, path, "tid", true, 0, INT32_MAX, "a thread id >= 0", &e->tid));
  HAP_TRY(rep_get_amount(r, o, path, "ts", true, HAP_JR_NON_NEGATIVE, "a timestamp in us", &e->ts));
  HAP_TRY(
      rep_get_amount(r, o, path, "dur", true, HAP_JR_NON_NEGATIVE, "a duration in us", &e->dur));
  return read_args(r, o, path, e);
}

static hap_status read_events(const hap_jr *r, const json_t *evs, run *t) {
  size_t n = json_array_size(evs);
  t->ev = calloc(n + 1, sizeof *t->ev);
  const char **names = calloc(MAX_PID + 1, sizeof *names);
  if (t->ev == NULL || names == NULL) {
    free(names);
    return hap_jr_oom(r);
  }
  t->pnames = names;
  for (size_t i = 0; i < n; i++) {
    hap_jpath p;
    bool complete;
    const char *pname;
    tev e = {0};
    HAP_TRY(read_event(r, json_array_get(evs, i), hap_jpath_index(p, "traceEvents", i), &e,
                       &complete, &pname));
    if (pname != NULL)
      names[e.pid] = pname;
    if (complete)
      t->ev[t->n_ev++] = e;
    if (complete || pname != NULL)
      t->max_pid = e.pid > t->max_pid ? e.pid : t->max_pid;
  }
  if (t->n_ev == 0)
    return hap_jr_fail(r, HAP_EPARSE, "traceEvents",
                       "has no complete (\"ph\": \"X\") events, expected the tasks of an "
                       "iteration");
  return HAP_OK;
}

static hap_status run_read(const hap_jr *r, const json_t *root, void **data) {
  const json_t *evs, *other;
  HAP_TRY(rep_get_array(r, root, "", "traceEvents", true,
                        "the events of a hap-trace (hap-run --trace)", REP_MAX_ITEMS, &evs));
  HAP_TRY(rep_get_object(r, root, "", "otherData", false, "an object", &other));
  run *t = calloc(1, sizeof *t);
  if (t == NULL)
    return hap_jr_oom(r);
  t->tool = "a trace";
  t->strategy = "";
  hap_status st = HAP_OK;
  if (other != NULL) {
    const char *format = "hap-trace";
    hap_jquote q;
    st = rep_get_text(r, other, "otherData", "format", false, &format);
    if (st == HAP_OK && strcmp(format, "hap-trace") != 0)
      st = hap_jr_fail(r, HAP_EPARSE, "otherData.format", "is \"%s\", expected \"hap-trace\"",
                       hap_json_quote(format, q));
    if (st == HAP_OK)
      st = rep_get_text(r, other, "otherData", "tool", false, &t->tool);
    if (st == HAP_OK)
      st = rep_get_text(r, other, "otherData", "plan_strategy", false, &t->strategy);
  }
  if (st == HAP_OK)
    st = read_events(r, evs, t);
  if (st != HAP_OK) {
    run_free(t);
    return st;
  }
  *data = t;
  return HAP_OK;
}

static void run_title(const void *data, char *buf, size_t len) {
  const run *t = data;
  snprintf(buf, len, "%s timeline%s%s", t->tool, t->strategy[0] ? ": plan " : "", t->strategy);
}

static int64_t rank_of(int64_t pid) { return (pid - 1) / 2; }
static bool measured(int64_t pid) { return pid % 2 == 0; }

static int cat_color(const char *cat) {
  static const char *const cats[] = {"compute", "collective", "p2p", "update"};
  for (int i = 0; i < 4; i++)
    if (strcmp(cat, cats[i]) == 0)
      return i;
  return 4;
}

/* ---- the Gantt chart: a lane per (rank, timeline) of the first ranks ---------------------- */

static void gantt(FILE *f, const run *t) {
  int64_t ranks = rank_of(t->max_pid) + 1;
  int64_t shown = ranks < MAX_LANE_RANKS ? ranks : MAX_LANE_RANKS;
  int *lane = calloc((size_t)(2 * shown + 2), sizeof *lane); /* pid -> lane + 1 (0: none) */
  char(*labels)[48] = calloc((size_t)(2 * shown + 1), sizeof *labels);
  const char **cats = calloc((size_t)(2 * shown + 1), sizeof *cats);
  if (lane == NULL || labels == NULL || cats == NULL) {
    free(lane);
    free(labels);
    free(cats);
    return;
  }
  double end = 0;
  for (int i = 0; i < t->n_ev; i++)
    if (t->ev[i].pid <= 2 * shown) {
      lane[t->ev[i].pid] = 1;
      end = fmax(end, t->ev[i].ts + t->ev[i].dur);
    }
  int n_lanes = 0;
  for (int64_t pid = 1; pid <= 2 * shown; pid++)
    if (lane[pid]) {
      snprintf(labels[n_lanes], sizeof labels[n_lanes], "rank %lld %s", (long long)rank_of(pid),
               measured(pid) ? "measured" : "simulated");
      cats[n_lanes] = labels[n_lanes];
      lane[pid] = ++n_lanes;
    }
  const char *unit;
  double k = rep_time_unit(end * 1e-6, &unit) * 1e6; /* us per display unit */
  char xlabel[48];
  snprintf(xlabel, sizeof xlabel, "time (%s)", unit);
  rep_plot p = {.x = rep_axis_make(REP_LINEAR, xlabel, NULL),
                .y = rep_axis_cats("", cats, n_lanes)};
  p.x.zero = true;
  rep_axis_add(&p.x, end / k);
  rep_plot_begin(&p, f, "gantt", "tasks per rank: simulated and measured", 1180,
                 110 + 36.0 * n_lanes, 120, 110);
  for (int i = 0; i < t->n_ev; i++) {
    const tev *e = &t->ev[i];
    if (e->pid > 2 * shown)
      continue;
    double y = lane[e->pid] - 1;
    char tip[400], b1[32], b2[32];
    if (isfinite(e->sim_dur))
      snprintf(tip, sizeof tip, "%s (%s): %s measured, %s simulated", e->name, e->cat,
               rep_dur(e->dur * 1e-6, b1, sizeof b1), rep_dur(e->sim_dur * 1e-6, b2, sizeof b2));
    else
      snprintf(tip, sizeof tip, "%s (%s): %s at %s", e->name, e->cat,
               rep_dur(e->dur * 1e-6, b1, sizeof b1), rep_dur(e->ts * 1e-6, b2, sizeof b2));
    bool top = e->tid <= 1;
    rep_plot_rect(&p, e->ts / k, (e->ts + e->dur) / k, top ? y - 0.42 : y + 0.05,
                  top ? y - 0.02 : y + 0.42, cat_color(e->cat), "task", tip);
  }
  static const char *const names[] = {"compute", "collective", "p2p", "update", "other"};
  for (int c = 0; c < 5; c++)
    rep_plot_legend(&p, names[c], c, false, false);
  rep_plot_end(&p);
  if (ranks > shown)
    fprintf(f, "<p class=\"note\">(the first %lld of %lld ranks)</p>\n", (long long)shown,
            (long long)ranks);
  free(lane);
  free(labels);
  free(cats);
}

/* ---- per-rank spans ------------------------------------------------------------------------ */

enum { MAX_SPAN_RANKS = 4096 }; /* ranks listed in the per-rank table */

static void spans(FILE *f, const run *t) {
  int64_t ranks = rank_of(t->max_pid) + 1;
  ranks = ranks < MAX_SPAN_RANKS ? ranks : MAX_SPAN_RANKS;
  double *sim = calloc((size_t)ranks, sizeof *sim), *meas = calloc((size_t)ranks, sizeof *meas);
  int *n = calloc((size_t)ranks, sizeof *n);
  if (sim == NULL || meas == NULL || n == NULL) {
    free(sim);
    free(meas);
    free(n);
    return;
  }
  for (int i = 0; i < t->n_ev; i++) { /* one pass: each rank's last end on each timeline */
    int64_t rk = rank_of(t->ev[i].pid);
    if (rk >= ranks)
      continue;
    double e = t->ev[i].ts + t->ev[i].dur;
    double *span = measured(t->ev[i].pid) ? &meas[rk] : &sim[rk];
    *span = fmax(*span, e);
    n[rk]++;
  }
  fputs("<table class=\"spans\">\n<tr><th class=\"l\">rank</th><th class=\"l\">device</th>"
        "<th>tasks</th><th>simulated span</th><th>measured span</th><th>measured / "
        "simulated</th></tr>\n",
        f);
  for (int64_t rk = 0; rk < ranks; rk++) {
    if (n[rk] == 0)
      continue;
    const char *name = t->pnames[2 * rk + 1] ? t->pnames[2 * rk + 1] : "";
    const char *bar = strrchr(name, '|'); /* "sim | rank 0 | <device>" */
    name = bar != NULL ? bar + 1 + (bar[1] == ' ') : name;
    char b1[32], b2[32];
    fprintf(f, "<tr><td class=\"l\">%lld</td><td class=\"l\">", (long long)rk);
    rep_esc(f, name);
    fprintf(f, "</td><td>%d</td><td>%s</td><td>%s</td>", n[rk],
            sim[rk] > 0 ? rep_dur(sim[rk] * 1e-6, b1, sizeof b1) : "-",
            meas[rk] > 0 ? rep_dur(meas[rk] * 1e-6, b2, sizeof b2) : "-");
    if (sim[rk] > 0 && meas[rk] > 0)
      fprintf(f, "<td>%.3f</td></tr>\n", meas[rk] / sim[rk]);
    else
      fputs("<td>-</td></tr>\n", f);
  }
  fputs("</table>\n", f);
  int64_t all = rank_of(t->max_pid) + 1;
  if (all > ranks)
    fprintf(f, "<p class=\"note\">(the first %lld of %lld ranks)</p>\n", (long long)ranks,
            (long long)all);
  free(sim);
  free(meas);
  free(n);
}

/* ---- errors -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The histogram of the sorted errors (%): bins over [min, a fence past the upper quartile], the
 * tasks beyond the fence counted in the last bin (so one outlier does not squash the rest). */
static void histogram(FILE *f, const double *errs, int n) {
  double q1 = errs[n / 4], q3 = errs[(3 * n) / 4];
  double lo = errs[0], hi = fmin(errs[n - 1], q3 + 3 * fmax(q3 - q1, 1));
  int beyond = 0;
  for (int i = 0; i < n; i++)
    beyond += errs[i] > hi;
  double step = hi > lo ? rep_nice_step(hi - lo, 24) : 1;
  double first = floor(lo / step) * step;
  int bins = (int)fmin(MAX_BINS, floor((hi - first) / step) + 1);
  if (bins < 1)
    bins = 1;
  int count[MAX_BINS] = {0};
  for (int i = 0; i < n; i++) {
    int b = (int)floor((errs[i] - first) / step);
    count[b < 0 ? 0 : b >= bins ? bins - 1 : b]++;
  }
  rep_plot p = {
      .x = rep_axis_make(REP_LINEAR, "task error: (measured - simulated) / simulated (%)", NULL),
      .y = rep_axis_make(REP_LINEAR, "measured tasks", NULL)};
  p.y.zero = true;
  rep_axis_add(&p.x, first);
  rep_axis_add(&p.x, first + bins * step);
  for (int b = 0; b < bins; b++)
    rep_axis_add(&p.y, count[b]);
  rep_plot_begin(&p, f, "chart hist", "task-error histogram", 960, 360, 70, 0);
  for (int b = 0; b < bins; b++) {
    if (count[b] == 0)
      continue;
    char tip[128];
    snprintf(tip, sizeof tip, "%d tasks with error in [%.4g%%, %.4g%%)", count[b], first + b * step,
             first + (b + 1) * step);
    rep_plot_rect(&p, first + b * step, first + (b + 1) * step, 0, count[b], 0, "bin", tip);
  }
  rep_plot_end(&p);
  if (beyond > 0)
    fprintf(f,
            "<p class=\"note\">(%d tasks with errors above %.4g%%, up to %.4g%%, are counted in "
            "the last bin)</p>\n",
            beyond, hi, errs[n - 1]);
}

/* Indices of measured events by |measured - simulated| duration, largest first. */
static const tev *diff_base;
static int cmp_diff(const void *a, const void *b) {
  const tev *x = &diff_base[*(const int *)a], *y = &diff_base[*(const int *)b];
  double dx = fabs(x->dur - x->sim_dur), dy = fabs(y->dur - y->sim_dur);
  return (dx < dy) - (dx > dy);
}

static void largest(FILE *f, const run *t, int *idx, int n) {
  diff_base = t->ev;
  qsort(idx, (size_t)n, sizeof *idx, cmp_diff);
  fputs("<table class=\"diffs\">\n<tr><th class=\"l\">task</th><th class=\"l\">kind</th>"
        "<th>rank</th><th>simulated</th><th>measured</th><th>difference</th><th>error</th></tr>\n",
        f);
  for (int i = 0; i < n && i < TOP_DIFFS; i++) {
    const tev *e = &t->ev[idx[i]];
    char b1[32], b2[32], b3[32];
    fputs("<tr><td class=\"l\">", f);
    rep_esc(f, e->name);
    fputs("</td><td class=\"l\">", f);
    rep_esc(f, e->cat);
    fprintf(f, "</td><td>%lld</td><td>%s</td><td>%s</td><td>%s</td>", (long long)rank_of(e->pid),
            rep_dur(e->sim_dur * 1e-6, b1, sizeof b1), rep_dur(e->dur * 1e-6, b2, sizeof b2),
            rep_dur((e->dur - e->sim_dur) * 1e-6, b3, sizeof b3));
    if (isfinite(e->err))
      fprintf(f, "<td>%+.1f%%</td></tr>\n", e->err);
    else
      fputs("<td>-</td></tr>\n", f);
  }
  fputs("</table>\n", f);
}

static void errors(FILE *f, const run *t) {
  double *errs = malloc(sizeof(double) * (size_t)(t->n_ev + 1));
  int *idx = malloc(sizeof(int) * (size_t)(t->n_ev + 1));
  int n_err = 0, n_idx = 0;
  if (errs == NULL || idx == NULL) {
    free(errs);
    free(idx);
    return;
  }
  for (int i = 0; i < t->n_ev; i++) {
    if (!measured(t->ev[i].pid))
      continue;
    if (isfinite(t->ev[i].err))
      errs[n_err++] = t->ev[i].err;
    if (isfinite(t->ev[i].sim_dur))
      idx[n_idx++] = i;
  }
  if (n_err == 0) {
    rep_section(f, "errors", "Task errors",
                "No measured task carries an error against the simulation (a trace of hap-sim "
                "has simulated lanes only).");
  } else {
    qsort(errs, (size_t)n_err, sizeof *errs, cmp_double);
    char note[256];
    snprintf(note, sizeof note,
             "%d measured tasks; median error %+.1f%%, middle half %+.1f%% .. %+.1f%%.", n_err,
             errs[n_err / 2], errs[n_err / 4], errs[(3 * n_err) / 4]);
    rep_section(f, "errors", "Task errors", note);
    histogram(f, errs, n_err);
  }
  if (n_idx > 0) {
    rep_section(f, "largest", "The largest differences",
                "Measured tasks with the largest |measured - simulated| duration.");
    largest(f, t, idx, n_idx);
  }
  free(errs);
  free(idx);
}

static void run_render(FILE *f, const void *data) {
  const run *t = data;
  char note[256];
  snprintf(note, sizeof note,
           "%d tasks. Each rank's simulated lane above its measured one; compute on the upper "
           "half of a lane, communication on the lower half. Hover a task for its times.",
           t->n_ev);
  rep_section(f, "gantt", "Timeline", note);
  gantt(f, t);
  rep_section(f, "spans", "Per rank", "The span of each rank's tasks on each timeline.");
  spans(f, t);
  errors(f, t);
}

const rep_kind rep_run_kind = {
    .read = run_read, .render = run_render, .title = run_title, .destroy = run_free};
