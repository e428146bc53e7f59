/* device_cuda.h — the `cuda` device backend (backend.h) on one GPU: cudaMalloc'd memory, copies
 * and fills on the backend's own stream, GEMM through cuBLAS (float32, float64; float16 and
 * bfloat16 with float32 accumulation, as mixed precision multiplies), an empty kernel,
 * and a device timer: every kernel and copy is bracketed by two cudaEvents; last_s returns its
 * device time from CUPTI activity records (the span of the call's kernels, copies and memsets)
 * when CUPTI is free, else from the events; info.library says which, and when another tool
 * (nsys, ncu) holds CUPTI.
 * Contract: the table's calls are synchronous (they return after the stream drained), except
 * empty_kernel, which only enqueues so that launch overhead can be measured; synchronize waits.
 * Only the CUDA runtime, cuBLAS and CUPTI are linked, never libcuda (see exec/CMakeLists.txt).
 * Ownership: hap_dev_cuda_open returns an owned device (hap_dev_close); open one per process. */
#ifndef HAP_DEVICE_CUDA_H
#define HAP_DEVICE_CUDA_H

#include <stdint.h>

#include "exec/backend.h"

/* Open GPU `index` (CUDA runtime ordinal, after CUDA_VISIBLE_DEVICES) and make it the calling
 * thread's current device. HAP_ENOGPU with the reason (no driver, no device, index out of range,
 * built without CUDA) when there is no such usable GPU; HAP_ECUDA for other CUDA failures;
 * HAP_EUNSUPPORTED when built without cuBLAS. */
hap_status hap_dev_cuda_open(int32_t index, hap_dev **out, hap_err *err);

/* The GPU a `cuda` device runs on (its CUDA ordinal), for the NCCL communicator. */
int32_t hap_dev_cuda_index(const hap_dev *d);

#endif
