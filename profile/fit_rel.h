/* fit_rel.h — alpha-beta fits that weigh every message size alike: least squares of the
 * relative error (weights 1/t^2) instead of the absolute error, so microsecond latencies are not
 * drowned by millisecond transfers (core's hap_fit_alpha_beta sets alpha = 0 on such sweeps).
 * hap-profile stores these fits; the model and its meaning are core's (fit.h, cluster.h).
 * Pure math on caller-owned arrays. */
#ifndef HAP_FIT_REL_H
#define HAP_FIT_REL_H

#include <stdint.h>

#include "fit.h"
#include "profile_store.h"

/* t = alpha + S / beta minimising sum ((t_fit - t) / t)^2, with core's physical rules (alpha >= 0,
 * 0 < beta < inf: a negative intercept refits through the origin, a slope <= 0 or a single size
 * falls back to hap_fit_alpha_beta). HAP_EINVAL as hap_fit_alpha_beta. */
hap_status hap_fit_alpha_beta_rel(const double *sizes_bytes, const double *times_s, int32_t n,
                                  double *alpha_s, double *beta_Bps);

/* Piecewise form (fit.h's hap_piecewise_fit): one piece, or two with at least 2 points each, each
 * fitted by hap_fit_alpha_beta_rel; the winner has the smallest root-mean-square relative error
 * over all points (a split must beat one piece by more than 1e-6). Sizes strictly increasing. */
hap_status hap_fit_piecewise_rel(const double *sizes_bytes, const double *times_s, int32_t n,
                                 hap_piecewise_fit *out);

/* Replace every p2p and collective fit of p (from its p50s) by the fits above. */
hap_status hap_profile_fit_rel(hap_profile *p, hap_err *err);

#endif
