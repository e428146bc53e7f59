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

/* The times read from one simulated run of a stage program; fwd_s + bwd_s + tail_s is its
 * iteration time. Gradient synchronisation that delays a backward task (queued before it on the
 * communication stream, or serial) is counted in bwd_s. */
void hap_stage_times_of(const hap_plan_sim *ps, hap_stage_times *out);

/* A stage program's times for a pipeline: forward and backward from a run with the gradient
 * synchronisation priced at 0 s (hap_plan_sim_options.skip_grad_sync; a pipeline synchronises
 * once per iteration, not per micro-batch), the tail the rest of the full run's iteration (its
 * synchronisation and updates). `o` (may be NULL) for both runs; errors as hap_plan_sim_run.
 * *iteration_s (may be NULL) gets the full run's iteration time = fwd_s + bwd_s + tail_s. */
hap_status hap_stage_times_run(hap_lowered *lw, const hap_cluster *c, const hap_plan_sim_options *o,
                               hap_stage_times *out, double *iteration_s, hap_err *err);

#endif
