/* replay.h — kernel timings in execution order (hap-profile --plan, the default there): this
 * rank runs its device's whole task list of a plan as hap-run runs it (the same runner, buffers,
 * order, dispatch and optimizer updates, under the plan's training policy) over a synchronising
 * silent communicator (exec/comm_silent.h: no data crosses ranks, but ranks meet at every
 * collective as they would for real), and each compute task's time is one sample of its (op,
 * shape, direction) row. A kernel timed this way finds the caches as the iteration leaves them
 * (cold weights, the previous task's output warm), shares the memory bus with the same work on
 * the other ranks of its host, and includes the runner's per-task overhead, all of which a kernel
 * timed alone in a loop misses. The update tasks give the device's update bandwidth the same way.
 * Communication time is not measured here: the collective sweeps price it.
 * Contract: every rank of `world` calls it at once (the runner's start-up splits communicators
 * for 2-D plans); rank r replays device r (`world` has the plan's device count). Rows are pooled
 * over every task with the same key and every timed iteration: p50, p95, reps = samples.
 * `speed` is the emulated speed in (0, 1] (emulate.h), as hap-run pads compute tasks.
 * Ownership: *rows is malloc'd (free()); the plan and graph are borrowed. */
#ifndef HAP_PROFILE_REPLAY_H
#define HAP_PROFILE_REPLAY_H

#include <stdint.h>

#include "base/status.h"
#include "exec/comm.h"
#include "model/graph.h"
#include "plan/plan.h"
#include "run/run.h"
#include "store/profile_store.h"

/* Called after each replayed iteration (may be NULL): i of at most n, for progress and a
 * watchdog. */
typedef void (*hap_replay_progress_fn)(void *arg, int32_t i, int32_t n);

typedef struct hap_replay_options {
  int32_t warmup;                 /* untimed iterations, >= 0 */
  int32_t iters;                  /* timed: at least this many (>= 1) ... */
  double min_s;                   /* ... and until they took this long, s (a noise burst of the host
                                     then spoils a few samples, not a whole row) ... */
  int32_t max_iters;              /* ... but at most this many (>= iters) */
  double speed;                   /* emulated speed in (0, 1] */
  uint64_t seed;                  /* initial values (any: kernel times do not depend on the data) */
  const hap_run_kernels *kernels; /* the runner's kernel table; NULL: the CPU kernels */
  /* The format the table's GEMMs compute in (kx/kernels_run.h hap_cuda_kernels_set_gemm). A half
   * one keys the rows as applications in that format (hap_kernel_shape_key), which only
   * half-precision applications on a device with half arithmetic look up. HAP_F32 (zero): float32,
   * as the CPU kernels compute whatever the policy. */
  hap_dtype gemm;
  hap_replay_progress_fn progress;
  void *progress_arg;
} hap_replay_options;

/* Rows: one sample per compute task and timed iteration, the mean of the task's runs in the
 * iteration (its micro-batches, hap_run_task_runs) without the recomputation that ran inside it:
 * the time of one run, which the simulator multiplies by the task's repeats and to which it adds
 * the recomputed forward task's own row (plan/lower.h repeats, recompute_of).
 * *update_Bps: the bytes/s of the replay's update tasks (the median over the timed iterations),
 * which run the plan's optimizer under its policy: their bytes as the simulator prices them
 * (plan/lower.h hap_lowered_priced_work: 12 per element for SGD in float32, hap_policy_update_bytes
 * otherwise) over their time, so that the simulator's bytes / bandwidth is the time measured here;
 * 0 when the plan updates nothing here. */
hap_status hap_replay_kernel_rows(const hap_plan *p, const hap_graph *g, hap_comm *world,
                                  const hap_replay_options *o, hap_profile_kernel **rows,
                                  int32_t *n_rows, double *update_Bps, hap_err *err);

#endif
