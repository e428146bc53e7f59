/* fit_rel.c — relative-error alpha-beta fits (fit_rel.h). */
#include "fit_rel.h"

#include <math.h>
#include <stdlib.h>

hap_status hap_fit_alpha_beta_rel(const double *s, const double *t, int32_t n, double *alpha_s,
                                  double *beta_Bps) {
  /* Validation and the degenerate cases are core's. */
  HAP_TRY(hap_fit_alpha_beta(s, t, n, alpha_s, beta_Bps));
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int32_t i = 0; i < n; i++) {
    double w = 1.0 / (t[i] * t[i]);
    sw += w;
    sx += w * s[i];
    sy += w * t[i];
    sxx += w * s[i] * s[i];
    sxy += w * s[i] * t[i];
  }
  double det = sw * sxx - sx * sx;
  if (!(det > 0))
    return HAP_OK;                           /* one distinct size: keep core's answer */
  double slope = (sw * sxy - sx * sy) / det; /* s per byte */
  double alpha = (sy - slope * sx) / sw;
  if (!(slope > 0) || !isfinite(slope))
    return HAP_OK; /* time does not grow with size: core's rule */
  if (alpha < 0) {
    alpha = 0;
    slope = sxy / sxx;
  }
  *alpha_s = alpha;
  *beta_Bps = 1.0 / slope;
  return HAP_OK;
}

static double rms_rel(const hap_piecewise_fit *f, const double *s, const double *t, int32_t n) {
  double sum = 0;
  for (int32_t i = 0; i < n; i++) {
    double e = (hap_piecewise_time(f, s[i]) - t[i]) / t[i];
    sum += e * e;
  }
  return sqrt(sum / n);
}

hap_status hap_fit_piecewise_rel(const double *s, const double *t, int32_t n,
                                 hap_piecewise_fit *out) {
  for (int32_t i = 1; i < n; i++)
    if (!(s[i] > s[i - 1]))
      return HAP_EINVAL;
  hap_piecewise_fit best = {0};
  HAP_TRY(hap_fit_alpha_beta_rel(s, t, n, &best.alpha_small_s, &best.beta_small_Bps));
  best.alpha_large_s = best.alpha_small_s;
  best.beta_large_Bps = best.beta_small_Bps;
  double best_err = rms_rel(&best, s, t, n), one_err = best_err;
  for (int32_t k = 2; k + 2 <= n; k++) {
    hap_piecewise_fit f = {.threshold_bytes = s[k]};
    if (hap_fit_alpha_beta_rel(s, t, k, &f.alpha_small_s, &f.beta_small_Bps) != HAP_OK ||
        hap_fit_alpha_beta_rel(s + k, t + k, n - k, &f.alpha_large_s, &f.beta_large_Bps) != HAP_OK)
      continue;
    double e = rms_rel(&f, s, t, n);
    if (e < best_err && e < one_err - 1e-6) {
      best = f;
      best_err = e;
    }
  }
  *out = best;
  return HAP_OK;
}

static double *as_double(const int64_t *v, int32_t n) {
  double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  for (int32_t i = 0; d != NULL && i < n; i++)
    d[i] = (double)v[i];
  return d;
}

hap_status hap_profile_fit_rel(hap_profile *p, hap_err *err) {
  for (int32_t j = 0; j < p->n_p2p; j++) {
    hap_profile_p2p *x = &p->p2p[j];
    double *s = as_double(x->sizes_bytes, x->n_sizes);
    hap_status st = s == NULL ? HAP_ENOMEM
                              : hap_fit_alpha_beta_rel(s, x->p50_s, x->n_sizes, &x->fit.latency_s,
                                                       &x->fit.bandwidth_Bps);
    free(s);
    if (st != HAP_OK)
      return hap_err_set(err, st, "/p2p/%d-%d: cannot fit alpha-beta to the p50 times", x->src,
                         x->dst);
  }
  for (int32_t j = 0; j < p->n_colls; j++) {
    hap_profile_coll *c = &p->colls[j];
    double *s = as_double(c->sizes_bytes, c->n_sizes);
    hap_status st =
        s == NULL ? HAP_ENOMEM : hap_fit_piecewise_rel(s, c->p50_s, c->n_sizes, &c->fit);
    free(s);
    if (st != HAP_OK)
      return hap_err_set(err, st, "/collectives/%s/%s: cannot fit alpha-beta to the p50 times",
                         hap_coll_kind_name(c->kind), c->group);
  }
  return HAP_OK;
}
