/* stage_times.h — a pipeline stage's times per micro-batch, read from the simulated timeline of
 * its SPMD program (plan_sim.h): what simulate/pipeline_sim.h takes per virtual stage, and the
 * stage cost a partitioner compares (docs/design-pipeline.md). The stage's plan is one
 * micro-batch of its stage graph (model/stage.h) on its device group (hap_cluster_of_devices). */
#ifndef HAP_SIMULATE_STAGE_TIMES_H
#define HAP_SIMULATE_STAGE_TIMES_H

#include "simulate/plan_sim.h"

typedef struct hap_stage_times {
  double fwd_s;  /* the last forward task's end on any device, s */
  double bwd_s;  /* from there to the last backward task's end that is not a gradient
                    synchronisation, s */
  double tail_s; /* the rest of the iteration: gradient synchronisation still running and the
                    updates (once per iteration in a pipeline), s */
} hap_stage_times;

/* Is task t a gradient synchronisation (a parameter's gradient all-reduce or reduce-scatter at its
 * source, or a 2-D plan's replica all-reduce): run once per iteration, not per micro-batch? */
bool hap_task_is_grad_sync(const hap_lowered *lw, int32_t t);

/* The times of a simulated stage program. fwd_s + bwd_s + tail_s is its iteration time. Where
 * gradient synchronisation overlaps the backward (or, serial, runs between backward tasks) it is
 * counted in bwd_s: an upper bound per micro-batch. */
void hap_stage_times_of(const hap_plan_sim *ps, hap_stage_times *out);

#endif
