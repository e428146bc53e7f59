/* measure.c — the measurement drivers of hap-profile (measure.h). Every time comes from the
 * device's clock (dev->ops->now_s) around synchronous calls. Errors return at once: a caller that
 * gets one on any rank stops the job (hap_comm abort), so no rank waits on a partner that left. */
#include "profile/measure.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/blas_core.h"
#include "kernels/kernels.h"
#include "profile/fit_rel.h"

#define HOST_MAX    256
#define TAG_PING    1
#define TAG_PONG    2
#define TAG_SAMPLES 7
#define TAG_KERNELS 8
#define TAG_REDO    9

/* Point-to-point: untimed round trips of the first size before a pair's sweep, and how many
 * times its outlier sizes are measured again (hap_p2p_outliers). */
#define P2P_PAIR_WARMUP      32
#define P2P_REMEASURE_PASSES 2

/* ---- built-in plans -------------------------------------------------------------------------- */

#define SHAPES3(t, a, b, c)                                                                        \
  {a, a, a, t}, {a, a, b, t}, {a, a, c, t}, {a, b, a, t}, {a, b, b, t}, {a, b, c, t},              \
      {a, c, a, t}, {a, c, b, t}, {a, c, c, t}, {b, a, a, t}, {b, a, b, t}, {b, a, c, t},          \
      {b, b, a, t}, {b, b, b, t}, {b, b, c, t}, {b, c, a, t}, {b, c, b, t}, {b, c, c, t},          \
      {c, a, a, t}, {c, a, b, t}, {c, a, c, t}, {c, b, a, t}, {c, b, b, t}, {c, b, c, t},          \
      {c, c, a, t}, {c, c, b, t}, {                                                                \
    c, c, c, t                                                                                     \
  }

static const hap_gemm_shape quick_gemm[] = {SHAPES3(HAP_F32, 64, 256, 1024)};
static const hap_gemm_shape default_gemm[] = {SHAPES3(HAP_F32, 128, 512, 2048),
                                              SHAPES3(HAP_F64, 128, 512, 2048)};
/* A GPU: larger shapes (a 1024^3 GEMM is a few microseconds there), and mixed precision's float16
 * and bfloat16 GEMMs, whose tensor-core rates the planner prices half-precision compute with. */
static const hap_gemm_shape gpu_quick_gemm[] = {SHAPES3(HAP_F32, 256, 1024, 4096),
                                                SHAPES3(HAP_F16, 256, 1024, 4096),
                                                SHAPES3(HAP_BF16, 256, 1024, 4096)};
static const hap_gemm_shape gpu_default_gemm[] = {
    SHAPES3(HAP_F32, 256, 1024, 8192), SHAPES3(HAP_F64, 256, 1024, 4096),
    SHAPES3(HAP_F16, 256, 1024, 8192), SHAPES3(HAP_BF16, 256, 1024, 8192)};

/* 8 B x 4^i up to 8 MiB (quick); 8 B x 2^i up to 256 MiB (default). */
static int64_t quick_sizes[11];
static int64_t default_sizes[26];

static void geometric(int64_t *out, int32_t n, int64_t first, int64_t factor) {
  for (int32_t i = 0; i < n; i++)
    out[i] = i == 0 ? first : out[i - 1] * factor;
}

void hap_measure_defaults(hap_measure_config *cfg, bool quick) {
  memset(cfg, 0, sizeof *cfg);
  geometric(quick_sizes, 11, 8, 4);
  geometric(default_sizes, 26, 8, 2);
  cfg->gemm = true;
  cfg->comm = true;
  cfg->coll_kinds = (1u << HAP_COLL_KIND_COUNT) - 1;
  if (quick) {
    cfg->gemm_shapes = quick_gemm;
    cfg->n_gemm_shapes = (int32_t)(sizeof quick_gemm / sizeof quick_gemm[0]);
    cfg->gemm_reps = 3;
    cfg->gemm_warmup = 1;
    cfg->membw_bytes = 32 << 20;
    cfg->membw_reps = 5;
    cfg->launch_reps = 10;
    cfg->launch_iters = 1000;
    cfg->p2p_sizes = cfg->coll_sizes = quick_sizes;
    cfg->n_p2p_sizes = cfg->n_coll_sizes = 11;
    cfg->p2p_reps = cfg->coll_reps = 10;
    cfg->p2p_warmup = cfg->coll_warmup = 2;
    cfg->p2p_iters = cfg->coll_iters = 5;
    cfg->kernel_reps = 5;
    cfg->kernel_warmup = 1;
  } else {
    cfg->gemm_shapes = default_gemm;
    cfg->n_gemm_shapes = (int32_t)(sizeof default_gemm / sizeof default_gemm[0]);
    cfg->gemm_reps = 5;
    cfg->gemm_warmup = 1;
    cfg->membw_bytes = 128 << 20;
    cfg->membw_reps = 10;
    cfg->launch_reps = 20;
    cfg->launch_iters = 1000;
    cfg->p2p_sizes = cfg->coll_sizes = default_sizes;
    cfg->n_p2p_sizes = cfg->n_coll_sizes = 26;
    cfg->p2p_reps = 20;
    cfg->coll_reps = 10;
    cfg->p2p_warmup = cfg->coll_warmup = 3;
    cfg->p2p_iters = cfg->coll_iters = 4;
    cfg->kernel_reps = 10;
    cfg->kernel_warmup = 2;
  }
}

static hap_status check_sizes(const char *what, const int64_t *s, int32_t n, hap_err *err) {
  if (n < 1 || s == NULL)
    return hap_err_set(err, HAP_EINVAL, "measure: %s: no sizes, expected at least one", what);
  for (int32_t i = 0; i < n; i++)
    if (s[i] <= 0 || s[i] > INT32_MAX || (i > 0 && s[i] <= s[i - 1]))
      return hap_err_set(err, HAP_EINVAL,
                         "measure: %s[%d] is %lld, expected strictly increasing sizes in 1..%d",
                         what, i, (long long)s[i], INT32_MAX);
  return HAP_OK;
}

void hap_measure_gpu_gemm(hap_measure_config *cfg, bool quick) {
  cfg->gemm_shapes = quick ? gpu_quick_gemm : gpu_default_gemm;
  cfg->n_gemm_shapes = quick ? (int32_t)(sizeof gpu_quick_gemm / sizeof gpu_quick_gemm[0])
                             : (int32_t)(sizeof gpu_default_gemm / sizeof gpu_default_gemm[0]);
}

hap_status hap_measure_check(const hap_measure_config *cfg, hap_err *err) {
  if (cfg->membw_bytes <= 0 || cfg->membw_reps < 1 || cfg->launch_reps < 1 || cfg->launch_iters < 1)
    return hap_err_set(err, HAP_EINVAL,
                       "measure: membw_bytes %lld, membw_reps %d, launch_reps %d, launch_iters %d: "
                       "expected all >= 1",
                       (long long)cfg->membw_bytes, cfg->membw_reps, cfg->launch_reps,
                       cfg->launch_iters);
  if (cfg->gemm) {
    if (cfg->n_gemm_shapes < 1 || cfg->gemm_reps < 1 || cfg->gemm_warmup < 0)
      return hap_err_set(err, HAP_EINVAL,
                         "measure: %d GEMM shapes, %d reps, %d warm-ups: expected >= 1, >= 1, >= 0",
                         cfg->n_gemm_shapes, cfg->gemm_reps, cfg->gemm_warmup);
    for (int32_t i = 0; i < cfg->n_gemm_shapes; i++) {
      const hap_gemm_shape *g = &cfg->gemm_shapes[i];
      if (g->m < 1 || g->n < 1 || g->k < 1 || g->m > 65536 || g->n > 65536 || g->k > 65536 ||
          !hap_dtype_is_float(g->dtype))
        return hap_err_set(err, HAP_EINVAL,
                           "measure: GEMM shape %d is %lld x %lld x %lld %s, expected sizes in "
                           "1..65536 and a float dtype",
                           i, (long long)g->m, (long long)g->n, (long long)g->k,
                           hap_dtype_name(g->dtype));
    }
  }
  if (cfg->kernels && (cfg->n_kcases < 0 || (cfg->n_kcases > 0 && cfg->kcases == NULL) ||
                       cfg->kernel_reps < 1 || cfg->kernel_warmup < 0))
    return hap_err_set(err, HAP_EINVAL,
                       "measure: %d kernel cases, %d reps, %d warm-ups: expected cases, reps >= 1 "
                       "and warm-ups >= 0",
                       cfg->n_kcases, cfg->kernel_reps, cfg->kernel_warmup);
  if (cfg->comm) {
    HAP_TRY(check_sizes("p2p_sizes", cfg->p2p_sizes, cfg->n_p2p_sizes, err));
    HAP_TRY(check_sizes("coll_sizes", cfg->coll_sizes, cfg->n_coll_sizes, err));
    if (cfg->n_coll_sizes > 256)
      return hap_err_set(err, HAP_EINVAL, "measure: %d collective sizes, at most 256",
                         cfg->n_coll_sizes);
    for (int k = 0; k < HAP_COLL_KIND_COUNT; k++)
      if (cfg->coll_extend_bytes[k] < 0 || cfg->coll_extend_bytes[k] > ((int64_t)1 << 36))
        return hap_err_set(
            err, HAP_EINVAL, "measure: %s sweep extended to %lld bytes, expected 0 .. 64 GiB",
            hap_coll_kind_name((hap_coll_kind)k), (long long)cfg->coll_extend_bytes[k]);
    if (cfg->p2p_reps < 1 || cfg->coll_reps < 1 || cfg->p2p_warmup < 0 || cfg->coll_warmup < 0 ||
        cfg->p2p_iters < 1 || cfg->coll_iters < 1)
      return hap_err_set(err, HAP_EINVAL,
                         "measure: p2p reps %d / warm-ups %d / iters %d, collective reps %d / "
                         "warm-ups %d / iters %d: expected reps and iters >= 1, warm-ups >= 0",
                         cfg->p2p_reps, cfg->p2p_warmup, cfg->p2p_iters, cfg->coll_reps,
                         cfg->coll_warmup, cfg->coll_iters);
  }
  return HAP_OK;
}

/* ---- run state ------------------------------------------------------------------------------ */

/* What every rank tells the others about its device (fixed layout, sent as bytes). */
typedef struct dev_rec {
  char host[HOST_MAX];
  char model[128];
  char library[160];
  int64_t memory_bytes; /* bytes */
  int32_t kind;         /* hap_device_kind */
  int32_t threads, n_gemm;
  double speed;
  double membw_Bps;  /* bytes/s */
  double update_Bps; /* the SGD update's bytes/s, 12 per element (a replay: its own updates', in the
                        bytes the simulator prices); 0 = not measured */
  double launch_s;   /* s */
} dev_rec;

typedef struct run {
  hap_comm *world;
  hap_comm *data; /* device-memory transfers: cfg->data or world */
  hap_dev *dev;
  const hap_measure_config *cfg;
  int32_t step, total;
  dev_rec *recs;     /* [world->size] */
  int32_t *host_of;  /* host index of each rank */
  int32_t *local_of; /* index within its host */
  int32_t n_hosts;
  hap_profile *p;          /* rank 0 only */
  void *sendbuf, *recvbuf; /* comm buffers of bufbytes each */
  int64_t bufbytes;
  double *samples;           /* max(n_sizes) * reps */
  volatile char *flush;      /* HAP_MEASURE_FLUSH_BYTES written before cold samples, or NULL */
  hap_profile_kernel *krows; /* this rank's kernel rows */
  int32_t n_krows;
} run;

static void progress(run *r, const char *phase) {
  if (r->cfg->progress != NULL)
    r->cfg->progress(r->cfg->progress_arg, phase, r->step, r->total);
  r->step++;
}

static double now(run *r) { return r->dev->ops->now_s(r->dev); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int32_t n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* ---- compute -------------------------------------------------------------------------------- */

static hap_status measure_membw(run *r, dev_rec *rec, hap_err *err) {
  hap_dev *d = r->dev;
  size_t bytes = (size_t)r->cfg->membw_bytes;
  int32_t reps = r->cfg->membw_reps;
  void *a = NULL, *b = NULL;
  double *t = malloc((size_t)reps * sizeof *t);
  hap_status st = t ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  if (st == HAP_OK)
    st = d->ops->alloc(d, bytes, &a, err);
  if (st == HAP_OK)
    st = d->ops->alloc(d, bytes, &b, err);
  if (st == HAP_OK)
    st = d->ops->fill(d, HAP_F32, a, (int64_t)(bytes / 4), 1.0, err);
  if (st == HAP_OK)
    st = d->ops->copy(d, b, a, bytes, err); /* warm-up: touches every page of b */
  for (int32_t i = 0; i < reps && st == HAP_OK; i++) {
    if ((st = r->world->ops->barrier(r->world, err)) != HAP_OK) /* all ranks stream at once */
      break;
    double t0 = now(r);
    st = d->ops->copy(d, b, a, bytes, err);
    /* the device's own time where it has one (a GPU: without the host's wait and CUPTI flush) */
    t[i] = d->ops->last_s != NULL ? d->ops->last_s(d) : now(r) - t0;
  }
  if (st == HAP_OK)
    rec->membw_Bps = 2.0 * (double)bytes / median(t, reps); /* read + write */
  d->ops->release(d, a);
  d->ops->release(d, b);
  free(t);
  return st;
}

/* The executor's SGD update (hap_kernel_sgd, in host memory) over two buffers of
 * max(membw_bytes, 128 MiB) each, as bytes/s with lower.h's count of 12 bytes per element; every
 * rank at once, as in training (ranks of a host share its memory bus). Not slowed by
 * --emulate-speed: hap-run's update is not either. */
static hap_status measure_update(run *r, dev_rec *rec, hap_err *err) {
  /* weights are cold when their update runs (a whole iteration touched other memory since):
   * buffers well past a last-level cache, at least 128 MiB each */
  int64_t bytes =
      r->cfg->membw_bytes > ((int64_t)128 << 20) ? r->cfg->membw_bytes : ((int64_t)128 << 20);
  int64_t n = bytes / (int64_t)sizeof(float);
  int32_t reps = r->cfg->membw_reps;
  float *w = calloc((size_t)n, sizeof *w), *g = malloc((size_t)n * sizeof *g);
  double *t = malloc((size_t)reps * sizeof *t);
  if (w == NULL || g == NULL || t == NULL) {
    free(w);
    free(g);
    free(t);
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory for the update buffers");
  }
  for (int64_t i = 0; i < n; i++)
    g[i] = (float)(i % 1024) * 0x1p-10f;
  hap_kernel_sgd(w, g, 1e-3f, n); /* warm-up: touches every page */
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < reps && st == HAP_OK; i++) {
    if ((st = r->world->ops->barrier(r->world, err)) != HAP_OK) /* as in training: all at once */
      break;
    double t0 = now(r);
    hap_kernel_sgd(w, g, 1e-3f, n);
    t[i] = now(r) - t0;
  }
  if (st == HAP_OK)
    rec->update_Bps = 12.0 * (double)n / median(t, reps);
  free(w);
  free(g);
  free(t);
  return st;
}

static hap_status measure_launch(run *r, dev_rec *rec, hap_err *err) {
  hap_dev *d = r->dev;
  int32_t reps = r->cfg->launch_reps, iters = r->cfg->launch_iters;
  double *t = malloc((size_t)reps * sizeof *t);
  if (t == NULL)
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  hap_status st = d->ops->empty_kernel(d, err);
  for (int32_t i = 0; i < reps && st == HAP_OK; i++) {
    double t0 = now(r);
    for (int32_t j = 0; j < iters && st == HAP_OK; j++)
      st = d->ops->empty_kernel(d, err);
    if (st == HAP_OK)
      st = d->ops->synchronize(d, err);
    t[i] = (now(r) - t0) / iters;
  }
  if (st == HAP_OK)
    rec->launch_s = median(t, reps);
  free(t);
  return st;
}

/* Median seconds of each configured GEMM into secs[0..n_gemm_shapes). */
static hap_status measure_gemm(run *r, double *secs, hap_err *err) {
  hap_dev *d = r->dev;
  const hap_measure_config *cfg = r->cfg;
  size_t max_a = 0, max_b = 0, max_c = 0;
  for (int32_t i = 0; i < cfg->n_gemm_shapes; i++) {
    const hap_gemm_shape *g = &cfg->gemm_shapes[i];
    size_t es = (size_t)hap_dtype_size(g->dtype);
    size_t a = (size_t)(g->m * g->k) * es, b = (size_t)(g->k * g->n) * es,
           c = (size_t)(g->m * g->n) * es;
    max_a = a > max_a ? a : max_a;
    max_b = b > max_b ? b : max_b;
    max_c = c > max_c ? c : max_c;
  }
  void *a = NULL, *b = NULL, *c = NULL;
  int32_t reps = cfg->gemm_reps;
  double *t = malloc((size_t)reps * sizeof *t);
  hap_status st = t ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  if (st == HAP_OK)
    st = d->ops->alloc(d, max_a, &a, err);
  if (st == HAP_OK)
    st = d->ops->alloc(d, max_b, &b, err);
  if (st == HAP_OK)
    st = d->ops->alloc(d, max_c, &c, err);
  for (int32_t i = 0; i < cfg->n_gemm_shapes && st == HAP_OK; i++) {
    const hap_gemm_shape *g = &cfg->gemm_shapes[i];
    char phase[96];
    snprintf(phase, sizeof phase, "gemm %lldx%lldx%lld %s", (long long)g->m, (long long)g->n,
             (long long)g->k, hap_dtype_name(g->dtype));
    progress(r, phase);
    st = d->ops->fill(d, g->dtype, a, g->m * g->k, 0.5, err);
    if (st == HAP_OK)
      st = d->ops->fill(d, g->dtype, b, g->k * g->n, 0.25, err);
    for (int32_t w = 0; w < cfg->gemm_warmup && st == HAP_OK; w++)
      st = d->ops->gemm(d, g->dtype, g->m, g->n, g->k, a, b, c, err);
    for (int32_t k = 0; k < reps && st == HAP_OK; k++) {
      double t0 = now(r);
      st = d->ops->gemm(d, g->dtype, g->m, g->n, g->k, a, b, c, err);
      if (st == HAP_OK)
        st = d->ops->synchronize(d, err);
      t[k] = d->ops->last_s != NULL ? d->ops->last_s(d) : now(r) - t0;
    }
    if (st == HAP_OK)
      secs[i] = median(t, reps);
  }
  d->ops->release(d, a);
  d->ops->release(d, b);
  d->ops->release(d, c);
  free(t);
  return st;
}

/* ---- kernels -------------------------------------------------------------------------------- */

/* Time this rank's kernel cases into r->krows. A case the CPU kernels do not run (a float16
 * input in a plan) is skipped. */
static hap_status measure_kernels(run *r, double speed, dev_rec *rec, hap_err *err) {
  const hap_measure_config *cfg = r->cfg;
  if (cfg->kernel_rows != NULL) {
    progress(r, "kernels: the plan's tasks in execution order");
    double update_Bps = 0;
    HAP_TRY(
        cfg->kernel_rows(cfg->kernel_rows_arg, speed, &r->krows, &r->n_krows, &update_Bps, err));
    if (update_Bps > 0)
      rec->update_Bps = update_Bps;
    return HAP_OK;
  }
  r->krows = calloc(2 * (size_t)cfg->n_kcases + 1, sizeof *r->krows);
  if (r->krows == NULL)
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory for kernel rows");
  for (int32_t i = 0; i < cfg->n_kcases; i++) {
    const hap_kcase *kc = &cfg->kcases[i];
    char phase[96], s[64];
    snprintf(phase, sizeof phase, "kernel %s %s%s", hap_op_name(kc->op),
             hap_shape_str(&kc->io.in[0], s, sizeof s), kc->io.n_in > 1 ? " x ..." : "");
    progress(r, phase);
    int32_t n = 0;
    hap_err kerr = {0};
    hap_status st = hap_kcase_time(kc, cfg->kernel_reps, cfg->kernel_warmup, speed,
                                   &r->krows[r->n_krows], &n, &kerr);
    if (st == HAP_EUNSUPPORTED)
      continue;
    if (st != HAP_OK)
      return hap_err_set(err, st, "%s", kerr.msg);
    r->n_krows += n;
  }
  return HAP_OK;
}

/* Every rank's kernel rows to rank 0, into its device's table (device i = rank i). */
static hap_status gather_kernels(run *r, hap_err *err) {
  hap_comm *c = r->world;
  for (int32_t src = 0; src < c->size; src++) {
    int64_t n = r->n_krows;
    hap_profile_kernel *rows = r->krows, *got = NULL;
    if (src != 0 && c->rank == src) {
      HAP_TRY(c->ops->send(c, &n, (int64_t)sizeof n, 0, TAG_KERNELS, err));
      if (n > 0)
        HAP_TRY(c->ops->send(c, rows, n * (int64_t)sizeof *rows, 0, TAG_KERNELS, err));
    }
    if (c->rank != 0)
      continue;
    if (src != 0) {
      HAP_TRY(c->ops->recv(c, &n, (int64_t)sizeof n, src, TAG_KERNELS, err));
      if (n < 0 || n > 1000000)
        return hap_err_set(err, HAP_EINVAL, "measure: rank %d reports %lld kernel rows", src,
                           (long long)n);
      got = calloc((size_t)(n > 0 ? n : 1), sizeof *got);
      if (got == NULL)
        return hap_err_set(err, HAP_ENOMEM, "measure: out of memory for kernel rows");
      hap_status st =
          n > 0 ? c->ops->recv(c, got, n * (int64_t)sizeof *got, src, TAG_KERNELS, err) : HAP_OK;
      if (st != HAP_OK) {
        free(got);
        return st;
      }
      rows = got;
    }
    hap_status st = HAP_OK;
    for (int64_t i = 0; i < n && st == HAP_OK; i++)
      st = hap_profile_add_kernel(&r->p->devices[src], &rows[i], err);
    free(got);
    HAP_TRY(st);
  }
  return HAP_OK;
}

/* ---- devices and hosts ---------------------------------------------------------------------- */

/* Gather every rank's record (plus its GEMM seconds) and derive hosts; on rank 0 start the
 * profile with hosts and devices. */
static hap_status gather_devices(run *r, const dev_rec *mine, const double *secs, hap_err *err) {
  int32_t n = r->world->size, ng = r->cfg->gemm ? r->cfg->n_gemm_shapes : 0;
  size_t one = sizeof(dev_rec) + (size_t)ng * sizeof(double);
  unsigned char *send = malloc(one), *all = malloc(one * (size_t)n);
  r->recs = calloc((size_t)n, sizeof *r->recs);
  r->host_of = calloc((size_t)n, sizeof *r->host_of);
  r->local_of = calloc((size_t)n, sizeof *r->local_of);
  double *all_secs = malloc((size_t)(ng > 0 ? ng : 1) * (size_t)n * sizeof *all_secs);
  hap_status st = HAP_OK;
  if (!send || !all || !r->recs || !r->host_of || !r->local_of || !all_secs)
    st = hap_err_set(err, HAP_ENOMEM, "measure: out of memory gathering devices");
  if (st == HAP_OK) {
    memcpy(send, mine, sizeof *mine);
    if (ng > 0)
      memcpy(send + sizeof *mine, secs, (size_t)ng * sizeof *secs);
    st = r->world->ops->all_gather(r->world, send, all, (int64_t)one, err);
  }
  for (int32_t i = 0; i < n && st == HAP_OK; i++) {
    memcpy(&r->recs[i], all + one * (size_t)i, sizeof(dev_rec));
    r->recs[i].host[HOST_MAX - 1] = '\0';
    r->recs[i].model[sizeof r->recs[i].model - 1] = '\0';
    r->recs[i].library[sizeof r->recs[i].library - 1] = '\0';
    if (ng > 0)
      memcpy(all_secs + (size_t)i * (size_t)ng, all + one * (size_t)i + sizeof(dev_rec),
             (size_t)ng * sizeof(double));
    r->host_of[i] = -1;
    for (int32_t j = 0; j < i && r->host_of[i] < 0; j++)
      if (strcmp(r->recs[j].host, r->recs[i].host) == 0)
        r->host_of[i] = r->host_of[j];
    if (r->host_of[i] < 0)
      r->host_of[i] = r->n_hosts++;
    for (int32_t j = 0; j < i; j++)
      r->local_of[i] += r->host_of[j] == r->host_of[i];
  }
  if (st == HAP_OK && r->world->rank == 0) {
    r->p = hap_profile_create();
    if (r->p == NULL)
      st = hap_err_set(err, HAP_ENOMEM, "measure: out of memory creating the profile");
    for (int32_t i = 0; i < n && st == HAP_OK; i++)
      if (r->local_of[i] == 0)
        st = hap_profile_add_host(r->p, r->recs[i].host, err);
    for (int32_t i = 0; i < n && st == HAP_OK; i++) {
      const dev_rec *x = &r->recs[i];
      int32_t on_host = 0;
      for (int32_t j = 0; j < n; j++)
        on_host += r->host_of[j] == r->host_of[i];
      char name[HOST_MAX + 16], model[192];
      snprintf(name, sizeof name, "%s:%d", x->host, r->local_of[i]);
      if (x->speed < 1.0)
        snprintf(model, sizeof model, "%s (speed %g)", x->model, x->speed);
      else
        snprintf(model, sizeof model, "%s", x->model);
      int32_t idx;
      hap_device_kind kind = x->kind == HAP_DEVICE_GPU ? HAP_DEVICE_GPU : HAP_DEVICE_CPU;
      st = hap_profile_add_device(r->p, name, x->host, model, kind, &idx, err);
      if (st != HAP_OK)
        break;
      hap_profile_device *d = &r->p->devices[idx];
      /* a CPU rank shares the host's memory with the host's other ranks; a GPU has its own */
      d->memory_bytes = kind == HAP_DEVICE_CPU ? x->memory_bytes / on_host : x->memory_bytes;
      d->memory_bw_Bps = x->membw_Bps;
      d->launch_s = x->launch_s;
      d->update_bw_Bps = x->update_Bps; /* a GPU's: only from a replay (measure_update) */
      for (int32_t g = 0; g < ng && st == HAP_OK; g++) {
        const hap_gemm_shape *s = &r->cfg->gemm_shapes[g];
        double sec = all_secs[(size_t)i * (size_t)ng + (size_t)g];
        hap_profile_gemm row = {s->m, s->n,
                                s->k, s->dtype,
                                sec,  2.0 * (double)s->m * (double)s->n * (double)s->k / sec};
        st = hap_profile_add_gemm(d, &row, err);
      }
    }
  }
  free(send);
  free(all);
  free(all_secs);
  return st;
}

/* ---- point-to-point ------------------------------------------------------------------------- */

int32_t hap_p2p_outliers(const double *p50_s, int32_t n, int32_t *idx) {
  int32_t m = 0;
  double floor_s = 0; /* the smallest p50 of the sizes after i */
  for (int32_t i = n - 1; i >= 0; i--) {
    if (i < n - 1 && p50_s[i] > HAP_P2P_OUTLIER_FACTOR * floor_s)
      idx[m++] = i;
    if (i == n - 1 || p50_s[i] < floor_s)
      floor_s = p50_s[i];
  }
  for (int32_t a = 0, b = m - 1; a < b; a++, b--) { /* increasing */
    int32_t t = idx[a];
    idx[a] = idx[b];
    idx[b] = t;
  }
  return m;
}

/* One ping-pong round trip of s bytes: the lead sends first. */
static hap_status round_trip(hap_comm *c, run *r, bool lead, int32_t peer, int64_t s,
                             hap_err *err) {
  if (lead) {
    HAP_TRY(c->ops->send(c, r->sendbuf, s, peer, TAG_PING, err));
    return c->ops->recv(c, r->recvbuf, s, peer, TAG_PONG, err);
  }
  HAP_TRY(c->ops->recv(c, r->recvbuf, s, peer, TAG_PING, err));
  return c->ops->send(c, r->sendbuf, s, peer, TAG_PONG, err);
}

/* Size i of a pair's sweep: its warm-ups, then p2p_reps samples (at the lead) of p2p_iters
 * round trips each, one sample = half a round trip. */
static hap_status pingpong_size(run *r, bool lead, int32_t peer, int32_t i, hap_err *err) {
  hap_comm *c = r->data;
  const hap_measure_config *cfg = r->cfg;
  int64_t s = cfg->p2p_sizes[i];
  for (int32_t k = 0; k < cfg->p2p_warmup + cfg->p2p_reps; k++) {
    int32_t iters = k < cfg->p2p_warmup ? 1 : cfg->p2p_iters;
    double t0 = now(r);
    for (int32_t it = 0; it < iters; it++)
      HAP_TRY(round_trip(c, r, lead, peer, s, err));
    if (k >= cfg->p2p_warmup)
      r->samples[i * cfg->p2p_reps + (k - cfg->p2p_warmup)] = 0.5 * (now(r) - t0) / iters;
  }
  return HAP_OK;
}

/* The lead finds the outliers (hap_p2p_outliers over its samples' p50s) and sends the list; the
 * partner receives it. redo holds n_p2p_sizes entries; the count goes to *m. */
static hap_status agree_outliers(run *r, bool lead, int32_t peer, int32_t *redo, int32_t *m,
                                 hap_err *err) {
  hap_comm *c = r->world;
  const hap_measure_config *cfg = r->cfg;
  int32_t n = cfg->n_p2p_sizes, reps = cfg->p2p_reps;
  if (lead) {
    double *p50 = calloc((size_t)n, sizeof *p50), *x = calloc((size_t)reps, sizeof *x);
    if (p50 == NULL || x == NULL) {
      free(p50);
      free(x);
      return hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
      memcpy(x, r->samples + (size_t)i * (size_t)reps, (size_t)reps * sizeof *x);
      p50[i] = median(x, reps);
    }
    *m = hap_p2p_outliers(p50, n, redo);
    free(p50);
    free(x);
    HAP_TRY(c->ops->send(c, m, (int64_t)sizeof *m, peer, TAG_REDO, err));
    return *m > 0 ? c->ops->send(c, redo, *m * (int64_t)sizeof *redo, peer, TAG_REDO, err) : HAP_OK;
  }
  HAP_TRY(c->ops->recv(c, m, (int64_t)sizeof *m, peer, TAG_REDO, err));
  if (*m < 0 || *m > n)
    return hap_err_set(err, HAP_EMPI, "measure: rank %d sent %d sizes to measure again", peer, *m);
  return *m > 0 ? c->ops->recv(c, redo, *m * (int64_t)sizeof *redo, peer, TAG_REDO, err) : HAP_OK;
}

/* The sizes agreed on (agree_outliers) measured again, up to P2P_REMEASURE_PASSES times. */
static hap_status remeasure_outliers(run *r, bool lead, int32_t peer, hap_err *err) {
  int32_t *redo = malloc((size_t)r->cfg->n_p2p_sizes * sizeof *redo);
  if (redo == NULL)
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  hap_status st = HAP_OK;
  for (int32_t pass = 0, m = 1; pass < P2P_REMEASURE_PASSES && m > 0 && st == HAP_OK; pass++) {
    st = agree_outliers(r, lead, peer, redo, &m, err);
    for (int32_t j = 0; j < m && st == HAP_OK; j++)
      st = pingpong_size(r, lead, peer, redo[j], err);
  }
  free(redo);
  return st;
}

/* Ping-pong sweep of src -> dst (both call); samples (at src) = half round trips. The pair first
 * exchanges P2P_PAIR_WARMUP untimed round trips of the first size; after the sweep, sizes whose
 * p50 is an outlier against the larger sizes (a transient: a partner still busy, a slow first
 * path) are measured again. */
static hap_status pingpong(run *r, int32_t src, int32_t dst, hap_err *err) {
  const hap_measure_config *cfg = r->cfg;
  bool lead = r->world->rank == src;
  int32_t peer = lead ? dst : src;
  for (int32_t k = 0; k < P2P_PAIR_WARMUP; k++)
    HAP_TRY(round_trip(r->data, r, lead, peer, cfg->p2p_sizes[0], err));
  for (int32_t i = 0; i < cfg->n_p2p_sizes; i++) {
    char phase[96];
    snprintf(phase, sizeof phase, "p2p %d->%d, %lld B", src, dst, (long long)cfg->p2p_sizes[i]);
    progress(r, phase);
    HAP_TRY(pingpong_size(r, lead, peer, i, err));
  }
  return remeasure_outliers(r, lead, peer, err);
}

static hap_status measure_p2p(run *r, hap_err *err) {
  hap_comm *c = r->world;
  const hap_measure_config *cfg = r->cfg;
  int64_t n_samples = (int64_t)cfg->n_p2p_sizes * cfg->p2p_reps;
  for (int32_t src = 0; src < c->size; src++) {
    for (int32_t dst = 0; dst < c->size; dst++) {
      if (src == dst)
        continue;
      if (c->rank == src || c->rank == dst)
        HAP_TRY(pingpong(r, src, dst, err));
      else
        r->step += cfg->n_p2p_sizes; /* a bystander: the pair's steps pass */
      if (src != 0 && c->rank == src)
        HAP_TRY(c->ops->send(c, r->samples, n_samples * 8, 0, TAG_SAMPLES, err));
      if (src != 0 && c->rank == 0)
        HAP_TRY(c->ops->recv(c, r->samples, n_samples * 8, src, TAG_SAMPLES, err));
      if (c->rank == 0) {
        int32_t j;
        HAP_TRY(hap_profile_add_p2p(r->p, src, dst, cfg->n_p2p_sizes, cfg->p2p_reps, &j, err));
        hap_profile_p2p *s = &r->p->p2p[j];
        s->warmup = cfg->p2p_warmup;
        s->iters = cfg->p2p_iters;
        memcpy(s->sizes_bytes, cfg->p2p_sizes, (size_t)cfg->n_p2p_sizes * sizeof(int64_t));
        memcpy(s->samples_s, r->samples, (size_t)n_samples * sizeof(double));
      }
      HAP_TRY(c->ops->barrier(c, err));
    }
  }
  return HAP_OK;
}

/* ---- collectives ---------------------------------------------------------------------------- */

/* One call of `kind` over group g with S bytes (nccl-tests meaning, a multiple of 4 * size). */
static hap_status coll_once(run *r, hap_comm *g, hap_coll_kind kind, int64_t s, hap_err *err) {
  void *in = r->sendbuf, *out = r->recvbuf;
  int64_t n = g->size;
  switch (kind) {
  case HAP_COLL_ALL_REDUCE: /* in place, as hap-run sums gradients */
    return g->ops->all_reduce(g, out, out, s / 4, HAP_F32, HAP_REDUCE_SUM, err);
  case HAP_COLL_ALL_GATHER: return g->ops->all_gather(g, in, out, s / n, err);
  case HAP_COLL_REDUCE_SCATTER:
    return g->ops->reduce_scatter(g, in, out, s / (4 * n), HAP_F32, HAP_REDUCE_SUM, err);
  case HAP_COLL_ALL_TO_ALL: return g->ops->all_to_all(g, in, out, s / n, err);
  case HAP_COLL_BROADCAST: return g->ops->broadcast(g, in, s, 0, err);
  case HAP_COLL_KIND_COUNT: break;
  }
  return hap_err_set(err, HAP_EINVAL, "measure: unknown collective %d", (int)kind);
}

/* The sizes `kind` is timed at over n_ranks (out: n_coll_sizes + HAP_MEASURE_MAX_EXTEND
 * entries): cfg->coll_sizes, then its extension (coll_extend_bytes), each rounded up to a multiple
 * of 4 * n_ranks, duplicates dropped. Returns the count; *n_base gets how many are ordinary. */
static int32_t group_sizes(const hap_measure_config *cfg, hap_coll_kind kind, int32_t n_ranks,
                           int64_t *out, int32_t *n_base) {
  int32_t m = 0;
  int64_t q = 4 * (int64_t)n_ranks;
  for (int32_t i = 0; i < cfg->n_coll_sizes; i++) {
    int64_t s = (cfg->coll_sizes[i] + q - 1) / q * q;
    if (m == 0 || s > out[m - 1])
      out[m++] = s;
  }
  *n_base = m;
  int32_t n = cfg->n_coll_sizes;
  int64_t last = cfg->coll_sizes[n - 1], factor = n > 1 ? last / cfg->coll_sizes[n - 2] : 2;
  if (factor < 2)
    factor = 2;
  for (int32_t e = 0; e < HAP_MEASURE_MAX_EXTEND && last < cfg->coll_extend_bytes[kind]; e++) {
    last *= factor;
    int64_t s = (last + q - 1) / q * q;
    if (m == 0 || s > out[m - 1])
      out[m++] = s;
  }
  return m;
}

/* Evict this rank's caches: one write per 64-byte line of r->flush (coll_cold). */
static void flush_caches(run *r) {
  for (size_t j = 0; j < HAP_MEASURE_FLUSH_BYTES; j += 64)
    r->flush[j]++;
}

/* hg: the group over world (host memory: barrier, slowest time); g: the same ranks over data. */
static hap_status coll_sweep(run *r, hap_comm *hg, hap_comm *g, hap_coll_kind kind,
                             const char *group, const int64_t *sizes, int32_t n_sizes,
                             int32_t n_base, hap_err *err) {
  const hap_measure_config *cfg = r->cfg;
  for (int32_t i = 0; i < n_sizes; i++) {
    char phase[HOST_MAX + 64];
    snprintf(phase, sizeof phase, "%s %s, %lld B", hap_coll_kind_name(kind), group,
             (long long)sizes[i]);
    progress(r, phase);
    bool extended = i >= n_base; /* large: one warm-up, one call per sample */
    int32_t warmup = extended ? 1 : cfg->coll_warmup;
    int32_t iters = extended || cfg->coll_cold ? 1 : cfg->coll_iters;
    for (int32_t w = 0; w < warmup; w++)
      HAP_TRY(coll_once(r, g, kind, sizes[i], err));
    for (int32_t k = 0; k < cfg->coll_reps; k++) {
      if (cfg->coll_cold)
        flush_caches(r);
      HAP_TRY(hg->ops->barrier(hg, err));
      double t0 = now(r);
      for (int32_t it = 0; it < iters; it++)
        HAP_TRY(coll_once(r, g, kind, sizes[i], err));
      double t = (now(r) - t0) / iters, slowest = 0;
      HAP_TRY(hg->ops->all_reduce(hg, &t, &slowest, 1, HAP_F64, HAP_REDUCE_MAX, err));
      r->samples[i * cfg->coll_reps + k] = slowest;
    }
  }
  return HAP_OK;
}

typedef struct group_def {
  char name[HOST_MAX + 8];
  int32_t n;
  int32_t *ranks; /* world ranks, increasing */
} group_def;

/* world; then, with several hosts, each host with >= 2 ranks and one rank per host. */
static int32_t plan_groups(run *r, group_def *g) {
  int32_t n = r->world->size, m = 0;
  for (int32_t i = 0; i < n; i++)
    g[0].ranks[i] = i;
  g[0].n = n;
  snprintf(g[0].name, sizeof g[0].name, "world");
  m = 1;
  if (r->n_hosts < 2)
    return m;
  for (int32_t h = 0; h < r->n_hosts; h++) {
    group_def *x = &g[m];
    x->n = 0;
    for (int32_t i = 0; i < n; i++)
      if (r->host_of[i] == h)
        x->ranks[x->n++] = i;
    if (x->n < 2)
      continue;
    snprintf(x->name, sizeof x->name, "host:%s", r->recs[x->ranks[0]].host);
    m++;
  }
  group_def *x = &g[m];
  x->n = 0;
  for (int32_t i = 0; i < n; i++)
    if (r->local_of[i] == 0)
      x->ranks[x->n++] = i;
  snprintf(x->name, sizeof x->name, "cross-host");
  if (x->n < n)
    m++;
  return m;
}

static hap_status measure_group(run *r, const group_def *gd, int32_t color, hap_err *err) {
  hap_comm *c = r->world;
  const hap_measure_config *cfg = r->cfg;
  bool member = false;
  for (int32_t i = 0; i < gd->n; i++)
    member |= gd->ranks[i] == c->rank;
  int64_t *sizes = malloc((size_t)(cfg->n_coll_sizes + HAP_MEASURE_MAX_EXTEND) * sizeof *sizes);
  if (sizes == NULL)
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  hap_comm *hg = NULL, *dg = NULL;
  hap_status st = c->ops->split(c, member ? color : -1, c->rank, &hg, err);
  if (st == HAP_OK && r->data != c)
    st = r->data->ops->split(r->data, member ? color : -1, c->rank, &dg, err);
  hap_comm *g = r->data != c ? dg : hg;
  int32_t root = gd->ranks[0]; /* group rank 0 in world numbering */
  for (int k = 0; k < HAP_COLL_KIND_COUNT && st == HAP_OK; k++) {
    if (!(cfg->coll_kinds & (1u << k)))
      continue;
    int32_t n_base;
    int32_t n_sizes = group_sizes(cfg, (hap_coll_kind)k, gd->n, sizes, &n_base);
    int64_t n_samples = (int64_t)n_sizes * cfg->coll_reps;
    if (member)
      st = coll_sweep(r, hg, g, (hap_coll_kind)k, gd->name, sizes, n_sizes, n_base, err);
    else
      r->step += n_sizes;
    if (st == HAP_OK && root != 0 && c->rank == root)
      st = c->ops->send(c, r->samples, n_samples * 8, 0, TAG_SAMPLES, err);
    if (st == HAP_OK && root != 0 && c->rank == 0)
      st = c->ops->recv(c, r->samples, n_samples * 8, root, TAG_SAMPLES, err);
    if (st == HAP_OK && c->rank == 0) {
      int32_t j;
      st = hap_profile_add_coll(r->p, (hap_coll_kind)k, gd->name, gd->ranks, gd->n, n_sizes,
                                cfg->coll_reps, &j, err);
      if (st == HAP_OK) {
        hap_profile_coll *s = &r->p->colls[j];
        s->warmup = cfg->coll_warmup;
        s->iters = cfg->coll_iters;
        memcpy(s->sizes_bytes, sizes, (size_t)n_sizes * sizeof *sizes);
        memcpy(s->samples_s, r->samples, (size_t)n_samples * sizeof(double));
      }
    }
    if (st == HAP_OK)
      st = c->ops->barrier(c, err);
  }
  hap_comm_destroy(dg);
  hap_comm_destroy(hg);
  free(sizes);
  return st;
}

static hap_status measure_colls(run *r, hap_err *err) {
  int32_t n = r->world->size, max_groups = r->n_hosts + 2;
  if (n < 1 || r->n_hosts < 1 || r->n_hosts > n)
    return hap_err_set(err, HAP_EINVAL, "measure: %d ranks on %d hosts", n, r->n_hosts);
  group_def *g = calloc((size_t)max_groups, sizeof *g);
  int32_t *ranks = calloc((size_t)max_groups * (size_t)n, sizeof *ranks);
  hap_status st = HAP_OK;
  if (g == NULL || ranks == NULL) {
    st = hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  } else {
    g[0].ranks = ranks;
    for (int32_t i = 1; i < max_groups; i++)
      g[i].ranks = ranks + (size_t)i * (size_t)n;
    int32_t m = plan_groups(r, g);
    for (int32_t i = 0; i < m && st == HAP_OK; i++)
      st = measure_group(r, &g[i], i, err);
  }
  free(ranks);
  free(g);
  return st;
}

static int32_t count_groups(const run *r) {
  if (r->n_hosts < 2)
    return 1;
  int32_t m = 1, n = r->world->size;
  for (int32_t h = 0; h < r->n_hosts; h++) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
      k += r->host_of[i] == h;
    m += k >= 2;
  }
  return m + (r->n_hosts < n); /* cross-host differs from the world when some host has >= 2 */
}

/* Collective steps of one group over every measured kind, and the most sizes of one kind; the
 * largest size in *max_bytes (world's rounding, the coarsest). */
static int32_t coll_steps(const run *r, int32_t *most_sizes, int64_t *max_bytes) {
  const hap_measure_config *cfg = r->cfg;
  int64_t sizes[256 + HAP_MEASURE_MAX_EXTEND];
  int32_t steps = 0, n_base;
  *most_sizes = 0;
  *max_bytes = 0;
  for (int k = 0; k < HAP_COLL_KIND_COUNT; k++) {
    if (!(cfg->coll_kinds & (1u << k)))
      continue;
    int32_t n = group_sizes(cfg, (hap_coll_kind)k, r->world->size, sizes, &n_base);
    steps += n;
    *most_sizes = n > *most_sizes ? n : *most_sizes;
    if (n > 0 && sizes[n - 1] > *max_bytes)
      *max_bytes = sizes[n - 1];
  }
  return steps;
}

static hap_status alloc_comm_buffers(run *r, hap_err *err) {
  const hap_measure_config *cfg = r->cfg;
  int32_t most_sizes;
  int64_t coll_max;
  coll_steps(r, &most_sizes, &coll_max);
  int64_t p2p_max = cfg->p2p_sizes[cfg->n_p2p_sizes - 1];
  r->bufbytes = coll_max > p2p_max ? coll_max : p2p_max;
  int32_t most = cfg->n_p2p_sizes * cfg->p2p_reps;
  if (most_sizes * cfg->coll_reps > most)
    most = most_sizes * cfg->coll_reps;
  r->samples = calloc((size_t)most, sizeof *r->samples);
  if (r->samples == NULL)
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  if (cfg->coll_cold) {
    r->flush = calloc(HAP_MEASURE_FLUSH_BYTES, 1);
    if (r->flush == NULL)
      return hap_err_set(err, HAP_ENOMEM, "measure: out of memory for the cache flush (%zu bytes)",
                         HAP_MEASURE_FLUSH_BYTES);
  }
  hap_dev *d = r->dev;
  HAP_TRY(d->ops->alloc(d, (size_t)r->bufbytes, &r->sendbuf, err));
  HAP_TRY(d->ops->alloc(d, (size_t)r->bufbytes, &r->recvbuf, err));
  HAP_TRY(d->ops->fill(d, HAP_F32, r->sendbuf, r->bufbytes / 4, 1.0, err));
  return d->ops->fill(d, HAP_F32, r->recvbuf, r->bufbytes / 4, 0.0, err);
}

/* ---- the whole run -------------------------------------------------------------------------- */

static hap_status run_all(run *r, hap_err *err) {
  const hap_measure_config *cfg = r->cfg;
  hap_dev *d = r->dev;
  dev_rec mine;
  memset(&mine, 0, sizeof mine);
  if (gethostname(mine.host, sizeof mine.host) != 0 || mine.host[0] == '\0')
    snprintf(mine.host, sizeof mine.host, "localhost");
  mine.host[HOST_MAX - 1] = '\0';
  for (char *ch = mine.host; *ch; ch++)
    if (*ch == '/' || *ch == ':')
      *ch = '_'; /* host names become device and group names */
  hap_dev_info info;
  HAP_TRY(d->ops->info(d, &info, err));
  snprintf(mine.model, sizeof mine.model, "%s", info.model);
  snprintf(mine.library, sizeof mine.library, "%s", info.library);
  mine.memory_bytes = info.memory_bytes;
  mine.kind = (int32_t)info.kind;
  mine.threads = info.threads;
  mine.speed = info.speed;
  int32_t ng = cfg->gemm ? cfg->n_gemm_shapes : 0;
  int32_t pairs = r->world->size * (r->world->size - 1);
  /* the grid's cases run kernels/ (CPUs only); a replay runs whatever kernels its hook was given */
  bool kernels = cfg->kernels && (info.kind == HAP_DEVICE_CPU || cfg->kernel_rows != NULL);
  int32_t nk = !kernels ? 0 : cfg->kernel_rows != NULL ? 1 : cfg->n_kcases;
  r->total = ng + nk + 4 + (cfg->comm ? pairs * cfg->n_p2p_sizes : 0); /* refined below */
  progress(r, "memory bandwidth");
  HAP_TRY(measure_membw(r, &mine, err));
  progress(r, "update bandwidth"); /* every rank: the barriers; recorded for CPU devices */
  HAP_TRY(measure_update(r, &mine, err));
  if (info.kind != HAP_DEVICE_CPU)
    mine.update_Bps = 0; /* a host's update is no GPU's, unless a replay times hap-run's own */
  progress(r, "launch overhead");
  HAP_TRY(measure_launch(r, &mine, err));
  double *secs = malloc((size_t)(ng > 0 ? ng : 1) * sizeof *secs);
  if (secs == NULL)
    return hap_err_set(err, HAP_ENOMEM, "measure: out of memory");
  hap_status st = ng > 0 ? measure_gemm(r, secs, err) : HAP_OK;
  if (st == HAP_OK && kernels)
    st = measure_kernels(r, info.speed, &mine, err);
  if (st == HAP_OK) {
    progress(r, "gathering the devices");
    st = gather_devices(r, &mine, secs, err);
  }
  if (st == HAP_OK && cfg->kernels)
    st = gather_kernels(r, err);
  free(secs);
  HAP_TRY(st);
  if (!cfg->comm)
    return HAP_OK;
  int32_t most_sizes;
  int64_t max_bytes;
  r->total =
      r->step + pairs * cfg->n_p2p_sizes + count_groups(r) * coll_steps(r, &most_sizes, &max_bytes);
  HAP_TRY(alloc_comm_buffers(r, err));
  if (r->world->size > 1)
    HAP_TRY(measure_p2p(r, err));
  return measure_colls(r, err);
}

hap_status hap_measure_profile(hap_comm *world, hap_dev *dev, const hap_measure_config *cfg,
                               hap_profile **out, hap_err *err) {
  *out = NULL;
  HAP_TRY(hap_measure_check(cfg, err));
  run r = {.world = world, .data = cfg->data != NULL ? cfg->data : world, .dev = dev, .cfg = cfg};
  if (r.data->size != world->size || r.data->rank != world->rank)
    return hap_err_set(err, HAP_EINVAL,
                       "measure: the data communicator is rank %d of %d, world rank %d of %d",
                       r.data->rank, r.data->size, world->rank, world->size);
  hap_status st = run_all(&r, err);
  if (st == HAP_OK && r.p != NULL) {
    st = hap_profile_compute_stats(r.p, err);
    if (st == HAP_OK)
      st = hap_profile_fit_rel(r.p, err);
  }
  if (st == HAP_OK && r.p != NULL) {
    /* the library and device details every rank reported, from rank 0's view */
    st = hap_profile_set_env(r.p, "hap.blas", r.recs[0].library, err);
    if (st == HAP_OK && strncmp(r.recs[0].library, "OpenBLAS", 8) == 0) {
      char core[160]; /* who chose the kernel set (exec/blas_core.h) */
      hap_blas_core_describe(core, sizeof core);
      st = hap_profile_set_env(r.p, "hap.blas_core", core, err);
    }
    char v[32];
    snprintf(v, sizeof v, "%d", r.recs[0].threads);
    if (st == HAP_OK)
      st = hap_profile_set_env(r.p, "hap.threads_per_rank", v, err);
  }
  if (st == HAP_OK && r.p != NULL) {
    *out = r.p;
    r.p = NULL;
  }
  dev->ops->release(dev, r.sendbuf);
  dev->ops->release(dev, r.recvbuf);
  hap_profile_destroy(r.p);
  free(r.samples);
  free((void *)r.flush);
  free(r.krows);
  free(r.recs);
  free(r.host_of);
  free(r.local_of);
  return st;
}
