/* json_write.c — streaming JSON writer. Layout rules (indent > 0): every element of an ordinary
 * container on its own line, indented by `indent` spaces per level; inline containers (and anything
 * inside them) on one line with ", " and ": " separators; empty containers as {} and []. With
 * indent 0 the output is compact: no whitespace at all. */
#include "base/json_write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void hap_jw_init(hap_jw *w, FILE *f, int indent) {
  memset(w, 0, sizeof *w);
  w->f = f;
  w->indent = indent < 0 ? 0 : indent;
  w->first[0] = true;
}

bool hap_jw_failed(const hap_jw *w) { return w->failed; }

static void put(hap_jw *w, const char *s) {
  if (!w->failed && fputs(s, w->f) == EOF)
    w->failed = true;
}

static void putch(hap_jw *w, char c) {
  if (!w->failed && fputc(c, w->f) == EOF)
    w->failed = true;
}

static void newline(hap_jw *w, int depth) {
  putch(w, '\n');
  for (int i = 0; i < depth * w->indent; i++)
    putch(w, ' ');
}

/* Separator and indentation before a value or a key. */
static void before_item(hap_jw *w) {
  if (w->after_key) {
    w->after_key = false;
    return;
  }
  if (w->depth == 0) {
    if (!w->first[0])
      w->failed = true; /* a document holds one value */
    w->first[0] = false;
    return;
  }
  bool first = w->first[w->depth];
  w->first[w->depth] = false;
  if (!first)
    putch(w, ',');
  if (w->inline_depth > 0) {
    if (!first && w->indent > 0)
      putch(w, ' ');
  } else if (w->indent > 0) {
    newline(w, w->depth);
  }
}

static void begin(hap_jw *w, char open, bool inl) {
  before_item(w);
  if (w->depth >= HAP_JW_MAX_DEPTH) {
    w->failed = true;
    return;
  }
  putch(w, open);
  w->depth++;
  w->first[w->depth] = true;
  if (inl || w->inline_depth > 0)
    w->inline_depth++;
}

static void end(hap_jw *w, char close) {
  if (w->depth == 0 || w->after_key) {
    w->failed = true;
    return;
  }
  bool empty = w->first[w->depth];
  w->depth--;
  if (w->inline_depth > 0)
    w->inline_depth--;
  else if (!empty && w->indent > 0)
    newline(w, w->depth);
  putch(w, close);
}

void hap_jw_begin_object(hap_jw *w) { begin(w, '{', false); }
void hap_jw_begin_object_inline(hap_jw *w) { begin(w, '{', true); }
void hap_jw_end_object(hap_jw *w) { end(w, '}'); }
void hap_jw_begin_array(hap_jw *w) { begin(w, '[', false); }
void hap_jw_begin_array_inline(hap_jw *w) { begin(w, '[', true); }
void hap_jw_end_array(hap_jw *w) { end(w, ']'); }

/* A JSON string literal: ", \ and control characters escaped, other bytes (UTF-8) as they are. */
static void quoted(hap_jw *w, const char *s) {
  static const char hex[] = "0123456789abcdef";
  putch(w, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      putch(w, '\\');
      putch(w, (char)*p);
    } else if (*p < 0x20) {
      char esc[7] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15], '\0'};
      put(w, esc);
    } else {
      putch(w, (char)*p);
    }
  }
  putch(w, '"');
}

void hap_jw_key(hap_jw *w, const char *key) {
  if (w->after_key) {
    w->failed = true; /* two keys in a row */
    return;
  }
  before_item(w);
  quoted(w, key ? key : "");
  put(w, w->indent > 0 ? ": " : ":");
  w->after_key = true;
}

void hap_jw_str(hap_jw *w, const char *s) {
  if (s == NULL) {
    hap_jw_null(w);
    return;
  }
  before_item(w);
  quoted(w, s);
}

void hap_jw_int(hap_jw *w, int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  before_item(w);
  put(w, buf);
}

const char *hap_format_double(double v, char *buf, size_t len) {
  static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
  if (len == 0)
    return buf;
  for (int i = 0; i < 3; i++) {
    snprintf(buf, len, fmts[i], v);
    double back = strtod(buf, NULL);
    uint64_t want_bits, got_bits;
    memcpy(&want_bits, &v, sizeof v);
    memcpy(&got_bits, &back, sizeof back);
    if (got_bits == want_bits)
      return buf;
  }
  return buf; /* %.17g always round-trips finite doubles; NaN payloads may not */
}

void hap_jw_double(hap_jw *w, double v) {
  if (!isfinite(v)) {
    hap_jw_null(w);
    return;
  }
  char buf[40];
  hap_format_double(v, buf, sizeof buf - 2);
  /* "1" would read back as a JSON integer (and "-0" as integer 0): add ".0" so it stays a real. */
  if (strpbrk(buf, ".eE") == NULL)
    strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
  before_item(w);
  put(w, buf);
}

void hap_jw_bool(hap_jw *w, bool v) {
  before_item(w);
  put(w, v ? "true" : "false");
}

void hap_jw_null(hap_jw *w) {
  before_item(w);
  put(w, "null");
}

bool hap_jw_finish(hap_jw *w) {
  if (w->depth != 0 || w->after_key)
    w->failed = true;
  putch(w, '\n');
  if (fflush(w->f) == EOF || ferror(w->f))
    w->failed = true;
  return !w->failed;
}
