/* plot.c — SVG charts: linear, logarithmic and category axes with nice ticks, lines, rectangles
 * and a legend. Coordinates in px with one decimal; every text escaped. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report_internal.h"

enum { MAX_TICKS = 24 };
#define HUGE_VALUE 1e300 /* values beyond are ignored: ranges stay finite */

rep_axis rep_axis_make(rep_scale scale, const char *label, rep_tick_fmt fmt) {
  rep_axis a = {.scale = scale, .label = label, .fmt = fmt};
  return a;
}

rep_axis rep_axis_cats(const char *label, const char *const *cats, int n) {
  rep_axis a = {.scale = REP_CATEGORY, .label = label, .cats = cats, .n_cats = n};
  return a;
}

void rep_axis_add(rep_axis *a, double v) {
  if (!isfinite(v) || fabs(v) > HUGE_VALUE)
    return;
  if ((a->scale == REP_LOG10 || a->scale == REP_LOG2) && !(v >= 1e-300))
    return;
  if (!a->any) {
    a->lo = a->hi = v;
    a->any = true;
  }
  a->lo = fmin(a->lo, v);
  a->hi = fmax(a->hi, v);
}

double rep_nice_step(double range, int target) {
  double raw = range / target;
  double mag = pow(10, floor(log10(raw)));
  double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

typedef struct ticks {
  int n;
  double v[MAX_TICKS];
} ticks;

static void add_tick(ticks *t, double v) {
  if (t->n < MAX_TICKS)
    t->v[t->n++] = v;
}

static void finish_linear(rep_axis *a, ticks *t) {
  if (!a->any) {
    a->lo = 0;
    a->hi = 1;
  }
  if (a->zero) {
    a->lo = fmin(a->lo, 0);
    a->hi = fmax(a->hi, 0);
  }
  if (!(a->hi - a->lo > fabs(a->hi) * 1e-9)) {
    double d = fmax(fabs(a->lo) * 0.1, 1e-9);
    a->lo -= a->zero && a->lo >= 0 ? 0 : d;
    a->hi += d;
  }
  double step = rep_nice_step(a->hi - a->lo, 5);
  a->lo = floor(a->lo / step) * step;
  a->hi = ceil(a->hi / step) * step;
  for (int i = 0; i < MAX_TICKS; i++) {
    double v = a->lo + i * step;
    if (v > a->hi + step * 1e-6)
      break;
    add_tick(t, fabs(v) < step * 1e-6 ? 0 : v);
  }
}

static void finish_log(rep_axis *a, ticks *t, double base) {
  if (!a->any) {
    a->lo = 1;
    a->hi = base == 2 ? 8 : 10;
  }
  double lb = log(base);
  double e0 = floor(log(a->lo) / lb + 1e-9), e1 = ceil(log(a->hi) / lb - 1e-9);
  e0 = fmax(e0, base == 2 ? -990 : -298);
  if (e1 <= e0)
    e1 = e0 + 1;
  a->lo = pow(base, e0);
  a->hi = pow(base, e1);
  double stride = ceil((e1 - e0) / 8.0);
  for (double e = e0; e <= e1 && t->n < MAX_TICKS; e += stride)
    add_tick(t, pow(base, e));
  if (base == 10 && e1 - e0 == 1) {
    add_tick(t, 2 * a->lo);
    add_tick(t, 5 * a->lo);
  }
}

static void finish_axis(rep_axis *a, ticks *t) {
  t->n = 0;
  switch (a->scale) {
  case REP_LINEAR: finish_linear(a, t); break;
  case REP_LOG10: finish_log(a, t, 10); break;
  case REP_LOG2: finish_log(a, t, 2); break;
  case REP_CATEGORY: {
    a->lo = -0.5;
    a->hi = (a->n_cats > 0 ? a->n_cats : 1) - 0.5;
    int stride = a->n_cats / MAX_TICKS + 1;
    for (int i = 0; i < a->n_cats; i += stride)
      add_tick(t, i);
    break;
  }
  }
}

/* Where v lies on the drawn range, 0..1 (clamped a little outside; NaN stays NaN). */
static double frac(const rep_axis *a, double v) {
  double f;
  if (a->scale == REP_LOG10 || a->scale == REP_LOG2)
    f = v > 0 ? (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo)) : -0.05;
  else
    f = (v - a->lo) / (a->hi - a->lo);
  return isnan(f) ? f : fmin(fmax(f, -0.05), 1.05);
}

double rep_plot_px(const rep_plot *p, double x) { return p->x0 + frac(&p->x, x) * (p->x1 - p->x0); }

double rep_plot_py(const rep_plot *p, double y) {
  double f = frac(&p->y, y);
  if (p->y.scale == REP_CATEGORY)
    return p->y0 + f * (p->y1 - p->y0);
  return p->y1 - f * (p->y1 - p->y0);
}

enum { MAX_LABEL = 40 }; /* bytes of a category label drawn; longer ones are cut */

static const char *tick_text(const rep_axis *a, double v, char *buf, size_t len) {
  if (a->scale == REP_CATEGORY) {
    int i = (int)lround(v);
    const char *c = i >= 0 && i < a->n_cats ? a->cats[i] : "";
    size_t n = strlen(c);
    if (n <= MAX_LABEL) {
      snprintf(buf, len, "%s", c);
    } else { /* cut at a UTF-8 character boundary */
      n = MAX_LABEL - 3;
      while (n > 0 && ((unsigned char)c[n] & 0xC0) == 0x80)
        n--;
      snprintf(buf, len, "%.*s...", (int)n, c);
    }
    return buf;
  }
  if (a->fmt != NULL)
    return a->fmt(v, buf, len);
  return a->scale == REP_LOG10 ? rep_si(v, buf, len) : rep_num(v, buf, len);
}

/* The room turned x labels need below the plot, px; 0 when they fit level. */
static double x_turned(const rep_axis *a, double width) {
  if (a->scale != REP_CATEGORY || a->n_cats == 0)
    return 0;
  size_t longest = 0;
  for (int i = 0; i < a->n_cats; i++)
    longest = strlen(a->cats[i]) > longest ? strlen(a->cats[i]) : longest;
  longest = longest < MAX_LABEL ? longest : MAX_LABEL;
  return (double)a->n_cats * ((double)longest * 6.5 + 8) > width ? (double)longest * 6.2 + 12 : 0;
}

static void text(FILE *f, double x, double y, const char *anchor, const char *extra,
                 const char *s) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
  rep_esc(f, s);
  fputs("</text>\n", f);
}

void rep_plot_begin(rep_plot *p, FILE *f, const char *cls, const char *title, double w, double h,
                    double left, double legend_w) {
  ticks tx, ty;
  finish_axis(&p->x, &tx);
  finish_axis(&p->y, &ty);
  p->x0 = left > 0 ? left : 70;
  p->x1 = w - 16 - legend_w;
  double turned = x_turned(&p->x, p->x1 - p->x0);
  h += turned; /* the plot area keeps its height */
  p->f = f;
  p->w = w;
  p->h = h;
  p->y0 = 30;
  p->y1 = h - 44 - turned;
  p->legend = 0;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"%s\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n<title>",
          cls, w, h, w, h);
  rep_esc(f, title);
  fputs("</title>\n", f);
  text(f, (p->x0 + p->x1) / 2, 18, "middle", " class=\"title\"", title);
  char b[96];
  for (int i = 0; i < tx.n; i++) {
    double x = rep_plot_px(p, tx.v[i]);
    fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x, p->y0,
            x, p->y1);
    if (turned > 0) {
      char tr[96];
      snprintf(tr, sizeof tr, " transform=\"rotate(-90 %.1f %.1f)\"", x + 4, p->y1 + 8);
      text(f, x + 4, p->y1 + 8, "end", tr, tick_text(&p->x, tx.v[i], b, sizeof b));
    } else {
      text(f, x, p->y1 + 15, "middle", "", tick_text(&p->x, tx.v[i], b, sizeof b));
    }
  }
  for (int i = 0; i < ty.n; i++) {
    double y = rep_plot_py(p, ty.v[i]);
    fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", p->x0, y,
            p->x1, y);
    text(f, p->x0 - 6, y + 4, "end", "", tick_text(&p->y, ty.v[i], b, sizeof b));
  }
  fprintf(f, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n",
          p->x0, p->y0, p->x1 - p->x0, p->y1 - p->y0);
  text(f, (p->x0 + p->x1) / 2, h - 8, "middle", " class=\"axis\"", p->x.label);
  char tr[96];
  snprintf(tr, sizeof tr, " class=\"axis\" transform=\"rotate(-90 14 %.1f)\"", (p->y0 + p->y1) / 2);
  text(f, 14, (p->y0 + p->y1) / 2, "middle", tr, p->y.label);
}

void rep_plot_end(rep_plot *p) { fputs("</svg>\n", p->f); }

static void tooltip(FILE *f, const char *tip) {
  if (tip == NULL)
    return;
  fputs("<title>", f);
  rep_esc(f, tip);
  fputs("</title>", f);
}

/* One run of consecutive drawable points. */
static void polyline(rep_plot *p, const double *x, const double *y, int from, int to, int color,
                     bool dashed, const char *name) {
  if (to - from < 2)
    return;
  fprintf(p->f,
          "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
          rep_color(color), dashed ? " stroke-dasharray=\"6 4\"" : "");
  for (int i = from; i < to; i++)
    fprintf(p->f, "%s%.1f,%.1f", i > from ? " " : "", rep_plot_px(p, x[i]), rep_plot_py(p, y[i]));
  fputs("\">", p->f);
  tooltip(p->f, name);
  fputs("</polyline>\n", p->f);
}

static bool drawable(const rep_plot *p, double x, double y) {
  return !isnan(frac(&p->x, x)) && !isnan(frac(&p->y, y)) && isfinite(x) && isfinite(y);
}

void rep_plot_line(rep_plot *p, const double *x, const double *y, int n, int color, bool dashed,
                   bool markers, const char *name) {
  int from = 0;
  for (int i = 0; i <= n; i++) {
    if (i == n || !drawable(p, x[i], y[i])) {
      polyline(p, x, y, from, i, color, dashed, name);
      from = i + 1;
    }
  }
  if (markers)
    rep_plot_points(p, x, y, n, color, name);
}

void rep_plot_points(rep_plot *p, const double *x, const double *y, int n, int color,
                     const char *name) {
  for (int i = 0; i < n; i++) {
    if (!drawable(p, x[i], y[i]))
      continue;
    fprintf(p->f, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\">",
            rep_plot_px(p, x[i]), rep_plot_py(p, y[i]), rep_color(color));
    if (name != NULL) {
      char bx[48], by[48], tip[256];
      snprintf(tip, sizeof tip, "%s: %s, %s", name,
               p->x.scale == REP_CATEGORY ? "" : rep_num(x[i], bx, sizeof bx),
               rep_num(y[i], by, sizeof by));
      tooltip(p->f, tip);
    }
    fputs("</circle>\n", p->f);
  }
}

void rep_plot_rect(rep_plot *p, double xa, double xb, double ya, double yb, int color,
                   const char *cls, const char *tip) {
  double x0 = rep_plot_px(p, xa), x1 = rep_plot_px(p, xb);
  double y0 = rep_plot_py(p, ya), y1 = rep_plot_py(p, yb);
  if (isnan(x0) || isnan(x1) || isnan(y0) || isnan(y1))
    return;
  fprintf(p->f,
          "<rect class=\"%s%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
          "fill=\"%s\">",
          cls, fabs(x1 - x0) < 2 ? " thin" : "", fmin(x0, x1), fmin(y0, y1),
          fmax(fabs(x1 - x0), 0.3), fabs(y1 - y0), rep_color(color));
  tooltip(p->f, tip);
  fputs("</rect>\n", p->f);
}

void rep_plot_legend(rep_plot *p, const char *name, int color, bool line, bool dashed) {
  double x = p->x1 + 14, y = p->y0 + 8 + 17 * p->legend++;
  if (line)
    fprintf(p->f,
            "<line class=\"legend\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2\"%s/>\n",
            x, y, x + 20, y, rep_color(color), dashed ? " stroke-dasharray=\"6 4\"" : "");
  else
    fprintf(p->f,
            "<rect class=\"legend\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" "
            "fill=\"%s\"/>\n",
            x + 3, y - 5, rep_color(color));
  text(p->f, x + 26, y + 4, "start", "", name);
}
