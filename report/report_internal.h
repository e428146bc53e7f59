/* report_internal.h — what the report kinds share: the page (html.c), the SVG plots (plot.c) and
 * the readers and renderers of each kind (sweep.c, plan.c, run.c, profile.c). Private to report/.
 * A kind reads the whole document into its own struct first (every failure one line through the
 * hap_jr), then renders from that struct, so rendering cannot fail but for the stream. Strings in
 * the structs belong to the jansson document, which outlives them. */
#ifndef HAP_REPORT_INTERNAL_H
#define HAP_REPORT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/json_read.h"
#include "report/report.h"

/* ---- one kind --------------------------------------------------------------------------- */

typedef struct rep_kind {
  /* Check `root` and build the kind's data (*data, freed by destroy). */
  hap_status (*read)(const hap_jr *r, const json_t *root, void **data);
  /* Write the page's body sections. */
  void (*render)(FILE *f, const void *data);
  /* The page's title, e.g. "hap-sim sweep: bert-base on paper-hetero" (into buf). */
  void (*title)(const void *data, char *buf, size_t len);
  void (*destroy)(void *data);
} rep_kind;

extern const rep_kind rep_sweep_kind, rep_plan_kind, rep_run_kind, rep_profile_kind;

/* ---- html.c: the page ------------------------------------------------------------------- */

/* `s` as XML character data or an attribute value: & < > " ' as entities; characters XML 1.0
 * forbids (controls but tab and newline, U+FFFE, U+FFFF) as U+FFFD. */
void rep_esc(FILE *f, const char *s);
/* <!DOCTYPE html>, head with the inline style sheet, <h1>title</h1> and the source line. */
void rep_page_begin(FILE *f, const char *title, const char *kind, const char *source);
void rep_page_end(FILE *f);
/* <h2 id="id">text</h2> and an optional paragraph (escaped; NULL = none). */
void rep_section(FILE *f, const char *id, const char *heading, const char *note);
/* A paragraph of escaped text with class `cls` (NULL = none). */
void rep_para(FILE *f, const char *cls, const char *text);

/* The palette: colour i (any i >= 0; repeats after 8). */
const char *rep_color(int i);

/* Numbers for people: "12.3", "0.000123" -> "1.23e-04"; 4 significant digits. */
const char *rep_num(double v, char *buf, size_t len);
/* With an SI prefix: 1.5e9 -> "1.5G", 2e-6 -> "2u". */
const char *rep_si(double v, char *buf, size_t len);
/* A duration in s as "812 us", "3.41 ms", "1.20 s". */
const char *rep_dur(double s, char *buf, size_t len);
/* Bytes as "512 B", "4 KiB", "1.5 GiB" (powers of 1024, at most 3 significant digits). */
const char *rep_bytes(double b, char *buf, size_t len);

/* A display unit for values up to `max` in base units: its scale (divide by it) and name, e.g.
 * rep_time_unit(0.0123) = 1e-3 "ms". */
double rep_time_unit(double max_s, const char **name);
double rep_bytes_unit(double max_b, const char **name); /* B, KiB, MiB, GiB, TiB */
double rep_rate_unit(double max, const char *base, char *name, size_t len); /* k M G T + base */

/* ---- plot.c: SVG charts ----------------------------------------------------------------- */

typedef enum rep_scale { REP_LINEAR, REP_LOG10, REP_LOG2, REP_CATEGORY } rep_scale;

/* Tick label of v (a value on the axis, in display units) into buf. */
typedef const char *(*rep_tick_fmt)(double v, char *buf, size_t len);

typedef struct rep_axis {
  rep_scale scale;
  const char *label;       /* with its unit: "iteration time (ms)" */
  rep_tick_fmt fmt;        /* NULL: rep_num */
  bool zero;               /* REP_LINEAR: the range includes 0 */
  bool any;                /* a value was added */
  double lo, hi;           /* data range, then the drawn range (rep_plot_begin) */
  const char *const *cats; /* REP_CATEGORY: the labels, category i at value i */
  int n_cats;
} rep_axis;

/* An axis of `scale`; for REP_CATEGORY give the labels. */
rep_axis rep_axis_make(rep_scale scale, const char *label, rep_tick_fmt fmt);
rep_axis rep_axis_cats(const char *label, const char *const *cats, int n);
/* Widen the range to hold v (non-finite values, and values <= 0 on a log axis, are ignored). */
void rep_axis_add(rep_axis *a, double v);

typedef struct rep_plot {
  FILE *f;
  rep_axis x, y;         /* y REP_CATEGORY: category 0 at the top */
  double w, h;           /* the SVG's size, px */
  double x0, x1, y0, y1; /* the plot area, px (y0 top, y1 bottom) */
  int legend;            /* legend entries drawn so far */
} rep_plot;

/* Open an <svg> of w x h px with `title`, draw the frame, grid, ticks and axis labels. A legend
 * column of `legend_w` px (0: none) is kept right of the plot area; `left` is the room for the
 * y tick labels (0: the default). `cls` is the svg's class ("chart", "gantt"). */
void rep_plot_begin(rep_plot *p, FILE *f, const char *cls, const char *title, double w, double h,
                    double left, double legend_w);
void rep_plot_end(rep_plot *p);
/* 1, 2 or 5 times a power of ten, about range / target (range > 0). */
double rep_nice_step(double range, int target);
/* Pixel of a value on an axis (clamped to the plot area's neighbourhood). */
double rep_plot_px(const rep_plot *p, double x);
double rep_plot_py(const rep_plot *p, double y);
/* A line through the points with finite coordinates (a gap at any other), with circle markers
 * when `markers`; dashed when `dashed`. `name` goes to the tooltip (<title>). */
void rep_plot_line(rep_plot *p, const double *x, const double *y, int n, int color, bool dashed,
                   bool markers, const char *name);
/* Circle markers alone (a scatter), with the same tooltips. */
void rep_plot_points(rep_plot *p, const double *x, const double *y, int n, int color,
                     const char *name);
/* A rectangle between data coordinates (x0, y0) and (x1, y1), with a tooltip (NULL: none). */
void rep_plot_rect(rep_plot *p, double xa, double xb, double ya, double yb, int color,
                   const char *cls, const char *tip);
/* The next legend entry: a swatch (a line when `line`, dashed when `dashed`) and the name. */
void rep_plot_legend(rep_plot *p, const char *name, int color, bool line, bool dashed);

/* ---- readers' helpers (report.c) --------------------------------------------------------- */

/* Required or optional members of an object, typed; optional absent ones keep *out. */
hap_status rep_get_text(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                        bool required, const char **out);
hap_status rep_get_num(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                       bool required, const char *what, double *out);
hap_status rep_get_amount(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                          bool required, hap_jr_range range, const char *what, double *out);
hap_status rep_get_int(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                       bool required, int64_t lo, int64_t hi, const char *what, int64_t *out);
hap_status rep_get_bool(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                        bool required, bool *out);
/* An array member of at most `max` entries (*out NULL when optional and absent). */
hap_status rep_get_array(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                         bool required, const char *expected, size_t max, const json_t **out);
/* An object member (*out NULL when optional and absent). */
hap_status rep_get_object(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                          bool required, const char *expected, const json_t **out);

/* Stop reading past this many array entries (a report of a bigger input says what it left). */
#define REP_MAX_ITEMS 1000000

#endif
