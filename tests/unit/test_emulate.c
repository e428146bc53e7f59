/* test_emulate.c — --emulate-speed (exec/emulate.h): the speed list's parser and its refusals,
 * the padding a kernel gets, and the wait that pads it (exec/clock.h): it ends at its deadline,
 * not before, and returns at once when the deadline has passed. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "exec/clock.h"
#include "exec/emulate.h"

Test(emulate, parses_speed_lists) {
  double *v = NULL;
  int32_t n = 0;
  hap_err err = {0};
  cr_assert_eq(hap_emulate_parse("1,0.5,2.5e-1", &v, &n, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(n, 3);
  cr_expect_eq(v[0], 1.0);
  cr_expect_eq(v[1], 0.5);
  cr_expect_eq(v[2], 0.25);
  free(v);
  cr_assert_eq(hap_emulate_parse("0.75", &v, &n, &err), HAP_OK);
  cr_expect_eq(n, 1);
  cr_expect_eq(v[0], 0.75);
  free(v);
}

Test(emulate, refuses_bad_items_in_one_line) {
  const struct {
    const char *text, *says;
  } bad[] = {
      {"", "empty"},
      {"1,,0.5", "item 2 is empty"},
      {"1,", "item 2 is empty"},
      {"1,x", "item 2 'x' is not a number"},
      {"1, 0.5", "item 2 ' 0.5' is not a number"},
      {"1,nan", "item 2 'nan' is not a number"},
      {"1,2", "item 2 is 2, expected a speed in (0, 1]"},
      {"0", "item 1 is 0, expected a speed in (0, 1]"},
      {"-0.5", "item 1 is -0.5"},
      {"1e999", "item 1 '1e999' is not a number"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double *v = (double *)&bad; /* must come back NULL */
    int32_t n = 7;
    hap_err err = {0};
    cr_expect_eq(hap_emulate_parse(bad[i].text, &v, &n, &err), HAP_EINVAL, "'%s' accepted",
                 bad[i].text);
    cr_expect_null(v, "'%s': nothing allocated", bad[i].text);
    cr_expect_eq(n, 0);
    cr_expect(strstr(err.msg, bad[i].says) != NULL, "'%s': '%s' does not say '%s'", bad[i].text,
              err.msg, bad[i].says);
    cr_expect(strstr(err.msg, "--emulate-speed") == err.msg, "'%s': '%s' names the option",
              bad[i].text, err.msg);
  }
}

Test(emulate, padding_makes_a_kernel_take_one_over_speed) {
  cr_expect_float_eq(hap_emulate_pad_s(2e-3, 0.5), 2e-3, 1e-15);
  cr_expect_float_eq(hap_emulate_pad_s(1e-3, 0.25), 3e-3, 1e-15);
  cr_expect_eq(hap_emulate_pad_s(1e-3, 1.0), 0.0, "full speed: no padding");
  cr_expect_eq(hap_emulate_pad_s(0.0, 0.5), 0.0);
  cr_expect_eq(hap_emulate_pad_s(-1.0, 0.5), 0.0, "a negative time pads nothing");
  cr_expect_eq(hap_emulate_pad_s(1e-3, 0.0), 0.0, "no speed: nothing");
}

Test(emulate, wait_ends_at_its_deadline) {
  for (int i = 0; i < 20; i++) {
    double want = 1e-3 * (1 + i % 4); /* 1-4 ms */
    double t0 = hap_clock_s();
    hap_clock_wait_until(t0 + want);
    double took = hap_clock_s() - t0;
    cr_assert_geq(took, want, "returned %.1f us early", 1e6 * (want - took));
  }
  double t0 = hap_clock_s();
  hap_clock_wait_until(t0 - 1.0);
  cr_expect_lt(hap_clock_s() - t0, 0.5, "a passed deadline returns at once");
}
