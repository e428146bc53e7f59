/* devices.h — backend-neutral GPU discovery: which GPUs this process can use, and which GPU
 * library versions the build carries. Ownership: callers own every buffer passed in; nothing here
 * allocates, and no state is kept between calls.
 *
 * Implementations: exec/cuda/devices_cuda.cu (CUDA runtime API only, never libcuda directly, so the
 * tools start on machines without a GPU driver) when the build found a CUDA toolkit, else
 * exec/devices_none.c, which reports HAP_ENOGPU ("built without CUDA"). */
#ifndef HAP_DEVICES_H
#define HAP_DEVICES_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* status.h has no C++ guard of its own; the CUDA implementation is C++ */
#endif

#include "base/status.h"

typedef struct hap_gpu_info {
  int index;            /* CUDA runtime ordinal (after CUDA_VISIBLE_DEVICES) */
  char name[256];       /* marketing name, e.g. "NVIDIA H100 80GB HBM3" */
  int cc_major;         /* compute capability, e.g. 9 */
  int cc_minor;         /* e.g. 0 */
  int64_t memory_bytes; /* total global memory, bytes */
  int sm_count;         /* streaming multiprocessors */
  char pci_bus_id[32];  /* "0000:3b:00.0"; empty if unknown */
} hap_gpu_info;

/* Library versions, encoded the way each library does (0 = not built in or not available):
 * CUDA 13.0 -> 13000 (1000*major + 10*minor), NCCL 2.28.9 -> 22809, CUPTI API -> e.g. 130001,
 * cuBLAS 13.0.2 -> 130002 (10000*major + 100*minor + patch). */
typedef struct hap_gpu_lib_versions {
  int cudart;      /* CUDA runtime linked into this binary (cudaRuntimeGetVersion) */
  int cuda_driver; /* highest CUDA version the installed driver supports; 0 = no driver */
  int nccl;        /* ncclGetVersion */
  int cupti;       /* cuptiGetVersion (CUPTI API version) */
  int cublas;      /* cublasGetProperty, no handle (works without a GPU) */
} hap_gpu_lib_versions;

/* True when this build contains the CUDA backend (a CUDA toolkit was found at configure time).
 * Says nothing about whether a GPU is present: ask hap_gpu_query. */
bool hap_gpu_compiled(void);

/* Enumerate the usable GPUs. Fills out[0 .. min(*count, max)-1] and sets *count to the number of
 * devices found (which may exceed max; out may be NULL when max is 0).
 * Returns HAP_OK with *count >= 1; HAP_ENOGPU with *count = 0 when there is no usable GPU (built
 * without CUDA, no driver, driver too old, no device, devices busy or hidden), with a message in
 * err saying which and quoting the CUDA error; HAP_ECUDA for any other CUDA failure; HAP_EINVAL
 * for bad arguments. Never exits, never prints. */
hap_status hap_gpu_query(hap_gpu_info *out, int max, int *count, hap_err *err);

/* Versions of the GPU libraries built into this binary and of the installed driver. Works without
 * a GPU and without a driver (cuda_driver is then 0). Without CUDA every field is 0 and the
 * result is HAP_OK. */
hap_status hap_gpu_versions(hap_gpu_lib_versions *out, hap_err *err);

/* Run a tiny kernel on device `index` and check its result: proves the device executes code built
 * for its architecture (catches "no kernel image is available"). HAP_ENOGPU without CUDA or
 * without that device; HAP_ECUDA on a failed launch or a wrong result. */
hap_status hap_gpu_selftest(int index, hap_err *err);

#ifdef __cplusplus
}
#endif

#endif
