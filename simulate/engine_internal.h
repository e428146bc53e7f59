/* engine_internal.h — the engine's storage, shared by engine.c (building, accessors),
 * engine_run.c (preparation and the event loop) and engine_report.c (statistics, critical path,
 * deadlock message). Private to simulate/. Tasks are stored as parallel arrays indexed by id. */
#ifndef HAP_SIMULATE_ENGINE_INTERNAL_H
#define HAP_SIMULATE_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simulate/engine.h"

/* One pending event: a task, collective or transfer reaching a point in time. */
typedef enum sim_event_kind {
  SIM_EV_FINISH = 0, /* id = task: a FIXED task (or a latency-only transfer) ends */
  SIM_EV_COLL_END,   /* id = collective: every member ends */
  SIM_EV_XFER_JOIN,  /* id = transfer: its latency is over, its bytes start to flow */
  SIM_EV_XFER_DONE   /* id = transfer: its last byte arrives (if version is current) */
} sim_event_kind;

typedef struct sim_event {
  double t_s;
  uint64_t seq; /* insertion order: ties at equal times pop first-in first-out */
  int32_t id;
  uint32_t kind_version; /* sim_event_kind in the low 2 bits, transfer version above */
} sim_event;

/* Per-run state and results; rebuilt by every hap_sim_run. */
typedef struct sim_run {
  /* per task */
  double *dur_s;    /* resolved durations, s */
  double *ready_s;  /* -1 until ready */
  double *start_s;  /* -1 until started */
  double *end_s;    /* -1 until finished */
  int32_t *pending; /* unfinished dependencies */
  int32_t *crit;    /* the finish that last enabled the task (-1: none) */
  uint8_t *crit_via;
  /* dependents: task `on` -> the tasks waiting for it (CSR over edges) */
  int64_t *succ_off; /* [n_tasks + 1] */
  int32_t *succ;
  /* streams, key = device * HAP_SIM_N_STREAMS + stream: tasks in order of addition (CSR) */
  int32_t *st_off; /* [n_keys + 1] */
  int32_t *st_list;
  int32_t *st_next; /* index of the head within the stream */
  uint8_t *st_busy; /* running, or a collective member holding it while it waits */
  /* collectives */
  int32_t *co_off; /* [n_coll + 1] */
  int32_t *co_list;
  int32_t *co_arrived;
  int32_t *co_last; /* the member whose arrival started it */
  double *co_dur_s;
  /* transfers */
  double *xf_left_bytes;
  double *xf_rate_Bps;
  double *xf_since_s; /* when xf_left_bytes was last brought up to date */
  uint32_t *xf_version;
  uint32_t *xf_mark;
  int32_t *path_pos; /* [n_path]: position of the transfer in that resource's active list */
  /* resources: the transfers flowing through each (CSR slots sized by path entries) */
  int32_t *rs_off; /* [n_res + 1] */
  int32_t *rs_list;
  int32_t *rs_count;
  /* event heap */
  sim_event *heap;
  int64_t heap_len, heap_cap;
  uint64_t seq;
  uint32_t epoch;
  double now_s;
  int32_t n_done;
  int64_t n_events;
  /* results */
  hap_sim_device_stats *dev_stats;
  hap_sim_step *path;
  hap_sim_results results;
} sim_run;

struct hap_sim {
  int32_t n_devices;
  /* tasks */
  int32_t n_tasks, cap_tasks;
  size_t *name_off; /* into names */
  int32_t *device;
  uint8_t *stream;
  uint8_t *kind;
  double *duration_s; /* as added (may be HAP_SIM_DURATION_FN) */
  double *flops;
  double *bytes;
  int32_t *aux; /* COLLECTIVE: collective id; TRANSFER: transfer index; otherwise -1 */
  /* names of tasks and resources, NUL-terminated, back to back */
  char *names;
  size_t names_len;
  int64_t names_cap;
  /* dependency edges: edge_task[i] waits for edge_on[i] */
  int32_t *edge_task, *edge_on;
  int64_t n_edges, cap_edges;
  int32_t n_collectives;
  /* transfers (index k): task, latency, and path entries [path_off[k], path_off[k+1]) */
  int32_t n_xfers, cap_xfers;
  int32_t *xf_task;
  double *xf_latency_s;
  int64_t *xf_path_off; /* [cap_xfers + 1] */
  int32_t *path_res;
  int64_t n_path, cap_path;
  /* resources */
  int32_t n_res, cap_res;
  double *res_bw_Bps;
  size_t *res_name_off;
  sim_run run;
  bool has_results;
};

static inline const char *sim_task_name(const hap_sim *s, int32_t t) {
  return s->names + s->name_off[t];
}

/* The record of task t (times from the last run when `with_times`, else 0). */
void sim_fill_record(const hap_sim *s, int32_t t, bool with_times, hap_sim_record *r);

/* engine_run.c */
void sim_run_free(sim_run *r);
hap_status sim_run_all(hap_sim *s, const hap_sim_options *opt, hap_err *err);

/* engine_report.c: after a complete run, fill the statistics and the critical path. */
hap_status sim_report(hap_sim *s, hap_err *err);
/* After a run that stopped with tasks left: the deadlock error naming a stuck task per device. */
hap_status sim_deadlock_error(const hap_sim *s, hap_err *err);

#endif
