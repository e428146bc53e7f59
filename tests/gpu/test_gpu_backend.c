/* test_gpu_backend.c — the `cuda` device and `nccl` comm backends on real GPUs (plain C, not
 * Criterion; run directly for one rank or under mpirun for several, one GPU per rank):
 *   device: info, alloc, host <-> device copies, fill, row-major GEMM (float32, float64, and
 *           float16 / bfloat16 with float32 accumulation) against a CPU reference, empty kernel,
 *           the event timer;
 *   nccl:   all_reduce, all_gather(v), reduce_scatter(v), all_to_all, broadcast, barrier, split.
 * Exits 77 (ctest: Skipped) only when the device query says there is no GPU (HAP_ENOGPU) or there
 * are fewer GPUs than ranks, after printing why; 1 on any other query error (a CUDA failure is not
 * a skip) and on any failed check. Usage: test_gpu_backend [--need N] (skip unless N ranks run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/comm_mpi.h"
#include "exec/comm_nccl.h"
#include "exec/device_cuda.h"
#include "exec/devices.h"
#include "kernels/half.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                       \
      printf(__VA_ARGS__);                                                                         \
      putchar('\n');                                                                               \
    }                                                                                              \
  } while (0)

/* Host element i of a buffer of dtype dt (float32, float64, float16 or bfloat16). */
static void store(hap_dtype dt, void *buf, int64_t i, double v) {
  switch (dt) {
  case HAP_F64: ((double *)buf)[i] = v; break;
  case HAP_F16: ((uint16_t *)buf)[i] = hap_fp16_from_float((float)v); break;
  case HAP_BF16: ((uint16_t *)buf)[i] = hap_bf16_from_float((float)v); break;
  default: ((float *)buf)[i] = (float)v; break;
  }
}

static double load(hap_dtype dt, const void *buf, int64_t i) {
  switch (dt) {
  case HAP_F64: return ((const double *)buf)[i];
  case HAP_F16: return hap_fp16_to_float(((const uint16_t *)buf)[i]);
  case HAP_BF16: return hap_bf16_to_float(((const uint16_t *)buf)[i]);
  default: return ((const float *)buf)[i];
  }
}

/* Worst |got - ref| / (1 + |ref|) a GEMM in dt may show. The inputs (multiples of 1/8 and 1/4
 * below 1.5) and every partial sum are exact in float32, so a half GEMM's only error is the
 * rounding of C to its format: half an ulp, 2^-11 (float16) or 2^-8 (bfloat16) relative. */
static double gemm_tolerance(hap_dtype dt) {
  switch (dt) {
  case HAP_F64: return 1e-12;
  case HAP_F16: return 0x1p-11;
  case HAP_BF16: return 0x1p-8;
  default: return 1e-5;
  }
}

/* Row-major C = A B on the GPU vs a CPU reference in double. */
static void check_gemm(hap_dev *d, hap_dtype dt, int64_t m, int64_t n, int64_t k) {
  hap_err err = {0};
  size_t es = (size_t)hap_dtype_size(dt), mk = (size_t)(m * k), kn = (size_t)(k * n),
         mn = (size_t)(m * n);
  double *a = calloc(mk, sizeof *a), *b = calloc(kn, sizeof *b), *ref = calloc(mn, sizeof *ref);
  unsigned char *ha = calloc(mk, es), *hb = calloc(kn, es), *hc = calloc(mn, es);
  void *da = NULL, *db = NULL, *dc = NULL;
  if (!a || !b || !ref || !ha || !hb || !hc) {
    CHECK(0, "out of memory");
    goto out;
  }
  for (int64_t i = 0; i < m * k; i++)
    a[i] = (double)((i * 37) % 17 - 8) / 8.0;
  for (int64_t i = 0; i < k * n; i++)
    b[i] = (double)((i * 11) % 13 - 6) / 4.0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t l = 0; l < k; l++)
        ref[i * n + j] += a[i * k + l] * b[l * n + j];
  for (int64_t i = 0; i < m * k; i++)
    store(dt, ha, i, a[i]);
  for (int64_t i = 0; i < k * n; i++)
    store(dt, hb, i, b[i]);
  hap_status st = d->ops->alloc(d, (size_t)(m * k) * es, &da, &err);
  if (st == HAP_OK)
    st = d->ops->alloc(d, (size_t)(k * n) * es, &db, &err);
  if (st == HAP_OK)
    st = d->ops->alloc(d, (size_t)(m * n) * es, &dc, &err);
  if (st == HAP_OK)
    st = d->ops->copy(d, da, ha, (size_t)(m * k) * es, &err);
  if (st == HAP_OK)
    st = d->ops->copy(d, db, hb, (size_t)(k * n) * es, &err);
  if (st == HAP_OK)
    st = d->ops->gemm(d, dt, m, n, k, da, db, dc, &err);
  double gemm_s = st == HAP_OK ? d->ops->last_s(d) : 0;
  if (st == HAP_OK)
    st = d->ops->copy(d, hc, dc, (size_t)(m * n) * es, &err);
  CHECK(st == HAP_OK, "gemm %s: %s", hap_dtype_name(dt), err.msg);
  CHECK(gemm_s > 0 && gemm_s < 1, "gemm device time %g s", gemm_s);
  double worst = 0;
  for (int64_t i = 0; i < m * n && st == HAP_OK; i++) {
    double got = load(dt, hc, i);
    double e = fabs(got - ref[i]) / (1.0 + fabs(ref[i]));
    worst = e > worst ? e : worst;
  }
  CHECK(worst <= gemm_tolerance(dt), "gemm %s %lldx%lldx%lld: worst error %g", hap_dtype_name(dt),
        (long long)m, (long long)n, (long long)k, worst);
  printf("gemm %s %lldx%lldx%lld: worst relative error %.3g, %.1f us on the device\n",
         hap_dtype_name(dt), (long long)m, (long long)n, (long long)k, worst, gemm_s * 1e6);
out:
  d->ops->release(d, da);
  d->ops->release(d, db);
  d->ops->release(d, dc);
  free(a);
  free(b);
  free(ref);
  free(ha);
  free(hb);
  free(hc);
}

static void check_device(hap_dev *d) {
  hap_err err = {0};
  hap_dev_info info;
  CHECK(d->ops->info(d, &info, &err) == HAP_OK, "info: %s", err.msg);
  CHECK(info.kind == HAP_DEVICE_GPU && info.memory_bytes > 0 && info.model[0] != '\0',
        "info: kind %d, %lld bytes, model '%s'", (int)info.kind, (long long)info.memory_bytes,
        info.model);
  printf("device: %s, %.1f GiB, %s\n", info.model, (double)info.memory_bytes / (1 << 30),
         info.library);
  /* fill, then copy back */
  enum { N = 1000 };
  float h[N];
  void *x = NULL;
  CHECK(d->ops->alloc(d, sizeof h, &x, &err) == HAP_OK, "alloc: %s", err.msg);
  if (x != NULL) {
    CHECK(d->ops->fill(d, HAP_F32, x, N, 2.5, &err) == HAP_OK, "fill: %s", err.msg);
    CHECK(d->ops->copy(d, h, x, sizeof h, &err) == HAP_OK, "copy: %s", err.msg);
    CHECK(h[0] == 2.5f && h[N - 1] == 2.5f, "fill gave %g .. %g", h[0], h[N - 1]);
    CHECK(d->ops->fill(d, HAP_BF16, x, N, 1.00390625, &err) == HAP_OK, "fill: %s", err.msg);
    CHECK(d->ops->copy(d, h, x, sizeof h, &err) == HAP_OK, "copy: %s", err.msg);
    uint16_t b0 = 0, b1 = 0; /* 1 + 2^-8 is a tie in bfloat16: to even, 1.0 */
    memcpy(&b0, (const char *)h, 2);
    memcpy(&b1, (const char *)h + (size_t)2 * (N - 1), 2);
    CHECK(hap_bf16_to_float(b0) == 1.0f && hap_bf16_to_float(b1) == 1.0f, "bf16 fill gave %g, %g",
          (double)hap_bf16_to_float(b0), (double)hap_bf16_to_float(b1));
    CHECK(d->ops->fill(d, HAP_I32, x, N, 1, &err) == HAP_EUNSUPPORTED, "fill int32");
    hap_err_clear(&err);
  }
  d->ops->release(d, x);
  for (int i = 0; i < 100; i++)
    CHECK(d->ops->empty_kernel(d, &err) == HAP_OK, "empty kernel: %s", err.msg);
  CHECK(d->ops->synchronize(d, &err) == HAP_OK, "synchronize: %s", err.msg);
  CHECK(d->ops->gemm(d, HAP_F32, 0, 1, 1, NULL, NULL, NULL, &err) == HAP_EINVAL, "gemm m = 0");
  hap_err_clear(&err);
  check_gemm(d, HAP_F32, 67, 45, 33);
  check_gemm(d, HAP_F64, 67, 45, 33);
  check_gemm(d, HAP_F32, 512, 256, 384);
  check_gemm(d, HAP_F16, 67, 45, 33);
  check_gemm(d, HAP_BF16, 67, 45, 33);
  check_gemm(d, HAP_F16, 512, 256, 384);
  check_gemm(d, HAP_BF16, 512, 256, 384);
}

/* Collectives over NCCL on float32 device buffers, checked on the host. */
static void check_nccl(hap_comm *world, hap_dev *d) {
  hap_err err = {0};
  hap_comm *c = NULL;
  hap_status st = hap_comm_nccl_init(world, hap_dev_cuda_index(d), &c, &err);
  CHECK(st == HAP_OK, "nccl init: %s", err.msg);
  if (st != HAP_OK)
    return;
  int32_t r = c->rank, n = c->size;
  CHECK(r == world->rank && n == world->size, "nccl rank %d of %d", r, n);
  enum { E = 256 };
  size_t bytes = (size_t)E * (size_t)n * sizeof(float);
  float *h = malloc(bytes), *g = malloc(bytes);
  void *s = NULL, *v = NULL;
  if (h == NULL || g == NULL || d->ops->alloc(d, bytes, &s, &err) != HAP_OK ||
      d->ops->alloc(d, bytes, &v, &err) != HAP_OK) {
    CHECK(0, "buffers: %s", err.msg);
    goto out;
  }
  /* all_reduce: element i of rank q is q + i; the sum is n i + n (n - 1) / 2 */
  for (int i = 0; i < E; i++)
    h[i] = (float)(r + i);
  CHECK(d->ops->copy(d, s, h, E * sizeof(float), &err) == HAP_OK, "%s", err.msg);
  CHECK(c->ops->all_reduce(c, s, v, E, HAP_F32, HAP_REDUCE_SUM, &err) == HAP_OK, "all_reduce: %s",
        err.msg);
  CHECK(d->ops->copy(d, g, v, E * sizeof(float), &err) == HAP_OK, "%s", err.msg);
  for (int i = 0; i < E; i++)
    CHECK(g[i] == (float)(n * i) + 0.5f * (float)(n * (n - 1)), "all_reduce[%d] = %g", i, g[i]);
  /* all_gather: rank q's block is q + i */
  CHECK(c->ops->all_gather(c, s, v, E * (int64_t)sizeof(float), &err) == HAP_OK, "all_gather: %s",
        err.msg);
  CHECK(d->ops->copy(d, g, v, bytes, &err) == HAP_OK, "%s", err.msg);
  for (int q = 0; q < n; q++)
    CHECK(g[q * E + 1] == (float)(q + 1), "all_gather block %d: %g", q, g[q * E + 1]);
  /* all_gatherv: rank q sends q + 1 floats */
  int64_t *cnt = calloc((size_t)n, sizeof *cnt), *off = calloc((size_t)n, sizeof *off);
  for (int q = 0; q < n && cnt && off; q++) {
    cnt[q] = (q + 1) * (int64_t)sizeof(float);
    off[q] = q > 0 ? off[q - 1] + cnt[q - 1] : 0;
  }
  if (cnt && off) {
    CHECK(c->ops->all_gatherv(c, s, cnt[r], v, cnt, off, &err) == HAP_OK, "all_gatherv: %s",
          err.msg);
    CHECK(d->ops->copy(d, g, v, (size_t)(off[n - 1] + cnt[n - 1]), &err) == HAP_OK, "%s", err.msg);
    for (int q = 0; q < n; q++)
      CHECK(g[off[q] / (int64_t)sizeof(float) + q] == (float)(2 * q), "all_gatherv block %d", q);
  }
  /* reduce_scatter: block q (E floats) of every rank q' holds q + q' */
  for (int q = 0; q < n; q++)
    for (int i = 0; i < E; i++)
      h[(size_t)q * E + (size_t)i] = (float)(q + r);
  CHECK(d->ops->copy(d, s, h, bytes, &err) == HAP_OK, "%s", err.msg);
  CHECK(c->ops->reduce_scatter(c, s, v, E, HAP_F32, HAP_REDUCE_SUM, &err) == HAP_OK,
        "reduce_scatter: %s", err.msg);
  CHECK(d->ops->copy(d, g, v, E * sizeof(float), &err) == HAP_OK, "%s", err.msg);
  CHECK(g[0] == (float)(n * r) + 0.5f * (float)(n * (n - 1)), "reduce_scatter: %g", g[0]);
  /* reduce_scatterv with counts q + 1 */
  if (cnt) {
    for (int q = 0; q < n; q++)
      cnt[q] = q + 1;
    CHECK(c->ops->reduce_scatterv(c, s, v, cnt, HAP_F32, HAP_REDUCE_MAX, &err) == HAP_OK,
          "reduce_scatterv: %s", err.msg);
  }
  /* all_to_all: block q of rank r holds r; afterwards block q holds q */
  for (int q = 0; q < n; q++)
    for (int i = 0; i < E; i++)
      h[q * E + i] = (float)r;
  CHECK(d->ops->copy(d, s, h, bytes, &err) == HAP_OK, "%s", err.msg);
  CHECK(c->ops->all_to_all(c, s, v, E * (int64_t)sizeof(float), &err) == HAP_OK, "all_to_all: %s",
        err.msg);
  CHECK(d->ops->copy(d, g, v, bytes, &err) == HAP_OK, "%s", err.msg);
  for (int q = 0; q < n; q++)
    CHECK(g[(size_t)q * E] == (float)q, "all_to_all block %d: %g", q, g[(size_t)q * E]);
  /* broadcast from the last rank */
  CHECK(c->ops->broadcast(c, s, E * (int64_t)sizeof(float), n - 1, &err) == HAP_OK, "broadcast: %s",
        err.msg);
  CHECK(d->ops->copy(d, g, s, E * sizeof(float), &err) == HAP_OK, "%s", err.msg);
  CHECK(g[0] == (float)(n - 1), "broadcast: %g", g[0]);
  CHECK(c->ops->barrier(c, &err) == HAP_OK, "barrier: %s", err.msg);
  hap_comm *half = NULL;
  st = c->ops->split(c, r % 2, r, &half, &err);
  CHECK(st == HAP_OK || st == HAP_EUNSUPPORTED, "split: %s", err.msg);
  if (st == HAP_OK)
    CHECK(half != NULL && half->size == (n - r % 2 + 1) / 2, "split size");
  hap_comm_destroy(half);
  free(cnt);
  free(off);
  printf("nccl %d: collectives over %d rank(s) checked\n", hap_comm_nccl_version(), n);
out:
  d->ops->release(d, s);
  d->ops->release(d, v);
  free(h);
  free(g);
  hap_comm_destroy(c);
}

int main(int argc, char **argv) {
  int need = 1;
  if (argc == 3 && strcmp(argv[1], "--need") == 0)
    need = (int)strtol(argv[2], NULL, 10);
  hap_err err = {0};
  hap_comm *world = NULL;
  if (hap_comm_mpi_init(&argc, &argv, &world, &err) != HAP_OK) {
    printf("FAIL: %s\n", err.msg);
    return 1;
  }
  int count = 0, rc = 0;
  hap_status st = hap_gpu_query(NULL, 0, &count, &err);
  hap_dev *d = NULL;
  if (st == HAP_ENOGPU) {
    /* without a GPU the backend still answers cleanly */
    hap_err e2 = {0};
    CHECK(hap_dev_cuda_open(0, &d, &e2) == HAP_ENOGPU && d == NULL, "open without a GPU");
    printf("SKIP: no GPU: %s\n", err.msg);
    rc = failures ? 1 : 77;
    goto out;
  }
  if (st != HAP_OK) { /* a CUDA error, not a missing GPU: fail */
    printf("FAIL: hap_gpu_query: %s: %s\n", hap_status_str(st), err.msg);
    rc = 1;
    goto out;
  }
  if (count < world->size || world->size < need) {
    printf("SKIP: %d GPU(s) for %d rank(s), this test wants %d\n", count, world->size, need);
    rc = 77;
    goto out;
  }
  st = hap_dev_cuda_open(world->rank, &d, &err);
  CHECK(st == HAP_OK, "open GPU %d: %s", world->rank, err.msg);
  if (st == HAP_OK) {
    check_device(d);
    check_nccl(world, d);
  }
  printf("rank %d: %d check(s) failed\n", world->rank, failures);
  rc = failures ? 1 : 0;
out:
  hap_dev_close(d);
  hap_comm_mpi_finalize(world);
  return rc;
}
