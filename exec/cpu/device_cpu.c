/* device_cpu.c — the `cpu` device backend (device_cpu.h). Every kernel and copy is timed on
 * CLOCK_MONOTONIC and, at an emulated speed s < 1, followed by a wait of t * (1/s - 1). */
#include "exec/device_cpu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/clock.h"
#include "exec/emulate.h"

typedef struct cpu_impl {
  int32_t threads;
  double speed;
  volatile int64_t empty_count; /* what the empty kernel touches, so it is not optimised away */
} cpu_impl;

static cpu_impl *impl_of(hap_dev *d) { return (cpu_impl *)d->impl; }

/* Pad the work that started at t0_s to 1/speed of its measured time. */
static void emulate_end(hap_dev *d, double t0_s) {
  double speed = impl_of(d)->speed;
  if (speed >= 1.0)
    return;
  double t1 = hap_clock_s();
  hap_clock_wait_until(t1 + hap_emulate_pad_s(t1 - t0_s, speed));
}

/* The "model name" line of /proc/cpuinfo, else "cpu". */
static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL)
    return;
  char line[512];
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "model name", 10) != 0)
      continue;
    const char *v = strchr(line, ':');
    if (v == NULL)
      break;
    v++;
    while (*v == ' ' || *v == '\t')
      v++;
    size_t n = strcspn(v, "\n");
    while (n > 0 && v[n - 1] == ' ')
      n--;
    if (n > 0)
      snprintf(buf, len, "%.*s", (int)n, v);
    break;
  }
  fclose(f);
}

static hap_status cpu_info(hap_dev *d, hap_dev_info *out, hap_err *err) {
  (void)err;
  memset(out, 0, sizeof *out);
  cpu_model(out->model, sizeof out->model);
  out->kind = HAP_DEVICE_CPU;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  out->memory_bytes = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
  out->threads = impl_of(d)->threads;
  out->speed = impl_of(d)->speed;
  const char *config = openblas_get_config();
  snprintf(out->library, sizeof out->library, "%s", config ? config : "OpenBLAS");
  return HAP_OK;
}

static hap_status cpu_alloc(hap_dev *d, size_t bytes, void **out, hap_err *err) {
  (void)d;
  /* 64-byte alignment for vector loads; aligned_alloc needs a multiple of the alignment. */
  size_t n = (bytes + 63) / 64 * 64;
  *out = aligned_alloc(64, n > 0 ? n : 64);
  if (*out == NULL)
    return hap_err_set(err, HAP_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
  return HAP_OK;
}

static void cpu_release(hap_dev *d, void *ptr) {
  (void)d;
  free(ptr);
}

static hap_status cpu_copy(hap_dev *d, void *dst, const void *src, size_t bytes, hap_err *err) {
  (void)err;
  double t0 = hap_clock_s();
  memcpy(dst, src, bytes);
  emulate_end(d, t0);
  return HAP_OK;
}

static hap_status cpu_fill(hap_dev *d, hap_dtype dtype, void *x, int64_t count, double value,
                           hap_err *err) {
  double t0 = hap_clock_s();
  if (dtype == HAP_F32) {
    float *f = x;
    for (int64_t i = 0; i < count; i++)
      f[i] = (float)value;
  } else if (dtype == HAP_F64) {
    double *f = x;
    for (int64_t i = 0; i < count; i++)
      f[i] = value;
  } else {
    return hap_err_set(err, HAP_EUNSUPPORTED, "cpu: fill in %s, expected float32 or float64",
                       hap_dtype_name(dtype));
  }
  emulate_end(d, t0);
  return HAP_OK;
}

static hap_status cpu_gemm(hap_dev *d, hap_dtype dtype, int64_t m, int64_t n, int64_t k,
                           const void *a, const void *b, void *c, hap_err *err) {
  if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return hap_err_set(err, HAP_EINVAL, "cpu: gemm %lld x %lld x %lld, expected sizes in 1..%d",
                       (long long)m, (long long)n, (long long)k, INT32_MAX);
  double t0 = hap_clock_s();
  if (dtype == HAP_F32)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k,
                b, (int)n, 0.0f, c, (int)n);
  else if (dtype == HAP_F64)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0, a, (int)k,
                b, (int)n, 0.0, c, (int)n);
  else
    return hap_err_set(err, HAP_EUNSUPPORTED, "cpu: gemm in %s, expected float32 or float64",
                       hap_dtype_name(dtype));
  emulate_end(d, t0);
  return HAP_OK;
}

static hap_status cpu_empty_kernel(hap_dev *d, hap_err *err) {
  (void)err;
  double t0 = hap_clock_s();
  impl_of(d)->empty_count++;
  emulate_end(d, t0);
  return HAP_OK;
}

static hap_status cpu_synchronize(hap_dev *d, hap_err *err) {
  (void)d;
  (void)err;
  return HAP_OK;
}

static double cpu_now_s(hap_dev *d) {
  (void)d;
  return hap_clock_s();
}

static void cpu_close(hap_dev *d) {
  free(d->impl);
  free(d);
}

static const hap_dev_ops cpu_ops = {
    .name = "cpu",
    .info = cpu_info,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .gemm = cpu_gemm,
    .empty_kernel = cpu_empty_kernel,
    .synchronize = cpu_synchronize,
    .now_s = cpu_now_s,
    .close = cpu_close,
};

hap_status hap_dev_cpu_open(int32_t threads, double speed, hap_dev **out, hap_err *err) {
  *out = NULL;
  if (threads < 1)
    return hap_err_set(err, HAP_EINVAL, "cpu: %d threads, expected >= 1", threads);
  if (!(speed > 0.0 && speed <= 1.0))
    return hap_err_set(err, HAP_EINVAL, "cpu: speed %g, expected a number in (0, 1]", speed);
  hap_dev *d = calloc(1, sizeof *d);
  cpu_impl *c = calloc(1, sizeof *c);
  if (d == NULL || c == NULL) {
    free(d);
    free(c);
    return hap_err_set(err, HAP_ENOMEM, "cpu: out of memory opening the device");
  }
  c->threads = threads;
  c->speed = speed;
  d->ops = &cpu_ops;
  d->impl = c;
  openblas_set_num_threads(threads);
  *out = d;
  return HAP_OK;
}
