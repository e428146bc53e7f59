/* check.h — hap-run --check: after each of a distributed run's first iterations, compare it with
 * the single-device reference run (reference.h) trained the same way (same initial values,
 * inputs, dropout masks and SGD learning rate), so the first iteration that differs is the one
 * reported. Compared, and any non-finite value fails:
 *   - the iteration's loss (each rank's share checked for being finite);
 *   - every world rank's copy of every trainable parameter's gradient of the iteration (all
 *     replicas, shards and ZeRO shards: a rank that drifts from the others shows);
 *   - every rank's copy of every trainable parameter after the iteration's update.
 * Tolerances (relative; the constants below are the ones applied and printed):
 *   loss       |loss - ref| / |ref|
 *   gradient   max |g - ref| over the copy / the tensor's largest |ref gradient|, floored at
 *              1e-3 of the model's largest (a tensor whose true gradient is ~0, e.g. attention's
 *              key bias, holds rounding noise in both runs)
 *   parameter  (max |w - ref| less HAP_CHECK_PARAM_ULPS float32 ulps of ref) / the tensor's largest
 *              update |ref - initial| (same floor): the value itself is ~1e3 times larger than
 *              its update at the default learning rate, so it is measured against the update.
 * Ownership: plain values. */
#ifndef HAP_RUN_CHECK_H
#define HAP_RUN_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "exec/comm.h"
#include "model/graph.h"
#include "run/run.h"

#define HAP_CHECK_LOSS_TOL       1e-4
#define HAP_CHECK_GRAD_TOL       1e-4
#define HAP_CHECK_PARAM_TOL      1e-4
#define HAP_CHECK_PARAM_ULPS     2
#define HAP_CHECK_FLOOR          1e-3 /* of the model's largest gradient / update */
#define HAP_CHECK_MIN_ITERATIONS 2    /* so that an update is inside what is compared */
#define HAP_CHECK_MAX_REPORTED   16
#define HAP_CHECK_LINE           320

typedef struct hap_check_result {
  bool passed;                          /* this iteration; on every rank */
  int32_t iterations;                   /* iterations compared so far */
  double loss, ref_loss;                /* this iteration's */
  double loss_err, grad_err, param_err; /* largest relative errors so far (as defined above) */
  int32_t n_params;                     /* trainable parameters compared */
  int32_t n_copies;                     /* rank copies compared, per quantity */
  int32_t n_floored;                    /* tensors whose gradient scale was the floor */
  int32_t n_failures; /* this iteration's failing (tensor, quantity, rank) copies, and the loss */
  /* the largest min(n_failures, HAP_CHECK_MAX_REPORTED) failures, largest first, one line each,
   * with their relative sizes (INFINITY: not finite) */
  char failures[HAP_CHECK_MAX_REPORTED][HAP_CHECK_LINE];
  double failure_size[HAP_CHECK_MAX_REPORTED];
} hap_check_result;

typedef struct hap_checker hap_checker;

/* A checker for runs of graph g with `seed` and learning rate `lr` over `world` (the runner's
 * world; borrowed, as g): rank 0 will keep the reference, built at the first compare. Owned;
 * hap_checker_destroy. */
hap_status hap_checker_create(const hap_graph *g, hap_comm *world, uint64_t seed, double lr,
                              hap_checker **out, hap_err *err);

/* Collective: `run` has just finished its next iteration (the first call: iteration 1). Rank 0
 * advances the reference by one iteration and fills *res (zero it before the first call; the
 * largest errors accumulate); the other ranks get only res->passed. An error (out of memory, a
 * reference kernel failing) is returned on every rank when rank 0 has it. */
hap_status hap_checker_compare(hap_checker *c, hap_run *run, hap_check_result *res, hap_err *err);
void hap_checker_destroy(hap_checker *c);

#endif
