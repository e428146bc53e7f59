/* libversions.c — versions of the CUDA runtime, driver, NCCL, CUPTI and cuBLAS in this binary.
 * Plain C against the libraries' C APIs; none of these calls needs a GPU or a driver, so it doubles
 * as a link check that the tools start without libcuda.so.1. NCCL, CUPTI and cuBLAS are optional:
 * exec/CMakeLists.txt defines HAP_HAVE_NCCL / _CUPTI / _CUBLAS when it found them. */
#include <cuda_runtime_api.h>

#include <string.h>

#if HAP_HAVE_NCCL
#include <nccl.h>
#endif
#if HAP_HAVE_CUPTI
#include <cupti_version.h>
#endif
#if HAP_HAVE_CUBLAS
#include <cublas_api.h>
#endif

#include "exec/devices.h"

hap_status hap_gpu_versions(hap_gpu_lib_versions *out, hap_err *err) {
  if (out == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap_gpu_versions: out is NULL");
  memset(out, 0, sizeof *out);

  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    out->cudart = v;
  v = 0;
  /* Succeeds with 0 when no driver is installed. */
  if (cudaDriverGetVersion(&v) == cudaSuccess)
    out->cuda_driver = v;
  (void)cudaGetLastError();

#if HAP_HAVE_NCCL
  v = 0;
  if (ncclGetVersion(&v) == ncclSuccess)
    out->nccl = v;
#endif
#if HAP_HAVE_CUPTI
  uint32_t api = 0;
  if (cuptiGetVersion(&api) == CUPTI_SUCCESS)
    out->cupti = (int)api;
#endif
#if HAP_HAVE_CUBLAS
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    out->cublas = major * 10000 + minor * 100 + patch;
#endif
  return HAP_OK;
}
