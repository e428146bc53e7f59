/* profile_h5.h — private to profile_store.c and profile_read.c: HDF5 error handling shared by the
 * writer and the reader, and the row layout of the compound tables. Not a public header.
 * Ownership: the hid_t returned by the type builders belongs to the caller (H5Tclose). */
#ifndef HAP_PROFILE_H5_H
#define HAP_PROFILE_H5_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "store/profile_store.h"

/* Fixed-length string fields inside the compound tables (bytes, NUL included). */
#define HAP_H5_DTYPE_MAX 16
#define HAP_H5_OP_MAX    32
#define HAP_H5_DIR_MAX   4

/* /devices/<i>/gemm row. */
typedef struct hap_h5_gemm_row {
  int64_t m, n, k;
  char dtype[HAP_H5_DTYPE_MAX];
  double seconds;     /* s */
  double flops_per_s; /* FLOP/s */
} hap_h5_gemm_row;

/* /devices/<i>/kernels row. */
typedef struct hap_h5_kernel_row {
  char op[HAP_H5_OP_MAX];
  char direction[HAP_H5_DIR_MAX]; /* "fwd" | "bwd" */
  uint64_t shape_key;
  char shape[HAP_PROFILE_SHAPE_MAX];
  double p50_s, p95_s; /* s */
  int64_t reps;
  double mean_s; /* s; 0 = not recorded (a 2.1 file has no such member) */
} hap_h5_kernel_row;

/* Memory compound types of the rows (native layout); negative on failure. */
hid_t hap_h5_gemm_type(void);
hid_t hap_h5_kernel_type(void);

/* Turn off HDF5's automatic error printing for the calling thread; failures are reported
 * through hap_err instead. It stays off: after a corrupted file, HDF5 1.10 would otherwise print
 * "infinite loop closing library" from its exit-time cleanup. */
void hap_h5_silence(void);

/* The innermost message of the calling thread's HDF5 error stack, shortened into buf ("" when the
 * stack is empty). Returns buf. */
const char *hap_h5_detail(char *buf, size_t len);

#endif
