/* html.c — the report page: escaping, head with the style sheet, sections, number formats. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/utf8.h"
#include "hap_config.h"
#include "report_internal.h"

void rep_esc(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default: {
      size_t n = *p < 0x80 ? 1 : hap_utf8_seq(p);
      if (n == 0 || (*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7F ||
          (n == 3 && p[0] == 0xEF && p[1] == 0xBF && (p[2] == 0xBE || p[2] == 0xBF))) {
        fputs("&#xFFFD;", f); /* not UTF-8 (a path's bytes), or not an XML character */
        p += n > 0 ? n - 1 : 0;
      } else {
        fwrite(p, 1, n, f);
        p += n - 1;
      }
    }
    }
  }
}

/* One style sheet for every kind: no external fonts, colours from the palette. */
static const char style[] =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px "
    "solid #ccc}"
    "p.src{color:#666;margin:0 0 12px;font-size:13px}p.note{color:#444;font-size:13px;margin:4px "
    "0}"
    "table{border-collapse:collapse;font-size:12px;margin:6px 0}"
    "th,td{border:1px solid #ddd;padding:2px 6px;text-align:right}"
    "th{background:#f3f3f3}td.l,th.l{text-align:left}td.bar{width:160px}"
    "div.bar{background:#0072b2;height:9px}"
    "svg{display:block;margin:8px 0;background:#fff}"
    "svg text{font-family:sans-serif;font-size:11px;fill:#222}"
    "svg text.title{font-size:13px;font-weight:bold}"
    "svg .grid{stroke:#e4e4e4;stroke-width:1}svg .frame{fill:none;stroke:#888}"
    "svg .tick{stroke:#888}svg rect.task{stroke:#fff;stroke-width:0.5}svg rect.thin{stroke:none}";

void rep_page_begin(FILE *f, const char *title, const char *kind, const char *source) {
  fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
        "<meta charset=\"utf-8\"/>\n<title>",
        f);
  rep_esc(f, title);
  fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body class=\"", style);
  rep_esc(f, kind);
  fputs("\">\n<h1>", f);
  rep_esc(f, title);
  fputs("</h1>\n<p class=\"src\">", f);
  rep_esc(f, "hap-report " HAP_VERSION " from ");
  rep_esc(f, source);
  fputs("</p>\n", f);
}

void rep_page_end(FILE *f) { fputs("</body>\n</html>\n", f); }

void rep_section(FILE *f, const char *id, const char *heading, const char *note) {
  fputs("<h2 id=\"", f);
  rep_esc(f, id);
  fputs("\">", f);
  rep_esc(f, heading);
  fputs("</h2>\n", f);
  if (note != NULL)
    rep_para(f, "note", note);
}

void rep_para(FILE *f, const char *cls, const char *text) {
  fputs("<p", f);
  if (cls != NULL) {
    fputs(" class=\"", f);
    rep_esc(f, cls);
    fputs("\"", f);
  }
  fputs(">", f);
  rep_esc(f, text);
  fputs("</p>\n", f);
}

/* Okabe and Ito's colour-blind-safe set, black last. */
const char *rep_color(int i) {
  static const char *const c[] = {"#0072b2", "#e69f00", "#009e73", "#d55e00",
                                  "#cc79a7", "#56b4e9", "#f0e442", "#555555"};
  return c[(i < 0 ? -i : i) % 8];
}

const char *rep_num(double v, char *buf, size_t len) {
  if (!isfinite(v))
    snprintf(buf, len, "-");
  else if (v != 0 && (fabs(v) < 1e-3 || fabs(v) >= 1e7))
    snprintf(buf, len, "%.3e", v);
  else
    snprintf(buf, len, "%.4g", v);
  return buf;
}

const char *rep_si(double v, char *buf, size_t len) {
  static const char *const big[] = {"", "k", "M", "G", "T", "P", "E"};
  static const char *const small[] = {"", "m", "u", "n", "p"};
  int i = 0;
  double a = fabs(v);
  if (a >= 1 || a == 0 || !isfinite(a)) {
    while (i < 6 && a >= 1000) {
      a /= 1000;
      i++;
    }
    snprintf(buf, len, "%.3g%s", v < 0 ? -a : a, big[i]);
  } else {
    while (i < 4 && a < 1) {
      a *= 1000;
      i++;
    }
    snprintf(buf, len, "%.3g%s", v < 0 ? -a : a, small[i]);
  }
  return buf;
}

const char *rep_dur(double s, char *buf, size_t len) {
  const char *unit;
  double k = rep_time_unit(fabs(s), &unit);
  snprintf(buf, len, "%.3g %s", s / k, unit);
  return buf;
}

const char *rep_bytes(double b, char *buf, size_t len) {
  const char *unit;
  double k = rep_bytes_unit(fabs(b), &unit);
  snprintf(buf, len, "%.3g %s", b / k, unit);
  return buf;
}

double rep_time_unit(double max_s, const char **name) {
  if (!(max_s >= 1)) {
    if (max_s >= 1e-3) {
      *name = "ms";
      return 1e-3;
    }
    if (max_s >= 1e-6 || !(max_s > 0)) {
      *name = max_s > 0 ? "us" : "s";
      return max_s > 0 ? 1e-6 : 1;
    }
    *name = "ns";
    return 1e-9;
  }
  *name = "s";
  return 1;
}

double rep_bytes_unit(double max_b, const char **name) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double k = 1;
  int i = 0;
  while (i < 4 && max_b >= 1024 * k) {
    k *= 1024;
    i++;
  }
  *name = units[i];
  return k;
}

double rep_rate_unit(double max, const char *base, char *name, size_t len) {
  static const char *const prefix[] = {"", "k", "M", "G", "T", "P"};
  double k = 1;
  int i = 0;
  while (i < 5 && max >= 1000 * k) {
    k *= 1000;
    i++;
  }
  snprintf(name, len, "%s%s", prefix[i], base);
  return k;
}
