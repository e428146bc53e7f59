/* test_fit_rel.c — the piecewise relative-error alpha-beta fits (profile/fit_rel.h): exact
 * recovery of known pieces by the breakpoint DP, the piece-count choice, extrapolation, and
 * malformed inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "profile/fit_rel.h"

static double rel(double got, double want) { return fabs(got - want) / fabs(want); }

/* Sizes 8 B x 2^i and exact times of three regimes: latency, cache copy, DRAM copy. */
#define N 24
static void three_regimes(double *s, double *t) {
  for (int i = 0; i < N; i++) {
    s[i] = 8.0 * pow(2, i);
    if (i < 8) /* < 2 KiB */
      t[i] = 2e-6 + s[i] / 50e9;
    else if (i < 16) /* < 512 KiB */
      t[i] = 6e-6 + s[i] / 20e9;
    else
      t[i] = 30e-6 + s[i] / 6e9;
  }
}

Test(fit_rel, dp_recovers_known_pieces_exactly) {
  double s[N], t[N], sse = -1;
  three_regimes(s, t);
  hap_ab_fit f;
  hap_err err = {0};
  cr_assert_eq(hap_fit_segments_rel(s, t, N, 3, 2, &f, &sse, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(f.n_pieces, 3);
  cr_assert_lt(sse, 1e-20);
  const double alpha[3] = {2e-6, 6e-6, 30e-6}, beta[3] = {50e9, 20e9, 6e9};
  for (int k = 0; k < 3; k++) {
    cr_assert_lt(rel(f.alpha_s[k], alpha[k]), 1e-9, "alpha[%d] = %g", k, f.alpha_s[k]);
    cr_assert_lt(rel(f.beta_Bps[k], beta[k]), 1e-9, "beta[%d] = %g", k, f.beta_Bps[k]);
  }
  /* bounds at the geometric means between the pieces' measured sizes; the last is unbounded */
  cr_assert_lt(rel(f.upper_bytes[0], sqrt(s[7] * s[8])), 1e-12);
  cr_assert_lt(rel(f.upper_bytes[1], sqrt(s[15] * s[16])), 1e-12);
  cr_assert(isinf(f.upper_bytes[2]));
  char why[160];
  cr_assert_null(hap_ab_fit_check(&f, why, sizeof why), "%s", why);
  for (int i = 0; i < N; i++)
    cr_assert_lt(rel(hap_ab_fit_time(&f, s[i]), t[i]), 1e-9, "size %g", s[i]);
}

Test(fit_rel, piece_count_is_chosen_and_fewer_pieces_fit_worse) {
  double s[N], t[N];
  three_regimes(s, t);
  hap_ab_fit f;
  hap_err err = {0};
  cr_assert_eq(hap_fit_pieces_rel(s, t, N, &f, &err), HAP_OK, "%s", err.msg);
  cr_assert_geq(f.n_pieces, 3, "three regimes need three pieces, got %d", f.n_pieces);
  for (int i = 0; i < N; i++)
    cr_assert_lt(rel(hap_ab_fit_time(&f, s[i]), t[i]), 1e-6, "size %g", s[i]);
  double sse1, sse2, sse3;
  cr_assert_eq(hap_fit_segments_rel(s, t, N, 1, 2, &f, &sse1, NULL), HAP_OK);
  cr_assert_eq(hap_fit_segments_rel(s, t, N, 2, 2, &f, &sse2, NULL), HAP_OK);
  cr_assert_eq(hap_fit_segments_rel(s, t, N, 3, 2, &f, &sse3, NULL), HAP_OK);
  cr_assert(sse1 > sse2 && sse2 > sse3, "%g %g %g", sse1, sse2, sse3);
}

Test(fit_rel, one_regime_stays_one_piece) {
  double s[N], t[N];
  for (int i = 0; i < N; i++) {
    s[i] = 8.0 * pow(2, i);
    t[i] = 5e-6 + s[i] / 10e9;
  }
  hap_ab_fit f;
  cr_assert_eq(hap_fit_pieces_rel(s, t, N, &f, NULL), HAP_OK);
  cr_assert_eq(f.n_pieces, 1);
  cr_assert_lt(rel(f.alpha_s[0], 5e-6), 1e-9);
  cr_assert_lt(rel(f.beta_Bps[0], 10e9), 1e-9);
}

/* An all-reduce sweep measured on dev-2c (2 MPI ranks, hap-profile --quick --plan, 2026-11-26):
 * 4.5 GB/s up to 32 MiB, then 0.27 GB/s at 128 and 512 MiB. Leave-one-out never leaves out the
 * largest size, so it alone keeps one piece, which misses 512 MiB by 14x; no measured point may be
 * missed by more than HAP_FIT_REL_MAX_MISS. */
Test(fit_rel, a_cliff_at_the_largest_sizes_gets_its_own_piece) {
  double s[14], t[14] = {5.45e-07,     6.522e-07,    6.422e-07,    1.2875e-06,  1.7904e-06,
                         9.2806e-06,   1.83260e-05,  4.12714e-05,  1.23975e-04, 4.57313e-04,
                         1.726361e-03, 7.391941e-03, 5.138457e-01, 1.962927};
  for (int i = 0; i < 14; i++)
    s[i] = 8.0 * pow(4, i);
  hap_ab_fit f;
  hap_err err = {0};
  cr_assert_eq(hap_fit_pieces_rel(s, t, 14, &f, &err), HAP_OK, "%s", err.msg);
  cr_expect_geq(f.n_pieces, 2);
  for (int i = 0; i < 14; i++)
    cr_expect_leq(rel(hap_ab_fit_time(&f, s[i]), t[i]), HAP_FIT_REL_MAX_MISS,
                  "size %g: %g s for %g", s[i], hap_ab_fit_time(&f, s[i]), t[i]);
  cr_expect_lt(rel(hap_ab_fit_time(&f, s[13]), t[13]), 0.1);
  cr_expect_lt(rel(hap_ab_fit_time(&f, 411e6), 411e6 / 2.73e8), 0.25, "vgg19's 411 MB gradient");
}

Test(fit_rel, extrapolation_uses_the_last_piece_and_stays_positive) {
  double s[N], t[N];
  three_regimes(s, t);
  hap_ab_fit f;
  cr_assert_eq(hap_fit_segments_rel(s, t, N, 3, 2, &f, NULL, NULL), HAP_OK);
  double big = 1e12; /* far beyond the largest measured size (64 MiB) */
  cr_assert_lt(rel(hap_ab_fit_time(&f, big), 30e-6 + big / 6e9), 1e-9);
  cr_assert_gt(hap_ab_fit_time(&f, 0), 0);
  cr_assert_gt(hap_ab_fit_time(&f, 1), 0);
}

Test(fit_rel, few_points_fall_back_to_one_piece) {
  double s[2] = {8, 1024}, t[2] = {1e-6, 2e-6};
  hap_ab_fit f;
  cr_assert_eq(hap_fit_pieces_rel(s, t, 2, &f, NULL), HAP_OK);
  cr_assert_eq(f.n_pieces, 1);
  cr_assert_eq(hap_fit_pieces_rel(s, t, 1, &f, NULL), HAP_OK);
  cr_assert_eq(f.n_pieces, 1);
}

/* err must say `want`, on one line. */
static void expect_einval(hap_status st, const hap_err *err, const char *want) {
  cr_assert_eq(st, HAP_EINVAL);
  cr_assert(strstr(err->msg, want) != NULL, "got:  %s\nwant: %s", err->msg, want);
  cr_assert_null(strchr(err->msg, '\n'));
}

Test(fit_rel, malformed_inputs_give_one_clear_line) {
  double s[6] = {8, 32, 128, 512, 2048, 8192}, t[6] = {1e-6, 1e-6, 2e-6, 3e-6, 5e-6, 9e-6};
  hap_ab_fit f;
  hap_err err = {0};
  expect_einval(hap_fit_segments_rel(s, t, 6, 4, 2, &f, NULL, &err), &err,
                "fit: 6 points cannot make 4 pieces of at least 2 points, expected at least 8");
  hap_err_clear(&err);
  expect_einval(hap_fit_segments_rel(s, t, 0, 1, 2, &f, NULL, &err), &err,
                "fit: 0 points, expected at least 1");
  hap_err_clear(&err);
  expect_einval(hap_fit_segments_rel(s, t, 6, 1, 1, &f, NULL, &err), &err,
                "fit: min_points is 1, expected >= 2");
  hap_err_clear(&err);
  expect_einval(hap_fit_segments_rel(s, t, 6, 9, 2, &f, NULL, &err), &err,
                "fit: 9 pieces, expected 1 to 8");
  double down[6] = {8, 32, 32, 512, 2048, 8192};
  hap_err_clear(&err);
  expect_einval(hap_fit_pieces_rel(down, t, 6, &f, &err), &err,
                "fit: sizes_bytes[2] = 32 is not above sizes_bytes[1] = 32, expected strictly "
                "increasing sizes");
  double nan_t[6] = {1e-6, 1e-6, NAN, 3e-6, 5e-6, 9e-6};
  hap_err_clear(&err);
  expect_einval(hap_fit_pieces_rel(s, nan_t, 6, &f, &err), &err,
                "fit: times_s[2] is nan, expected a finite time > 0 s");
  double zero_t[6] = {1e-6, 0, 2e-6, 3e-6, 5e-6, 9e-6};
  hap_err_clear(&err);
  expect_einval(hap_fit_pieces_rel(s, zero_t, 6, &f, &err), &err,
                "fit: times_s[1] is 0, expected a finite time > 0 s");
  double inf_s[6] = {8, 32, 128, 512, 2048, INFINITY};
  hap_err_clear(&err);
  expect_einval(hap_fit_pieces_rel(inf_s, t, 6, &f, &err), &err,
                "fit: sizes_bytes[5] is inf, expected a finite size >= 0");
  double zero_s[1] = {0};
  hap_err_clear(&err);
  expect_einval(hap_fit_pieces_rel(zero_s, t, 1, &f, &err), &err,
                "fit: every size is 0 bytes, expected one > 0");
}

Test(fit_rel, check_names_the_bad_field) {
  hap_ab_fit f = hap_ab_fit_two(4096, 1e-6, 1e9, 2e-6, 4e9);
  char why[160];
  cr_assert_null(hap_ab_fit_check(&f, why, sizeof why));
  f.upper_bytes[0] = -1;
  cr_assert_str_eq(hap_ab_fit_check(&f, why, sizeof why),
                   "upper_bytes[0] is -1, expected a finite size > 0");
  f.upper_bytes[0] = 4096;
  f.alpha_s[1] = -1e-6;
  cr_assert_str_eq(hap_ab_fit_check(&f, why, sizeof why),
                   "alpha_s[1] is -1e-06, expected a finite latency >= 0 s");
  f.alpha_s[1] = 0;
  f.beta_Bps[0] = 0;
  cr_assert_str_eq(hap_ab_fit_check(&f, why, sizeof why),
                   "beta_Bps[0] is 0, expected a finite bandwidth > 0 bytes/s");
  f.beta_Bps[0] = 1e9;
  f.n_pieces = 0;
  cr_assert_str_eq(hap_ab_fit_check(&f, why, sizeof why), "has 0 pieces, expected 1 to 8");
  f.n_pieces = 2;
  /* the two-piece form: threshold 0 is one piece */
  hap_ab_fit one = hap_ab_fit_two(0, 9, 9, 1e-6, 2e9);
  cr_assert(one.n_pieces == 1 && one.alpha_s[0] == 1e-6 && one.beta_Bps[0] == 2e9);
  cr_assert(hap_ab_fit_time(&f, 100) == 1e-6 + 100 / 1e9);
  cr_assert(hap_ab_fit_time(&f, 4096) == 0 + 4096 / 4e9);
}
