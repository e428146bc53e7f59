/* kernels_run.c — kernel programs on a GPU (kernels_run.h): the program is built in C (kx.c), each
 * non-GEMM pass is one launch of kernels_run.cu's body kernel, GEMM passes are cuBLAS calls, all
 * on one stream between two cudaEvents. Every copy is on that stream too. */
#include "kx/kernels_run.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "exec/clock.h"
#include "exec/devices.h"
#include "kx/kx.h"
#include "kx_cuda.h"

struct hap_cuda_kernels {
  int32_t device;
  cudaStream_t stream;
  cudaEvent_t ev0, ev1;
  cublasHandle_t blas;
  double *scratch; /* device, scratch_n doubles */
  int64_t scratch_n;
  int64_t *flag;            /* device, one int64 */
  void *buf[HAP_KX_SLOTS];  /* staging buffers, device */
  size_t cap[HAP_KX_SLOTS]; /* their sizes, bytes */
  hap_dtype gemm;           /* GEMM operand format (hap_kx_gemm_dtype_ok) */
  void *half[2];            /* a half GEMM's converted A and B, device */
  size_t half_cap[2];       /* their sizes, bytes */
};

static hap_status cuda_check(cudaError_t e, const char *call, hap_err *err) {
  if (e == cudaSuccess)
    return HAP_OK;
  (void)cudaGetLastError();
  return hap_err_set(err, HAP_ECUDA, "cuda kernels: %s failed: %s (%d): %s", call,
                     cudaGetErrorName(e), (int)e, cudaGetErrorString(e));
}

static hap_status blas_check(cublasStatus_t s, const char *call, hap_err *err) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return HAP_OK;
  return hap_err_set(err, HAP_ECUDA, "cuda kernels: %s failed: %s (%d): %s", call,
                     cublasGetStatusName(s), (int)s, cublasGetStatusString(s));
}

void hap_cuda_kernels_close(hap_cuda_kernels *k) {
  if (k == NULL)
    return;
  for (int i = 0; i < HAP_KX_SLOTS; i++)
    if (k->buf[i] != NULL)
      (void)cudaFree(k->buf[i]);
  for (int i = 0; i < 2; i++)
    if (k->half[i] != NULL)
      (void)cudaFree(k->half[i]);
  if (k->scratch != NULL)
    (void)cudaFree(k->scratch);
  if (k->flag != NULL)
    (void)cudaFree(k->flag);
  if (k->blas != NULL)
    (void)cublasDestroy(k->blas);
  if (k->ev0 != NULL)
    (void)cudaEventDestroy(k->ev0);
  if (k->ev1 != NULL)
    (void)cudaEventDestroy(k->ev1);
  if (k->stream != NULL)
    (void)cudaStreamDestroy(k->stream);
  free(k);
}

hap_status hap_cuda_kernels_open(int32_t device, hap_cuda_kernels **out, hap_err *err) {
  *out = NULL;
  int count = 0;
  HAP_TRY(hap_gpu_query(NULL, 0, &count, err)); /* HAP_ENOGPU with the reason */
  if (device < 0 || device >= count)
    return hap_err_set(err, HAP_ENOGPU, "cuda: no GPU %d (the CUDA runtime sees %d)", device,
                       count);
  HAP_TRY(hap_gpu_selftest(device, err)); /* this build's kernels run on it */
  hap_cuda_kernels *k = calloc(1, sizeof *k);
  if (k == NULL)
    return hap_err_set(err, HAP_ENOMEM, "cuda kernels: out of memory");
  k->device = device;
  k->gemm = HAP_F32;
  hap_status st = cuda_check(cudaSetDevice(device), "cudaSetDevice", err);
  if (st == HAP_OK)
    st = cuda_check(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags", err);
  if (st == HAP_OK)
    st = cuda_check(cudaEventCreate(&k->ev0), "cudaEventCreate", err);
  if (st == HAP_OK)
    st = cuda_check(cudaEventCreate(&k->ev1), "cudaEventCreate", err);
  if (st == HAP_OK)
    st = cuda_check(cudaMalloc((void **)&k->flag, sizeof *k->flag), "cudaMalloc", err);
  if (st == HAP_OK)
    st = blas_check(cublasCreate(&k->blas), "cublasCreate", err);
  if (st == HAP_OK)
    st = blas_check(cublasSetStream(k->blas, k->stream), "cublasSetStream", err);
  /* plain FP32 (no TF32), so results match the CPU kernels within --check's 1e-4 */
  if (st == HAP_OK)
    st = blas_check(cublasSetMathMode(k->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err);
  if (st != HAP_OK) {
    hap_cuda_kernels_close(k);
    return st;
  }
  *out = k;
  return HAP_OK;
}

/* *buf (of *cap bytes, device) grown to at least `bytes` bytes (grow-only). */
static hap_status grow(void **buf, size_t *cap, size_t bytes, hap_err *err) {
  if (bytes < 256)
    bytes = 256;
  if (*cap >= bytes)
    return HAP_OK;
  if (*buf != NULL)
    (void)cudaFree(*buf);
  *buf = NULL;
  *cap = 0;
  cudaError_t e = cudaMalloc(buf, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return hap_err_set(err, HAP_ENOMEM, "cuda kernels: cannot allocate %zu bytes of GPU memory",
                       bytes);
  }
  HAP_TRY(cuda_check(e, "cudaMalloc", err));
  *cap = bytes;
  return HAP_OK;
}

/* Device buffer `slot` of at least `bytes` bytes (grow-only). */
static hap_status ensure(hap_cuda_kernels *k, int slot, size_t bytes, void **p, hap_err *err) {
  HAP_TRY(grow(&k->buf[slot], &k->cap[slot], bytes, err));
  *p = k->buf[slot];
  return HAP_OK;
}

hap_status hap_cuda_kernels_set_gemm(hap_cuda_kernels *k, hap_dtype gemm, hap_err *err) {
  if (!hap_kx_gemm_dtype_ok(gemm))
    return hap_err_set(err, HAP_EINVAL,
                       "cuda kernels: GEMMs in %s, expected float32, float16 or bfloat16",
                       hap_dtype_name(gemm));
  k->gemm = gemm;
  return HAP_OK;
}

/* Device to host on the kernels' stream; the host buffer is complete on return. */
static hap_status download(hap_cuda_kernels *k, void *host, const void *dev, size_t bytes,
                           hap_err *err) {
  if (host == NULL || dev == NULL || bytes == 0)
    return HAP_OK;
  HAP_TRY(cuda_check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, k->stream),
                     "cudaMemcpyAsync", err));
  return cuda_check(cudaStreamSynchronize(k->stream), "cudaStreamSynchronize", err);
}

/* A and B of a run of `run` batches from a and b, converted to k->gemm in k->half (a half GEMM's
 * operands; the same spans the host executor rounds). */
static hap_status half_operands(hap_cuda_kernels *k, const hap_kx_pass *x, int64_t run,
                                const int64_t stride[3], const float *a, const float *b,
                                const void **ha, const void **hb, hap_err *err) {
  int64_t span[2];
  hap_kx_gemm_spans(x, run, stride, span);
  const float *src[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    HAP_TRY(grow(&k->half[i], &k->half_cap[i], (size_t)span[i] * 2, err));
    HAP_TRY(
        cuda_check(hap_kx_cuda_to_half(k->stream, src[i], k->half[i], span[i], k->gemm == HAP_BF16),
                   "conversion kernel launch", err));
  }
  *ha = k->half[0];
  *hb = k->half[1];
  return HAP_OK;
}

/* Row-major C = alpha op(A) op(B) + beta C per batch. cuBLAS is column-major: a row-major X is
 * X^T column-major, so C^T = op(B)^T op(A)^T is gemm(op_b, op_a, n, m, k, B, A). Runs of batches
 * along the innermost batch dimension go to one strided-batched call: cublasSgemmStridedBatched
 * in float32, cublasGemmStridedBatchedEx on half A and B (float32 accumulation and C) when
 * k->gemm is a half format. */
static hap_status run_gemm(hap_cuda_kernels *k, const hap_kx_pass *x, void **s, hap_err *err) {
  if (x->m <= 0 || x->n <= 0)
    return HAP_OK;
  if (x->m > INT_MAX || x->n > INT_MAX || x->k > INT_MAX || x->lda > INT_MAX || x->ldb > INT_MAX ||
      x->ldc > INT_MAX)
    return hap_err_set(err, HAP_EUNSUPPORTED, "cuda kernels: GEMM %lld x %lld x %lld too large",
                       (long long)x->m, (long long)x->n, (long long)x->k);
  int64_t stride[3] = {0, 0, 0};
  int64_t run = x->k > 0 ? hap_kx_gemm_run(x, stride) : 1;
  if (run > INT_MAX)
    run = 1;
  bool half = k->gemm != HAP_F32;
  cudaDataType_t half_type = k->gemm == HAP_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  for (int64_t t = 0; t < x->batches; t += run) {
    int64_t off[3];
    hap_kx_gemm_operands(x, t, off);
    const float *a = (const float *)s[x->a] + off[0];
    const float *b = (const float *)s[x->b] + off[1];
    float *c = (float *)s[x->c] + off[2];
    if (x->k <= 0) { /* C = beta C: only beta 0 (overwrite) changes anything; C is contiguous */
      if (x->beta == 0.0f)
        HAP_TRY(
            cuda_check(cudaMemsetAsync(c, 0, (size_t)(x->m * x->ldc) * sizeof(float), k->stream),
                       "cudaMemsetAsync", err));
      continue;
    }
    cublasOperation_t op_a = x->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = x->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (half) {
      const void *ha = NULL, *hb = NULL;
      HAP_TRY(half_operands(k, x, run, stride, a, b, &ha, &hb, err));
      HAP_TRY(blas_check(cublasGemmStridedBatchedEx(
                             k->blas, op_b, op_a, (int)x->n, (int)x->m, (int)x->k, &x->alpha, hb,
                             half_type, (int)x->ldb, stride[1], ha, half_type, (int)x->lda,
                             stride[0], &x->beta, c, CUDA_R_32F, (int)x->ldc, stride[2], (int)run,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "cublasGemmStridedBatchedEx", err));
    } else if (run > 1)
      HAP_TRY(blas_check(cublasSgemmStridedBatched(k->blas, op_b, op_a, (int)x->n, (int)x->m,
                                                   (int)x->k, &x->alpha, b, (int)x->ldb, stride[1],
                                                   a, (int)x->lda, stride[0], &x->beta, c,
                                                   (int)x->ldc, stride[2], (int)run),
                         "cublasSgemmStridedBatched", err));
    else
      HAP_TRY(
          blas_check(cublasSgemm(k->blas, op_b, op_a, (int)x->n, (int)x->m, (int)x->k, &x->alpha, b,
                                 (int)x->ldb, a, (int)x->lda, &x->beta, c, (int)x->ldc),
                     "cublasSgemm", err));
  }
  return HAP_OK;
}

/* Run a program on device slots; *kernel_s gets its device time. */
static hap_status run_prog(hap_cuda_kernels *k, const hap_kx_prog *p, void **slots,
                           double *kernel_s, hap_err *err) {
  *kernel_s = 0;
  if (p->scratch > k->scratch_n) {
    if (k->scratch != NULL)
      (void)cudaFree(k->scratch);
    k->scratch = NULL;
    k->scratch_n = 0;
    HAP_TRY(cuda_check(cudaMalloc((void **)&k->scratch, (size_t)p->scratch * sizeof(double)),
                       "cudaMalloc", err));
    k->scratch_n = p->scratch;
  }
  slots[HAP_KX_SCRATCH] = k->scratch;
  slots[HAP_KX_FLAG] = k->flag;
  hap_kx_ptrs ptrs;
  memcpy(ptrs.p, slots, sizeof ptrs.p);
  HAP_TRY(cuda_check(cudaEventRecord(k->ev0, k->stream), "cudaEventRecord", err));
  for (int32_t i = 0; i < p->n; i++) {
    const hap_kx_pass *x = &p->pass[i];
    if (x->kind == HAP_KX_GEMM)
      HAP_TRY(run_gemm(k, x, slots, err));
    else
      HAP_TRY(cuda_check(hap_kx_cuda_launch(k->stream, x, &ptrs), "kernel launch", err));
  }
  HAP_TRY(cuda_check(cudaEventRecord(k->ev1, k->stream), "cudaEventRecord", err));
  HAP_TRY(cuda_check(cudaEventSynchronize(k->ev1), "cudaEventSynchronize", err));
  float ms = 0;
  HAP_TRY(cuda_check(cudaEventElapsedTime(&ms, k->ev0, k->ev1), "cudaEventElapsedTime", err));
  *kernel_s = (double)ms * 1e-3;
  if (!p->uses_flag)
    return HAP_OK;
  int64_t flag = INT64_MAX, value = 0;
  HAP_TRY(download(k, &flag, k->flag, sizeof flag, err));
  if (flag == INT64_MAX)
    return HAP_OK;
  const char *at = (const char *)slots[p->index_slot] + flag * p->index_bytes;
  if (p->index_bytes == 4) {
    int32_t v = 0;
    HAP_TRY(download(k, &v, at, sizeof v, err));
    value = v;
  } else {
    HAP_TRY(download(k, &value, at, sizeof value, err));
  }
  return hap_kx_index_error(p, flag, value, err);
}

hap_status hap_cuda_kernel_forward(hap_cuda_kernels *k, const hap_kernel_call *c, void *const *out,
                                   double *kernel_s, hap_err *err) {
  *kernel_s = 0;
  hap_kx_prog p;
  HAP_TRY(hap_kx_build_forward(c, out, &p, err));
  void *slots[HAP_KX_SLOTS];
  hap_kx_slots(c, out, NULL, NULL, slots);
  return run_prog(k, &p, slots, kernel_s, err);
}

hap_status hap_cuda_kernel_backward(hap_cuda_kernels *k, const hap_kernel_call *c,
                                    const float *const *dout, float *const *din, double *kernel_s,
                                    hap_err *err) {
  *kernel_s = 0;
  hap_kx_prog p;
  bool needed = false;
  HAP_TRY(hap_kx_build_backward(c, dout, din, &p, &needed, err));
  if (!needed)
    return HAP_OK;
  void *slots[HAP_KX_SLOTS];
  hap_kx_slots(c, NULL, dout, din, slots);
  return run_prog(k, &p, slots, kernel_s, err);
}

/* ---- staged: host buffers ------------------------------------------------------------------ */

static size_t bytes_of(const hap_shape *s, hap_dtype dt) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++)
    n *= s->dims[d];
  return (size_t)n * (size_t)hap_dtype_size(dt);
}

/* Device copy of host buffer `host` (bytes) in staging slot `slot`; upload when `up`. */
static hap_status stage(hap_cuda_kernels *k, int slot, const void *host, size_t bytes, bool up,
                        void **dev, hap_err *err) {
  *dev = NULL;
  if (host == NULL)
    return HAP_OK;
  HAP_TRY(ensure(k, slot, bytes, dev, err));
  /* On the kernels' stream: it is non-blocking, so a plain cudaMemcpy (legacy stream) would not
   * order the copy before the kernels, and from pageable memory it can return before its DMA ends.
   */
  if (up && bytes > 0)
    HAP_TRY(cuda_check(cudaMemcpyAsync(*dev, host, bytes, cudaMemcpyHostToDevice, k->stream),
                       "cudaMemcpyAsync", err));
  return HAP_OK;
}

hap_status hap_cuda_staged_forward(void *ctx, const hap_kernel_call *c, void *const *out,
                                   hap_kernel_state *st, double *kernel_s, double *staging_s,
                                   hap_err *err) {
  hap_cuda_kernels *k = ctx;
  *kernel_s = 0;
  *staging_s = 0;
  hap_kernel_state_free(st); /* nothing is kept: backward recomputes */
  hap_kx_prog p;
  HAP_TRY(hap_kx_build_forward(c, out, &p, err));
  const hap_op_io *io = c->io;
  void *dev_in[HAP_MAX_OP_INPUTS] = {NULL}, *dev_out[HAP_MAX_OP_OUTPUTS] = {NULL};
  double t0 = hap_clock_s();
  for (int i = 0; i < io->n_in; i++)
    HAP_TRY(stage(k, HAP_KX_IN + i, c->in[i], bytes_of(&io->in[i], io->in_dtype[i]), true,
                  &dev_in[i], err));
  for (int o = 0; o < io->n_out; o++)
    HAP_TRY(stage(k, HAP_KX_OUT + o, out[o], bytes_of(&io->out[o], io->out_dtype[o]), false,
                  &dev_out[o], err));
  *staging_s += hap_clock_s() - t0;
  hap_kernel_call dc = *c;
  dc.in = (const void *const *)dev_in;
  dc.out = NULL;
  void *slots[HAP_KX_SLOTS];
  hap_kx_slots(&dc, dev_out, NULL, NULL, slots);
  HAP_TRY(run_prog(k, &p, slots, kernel_s, err));
  t0 = hap_clock_s();
  for (int o = 0; o < io->n_out; o++)
    HAP_TRY(download(k, out[o], dev_out[o], bytes_of(&io->out[o], io->out_dtype[o]), err));
  *staging_s += hap_clock_s() - t0;
  return HAP_OK;
}

hap_status hap_cuda_staged_backward(void *ctx, const hap_kernel_call *c, const float *const *dout,
                                    float *const *din, const hap_kernel_state *st, double *kernel_s,
                                    double *staging_s, hap_err *err) {
  (void)st;
  hap_cuda_kernels *k = ctx;
  *kernel_s = 0;
  *staging_s = 0;
  hap_kx_prog p;
  bool needed = false;
  HAP_TRY(hap_kx_build_backward(c, dout, din, &p, &needed, err));
  if (!needed)
    return HAP_OK;
  const hap_op_io *io = c->io;
  void *dev_in[HAP_MAX_OP_INPUTS] = {NULL}, *dev_out[HAP_MAX_OP_OUTPUTS] = {NULL};
  void *dev_dout[HAP_MAX_OP_OUTPUTS] = {NULL}, *dev_din[HAP_MAX_OP_INPUTS] = {NULL};
  bool own[HAP_MAX_OP_INPUTS] = {false}; /* din[i] is not an alias of an earlier din[j] */
  double t0 = hap_clock_s();
  for (int i = 0; i < io->n_in; i++)
    HAP_TRY(stage(k, HAP_KX_IN + i, c->in[i], bytes_of(&io->in[i], io->in_dtype[i]), true,
                  &dev_in[i], err));
  for (int o = 0; o < io->n_out; o++) {
    size_t b = bytes_of(&io->out[o], io->out_dtype[o]);
    HAP_TRY(stage(k, HAP_KX_OUT + o, c->out[o], b, true, &dev_out[o], err));
    HAP_TRY(stage(k, HAP_KX_DOUT + o, dout[o], b, true, &dev_dout[o], err));
  }
  for (int i = 0; i < io->n_in; i++) {
    if (!io->in_grad[i] || io->in_dtype[i] != HAP_F32 || din == NULL || din[i] == NULL)
      continue;
    for (int j = 0; j < i && dev_din[i] == NULL; j++) /* x + x: one buffer, one upload */
      if (din[j] == din[i] && dev_din[j] != NULL)
        dev_din[i] = dev_din[j];
    if (dev_din[i] == NULL) {
      own[i] = true;
      HAP_TRY(
          stage(k, HAP_KX_DIN + i, din[i], bytes_of(&io->in[i], HAP_F32), true, &dev_din[i], err));
    }
  }
  *staging_s += hap_clock_s() - t0;
  hap_kernel_call dc = *c;
  dc.in = (const void *const *)dev_in;
  dc.out = (const void *const *)dev_out;
  void *slots[HAP_KX_SLOTS];
  hap_kx_slots(&dc, NULL, (const float *const *)dev_dout, (float *const *)dev_din, slots);
  HAP_TRY(run_prog(k, &p, slots, kernel_s, err));
  t0 = hap_clock_s();
  for (int i = 0; i < io->n_in; i++)
    if (own[i])
      HAP_TRY(download(k, din[i], dev_din[i], bytes_of(&io->in[i], HAP_F32), err));
  *staging_s += hap_clock_s() - t0;
  return HAP_OK;
}
