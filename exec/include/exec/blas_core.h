/* blas_core.h — which of OpenBLAS's kernel sets (its "core": Haswell, SkylakeX, Cooperlake, ...)
 * this process runs, and who chose it: OpenBLAS picks one from the CPU when it loads, unless
 * $OPENBLAS_CORETYPE names one (some machines set it because older OpenBLAS builds compute wrong
 * results with their newest kernels on some processors; hap keeps it). The same CPU runs sgemm
 * at very different rates under different cores (Haswell's AVX2 kernels at about half of
 * SkylakeX's AVX-512 ones on dev-2c's AMD EPYC), so every timing hap reports names it. */
#ifndef HAP_BLAS_CORE_H
#define HAP_BLAS_CORE_H

#include <stddef.h>

/* The core this process runs, e.g. "Haswell". */
const char *hap_blas_core_name(void);

/* Who chose it: "OPENBLAS_CORETYPE" (the environment) or "library" (OpenBLAS's detection). */
const char *hap_blas_core_chooser(void);

/* One line for logs and reports: "Haswell (OPENBLAS_CORETYPE=Haswell)" or "Cooperlake
 * (OpenBLAS's choice)". */
void hap_blas_core_describe(char *buf, size_t len);

#endif
