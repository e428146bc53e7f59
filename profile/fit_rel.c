/* fit_rel.c — relative-error alpha-beta fits (fit_rel.h). */
#include "profile/fit_rel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- breakpoints by dynamic programming ------------------------------------------------------ */

/* Points valid for a fit: one line in err naming the first bad one. */
static hap_status check_points(const double *s, const double *t, int32_t n, hap_err *err) {
  if (n < 1)
    return hap_err_set(err, HAP_EINVAL, "fit: %d points, expected at least 1", n);
  for (int32_t i = 0; i < n; i++) {
    if (!isfinite(s[i]) || s[i] < 0)
      return hap_err_set(err, HAP_EINVAL, "fit: sizes_bytes[%d] is %g, expected a finite size >= 0",
                         i, s[i]);
    if (i > 0 && !(s[i] > s[i - 1]))
      return hap_err_set(err, HAP_EINVAL,
                         "fit: sizes_bytes[%d] = %g is not above sizes_bytes[%d] = %g, expected "
                         "strictly increasing sizes",
                         i, s[i], i - 1, s[i - 1]);
    if (!isfinite(t[i]) || !(t[i] > 0))
      return hap_err_set(err, HAP_EINVAL, "fit: times_s[%d] is %g, expected a finite time > 0 s", i,
                         t[i]);
  }
  if (!(s[n - 1] > 0))
    return hap_err_set(err, HAP_EINVAL, "fit: every size is 0 bytes, expected one > 0");
  return HAP_OK;
}

/* One piece fitted on points [lo, hi). */
typedef struct piece {
  double alpha_s, beta_Bps;
  double sse; /* summed squared relative error on its points; HUGE_VAL when it cannot be fitted */
} piece;

static piece fit_piece(const double *s, const double *t, int32_t lo, int32_t hi) {
  piece p = {0, 0, HUGE_VAL};
  if (hap_fit_alpha_beta_rel(s + lo, t + lo, hi - lo, &p.alpha_s, &p.beta_Bps) != HAP_OK)
    return p;
  double sse = 0;
  for (int32_t i = lo; i < hi; i++) {
    double e = (p.alpha_s + s[i] / p.beta_Bps - t[i]) / t[i];
    sse += e * e;
  }
  p.sse = sse;
  return p;
}

/* Every piece [lo, hi) of at least min_points points over n points, and the DP tables. */
typedef struct dp {
  int32_t n, min_points;
  piece *pieces;  /* [lo * (n + 1) + hi] */
  double *cost;   /* [k * (n + 1) + j]: best sse of the first j points in k + 1 pieces */
  int32_t *start; /* the first point of the last of those pieces */
} dp;

static void dp_free(dp *d) {
  free(d->pieces);
  free(d->cost);
  free(d->start);
}

static hap_status dp_init(dp *d, const double *s, const double *t, int32_t n, int32_t min_points) {
  size_t w = (size_t)n + 1;
  *d = (dp){n, min_points, malloc(w * w * sizeof *d->pieces),
            malloc(HAP_FIT_MAX_PIECES * w * sizeof *d->cost),
            malloc(HAP_FIT_MAX_PIECES * w * sizeof *d->start)};
  if (d->pieces == NULL || d->cost == NULL || d->start == NULL) {
    dp_free(d);
    return HAP_ENOMEM;
  }
  for (int32_t lo = 0; lo < n; lo++)
    for (int32_t hi = lo + min_points; hi <= n; hi++)
      d->pieces[(size_t)lo * w + (size_t)hi] = fit_piece(s, t, lo, hi);
  return HAP_OK;
}

/* Best split of all n points into k pieces (k * min_points <= n); returns the summed sse and
 * fills out (bounds at geometric means between pieces). */
static double dp_solve(dp *d, const double *s, int32_t k, hap_ab_fit *out) {
  size_t w = (size_t)d->n + 1;
  int32_t m = d->min_points;
  for (int32_t p = 0; p < k; p++)
    for (int32_t j = 0; j <= d->n; j++) {
      double best = HUGE_VAL;
      int32_t arg = -1;
      if (p == 0) {
        if (j >= m) {
          best = d->pieces[j].sse; /* lo = 0 */
          arg = 0;
        }
      } else {
        for (int32_t i = p * m; i + m <= j; i++) {
          double c = d->cost[(size_t)(p - 1) * w + (size_t)i] + d->pieces[(size_t)i * w + j].sse;
          if (c < best) { /* strict: ties keep the earlier breakpoint */
            best = c;
            arg = i;
          }
        }
      }
      d->cost[(size_t)p * w + (size_t)j] = best;
      d->start[(size_t)p * w + (size_t)j] = arg;
    }
  double total = d->cost[(size_t)(k - 1) * w + (size_t)d->n];
  hap_ab_fit f = {.n_pieces = k};
  int32_t hi = d->n;
  for (int32_t p = k - 1; p >= 0; p--) {
    int32_t lo = d->start[(size_t)p * w + (size_t)hi];
    if (lo < 0)
      return HUGE_VAL;
    const piece *pc = &d->pieces[(size_t)lo * w + (size_t)hi];
    f.alpha_s[p] = pc->alpha_s;
    f.beta_Bps[p] = pc->beta_Bps;
    f.upper_bytes[p] = p == k - 1 || hi >= d->n || hi < 1 ? INFINITY : sqrt(s[hi - 1] * s[hi]);
    hi = lo;
  }
  *out = f;
  return total;
}

hap_status hap_fit_segments_rel(const double *s, const double *t, int32_t n, int32_t n_pieces,
                                int32_t min_points, hap_ab_fit *out, double *sse, hap_err *err) {
  HAP_TRY(check_points(s, t, n, err));
  if (min_points < 2)
    return hap_err_set(err, HAP_EINVAL, "fit: min_points is %d, expected >= 2", min_points);
  if (n_pieces < 1 || n_pieces > HAP_FIT_MAX_PIECES)
    return hap_err_set(err, HAP_EINVAL, "fit: %d pieces, expected 1 to %d", n_pieces,
                       HAP_FIT_MAX_PIECES);
  if ((int64_t)n_pieces * min_points > n)
    return hap_err_set(err, HAP_EINVAL,
                       "fit: %d points cannot make %d pieces of at least %d points, expected at "
                       "least %d points",
                       n, n_pieces, min_points, n_pieces * min_points);
  dp d;
  if (dp_init(&d, s, t, n, min_points) != HAP_OK)
    return hap_err_set(err, HAP_ENOMEM, "fit: out of memory");
  double total = dp_solve(&d, s, n_pieces, out);
  dp_free(&d);
  if (!isfinite(total))
    return hap_err_set(err, HAP_EINVAL, "fit: no split into %d pieces can be fitted", n_pieces);
  if (sse != NULL)
    *sse = total;
  return HAP_OK;
}

/* Leave-one-out error of every piece count 1..max_k: cv[k - 1] = sum of log(1 + |e|) over the
 * interior points (at most about 40 of them, evenly spread, so long sweeps stay cheap), e the
 * relative error at the left-out size. The log keeps a size that no piece can predict (a
 * protocol switch between two measured sizes) from outweighing all the others. */
static hap_status loo_errors(const double *s, const double *t, int32_t n, int32_t max_k,
                             double *cv) {
  double *ls = malloc((size_t)n * sizeof *ls), *lt = malloc((size_t)n * sizeof *lt);
  hap_status st = ls != NULL && lt != NULL ? HAP_OK : HAP_ENOMEM;
  for (int32_t k = 0; k < max_k; k++)
    cv[k] = 0;
  int32_t stride = n > 42 ? (n + 39) / 40 : 1;
  for (int32_t out = 1; out + 1 < n && st == HAP_OK; out += stride) {
    memcpy(ls, s, (size_t)out * sizeof *ls);
    memcpy(lt, t, (size_t)out * sizeof *lt);
    memcpy(ls + out, s + out + 1, (size_t)(n - out - 1) * sizeof *ls);
    memcpy(lt + out, t + out + 1, (size_t)(n - out - 1) * sizeof *lt);
    dp d;
    st = dp_init(&d, ls, lt, n - 1, HAP_FIT_REL_MIN_POINTS);
    for (int32_t k = 1; k <= max_k && st == HAP_OK; k++) {
      hap_ab_fit f;
      double e = HUGE_VAL;
      if (isfinite(dp_solve(&d, ls, k, &f)))
        e = fabs(hap_ab_fit_time(&f, s[out]) - t[out]) / t[out];
      cv[k - 1] += log1p(e);
    }
    if (st == HAP_OK)
      dp_free(&d);
  }
  free(ls);
  free(lt);
  return st;
}

/* Largest |t_fit - t| / t over the points. */
static double max_miss(const hap_ab_fit *f, const double *s, const double *t, int32_t n) {
  double worst = 0;
  for (int32_t i = 0; i < n; i++) {
    double e = fabs(hap_ab_fit_time(f, s[i]) - t[i]) / t[i];
    worst = e > worst ? e : worst;
  }
  return worst;
}

hap_status hap_fit_pieces_rel(const double *s, const double *t, int32_t n, hap_ab_fit *out,
                              hap_err *err) {
  HAP_TRY(check_points(s, t, n, err));
  const int32_t m = HAP_FIT_REL_MIN_POINTS;
  /* left-one-out fits have n - 1 points; below 3 points only one piece is possible */
  int32_t max_k = n >= 3 ? (n - 1) / m : 1;
  if (max_k > HAP_FIT_REL_MAX_PIECES)
    max_k = HAP_FIT_REL_MAX_PIECES;
  if (max_k <= 1 || n < m) {
    double a, b;
    if (hap_fit_alpha_beta_rel(s, t, n, &a, &b) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL, "fit: cannot fit one alpha-beta piece");
    *out = hap_ab_fit_one(a, b);
    return HAP_OK;
  }
  double cv[HAP_FIT_REL_MAX_PIECES];
  if (loo_errors(s, t, n, max_k, cv) != HAP_OK)
    return hap_err_set(err, HAP_ENOMEM, "fit: out of memory");
  int32_t best = 1; /* more pieces must beat fewer by more than rounding noise */
  for (int32_t k = 2; k <= max_k; k++)
    if (cv[k - 1] < cv[best - 1] * (1 - 1e-6) - 1e-12)
      best = k;
  /* The sweep's ends are never left out, so a regime of only the largest sizes (a transport
   * falling off a cliff above some size) costs the cross-validation little: add pieces while a
   * measured point is missed by more than HAP_FIT_REL_MAX_MISS. */
  for (;; best++) {
    HAP_TRY(hap_fit_segments_rel(s, t, n, best, m, out, NULL, err));
    if (best >= max_k || max_miss(out, s, t, n) <= HAP_FIT_REL_MAX_MISS)
      return HAP_OK;
  }
}

/* ---- a whole profile ------------------------------------------------------------------------ */

static double *as_double(const int64_t *v, int32_t n) {
  double *d = calloc((size_t)(n > 0 ? n : 1), sizeof *d);
  for (int32_t i = 0; d != NULL && i < n; i++)
    d[i] = (double)v[i];
  return d;
}

hap_status hap_profile_fit_rel(hap_profile *p, hap_err *err) {
  for (int32_t j = 0; j < p->n_p2p; j++) {
    hap_profile_p2p *x = &p->p2p[j];
    double *s = as_double(x->sizes_bytes, x->n_sizes);
    hap_err e = {0};
    hap_status st = s == NULL ? HAP_ENOMEM
                              : hap_fit_alpha_beta_rel(s, x->p50_s, x->n_sizes, &x->fit.latency_s,
                                                       &x->fit.bandwidth_Bps);
    if (st == HAP_OK)
      st = hap_fit_pieces_rel(s, x->p50_s, x->n_sizes, &x->pieces, &e);
    free(s);
    if (st != HAP_OK)
      return hap_err_set(err, st, "/p2p/%d-%d: cannot fit alpha-beta to the p50 times%s%s", x->src,
                         x->dst, e.msg[0] ? ": " : "", e.msg);
  }
  for (int32_t j = 0; j < p->n_colls; j++) {
    hap_profile_coll *c = &p->colls[j];
    double *s = as_double(c->sizes_bytes, c->n_sizes);
    hap_err e = {0};
    hap_status st =
        s == NULL ? HAP_ENOMEM : hap_fit_pieces_rel(s, c->p50_s, c->n_sizes, &c->fit, &e);
    free(s);
    if (st != HAP_OK)
      return hap_err_set(err, st, "/collectives/%s/%s: cannot fit alpha-beta to the p50 times%s%s",
                         hap_coll_kind_name(c->kind), c->group, e.msg[0] ? ": " : "", e.msg);
  }
  return HAP_OK;
}
