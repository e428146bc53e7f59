/* test_blas_core.c — exec/blas_core.h: the OpenBLAS kernel set this process runs is named, and
 * who chose it follows $OPENBLAS_CORETYPE (read when asked; the core itself was fixed at load). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/blas_core.h"

Test(blas_core, names_the_core_the_library_runs) {
  const char *name = hap_blas_core_name();
  cr_assert_not_null(name);
  cr_expect_gt(strlen(name), 0);
  cr_expect_str_neq(name, "unknown");
}

Test(blas_core, says_who_chose_it) {
  char *saved = getenv("OPENBLAS_CORETYPE") ? strdup(getenv("OPENBLAS_CORETYPE")) : NULL;
  char line[160], want[160];

  cr_assert_eq(setenv("OPENBLAS_CORETYPE", "Haswell", 1), 0);
  cr_expect_str_eq(hap_blas_core_chooser(), "OPENBLAS_CORETYPE");
  hap_blas_core_describe(line, sizeof line);
  snprintf(want, sizeof want, "%s (OPENBLAS_CORETYPE=Haswell)", hap_blas_core_name());
  cr_expect_str_eq(line, want);

  cr_assert_eq(setenv("OPENBLAS_CORETYPE", "", 1), 0); /* empty: OpenBLAS detects */
  cr_expect_str_eq(hap_blas_core_chooser(), "library");

  cr_assert_eq(unsetenv("OPENBLAS_CORETYPE"), 0);
  cr_expect_str_eq(hap_blas_core_chooser(), "library");
  hap_blas_core_describe(line, sizeof line);
  snprintf(want, sizeof want, "%s (OpenBLAS's choice)", hap_blas_core_name());
  cr_expect_str_eq(line, want);

  hap_blas_core_describe(line, 8); /* truncated, still a string */
  cr_expect_eq(strlen(line), 7);

  if (saved != NULL)
    setenv("OPENBLAS_CORETYPE", saved, 1);
  free(saved);
}
