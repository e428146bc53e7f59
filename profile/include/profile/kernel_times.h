/* kernel_times.h — per-op kernel timings for hap-profile: the CPU kernels of kernels/
 * (hap_kernel_forward / hap_kernel_backward) timed at exact local shapes, as the rows of a
 * device's kernel table (profile_store.h hap_profile_kernel, matched by hap_kernel_shape_key in
 * cluster/cost.c's hap_compute_time).
 * Cases come from the built-in grid (cluster/kernel_model.h: every op the zoo models use, whose
 * rows hap_compute_time also generalises to other shapes) or from a plan: the local applications
 * one device runs under it (plan/lower.h hap_lowered_work). Contract: cases of one list have
 * distinct (op, shape key); float inputs are float32, index inputs int64. Timing runs the real
 * kernels on synthetic data (floats in [-1, 1], indices in range), forward and — when some input
 * needs a gradient — backward; one sample is one call on CLOCK_MONOTONIC, plus the emulated-speed
 * pad (emulate.h) the executor would wait. Ownership: case lists are malloc'd arrays the caller
 * frees with free(); a case's io.attrs points into the case itself, so cases are used in place
 * (hap_kcase_fix after copying one). */
#ifndef HAP_KERNEL_TIMES_H
#define HAP_KERNEL_TIMES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"
#include "model/ops.h"
#include "plan/lower.h"
#include "plan/plan.h"
#include "store/profile_store.h"

typedef struct hap_kcase {
  hap_op op;
  hap_attrs attrs;
  hap_op_io io;  /* inferred; in_grad marks the gradients backward computes */
  bool fwd, bwd; /* directions to time */
} hap_kcase;

/* Point kc->io.attrs at kc->attrs (after a struct copy). */
void hap_kcase_fix(hap_kcase *kc);

/* The built-in grid (hap_kernel_grid_case): quick = one or two small shapes per op (milliseconds
 * each), else 2-3 shapes per op at model-like sizes. */
hap_status hap_kcases_default(bool quick, hap_kcase **out, int32_t *n, hap_err *err);

/* The distinct compute applications device `dev` runs under plan `p` for graph `g` (validated
 * together), forward and backward. */
hap_status hap_kcases_from_plan(const hap_plan *p, const hap_graph *g, int32_t dev, hap_kcase **out,
                                int32_t *n, hap_err *err);

/* The case of compute task t of `lw` on device `dev`: its op, attributes and local shapes, in the
 * task's one direction (in_grad cleared for a forward task, as hap_kcases_from_plan keys it). */
hap_status hap_kcase_of_task(hap_lowered *lw, int32_t t, int32_t dev, hap_kcase *kc, hap_err *err);

/* The kernel-table row of kc in one direction from samples t[0 .. reps) (s): p50,
 * p95, reps and the shape text. */
hap_status hap_kcase_row(const hap_kcase *kc, bool backward, const double *t, int32_t reps,
                         hap_profile_kernel *row, hap_err *err);

/* Time one case: `warmup` untimed then `reps` timed calls per direction, at emulated `speed` in
 * (0, 1]. rows[0 .. *n_rows) get the forward and/or backward row (p50, p95, reps, shape text).
 * HAP_EUNSUPPORTED when the CPU kernels do not run the case (e.g. a float16 input). */
hap_status hap_kcase_time(const hap_kcase *kc, int32_t reps, int32_t warmup, double speed,
                          hap_profile_kernel rows[2], int32_t *n_rows, hap_err *err);

#endif
