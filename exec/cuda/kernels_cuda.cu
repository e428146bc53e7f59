/* kernels_cuda.cu — the `cuda` backend's own kernels (kernels_cuda.h): grid-stride fills and an
 * empty kernel. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels_cuda.h"

namespace {

template <typename T> __global__ void fill_kernel(T *x, int64_t count, T value) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
    x[i] = value;
}

__global__ void empty_kernel() {}

/* Enough blocks to fill the GPU, at most 65535 (the grid-stride loop covers the rest). */
unsigned blocks_for(int64_t count, int threads) {
  int64_t b = (count + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

template <typename T> cudaError_t fill(cudaStream_t stream, T *x, int64_t count, T value) {
  if (count <= 0)
    return cudaSuccess;
  const int threads = 256;
  fill_kernel<T><<<blocks_for(count, threads), threads, 0, stream>>>(x, count, value);
  return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t hap_cuda_fill_f32(cudaStream_t stream, float *x, int64_t count,
                                         float value) {
  return fill<float>(stream, x, count, value);
}

extern "C" cudaError_t hap_cuda_fill_f64(cudaStream_t stream, double *x, int64_t count,
                                         double value) {
  return fill<double>(stream, x, count, value);
}

extern "C" cudaError_t hap_cuda_fill_f16(cudaStream_t stream, void *x, int64_t count, float value) {
  return fill<__half>(stream, static_cast<__half *>(x), count, __float2half_rn(value));
}

extern "C" cudaError_t hap_cuda_fill_bf16(cudaStream_t stream, void *x, int64_t count,
                                          float value) {
  return fill<__nv_bfloat16>(stream, static_cast<__nv_bfloat16 *>(x), count,
                             __float2bfloat16_rn(value));
}

extern "C" cudaError_t hap_cuda_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}
