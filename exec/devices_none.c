/* devices_none.c — the device query of a build without CUDA: every query reports HAP_ENOGPU. */
#include "devices.h"

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
