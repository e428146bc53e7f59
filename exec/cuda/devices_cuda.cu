/* devices_cuda.cu — GPU discovery and a kernel self-test over the CUDA runtime API. Only the
 * runtime (libcudart) is linked, never the driver library: libcudart loads libcuda.so.1 itself when
 * it is first used, so binaries start on machines without a driver and get HAP_ENOGPU from the
 * query. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/devices.h"

/* CUDA errors that mean "there is no usable GPU here" rather than "something broke": the message
 * says what the user can do about it. NULL for every other error. */
static const char *no_gpu_reason(cudaError_t e) {
  switch (e) {
  case cudaErrorInsufficientDriver:
    return "no NVIDIA driver installed, or the driver is older than this CUDA runtime";
  case cudaErrorCallRequiresNewerDriver:
    return "the NVIDIA driver is too old for this CUDA runtime";
  case cudaErrorNoDevice: return "no CUDA-capable device is visible (check CUDA_VISIBLE_DEVICES)";
  case cudaErrorStubLibrary: return "only the CUDA driver stub library is installed, not a driver";
  case cudaErrorDevicesUnavailable: return "all CUDA devices are busy or in exclusive-process mode";
  case cudaErrorInitializationError: return "the CUDA driver failed to initialise";
  case cudaErrorDeviceNotLicensed: return "the device is not licensed for CUDA";
  case cudaErrorSystemNotReady: return "the GPU system is not ready (is nvidia-fabricmanager up?)";
  case cudaErrorSystemDriverMismatch: return "the NVIDIA kernel module and user-mode driver differ";
  case cudaErrorCompatNotSupportedOnDevice:
    return "the CUDA forward-compatibility package does not support this device";
  default: return NULL;
  }
}

/* Turn a failed runtime call into HAP_ENOGPU or HAP_ECUDA, quoting the CUDA error. */
static hap_status cuda_fail(hap_err *err, cudaError_t e, const char *call) {
  (void)cudaGetLastError(); /* clear the thread's last error so the next call starts clean */
  const char *reason = no_gpu_reason(e);
  if (reason != NULL)
    return hap_err_set(err, HAP_ENOGPU, "%s (%s: %s (%d): %s)", reason, call, cudaGetErrorName(e),
                       (int)e, cudaGetErrorString(e));
  return hap_err_set(err, HAP_ECUDA, "%s failed: %s (%d): %s", call, cudaGetErrorName(e), (int)e,
                     cudaGetErrorString(e));
}

extern "C" bool hap_gpu_compiled(void) { return true; }

extern "C" hap_status hap_gpu_query(hap_gpu_info *out, int max, int *count, hap_err *err) {
  if (count == NULL || max < 0 || (max > 0 && out == NULL))
    return hap_err_set(err, HAP_EINVAL, "hap_gpu_query: need count != NULL and out for %d entries",
                       max);
  *count = 0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return cuda_fail(err, e, "cudaGetDeviceCount");
  if (n <= 0) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    return hap_err_set(err, HAP_ENOGPU, "the CUDA runtime sees no device (CUDA_VISIBLE_DEVICES=%s)",
                       vis != NULL ? vis : "(unset)");
  }
  for (int i = 0; i < n && i < max; i++) {
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
      char call[64];
      snprintf(call, sizeof call, "cudaGetDeviceProperties(device %d)", i);
      return cuda_fail(err, e, call);
    }
    hap_gpu_info *g = &out[i];
    memset(g, 0, sizeof *g);
    g->index = i;
    snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof p.name, p.name);
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    g->memory_bytes = (int64_t)p.totalGlobalMem;
    g->sm_count = p.multiProcessorCount;
    if (cudaDeviceGetPCIBusId(g->pci_bus_id, (int)sizeof g->pci_bus_id, i) != cudaSuccess) {
      (void)cudaGetLastError();
      g->pci_bus_id[0] = '\0';
    }
  }
  *count = n;
  return HAP_OK;
}

/* out[i] = 3 i + 1: simple enough to check on the host, enough to prove the kernel ran. */
__global__ void hap_selftest_kernel(int *out, int n) {
  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n)
    out[i] = 3 * i + 1;
}

extern "C" hap_status hap_gpu_selftest(int index, hap_err *err) {
  enum { N = 1000, THREADS = 256 };
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return cuda_fail(err, e, "cudaGetDeviceCount");
  if (index < 0 || index >= n)
    return hap_err_set(err, HAP_ENOGPU, "no GPU %d (the CUDA runtime sees %d)", index, n);

  int prev = 0;
  e = cudaGetDevice(&prev);
  if (e != cudaSuccess)
    return cuda_fail(err, e, "cudaGetDevice");
  e = cudaSetDevice(index);
  if (e != cudaSuccess)
    return cuda_fail(err, e, "cudaSetDevice");

  hap_status st = HAP_OK;
  int *d_out = NULL;
  int h_out[N];
  e = cudaMalloc((void **)&d_out, N * sizeof(int));
  if (e != cudaSuccess) {
    st = cuda_fail(err, e, "cudaMalloc");
    goto done;
  }
  hap_selftest_kernel<<<(N + THREADS - 1) / THREADS, THREADS>>>(d_out, N);
  e = cudaGetLastError();
  if (e != cudaSuccess) {
    st = cuda_fail(err, e, "self-test kernel launch");
    goto done;
  }
  e = cudaMemcpy(h_out, d_out, N * sizeof(int), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    st = cuda_fail(err, e, "cudaMemcpy (self-test result)");
    goto done;
  }
  for (int i = 0; i < N; i++) {
    if (h_out[i] != 3 * i + 1) {
      st = hap_err_set(err, HAP_ECUDA, "GPU %d self-test: out[%d] = %d, expected %d", index, i,
                       h_out[i], 3 * i + 1);
      goto done;
    }
  }
done:
  if (d_out != NULL)
    (void)cudaFree(d_out);
  (void)cudaSetDevice(prev);
  return st;
}
