/* pipeline_plan_sim.h — one iteration of a lowered pipelined plan (plan/pipeline_lower.h) on one
 * engine, every device simulated (no folding): each device runs its group's schedule, op by op,
 * each op the stage program's tasks for one micro-batch (priced as plan_sim.h prices them, on the
 * group's cluster), boundary transfers are engine TRANSFERs from the sending device's
 * communication stream over shared link resources (a device's intra-host link out, each host's
 * NIC out and in), and each stage's tail (gradient synchronisation and updates) runs once after
 * its group's last op; a parameter several stages use (GPT's tied embedding) then has its
 * gradients summed by an all-reduce over those stages' devices, a tail task ("<param>.grad.
 * tied_all_reduce"). Bubbles are what the engine leaves idle: no closed form. A device's run of
 * compute tasks that nothing on another stream waits inside of is one engine task (exact).
 * Not yet: the stages' own collectives are priced as today (hap_coll_time), not over the link
 * resources, so they do not share NICs with the boundary transfers.
 * Ownership: hap_pipe_plan_sim_run returns an owned result freed with hap_pipe_plan_sim_destroy;
 * it borrows nothing after returning. */
#ifndef HAP_SIMULATE_PIPELINE_PLAN_SIM_H
#define HAP_SIMULATE_PIPELINE_PLAN_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "plan/pipeline_lower.h"
#include "traces/trace.h"

typedef struct hap_pipe_plan_sim_options {
  /* Communication does not overlap computation: collectives and transfers on the compute stream
   * (hap_plan_sim_options.serial: cpu + mpi). */
  bool serial;
  /* One engine task per stage task: no chains of compute-stream tasks (slower, same answer; for
   * tests). */
  bool no_chains;
  /* When set, the simulated timeline goes there: one process per device (hap_trace_rank,
   * simulated) up to trace_devices (0: all), engine tasks on the compute, collective and p2p
   * lanes (a chain of compute tasks is one event named after its first task). */
  hap_trace *trace;
  int32_t trace_devices;
} hap_pipe_plan_sim_options;

typedef struct hap_pipe_plan_sim {
  double iteration_s; /* the last task's end, s */
  double flush_s;     /* the last op task's end (before the tails), s */
  int64_t n_events;   /* engine events processed */
  int64_t n_engine_tasks;
  int32_t n_devices, n_groups;
  double *busy_s;        /* [n_devices] compute stream busy in ops (tails excluded), s */
  double *bubble;        /* [n_devices] 1 - busy_s / flush_s */
  double *group_bubble;  /* [n_groups] mean of its devices' bubble */
  double mean_bubble;    /* mean over groups */
  double transfer_bytes; /* boundary bytes moved between distinct devices per iteration, bytes */
} hap_pipe_plan_sim;

/* Simulate one iteration (o may be NULL). Errors: the pricing's (one line naming the stage and
 * task), an engine deadlock (one line), HAP_ENOMEM. */
hap_status hap_pipe_plan_sim_run(hap_pipe_lowered *pw, const hap_pipe_plan_sim_options *o,
                                 hap_pipe_plan_sim **out, hap_err *err);
void hap_pipe_plan_sim_destroy(hap_pipe_plan_sim *r);

#endif
