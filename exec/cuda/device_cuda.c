/* device_cuda.c — the `cuda` device backend (device_cuda.h). One non-blocking stream per device;
 * every timed call is [event0, work, event1] on it, then cudaEventSynchronize(event1), so the call
 * is synchronous. Its device time: with CUPTI, the span of the activity records (kernels, copies,
 * memsets) the call produced, first start to last end, in ns, without the events' own cost;
 * otherwise, or when the call left no record, cudaEventElapsedTime (ms, resolution ~0.5 us).
 * CUPTI is used only when cuptiSubscribe succeeds: it fails with
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED when a profiler (nsys, ncu) already holds CUPTI,
 * and then events time everything; info.library says which timer applies. Never run on a GPU in
 * CI (no GPU there): the gpu_backend test checks these times against the GEMM's FLOPs. */
#include "exec/device_cuda.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if HAP_HAVE_CUBLAS
#include <cublas_v2.h>
#endif
#if HAP_HAVE_CUPTI
#include <cupti.h>
#include <pthread.h>
#endif

#include "exec/clock.h"
#include "exec/devices.h"
#include "kernels_cuda.h"

typedef struct cuda_impl {
  int32_t index;
  cudaStream_t stream;
  cudaEvent_t ev0, ev1;
#if HAP_HAVE_CUBLAS
  cublasHandle_t blas;
#endif
  double last_s;   /* device time of the last timed call, s */
  bool cupti;      /* time calls from CUPTI activity records (events as the fallback) */
  char timer[96];  /* "cudaEvent (CUPTI free)" or why CUPTI is not usable */
  char model[256]; /* cudaDeviceProp.name */
  int64_t memory_bytes;
} cuda_impl;

static cuda_impl *impl_of(hap_dev *d) { return (cuda_impl *)d->impl; }

static hap_status cuda_check(cudaError_t e, const char *call, hap_err *err) {
  if (e == cudaSuccess)
    return HAP_OK;
  (void)cudaGetLastError(); /* clear the sticky-free last error for the next call */
  return hap_err_set(err, HAP_ECUDA, "cuda: %s failed: %s (%d): %s", call, cudaGetErrorName(e),
                     (int)e, cudaGetErrorString(e));
}

#if HAP_HAVE_CUBLAS
static hap_status blas_check(cublasStatus_t s, const char *call, hap_err *err) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return HAP_OK;
  return hap_err_set(err, HAP_ECUDA, "cuda: %s failed: %s (%d): %s", call, cublasGetStatusName(s),
                     (int)s, cublasGetStatusString(s));
}
#endif

/* ---- CUPTI activity records (process-wide: CUPTI has one activity stream per process) ------ */

#if HAP_HAVE_CUPTI
enum { CUPTI_BUFFER_BYTES = 1 << 20, CUPTI_ALIGN = 8 };

static pthread_mutex_t cupti_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cupti_on;               /* activity collection enabled */
static uint64_t cupti_lo, cupti_hi; /* span of the records since the last reset, ns */
static int64_t cupti_records;       /* records since the last reset */

static void CUPTIAPI cupti_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(CUPTI_ALIGN, CUPTI_BUFFER_BYTES);
  *size = *buffer != NULL ? CUPTI_BUFFER_BYTES : 0;
  *max_records = 0; /* as many as fit */
}

/* Fold one record's [start, end) into the current span. */
static void cupti_note(uint64_t start, uint64_t end) {
  if (end < start || start == 0)
    return;
  if (cupti_records == 0 || start < cupti_lo)
    cupti_lo = start;
  if (cupti_records == 0 || end > cupti_hi)
    cupti_hi = end;
  cupti_records++;
}

static void CUPTIAPI cupti_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                            size_t size, size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  CUpti_Activity *rec = NULL;
  pthread_mutex_lock(&cupti_lock);
  while (buffer != NULL && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
      cupti_note(k->start, k->end);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
      cupti_note(m->start, m->end);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
      cupti_note(m->start, m->end);
    }
  }
  pthread_mutex_unlock(&cupti_lock);
  free(buffer);
}

/* Enable collection once per process; false (and events time everything) when CUPTI refuses. */
static bool cupti_enable(void) {
  if (cupti_on)
    return true;
  if (cuptiActivityRegisterCallbacks(cupti_buffer_requested, cupti_buffer_completed) !=
      CUPTI_SUCCESS)
    return false;
  static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                             CUPTI_ACTIVITY_KIND_MEMCPY,
                                             CUPTI_ACTIVITY_KIND_MEMSET};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (cuptiActivityEnable(kinds[i]) != CUPTI_SUCCESS) {
      for (size_t j = 0; j < i; j++)
        (void)cuptiActivityDisable(kinds[j]);
      return false;
    }
  cupti_on = true;
  return true;
}

/* Deliver every pending record, then forget the span (before a timed call). */
static void cupti_reset(void) {
  (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pthread_mutex_lock(&cupti_lock);
  cupti_records = 0;
  pthread_mutex_unlock(&cupti_lock);
}

/* The span of the records since cupti_reset, s; -1 when there are none. */
static double cupti_span_s(void) {
  (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pthread_mutex_lock(&cupti_lock);
  double s = cupti_records > 0 ? (double)(cupti_hi - cupti_lo) * 1e-9 : -1;
  pthread_mutex_unlock(&cupti_lock);
  return s;
}
#endif

/* Start a timed call: record event0 on the stream. */
static hap_status timed_begin(cuda_impl *c, hap_err *err) {
#if HAP_HAVE_CUPTI
  if (c->cupti)
    cupti_reset();
#endif
  return cuda_check(cudaEventRecord(c->ev0, c->stream), "cudaEventRecord", err);
}

/* End a timed call: record event1, wait for it, keep the device time (CUPTI's span of the call's
 * records when there are any, else the events'). */
static hap_status timed_end(cuda_impl *c, hap_err *err) {
  HAP_TRY(cuda_check(cudaEventRecord(c->ev1, c->stream), "cudaEventRecord", err));
  HAP_TRY(cuda_check(cudaEventSynchronize(c->ev1), "cudaEventSynchronize", err));
  float ms = 0;
  HAP_TRY(cuda_check(cudaEventElapsedTime(&ms, c->ev0, c->ev1), "cudaEventElapsedTime", err));
  c->last_s = (double)ms * 1e-3;
#if HAP_HAVE_CUPTI
  double span = c->cupti ? cupti_span_s() : -1;
  if (span >= 0)
    c->last_s = span;
#endif
  return HAP_OK;
}

static hap_status cuda_info(hap_dev *d, hap_dev_info *out, hap_err *err) {
  (void)err;
  cuda_impl *c = impl_of(d);
  memset(out, 0, sizeof *out);
  snprintf(out->model, sizeof out->model, "%.127s", c->model);
  out->kind = HAP_DEVICE_GPU;
  out->memory_bytes = c->memory_bytes;
  out->threads = 0;
  out->speed = 1.0;
  hap_gpu_lib_versions v;
  hap_err ignore = {0};
  if (hap_gpu_versions(&v, &ignore) != HAP_OK)
    memset(&v, 0, sizeof v);
  snprintf(out->library, sizeof out->library, "cuBLAS %d, CUDA runtime %d, driver %d, timer %s",
           v.cublas, v.cudart, v.cuda_driver, c->timer);
  return HAP_OK;
}

static hap_status cuda_alloc(hap_dev *d, size_t bytes, void **out, hap_err *err) {
  (void)d;
  *out = NULL;
  cudaError_t e = cudaMalloc(out, bytes > 0 ? bytes : 256);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return hap_err_set(err, HAP_ENOMEM, "cuda: cannot allocate %zu bytes of GPU memory", bytes);
  }
  return cuda_check(e, "cudaMalloc", err);
}

static void cuda_release(hap_dev *d, void *ptr) {
  (void)d;
  if (ptr != NULL)
    (void)cudaFree(ptr);
}

static hap_status cuda_copy(hap_dev *d, void *dst, const void *src, size_t bytes, hap_err *err) {
  cuda_impl *c = impl_of(d);
  HAP_TRY(timed_begin(c, err));
  /* cudaMemcpyDefault: unified addressing decides the direction, so host buffers work too. */
  if (bytes > 0)
    HAP_TRY(cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream),
                       "cudaMemcpyAsync", err));
  return timed_end(c, err);
}

static hap_status cuda_fill(hap_dev *d, hap_dtype dtype, void *x, int64_t count, double value,
                            hap_err *err) {
  cuda_impl *c = impl_of(d);
  if (count < 0)
    return hap_err_set(err, HAP_EINVAL, "cuda: fill of %lld elements, expected >= 0",
                       (long long)count);
  cudaError_t (*half_fill)(cudaStream_t, void *, int64_t, float) =
      dtype == HAP_F16    ? hap_cuda_fill_f16
      : dtype == HAP_BF16 ? hap_cuda_fill_bf16
                          : NULL;
  if (dtype != HAP_F32 && dtype != HAP_F64 && half_fill == NULL)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "cuda: fill in %s, expected float32, float64, float16 or bfloat16",
                       hap_dtype_name(dtype));
  HAP_TRY(timed_begin(c, err));
  cudaError_t e = dtype == HAP_F32   ? hap_cuda_fill_f32(c->stream, x, count, (float)value)
                  : dtype == HAP_F64 ? hap_cuda_fill_f64(c->stream, x, count, value)
                                     : half_fill(c->stream, x, count, (float)value);
  HAP_TRY(cuda_check(e, "fill kernel launch", err));
  return timed_end(c, err);
}

static hap_status cuda_gemm(hap_dev *d, hap_dtype dtype, int64_t m, int64_t n, int64_t k,
                            const void *a, const void *b, void *cmat, hap_err *err) {
  if (m <= 0 || n <= 0 || k <= 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return hap_err_set(err, HAP_EINVAL, "cuda: gemm %lld x %lld x %lld, expected sizes in 1..%d",
                       (long long)m, (long long)n, (long long)k, INT_MAX);
  bool half = dtype == HAP_F16 || dtype == HAP_BF16;
  if (dtype != HAP_F32 && dtype != HAP_F64 && !half)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "cuda: gemm in %s, expected float32, float64, float16 or bfloat16",
                       hap_dtype_name(dtype));
#if HAP_HAVE_CUBLAS
  cuda_impl *c = impl_of(d);
  /* cuBLAS is column-major: a row-major X is X^T column-major, so row-major C = A B is
   * column-major C^T = B^T A^T, i.e. gemm(N, N, n, m, k, B, ld n, A, ld k, C, ld n). */
  int mi = (int)m, ni = (int)n, ki = (int)k;
  HAP_TRY(timed_begin(c, err));
  cublasStatus_t s;
  const char *call = "cublasSgemm";
  if (dtype == HAP_F32) {
    const float one = 1.0f, zero = 0.0f;
    s = cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ki, &one, b, ni, a, ki, &zero, cmat,
                    ni);
  } else if (dtype == HAP_F64) {
    const double one = 1.0, zero = 0.0;
    call = "cublasDgemm";
    s = cublasDgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ki, &one, b, ni, a, ki, &zero, cmat,
                    ni);
  } else { /* mixed precision's GEMM: half A, B and C, float32 accumulation (tensor cores) */
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = dtype == HAP_F16 ? CUDA_R_16F : CUDA_R_16BF;
    call = "cublasGemmEx";
    s = cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ki, &one, b, t, ni, a, t, ki, &zero,
                     cmat, t, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  HAP_TRY(blas_check(s, call, err));
  return timed_end(c, err);
#else
  (void)d;
  (void)a;
  (void)b;
  (void)cmat;
  return hap_err_set(err, HAP_EUNSUPPORTED, "cuda: gemm: this build has no cuBLAS");
#endif
}

static hap_status cuda_empty_kernel(hap_dev *d, hap_err *err) {
  return cuda_check(hap_cuda_empty(impl_of(d)->stream), "empty kernel launch", err);
}

static hap_status cuda_synchronize(hap_dev *d, hap_err *err) {
  return cuda_check(cudaStreamSynchronize(impl_of(d)->stream), "cudaStreamSynchronize", err);
}

static double cuda_now_s(hap_dev *d) {
  (void)d;
  return hap_clock_s();
}

static double cuda_last_s(hap_dev *d) { return impl_of(d)->last_s; }

static void cuda_close(hap_dev *d) {
  if (d == NULL)
    return;
  cuda_impl *c = impl_of(d);
  if (c != NULL) {
#if HAP_HAVE_CUBLAS
    if (c->blas != NULL)
      (void)cublasDestroy(c->blas);
#endif
    if (c->ev0 != NULL)
      (void)cudaEventDestroy(c->ev0);
    if (c->ev1 != NULL)
      (void)cudaEventDestroy(c->ev1);
    if (c->stream != NULL)
      (void)cudaStreamDestroy(c->stream);
    free(c);
  }
  free(d);
}

static const hap_dev_ops cuda_ops = {
    .name = "cuda",
    .info = cuda_info,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .gemm = cuda_gemm,
    .empty_kernel = cuda_empty_kernel,
    .synchronize = cuda_synchronize,
    .now_s = cuda_now_s,
    .last_s = cuda_last_s,
    .close = cuda_close,
};

#if HAP_HAVE_CUPTI
static void CUPTIAPI probe_callback(void *userdata, CUpti_CallbackDomain domain,
                                    CUpti_CallbackId cbid, const void *cbdata) {
  (void)userdata;
  (void)domain;
  (void)cbid;
  (void)cbdata;
}
#endif

/* Which timer applies: CUPTI activity records when CUPTI is free, else events; in words. */
static void probe_cupti(cuda_impl *c) {
#if HAP_HAVE_CUPTI
  CUpti_SubscriberHandle sub = NULL;
  CUptiResult r = cuptiSubscribe(&sub, probe_callback, NULL);
  if (r == CUPTI_SUCCESS) {
    (void)cuptiUnsubscribe(sub);
    c->cupti = cupti_enable();
    snprintf(c->timer, sizeof c->timer, "%s",
             c->cupti ? "CUPTI activity records (cudaEvent fallback)"
                      : "cudaEvent (CUPTI activity collection refused)");
  } else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    snprintf(c->timer, sizeof c->timer, "cudaEvent (another CUPTI subscriber is attached)");
  } else {
    const char *why = NULL;
    if (cuptiGetResultString(r, &why) != CUPTI_SUCCESS || why == NULL)
      why = "unknown error";
    snprintf(c->timer, sizeof c->timer, "cudaEvent (CUPTI: %s)", why);
  }
#else
  snprintf(c->timer, sizeof c->timer, "cudaEvent (built without CUPTI)");
#endif
}

hap_status hap_dev_cuda_open(int32_t index, hap_dev **out, hap_err *err) {
  *out = NULL;
  int count = 0;
  HAP_TRY(hap_gpu_query(NULL, 0, &count, err)); /* HAP_ENOGPU with the reason */
  if (index < 0 || index >= count)
    return hap_err_set(err, HAP_ENOGPU, "cuda: no GPU %d (the CUDA runtime sees %d)", index, count);
#if !HAP_HAVE_CUBLAS
  return hap_err_set(err, HAP_EUNSUPPORTED, "cuda: this build has no cuBLAS (GEMMs need it)");
#else
  hap_dev *d = calloc(1, sizeof *d);
  cuda_impl *c = calloc(1, sizeof *c);
  if (d == NULL || c == NULL) {
    free(d);
    free(c);
    return hap_err_set(err, HAP_ENOMEM, "cuda: out of memory opening the device");
  }
  d->ops = &cuda_ops;
  d->impl = c;
  c->index = index;
  struct cudaDeviceProp p;
  hap_status st = cuda_check(cudaSetDevice(index), "cudaSetDevice", err);
  if (st == HAP_OK)
    st = cuda_check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties", err);
  if (st == HAP_OK) {
    snprintf(c->model, sizeof c->model, "%.*s", (int)sizeof p.name, p.name);
    c->memory_bytes = (int64_t)p.totalGlobalMem;
    st = cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags", err);
  }
  if (st == HAP_OK)
    st = cuda_check(cudaEventCreate(&c->ev0), "cudaEventCreate", err);
  if (st == HAP_OK)
    st = cuda_check(cudaEventCreate(&c->ev1), "cudaEventCreate", err);
  if (st == HAP_OK)
    st = blas_check(cublasCreate(&c->blas), "cublasCreate", err);
  if (st == HAP_OK)
    st = blas_check(cublasSetStream(c->blas, c->stream), "cublasSetStream", err);
  /* Plain FP32 (no TF32 tensor cores), so float32 results match a CPU reference closely. */
  if (st == HAP_OK)
    st = blas_check(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err);
  if (st != HAP_OK) {
    cuda_close(d);
    return st;
  }
  probe_cupti(c);
  *out = d;
  return HAP_OK;
#endif
}

int32_t hap_dev_cuda_index(const hap_dev *d) { return ((const cuda_impl *)d->impl)->index; }
