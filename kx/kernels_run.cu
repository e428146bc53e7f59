/* kernels_run.cu — the CUDA side of kernel programs (kx.h): one grid-stride kernel that runs a
 * pass's element body (kx_body.h, the same source the host executor runs) for every index. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kx_cuda.h"

namespace {

__global__ void kx_kernel(hap_kx_pass p, hap_kx_ptrs s) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += stride)
    hap_kx_body(&p, s.p, i);
}

/* Enough blocks to fill the GPU, at most 65535 (the grid-stride loop covers the rest). */
unsigned kx_blocks(int64_t count, int threads) {
  int64_t b = (count + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

template <typename H> __device__ H to_half(float x);
template <> __device__ __half to_half<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 to_half<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename H> __global__ void to_half_kernel(const float *src, H *dst, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = to_half<H>(src[i]);
}

} // namespace

extern "C" cudaError_t hap_kx_cuda_launch(cudaStream_t stream, const hap_kx_pass *p,
                                          const hap_kx_ptrs *s) {
  if (p->count <= 0)
    return cudaSuccess;
  const int threads = 256;
  kx_kernel<<<kx_blocks(p->count, threads), threads, 0, stream>>>(*p, *s);
  return cudaGetLastError();
}

extern "C" cudaError_t hap_kx_cuda_to_half(cudaStream_t stream, const float *src, void *dst,
                                           int64_t n, bool bf16) {
  if (n <= 0)
    return cudaSuccess;
  const int threads = 256;
  if (bf16)
    to_half_kernel<<<kx_blocks(n, threads), threads, 0, stream>>>(
        src, static_cast<__nv_bfloat16 *>(dst), n);
  else
    to_half_kernel<<<kx_blocks(n, threads), threads, 0, stream>>>(src, static_cast<__half *>(dst),
                                                                  n);
  return cudaGetLastError();
}
