/* device_cpu.h — the `cpu` device backend: host memory, memcpy, GEMM through OpenBLAS (cblas),
 * kernels in C, CLOCK_MONOTONIC timer, optional emulated speed (emulate.h).
 * Ownership: hap_dev_cpu_open returns an owned device (hap_dev_close). */
#ifndef HAP_DEVICE_CPU_H
#define HAP_DEVICE_CPU_H

#include <stdint.h>

#include "exec/backend.h"

/* Open a CPU device whose kernels use `threads` OpenBLAS threads (>= 1; one per MPI rank is the
 * default of the tools) and run at emulated `speed` in (0, 1]. OpenBLAS's thread count is
 * process-wide, so open one CPU device per process. */
hap_status hap_dev_cpu_open(int32_t threads, double speed, hap_dev **out, hap_err *err);

#endif
