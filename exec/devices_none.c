/* devices_none.c — the GPU side of a build without CUDA: every query and the `cuda` device
 * backend report HAP_ENOGPU; the `nccl` comm backend HAP_EUNSUPPORTED. */
#include "exec/devices.h"

#include "exec/comm_nccl.h"
#include "exec/device_cuda.h"

#include <string.h>

bool hap_gpu_compiled(void) { return false; }

hap_status hap_gpu_query(hap_gpu_info *out, int max, int *count, hap_err *err) {
  if (count == NULL || max < 0 || (max > 0 && out == NULL))
    return hap_err_set(err, HAP_EINVAL, "hap_gpu_query: need count != NULL and out for %d entries",
                       max);
  *count = 0;
  return hap_err_set(err, HAP_ENOGPU,
                     "built without CUDA (no CUDA toolkit found at configure time, or "
                     "-DHAP_WITH_CUDA=OFF)");
}

hap_status hap_gpu_versions(hap_gpu_lib_versions *out, hap_err *err) {
  if (out == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap_gpu_versions: out is NULL");
  memset(out, 0, sizeof *out);
  return HAP_OK;
}

hap_status hap_gpu_selftest(int index, hap_err *err) {
  return hap_err_set(err, HAP_ENOGPU, "built without CUDA: cannot run a kernel on GPU %d", index);
}

hap_status hap_dev_cuda_open(int32_t index, hap_dev **out, hap_err *err) {
  *out = NULL;
  return hap_err_set(err, HAP_ENOGPU, "built without CUDA: no GPU %d", index);
}

int32_t hap_dev_cuda_index(const hap_dev *d) {
  (void)d;
  return -1;
}

hap_status hap_comm_nccl_init(hap_comm *mpi_world, int32_t device, hap_comm **out, hap_err *err) {
  (void)mpi_world;
  (void)device;
  *out = NULL;
  return hap_err_set(err, HAP_EUNSUPPORTED, "nccl: built without CUDA");
}

int32_t hap_comm_nccl_version(void) { return 0; }
