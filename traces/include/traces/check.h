/* check.h — reads a trace.json back and verifies what hap promises about it (docs/formats.md):
 * used by the tests and by hap-run after writing. Ownership: the report is caller-owned; nothing
 * is kept after the call. Reads the whole file with jansson (about 150k events/s). */
#ifndef HAP_TRACE_CHECK_H
#define HAP_TRACE_CHECK_H

#include <stdint.h>

#include "base/status.h"

/* The tolerance of the nesting check: 1 ns absorbs µs-with-3-decimals round trips. */
#define HAP_TRACE_NEST_TOLERANCE_NS 1

typedef struct hap_trace_check_report {
  int64_t events;    /* entries of traceEvents */
  int64_t complete;  /* "X" events */
  int64_t instants;  /* "i" / "I" events */
  int64_t counters;  /* "C" events */
  int64_t metadata;  /* "M" events */
  int64_t processes; /* distinct pids over all events */
  int64_t lanes;     /* distinct (pid, tid) holding complete events */
  int max_depth;     /* deepest nesting of complete events on one lane (1 = flat) */
  int64_t end_ns;    /* latest end (ts + dur) of any timed event, in ns */
} hap_trace_check_report;

/* Parse `path` ("-" = stdin) and verify, stopping at the first violation:
 *   - valid JSON (duplicate keys are errors) in the object form {"traceEvents":[...], ...};
 *     displayTimeUnit, if present, "ms" or "ns"; otherData, if present, an object, and when its
 *     format is "hap-trace", a version whose major this reader knows (else HAP_EVERSION);
 *   - every event an object with a string "ph"; "X" events with a string name, integer pid and
 *     tid, numeric ts >= 0 and dur >= 0; instants and counters with a name, pid and ts >= 0
 *     (counters: args of numbers, instants: scope g/p/t); "M" events with an integer pid, and for
 *     process_name / thread_name / process_labels / *_sort_index the tid and args they need;
 *   - per (pid, tid) lane the complete events nest: ordered by start, each one starts after the
 *     enclosing one ends or ends inside it (HAP_TRACE_NEST_TOLERANCE_NS slack).
 * Syntax and schema violations return HAP_EPARSE, a partial overlap HAP_EINVAL; the message names
 * the file, the JSON path and the events (both of them for an overlap). `r` (may be NULL) gets
 * the counts of what was checked. */
hap_status hap_trace_check(const char *path, hap_trace_check_report *r, hap_err *err);

#endif
