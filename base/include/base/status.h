/* status.h — one status enum for every hap library, and an error record that carries a message.
 * Ownership: hap_err is caller-owned (usually on the stack); nothing here allocates. */
#ifndef HAP_STATUS_H
#define HAP_STATUS_H

#include <stddef.h>

typedef enum hap_status {
  HAP_OK = 0,
  HAP_EINVAL,       /* invalid argument or invalid model / graph content */
  HAP_ENOMEM,       /* allocation failed */
  HAP_EIO,          /* file system error */
  HAP_EPARSE,       /* malformed file (syntax or schema) */
  HAP_EVERSION,     /* file written by a newer major format version */
  HAP_EOVERFLOW,    /* a size does not fit in int64 */
  HAP_ENOTFOUND,    /* unknown name (model, option, tensor, op) */
  HAP_EUNSUPPORTED, /* valid request we do not implement */
  HAP_ENOGPU,       /* GPU requested but none usable */
  HAP_ECUDA,        /* CUDA runtime error */
  HAP_ENCCL,        /* NCCL error */
  HAP_EMPI,         /* MPI error */
  HAP_EHDF5,        /* HDF5 error */
  HAP_ELP,          /* LP solver error */
  HAP_EINTERRUPTED  /* stopped by a signal */
} hap_status;

/* Human-readable name of a status ("invalid argument", ...). Never NULL. */
const char *hap_status_str(hap_status st);

/* The first error of an operation: its status and a one-line message that names the file, the
 * field and what was expected. Functions that take a `hap_err *` (may be NULL) fill it on failure.
 */
typedef struct hap_err {
  hap_status status;
  char msg[1024];
} hap_err;

/* Record `st` with a printf-style message in `err` (if non-NULL) and return `st`, so callers can
 * write `return hap_err_set(err, HAP_EINVAL, "...")`. Does not overwrite an earlier error. */
hap_status hap_err_set(hap_err *err, hap_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __clang_analyzer__
/* Let the static analyzer see that the status passed in is the one returned. */
#define hap_err_set(err, st, ...) (hap_err_set((err), (st), __VA_ARGS__), (st))
#endif

/* Prefix the message already in `err` with "prefix: " (e.g. a file name). No-op when err is NULL.
 */
void hap_err_prefix(hap_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to HAP_OK and an empty message. */
void hap_err_clear(hap_err *err);

#define HAP_TRY(expr)                                                                              \
  do {                                                                                             \
    hap_status hap_try_st_ = (expr);                                                               \
    if (hap_try_st_ != HAP_OK)                                                                     \
      return hap_try_st_;                                                                          \
  } while (0)

#endif
