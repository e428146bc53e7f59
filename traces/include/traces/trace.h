/* trace.h — a streaming writer for trace.json (Chrome Trace Event Format, opens in Perfetto and
 * chrome://tracing). Ownership: a hap_trace owns its output file (written to `path.tmp.<pid>`,
 * renamed into place by hap_trace_close) and copies the strings it keeps; event strings are only
 * borrowed for the call. Not thread-safe: one writer per thread, or lock around it.
 *
 * Events go straight to the file in call order (no DOM, deterministic bytes). Timestamps are
 * integer nanoseconds, written as fixed-point microseconds with 3 decimals (1234567 ns ->
 * 1234.567). Errors are sticky: the first failure makes every later call a no-op that returns the
 * same status, and hap_trace_close reports it with the path and leaves no file behind.
 *
 * Layout (docs/formats.md): one process per (timeline, rank), pid = 2*rank+1 simulated and
 * 2*rank+2 measured, so each rank's two rows sit side by side; lanes (threads) 1 compute,
 * 2 collective, 3 p2p. Complete events on one (pid, tid) lane must nest; check.h verifies it. */
#ifndef HAP_TRACE_H
#define HAP_TRACE_H

#include <math.h>
#include <stdint.h>

#include "base/status.h"

#define HAP_TRACE_FORMAT  "hap-trace"
#define HAP_TRACE_VERSION "1.0"

typedef struct hap_trace hap_trace;

typedef enum hap_trace_timeline { HAP_TRACE_SIM = 0, HAP_TRACE_MEASURED = 1 } hap_trace_timeline;

typedef enum hap_trace_lane {
  HAP_TRACE_LANE_COMPUTE = 1,
  HAP_TRACE_LANE_COLLECTIVE = 2,
  HAP_TRACE_LANE_P2P = 3
} hap_trace_lane;

/* pid of a (timeline, rank) process: 2*rank+1 simulated, 2*rank+2 measured (rank >= 0). */
int hap_trace_pid(hap_trace_timeline timeline, int rank);
/* "compute", "collective", "p2p"; NULL for other values. */
const char *hap_trace_lane_name(hap_trace_lane lane);

/* Start `path` ("-" = stdout). `tool` (may be NULL) goes to otherData.tool. The temporary file is
 * created here, so an unwritable directory fails now, with the path in the message. */
hap_status hap_trace_open(const char *path, const char *tool, hap_trace **out, hap_err *err);

/* Subtract `base_ns` from every later timestamp (e.g. the iteration start on the rank's clock);
 * recorded as otherData.base_time_ns. Only before the first timed event. A timestamp before the
 * base is an error: traces start at 0 (large epoch values lose precision in the viewers). */
hap_status hap_trace_rebase(hap_trace *t, int64_t base_ns);

/* Metadata. A process: process_name, process_sort_index and, when `label` is non-NULL,
 * process_labels. A thread (lane): thread_name and thread_sort_index = tid. */
hap_status hap_trace_process(hap_trace *t, int pid, const char *name, int sort_index,
                             const char *label);
hap_status hap_trace_thread(hap_trace *t, int pid, int tid, const char *name);
/* The standard process of a rank: pid from hap_trace_pid, name "sim | rank 3 | <device>" or
 * "meas | rank 3 | <device>" (device may be NULL), sort index pid - 1, label "simulated" or
 * "measured", and the three lanes named by hap_trace_lane_name. */
hap_status hap_trace_rank(hap_trace *t, hap_trace_timeline timeline, int rank, const char *device);

/* A complete ("X") event. Start from HAP_TRACE_EVENT_INIT: numeric args that are NaN (or not
 * finite) and strings that are NULL are left out. A twin simulated/measured pair shares `name`
 * and `task`, so trace_processor SQL can join them. */
typedef struct hap_trace_event {
  const char *name; /* required */
  const char *cat;  /* category, e.g. "compute", "collective"; NULL = none */
  int pid, tid;
  int64_t ts_ns;     /* start */
  int64_t dur_ns;    /* duration; negative values are written as 0 */
  const char *task;  /* args.task: the lowered task this event times */
  double flops;      /* args.flops */
  double bytes;      /* args.bytes */
  double sim_dur_us; /* args.sim_dur_us: the simulated twin's duration (measured events) */
  double err_pct;    /* args.err_pct: (measured - simulated) / simulated * 100 */
} hap_trace_event;

#define HAP_TRACE_EVENT_INIT                                                                       \
  {                                                                                                \
    .name = NULL, .cat = NULL, .task = NULL, .flops = NAN, .bytes = NAN, .sim_dur_us = NAN,        \
    .err_pct = NAN                                                                                 \
  }

hap_status hap_trace_complete(hap_trace *t, const hap_trace_event *e);
/* An instant ("i") marker; scope 'g' global (e.g. iteration boundaries), 'p' process, 't' thread.
 */
hap_status hap_trace_instant(hap_trace *t, const char *name, int pid, int tid, int64_t ts_ns,
                             char scope);
/* A counter ("C") sample: series `series` of counter `name` on process `pid` (e.g. "memory",
 * "allocated_MiB"); `value` must be finite. */
hap_status hap_trace_counter(hap_trace *t, const char *name, int pid, int64_t ts_ns,
                             const char *series, double value);

/* otherData key/value, written at close after format, version and tool (which are reserved);
 * setting a key again replaces its value in place. */
hap_status hap_trace_meta(hap_trace *t, const char *key, const char *value);

/* Number of events written so far (metadata included). */
int64_t hap_trace_events(const hap_trace *t);

/* Finish {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}, flush, fsync and rename
 * into place; frees `t` in every case. On any earlier or final failure the temporary is removed
 * and the first error is returned with the path. */
hap_status hap_trace_close(hap_trace *t, hap_err *err);
/* Drop the trace: remove the temporary and free `t`. NULL is a no-op. */
void hap_trace_abort(hap_trace *t);

#endif
