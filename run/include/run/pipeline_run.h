/* pipeline_run.h — hap-run on a pipelined plan (docs/design-pipeline.md): world rank d is the
 * cluster's device d; it runs the stages of its device group, one stage runner each (run.h's
 * stage mode, over a communicator of the group), op by op in its group's schedule order
 * (plan/schedule.h). An op opens its micro-batch, receives the boundary values (forward) or
 * gradients (backward) the lowering's pairs bring to this device (plan/pipeline_lower.h: after
 * the sending group's reduce-scatter of partial sums, before the receiving group's all-gather),
 * runs the stage's tasks, and sends its own on. Sends never wait for the receiver (comm.h's
 * send_start; waited for at the iteration's end), so a rank blocks only on what its next op
 * needs, and any schedule the simulator finishes finishes here. After the group's last op each
 * stage synchronises its gradients, a parameter used by several stages (GPT's tied embedding)
 * has its gradients summed over them, fp16's overflow is decided over every rank, and the
 * updates run. Ownership: hap_pipe_run_create returns an owned runner freed with
 * hap_pipe_run_destroy; it borrows the lowered pipeline and the world communicator. */
#ifndef HAP_RUN_PIPELINE_RUN_H
#define HAP_RUN_PIPELINE_RUN_H

#include <signal.h>
#include <stdint.h>

#include "base/status.h"
#include "exec/comm.h"
#include "plan/pipeline_lower.h"
#include "run/run.h"

typedef struct hap_pipe_run hap_pipe_run;

/* Collective over `world`, whose size must be the pipeline's device count (HAP_EINVAL, one line
 * saying how to start it, before any work otherwise). `o` as for hap_run_create (its stage field
 * is set per stage; current_task, when set, holds the running task of the stage
 * hap_pipe_run_stage_running names). Every stage of this rank's group gets a runner. */
hap_status hap_pipe_run_create(hap_pipe_lowered *pw, hap_comm *world, const hap_run_options *o,
                               hap_pipe_run **out, hap_err *err);
void hap_pipe_run_destroy(hap_pipe_run *pr);

/* One training iteration over every rank (collective over the world). */
hap_status hap_pipe_run_iteration(hap_pipe_run *pr, hap_err *err);

/* The last iteration's loss (collective; the same on every rank), this rank's share of it (no
 * communication), and the optimizer's steps (the same on every rank). */
hap_status hap_pipe_run_loss(hap_pipe_run *pr, double *loss, hap_err *err);
double hap_pipe_run_loss_part(const hap_pipe_run *pr);
hap_run_steps hap_pipe_run_steps_taken(const hap_pipe_run *pr);

/* Collective over the world: every rank's stored copy of trainable parameter `tensor` (the whole
 * graph's id; quantity q) onto rank 0, as hap_run_gather_copies gathers it; a rank whose stages
 * do not hold it contributes an empty box. */
hap_status hap_pipe_run_gather_copies(hap_pipe_run *pr, int32_t tensor, hap_run_quantity q,
                                      hap_run_copies *out, hap_err *err);

/* The stage whose task runs now (async-signal-safe read; -1 between ops) and, after a failure,
 * the failing task's name ("stages[1] 'fc2.fwd'"; NULL if none). */
int32_t hap_pipe_run_stage_running(const hap_pipe_run *pr);
const char *hap_pipe_run_failed(const hap_pipe_run *pr);

/* The last iteration's ops on this rank, in its group's schedule order (hap_pipe_order_op), then
 * its tails (gradient synchronisation, tied sums, updates) as one more entry: *n = ops + 1 starts
 * and ends after the iteration's start, s. */
const double *hap_pipe_run_op_times(const hap_pipe_run *pr, const double **end_s, int32_t *n);

/* This rank's time in its stages' tasks during ops in the last iteration (the tails excluded:
 * what hap_pipe_plan_sim's busy_s counts), s. */
double hap_pipe_run_busy_s(const hap_pipe_run *pr);

/* Each of this rank's stages' task times in the last iteration (as hap_run_iteration fills
 * them: first start, summed duration over the micro-batches, s): *n_tasks entries of stage
 * `stage`; NULL when this rank does not run it. */
const double *hap_pipe_run_task_times(const hap_pipe_run *pr, int32_t stage, const double **end_s,
                                      int32_t *n_tasks);

#endif
