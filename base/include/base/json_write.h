/* json_write.h — a small streaming JSON writer (no DOM) for graphs, plans, reports and traces.
 * Output is deterministic; doubles are written in the shortest form that reads back bit-exactly.
 * Ownership: the writer borrows the FILE; the caller opens and closes it. Errors are sticky:
 * check hap_jw_failed() once at the end. */
#ifndef HAP_JSON_WRITE_H
#define HAP_JSON_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define HAP_JW_MAX_DEPTH 32

typedef struct hap_jw {
  FILE *f;
  int indent; /* spaces per level; 0 = compact */
  int depth;
  int inline_depth;                 /* > 0: inside a container written on one line */
  bool first[HAP_JW_MAX_DEPTH + 1]; /* no element written yet at this depth */
  bool after_key;
  bool failed;
} hap_jw;

void hap_jw_init(hap_jw *w, FILE *f, int indent);
/* Containers. The _inline variants keep the whole container on one line (for shapes, small
 * records), even when indenting. */
void hap_jw_begin_object(hap_jw *w);
void hap_jw_begin_object_inline(hap_jw *w);
void hap_jw_end_object(hap_jw *w);
void hap_jw_begin_array(hap_jw *w);
void hap_jw_begin_array_inline(hap_jw *w);
void hap_jw_end_array(hap_jw *w);
void hap_jw_key(hap_jw *w, const char *key);
void hap_jw_str(hap_jw *w, const char *s);
void hap_jw_int(hap_jw *w, int64_t v);
/* Shortest round-trip form, with ".0" appended when it would otherwise read back as a JSON integer
 * ("1.0", "-0.0"); non-finite values are written as null. */
void hap_jw_double(hap_jw *w, double v);
void hap_jw_bool(hap_jw *w, bool v);
void hap_jw_null(hap_jw *w);
/* Ends the document with a newline and flushes; returns false if any write failed. */
bool hap_jw_finish(hap_jw *w);
bool hap_jw_failed(const hap_jw *w);

/* Shortest "%.{15,16,17}g" form of v that parses back to the same double; returns buf. */
const char *hap_format_double(double v, char *buf, size_t len);

#endif
