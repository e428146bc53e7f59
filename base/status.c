#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *hap_status_str(hap_status st) {
  switch (st) {
  case HAP_OK: return "ok";
  case HAP_EINVAL: return "invalid argument";
  case HAP_ENOMEM: return "out of memory";
  case HAP_EIO: return "I/O error";
  case HAP_EPARSE: return "parse error";
  case HAP_EVERSION: return "unsupported format version";
  case HAP_EOVERFLOW: return "size overflow";
  case HAP_ENOTFOUND: return "not found";
  case HAP_EUNSUPPORTED: return "unsupported";
  case HAP_ENOGPU: return "no usable GPU";
  case HAP_ECUDA: return "CUDA error";
  case HAP_ENCCL: return "NCCL error";
  case HAP_EMPI: return "MPI error";
  case HAP_EHDF5: return "HDF5 error";
  case HAP_ELP: return "LP solver error";
  case HAP_EINTERRUPTED: return "interrupted";
  }
  return "unknown status";
}

hap_status(hap_err_set)(hap_err *err, hap_status st, const char *fmt, ...) {
  if (err == NULL || err->status != HAP_OK)
    return st;
  err->status = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return st;
}

void hap_err_prefix(hap_err *err, const char *fmt, ...) {
  if (err == NULL)
    return;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char joined[sizeof err->msg];
  size_t n = strlen(prefix);
  if (n > sizeof joined - 3)
    n = sizeof joined - 3;
  memcpy(joined, prefix, n);
  memcpy(joined + n, ": ", 2);
  size_t rest = strnlen(err->msg, sizeof err->msg - 1);
  if (rest > sizeof joined - n - 3)
    rest = sizeof joined - n - 3;
  memcpy(joined + n + 2, err->msg, rest);
  joined[n + 2 + rest] = '\0';
  memcpy(err->msg, joined, sizeof joined);
}

void hap_err_clear(hap_err *err) {
  if (err == NULL)
    return;
  err->status = HAP_OK;
  err->msg[0] = '\0';
}
