/* sweep.c — the report of a hap-sim sweep (hap-sim -f json): iteration time against the swept
 * parameter, one line per strategy; the speedups over dp-ev; a table of every row. The x axis is
 * numeric when every point is KEY=NUMBER of one key (logarithmic when the values span 8x or more),
 * else one category per point. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

enum { MAX_LINES = 16 }; /* strategies drawn; more are in the table only */

typedef struct srow {
  const char *point, *strategy, *error;
  int64_t devices;
  bool ok;
  double iter_s, synth_s, sp_ev, sp_cp, sp_tp, busy, exposed, peak; /* NAN: not given */
  int pi, si;                                                       /* point, strategy index */
} srow;

typedef struct sweep {
  const char *model, *cluster;
  int n_rows, n_points, n_strats;
  srow *rows;
  const char **points, **strats; /* distinct, in order of appearance */
  double *px;                    /* numeric x of each point (numeric axis) */
  char key[64];                  /* the swept key (numeric axis), else "" */
  rep_scale xscale;
} sweep;

static void sweep_free(void *data) {
  sweep *s = data;
  if (s == NULL)
    return;
  free(s->rows);
  free(s->points);
  free(s->strats);
  free(s->px);
  free(s);
}

/* Index of `name` in list (appended when new). */
static int intern(const char **list, int *n, const char *name) {
  for (int i = 0; i < *n; i++)
    if (strcmp(list[i], name) == 0)
      return i;
  list[*n] = name;
  return (*n)++;
}

static hap_status read_row(const hap_jr *r, const json_t *o, const char *path, srow *w) {
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "a row object {\"point\", \"strategy\", ...}"));
  w->point = w->strategy = w->error = "";
  w->iter_s = w->synth_s = w->sp_ev = w->sp_cp = w->sp_tp = NAN;
  w->busy = w->exposed = w->peak = NAN;
  HAP_TRY(rep_get_text(r, o, path, "point", true, &w->point));
  HAP_TRY(rep_get_text(r, o, path, "strategy", true, &w->strategy));
  HAP_TRY(rep_get_bool(r, o, path, "ok", true, &w->ok));
  HAP_TRY(
      rep_get_int(r, o, path, "devices", false, 0, INT32_MAX, "a device count >= 0", &w->devices));
  if (!w->ok)
    return rep_get_text(r, o, path, "error", false, &w->error);
  HAP_TRY(rep_get_amount(r, o, path, "iteration_s", true, HAP_JR_POSITIVE, "an iteration time in s",
                         &w->iter_s));
  HAP_TRY(rep_get_amount(r, o, path, "synth_predicted_s", false, HAP_JR_NON_NEGATIVE,
                         "a predicted time in s", &w->synth_s));
  HAP_TRY(rep_get_amount(r, o, path, "speedup_vs_dp_ev", false, HAP_JR_POSITIVE, "a speedup",
                         &w->sp_ev));
  HAP_TRY(rep_get_amount(r, o, path, "speedup_vs_dp_cp", false, HAP_JR_POSITIVE, "a speedup",
                         &w->sp_cp));
  HAP_TRY(rep_get_amount(r, o, path, "speedup_vs_megatron_tp", false, HAP_JR_POSITIVE, "a speedup",
                         &w->sp_tp));
  HAP_TRY(rep_get_amount(r, o, path, "busy_fraction", false, HAP_JR_NON_NEGATIVE, "a fraction",
                         &w->busy));
  HAP_TRY(rep_get_amount(r, o, path, "exposed_comm_fraction", false, HAP_JR_NON_NEGATIVE,
                         "a fraction", &w->exposed));
  return rep_get_amount(r, o, path, "peak_memory_bytes", false, HAP_JR_NON_NEGATIVE,
                        "a memory size in bytes", &w->peak);
}

/* The label's first "KEY=NUMBER" (labels are "k1=v1 k2=v2 ..."): the key into key (at most cap
 * bytes) and the number; false otherwise. */
static bool key_number(const char *point, char *key, size_t cap, double *v) {
  const char *eq = strchr(point, '=');
  size_t end = strcspn(point, " ");
  if (eq == NULL || eq == point || (size_t)(eq - point) >= cap || (size_t)(eq - point) > end)
    return false;
  char num[64], *stop;
  size_t n = end - (size_t)(eq + 1 - point);
  if (n == 0 || n >= sizeof num)
    return false;
  memcpy(num, eq + 1, n);
  num[n] = '\0';
  *v = strtod(num, &stop);
  if (*stop != '\0' || !isfinite(*v))
    return false;
  memcpy(key, point, (size_t)(eq - point));
  key[eq - point] = '\0';
  return true;
}

/* The x axis: numeric when every point starts with KEY=NUMBER of one key, the numbers distinct
 * (the other keys of a label, such as batch=N of --batch-per-device, follow the first). */
static void choose_axis(sweep *s) {
  s->xscale = REP_CATEGORY;
  s->key[0] = '\0';
  if (s->n_points < 2)
    return;
  double lo = INFINITY, hi = -INFINITY;
  bool pow2 = true;
  for (int i = 0; i < s->n_points; i++) {
    char key[64];
    if (!key_number(s->points[i], key, sizeof key, &s->px[i]) ||
        (i > 0 && strcmp(key, s->key) != 0)) {
      s->key[0] = '\0';
      return;
    }
    for (int j = 0; j < i; j++)
      if (s->px[j] == s->px[i]) {
        s->key[0] = '\0';
        return;
      }
    memcpy(s->key, key, sizeof key);
    lo = fmin(lo, s->px[i]);
    hi = fmax(hi, s->px[i]);
    double l2 = log2(s->px[i]);
    pow2 = pow2 && s->px[i] > 0 && l2 == floor(l2);
  }
  s->xscale = pow2 && hi >= 4 * lo ? REP_LOG2 : lo > 0 && hi >= 8 * lo ? REP_LOG10 : REP_LINEAR;
}

static hap_status sweep_read(const hap_jr *r, const json_t *root, void **data) {
  const json_t *rows;
  HAP_TRY(rep_get_array(r, root, "", "rows", true, "the rows of a hap-sim sweep (hap-sim -f json)",
                        REP_MAX_ITEMS, &rows));
  size_t n = json_array_size(rows);
  if (n == 0)
    return hap_jr_fail(r, HAP_EPARSE, "rows", "is empty, expected at least one row");
  sweep *s = calloc(1, sizeof *s);
  if (s == NULL)
    return hap_jr_oom(r);
  s->rows = calloc(n, sizeof *s->rows);
  s->points = calloc(n, sizeof *s->points);
  s->strats = calloc(n, sizeof *s->strats);
  s->px = calloc(n, sizeof *s->px);
  if (s->rows == NULL || s->points == NULL || s->strats == NULL || s->px == NULL) {
    sweep_free(s);
    return hap_jr_oom(r);
  }
  hap_status st = rep_get_text(r, root, "", "model", true, &s->model);
  if (st == HAP_OK)
    st = rep_get_text(r, root, "", "cluster", true, &s->cluster);
  for (size_t i = 0; i < n && st == HAP_OK; i++) {
    hap_jpath p;
    srow *w = &s->rows[i];
    st = read_row(r, json_array_get(rows, i), hap_jpath_index(p, "rows", i), w);
    if (st == HAP_OK) {
      w->pi = intern(s->points, &s->n_points, w->point);
      w->si = intern(s->strats, &s->n_strats, w->strategy);
    }
  }
  if (st != HAP_OK) {
    sweep_free(s);
    return st;
  }
  s->n_rows = (int)n;
  choose_axis(s);
  *data = s;
  return HAP_OK;
}

static void sweep_title(const void *data, char *buf, size_t len) {
  const sweep *s = data;
  snprintf(buf, len, "hap-sim sweep: %s on %s", s->model, s->cluster);
}

static double xval(const sweep *s, int pi) { return s->xscale == REP_CATEGORY ? pi : s->px[pi]; }

static rep_axis x_axis(const sweep *s) {
  if (s->xscale == REP_CATEGORY)
    return rep_axis_cats("point", s->points, s->n_points);
  rep_axis a = rep_axis_make(s->xscale, s->key, NULL);
  for (int i = 0; i < s->n_points; i++)
    rep_axis_add(&a, s->px[i]);
  return a;
}

/* One chart: a line per strategy of the value `get` gives (NAN: no point). */
static void chart(FILE *f, const sweep *s, const char *title, const char *ylabel, double scale,
                  double (*get)(const srow *), bool zero) {
  int n = s->n_points;
  double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
  if (x == NULL || y == NULL) {
    free(x);
    free(y);
    return;
  }
  rep_plot p = {.x = x_axis(s), .y = rep_axis_make(REP_LINEAR, ylabel, NULL)};
  p.y.zero = zero;
  for (int i = 0; i < s->n_rows; i++)
    if (s->rows[i].ok && s->rows[i].si < MAX_LINES)
      rep_axis_add(&p.y, get(&s->rows[i]) / scale);
  rep_plot_begin(&p, f, "chart", title, 960, 400, 70, 170);
  for (int k = 0; k < s->n_strats && k < MAX_LINES; k++) {
    for (int i = 0; i < n; i++) {
      x[i] = xval(s, i);
      y[i] = NAN;
    }
    for (int i = 0; i < s->n_rows; i++)
      if (s->rows[i].si == k && s->rows[i].ok)
        y[s->rows[i].pi] = get(&s->rows[i]) / scale;
    rep_plot_line(&p, x, y, n, k, false, true, s->strats[k]);
    rep_plot_legend(&p, s->strats[k], k, true, false);
  }
  rep_plot_end(&p);
  free(x);
  free(y);
}

static double get_iter(const srow *w) { return w->iter_s; }
static double get_sp_ev(const srow *w) { return w->sp_ev; }

static void cell(FILE *f, double v, const char *fmt) {
  if (isfinite(v))
    fprintf(f, fmt, v);
  else
    fputs("<td>-</td>", f);
}

static void table(FILE *f, const sweep *s) {
  fputs("<table class=\"rows\">\n<tr><th class=\"l\">point</th><th class=\"l\">strategy</th>"
        "<th>devices</th><th>iteration (ms)</th><th>synth est (ms)</th><th>vs dp-ev</th>"
        "<th>vs dp-cp</th><th>vs megatron-tp</th><th>busy</th><th>exposed comm</th>"
        "<th>peak memory</th></tr>\n",
        f);
  for (int i = 0; i < s->n_rows; i++) {
    const srow *w = &s->rows[i];
    fputs("<tr><td class=\"l\">", f);
    rep_esc(f, w->point[0] ? w->point : "-");
    fputs("</td><td class=\"l\">", f);
    rep_esc(f, w->strategy);
    fprintf(f, "</td><td>%lld</td>", (long long)w->devices);
    if (!w->ok) {
      fputs("<td class=\"l\" colspan=\"8\">failed: ", f);
      rep_esc(f, w->error);
      fputs("</td></tr>\n", f);
      continue;
    }
    char b[32];
    cell(f, w->iter_s * 1e3, "<td>%.3f</td>");
    cell(f, w->synth_s * 1e3, "<td>%.3f</td>");
    cell(f, w->sp_ev, "<td>%.3fx</td>");
    cell(f, w->sp_cp, "<td>%.3fx</td>");
    cell(f, w->sp_tp, "<td>%.3fx</td>");
    cell(f, w->busy * 100, "<td>%.1f%%</td>");
    cell(f, w->exposed * 100, "<td>%.1f%%</td>");
    fprintf(f, "<td>%s</td></tr>\n", isfinite(w->peak) ? rep_bytes(w->peak, b, sizeof b) : "-");
  }
  fputs("</table>\n", f);
}

static void sweep_render(FILE *f, const void *data) {
  const sweep *s = data;
  double max_s = 0;
  bool any_ev = false;
  for (int i = 0; i < s->n_rows; i++) {
    if (s->rows[i].ok)
      max_s = fmax(max_s, s->rows[i].iter_s);
    any_ev = any_ev || isfinite(s->rows[i].sp_ev);
  }
  char note[256];
  snprintf(note, sizeof note,
           "%d points x %d strategies; each strategy's plan simulated event by event at every "
           "point%s.",
           s->n_points, s->n_strats,
           s->n_strats > MAX_LINES ? " (the charts draw the first 16 strategies)" : "");
  rep_section(f, "iteration", "Iteration time", note);
  const char *unit;
  double k = rep_time_unit(max_s, &unit);
  char ylabel[64];
  snprintf(ylabel, sizeof ylabel, "iteration time (%s)", unit);
  chart(f, s, "simulated iteration time per strategy", ylabel, k, get_iter, true);
  if (any_ev) {
    rep_section(f, "speedup", "Speedup over dp-ev",
                "dp-ev's iteration time divided by the strategy's, at the same point (> 1: "
                "faster than data parallelism with an even batch split).");
    chart(f, s, "speedup over dp-ev", "speedup over dp-ev (x)", 1, get_sp_ev, true);
  }
  rep_section(f, "rows", "Every row", NULL);
  table(f, s);
}

const rep_kind rep_sweep_kind = {
    .read = sweep_read, .render = sweep_render, .title = sweep_title, .destroy = sweep_free};
