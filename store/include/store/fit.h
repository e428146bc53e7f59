/* fit.h — statistics and latency-bandwidth fits of measured times: percentiles, the nccl-tests
 * bus-bandwidth factors, the least-squares alpha-beta (Hockney) model and its piecewise
 * (small / large message) form. Pure math on caller-owned arrays; nothing here keeps memory.
 *
 * Model: one message of S bytes takes t(S) = alpha_s + S / beta_Bps. */
#ifndef HAP_FIT_H
#define HAP_FIT_H

#include <stdint.h>

#include "base/status.h"
#include "cluster/cluster.h"

/* The largest relative miss |fit - measured| / measured at a measured size that a fit is trusted
 * with: hap-profile's fitter splits further while it can (profile/fit_rel.h), and `show` flags a
 * stored fit that still misses by more. */
#define HAP_FIT_MAX_MISS 0.5

/* The q-quantile (0 <= q <= 1) of sorted[0..n), n >= 1, by linear interpolation between the two
 * nearest order statistics (numpy's default "linear" method): position q * (n - 1). */
double hap_quantile_sorted(const double *sorted, int32_t n, double q);

/* p50 and p95 of x[0..n) (n >= 1; x is not modified). HAP_ENOMEM if the sorted copy fails,
 * HAP_EINVAL for n < 1. */
hap_status hap_p50_p95(const double *x, int32_t n, double *p50_s, double *p95_s);

/* Share of samples cut from each end by the replay's pricing statistic (hap_trimmed_mean): none,
 * the plain mean. A run's mean iteration counts every slow run of its tasks; cutting 5 % from each
 * end (at least one sample) priced a replay's rows 1-3 % below their samples' mean, 3 % with
 * VGG19's ten samples a row (reports/BENCHMARKS.md, "The price of a replayed row"). */
#define HAP_PRICE_TRIM 0.0

/* The mean of x[0..n) without its k smallest and k largest values, k = ceil(trim * n) but at most
 * (n - 1) / 2 (x is not modified; 0 <= trim < 0.5; n >= 1): with trim 0.05, one from each end of
 * 3 to 20 samples, two of 21 to 40, ...; with trim 0 the plain mean. Unlike the median, an
 * untrimmed mean summed over a task list is the mean of the list's total, which is what an
 * iteration's mean time adds up; trimming resists a rare stall but, as times skew long, falls
 * short of that mean. HAP_ENOMEM if the sorted copy fails, HAP_EINVAL for n < 1 or trim outside
 * [0, 0.5). */
hap_status hap_trimmed_mean(const double *x, int32_t n, double trim, double *mean);

/* nccl-tests busbw = algbw * factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter and
 * all_to_all (n-1)/n; broadcast 1. 0 for an unknown kind or n < 1. */
double hap_busbw_factor(hap_coll_kind kind, int32_t n_ranks);

/* Least squares of t = alpha + S / beta over n points (sizes in bytes, times in s); beta comes from
 * the slope. Rules that keep the model physical (alpha >= 0, 0 < beta < inf):
 *  - all sizes equal (and > 0): alpha = 0, beta = S / mean(t);
 *  - slope <= 0 (time does not grow with size): beta = max S_i / t_i, alpha = max(0, mean(t -
 * S/beta));
 *  - intercept < 0: refit through the origin, alpha = 0, 1/beta = sum(S t) / sum(S^2).
 * HAP_EINVAL for n < 1, a size < 0 or a time <= 0 (or non-finite), or only zero-byte sizes. */
hap_status hap_fit_alpha_beta(const double *sizes_bytes, const double *times_s, int32_t n,
                              double *alpha_s, double *beta_Bps);

/* Piecewise alpha-beta: t = alpha_small_s + S / beta_small_Bps for S < threshold_bytes, else
 * alpha_large_s + S / beta_large_Bps (the same meaning as hap_coll_fit in cluster.h). */
typedef struct hap_piecewise_fit {
  double threshold_bytes; /* bytes; 0 = one piece (the small piece equals the large one) */
  double alpha_small_s, beta_small_Bps;
  double alpha_large_s, beta_large_Bps;
} hap_piecewise_fit;

/* Seconds the fit predicts for S bytes. */
double hap_piecewise_time(const hap_piecewise_fit *f, double bytes);

/* Fit n points with strictly increasing sizes. Candidates: one piece over all points, and every
 * split with at least 2 points per piece (threshold = the first size of the large piece), each
 * piece fitted by hap_fit_alpha_beta. The winner has the smallest maximum relative error
 * |t_fit - t| / t over all points; a split must beat one piece by more than 1e-6 (so rounding
 * noise never splits one regime), and a tie between splits keeps the smaller threshold.
 * HAP_EINVAL as hap_fit_alpha_beta, or for sizes that do not increase. */
hap_status hap_fit_piecewise(const double *sizes_bytes, const double *times_s, int32_t n,
                             hap_piecewise_fit *out);

/* Largest |t_fit(S_i) - t_i| / t_i over the points (times > 0). */
double hap_piecewise_max_rel_error(const hap_piecewise_fit *f, const double *sizes_bytes,
                                   const double *times_s, int32_t n);

#endif
