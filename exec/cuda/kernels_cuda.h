/* kernels_cuda.h — the few CUDA kernels the `cuda` device backend launches itself (fill, empty),
 * behind plain C launchers so device_cuda.c stays C. Each launcher only enqueues on `stream` and
 * returns the launch error (cudaGetLastError); nothing waits. Ownership: buffers are the caller's
 * device memory. */
#ifndef HAP_KERNELS_CUDA_H
#define HAP_KERNELS_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[0..count) <- value (count >= 0 elements). */
cudaError_t hap_cuda_fill_f32(cudaStream_t stream, float *x, int64_t count, float value);
cudaError_t hap_cuda_fill_f64(cudaStream_t stream, double *x, int64_t count, double value);
/* The same in float16 / bfloat16 (x: __half / __nv_bfloat16), value rounded to nearest even. */
cudaError_t hap_cuda_fill_f16(cudaStream_t stream, void *x, int64_t count, float value);
cudaError_t hap_cuda_fill_bf16(cudaStream_t stream, void *x, int64_t count, float value);
/* One block of one thread that does nothing: what a launch costs. */
cudaError_t hap_cuda_empty(cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
