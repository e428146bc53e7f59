/* kernels_run.cu — the CUDA side of kernel programs (kx.h): one grid-stride kernel that runs a
 * pass's element body (kx_body.h, the same source the host executor runs) for every index. */
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

} // namespace

extern "C" cudaError_t hap_kx_cuda_launch(cudaStream_t stream, const hap_kx_pass *p,
                                          const hap_kx_ptrs *s) {
  if (p->count <= 0)
    return cudaSuccess;
  const int threads = 256;
  kx_kernel<<<kx_blocks(p->count, threads), threads, 0, stream>>>(*p, *s);
  return cudaGetLastError();
}
