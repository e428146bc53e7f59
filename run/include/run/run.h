/* run.h — the plan runner: executes the lowered task list (plan/lower.h) of one plan on this rank
 * with real values: kernels from kernels/, layout changes through the comm table (comm.h),
 * optimizer updates, and a timestamp pair per task; the plan's training policy (micro-batches,
 * recomputation, optimizer, emulated half-precision storage) as docs/execution.md describes. Every
 * rank of the communicator runs the same tasks in the same order (the plan is SPMD), rank r being
 * plan device r.
 *
 * Data: each (tensor, layout) the program makes available is one buffer holding this rank's box
 * of the tensor (box.h: Identity and Reduce the whole tensor, Gather(d) the rank's slice), and
 * its gradient a buffer of the same box. Parameters, buffers and inputs start from init.h's
 * deterministic values, so any rank count and any plan see the same model and data.
 * Gradient conventions: the gradient of a property is the dual layout's (Identity <-> Reduce,
 * Gather(d) <-> Gather(d)); the loss gradient is seeded with 1 (on every rank for a Reduce loss,
 * on rank 0 for an Identity one), times the loss scale under fp16, over the micro-batches and
 * replicas of a batch-mean loss.
 * Ownership: hap_run_create returns an owned runner freed with hap_run_destroy; it borrows the
 * lowered plan, the graph, the comm and the kernel table's ctx, which must outlive it. The graph's
 * float tensors are float32 (int64/int32 index inputs); half precision comes from the policy. */
#ifndef HAP_RUN_RUN_H
#define HAP_RUN_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "exec/comm.h"
#include "kernels/kernels.h"
#include "model/graph.h"
#include "plan/lower.h"
#include "plan/pipeline_lower.h"
#include "run/box.h"

/* Where compute tasks run: a kernel table chosen at hap_run_create. Buffers are the runner's host
 * buffers, with kernels.h's conventions (forward overwrites, backward accumulates). Each call
 * also reports the task's timing: *kernel_s the device's own time of the kernels (s; < 0: the
 * runner times the call with the host clock, as for the CPU kernels) and *staging_s the host time
 * of copies to and from the device (s; 0 when none), which is never part of a task's time. */
typedef struct hap_run_kernels {
  const char *name; /* "cpu", "cuda" */
  void *ctx;
  hap_status (*forward)(void *ctx, const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        double *kernel_s, double *staging_s, hap_err *err);
  hap_status (*backward)(void *ctx, const hap_kernel_call *c, const float *const *dout,
                         float *const *din, const hap_kernel_state *st, double *kernel_s,
                         double *staging_s, hap_err *err);
  /* backward honours hap_kernel_call.fresh_din (a gradient buffer's first writer in an
   * iteration stores instead of adding, so the runner need not zero it); false: every buffer
   * is zeroed first */
  bool fresh_din;
} hap_run_kernels;

/* The CPU kernels (kernels/) as a table: the default. */
extern const hap_run_kernels hap_run_kernels_cpu;

/* A pipeline stage (docs/design-pipeline.md; run/pipeline_run.h drives it): the runner executes
 * the stage program lowered on one micro-batch (hap_pipe_lowered_stage: its lw is the one given
 * to hap_run_create, with the stage graph at the full batch as `g`), op by op in the schedule's
 * order through the hap_run_stage_* calls below instead of hap_run_iteration. Each micro-batch in
 * flight keeps its own values of everything the forward pass makes and of the batch inputs (a
 * slot; slots are reused once a micro-batch's backward is over). Initial values come from the
 * whole graph (the stage graph's whole_of), so every stage and a single-device run see the same
 * numbers; boundary inputs and received gradients ("<y>@grad") get none: the caller writes them
 * into the open micro-batch (hap_run_stage_port) before its op runs. Micro-batch j of a stage
 * whose program has R replicas is rows [j B/m, (j+1) B/m) of the batch, replica r holding slice
 * r of it. A stage loss (a stage without the graph's loss) is seeded with 1: the gradient it
 * receives already carries the loss's scale. HAP_FAULT (fault.h) names the whole graph's tensors
 * and world ranks; a stage without the named tensor is not faulted. */
typedef struct hap_run_stage {
  const hap_pipe_lowered_stage *lowered;
  const hap_graph *whole;
  int32_t micro_batches;          /* the pipeline's m >= 1 */
  int32_t world_rank, world_size; /* this rank in the pipeline's world (HAP_FAULT's ranks) */
} hap_run_stage;

typedef struct hap_run_options {
  uint64_t seed; /* parameters, inputs and dropout masks */
  double lr;     /* SGD learning rate (0: updates leave the parameters unchanged) */
  double speed;  /* this rank's emulated speed in (0, 1]: compute tasks take 1/speed as long
                    (only with the CPU kernels) */
  const hap_run_kernels *kernels; /* NULL: hap_run_kernels_cpu (copied at create) */
  /* When not NULL, the id of the task being run is stored here before each task (for a watchdog
   * or signal handler to name it); -1 between iterations. */
  volatile sig_atomic_t *current_task;
  /* Called (may be NULL) before each task with its id, e.g. to re-arm a watchdog. */
  void (*on_task)(void *ctx, int32_t task);
  void *on_task_ctx;
  const hap_run_stage *stage; /* NULL: an ordinary plan (copied at create) */
  /* > 0: the replicated parameters' gradient all-reduces go in buckets of this many bytes whose
   * sums overlap the rest of the backward pass (hap-run --overlap; docs/execution.md "Overlap");
   * the comm must have all_reduce_start. Applies to float32 plans of one micro-batch without
   * replicas or pipeline stages; other all-reduces, and every all-reduce under 0, block. */
  int64_t overlap_bucket_bytes;
} hap_run_options;

typedef struct hap_run hap_run;

hap_status hap_run_create(hap_lowered *lw, const hap_graph *g, hap_comm *comm,
                          const hap_run_options *o, hap_run **out, hap_err *err);
void hap_run_destroy(hap_run *r);

/* One training iteration: forward, backward, update, under the plan's training policy
 * (docs/execution.md "Training policies"). start_s / end_s (may be NULL) get each task's times on
 * this rank's clock (s, hap_clock_s), n_tasks entries; a compute task whose kernel table reports
 * a device time ends at start + that time (staging copies excluded). A task run in several
 * micro-batches starts at its first run and lasts the runs' summed time (recomputation inside
 * them included). A failure names the task (and, for communication, the peer error). */
hap_status hap_run_iteration(hap_run *r, double *start_s, double *end_s, hap_err *err);

/* ---- pipeline stages (hap_run_options.stage) ---------------------------------------------- */

/* A new iteration: every gradient zero, the task times go to start_s / end_s (may be NULL;
 * n_tasks entries, as hap_run_iteration fills them) until the next begin. */
void hap_run_stage_begin(hap_run *r, double *start_s, double *end_s);
/* Open micro-batch mb for its forward op (a free slot, its batch inputs in place) or its backward
 * op (the slot its forward filled; the gradients that restart every micro-batch zero). HAP_EINVAL
 * for a backward op of a micro-batch whose forward has not run. */
hap_status hap_run_stage_open(hap_run *r, int32_t mb, bool backward, hap_err *err);
/* The open micro-batch's forward op: the FWD tasks. */
hap_status hap_run_stage_forward(hap_run *r, hap_err *err);
/* The open micro-batch's backward op: the stage loss (LOSS tasks), its seed, the BWD tasks. */
hap_status hap_run_stage_backward(hap_run *r, hap_err *err);
/* The open micro-batch's op is over and its sends are packed: after a forward op recomputation
 * drops what it drops; after a backward op the slot is free. */
void hap_run_stage_close(hap_run *r);
/* After the group's last op: the tail's gradient synchronisation (collective over the stage). */
hap_status hap_run_stage_sync(hap_run *r, hap_err *err);
/* fp16's dynamic loss scaling: does any trainable gradient on this rank hold a non-finite value?
 * (false under other precisions; no communication). */
bool hap_run_stage_overflowed(const hap_run *r);
/* The tail's updates (skipped, every rank alike, when `skip`: the pipeline's gradients overflowed),
 * and the iteration's end (loss scale, steps). */
hap_status hap_run_stage_update(hap_run *r, bool skip, hap_err *err);

/* This rank's box of stage tensor t held as h (in the micro-batch's coordinates) and its buffer:
 * the open micro-batch's values, or (gradient) the gradient accumulated for that prop (float32).
 * HAP_EINVAL naming the tensor when the program never holds it so. */
hap_status hap_run_stage_port(hap_run *r, int32_t t, hap_pipe_holding h, bool gradient,
                              hap_box *box, void **data, size_t *elem, hap_err *err);
/* Collective over the stage's group (a 2-D program: the rank's replica): partial sums of stage
 * tensor t (src: the whole (replica's) box, float32) summed, this rank keeping its box of
 * Gather(dim) under the ratios of `segment`: *box (micro-batch coordinates) and *out, a buffer of
 * the runner's valid until the next call. */
hap_status hap_run_stage_reduce_scatter(hap_run *r, int32_t t, int32_t dim, int32_t segment,
                                        const float *src, hap_box *box, const float **out,
                                        hap_err *err);
/* Collective over the stage's group: every rank's box of Gather(dim, segment) of stage tensor t
 * (src, as hap_run_stage_box says) into the whole (replica's) box in dst (elem bytes each). */
hap_status hap_run_stage_all_gather(hap_run *r, int32_t t, int32_t dim, int32_t segment,
                                    const void *src, void *dst, hap_err *err);
/* This rank's box of stage tensor t held as Gather(dim, segment) (or whole: dim < 0), in the
 * micro-batch's coordinates. */
hap_status hap_run_stage_box(hap_run *r, int32_t t, int32_t dim, int32_t segment, hap_box *box,
                             hap_err *err);

/* The last iteration's loss, the same value on every rank (collective). */
hap_status hap_run_loss(hap_run *r, double *loss, hap_err *err);

/* Parameter `tensor`'s gradient of the last iteration as a full tensor (float32, numel
 * elements) on rank 0 (collective; `full` is only written on rank 0 and may be NULL elsewhere). */
hap_status hap_run_gather_grad(hap_run *r, int32_t tensor, float *full, hap_err *err);

/* The optimizer's steps so far: taken, skipped (fp16 gradients that overflowed), and the loss
 * scale S the next iteration seeds (1 except fp16). The same on every rank. */
typedef struct hap_run_steps {
  int64_t taken, skipped;
  double loss_scale;
} hap_run_steps;
hap_run_steps hap_run_steps_taken(const hap_run *r);

/* Gradient buckets whose sums this runner has started so far (hap_run_options.
 * overlap_bucket_bytes), or -1 when it does not overlap them (the option is 0, or the plan is not
 * one it applies to). */
int64_t hap_run_overlap_buckets(const hap_run *r);

/* Is task t (a flat plan's) one where this rank waits for the others: a collective that completes
 * inside the task (not a gradient handed to an overlapped bucket), or, with gradient buckets, the
 * first update task (it completes their sums)? False for other tasks and ids out of range. */
bool hap_run_task_waits(const hap_run *r, int32_t t);

/* How often task t ran in the last iteration (its micro-batches), and in *own_s the time of
 * those runs without the recomputation that ran inside them (s; host clock, or the kernel
 * table's device time). start_s/end_s of hap_run_iteration hold the runs' sum with it. */
int32_t hap_run_task_runs(const hap_run *r, int32_t t, double *own_s);

/* This rank's share of the last iteration's loss (what hap_run_loss sums over the ranks; no
 * communication). */
double hap_run_loss_part(const hap_run *r);

/* What hap_run_gather_copies reads: a parameter's gradient of the last iteration, or its value
 * after the last update. */
typedef enum hap_run_quantity { HAP_RUN_GRADIENT, HAP_RUN_VALUE } hap_run_quantity;

/* Every world rank's stored copy of one parameter: the copy the update reads and writes (the
 * ZeRO shard, else the whole tensor or the rank's slice; its float32 master under mixed
 * precision, and its gradient as stored, times the loss scale), as boxes in the parameter's global
 * coordinates. A copy with the same box and the same bytes as a lower rank's (replicas, as they
 * should be) is not sent again: same_as names that rank (64-bit digests of the bytes decide, so a
 * difference hides only behind a digest collision). Owned; free with hap_run_copies_free. */
typedef struct hap_run_copies {
  int32_t n_ranks;
  hap_box *box;     /* [n_ranks] world rank r's box */
  int64_t *offset;  /* [n_ranks] where rank r's elements start in data (elements) */
  int32_t *same_as; /* [n_ranks] -1, or the lower rank whose identical copy stands for r's */
  float *data;      /* the distinct copies' elements, row-major, one after another */
} hap_run_copies;

/* This rank's stored copy of parameter `tensor` (quantity q), as hap_run_gather_copies gathers
 * it: *box and *data (the runner's buffer). false when the plan does not source the tensor. */
bool hap_run_local_copy(hap_run *r, int32_t tensor, hap_run_quantity q, hap_box *box,
                        const float **data, hap_err *err);

/* Collective over `world`: each rank's copy (box, data; numel elements: an empty box when it holds
 * none) onto world rank 0, as hap_run_gather_copies does. */
hap_status hap_run_gather_copy_of(hap_comm *world, const hap_box *box, const float *data,
                                  hap_run_copies *out, hap_err *err);

/* Collective over every world rank: gather each rank's copy of parameter `tensor` (quantity q)
 * onto world rank 0, where *out is filled; on other ranks *out stays empty. */
hap_status hap_run_gather_copies(hap_run *r, int32_t tensor, hap_run_quantity q,
                                 hap_run_copies *out, hap_err *err);
void hap_run_copies_free(hap_run_copies *c);

/* The deliberate fault HAP_FAULT asks for (tests only; run/fault.h): false when none, else a
 * one-line description in buf, e.g. "grad-error of 'fc1.weight' on rank 1". */
bool hap_run_fault(const hap_run *r, char *buf, size_t size);

/* Host time of the last iteration's staging copies (the kernel table's staging_s summed), s. */
double hap_run_staging_s(const hap_run *r);

/* The name of the task running when the last error happened (NULL if none). */
const char *hap_run_failed_task(const hap_run *r);

#endif
