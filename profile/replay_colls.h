/* replay_colls.h (private to profile/) — the collective timing of a plan replay (replay.h,
 * hap_replay_options.collectives): which collective tasks are timed and under which key (kind,
 * sub-group, size as the simulator reads a fit), one sample per key and timed iteration.
 * Contract: every rank creates it from the same lowering and calls hap_coll_timer_sample after
 * the same iterations (it all-gathers over `world`), so every rank holds the same samples.
 * Ownership: the timer borrows the lowering; hap_coll_timer_take moves the results out. */
#ifndef HAP_PROFILE_REPLAY_COLLS_H
#define HAP_PROFILE_REPLAY_COLLS_H

#include "base/status.h"
#include "exec/comm.h"
#include "plan/lower.h"
#include "profile/replay.h"

typedef struct hap_coll_timer hap_coll_timer;

/* The timed tasks of lw: every collective with a sub-group of two or more devices that moves
 * something (an emulated half-precision sum with the rounding hap-run does inside the task: the
 * simulator then adds none, cost.h hap_coll_measured). At most max_iters samples per key. */
hap_status hap_coll_timer_create(hap_lowered *lw, int32_t max_iters, hap_coll_timer **out,
                                 hap_err *err);
void hap_coll_timer_destroy(hap_coll_timer *x);

/* The collective tasks timed, in order: *n of them (the array is the timer's). */
const int32_t *hap_coll_timer_tasks(const hap_coll_timer *x, int32_t *n);

/* After a timed iteration (collective over world): mine[j] is this rank's time of one run of timed
 * task j in it (s; hap_run_task_runs' own time / runs), or < 0 when it did not run. Every key gets
 * a sample: the mean over its tasks of each task's time on the sub-group member that took least.
 * An iteration in which a timed task did not run on every member of its sub-group gives no sample
 * to any key (so every key has as many). */
hap_status hap_coll_timer_sample(hap_coll_timer *x, const double *mine, hap_comm *world,
                                 hap_err *err);

/* The keys and their samples into *out (warmup recorded as given); x is left empty. */
void hap_coll_timer_take(hap_coll_timer *x, int32_t warmup, hap_replay_colls *out);

#endif
