/* replay.h — kernel timings in execution order (hap-profile --plan, the default there): this
 * rank runs its device's whole task list of a plan as hap-run runs it (the same runner, buffers,
 * order, dispatch and optimizer updates, under the plan's training policy) over a synchronising
 * silent communicator (exec/comm_silent.h: no data crosses ranks, but ranks meet at every
 * collective as they would for real), and each compute task's time is one sample of its (op,
 * shape, direction) row. A kernel timed this way finds the caches as the iteration leaves them
 * (cold weights, the previous task's output warm), shares the memory bus with the same work on
 * the other ranks of its host, and includes the runner's per-task overhead, all of which a kernel
 * timed alone in a loop misses. The update tasks give the device's update bandwidth the same way.
 * With `collectives` (hap-profile --coll-timing replay) the replay runs over `world` itself, so
 * data crosses ranks as in hap-run, and each collective task is timed too: in each timed iteration
 * its run on the member of its sub-group that took least (the last to arrive, which waits for no
 * one), pooled per (kind, sub-group, size) over the iteration's tasks; those times, at exactly the
 * plan's sizes, become the profile's plan groups (store/profile_store.h HAP_PROFILE_PLAN_GROUP),
 * which the cluster model prices those sizes with. Without it, the collective sweeps alone price
 * communication.
 * Contract: every rank of `world` calls it at once (the runner's start-up splits communicators
 * for 2-D plans); rank r replays device r (`world` has the plan's device count). Rows are pooled
 * over every task with the same key and every timed iteration: p50, p95, reps = samples, and the
 * price mean_s = their mean (store/fit.h HAP_PRICE_TRIM: a sum of per-task medians, or of
 * trimmed means, falls short of a mean iteration, since every task's times skew long).
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
  /* Time the collectives too (see above; the CPU runner's plans without pipeline stages: a silent
   * communicator otherwise). A task's time is all of it, e.g. with the rounding of an emulated
   * half-precision sum, which the simulator then does not add (cluster/cost.h hap_coll_measured).
   */
  bool collectives;
  /* Price at the median instead (hap-profile --price p50): rows without mean_s, the update rate
   * of the median iteration. */
  bool price_p50;
  hap_replay_progress_fn progress;
  void *progress_arg;
} hap_replay_options;

/* One collective of a replay (hap_replay_options.collectives): a kind over one sub-group at one
 * size, and its time in each timed iteration. */
typedef struct hap_replay_coll {
  hap_coll_kind kind;
  int32_t n_ranks;
  int32_t *ranks;    /* the sub-group's device ids, in ring order */
  int64_t bytes;     /* the size a fit is read at (cluster/cost.h hap_coll_fit_bytes), rounded */
  int32_t n_samples; /* timed iterations */
  double *samples_s; /* [n_samples]: the mean over the iteration's tasks of this key of each run's
                        time on its sub-group's fastest member, s */
} hap_replay_coll;

typedef struct hap_replay_colls {
  int32_t n;
  hap_replay_coll *v;
  int32_t warmup; /* untimed iterations before the samples */
} hap_replay_colls;

void hap_replay_colls_free(hap_replay_colls *c);

/* Add c to profile p as collective sweeps (one per kind and sub-group, its sizes in increasing
 * order, reps = the iterations) named HAP_PROFILE_PLAN_GROUP ("plan" over every device of p, else
 * "plan:<id>-<id>-..."), then recompute p's statistics and fits (profile/fit_rel.h). HAP_EINVAL
 * naming the group when p already has it (one replay per profile). */
hap_status hap_replay_colls_to_profile(const hap_replay_colls *c, hap_profile *p, hap_err *err);

/* Rows: one sample per compute task and timed iteration, the mean of the task's runs in the
 * iteration (its micro-batches, hap_run_task_runs) without the recomputation that ran inside it:
 * the time of one run, which the simulator multiplies by the task's repeats and to which it adds
 * the recomputed forward task's own row (plan/lower.h repeats, recompute_of).
 * *update_Bps: the bytes/s of the replay's update tasks (their bytes over the mean of the
 * timed iterations' update times),
 * which run the plan's optimizer under its policy: their bytes as the simulator prices them
 * (plan/lower.h hap_lowered_priced_work: 12 per element for SGD in float32, hap_policy_update_bytes
 * otherwise) over their time, so that the simulator's bytes / bandwidth is the time measured here;
 * 0 when the plan updates nothing here. */
hap_status hap_replay_kernel_rows(const hap_plan *p, const hap_graph *g, hap_comm *world,
                                  const hap_replay_options *o, hap_profile_kernel **rows,
                                  int32_t *n_rows, double *update_Bps, hap_err *err);

/* hap_replay_kernel_rows, and with o->collectives the collectives' times into *colls (the same on
 * every rank; owned, hap_replay_colls_free; zeroed without o->collectives or on failure). */
hap_status hap_replay_plan(const hap_plan *p, const hap_graph *g, hap_comm *world,
                           const hap_replay_options *o, hap_profile_kernel **rows, int32_t *n_rows,
                           double *update_Bps, hap_replay_colls *colls, hap_err *err);

#endif
