/* fit.c — percentiles, trimmed means, bus-bandwidth factors and alpha-beta fits (fit.h). */
#include "store/fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double hap_quantile_sorted(const double *sorted, int32_t n, double q) {
  if (n < 1)
    return NAN;
  if (q <= 0 || n == 1)
    return sorted[0];
  if (q >= 1)
    return sorted[n - 1];
  double pos = q * (double)(n - 1);
  int32_t lo = (int32_t)floor(pos);
  double frac = pos - (double)lo;
  if (lo + 1 >= n)
    return sorted[n - 1];
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

/* A sorted copy of x[0..n), n >= 1 (free()); NULL when out of memory. */
static double *sorted_copy(const double *x, int32_t n) {
  double *s = malloc((size_t)n * sizeof *s);
  if (s == NULL)
    return NULL;
  memcpy(s, x, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return s;
}

hap_status hap_p50_p95(const double *x, int32_t n, double *p50_s, double *p95_s) {
  if (n < 1)
    return HAP_EINVAL;
  double *s = sorted_copy(x, n);
  if (s == NULL)
    return HAP_ENOMEM;
  *p50_s = hap_quantile_sorted(s, n, 0.50);
  *p95_s = hap_quantile_sorted(s, n, 0.95);
  free(s);
  return HAP_OK;
}

hap_status hap_trimmed_mean(const double *x, int32_t n, double trim, double *mean) {
  if (n < 1 || !(trim >= 0 && trim < 0.5))
    return HAP_EINVAL;
  double *s = sorted_copy(x, n);
  if (s == NULL)
    return HAP_ENOMEM;
  int32_t cut = (int32_t)ceil(trim * n);
  if (cut > (n - 1) / 2)
    cut = (n - 1) / 2; /* at least one value kept */
  int32_t kept = n - 2 * cut;
  double sum = 0;
  for (int32_t i = cut; i < n - cut; i++)
    sum += s[i];
  *mean = sum / kept;
  free(s);
  return HAP_OK;
}

double hap_busbw_factor(hap_coll_kind kind, int32_t n_ranks) {
  if (n_ranks < 1)
    return 0;
  double n = n_ranks;
  switch (kind) {
  case HAP_COLL_ALL_REDUCE: return 2.0 * (n - 1) / n;
  case HAP_COLL_ALL_GATHER:
  case HAP_COLL_REDUCE_SCATTER:
  case HAP_COLL_ALL_TO_ALL: return (n - 1) / n;
  case HAP_COLL_BROADCAST: return 1.0;
  case HAP_COLL_KIND_COUNT: break;
  }
  return 0;
}

static hap_status check_points(const double *sizes, const double *times, int32_t n) {
  if (n < 1)
    return HAP_EINVAL;
  bool any_bytes = false;
  for (int32_t i = 0; i < n; i++) {
    if (!isfinite(sizes[i]) || sizes[i] < 0 || !isfinite(times[i]) || times[i] <= 0)
      return HAP_EINVAL;
    any_bytes = any_bytes || sizes[i] > 0;
  }
  return any_bytes ? HAP_OK : HAP_EINVAL;
}

hap_status hap_fit_alpha_beta(const double *sizes_bytes, const double *times_s, int32_t n,
                              double *alpha_s, double *beta_Bps) {
  HAP_TRY(check_points(sizes_bytes, times_s, n));
  double s_mean = 0, t_mean = 0;
  for (int32_t i = 0; i < n; i++) {
    s_mean += sizes_bytes[i];
    t_mean += times_s[i];
  }
  s_mean /= n;
  t_mean /= n;
  double sxx = 0, sxy = 0; /* centred sums: bytes^2, bytes*s */
  for (int32_t i = 0; i < n; i++) {
    sxx += (sizes_bytes[i] - s_mean) * (sizes_bytes[i] - s_mean);
    sxy += (sizes_bytes[i] - s_mean) * (times_s[i] - t_mean);
  }
  if (sxx == 0) { /* one distinct size (> 0, checked): no latency can be separated */
    *alpha_s = 0;
    *beta_Bps = s_mean / t_mean;
    return HAP_OK;
  }
  double slope = sxy / sxx; /* s per byte = 1 / beta */
  if (slope <= 0) {
    double best = 0, resid = 0;
    for (int32_t i = 0; i < n; i++)
      best = fmax(best, sizes_bytes[i] / times_s[i]);
    for (int32_t i = 0; i < n; i++)
      resid += times_s[i] - sizes_bytes[i] / best;
    *beta_Bps = best;
    *alpha_s = fmax(0, resid / n);
    return HAP_OK;
  }
  double alpha = t_mean - slope * s_mean;
  if (alpha < 0) {
    double st = 0, ss = 0;
    for (int32_t i = 0; i < n; i++) {
      st += sizes_bytes[i] * times_s[i];
      ss += sizes_bytes[i] * sizes_bytes[i];
    }
    slope = st / ss;
    alpha = 0;
  }
  *alpha_s = alpha;
  *beta_Bps = 1.0 / slope;
  return HAP_OK;
}

double hap_piecewise_time(const hap_piecewise_fit *f, double bytes) {
  if (bytes < f->threshold_bytes)
    return f->alpha_small_s + bytes / f->beta_small_Bps;
  return f->alpha_large_s + bytes / f->beta_large_Bps;
}

double hap_piecewise_max_rel_error(const hap_piecewise_fit *f, const double *sizes_bytes,
                                   const double *times_s, int32_t n) {
  double worst = 0;
  for (int32_t i = 0; i < n; i++)
    worst = fmax(worst, fabs(hap_piecewise_time(f, sizes_bytes[i]) - times_s[i]) / times_s[i]);
  return worst;
}

/* Fit the piece [lo, hi); a piece without a non-zero size cannot be fitted. */
static bool fit_piece(const double *sizes, const double *times, int32_t lo, int32_t hi,
                      double *alpha_s, double *beta_Bps) {
  return hap_fit_alpha_beta(sizes + lo, times + lo, hi - lo, alpha_s, beta_Bps) == HAP_OK;
}

hap_status hap_fit_piecewise(const double *sizes_bytes, const double *times_s, int32_t n,
                             hap_piecewise_fit *out) {
  HAP_TRY(check_points(sizes_bytes, times_s, n));
  for (int32_t i = 1; i < n; i++)
    if (!(sizes_bytes[i] > sizes_bytes[i - 1]))
      return HAP_EINVAL;
  hap_piecewise_fit best = {0};
  HAP_TRY(hap_fit_alpha_beta(sizes_bytes, times_s, n, &best.alpha_large_s, &best.beta_large_Bps));
  best.alpha_small_s = best.alpha_large_s;
  best.beta_small_Bps = best.beta_large_Bps;
  /* a split has to beat one piece by a margin, so rounding noise never splits a single regime */
  double best_err = hap_piecewise_max_rel_error(&best, sizes_bytes, times_s, n) - 1e-6;
  for (int32_t k = 2; k + 2 <= n; k++) {
    hap_piecewise_fit f = {.threshold_bytes = sizes_bytes[k]};
    if (!fit_piece(sizes_bytes, times_s, 0, k, &f.alpha_small_s, &f.beta_small_Bps) ||
        !fit_piece(sizes_bytes, times_s, k, n, &f.alpha_large_s, &f.beta_large_Bps))
      continue;
    double e = hap_piecewise_max_rel_error(&f, sizes_bytes, times_s, n);
    if (e < best_err) {
      best = f;
      best_err = e;
    }
  }
  *out = best;
  return HAP_OK;
}
