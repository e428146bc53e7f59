/* backend.h — the device table every execution backend implements (docs/execution.md): memory,
 * copies, kernels and a timer, behind function pointers so hap-profile and hap-run drive `cpu` and
 * (later) `cuda` the same way. The communication table is comm.h. Contract: every call is
 * synchronous from the caller's point of view (it returns when the work is done), so a caller may
 * time it with now_s around it; the one exception is empty_kernel on an asynchronous device (cuda),
 * which only enqueues: synchronize waits for it. Emulated speed (emulate.h) is applied inside each
 * kernel and copy. Calls return a hap_status and fill err; none prints or exits. Ownership: a
 * backend's open function returns an owned hap_dev freed with hap_dev_close; memory from alloc
 * belongs to the device and is returned with release. */
#ifndef HAP_BACKEND_H
#define HAP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cluster/cluster.h"
#include "model/ops.h"

typedef struct hap_dev hap_dev;

/* What a device says about itself. */
typedef struct hap_dev_info {
  char model[128];      /* "AMD EPYC 7B13", "NVIDIA H100 80GB HBM3" */
  hap_device_kind kind; /* cpu | gpu */
  int64_t memory_bytes; /* memory this device can use: for a CPU rank, the host's (shared), bytes */
  int32_t threads;      /* worker threads of its kernels (CPU), 0 if not applicable */
  double speed;         /* emulated speed in (0, 1], 1 = native */
  char library[160];    /* the kernel library and its build, e.g. "OpenBLAS 0.3.21 ..." */
} hap_dev_info;

typedef struct hap_dev_ops {
  const char *name; /* "cpu" */
  hap_status (*info)(hap_dev *d, hap_dev_info *out, hap_err *err);
  hap_status (*alloc)(hap_dev *d, size_t bytes, void **out, hap_err *err);
  void (*release)(hap_dev *d, void *ptr); /* NULL is ignored */
  /* dst <- src, `bytes` bytes, both device memory. */
  hap_status (*copy)(hap_dev *d, void *dst, const void *src, size_t bytes, hap_err *err);
  /* x[0..count) <- value, in dtype (float dtypes only). */
  hap_status (*fill)(hap_dev *d, hap_dtype dtype, void *x, int64_t count, double value,
                     hap_err *err);
  /* Row-major C[m x n] = A[m x k] * B[k x n]. */
  hap_status (*gemm)(hap_dev *d, hap_dtype dtype, int64_t m, int64_t n, int64_t k, const void *a,
                     const void *b, void *c, hap_err *err);
  /* A kernel that does nothing: what launching one costs. */
  hap_status (*empty_kernel)(hap_dev *d, hap_err *err);
  /* Wait for outstanding work (a no-op on a synchronous backend). */
  hap_status (*synchronize)(hap_dev *d, hap_err *err);
  /* Seconds on the device's timer (monotonic; only differences mean anything). */
  double (*now_s)(hap_dev *d);
  /* Optional (NULL: time with now_s): the device's own time of the last copy, fill or gemm, s
   * (cuda: cudaEvents around the call, without the host's launch and wait overhead). */
  double (*last_s)(hap_dev *d);
  void (*close)(hap_dev *d);
} hap_dev_ops;

struct hap_dev {
  const hap_dev_ops *ops;
  void *impl; /* the backend's state */
};

static inline void hap_dev_close(hap_dev *d) {
  if (d != NULL)
    d->ops->close(d);
}

#endif
