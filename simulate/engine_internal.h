/* engine_internal.h — the engine's storage, shared by engine.c (building, accessors, memory),
 * engine_run.c (preparation and the event loop) and engine_report.c (statistics, critical path,
 * deadlock message). Private to simulate/. Tasks are stored as parallel arrays indexed by id, kept
 * small (a pipelined plan has millions of tasks, and each byte per task is a page fault per 4096
 * tasks): what only some kinds carry lives in per-kind tables reached through `aux`; a stream's
 * tasks and a task's dependents are linked lists built as tasks are added, so a run starts
 * without sorting them. */
#ifndef HAP_SIMULATE_ENGINE_INTERNAL_H
#define HAP_SIMULATE_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simulate/engine.h"

/* flags[t]: the kind in the low 2 bits, and whether the run's callback supplies the duration. */
#define SIM_F_KIND        3u
#define SIM_F_DURATION_FN 4u

#define SIM_CRIT_DEP     0x80000000u
#define SIM_PENDING_MANY 255u

/* One pending event: a task, collective or transfer reaching a point in time. */
typedef enum sim_event_kind {
  SIM_EV_FINISH = 0, /* id = task: a FIXED task (or a latency-only transfer) ends */
  SIM_EV_COLL_END,   /* id = collective: every member ends */
  SIM_EV_XFER_JOIN,  /* id = transfer: its latency is over, its bytes start to flow */
  SIM_EV_XFER_DONE   /* id = transfer: its last byte arrives (if version is current) */
} sim_event_kind;

typedef struct sim_event {
  int32_t id;
  uint32_t kind_version; /* sim_event_kind in the low 2 bits, transfer version above */
  int32_t next;          /* the next event of its time (in order of scheduling), -1 */
} sim_event;

/* A time with events pending: they pop first-in first-out (ties at equal times in the order they
 * were scheduled), the times in increasing order. */
typedef struct sim_slot {
  uint64_t t_bits; /* the time (s, >= 0) as its IEEE bits: ordered as the times are */
  int32_t head, tail;
} sim_slot;

/* Per-run state and results; rebuilt by every hap_sim_run. */
typedef struct sim_run {
  /* per task */
  double *dur_s;     /* resolved durations, s: only when some task asks the callback (else NULL and
                        the durations as added are used) */
  double *t_s;       /* COLLECTIVE: arrival (ready); otherwise start (= ready), s */
  uint8_t *pending;  /* unfinished dependencies; SIM_PENDING_MANY: counted in ov_count */
  int32_t *ov_task;  /* tasks with SIM_PENDING_MANY, ascending */
  int32_t *ov_count; /* their unfinished dependencies */
  int32_t n_ov;
  int32_t *succ; /* scratch: a finished task's dependents in order of addition */
  int32_t succ_cap;
  uint32_t *crit; /* the finish that last enabled the task: 1 + its id in the low 31 bits (0:
                     none), SIM_CRIT_DEP when it was a dependency (else its stream predecessor) */
  /* streams, key = device * HAP_SIM_N_STREAMS + stream */
  int32_t *st_head;  /* the task at the head (running or next), -1 when all ran */
  uint8_t *st_busy;  /* running, or a collective member holding it while it waits */
  double *st_busy_s; /* run times summed in stream order as tasks finish, s */
  /* per device: both streams' tasks merged in order of their ends as they finish (the overlap) */
  int32_t *mg_cur; /* [n_devices * 2]: the merge's current compute and comm task, -1: done */
  double *mg_overlap_s;
  /* collectives */
  int32_t *co_arrived;
  int32_t *co_last; /* the member whose arrival started it */
  double *co_dur_s;
  double *co_start_s;
  /* transfers */
  double *xf_left_bytes;
  double *xf_rate_Bps;
  double *xf_since_s; /* when xf_left_bytes was last brought up to date */
  double *xf_end_s;
  uint32_t *xf_version;
  uint32_t *xf_mark;
  int32_t *path_pos; /* [n_path]: position of the transfer in that resource's active list */
  /* resources: the transfers flowing through each (CSR slots sized by path entries) */
  int32_t *rs_off; /* [n_res + 1] */
  int32_t *rs_list;
  int32_t *rs_count;
  /* event queue: events (a pool with a free list), the distinct times pending (slots, a pool with
   * a free list) in a binary min-heap, and a hash from a time to its slot (linear probing) */
  sim_event *ev;
  int32_t ev_cap, ev_free;
  sim_slot *slot;
  int32_t slot_cap, slot_free;
  int32_t *heap; /* slots */
  int32_t heap_len;
  int32_t *hash; /* slots, -1: empty */
  int32_t hash_cap, hash_len;
  uint32_t epoch;
  double now_s;
  int32_t n_done;
  int64_t n_events;
  int32_t last_task; /* the latest end, lowest id among ties; -1 before the first */
  double last_end_s;
  /* results */
  hap_sim_device_stats *dev_stats;
  hap_sim_step *path;
  hap_sim_results results;
  /* sizes the arrays above were allocated with (sim_mem_free needs them) */
  int64_t n_tasks, n_keys, n_devices, n_coll, n_xfers, n_path, n_res;
} sim_run;

struct hap_sim {
  int32_t n_devices;
  /* tasks */
  int32_t n_tasks, cap_tasks;
  int32_t *key;       /* device * HAP_SIM_N_STREAMS + stream */
  uint8_t *flags;     /* SIM_F_* */
  double *duration_s; /* as added, lengthened by hap_sim_extend (HAP_SIM_DURATION_FN: callback) */
  int32_t *aux;       /* FIXED: index into pl_* or -1 (no flops, no bytes); COLLECTIVE: member
                         index into mb_*; TRANSFER: transfer index into xf_* */
  int32_t *st_next;   /* the next task on the same stream, -1 */
  int32_t *dep_head;  /* the last edge added of the tasks waiting for this one (the list runs
                         from the newest to the oldest), -1 */
  int32_t n_fn;       /* tasks with HAP_SIM_DURATION_FN */
  /* streams: first and last task, and how many */
  int32_t *st_first, *st_last, *st_count; /* [n_devices * HAP_SIM_N_STREAMS] */
  /* names of tasks and resources, NUL-terminated, back to back; consecutive tasks of one name
   * (a task on many devices) are one run: run i names tasks nm_task[i] .. nm_task[i + 1] - 1 */
  char *names;
  size_t names_len, names_cap;
  int32_t *nm_task;
  uint32_t *nm_off;
  int32_t n_nm, cap_nm;
  /* dependency edges, linked per task waited on: edge_task[e] waits, edge_next[e] is the edge
   * added before it to the same list */
  int32_t *edge_task, *edge_next;
  int32_t n_edges, cap_edges;
  /* flops and bytes (index p) of FIXED tasks that have some and of collective members; a task
   * with the same as the entry before shares it */
  double *pl_flops, *pl_bytes;
  int32_t n_pl, cap_pl;
  /* collectives (id c): members linked in order of addition */
  int32_t n_collectives, cap_coll;
  int32_t *co_first; /* first member's task, -1 */
  int32_t *co_lastm; /* last member's index, -1 */
  int32_t *co_size;
  /* collective members (index m) */
  int32_t n_members, cap_members;
  int32_t *mb_next; /* the next member's task, -1 */
  int32_t *mb_coll, *mb_pay;
  /* transfers (index k): task, latency, sizes, and path entries [path_off[k], path_off[k+1]) */
  int32_t n_xfers, cap_xfers;
  int32_t *xf_task;
  double *xf_latency_s, *xf_flops, *xf_bytes;
  int64_t *xf_path_off; /* [cap_xfers + 1] */
  int32_t *path_res;
  int64_t n_path, cap_path;
  /* resources */
  int32_t n_res, cap_res;
  double *res_bw_Bps;
  uint32_t *res_name_off;
  sim_run run;
  bool has_results;
};

/* The name run of task t (a binary search; a pass in id order keeps a cursor instead). */
static inline int32_t sim_name_run(const hap_sim *s, int32_t t) {
  int32_t lo = 0, hi = s->n_nm - 1; /* nm_task[lo] <= t */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo + 1) / 2;
    if (s->nm_task[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

static inline const char *sim_task_name(const hap_sim *s, int32_t t) {
  return s->names + s->nm_off[sim_name_run(s, t)];
}

static inline hap_sim_kind sim_kind(const hap_sim *s, int32_t t) {
  return (hap_sim_kind)(s->flags[t] & SIM_F_KIND);
}

/* The duration task t runs with in the current run, s. */
static inline double sim_dur(const hap_sim *s, int32_t t) {
  return s->run.dur_s != NULL ? s->run.dur_s[t] : s->duration_s[t];
}

/* When a started task t began running, and when it ended (once finished), s. A FIXED task ends
 * at the time its finish event was scheduled for: start + duration, the same double. */
static inline double sim_start(const hap_sim *s, int32_t t) {
  if (sim_kind(s, t) == HAP_SIM_COLLECTIVE)
    return s->run.co_start_s[s->mb_coll[s->aux[t]]];
  return s->run.t_s[t];
}
static inline double sim_end(const hap_sim *s, int32_t t) {
  switch (sim_kind(s, t)) {
  case HAP_SIM_FIXED: return s->run.t_s[t] + sim_dur(s, t);
  case HAP_SIM_COLLECTIVE: {
    int32_t c = s->mb_coll[s->aux[t]];
    return s->run.co_start_s[c] + s->run.co_dur_s[c];
  }
  case HAP_SIM_TRANSFER: return s->run.xf_end_s[s->aux[t]];
  }
  return 0;
}

/* Has t finished (a stream runs its tasks in id order; its head has not)? */
static inline bool sim_finished(const hap_sim *s, int32_t t) {
  int32_t h = s->run.st_head[s->key[t]];
  return h < 0 || t < h;
}

/* The record of task t (times from the last run when `with_times`, else 0), named `name` (NULL:
 * looked up). */
void sim_fill_record(const hap_sim *s, int32_t t, const char *name, bool with_times,
                     hap_sim_record *r);

/* Engine memory: large arrays are mapped with transparent huge pages where the system has them
 * (one fault per 2 MiB instead of per 4 KiB) and grow in place; small ones are malloc'ed. A block
 * records its own size and kind, so `bytes` / `old_bytes` are informative only (a growth that
 * failed half-way may leave an array larger than its owner's count). sim_mem_grow leaves p
 * untouched and returns NULL when out of memory; sim_mem_zalloc returns zeroed memory. */
void *sim_mem_grow(void *p, size_t old_bytes, size_t new_bytes);
void *sim_mem_zalloc(size_t bytes);
void sim_mem_free(void *p, size_t bytes);

/* engine_run.c */
void sim_run_free(sim_run *r);
hap_status sim_run_all(hap_sim *s, const hap_sim_options *opt, hap_err *err);

/* engine_report.c: after a complete run, fill the statistics and the critical path. */
hap_status sim_report(hap_sim *s, hap_err *err);
/* After a run that stopped with tasks left: the deadlock error naming a stuck task per device. */
hap_status sim_deadlock_error(const hap_sim *s, hap_err *err);

#endif
