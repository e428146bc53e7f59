/* test_measure_config.c — hap-profile's measurement plans (profile/measure.h): the built-in ones
 * pass hap_measure_check, a GPU's GEMM sweep adds float16 and bfloat16 shapes, and a GEMM shape
 * of a non-float dtype or an out-of-range size is refused naming the shape. */
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
