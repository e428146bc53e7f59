/* test_measure_config.c — hap-profile's measurement plans (profile/measure.h): the built-in ones
 * pass hap_measure_check, a GPU's GEMM sweep adds float16 and bfloat16 shapes, and a GEMM shape
 * of a non-float dtype or an out-of-range size is refused naming the shape, and the p2p sizes
 * measured again as outliers (hap_p2p_outliers). */
#include <criterion/criterion.h>
#include <string.h>

#include "profile/measure.h"

static int count_dtype(const hap_measure_config *cfg, hap_dtype dt) {
  int n = 0;
  for (int32_t i = 0; i < cfg->n_gemm_shapes; i++)
    n += cfg->gemm_shapes[i].dtype == dt;
  return n;
}

Test(measure_config, built_in_plans_pass_the_check) {
  for (int quick = 0; quick < 2; quick++) {
    for (int gpu = 0; gpu < 2; gpu++) {
      hap_measure_config cfg;
      hap_measure_defaults(&cfg, quick);
      if (gpu)
        hap_measure_gpu_gemm(&cfg, quick);
      hap_err e = {0};
      cr_assert_eq(hap_measure_check(&cfg, &e), HAP_OK, "quick %d gpu %d: %s", quick, gpu, e.msg);
      cr_assert_gt(count_dtype(&cfg, HAP_F32), 0);
      cr_assert_eq(count_dtype(&cfg, HAP_F16) > 0, gpu, "quick %d gpu %d", quick, gpu);
      cr_assert_eq(count_dtype(&cfg, HAP_BF16) > 0, gpu, "quick %d gpu %d", quick, gpu);
    }
  }
}

Test(measure_config, bad_gemm_shapes_are_refused) {
  const hap_gemm_shape bad[][1] = {
      {{64, 64, 64, HAP_I32}}, {{64, 0, 64, HAP_F32}}, {{64, 64, 65537, HAP_BF16}}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    hap_measure_config cfg;
    hap_measure_defaults(&cfg, true);
    cfg.gemm_shapes = bad[i];
    cfg.n_gemm_shapes = 1;
    hap_err e = {0};
    cr_assert_eq(hap_measure_check(&cfg, &e), HAP_EINVAL, "case %zu", i);
    cr_assert(strstr(e.msg, "GEMM shape 0 is") != NULL &&
                  strstr(e.msg, "expected sizes in 1..65536 and a float dtype") != NULL,
              "case %zu: %s", i, e.msg);
  }
}

/* hap_p2p_outliers: a size slower than twice some larger size's p50 is measured again. */
Test(measure_config, p2p_outliers_are_the_sizes_slower_than_larger_ones) {
  int32_t idx[8];
  /* a clean sweep (latency, then bandwidth): none */
  const double clean[6] = {1e-6, 1.1e-6, 1.2e-6, 2e-6, 8e-6, 30e-6};
  cr_assert_eq(hap_p2p_outliers(clean, 6, idx), 0);
  /* noise within the factor: none */
  const double noisy[4] = {1.9e-6, 1e-6, 1.5e-6, 1.2e-6};
  cr_assert_eq(hap_p2p_outliers(noisy, 4, idx), 0);
  /* the warm-up outlier: 8 B at 1.2 ms before 0.5 us sizes */
  const double first[5] = {1.2e-3, 0.5e-6, 0.5e-6, 0.7e-6, 0.8e-6};
  cr_assert_eq(hap_p2p_outliers(first, 5, idx), 1);
  cr_assert_eq(idx[0], 0);
  /* two in the middle, reported in increasing order; compared with the fastest larger size */
  const double mid[6] = {1e-6, 9e-6, 1e-6, 5e-6, 2e-6, 6e-6};
  cr_assert_eq(hap_p2p_outliers(mid, 6, idx), 2);
  cr_assert_eq(idx[0], 1);
  cr_assert_eq(idx[1], 3);
  /* the largest size has nothing to compare with; one size: none */
  const double last[3] = {1e-6, 1e-6, 1.0};
  cr_assert_eq(hap_p2p_outliers(last, 3, idx), 0);
  cr_assert_eq(hap_p2p_outliers(last, 1, idx), 0);
}
