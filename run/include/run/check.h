/* check.h — hap-run --check: after each of a distributed run's first iterations, compare it with
 * the single-device reference run (reference.h) trained the same way (same initial values,
 * inputs, dropout masks, learning rate and training policy), so the first iteration that differs
 * is the one reported. Compared, and any non-finite value fails:
 *   - the iteration's loss (each rank's share checked for being finite);
 *   - every world rank's copy of every trainable parameter's gradient of the iteration (all
 *     replicas, shards and ZeRO shards: a rank that drifts from the others shows), as stored
 *     (scaled by the loss scale S in both runs: the same units);
 *   - every rank's copy of every trainable parameter after the iteration's update (the float32
 *     master in mixed precision).
 * The reference follows the run: once iteration k's values are compared, rank 0 sets the
 * reference's trainable parameters to the run's (the lowest rank's copy of each element), so
 * iteration k + 1 starts both runs from the same values and each comparison judges one
 * iteration's arithmetic. Without it, differences the tolerances allow (Adam's noise elements
 * below, which may move 2 lr apart) would feed the next iteration's gradients and fail a correct
 * run (dp-ev bert, 64 wide, Adam: 3.4e-4 at iteration 2). Optimizer state stays each run's own.
 * Tolerances (relative; hap_check_tolerances_for gives the ones applied and printed):
 *   loss       |loss - ref| / |ref|
 *   gradient   max |g - ref| over the copy / the tensor's largest |ref gradient|, floored at
 *              `floor` of the model's largest (a tensor whose true gradient is ~0, e.g. attention's
 *              key bias, holds rounding noise in both runs)
 *   parameter  (max |w - ref| less param_ulps float32 ulps of ref, less Adam's allowance) / the
 *              tensor's largest update |ref - initial| (same floor): the value itself is ~1e3
 *              times larger than its update at the default learning rate, so it is measured
 *              against the update.
 * fp32 (any optimizer) keeps the constants below: 1e-4 each, floor 1e-3, 2 ulps.
 * Mixed precision: rounding to the compute dtype D at every stored tensor dominates. Unit
 * roundoff u: bfloat16 keeps 8 significant bits, u = 2^-8 ~ 3.9e-3; float16 11 bits, u = 2^-11
 * ~ 4.9e-4. A distributed run rounds partial results (row-parallel partial sums, data-parallel
 * gradient partials) where the reference rounds whole ones, and the differences grow through the
 * layers. Worse, rounding flips discrete choices (a ReLU input near 0, a max-pool tie, a top-2
 * route), which moves single elements by up to the tensor's largest gradient: a largest-element
 * comparison cannot tell that from a bug. So in mixed precision a copy's error is its relative L2
 * norm: ||x - ref||_2 / ||ref||_2 over the copy (values: of the update x - initial, less the ulps
 * and Adam's allowance per element), the denominator floored at `floor` x the model's largest
 * gradient / update per element (root mean square). Measured on the zoo's small configurations
 * but vgg19 (whose 19 layers reach 0.09 in bf16, 0.3 with one-image micro-batches: not covered)
 * under hap plans on 2 and 4 ranks, first two steps taken: bf16
 * <= 3.9e-2, fp16 <= 1.5e-2 (gradients; parameters less); the loss differs by <= 8.8e-3 (bf16:
 * vgg19 with micro-batches of one image, whose log-probabilities are stored in bf16; 1e-3 for the
 * others) / 1.1e-4 (fp16). Hence: loss 2e-2 (bf16, ~5u), 1e-3 (fp16, 2u); L2 0.1 (bf16) / 0.05
 * (fp16), 2.5-3x the worst seen, floor 1e-2 (0.1 would let a tensor with small gradients, e.g.
 * the first layer's weight, be updated at twice the learning rate unnoticed). This catches wrong
 * factors (a missing all-reduce, an unscaled or doubly scaled gradient, a wrong learning rate, a
 * step not skipped) but not errors of a few roundings; two further exact checks cover mixed
 * precision's own steps: under grad_accum=half every gradient element must be a value of D, and an
 * iteration whose step the reference skipped (fp16 overflow) compares no gradients (they hold Inf)
 * but requires every parameter unchanged. Adam and AdamW (any precision): the step divides each
 * element's moment by the root of its second moment, so an element whose gradient is rounding noise
 * in both runs (true gradient ~0, e.g. attention's key bias) moves by ~lr with a sign of chance in
 * each run, a difference of up to twice its update. So each element gets an allowance built from
 * the gradient differences measured on it: with e the largest relative difference |g - ref| / |ref|
 * of its gradient over the rank copies and iterations so far, a step t changes Adam's m^/sqrt(v^)
 * by at most B_t min(2, 2e / (1 - e)) (first order, Cauchy-Schwarz), B_t = sqrt(sum_k a_k^2 / b_k)
 * the largest |m^/sqrt(v^)| any gradient history gives (a_k, b_k the weights of step k's gradient
 * in m^ and v^; B_1 = 1); the allowance is lr times that (both runs took the step from the same
 * values). An element
 * with a sound gradient (e ~ 1e-7 in fp32) is held to the relative tolerance; a noise element may
 * differ by up to 2 lr per step. Ownership: plain values. */
#ifndef HAP_RUN_CHECK_H
#define HAP_RUN_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "exec/comm.h"
#include "model/graph.h"
#include "model/policy.h"
#include "run/pipeline_run.h"
#include "run/run.h"

#define HAP_CHECK_LOSS_TOL   1e-4
#define HAP_CHECK_GRAD_TOL   1e-4
#define HAP_CHECK_PARAM_TOL  1e-4
#define HAP_CHECK_PARAM_ULPS 2
#define HAP_CHECK_FLOOR      1e-3 /* of the model's largest gradient / update */
/* Mixed precision (see above): */
#define HAP_CHECK_BF16_LOSS_TOL  2e-2 /* ~5u, u = 2^-8 */
#define HAP_CHECK_FP16_LOSS_TOL  1e-3 /* ~2u = 2^-10 */
#define HAP_CHECK_BF16_NORM_TOL  0.1  /* gradients and parameters: relative L2 per copy */
#define HAP_CHECK_FP16_NORM_TOL  0.05
#define HAP_CHECK_MIXED_FLOOR    1e-2
#define HAP_CHECK_MIN_ITERATIONS 2 /* so that an update is inside what is compared */
#define HAP_CHECK_MAX_REPORTED   16
#define HAP_CHECK_LINE           320

/* The tolerances a policy's check applies (and hap-run prints). */
typedef struct hap_check_tolerances {
  double loss, grad, param; /* relative, as defined above */
  int32_t param_ulps;       /* float32 ulps of the value forgiven beyond it */
  double floor;             /* of the model's largest gradient / update */
  bool adam_allowance;      /* Adam / AdamW: the per-element allowance above */
  bool norm;                /* mixed precision: a copy's error is its relative L2 norm (above) */
} hap_check_tolerances;

/* fp32: HAP_CHECK_LOSS_TOL, _GRAD_TOL, _PARAM_TOL, _PARAM_ULPS, _FLOOR exactly (the default
 * policy's check is the one from before policies); bf16 / fp16: the mixed-precision constants.
 * adam_allowance for Adam and AdamW. NULL: the default policy. */
hap_check_tolerances hap_check_tolerances_for(const hap_train_policy *p);

/* B_t = sqrt(sum_k a_k^2 / b_k), k = 1..t: the largest |m^ / sqrt(v^)| of Adam's step t (moment
 * decay rates beta1, beta2) over all gradient histories; attained by g_k proportional to
 * a_k / b_k. B_1 = 1. */
double hap_check_adam_ratio_bound(double beta1, double beta2, int64_t t);

typedef struct hap_check_result {
  bool passed;                          /* this iteration; on every rank */
  int32_t iterations;                   /* iterations compared so far */
  double loss, ref_loss;                /* this iteration's */
  double loss_err, grad_err, param_err; /* largest relative errors so far (as defined above) */
  int32_t n_params;                     /* trainable parameters compared */
  int32_t n_copies;                     /* rank copies compared, per quantity */
  int32_t n_floored;                    /* tensors whose gradient scale was the floor */
  int32_t n_skipped;  /* iterations so far whose step the reference skipped (fp16 overflow): their
                         gradients were not compared */
  int32_t steps;      /* optimizer steps the reference has taken (skipped ones not counted) */
  int32_t n_failures; /* this iteration's failing (tensor, quantity, rank) copies, and the loss */
  /* the largest min(n_failures, HAP_CHECK_MAX_REPORTED) failures, largest first, one line each,
   * with their relative sizes (INFINITY: not finite) */
  char failures[HAP_CHECK_MAX_REPORTED][HAP_CHECK_LINE];
  double failure_size[HAP_CHECK_MAX_REPORTED];
} hap_check_result;

typedef struct hap_checker hap_checker;

/* A checker for runs of graph g with `seed`, learning rate `lr` and training policy `policy`
 * (NULL: the default; copied) over `world` (the runner's world; borrowed, as g): rank 0 will keep
 * the reference, built at the first compare. An invalid policy is HAP_EINVAL. Owned;
 * hap_checker_destroy. */
hap_status hap_checker_create(const hap_graph *g, hap_comm *world, uint64_t seed, double lr,
                              const hap_train_policy *policy, hap_checker **out, hap_err *err);
/* The tolerances this checker applies (hap_check_tolerances_for its policy). */
hap_check_tolerances hap_checker_tolerances(const hap_checker *c);

/* Collective: `run` has just finished its next iteration (the first call: iteration 1). Rank 0
 * advances the reference by one iteration and fills *res (zero it before the first call; the
 * largest errors accumulate); the other ranks get only res->passed. An error (out of memory, a
 * reference kernel failing) is returned on every rank when rank 0 has it. */
hap_status hap_checker_compare(hap_checker *c, hap_run *run, hap_check_result *res, hap_err *err);
/* The same for a pipelined plan's run (pipeline_run.h): parameters by the whole graph's ids, each
 * rank's copy from the stage that holds it (ranks whose stages do not hold it have none). */
hap_status hap_checker_compare_pipeline(hap_checker *c, hap_pipe_run *run, hap_check_result *res,
                                        hap_err *err);
void hap_checker_destroy(hap_checker *c);

#endif
