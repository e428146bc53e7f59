/* engine.h — the discrete-event simulator over explicit per-device task lists: devices with a
 * compute and a communication stream, fixed-duration tasks, collectives that start when every
 * member has reached them, and transfers that share link resources fairly. It knows nothing of
 * graphs or plans: the lowering (or a test, or a benchmark) builds task lists through this API.
 * Ownership: hap_sim_create returns an owned engine freed with hap_sim_destroy; it copies every
 * name and array it is given. Results (hap_sim_results, records) belong to the engine and stay
 * valid until the next add, run or destroy. Model and conventions: docs/simulation.md. */
#ifndef HAP_SIMULATE_ENGINE_H
#define HAP_SIMULATE_ENGINE_H

#include <stdint.h>

#include "base/status.h"

typedef enum hap_sim_stream {
  HAP_SIM_COMPUTE = 0, /* kernels */
  HAP_SIM_COMM,        /* collectives and transfers, overlapping the compute stream */
  HAP_SIM_N_STREAMS
} hap_sim_stream;

typedef enum hap_sim_kind {
  HAP_SIM_FIXED = 0,  /* runs for duration_s once its stream is free and its dependencies done */
  HAP_SIM_COLLECTIVE, /* one task per member device; all members start and end together */
  HAP_SIM_TRANSFER    /* moves `bytes` over shared resources: latency_s + fair-shared flow */
} hap_sim_kind;

/* duration_s of a task whose time the run's duration callback supplies. */
#define HAP_SIM_DURATION_FN (-1.0)

/* A task to add. Zero-initialise, then set what applies (a zeroed task is a FIXED compute task
 * on device 0 with no dependencies). */
typedef struct hap_sim_task {
  const char *name; /* copied; the join key with the measured twin, e.g. "layers.0.fc1.fwd" */
  int32_t device;   /* 0 .. n_devices-1 */
  hap_sim_stream stream;
  hap_sim_kind kind;
  double duration_s;   /* FIXED, COLLECTIVE: s >= 0, or HAP_SIM_DURATION_FN; TRANSFER: unused */
  double flops;        /* FLOP, carried for reports */
  double bytes;        /* bytes, carried for reports; TRANSFER: the size moved */
  const int32_t *deps; /* ids of tasks that must finish first (already added, any device) */
  int32_t n_deps;      /* copied */
  int32_t collective;  /* COLLECTIVE: id from hap_sim_new_collective */
  const int32_t *path; /* TRANSFER: resource ids it crosses (no repeats), copied */
  int32_t n_path;      /* TRANSFER: >= 1 */
  double latency_s;    /* TRANSFER: fixed time before the bytes flow, s */
} hap_sim_task;

/* One task as scheduled (or, inside a duration callback, as added: times are 0 there). */
typedef struct hap_sim_record {
  int32_t task;     /* id, in order of addition */
  const char *name; /* owned by the engine */
  int32_t device;
  hap_sim_stream stream;
  hap_sim_kind kind;
  int32_t collective; /* COLLECTIVE: its id; -1 otherwise */
  double ready_s;     /* reached the head of its stream with its dependencies done, s */
  double start_s;     /* began running (collectives: when the last member arrived), s */
  double end_s;       /* s */
  double flops;       /* FLOP */
  double bytes;       /* bytes */
} hap_sim_record;

/* Per-device accounting over [0, makespan]. For each stream busy + idle = makespan; for the
 * device active + idle = makespan, where active counts time with either stream busy. A collective
 * member waiting for the other members is idle, not busy. */
typedef struct hap_sim_device_stats {
  double busy_s[HAP_SIM_N_STREAMS];        /* sum of task run times per stream, s */
  double stream_idle_s[HAP_SIM_N_STREAMS]; /* makespan - busy_s, s */
  double active_s;                         /* either stream busy, s */
  double idle_s;                           /* neither stream busy, s */
  double overlap_s;                        /* both streams busy, s */
  double comm_s;                           /* communication stream busy, s */
  double exposed_comm_s;                   /* comm busy while compute idle, s */
  int32_t n_tasks;
} hap_sim_device_stats;

/* How a critical-path step waited for the step before it. */
typedef enum hap_sim_edge {
  HAP_SIM_EDGE_START = 0,  /* first step: started at time 0 with nothing to wait for */
  HAP_SIM_EDGE_STREAM,     /* its stream predecessor finished */
  HAP_SIM_EDGE_DEPENDENCY, /* a dependency finished */
  HAP_SIM_EDGE_COLLECTIVE  /* a collective member waited for the last member to arrive */
} hap_sim_edge;

typedef struct hap_sim_step {
  int32_t task;
  hap_sim_edge via;
} hap_sim_step;

typedef struct hap_sim_results {
  double makespan_s; /* iteration time: the last end, s */
  int64_t n_events;  /* events processed */
  int32_t n_tasks, n_devices;
  const hap_sim_device_stats *devices; /* [n_devices] */
  /* The chain that determined the makespan, earliest first: from the task that finished last,
   * back through whichever predecessor (stream, dependency, or last collective member to arrive)
   * finished last. */
  const hap_sim_step *critical;
  int32_t n_critical;
} hap_sim_results;

/* Supplies the duration of a task added with HAP_SIM_DURATION_FN: called once per such task per
 * run, in id order, before the first event. Return HAP_OK and *seconds >= 0 (finite), or a
 * status (with `err` filled) that aborts the run. */
typedef hap_status (*hap_sim_duration_fn)(void *ctx, const hap_sim_record *task, double *seconds,
                                          hap_err *err);

typedef struct hap_sim_options {
  hap_sim_duration_fn duration_fn; /* may be NULL when no task asks for it */
  void *ctx;
} hap_sim_options;

/* Visits one scheduled task; a status other than HAP_OK (with `err` filled) stops the visit and
 * is returned. */
typedef hap_status (*hap_sim_visit_fn)(void *ctx, const hap_sim_record *r, hap_err *err);

typedef struct hap_sim hap_sim;

hap_status hap_sim_create(int32_t n_devices, hap_sim **out, hap_err *err);
void hap_sim_destroy(hap_sim *s);

/* A shared link resource (e.g. "host v100-0 NIC out") of bandwidth_Bps bytes/s (> 0). */
hap_status hap_sim_add_resource(hap_sim *s, const char *name, double bandwidth_Bps, int32_t *id,
                                hap_err *err);
/* Change a resource's bandwidth between runs (what-if sweeps). */
hap_status hap_sim_set_bandwidth(hap_sim *s, int32_t resource, double bandwidth_Bps, hap_err *err);
/* A new collective id; its members are the COLLECTIVE tasks added with it (distinct devices).
 * Their run time is the largest of the members' durations. */
hap_status hap_sim_new_collective(hap_sim *s, int32_t *id, hap_err *err);

/* Add a task; on a device's stream tasks run in the order they were added. *id may be NULL. */
hap_status hap_sim_add_task(hap_sim *s, const hap_sim_task *t, int32_t *id, hap_err *err);
/* Make `task` wait for `on` (both already added, any order): lets a lowering add edges later.
 * A cycle is reported by hap_sim_run as a deadlock. */
hap_status hap_sim_add_dep(hap_sim *s, int32_t task, int32_t on, hap_err *err);

/* Lengthen a FIXED task added with a duration (not HAP_SIM_DURATION_FN) by `seconds` >= 0: its
 * duration becomes duration + seconds (a run of back-to-back work that grows after it was added,
 * e.g. a chain of kernels). */
hap_status hap_sim_extend(hap_sim *s, int32_t task, double seconds, hap_err *err);

int32_t hap_sim_n_tasks(const hap_sim *s);
int32_t hap_sim_n_devices(const hap_sim *s);

/* Simulate every task (opt may be NULL). May be called again, e.g. after hap_sim_set_bandwidth
 * or with another duration callback. A deadlock (collectives issued in different orders on their
 * members, a dependency on a task queued behind it, a cycle) fails with HAP_EINVAL and one line
 * naming a stuck task per device. */
hap_status hap_sim_run(hap_sim *s, const hap_sim_options *opt, hap_err *err);

/* The last successful run's results, or NULL when there is none (or tasks were added since). */
const hap_sim_results *hap_sim_results_get(const hap_sim *s);

/* One task of the last successful run. */
hap_status hap_sim_task_record(const hap_sim *s, int32_t task, hap_sim_record *out, hap_err *err);

/* Visit every task of the last successful run in id order (per stream, that is start order). */
hap_status hap_sim_visit(const hap_sim *s, hap_sim_visit_fn fn, void *ctx, hap_err *err);

const char *hap_sim_stream_name(hap_sim_stream st); /* "compute", "comm" */
const char *hap_sim_kind_name(hap_sim_kind k);      /* "fixed", "collective", "transfer" */
const char *hap_sim_edge_name(hap_sim_edge e);      /* "start", "stream", "dependency", ... */

#endif
