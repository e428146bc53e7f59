/* kx_cuda.h — the launcher of kernel program passes (kx.h) on a GPU, defined in kernels_run.cu
 * behind a plain C declaration so kernels_run.c stays C. It only enqueues on `stream` and returns
 * the launch error (cudaGetLastError); nothing waits. Buffers are the caller's device memory. */
#ifndef HAP_KX_CUDA_H
#define HAP_KX_CUDA_H

#include <cuda_runtime_api.h>
#include <stdbool.h>

#include "kx/kx_body.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One non-GEMM pass of a kernel program: its body for indices 0 .. p->count, slots `s` (device
 * pointers). */
cudaError_t hap_kx_cuda_launch(cudaStream_t stream, const hap_kx_pass *p, const hap_kx_ptrs *s);

/* dst[i] = src[i] as float16 (bf16 false) or bfloat16, round to nearest even, for i < n. */
cudaError_t hap_kx_cuda_to_half(cudaStream_t stream, const float *src, void *dst, int64_t n,
                                bool bf16);

#ifdef __cplusplus
}
#endif

#endif
