/* blas_core.c — the OpenBLAS kernel set this process runs (blas_core.h). */
#include "exec/blas_core.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

const char *hap_blas_core_name(void) {
  const char *name = openblas_get_corename();
  return name != NULL ? name : "unknown";
}

const char *hap_blas_core_chooser(void) {
  const char *env = getenv("OPENBLAS_CORETYPE");
  return env != NULL && *env != '\0' ? "OPENBLAS_CORETYPE" : "library";
}

void hap_blas_core_describe(char *buf, size_t len) {
  const char *env = getenv("OPENBLAS_CORETYPE");
  if (env != NULL && *env != '\0')
    snprintf(buf, len, "%s (OPENBLAS_CORETYPE=%s)", hap_blas_core_name(), env);
  else
    snprintf(buf, len, "%s (OpenBLAS's choice)", hap_blas_core_name());
}
