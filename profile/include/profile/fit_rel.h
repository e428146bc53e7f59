/* fit_rel.h — alpha-beta fits that weigh every message size alike: least squares of the
 * relative error (weights 1/t^2) instead of the absolute error, so microsecond latencies are not
 * drowned by millisecond transfers (core's hap_fit_alpha_beta sets alpha = 0 on such sweeps).
 * The piecewise form (cluster.h's hap_ab_fit) follows the regimes of a transport (latency,
 * protocol switch, cache, DRAM): its breakpoints are chosen by dynamic programming over the
 * measured sizes, its number of pieces by leave-one-out cross-validation.
 * hap-profile stores these fits; the model and its meaning are core's (fit.h, cluster.h).
 * Pure math on caller-owned arrays. */
#ifndef HAP_FIT_REL_H
#define HAP_FIT_REL_H

#include <stdint.h>

#include "store/fit.h"
#include "store/profile_store.h"

/* Most pieces hap_fit_pieces_rel tries, and the fewest points one piece is fitted on. */
#define HAP_FIT_REL_MAX_PIECES 6
#define HAP_FIT_REL_MIN_POINTS 2
/* Largest relative miss at a measured size hap_fit_pieces_rel accepts while more pieces are
 * possible (0.5: no point off by more than half its time). */
#define HAP_FIT_REL_MAX_MISS HAP_FIT_MAX_MISS

/* t = alpha + S / beta minimising sum ((t_fit - t) / t)^2, with core's physical rules (alpha >= 0,
 * 0 < beta < inf: a negative intercept refits through the origin, a slope <= 0 or a single size
 * falls back to hap_fit_alpha_beta). HAP_EINVAL as hap_fit_alpha_beta. */
hap_status hap_fit_alpha_beta_rel(const double *sizes_bytes, const double *times_s, int32_t n,
                                  double *alpha_s, double *beta_Bps);

/* Exactly n_pieces pieces of at least min_points consecutive points each, every piece fitted by
 * hap_fit_alpha_beta_rel, the breakpoints minimising the summed squared relative error over all
 * points (dynamic programming, exact). A bound between two pieces lies at the geometric mean of
 * the last size of one and the first size of the next; the last piece is unbounded. Sizes must
 * be finite, >= 0 and strictly increasing with one > 0, times finite and > 0, min_points >= 2,
 * 1 <= n_pieces <= HAP_FIT_MAX_PIECES and n_pieces * min_points <= n; otherwise HAP_EINVAL with
 * one line in err naming the point or the argument. *sse (may be NULL) gets the summed squared
 * relative error. */
hap_status hap_fit_segments_rel(const double *sizes_bytes, const double *times_s, int32_t n,
                                int32_t n_pieces, int32_t min_points, hap_ab_fit *out, double *sse,
                                hap_err *err);

/* The piecewise fit hap-profile stores: hap_fit_segments_rel with min_points =
 * HAP_FIT_REL_MIN_POINTS and the number of pieces (1 .. HAP_FIT_REL_MAX_PIECES, as the points
 * allow) whose leave-one-out error is smallest: each interior point is left out in turn, the
 * rest refitted, and log(1 + |relative error|) of the prediction at the left-out size summed (a
 * tie, within rounding, keeps fewer pieces; the log is robust to a regime switch no piece count can
 * predict); then, while the fit misses a measured point by more than HAP_FIT_REL_MAX_MISS (a
 * regime of only the largest sizes, which leave-one-out never leaves out), one piece more, as the
 * points allow. Errors as hap_fit_segments_rel. */
hap_status hap_fit_pieces_rel(const double *sizes_bytes, const double *times_s, int32_t n,
                              hap_ab_fit *out, hap_err *err);

/* Replace every p2p fit (the one-piece link by hap_fit_alpha_beta_rel, the pieces by
 * hap_fit_pieces_rel) and collective fit (hap_fit_pieces_rel) of p from its p50s. */
hap_status hap_profile_fit_rel(hap_profile *p, hap_err *err);

#endif
