/* pipeline_sim.h — one training iteration of a pipeline order (plan/schedule.h) run through the
 * discrete-event engine (engine.h), one engine device per device group
 * (docs/pipeline-schedules.md).
 *
 * Each op is a compute task of its virtual stage's forward or backward time, in the group's order.
 * A forward of virtual stage k < p*v-1 sends its activation to stage k+1 and a backward of stage
 * k > 0 its gradient to stage k-1 as a TRANSFER of boundary_bytes on the sending group's
 * communication stream (one at a time per group, in the order the ops ran), over the link
 * resource of that (sender, receiver) pair: one resource per direction between neighbouring
 * groups, including the wrap from group p-1 to group 0 that interleaving uses. A boundary inside
 * one group (p = 1) is a plain dependency and costs nothing. The forward of (j, k) waits for the
 * transfer of (j, k-1)'s activation, the backward of (j, k) for the gradient from (j, k+1) (the
 * last stage's backward for its own forward). An optional tail per group (gradient all-reduce
 * and optimizer update, s) runs on the compute stream after the group's last op.
 * Ownership: hap_pipe_sim_run returns an owned result freed with hap_pipe_sim_destroy; it
 * borrows nothing. */
#ifndef HAP_SIMULATE_PIPELINE_SIM_H
#define HAP_SIMULATE_PIPELINE_SIM_H

#include <stdint.h>

#include "base/status.h"
#include "plan/schedule.h"

/* The link between consecutive groups (every pair alike). */
typedef struct hap_pipe_link {
  double latency_s;     /* s >= 0, finite */
  double bandwidth_Bps; /* bytes/s > 0, finite */
} hap_pipe_link;

typedef struct hap_pipe_sim_input {
  const hap_pipe_order *order;
  const double *fwd_s;          /* [p*v] per virtual stage: one micro-batch's forward, s */
  const double *bwd_s;          /* [p*v] per virtual stage: one micro-batch's backward, s */
  const double *boundary_bytes; /* [p*v] activation stage k sends to k+1 per micro-batch (the
                                 * gradient back is as large; the last is unused), bytes; NULL:
                                 * all 0 (transfers cost their latency) */
  hap_pipe_link link;
  const double *tail_s; /* [p] after each group's last op, s; NULL: none */
} hap_pipe_sim_input;

/* One op as run, s. */
typedef struct hap_pipe_sim_span {
  double start_s, end_s;
} hap_pipe_sim_span;

/* Everything from the engine run; per-group arrays have p entries. */
typedef struct hap_pipe_sim {
  int32_t n_groups;         /* p */
  int32_t ops_per_group;    /* 2*m*v */
  double makespan_s;        /* iteration time, s */
  double *busy_s;           /* compute stream busy (ops and tail), s */
  double *idle_s;           /* makespan - busy: the group's bubble, s */
  double *bubble;           /* idle / makespan (0 when the makespan is 0) */
  double *comm_s;           /* communication stream busy (the group's sends), s */
  double mean_bubble;       /* mean of bubble over groups */
  hap_pipe_sim_span *spans; /* [p][ops_per_group], in each group's op order */
} hap_pipe_sim;

/* Simulate one iteration. Fails with HAP_EINVAL and one line naming the field and index
 * ("fwd_s[3]: -1, expected a finite time >= 0 s", "link.bandwidth_Bps: 0, expected ..."), an
 * engine error (a deadlock is one line naming the stuck ops), or HAP_ENOMEM. *out is NULL on
 * failure. */
hap_status hap_pipe_sim_run(const hap_pipe_sim_input *in, hap_pipe_sim **out, hap_err *err);
void hap_pipe_sim_destroy(hap_pipe_sim *r);

/* Op k of group g as run (see hap_pipe_order_op); g and k must be in range. */
hap_pipe_sim_span hap_pipe_sim_op_span(const hap_pipe_sim *r, int32_t group, int32_t k);

#endif
