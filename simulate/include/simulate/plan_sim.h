/* plan_sim.h — simulate a lowered plan on a cluster: every task priced with core's cost queries
 * (compute: hap_compute_time at the device's local shapes; collectives: hap_coll_time over all
 * devices with the plan's implementation; local layout changes and updates: launch + bytes over
 * memory bandwidth), run through the discrete-event engine, and reported per device and per task.
 *
 * Devices whose every task takes the same time (same class, same shard lengths) have identical
 * schedules, because every collective spans all devices: they are simulated once ("folded") and
 * the results shared. This is exact, and it is what makes a 1,024-device iteration cheap.
 * Ownership: hap_plan_sim_run returns an owned result freed with hap_plan_sim_destroy; it borrows
 * the lowered plan and the cluster, which must outlive it. */
#ifndef HAP_SIMULATE_PLAN_SIM_H
#define HAP_SIMULATE_PLAN_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "plan/lower.h"
#include "simulate/engine.h"
#include "traces/trace.h"

typedef struct hap_plan_sim_options {
  bool no_fold; /* simulate every device separately (slower, same answer) */
  /* Communication does not overlap computation: collectives run on the compute stream, as on a
   * backend whose collectives block the thread that runs the kernels (cpu + mpi). */
  bool serial;
  /* Price gradient synchronisation (stage_times.h: hap_task_is_grad_sync) at 0 s: one
   * micro-batch of a pipeline stage, whose gradients are synchronised once per iteration. */
  bool skip_grad_sync;
} hap_plan_sim_options;

/* One device over the iteration, s. */
typedef struct hap_plan_sim_device {
  double compute_s;      /* compute stream busy */
  double comm_s;         /* communication stream busy */
  double overlap_s;      /* both busy */
  double exposed_comm_s; /* communicating while not computing */
  double idle_s;         /* neither */
  double memory_bytes;   /* the plan's peak per device, bytes */
} hap_plan_sim_device;

/* A step of the critical path: a lowered task on a device, and how it waited. */
typedef struct hap_plan_sim_crit {
  int32_t task, device;
  hap_sim_edge via;
} hap_plan_sim_crit;

typedef struct hap_plan_sim {
  hap_lowered *lw;
  const hap_cluster *cluster;
  int32_t n_devices, n_tasks;
  int32_t n_groups;   /* devices simulated (after folding) */
  int32_t *group;     /* [n_devices]: the simulated device standing for it */
  int32_t *group_rep; /* [n_groups]: a device of the group (its lowest id) */
  double iteration_s; /* s */
  int64_t n_events;   /* engine events processed */
  int64_t n_engine_tasks;
  double *dur_s, *start_s, *end_s; /* [n_groups * n_tasks], index g * n_tasks + t, s */
  hap_plan_sim_device *devices;    /* [n_devices] */
  hap_plan_sim_crit *critical;     /* earliest first */
  int32_t n_critical;
} hap_plan_sim;

hap_status hap_plan_sim_run(hap_lowered *lw, const hap_cluster *c, const hap_plan_sim_options *o,
                            hap_plan_sim **out, hap_err *err);
void hap_plan_sim_destroy(hap_plan_sim *ps);

/* Every task's duration on every device as hap_plan_sim_run prices it: dur[t * n_devices + d]
 * (n_tasks * n_devices entries), s. Errors as hap_plan_sim_run's pricing. */
hap_status hap_plan_sim_price(hap_lowered *lw, const hap_cluster *c, double *dur, hap_err *err);

/* How many sub-groups of a span share a NIC (hap_group_share_nics), for writers of the
 * simulator's input elsewhere (Chakra traces, chakra/; the bytes and sub-groups: lower.h
 * hap_lowered_coll_moved_bytes, hap_lowered_coll_group). */
hap_status hap_plan_sim_nic_sharers(const hap_lowered *lw, const hap_cluster *c, hap_task_span sp,
                                    int32_t *sharers, hap_err *err);

/* The duration of lowered task t on device d, s (the engine's input). */
double hap_plan_sim_duration(const hap_plan_sim *ps, int32_t t, int32_t d);

/* Write the simulated timeline: one process per device (hap_trace_rank, simulated), compute and
 * local tasks on the compute lane, collectives on the collective lane; names are the lowered
 * task names (also args.task), with FLOPs and bytes. Devices above max_devices (0 = all) are left
 * out, with the count recorded in otherData.devices_left_out. */
hap_status hap_plan_sim_trace(hap_plan_sim *ps, hap_trace *t, int32_t max_devices, hap_err *err);

/* For hap_synth_options.rescore: lower `p` and simulate it on `c`; the iteration time, s, or
 * HUGE_VAL when it cannot be lowered or simulated. `ctx` is unused. */
double hap_plan_sim_rescore(void *ctx, const hap_plan *p, const hap_graph *g, const hap_cluster *c);

#endif
