/* profile.c — the report of a hap-profile (hap-profile show -f json PROFILE.h5, whose "sweeps"
 * hold what was measured): GEMM throughput against the GEMM's size, point-to-point and collective
 * bandwidth (size / p50 time) against the message size, measured points and the fitted
 * alpha-beta pieces t(S) = alpha + S / beta, and the pieces in tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

enum { MAX_PIECES = 8, MAX_SERIES = 12, MAX_SIZES = 4096, FIT_POINTS = 64 };

/* A measured sweep: sizes (bytes or FLOP) and times (s), and its fit when it has one. */
typedef struct curve {
  char name[160];
  int n;
  double *x, *y; /* size, p50 time (s) or, for GEMMs, FLOP/s */
  int n_pieces;
  double upper[MAX_PIECES], alpha[MAX_PIECES], beta[MAX_PIECES]; /* bytes, s, bytes/s */
} curve;

typedef struct profile {
  const char *name, *tool, *backend, *created;
  int n_gemm, n_p2p, n_coll;
  curve *gemm, *p2p, *coll;
} profile;

static void free_curves(curve *c, int n) {
  for (int i = 0; c != NULL && i < n; i++) {
    free(c[i].x);
    free(c[i].y);
  }
  free(c);
}

static void profile_free(void *data) {
  profile *p = data;
  if (p == NULL)
    return;
  free_curves(p->gemm, p->n_gemm);
  free_curves(p->p2p, p->n_p2p);
  free_curves(p->coll, p->n_coll);
  free(p);
}

static hap_status alloc_points(const hap_jr *r, curve *c, size_t n) {
  c->x = calloc(n + 1, sizeof *c->x);
  c->y = calloc(n + 1, sizeof *c->y);
  return c->x == NULL || c->y == NULL ? hap_jr_oom(r) : HAP_OK;
}

/* A GEMM sweep of one device: {"device", "samples": [{"m", "n", "k", "dtype", "seconds"}]}. */
static hap_status read_gemm(const hap_jr *r, const json_t *o, const char *path, curve *c) {
  const char *device, *model = "";
  const json_t *samples;
  hap_jpath sp;
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "an object {\"device\", \"samples\"}"));
  HAP_TRY(rep_get_text(r, o, path, "device", true, &device));
  HAP_TRY(rep_get_text(r, o, path, "model", false, &model));
  HAP_TRY(
      rep_get_array(r, o, path, "samples", true, "an array of GEMM samples", MAX_SIZES, &samples));
  hap_jpath_key(sp, path, "samples");
  size_t n = json_array_size(samples);
  HAP_TRY(alloc_points(r, c, n));
  const char *dtype0 = NULL;
  for (size_t i = 0; i < n; i++) {
    hap_jpath p;
    const json_t *s = json_array_get(samples, i);
    int64_t m, nn, k;
    double secs;
    const char *dtype;
    hap_jpath_index(p, sp, i);
    HAP_TRY(hap_jr_want_type(r, s, JSON_OBJECT, p, "a GEMM sample {\"m\", \"n\", \"k\", ...}"));
    HAP_TRY(rep_get_int(r, s, p, "m", true, 1, INT32_MAX, "a dimension >= 1", &m));
    HAP_TRY(rep_get_int(r, s, p, "n", true, 1, INT32_MAX, "a dimension >= 1", &nn));
    HAP_TRY(rep_get_int(r, s, p, "k", true, 1, INT32_MAX, "a dimension >= 1", &k));
    HAP_TRY(rep_get_text(r, s, p, "dtype", true, &dtype));
    HAP_TRY(rep_get_amount(r, s, p, "seconds", true, HAP_JR_POSITIVE, "a time in s", &secs));
    c->x[i] = 2.0 * (double)m * (double)nn * (double)k;
    c->y[i] = c->x[i] / secs;
    dtype0 = dtype0 ? dtype0 : dtype;
  }
  c->n = (int)n;
  snprintf(c->name, sizeof c->name, "%s%s%s%s%s", device, model[0] ? " (" : "", model,
           model[0] ? ")" : "", dtype0 && strcmp(dtype0, "float32") != 0 ? " fp16/bf16" : "");
  return HAP_OK;
}

/* "pieces": [{"below_bytes"?, "alpha_s", "beta_Bps"}, ...], the last without below_bytes. */
static hap_status read_pieces(const hap_jr *r, const json_t *o, const char *path, curve *c) {
  const json_t *pieces;
  hap_jpath pp;
  HAP_TRY(rep_get_array(r, o, path, "pieces", true, "an array of 1 to 8 fitted pieces", MAX_PIECES,
                        &pieces));
  hap_jpath_key(pp, path, "pieces");
  c->n_pieces = (int)json_array_size(pieces);
  if (c->n_pieces == 0)
    return hap_jr_fail(r, HAP_EPARSE, pp, "is empty, expected 1 to 8 fitted pieces");
  for (int i = 0; i < c->n_pieces; i++) {
    hap_jpath p;
    const json_t *s = json_array_get(pieces, (size_t)i);
    hap_jpath_index(p, pp, (size_t)i);
    HAP_TRY(hap_jr_want_type(r, s, JSON_OBJECT, p, "a piece {\"alpha_s\", \"beta_Bps\"}"));
    c->upper[i] = INFINITY;
    bool last = i == c->n_pieces - 1;
    HAP_TRY(rep_get_amount(r, s, p, "below_bytes", !last, HAP_JR_POSITIVE, "a size in bytes",
                           &c->upper[i]));
    if (i > 0 && !(c->upper[i] > c->upper[i - 1]))
      return hap_jr_fail(r, HAP_EPARSE, p,
                         "below_bytes is %g, expected more than the previous "
                         "piece's %g",
                         c->upper[i], c->upper[i - 1]);
    HAP_TRY(rep_get_amount(r, s, p, "alpha_s", true, HAP_JR_NON_NEGATIVE, "a latency in s",
                           &c->alpha[i]));
    HAP_TRY(rep_get_amount(r, s, p, "beta_Bps", true, HAP_JR_POSITIVE, "a bandwidth in bytes/s",
                           &c->beta[i]));
  }
  return HAP_OK;
}

/* "sizes_bytes" and "p50_s", arrays of one length. */
static hap_status read_sizes(const hap_jr *r, const json_t *o, const char *path, curve *c) {
  const json_t *sizes, *p50;
  hap_jpath sp, tp;
  HAP_TRY(rep_get_array(r, o, path, "sizes_bytes", true, "an array of message sizes in bytes",
                        MAX_SIZES, &sizes));
  HAP_TRY(
      rep_get_array(r, o, path, "p50_s", true, "an array of median times in s", MAX_SIZES, &p50));
  hap_jpath_key(sp, path, "sizes_bytes");
  hap_jpath_key(tp, path, "p50_s");
  size_t n = json_array_size(sizes);
  if (json_array_size(p50) != n)
    return hap_jr_fail(r, HAP_EPARSE, tp, "has %zu times, expected %zu (one per size)",
                       json_array_size(p50), n);
  HAP_TRY(alloc_points(r, c, n));
  for (size_t i = 0; i < n; i++) {
    hap_jpath p;
    HAP_TRY(hap_jr_want_amount(r, json_array_get(sizes, i), hap_jpath_index(p, sp, i),
                               HAP_JR_NON_NEGATIVE, "a size in bytes", &c->x[i]));
    HAP_TRY(hap_jr_want_amount(r, json_array_get(p50, i), hap_jpath_index(p, tp, i),
                               HAP_JR_NON_NEGATIVE, "a time in s", &c->y[i]));
  }
  c->n = (int)n;
  return read_pieces(r, o, path, c);
}

static hap_status read_p2p(const hap_jr *r, const json_t *o, const char *path, curve *c) {
  const char *src, *dst;
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "a p2p sweep {\"src\", \"dst\", ...}"));
  HAP_TRY(rep_get_text(r, o, path, "src", true, &src));
  HAP_TRY(rep_get_text(r, o, path, "dst", true, &dst));
  snprintf(c->name, sizeof c->name, "%s -> %s", src, dst);
  return read_sizes(r, o, path, c);
}

static hap_status read_coll(const hap_jr *r, const json_t *o, const char *path, curve *c) {
  const char *kind, *group;
  int64_t ranks = 0;
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "a collective sweep {\"kind\", ...}"));
  HAP_TRY(rep_get_text(r, o, path, "kind", true, &kind));
  HAP_TRY(rep_get_text(r, o, path, "group", true, &group));
  HAP_TRY(rep_get_int(r, o, path, "ranks", false, 1, INT32_MAX, "a rank count >= 1", &ranks));
  snprintf(c->name, sizeof c->name, "%s %s (%lld ranks)", kind, group, (long long)ranks);
  return read_sizes(r, o, path, c);
}

typedef hap_status (*curve_reader)(const hap_jr *, const json_t *, const char *, curve *);

static hap_status read_list(const hap_jr *r, const json_t *sw, const char *key,
                            const char *expected, curve_reader fn, curve **out, int *n_out) {
  const json_t *a;
  hap_jpath path;
  HAP_TRY(rep_get_array(r, sw, "sweeps", key, false, expected, REP_MAX_ITEMS, &a));
  size_t n = json_array_size(a);
  *out = calloc(n + 1, sizeof **out);
  if (*out == NULL)
    return hap_jr_oom(r);
  hap_jpath_key(path, "sweeps", key);
  for (size_t i = 0; i < n; i++) {
    hap_jpath p;
    (*n_out)++; /* counted before reading: the free releases a half-read curve too */
    HAP_TRY(fn(r, json_array_get(a, i), hap_jpath_index(p, path, i), &(*out)[i]));
  }
  return HAP_OK;
}

static hap_status read_all(const hap_jr *r, const json_t *root, profile *p) {
  const json_t *sw;
  HAP_TRY(rep_get_text(r, root, "", "name", true, &p->name));
  HAP_TRY(rep_get_object(r, root, "", "sweeps", true,
                         "what a profile measured: hap-profile show -f json of a .h5 profile (a "
                         "cluster spec or hap-cluster file has no sweeps)",
                         &sw));
  p->tool = p->backend = p->created = "";
  HAP_TRY(rep_get_text(r, sw, "sweeps", "tool", false, &p->tool));
  HAP_TRY(rep_get_text(r, sw, "sweeps", "backend", false, &p->backend));
  HAP_TRY(rep_get_text(r, sw, "sweeps", "created", false, &p->created));
  HAP_TRY(read_list(r, sw, "gemm", "an array of GEMM sweeps", read_gemm, &p->gemm, &p->n_gemm));
  HAP_TRY(read_list(r, sw, "p2p", "an array of p2p sweeps", read_p2p, &p->p2p, &p->n_p2p));
  return read_list(r, sw, "collectives", "an array of collective sweeps", read_coll, &p->coll,
                   &p->n_coll);
}

static hap_status profile_read(const hap_jr *r, const json_t *root, void **data) {
  profile *p = calloc(1, sizeof *p);
  if (p == NULL)
    return hap_jr_oom(r);
  hap_status st = read_all(r, root, p);
  if (st != HAP_OK) {
    profile_free(p);
    return st;
  }
  *data = p;
  return HAP_OK;
}

static void profile_title(const void *data, char *buf, size_t len) {
  const profile *p = data;
  snprintf(buf, len, "hap profile: %s", p->name);
}

/* ---- charts -------------------------------------------------------------------------------- */

static const char *tick_bytes(double v, char *buf, size_t len) { return rep_bytes(v, buf, len); }

static void gemm_chart(FILE *f, const profile *p) {
  double max = 0;
  for (int i = 0; i < p->n_gemm; i++)
    for (int j = 0; j < p->gemm[i].n; j++)
      max = fmax(max, p->gemm[i].y[j]);
  char unit[16], ylabel[64];
  double k = rep_rate_unit(max, "FLOP/s", unit, sizeof unit);
  snprintf(ylabel, sizeof ylabel, "throughput (%s)", unit);
  rep_plot pl = {.x = rep_axis_make(REP_LOG10, "GEMM size (FLOP per call, 2 m n k)", NULL),
                 .y = rep_axis_make(REP_LINEAR, ylabel, NULL)};
  pl.y.zero = true;
  for (int i = 0; i < p->n_gemm && i < MAX_SERIES; i++)
    for (int j = 0; j < p->gemm[i].n; j++) {
      rep_axis_add(&pl.x, p->gemm[i].x[j]);
      rep_axis_add(&pl.y, p->gemm[i].y[j] / k);
    }
  rep_plot_begin(&pl, f, "chart", "GEMM throughput against size", 1100, 420, 70, 300);
  for (int i = 0; i < p->n_gemm && i < MAX_SERIES; i++) {
    const curve *c = &p->gemm[i];
    double *y = malloc(sizeof(double) * (size_t)(c->n + 1));
    if (y == NULL)
      break;
    for (int j = 0; j < c->n; j++)
      y[j] = c->y[j] / k;
    rep_plot_points(&pl, c->x, y, c->n, i, c->name);
    rep_plot_legend(&pl, c->name, i, false, false);
    free(y);
  }
  rep_plot_end(&pl);
}

/* The fit's time at S bytes. */
static double fit_time(const curve *c, double s) {
  int i = 0;
  while (i < c->n_pieces - 1 && s >= c->upper[i])
    i++;
  return c->alpha[i] + s / c->beta[i];
}

/* Bandwidth against size: measured size / p50 (markers) and size / fit (dashed, one line per
 * piece, so the breaks between pieces show). */
static void bw_chart(FILE *f, const char *title, const curve *cs, int n) {
  double max = 0;
  for (int i = 0; i < n && i < MAX_SERIES; i++)
    for (int j = 0; j < cs[i].n; j++)
      if (cs[i].y[j] > 0)
        max = fmax(max, cs[i].x[j] / cs[i].y[j]);
  char unit[16], ylabel[64];
  double k = rep_rate_unit(max, "B/s", unit, sizeof unit);
  snprintf(ylabel, sizeof ylabel, "bandwidth, size / time (%s)", unit);
  rep_plot pl = {.x = rep_axis_make(REP_LOG2, "message size", tick_bytes),
                 .y = rep_axis_make(REP_LINEAR, ylabel, NULL)};
  pl.y.zero = true;
  for (int i = 0; i < n && i < MAX_SERIES; i++)
    for (int j = 0; j < cs[i].n; j++) {
      rep_axis_add(&pl.x, cs[i].x[j]);
      if (cs[i].y[j] > 0)
        rep_axis_add(&pl.y, cs[i].x[j] / cs[i].y[j] / k);
    }
  rep_plot_begin(&pl, f, "chart", title, 1100, 420, 70, 300);
  for (int i = 0; i < n && i < MAX_SERIES; i++) {
    const curve *c = &cs[i];
    double *bw = malloc(sizeof(double) * (size_t)(c->n + 1));
    if (bw == NULL)
      break;
    double lo = INFINITY, hi = 0;
    for (int j = 0; j < c->n; j++) {
      bw[j] = c->y[j] > 0 ? c->x[j] / c->y[j] / k : NAN;
      if (c->x[j] > 0) {
        lo = fmin(lo, c->x[j]);
        hi = fmax(hi, c->x[j]);
      }
    }
    rep_plot_line(&pl, c->x, bw, c->n, i, false, true, c->name);
    free(bw);
    char fit_name[200];
    snprintf(fit_name, sizeof fit_name, "%s: fit", c->name);
    for (int piece = 0; piece < c->n_pieces && hi > 0; piece++) {
      double a = piece > 0 ? fmax(lo, c->upper[piece - 1]) : lo;
      double b = fmin(hi, c->upper[piece]);
      if (!(b > a))
        continue;
      double x[FIT_POINTS], y[FIT_POINTS];
      for (int j = 0; j < FIT_POINTS; j++) {
        x[j] = a * pow(b / a, j / (FIT_POINTS - 1.0));
        y[j] = x[j] / fit_time(c, fmin(x[j], b * (1 - 1e-12))) / k;
      }
      rep_plot_line(&pl, x, y, FIT_POINTS, i, true, false, fit_name);
    }
    rep_plot_legend(&pl, c->name, i, true, false);
  }
  if (n > 0)
    rep_plot_legend(&pl, "dashed: the fitted pieces", 7, true, true);
  rep_plot_end(&pl);
  if (n > MAX_SERIES)
    fprintf(f, "<p class=\"note\">(the first %d of %d sweeps)</p>\n", MAX_SERIES, n);
}

static void fit_table(FILE *f, const curve *cs, int n) {
  fputs("<table class=\"fits\">\n<tr><th class=\"l\">sweep</th><th>sizes</th><th class=\"l\">"
        "piece (sizes)</th><th>alpha (us)</th><th>beta (GB/s)</th></tr>\n",
        f);
  for (int i = 0; i < n; i++) {
    const curve *c = &cs[i];
    for (int k = 0; k < c->n_pieces; k++) {
      char lo[32], hi[32], range[80];
      if (c->n_pieces == 1)
        snprintf(range, sizeof range, "all");
      else if (k == 0)
        snprintf(range, sizeof range, "below %s", rep_bytes(c->upper[0], hi, sizeof hi));
      else if (k == c->n_pieces - 1)
        snprintf(range, sizeof range, "from %s", rep_bytes(c->upper[k - 1], lo, sizeof lo));
      else
        snprintf(range, sizeof range, "%s .. %s", rep_bytes(c->upper[k - 1], lo, sizeof lo),
                 rep_bytes(c->upper[k], hi, sizeof hi));
      fputs("<tr><td class=\"l\">", f);
      rep_esc(f, k == 0 ? c->name : "");
      fprintf(f, "</td><td>%d</td><td class=\"l\">%s</td><td>%.2f</td><td>%.3f</td></tr>\n", c->n,
              range, c->alpha[k] * 1e6, c->beta[k] / 1e9);
    }
  }
  fputs("</table>\n", f);
}

static void profile_render(FILE *f, const void *data) {
  const profile *p = data;
  char note[512];
  snprintf(note, sizeof note,
           "%s, backend %s, created %s: %d GEMM sweeps, %d p2p sweeps, %d "
           "collective sweeps.",
           p->tool[0] ? p->tool : "hap-profile", p->backend[0] ? p->backend : "?",
           p->created[0] ? p->created : "?", p->n_gemm, p->n_p2p, p->n_coll);
  rep_para(f, "note", note);
  rep_section(f, "gemm", "GEMM throughput",
              "Each device's GEMM sweep, one point per shape: FLOP per call against FLOP/s (at the "
              "median time).");
  if (p->n_gemm > 0)
    gemm_chart(f, p);
  else
    rep_para(f, "note", "(no GEMM sweep: measured with --only comm)");
  rep_section(f, "p2p", "Point-to-point bandwidth",
              "Every measured device pair: message size over the median time, and the "
              "piecewise alpha-beta fit the cluster model uses.");
  if (p->n_p2p > 0) {
    bw_chart(f, "point-to-point bandwidth against size", p->p2p, p->n_p2p);
    fit_table(f, p->p2p, p->n_p2p);
  } else {
    rep_para(f, "note", "(no p2p sweep)");
  }
  rep_section(f, "collectives", "Collective bandwidth",
              "Every collective over every group: message size (nccl-tests' meaning) over the "
              "median time, and its fitted pieces.");
  if (p->n_coll > 0) {
    bw_chart(f, "collective bandwidth against size", p->coll, p->n_coll);
    fit_table(f, p->coll, p->n_coll);
  } else {
    rep_para(f, "note", "(no collective sweep)");
  }
}

const rep_kind rep_profile_kind = {.read = profile_read,
                                   .render = profile_render,
                                   .title = profile_title,
                                   .destroy = profile_free};
