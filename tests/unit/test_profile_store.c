/* test_profile_store.c — hap-profile: statistics and alpha-beta fits, the HDF5 round trip,
 * malformed and corrupted files (one clear line, nothing printed, no crash), atomic writes,
 * merging per-machine profiles, and loading a profile into the cluster model. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "store/fit.h"
#include "store/profile_show.h"
#include "store/profile_store.h"
#include "test_util.h"

#define PROFILE_DATA HAP_TEST_DATA "/profiles"

/* ---- helpers -------------------------------------------------------------------------------- */

static void copy_file(const char *from, const char *to, long keep_bytes) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  cr_assert(in && out);
  char buf[4096];
  long done = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
    if (keep_bytes >= 0 && done + (long)n > keep_bytes)
      n = (size_t)(keep_bytes - done);
    fwrite(buf, 1, n, out);
    done += (long)n;
    if (keep_bytes >= 0 && done >= keep_bytes)
      break;
  }
  fclose(in);
  cr_assert_eq(fclose(out), 0);
}

static long file_size(const char *path) {
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s", path);
  return (long)st.st_size;
}

/* Everything written to stdout and stderr between begin and end goes to a temporary file. */
typedef struct capture {
  int saved_out, saved_err, fd;
  char path[64];
} capture;

static void capture_begin(capture *c) {
  fflush(stdout);
  fflush(stderr);
  snprintf(c->path, sizeof c->path, "/tmp/hap_test_capture.XXXXXX");
  c->fd = mkstemp(c->path);
  cr_assert_geq(c->fd, 0);
  c->saved_out = dup(1);
  c->saved_err = dup(2);
  dup2(c->fd, 1);
  dup2(c->fd, 2);
}

/* Bytes printed since capture_begin. */
static long capture_end(capture *c) {
  fflush(stdout);
  fflush(stderr);
  dup2(c->saved_out, 1);
  dup2(c->saved_err, 2);
  close(c->saved_out);
  close(c->saved_err);
  close(c->fd);
  long n = file_size(c->path);
  unlink(c->path);
  return n;
}

/* ---- a sample profile: hosts v100-0 and p100-0, two devices each ---------------------------- */

static const int64_t sweep_sizes[] = {8, 1024, 65536, 1048576, 16777216};
#define N_SIZES 5

static void add_device(hap_profile *p, const char *name, const char *host, const char *model,
                       double speed) {
  hap_err err = {0};
  int32_t i;
  cr_assert_eq(hap_profile_add_device(p, name, host, model, HAP_DEVICE_GPU, &i, &err), HAP_OK, "%s",
               err.msg);
  hap_profile_device *d = &p->devices[i];
  d->memory_bytes = (int64_t)16 << 30;
  d->memory_bw_Bps = 800e9 * speed;
  d->launch_s = 4.5e-6;
  d->update_bw_Bps = speed < 1 ? 0 : 700e9; /* measured on some devices only (format 2.1) */
  d->peak_flops[HAP_F32] = 15.7e12 * speed;
  d->peak_flops[HAP_F16] = 125e12 * speed;
  const int64_t dims[][3] = {{1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 1024, 4096}};
  for (int r = 0; r < 3; r++) {
    hap_profile_gemm g = {dims[r][0], dims[r][1], dims[r][2], r == 1 ? HAP_F16 : HAP_F32, 0, 0};
    g.flops_per_s = (r == 1 ? 90e12 : 12e12 + 1e12 * r) * speed;
    g.seconds = 2.0 * (double)g.m * (double)g.n * (double)g.k / g.flops_per_s;
    cr_assert_eq(hap_profile_add_gemm(d, &g, &err), HAP_OK, "%s", err.msg);
  }
  hap_profile_kernel k = {
      HAP_OP_LINEAR,  false, 0xfeedbeef12345678ULL, "[64, 1024] x [4096, 1024]", 1.25e-4 / speed,
      1.5e-4 / speed, 20};
  cr_assert_eq(hap_profile_add_kernel(d, &k, &err), HAP_OK, "%s", err.msg);
  k = (hap_profile_kernel){HAP_OP_GELU, true, 42, "[64, 4096]", 2e-5 / speed, 2.5e-5 / speed, 50};
  cr_assert_eq(hap_profile_add_kernel(d, &k, &err), HAP_OK, "%s", err.msg);
  k = (hap_profile_kernel){
      HAP_OP_LINEAR, true, 7, "[64, 1024] x [4096, 1024]", 2.5e-4 / speed, 2.75e-4 / speed, 20,
      2.6e-4 / speed}; /* a replayed row: its price */
  cr_assert_eq(hap_profile_add_kernel(d, &k, &err), HAP_OK, "%s", err.msg);
}

/* Sample r of size i: alpha + S / beta, spread symmetrically over the repetitions (within 1%),
 * so the median is alpha + S / beta up to rounding. */
static void fill_sweep(const int64_t *sizes, double *samples, int32_t reps, double alpha_s,
                       double beta_Bps, int64_t *out_sizes) {
  for (int i = 0; i < N_SIZES; i++) {
    out_sizes[i] = sizes[i];
    double t = alpha_s + (double)sizes[i] / beta_Bps;
    for (int r = 0; r < reps; r++)
      samples[i * reps + r] = t * (1.0 + 0.01 * (r - (reps - 1) / 2.0) / reps);
  }
}

static void add_p2p(hap_profile *p, int32_t src, int32_t dst, double alpha_s, double beta_Bps) {
  hap_err err = {0};
  int32_t j;
  cr_assert_eq(hap_profile_add_p2p(p, src, dst, N_SIZES, 3, &j, &err), HAP_OK, "%s", err.msg);
  hap_profile_p2p *s = &p->p2p[j];
  fill_sweep(sweep_sizes, s->samples_s, s->reps, alpha_s, beta_Bps, s->sizes_bytes);
  s->warmup = 5;
  s->iters = 20;
}

static void add_coll(hap_profile *p, hap_coll_kind kind, const char *group, const int32_t *ranks,
                     int32_t n, double alpha_s, double beta_Bps) {
  hap_err err = {0};
  int32_t j;
  cr_assert_eq(hap_profile_add_coll(p, kind, group, ranks, n, N_SIZES, 4, &j, &err), HAP_OK, "%s",
               err.msg);
  hap_profile_coll *c = &p->colls[j];
  fill_sweep(sweep_sizes, c->samples_s, c->reps, alpha_s, beta_Bps, c->sizes_bytes);
  c->warmup = 5;
  c->iters = 20;
}

static void finish(hap_profile *p) {
  hap_err err = {0};
  cr_assert_eq(hap_profile_compute_stats(p, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_profile_fit(p, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_profile_validate(p, &err), HAP_OK, "%s", err.msg);
}

static hap_profile *sample_profile(void) {
  hap_profile *p = hap_profile_create();
  cr_assert_not_null(p);
  hap_err err = {0};
  cr_assert_eq(
      hap_profile_set_meta(p, "2025-01-31T12:00:00Z", "hap-profile 0.1.0", "cuda+nccl", &err),
      HAP_OK);
  cr_assert_eq(hap_profile_add_host(p, "v100-0", &err), HAP_OK);
  cr_assert_eq(hap_profile_add_host(p, "p100-0", &err), HAP_OK);
  add_device(p, "v100-0:0", "v100-0", "Tesla V100-SXM2-16GB", 1.0);
  add_device(p, "v100-0:1", "v100-0", "Tesla V100-SXM2-16GB", 1.0);
  add_device(p, "p100-0:0", "p100-0", "Tesla P100-PCIE-16GB", 0.6);
  add_device(p, "p100-0:1", "p100-0", "Tesla P100-PCIE-16GB", 0.6);
  add_p2p(p, 0, 1, 8e-6, 40e9);  /* NVLink */
  add_p2p(p, 0, 2, 25e-6, 10e9); /* across hosts */
  const int32_t world[] = {0, 1, 2, 3}, host0[] = {0, 1}, cross[] = {0, 2};
  add_coll(p, HAP_COLL_ALL_REDUCE, "world", world, 4, 50e-6, 5e9);
  add_coll(p, HAP_COLL_ALL_REDUCE, "host:v100-0", host0, 2, 15e-6, 30e9);
  add_coll(p, HAP_COLL_ALL_GATHER, "cross-host", cross, 2, 30e-6, 9e9);
  const char *env[][2] = {{"NCCL_DEBUG", "INFO"},
                          {"CUDA_VISIBLE_DEVICES", "0,1"},
                          {"OPENBLAS_NUM_THREADS", "1"},
                          {"nccl.version", "2.18.3"}};
  for (int i = 0; i < 4; i++)
    cr_assert_eq(hap_profile_set_env(p, env[i][0], env[i][1], &err), HAP_OK);
  finish(p);
  return p;
}

static void write_ok(const hap_profile *p, const char *path) {
  hap_err err = {0};
  cr_assert_eq(hap_profile_write(p, path, &err), HAP_OK, "%s", err.msg);
}

static hap_profile *read_ok(const char *path) {
  hap_err err = {0};
  hap_profile *p = NULL;
  cr_assert_eq(hap_profile_read(path, &p, &err), HAP_OK, "%s", err.msg);
  cr_assert_not_null(p);
  return p;
}

/* ---- exact comparison ----------------------------------------------------------------------- */

static void same_doubles(const double *a, const double *b, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++)
    cr_assert(a[i] == b[i] && signbit(a[i]) == signbit(b[i]), "%s[%lld]: %.17g != %.17g", what,
              (long long)i, a[i], b[i]);
}

static void same_fit(const hap_ab_fit *a, const hap_ab_fit *b, const char *what) {
  cr_assert_eq(a->n_pieces, b->n_pieces, "%s: pieces", what);
  same_doubles(a->upper_bytes, b->upper_bytes, a->n_pieces, what);
  same_doubles(a->alpha_s, b->alpha_s, a->n_pieces, what);
  same_doubles(a->beta_Bps, b->beta_Bps, a->n_pieces, what);
}

static void same_device(const hap_profile_device *a, const hap_profile_device *b) {
  cr_assert_str_eq(a->name, b->name);
  cr_assert_str_eq(a->host, b->host);
  cr_assert_str_eq(a->model, b->model);
  cr_assert_eq(a->kind, b->kind);
  cr_assert_eq(a->memory_bytes, b->memory_bytes);
  same_doubles(&a->memory_bw_Bps, &b->memory_bw_Bps, 1, "memory_bw_Bps");
  same_doubles(&a->launch_s, &b->launch_s, 1, "launch_s");
  same_doubles(&a->update_bw_Bps, &b->update_bw_Bps, 1, "update_bw_Bps");
  same_doubles(a->peak_flops, b->peak_flops, HAP_DTYPE_COUNT, "peak_flops");
  cr_assert_eq(a->n_gemm, b->n_gemm);
  for (int32_t r = 0; r < a->n_gemm; r++) {
    const hap_profile_gemm *x = &a->gemm[r], *y = &b->gemm[r];
    cr_assert(x->m == y->m && x->n == y->n && x->k == y->k && x->dtype == y->dtype);
    same_doubles(&x->seconds, &y->seconds, 1, "gemm seconds");
    same_doubles(&x->flops_per_s, &y->flops_per_s, 1, "gemm flops_per_s");
  }
  cr_assert_eq(a->n_kernels, b->n_kernels);
  for (int32_t r = 0; r < a->n_kernels; r++) {
    const hap_profile_kernel *x = &a->kernels[r], *y = &b->kernels[r];
    cr_assert(x->op == y->op && x->backward == y->backward && x->shape_key == y->shape_key);
    cr_assert_str_eq(x->shape, y->shape);
    same_doubles(&x->p50_s, &y->p50_s, 1, "kernel p50_s");
    same_doubles(&x->p95_s, &y->p95_s, 1, "kernel p95_s");
    same_doubles(&x->mean_s, &y->mean_s, 1, "kernel mean_s");
    cr_assert_eq(x->reps, y->reps);
  }
}

static void same_sweep(int32_t n, int32_t reps, const int64_t *sa, const int64_t *sb,
                       const double *const a[], const double *const b[], int n_arrays) {
  cr_assert_arr_eq(sa, sb, (size_t)n * sizeof *sa);
  same_doubles(a[0], b[0], (int64_t)n * reps, "samples_s");
  for (int k = 1; k < n_arrays; k++)
    same_doubles(a[k], b[k], n, "per-size array");
}

static void same_profile(const hap_profile *a, const hap_profile *b) {
  cr_assert_eq(a->version_major, b->version_major);
  cr_assert_eq(a->version_minor, b->version_minor);
  cr_assert_str_eq(a->created, b->created);
  cr_assert_str_eq(a->tool, b->tool);
  cr_assert_str_eq(a->backend, b->backend);
  cr_assert_eq(a->n_hosts, b->n_hosts);
  for (int32_t h = 0; h < a->n_hosts; h++)
    cr_assert_str_eq(a->hosts[h], b->hosts[h]);
  cr_assert_eq(a->n_env, b->n_env);
  for (int32_t i = 0; i < a->n_env; i++) {
    cr_assert_str_eq(a->env[i].key, b->env[i].key);
    cr_assert_str_eq(a->env[i].value, b->env[i].value);
  }
  cr_assert_eq(a->n_devices, b->n_devices);
  for (int32_t i = 0; i < a->n_devices; i++)
    same_device(&a->devices[i], &b->devices[i]);
  cr_assert_eq(a->n_p2p, b->n_p2p);
  for (int32_t j = 0; j < a->n_p2p; j++) {
    const hap_profile_p2p *x = &a->p2p[j], *y = &b->p2p[j];
    cr_assert(x->src == y->src && x->dst == y->dst && x->n_sizes == y->n_sizes &&
              x->reps == y->reps && x->warmup == y->warmup && x->iters == y->iters);
    const double *ax[] = {x->samples_s, x->p50_s, x->p95_s};
    const double *ay[] = {y->samples_s, y->p50_s, y->p95_s};
    same_sweep(x->n_sizes, x->reps, x->sizes_bytes, y->sizes_bytes, ax, ay, 3);
    same_doubles(&x->fit.latency_s, &y->fit.latency_s, 1, "latency_s");
    same_doubles(&x->fit.bandwidth_Bps, &y->fit.bandwidth_Bps, 1, "bandwidth_Bps");
    same_fit(&x->pieces, &y->pieces, "p2p pieces");
  }
  cr_assert_eq(a->n_colls, b->n_colls);
  for (int32_t j = 0; j < a->n_colls; j++) {
    const hap_profile_coll *x = &a->colls[j], *y = &b->colls[j];
    cr_assert(x->kind == y->kind && x->n_sizes == y->n_sizes && x->reps == y->reps &&
              x->warmup == y->warmup && x->iters == y->iters && x->n_ranks == y->n_ranks);
    cr_assert_str_eq(x->group, y->group);
    cr_assert_arr_eq(x->ranks, y->ranks, (size_t)x->n_ranks * sizeof *x->ranks);
    const double *ax[] = {x->samples_s, x->p50_s, x->p95_s, x->algbw_Bps, x->busbw_Bps};
    const double *ay[] = {y->samples_s, y->p50_s, y->p95_s, y->algbw_Bps, y->busbw_Bps};
    same_sweep(x->n_sizes, x->reps, x->sizes_bytes, y->sizes_bytes, ax, ay, 5);
    same_fit(&x->fit, &y->fit, "piecewise fit");
  }
}

/* ---- statistics and fits -------------------------------------------------------------------- */

Test(fit, busbw_factors_are_nccl_tests) {
  cr_assert_float_eq(hap_busbw_factor(HAP_COLL_ALL_REDUCE, 8), 2.0 * 7 / 8, 1e-15);
  cr_assert_float_eq(hap_busbw_factor(HAP_COLL_ALL_GATHER, 8), 7.0 / 8, 1e-15);
  cr_assert_float_eq(hap_busbw_factor(HAP_COLL_REDUCE_SCATTER, 4), 3.0 / 4, 1e-15);
  cr_assert_float_eq(hap_busbw_factor(HAP_COLL_ALL_TO_ALL, 16), 15.0 / 16, 1e-15);
  cr_assert_eq(hap_busbw_factor(HAP_COLL_BROADCAST, 5), 1.0);
  cr_assert_eq(hap_busbw_factor(HAP_COLL_ALL_REDUCE, 1), 0.0);
  cr_assert_eq(hap_busbw_factor(HAP_COLL_ALL_REDUCE, 0), 0.0);
}

Test(fit, quantiles_interpolate_linearly) {
  const double x[] = {4, 1, 3, 2, 5};
  double p50, p95;
  cr_assert_eq(hap_p50_p95(x, 5, &p50, &p95), HAP_OK);
  cr_assert_eq(p50, 3.0);
  cr_assert_float_eq(p95, 4.8, 1e-12); /* position 0.95 * 4 = 3.8 */
  const double one = 7;
  cr_assert_eq(hap_p50_p95(&one, 1, &p50, &p95), HAP_OK);
  cr_assert(p50 == 7 && p95 == 7);
  const double two[] = {1, 2};
  cr_assert_eq(hap_p50_p95(two, 2, &p50, &p95), HAP_OK);
  cr_assert_float_eq(p50, 1.5, 1e-15);
  cr_assert_eq(hap_p50_p95(two, 0, &p50, &p95), HAP_EINVAL);
}

/* One stall among twenty samples moves the 5 % trimmed mean not at all, the plain mean
 * fifty-fold; trimming works from each end of the sorted samples, at least one value from each end
 * of three or more. The replay's price is the plain mean (HAP_PRICE_TRIM 0): a run's mean
 * iteration counts its stalls too. */
Test(fit, trimmed_mean_drops_each_end) {
  double x[20];
  for (int i = 0; i < 20; i++)
    x[i] = 1;
  x[3] = 1000; /* a descheduled rank */
  x[11] = 0.5;
  double m = 0;
  cr_assert_eq(hap_trimmed_mean(x, 20, 0.05, &m), HAP_OK);
  cr_assert_eq(m, 1.0);
  cr_assert_eq(hap_trimmed_mean(x, 20, HAP_PRICE_TRIM, &m), HAP_OK);
  cr_assert_float_eq(m, (18 + 1000 + 0.5) / 20, 1e-12);
  cr_assert_eq(x[3], 1000, "x is not modified");
  const double y[] = {5, 1, 4, 2, 3};
  cr_assert_eq(hap_trimmed_mean(y, 5, 0.2, &m), HAP_OK);
  cr_assert_eq(m, 3.0, "mean of 2, 3, 4");
  cr_assert_eq(hap_trimmed_mean(y, 5, 0.05, &m), HAP_OK); /* ceil(0.25): one from each end */
  cr_assert_eq(m, 3.0);
  cr_assert_eq(hap_trimmed_mean(y, 2, 0.05, &m), HAP_OK); /* two values: none cut */
  cr_assert_eq(m, 3.0, "mean of 5 and 1");
  cr_assert_eq(hap_trimmed_mean(y, 4, 0.3, &m), HAP_OK); /* ceil(1.2) = 2, at most 1 */
  cr_assert_eq(m, 3.0, "mean of 2 and 4");
  cr_assert_eq(hap_trimmed_mean(y, 1, 0.49, &m), HAP_OK);
  cr_assert_eq(m, 5.0);
  cr_assert_eq(hap_trimmed_mean(y, 0, 0.05, &m), HAP_EINVAL);
  cr_assert_eq(hap_trimmed_mean(y, 5, 0.5, &m), HAP_EINVAL);
  cr_assert_eq(hap_trimmed_mean(y, 5, NAN, &m), HAP_EINVAL);
}

Test(fit, stats_match_hand_computed_nccl_tests_values) {
  hap_profile *p = hap_profile_create();
  hap_err err = {0};
  const int32_t ranks[] = {0, 1, 2, 3};
  int32_t j;
  cr_assert_eq(hap_profile_add_coll(p, HAP_COLL_ALL_REDUCE, "world", ranks, 4, 2, 5, &j, &err),
               HAP_OK);
  hap_profile_coll *c = &p->colls[j];
  c->sizes_bytes[0] = 1 << 20;
  c->sizes_bytes[1] = 1 << 30;
  const double t[] = {4e-3, 1e-3, 3e-3, 2e-3, 5e-3};
  for (int r = 0; r < 5; r++) {
    c->samples_s[r] = t[r];
    c->samples_s[5 + r] = 100 * t[r];
  }
  cr_assert_eq(hap_profile_add_coll(p, HAP_COLL_ALL_GATHER, "pair", ranks, 2, 1, 1, &j, &err),
               HAP_OK);
  p->colls[j].sizes_bytes[0] = 1000;
  p->colls[j].samples_s[0] = 1e-6;
  cr_assert_eq(hap_profile_compute_stats(p, &err), HAP_OK, "%s", err.msg);
  c = &p->colls[0];
  cr_assert_float_eq(c->p50_s[0], 3e-3, 1e-18);
  cr_assert_float_eq(c->p95_s[0], 4.8e-3, 1e-15);
  /* all-reduce, 4 ranks, 1 MiB in 3 ms: algbw = 2^20 / 3e-3 B/s, busbw = algbw * 2 * 3 / 4 */
  cr_assert_float_eq(c->algbw_Bps[0], 1048576 / 3e-3, 1e-3);
  cr_assert_float_eq(c->busbw_Bps[0], 1048576 / 3e-3 * 1.5, 1e-3);
  cr_assert_float_eq(c->algbw_Bps[1], 1073741824 / 0.3, 1e-3);
  cr_assert_float_eq(c->busbw_Bps[1], 1073741824 / 0.3 * 1.5, 1e-3);
  /* all-gather, 2 ranks, 1000 B in 1 us: algbw 1e9, busbw 1e9 * 1/2 */
  cr_assert_float_eq(p->colls[1].algbw_Bps[0], 1e9, 1e-3);
  cr_assert_float_eq(p->colls[1].busbw_Bps[0], 0.5e9, 1e-3);
  /* a non-positive sample is refused with its place */
  p->colls[1].samples_s[0] = -1;
  cr_assert_eq(hap_profile_compute_stats(p, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "/collectives/all_gather/pair: samples_s[0][0] is -1"), "%s", err.msg);
  hap_profile_destroy(p);
}

static double rel(double got, double want) { return fabs(got - want) / fabs(want); }

Test(fit, alpha_beta_recovers_exact_data) {
  double s[28], t[28], alpha, beta;
  for (int i = 0; i < 28; i++) {
    s[i] = ldexp(1.0, i + 3); /* 8 B .. 1 GiB */
    t[i] = 7.5e-6 + s[i] / 12.5e9;
  }
  cr_assert_eq(hap_fit_alpha_beta(s, t, 28, &alpha, &beta), HAP_OK);
  cr_assert_lt(rel(alpha, 7.5e-6), 1e-9, "alpha %.17g", alpha);
  cr_assert_lt(rel(beta, 12.5e9), 1e-9, "beta %.17g", beta);
}

Test(fit, alpha_beta_from_noisy_data_within_a_few_percent) {
  enum { N = 256 };
  double s[N], t[N], alpha, beta;
  uint64_t state = 12345;
  for (int i = 0; i < N; i++) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(state >> 11) / 9007199254740992.0;   /* [0, 1) */
    s[i] = 4096.0 * (i + 1);                                 /* 4 KiB .. 1 MiB */
    t[i] = (20e-6 + s[i] / 10e9) * (1.0 + 0.02 * (u - 0.5)); /* +-1 % */
  }
  cr_assert_eq(hap_fit_alpha_beta(s, t, N, &alpha, &beta), HAP_OK);
  cr_assert_lt(rel(alpha, 20e-6), 0.03, "alpha %g", alpha);
  cr_assert_lt(rel(beta, 10e9), 0.03, "beta %g", beta);
}

Test(fit, alpha_beta_edge_rules) {
  double alpha, beta;
  const double s1[] = {1e6}, t1[] = {1e-3};
  cr_assert_eq(hap_fit_alpha_beta(s1, t1, 1, &alpha, &beta), HAP_OK);
  cr_assert(alpha == 0 && beta == 1e9);
  const double s2[] = {8, 16, 32}, t2[] = {3e-6, 2e-6, 1e-6}; /* time falls with size */
  cr_assert_eq(hap_fit_alpha_beta(s2, t2, 3, &alpha, &beta), HAP_OK);
  cr_assert(alpha >= 0 && isfinite(beta) && beta > 0);
  const double s3[] = {1e3, 1e6}, t3[] = {1e-7, 1e-3}; /* intercept < 0: through the origin */
  cr_assert_eq(hap_fit_alpha_beta(s3, t3, 2, &alpha, &beta), HAP_OK);
  cr_assert(alpha == 0 && beta > 0);
  const double zero[] = {0, 0}, tz[] = {1e-6, 2e-6};
  cr_assert_eq(hap_fit_alpha_beta(zero, tz, 2, &alpha, &beta), HAP_EINVAL);
  const double bad[] = {NAN, 1};
  cr_assert_eq(hap_fit_alpha_beta(s3, bad, 2, &alpha, &beta), HAP_EINVAL);
  cr_assert_eq(hap_fit_alpha_beta(s3, t3, 0, &alpha, &beta), HAP_EINVAL);
}

Test(fit, piecewise_finds_the_protocol_switch) {
  enum { N = 26 };
  double s[N], t[N];
  for (int i = 0; i < N; i++) {
    s[i] = ldexp(1.0, i + 3); /* 8 B .. 256 MiB */
    t[i] = s[i] < 65536 ? 2e-6 + s[i] / 2e9 : 20e-6 + s[i] / 20e9;
  }
  hap_piecewise_fit f;
  cr_assert_eq(hap_fit_piecewise(s, t, N, &f), HAP_OK);
  cr_assert_eq(f.threshold_bytes, 65536.0);
  cr_assert_lt(rel(f.alpha_small_s, 2e-6), 1e-9);
  cr_assert_lt(rel(f.beta_small_Bps, 2e9), 1e-9);
  cr_assert_lt(rel(f.alpha_large_s, 20e-6), 1e-9);
  cr_assert_lt(rel(f.beta_large_Bps, 20e9), 1e-9);
  cr_assert_lt(hap_piecewise_max_rel_error(&f, s, t, N), 1e-9);
  /* one regime: one piece */
  for (int i = 0; i < N; i++)
    t[i] = 5e-6 + s[i] / 8e9;
  cr_assert_eq(hap_fit_piecewise(s, t, N, &f), HAP_OK);
  cr_assert_eq(f.threshold_bytes, 0.0);
  cr_assert(f.alpha_small_s == f.alpha_large_s && f.beta_small_Bps == f.beta_large_Bps);
  cr_assert_lt(rel(f.beta_large_Bps, 8e9), 1e-9);
  /* sizes must increase */
  s[3] = s[2];
  cr_assert_eq(hap_fit_piecewise(s, t, N, &f), HAP_EINVAL);
}

/* ---- round trip ----------------------------------------------------------------------------- */

/* hap_profile_show_sweeps's text. Caller frees. */
static char *show_text(const hap_profile *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  hap_profile_show_sweeps(f, p);
  fclose(f);
  return buf;
}

Test(profile_show, fits_that_follow_their_sweeps_are_not_flagged) {
  hap_profile *p = sample_profile();
  char *text = show_text(p);
  cr_expect_not_null(strstr(text, "fit miss"), "%s", text);
  cr_expect_null(strstr(text, " !"), "a flag on exact alpha-beta sweeps:\n%s", text);
  cr_expect_null(strstr(text, "\n! "), "%s", text);
  free(text);
  hap_profile_destroy(p);
}

Test(profile_show, a_fit_that_misses_a_measured_size_is_flagged) {
  hap_profile *p = sample_profile();
  /* the world all-reduce's stored fit says 12x its bandwidth (as a quick profile's fit can for
   * the sizes past its last regime change): at 16 MiB it misses by about 90 % */
  hap_profile_coll *c = &p->colls[0];
  cr_assert_eq(c->kind, HAP_COLL_ALL_REDUCE);
  c->fit = hap_ab_fit_one(50e-6, 60e9);
  char *text = show_text(p);
  cr_expect_not_null(strstr(text, "! all_reduce over world: its fit misses "), "%s", text);
  cr_expect_null(strstr(text, "! all_reduce over host:v100-0"), "%s", text);
  char *row = strstr(text, "all_reduce      world");
  cr_assert_not_null(row, "%s", text);
  char *eol = strchr(row, '\n');
  cr_assert_not_null(eol);
  cr_expect(eol - row >= 2 && eol[-1] == '!' && eol[-2] == ' ', "no ' !' cell: %.*s",
            (int)(eol - row), row);
  free(text);
  hap_profile_destroy(p);
}

Test(profile, round_trip_is_exact) {
  char *dir = tmpdir_make("profile");
  char *path = path_in(dir, "profile.h5");
  hap_profile *p = sample_profile();
  write_ok(p, path);
  cr_assert_eq(count_entries(dir), 1, "the temporary file was left behind");
  hap_profile *q = read_ok(path);
  same_profile(p, q);
  cr_assert_str_eq(q->source, path);
  cr_assert_str_eq(hap_profile_get_env(q, "NCCL_DEBUG"), "INFO");
  cr_assert_not_null(hap_profile_find_coll(q, HAP_COLL_ALL_GATHER, "cross-host"));
  cr_assert_not_null(hap_profile_find_p2p(q, 0, 2));
  /* writing what was read gives the same profile again, over the old file */
  write_ok(q, path);
  hap_profile *r = read_ok(path);
  same_profile(p, r);
  hap_profile_destroy(p);
  hap_profile_destroy(q);
  hap_profile_destroy(r);
  free(path);
  rm_tree(dir);
}

Test(profile, fits_recover_the_sample_links) {
  hap_profile *p = sample_profile();
  /* p50 is the middle repetition, exactly alpha + S / beta */
  cr_assert_lt(rel(p->p2p[0].fit.latency_s, 8e-6), 1e-6);
  cr_assert_lt(rel(p->p2p[0].fit.bandwidth_Bps, 40e9), 1e-6);
  const hap_profile_coll *w = hap_profile_find_coll(p, HAP_COLL_ALL_REDUCE, "world");
  cr_assert_not_null(w);
  cr_assert_lt(rel(hap_ab_fit_time(&w->fit, 1 << 20), 50e-6 + 1048576 / 5e9), 1e-6);
  cr_assert_float_eq(w->busbw_Bps[4], w->algbw_Bps[4] * 1.5, 1e-3);
  hap_profile_destroy(p);
}

Test(profile, hdf5_error_printing_is_off_after_use) {
  hap_profile *p = NULL;
  hap_err err = {0};
  cr_assert_neq(hap_profile_read(PROFILE_DATA "/not-hdf5.h5", &p, &err), HAP_OK);
  H5E_auto2_t fn = (H5E_auto2_t)1;
  void *data = NULL;
  H5Eget_auto2(H5E_DEFAULT, &fn, &data);
  cr_assert_null(fn);
}

/* ---- writes that fail leave nothing behind -------------------------------------------------- */

Test(profile, failed_writes_leave_no_file) {
  char *dir = tmpdir_make("profile");
  hap_profile *p = sample_profile();
  hap_err err = {0};
  char *missing = path_in(dir, "no/such/dir/profile.h5");
  capture cap;
  capture_begin(&cap);
  hap_status st = hap_profile_write(p, missing, &err);
  long printed = capture_end(&cap);
  cr_assert_eq(st, HAP_EIO);
  cr_assert(strstr(err.msg, missing) && strstr(err.msg, "No such file"), "%s", err.msg);
  cr_assert_eq(printed, 0);
  cr_assert_eq(count_entries(dir), 0);
  /* an invalid profile is refused before anything is created */
  char *path = path_in(dir, "p.h5");
  double keep = p->colls[2].fit.beta_Bps[p->colls[2].fit.n_pieces - 1];
  p->colls[2].fit.beta_Bps[p->colls[2].fit.n_pieces - 1] = NAN;
  hap_err_clear(&err);
  cr_assert_eq(hap_profile_write(p, path, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "p.h5: /collectives/all_gather/cross-host: fit_beta_Bps["), "%s",
            err.msg);
  cr_assert(strstr(err.msg, "is nan, expected a finite bandwidth > 0 bytes/s"), "%s", err.msg);
  cr_assert_eq(count_entries(dir), 0);
  p->colls[2].fit.beta_Bps[p->colls[2].fit.n_pieces - 1] = keep;
  p->p2p[1].dst = 0;
  hap_err_clear(&err);
  cr_assert_eq(hap_profile_write(p, path, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "/p2p/0-0: src 0, dst 0"), "%s", err.msg);
  cr_assert_eq(count_entries(dir), 0);
  hap_profile_destroy(p);
  free(missing);
  free(path);
  rm_tree(dir);
}

/* ---- malformed files ------------------------------------------------------------------------ */

typedef void (*mutator)(hid_t file);

/* Copy the good file to `name` in dir and apply `m` to it through the HDF5 API. */
static char *mutated(const char *dir, const char *good, const char *name, mutator m) {
  char *path = path_in(dir, name);
  copy_file(good, path, -1);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  cr_assert_geq(f, 0);
  m(f);
  cr_assert_geq(H5Fclose(f), 0);
  return path;
}

static void set_str_attr(hid_t loc, const char *name, const char *value) {
  if (H5Aexists(loc, name) > 0)
    cr_assert_geq(H5Adelete(loc, name), 0);
  hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  cr_assert_geq(a, 0);
  cr_assert_geq(H5Awrite(a, t, &value), 0);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

/* (H5Aopen_by_name + H5Awrite fails on densely stored attributes in HDF5 1.10: open the object.) */
static void set_f64_attr(hid_t f, const char *obj, const char *name, double v) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  hid_t a = H5Aopen(o, name, H5P_DEFAULT);
  cr_assert_geq(a, 0);
  cr_assert_geq(H5Awrite(a, H5T_NATIVE_DOUBLE, &v), 0);
  H5Aclose(a);
  H5Oclose(o);
}

/* Replace dataset `path` with a new one of the given type and dims (filled with ones). */
static void replace_dataset(hid_t f, const char *path, hid_t type, int rank, const hsize_t *dims) {
  cr_assert_geq(H5Ldelete(f, path, H5P_DEFAULT), 0);
  hid_t s = H5Screate_simple(rank, dims, NULL);
  hid_t d = H5Dcreate2(f, path, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  cr_assert_geq(d, 0);
  hsize_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  double *ones = malloc(n * sizeof *ones);
  for (hsize_t i = 0; i < n; i++)
    ones[i] = 1;
  cr_assert_geq(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, ones), 0);
  free(ones);
  H5Dclose(d);
  H5Sclose(s);
}

static void m_format(hid_t f) { set_str_attr(f, "format", "hap-graph"); }
static void m_version(hid_t f) { set_str_attr(f, "version", "3.0"); }
static void m_version_junk(hid_t f) { set_str_attr(f, "version", "one"); }
static void m_no_p2p(hid_t f) { cr_assert_geq(H5Ldelete(f, "/p2p", H5P_DEFAULT), 0); }
static void m_no_device(hid_t f) { cr_assert_geq(H5Ldelete(f, "/devices/1", H5P_DEFAULT), 0); }
static void m_no_samples(hid_t f) {
  cr_assert_geq(H5Ldelete(f, "/collectives/all_reduce/world/samples_s", H5P_DEFAULT), 0);
}
static void m_no_attr(hid_t f) {
  cr_assert_geq(H5Adelete_by_name(f, "/devices/1", "memory_bytes", H5P_DEFAULT), 0);
}
static void m_samples_rank(hid_t f) {
  hsize_t dims[] = {N_SIZES};
  replace_dataset(f, "/collectives/all_reduce/world/samples_s", H5T_IEEE_F64LE, 1, dims);
}
static void m_p50_type(hid_t f) {
  hsize_t dims[] = {N_SIZES};
  replace_dataset(f, "/p2p/0-1/p50_s", H5T_STD_I32LE, 1, dims);
}
static void m_p95_shape(hid_t f) {
  hsize_t dims[] = {N_SIZES + 1};
  replace_dataset(f, "/p2p/0-2/p95_s", H5T_IEEE_F64LE, 1, dims);
}
/* Replace attribute `name` of obj by a float64 array of n values. */
static void set_f64s_attr(hid_t f, const char *obj, const char *name, const double *v, int n) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  cr_assert_geq(o, 0);
  if (H5Aexists(o, name) > 0)
    cr_assert_geq(H5Adelete(o, name), 0);
  hsize_t dim = (hsize_t)n;
  hid_t s = H5Screate_simple(1, &dim, NULL);
  hid_t a = H5Acreate2(o, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  cr_assert_geq(a, 0);
  cr_assert_geq(H5Awrite(a, H5T_NATIVE_DOUBLE, v), 0);
  H5Aclose(a);
  H5Sclose(s);
  H5Oclose(o);
}
/* A three-piece FIT on the world all-reduce: bounds, alphas and betas as given. */
static void set_fit(hid_t f, const double *upper, int nu, const double *alpha, int na,
                    const double *beta, int nb) {
  const char *obj = "/collectives/all_reduce/world";
  set_f64s_attr(f, obj, "fit_upper_bytes", upper, nu);
  set_f64s_attr(f, obj, "fit_alpha_s", alpha, na);
  set_f64s_attr(f, obj, "fit_beta_Bps", beta, nb);
}
static const double good_alpha[3] = {1e-6, 2e-6, 3e-6}, good_beta[3] = {1e9, 2e9, 4e9};
static void m_nan_fit(hid_t f) {
  set_f64s_attr(f, "/collectives/all_reduce/host:v100-0", "fit_beta_Bps", (double[]){NAN}, 1);
}
static void m_fit_not_increasing(hid_t f) {
  set_fit(f, (double[]){8192, 4096, INFINITY}, 3, good_alpha, 3, good_beta, 3);
}
static void m_fit_last_bounded(hid_t f) {
  set_fit(f, (double[]){4096, 65536, 1e9}, 3, good_alpha, 3, good_beta, 3);
}
static void m_fit_negative_alpha(hid_t f) {
  set_fit(f, (double[]){4096, 65536, INFINITY}, 3, (double[]){1e-6, -2e-6, 3e-6}, 3, good_beta, 3);
}
static void m_fit_zero_beta(hid_t f) {
  set_fit(f, (double[]){4096, 65536, INFINITY}, 3, good_alpha, 3, (double[]){1e9, 2e9, 0}, 3);
}
static void m_fit_lengths(hid_t f) {
  set_fit(f, (double[]){4096, 65536, INFINITY}, 3, good_alpha, 2, good_beta, 3);
}
static void m_fit_missing(hid_t f) {
  cr_assert_geq(H5Adelete_by_name(f, "/p2p/0-1", "fit_alpha_s", H5P_DEFAULT), 0);
}
static void m_fit_too_many(hid_t f) {
  double v[9] = {1, 2, 3, 4, 5, 6, 7, 8, INFINITY};
  set_fit(f, v, 9, v, 9, v, 9);
}
static void m_nan_p2p(hid_t f) { set_f64_attr(f, "/p2p/0-2", "latency_s", NAN); }
static void m_format_int(hid_t f) {
  cr_assert_geq(H5Adelete(f, "format"), 0);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, "format", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  int64_t one = 1;
  H5Awrite(a, H5T_NATIVE_INT64, &one);
  H5Aclose(a);
  H5Sclose(s);
}
static void m_bad_rank(hid_t f) {
  hid_t o = H5Oopen(f, "/collectives/all_gather/cross-host", H5P_DEFAULT);
  hid_t a = H5Aopen(o, "ranks", H5P_DEFAULT);
  int64_t ranks[] = {0, 9};
  cr_assert_geq(H5Awrite(a, H5T_NATIVE_INT64, ranks), 0);
  H5Aclose(a);
  H5Oclose(o);
}
static void m_gemm_not_table(hid_t f) {
  hsize_t dims[] = {3};
  replace_dataset(f, "/devices/0/gemm", H5T_IEEE_F64LE, 1, dims);
}
/* Row 0 of /devices/0/kernels gets mean_s -1 (the other members written back as they were). */
static void m_negative_mean(hid_t f) {
  hid_t d = H5Dopen2(f, "/devices/0/kernels", H5P_DEFAULT);
  hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(double));
  cr_assert_geq(H5Tinsert(mt, "mean_s", 0, H5T_NATIVE_DOUBLE), 0);
  double v[3] = {-1, 0, 0};
  cr_assert_geq(H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
  H5Tclose(mt);
  H5Dclose(d);
}
static void m_unknown_host(hid_t f) {
  hid_t g = H5Gopen2(f, "/devices/3", H5P_DEFAULT);
  set_str_attr(g, "host", "a100-9");
  H5Gclose(g);
}

typedef struct bad_case {
  const char *name;
  mutator m;
  hap_status status;
  const char *expect; /* after "<file>: " */
} bad_case;

static const bad_case bad_cases[] = {
    {"format.h5", m_format, HAP_EPARSE, "/: format is \"hap-graph\", expected \"hap-profile\""},
    {"format-int.h5", m_format_int, HAP_EPARSE, "/: attribute format: expected a string"},
    {"version.h5", m_version, HAP_EVERSION,
     "/: version is \"3.0\", this hap reads hap-profile 1.x to 2.x (newer file: upgrade hap)"},
    {"version-junk.h5", m_version_junk, HAP_EPARSE, "/: version is \"one\", expected"},
    {"no-p2p.h5", m_no_p2p, HAP_EPARSE, "/p2p: missing group"},
    {"no-device.h5", m_no_device, HAP_EPARSE,
     "/devices: missing group 1, expected devices numbered 0..2"},
    {"no-samples.h5", m_no_samples, HAP_EPARSE,
     "/collectives/all_reduce/world/samples_s: missing dataset, expected a 2-D float64 dataset"},
    {"no-attr.h5", m_no_attr, HAP_EPARSE, "/devices/1: missing attribute memory_bytes"},
    {"samples-rank.h5", m_samples_rank, HAP_EPARSE,
     "/collectives/all_reduce/world/samples_s: expected a 2-D float64 dataset [sizes × reps], "
     "found a 1-D float dataset"},
    {"p50-type.h5", m_p50_type, HAP_EPARSE,
     "/p2p/0-1/p50_s: expected a 1-D float64 dataset [sizes] = [5], found a 1-D integer dataset"},
    {"p95-shape.h5", m_p95_shape, HAP_EPARSE,
     "/p2p/0-2/p95_s: expected a 1-D float64 dataset [sizes] = [5], found [6]"},
    {"nan-fit.h5", m_nan_fit, HAP_EPARSE,
     "/collectives/all_reduce/host:v100-0: fit_beta_Bps[0] is nan, expected a finite bandwidth > "
     "0 bytes/s"},
    {"fit-order.h5", m_fit_not_increasing, HAP_EPARSE,
     "/collectives/all_reduce/world: fit_upper_bytes[1] is 4096, expected a finite size above "
     "the previous bound (strictly increasing)"},
    {"fit-last.h5", m_fit_last_bounded, HAP_EPARSE,
     "/collectives/all_reduce/world: fit_upper_bytes[2] is 1e+09, expected inf (the last piece "
     "has no upper bound)"},
    {"fit-alpha.h5", m_fit_negative_alpha, HAP_EPARSE,
     "/collectives/all_reduce/world: fit_alpha_s[1] is -2e-06, expected a finite latency >= 0 s"},
    {"fit-beta.h5", m_fit_zero_beta, HAP_EPARSE,
     "/collectives/all_reduce/world: fit_beta_Bps[2] is 0, expected a finite bandwidth > 0 "
     "bytes/s"},
    {"fit-lengths.h5", m_fit_lengths, HAP_EPARSE,
     "/collectives/all_reduce/world: attribute fit_alpha_s: has 2 values, expected 3 (one per "
     "piece, as fit_upper_bytes)"},
    {"fit-missing.h5", m_fit_missing, HAP_EPARSE, "/p2p/0-1: missing attribute fit_alpha_s"},
    {"fit-too-many.h5", m_fit_too_many, HAP_EPARSE,
     "/collectives/all_reduce/world: attribute fit_upper_bytes: expected a 1-D array of 1 to 8 "
     "float64"},
    {"nan-p2p.h5", m_nan_p2p, HAP_EPARSE, "/p2p/0-2: latency_s is nan"},
    {"bad-rank.h5", m_bad_rank, HAP_EPARSE,
     "/collectives/all_gather/cross-host: ranks[1] is 9, expected a device of 0..3"},
    {"gemm.h5", m_gemm_not_table, HAP_EPARSE, "/devices/0/gemm: expected a 1-D compound dataset"},
    {"mean.h5", m_negative_mean, HAP_EPARSE,
     "/devices/0/kernels: row 0: p50_s 0.000125, p95_s 0.00015, mean_s -1, expected finite "
     "numbers >= 0"},
    {"host.h5", m_unknown_host, HAP_EPARSE,
     "/devices/3: host 'a100-9' is not one of the root attribute hosts"},
};

/* What a read in a child process returned. */
typedef struct child_read {
  hap_status st, err_status;
  bool got_profile;
  char msg[sizeof((hap_err *)0)->msg];
} child_read;

/* Read `path` in a child process whose stdout and stderr go to a file; *printed gets the bytes
 * printed. The child ends with H5close() and _exit: output from HDF5's exit-time cleanup is caught
 * too, and HDF5 1.10.8's own leak after a corrupted object header (the buffer of a failed
 * metadata-cache load, H5C_protect) does not trip LeakSanitizer. A crash fails the test. */
static child_read read_in_child(const char *path, long *printed) {
  char out[] = "/tmp/hap_test_child.XXXXXX";
  int fd = mkstemp(out), pfd[2];
  cr_assert(fd >= 0 && pipe(pfd) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(pfd[0]);
    if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
      _exit(4);
    child_read r = {0};
    hap_profile *p = (hap_profile *)1;
    hap_err err = {0};
    r.st = hap_profile_read(path, &p, &err);
    r.got_profile = p != NULL;
    r.err_status = err.status;
    memcpy(r.msg, err.msg, sizeof r.msg);
    hap_profile_destroy(r.got_profile ? p : NULL);
    H5close();
    fflush(stdout);
    fflush(stderr);
    _exit(write(pfd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 5);
  }
  close(pfd[1]);
  child_read r;
  size_t got = 0;
  for (ssize_t n; got < sizeof r && (n = read(pfd[0], (char *)&r + got, sizeof r - got)) > 0;)
    got += (size_t)n;
  close(pfd[0]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "%s: the reader crashed (signal %d)", path, WTERMSIG(status));
  cr_assert_eq(WEXITSTATUS(status), 0);
  cr_assert_eq(got, sizeof r);
  close(fd);
  *printed = file_size(out);
  unlink(out);
  return r;
}

/* Read `path`, expect failure with `status` and "<path>: <expect>" in the message, and that
 * nothing was printed. */
static void expect_bad(const char *path, hap_status status, const char *expect) {
  long printed;
  child_read r = read_in_child(path, &printed);
  cr_assert_eq(printed, 0, "%s: %ld bytes printed", path, printed);
  cr_assert(!r.got_profile);
  cr_assert_eq(r.st, status, "%s: status %s, expected %s: %s", path, hap_status_str(r.st),
               hap_status_str(status), r.msg);
  cr_assert_eq(r.err_status, r.st);
  char want[1200];
  snprintf(want, sizeof want, "%s: %s", path, expect);
  cr_assert(strstr(r.msg, want) != NULL, "got:  %s\nwant: %s", r.msg, want);
  cr_assert_null(strchr(r.msg, '\n'), "more than one line: %s", r.msg);
}

Test(malformed, each_fails_with_one_line_naming_file_and_path) {
  char *dir = tmpdir_make("profile");
  char *good = path_in(dir, "good.h5");
  hap_profile *p = sample_profile();
  write_ok(p, good);
  hap_profile_destroy(p);
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    char *path = mutated(dir, good, bad_cases[i].name, bad_cases[i].m);
    expect_bad(path, bad_cases[i].status, bad_cases[i].expect);
    free(path);
  }
  free(good);
  rm_tree(dir);
}

/* A version 1.0 file: two-piece attributes on the collectives, no FIT on the p2p pairs. */
static void m_as_version_1(hid_t f) {
  set_str_attr(f, "version", "1.0");
  const char *colls[] = {"/collectives/all_reduce/world", "/collectives/all_reduce/host:v100-0",
                         "/collectives/all_gather/cross-host"};
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    const char *names[] = {"fit_upper_bytes", "fit_alpha_s", "fit_beta_Bps"};
    for (int k = 0; k < 3; k++)
      cr_assert_geq(H5Adelete_by_name(f, colls[i], names[k], H5P_DEFAULT), 0);
    const char *old[] = {"threshold_bytes", "alpha_small_s", "beta_small_Bps", "alpha_large_s",
                         "beta_large_Bps"};
    const double v[] = {i == 0 ? 4096 : 0, 1e-6, 1e9, 5e-6, 4e9};
    for (int k = 0; k < 5; k++)
      set_f64s_attr(f, colls[i], old[k], &v[k], 1);
  }
  const char *pairs[] = {"/p2p/0-1", "/p2p/0-2"};
  for (size_t i = 0; i < 2; i++)
    for (int k = 0; k < 3; k++)
      cr_assert_geq(
          H5Adelete_by_name(f, pairs[i],
                            (const char *[]){"fit_upper_bytes", "fit_alpha_s", "fit_beta_Bps"}[k],
                            H5P_DEFAULT),
          0);
}

Test(profile, version_1_two_piece_files_still_load) {
  char *dir = tmpdir_make("profile");
  char *good = path_in(dir, "good.h5");
  hap_profile *p = sample_profile();
  write_ok(p, good);
  hap_profile_destroy(p);
  char *path = mutated(dir, good, "v1.h5", m_as_version_1);
  p = read_ok(path);
  cr_assert_eq(p->version_major, 1);
  const hap_profile_coll *w = hap_profile_find_coll(p, HAP_COLL_ALL_REDUCE, "world");
  cr_assert_eq(w->fit.n_pieces, 2);
  cr_assert(w->fit.upper_bytes[0] == 4096 && isinf(w->fit.upper_bytes[1]));
  cr_assert(w->fit.alpha_s[0] == 1e-6 && w->fit.beta_Bps[1] == 4e9);
  cr_assert_eq(hap_profile_find_coll(p, HAP_COLL_ALL_GATHER, "cross-host")->fit.n_pieces, 1,
               "threshold 0: one piece");
  const hap_profile_p2p *x = hap_profile_find_p2p(p, 0, 1);
  cr_assert(x->pieces.n_pieces == 1 && x->pieces.alpha_s[0] == x->fit.latency_s &&
            x->pieces.beta_Bps[0] == x->fit.bandwidth_Bps);
  /* written again, it is a version 2 file with the same fits */
  char *again = path_in(dir, "again.h5");
  write_ok(p, again);
  hap_profile *q = read_ok(again);
  cr_assert_eq(q->version_major, HAP_PROFILE_VERSION_MAJOR);
  same_fit(&hap_profile_find_coll(q, HAP_COLL_ALL_REDUCE, "world")->fit, &w->fit, "rewritten");
  hap_profile_destroy(q);
  hap_profile_destroy(p);
  free(again);
  free(path);
  free(good);
  rm_tree(dir);
}

Test(malformed, not_hdf5_empty_missing) {
  expect_bad(PROFILE_DATA "/not-hdf5.h5", HAP_EPARSE, "not an HDF5 file");
  expect_bad(PROFILE_DATA "/empty.h5", HAP_EPARSE, "not an HDF5 file");
  expect_bad(PROFILE_DATA "/hap-graph.json", HAP_EPARSE, "not an HDF5 file");
  expect_bad(PROFILE_DATA "/no-such-file.h5", HAP_EIO, "cannot open: No such file");
  expect_bad(PROFILE_DATA, HAP_EIO, "cannot open: not a regular file");
}

Test(malformed, truncated_to_half) {
  char *dir = tmpdir_make("profile");
  char *good = path_in(dir, "good.h5"), *half = path_in(dir, "half.h5");
  hap_profile *p = sample_profile();
  write_ok(p, good);
  hap_profile_destroy(p);
  copy_file(good, half, file_size(good) / 2);
  expect_bad(half, HAP_EPARSE, "cannot open as HDF5, the file is truncated or corrupted");
  free(good);
  free(half);
  rm_tree(dir);
}

/* Overwrite n bytes at `offset` of `path` with `byte`, or XOR them with it. */
static void scribble(const char *path, long offset, int n, unsigned char byte, bool xor_it) {
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  unsigned char buf[512];
  cr_assert_leq(n, (int)sizeof buf);
  cr_assert_eq(fseek(f, offset, SEEK_SET), 0);
  size_t got = fread(buf, 1, (size_t)n, f);
  for (size_t i = 0; i < got; i++)
    buf[i] = xor_it ? buf[i] ^ byte : byte;
  cr_assert_eq(fseek(f, offset, SEEK_SET), 0);
  fwrite(buf, 1, got, f);
  cr_assert_eq(fclose(f), 0);
}

Test(malformed, overwritten_middle) {
  char *dir = tmpdir_make("profile");
  char *good = path_in(dir, "good.h5"), *bad = path_in(dir, "middle.h5");
  hap_profile *p = sample_profile();
  write_ok(p, good);
  hap_profile_destroy(p);
  copy_file(good, bad, -1);
  long size = file_size(bad);
  for (long off = size / 2 - 2048; off < size / 2 + 2048; off += 512)
    scribble(bad, off, 512, 0xff, false);
  long printed;
  child_read r = read_in_child(bad, &printed);
  cr_assert_neq(r.st, HAP_OK);
  cr_assert(!r.got_profile);
  cr_assert_eq(printed, 0);
  cr_assert(strncmp(r.msg, bad, strlen(bad)) == 0 && r.msg[strlen(bad)] == ':', "%s", r.msg);
  cr_assert(strstr(r.msg, ": /") != NULL, "no path in: %s", r.msg);
  free(good);
  free(bad);
  rm_tree(dir);
}

/* The child of flipped_bytes_never_crash: 0 when every read of a corrupted copy either succeeded
 * or failed with one line naming the file, 1 otherwise; 3 when no corruption was noticed. */
static int flip_sweep(const char *good, const char *bad, long size, long step) {
  int failed = 0;
  for (long off = 0; off < size; off += step) {
    copy_file(good, bad, -1);
    scribble(bad, off, 8, 0x5a, true);
    hap_profile *q = NULL;
    hap_err err = {0};
    hap_status st = hap_profile_read(bad, &q, &err);
    if (st != HAP_OK) {
      failed++;
      if (q != NULL || strncmp(err.msg, bad, strlen(bad)) != 0 || strchr(err.msg, '\n') != NULL)
        return 1;
    }
    hap_profile_destroy(q);
  }
  return failed > 0 ? 0 : 3;
}

/* Flip bytes all over the file, in a child process whose stdout and stderr go to a file: no
 * crash, no output, not even from HDF5's exit-time cleanup (H5close). */
Test(malformed, flipped_bytes_never_crash, .timeout = 240) {
  char *dir = tmpdir_make("profile");
  char *good = path_in(dir, "good.h5"), *bad = path_in(dir, "flipped.h5");
  char *out = path_in(dir, "output.txt");
  hap_profile *p = sample_profile();
  write_ok(p, good);
  hap_profile_destroy(p);
  long size = file_size(good);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
      _exit(4);
    int rc = flip_sweep(good, bad, size, size / 157 + 1);
    H5close();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "the reader crashed (signal %d)", WTERMSIG(status));
  cr_assert_eq(WEXITSTATUS(status), 0, "child status %d", WEXITSTATUS(status));
  cr_assert_eq(file_size(out), 0, "something was printed");
  free(good);
  free(bad);
  free(out);
  rm_tree(dir);
}

/* ---- merge ---------------------------------------------------------------------------------- */

/* One machine: host `host` with devices <host>:0 and <host>:1, p2p src -> dst, "world". */
static hap_profile *machine(const char *host, int32_t src, int32_t dst, const char *visible) {
  hap_profile *p = hap_profile_create();
  hap_err err = {0};
  cr_assert_eq(hap_profile_set_meta(p, "2025-02-01T00:00:00Z", NULL, "cuda+nccl", &err), HAP_OK);
  cr_assert_eq(hap_profile_add_host(p, host, &err), HAP_OK);
  char name[64];
  for (int i = 0; i < 2; i++) {
    snprintf(name, sizeof name, "%s:%d", host, i);
    add_device(p, name, host, "Tesla V100-SXM2-16GB", 1.0);
  }
  add_p2p(p, src, dst, 8e-6, 40e9);
  const int32_t world[] = {0, 1};
  add_coll(p, HAP_COLL_ALL_REDUCE, "world", world, 2, 15e-6, 30e9);
  cr_assert_eq(hap_profile_set_env(p, "NCCL_DEBUG", "INFO", &err), HAP_OK);
  cr_assert_eq(hap_profile_set_env(p, "CUDA_VISIBLE_DEVICES", visible, &err), HAP_OK);
  finish(p);
  return p;
}

Test(merge, renumbers_devices_and_remaps_sweeps) {
  hap_profile *a = machine("v100-0", 0, 1, "0,1"), *b = machine("v100-1", 1, 0, "2,3");
  hap_profile *parts[] = {a, b}, *m = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_profile_merge(parts, 2, &m, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(m->n_hosts, 2);
  cr_assert_str_eq(m->hosts[1], "v100-1");
  cr_assert_eq(m->n_devices, 4);
  cr_assert_str_eq(m->devices[2].name, "v100-1:0");
  cr_assert_str_eq(m->devices[3].host, "v100-1");
  same_device(&m->devices[3], &b->devices[1]);
  cr_assert_eq(m->n_p2p, 2);
  cr_assert(m->p2p[0].src == 0 && m->p2p[0].dst == 1);
  cr_assert(m->p2p[1].src == 3 && m->p2p[1].dst == 2);
  same_doubles(m->p2p[1].samples_s, b->p2p[0].samples_s, (int64_t)N_SIZES * 3, "merged samples");
  cr_assert_eq(m->n_colls, 2);
  const hap_profile_coll *w0 = hap_profile_find_coll(m, HAP_COLL_ALL_REDUCE, "world");
  const hap_profile_coll *w1 = hap_profile_find_coll(m, HAP_COLL_ALL_REDUCE, "world@v100-1");
  cr_assert(w0 && w1);
  cr_assert(w0->ranks[0] == 0 && w0->ranks[1] == 1);
  cr_assert(w1->ranks[0] == 2 && w1->ranks[1] == 3);
  same_fit(&w1->fit, &b->colls[0].fit, "merged fit");
  cr_assert_str_eq(hap_profile_get_env(m, "NCCL_DEBUG"), "INFO");
  cr_assert_null(hap_profile_get_env(m, "CUDA_VISIBLE_DEVICES"));
  cr_assert_str_eq(hap_profile_get_env(m, "CUDA_VISIBLE_DEVICES@v100-0"), "0,1");
  cr_assert_str_eq(hap_profile_get_env(m, "CUDA_VISIBLE_DEVICES@v100-1"), "2,3");
  cr_assert_str_eq(m->backend, "cuda+nccl");
  /* and the merged profile survives the file */
  char *dir = tmpdir_make("profile");
  char *path = path_in(dir, "merged.h5");
  write_ok(m, path);
  hap_profile *r = read_ok(path);
  same_profile(m, r);
  hap_profile_destroy(r);
  free(path);
  rm_tree(dir);
  hap_profile_destroy(m);
  hap_profile_destroy(a);
  hap_profile_destroy(b);
}

Test(merge, refuses_duplicate_hosts_and_mixed_backends) {
  hap_profile *a = machine("v100-0", 0, 1, "0,1"), *b = machine("v100-0", 1, 0, "0,1");
  hap_profile *parts[] = {a, b}, *m = (hap_profile *)1;
  hap_err err = {0};
  cr_assert_eq(hap_profile_merge(parts, 2, &m, &err), HAP_EINVAL);
  cr_assert_null(m);
  cr_assert(strstr(err.msg, "host 'v100-0' of part 1 is already in an earlier part"), "%s",
            err.msg);
  hap_profile *c = machine("p100-0", 0, 1, "0,1");
  hap_err_clear(&err);
  cr_assert_eq(hap_profile_set_meta(c, NULL, NULL, "cpu+mpi", &err), HAP_OK);
  parts[1] = c;
  cr_assert_eq(hap_profile_merge(parts, 2, &m, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "part 1 has backend 'cpu+mpi'"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_profile_merge(parts, 0, &m, &err), HAP_EINVAL);
  hap_profile_destroy(a);
  hap_profile_destroy(b);
  hap_profile_destroy(c);
}

/* ---- to_cluster ----------------------------------------------------------------------------- */

static void same_link(hap_link got, hap_link want) {
  cr_assert(got.latency_s == want.latency_s && got.bandwidth_Bps == want.bandwidth_Bps,
            "link (%.17g s, %.17g B/s), expected (%.17g s, %.17g B/s)", got.latency_s,
            got.bandwidth_Bps, want.latency_s, want.bandwidth_Bps);
}

Test(cluster, sample_profile_becomes_the_cluster_model) {
  hap_profile *p = sample_profile();
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_profile_to_cluster(p, &c, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(c->n_hosts, 2);
  cr_assert_eq(c->n_devices, 4);
  cr_assert_str_eq(c->hosts[0].name, "v100-0");
  cr_assert_str_eq(c->hosts[1].name, "p100-0");
  cr_assert(c->hosts[1].first_device == 2 && c->hosts[1].n_devices == 2);
  cr_assert_eq(hap_cluster_find_device(c, "p100-0:1"), 3);
  const hap_device *d = &c->devices[2];
  cr_assert_str_eq(d->model, "Tesla P100-PCIE-16GB");
  cr_assert_eq(d->host, 1);
  cr_assert_eq(d->memory_bytes, (double)((int64_t)16 << 30));
  cr_assert_eq(d->memory_bw_Bps, p->devices[2].memory_bw_Bps);
  cr_assert_eq(d->update_bw_Bps, 0, "not measured there");
  cr_assert_eq(c->devices[0].update_bw_Bps, 700e9);
  cr_assert_eq(d->peak_flops[HAP_F16], p->devices[2].peak_flops[HAP_F16]);
  cr_assert_eq(d->sustained_flops[HAP_F32], p->devices[2].gemm[2].flops_per_s); /* best f32 */
  cr_assert_eq(d->sustained_flops[HAP_F16], p->devices[2].gemm[1].flops_per_s);
  cr_assert_eq(d->n_gemm, 3);
  cr_assert_eq(d->n_kernels, 3);
  for (int32_t k = 1; k < d->n_kernels; k++) /* sorted by (op, backward, shape_key) */
    cr_assert(d->kernels[k - 1].op < d->kernels[k].op ||
              (d->kernels[k - 1].op == d->kernels[k].op &&
               d->kernels[k - 1].backward <= d->kernels[k].backward));
  cr_assert(d->kernels[0].op == HAP_OP_LINEAR && !d->kernels[0].backward &&
            d->kernels[0].seconds == p->devices[2].kernels[0].p50_s);
  /* measured pairs are overrides; the rest come from the host links built from medians */
  hap_link intra = p->p2p[0].fit, cross = p->p2p[1].fit;
  same_link(hap_cluster_link(c, 0, 1), intra);
  same_link(hap_cluster_link(c, 1, 0), intra); /* host v100-0's median intra link */
  same_link(hap_cluster_link(c, 2, 3), intra); /* p100-0 has none: median over all hosts */
  same_link(hap_cluster_link(c, 0, 2), cross);
  same_link(hap_cluster_link(c, 1, 3), cross); /* two NICs of half the latency each */
  same_link(c->hosts[1].nic, (hap_link){cross.latency_s / 2, cross.bandwidth_Bps});
  const int32_t world[] = {3, 2, 1, 0}, host0[] = {1, 0}, cross_ranks[] = {0, 2};
  const hap_coll_fit *f = hap_cluster_find_fit(c, HAP_COLL_ALL_REDUCE, world, 4);
  cr_assert_not_null(f);
  same_fit(&f->fit, &hap_profile_find_coll(p, HAP_COLL_ALL_REDUCE, "world")->fit, "loaded fit");
  cr_assert_not_null(hap_cluster_find_fit(c, HAP_COLL_ALL_REDUCE, host0, 2));
  cr_assert_not_null(hap_cluster_find_fit(c, HAP_COLL_ALL_GATHER, cross_ranks, 2));
  cr_assert_null(hap_cluster_find_fit(c, HAP_COLL_ALL_GATHER, host0, 2));
  cr_assert_null(hap_cluster_find_fit(c, HAP_COLL_BROADCAST, world, 4));
  cr_assert_eq(c->n_fits, 3);
  cr_assert_eq(hap_cluster_validate(c, &err), HAP_OK, "%s", err.msg);
  hap_cluster_destroy(c);
  hap_profile_destroy(p);
}

Test(cluster, devices_are_grouped_by_host_and_indices_remapped) {
  hap_profile *p = hap_profile_create();
  hap_err err = {0};
  cr_assert_eq(hap_profile_set_meta(p, NULL, NULL, "cpu+mpi", &err), HAP_OK);
  cr_assert_eq(hap_profile_add_host(p, "a", &err), HAP_OK);
  cr_assert_eq(hap_profile_add_host(p, "b", &err), HAP_OK);
  add_device(p, "a:0", "a", "cpu", 1.0); /* round-robin rank placement: a, b, a */
  add_device(p, "b:0", "b", "cpu", 1.0);
  add_device(p, "a:1", "a", "cpu", 1.0);
  add_p2p(p, 0, 2, 1e-6, 5e9);
  add_p2p(p, 1, 2, 9e-6, 1e9);
  const int32_t ranks[] = {1, 2};
  add_coll(p, HAP_COLL_BROADCAST, "pair", ranks, 2, 10e-6, 1e9);
  finish(p);
  hap_cluster *c = NULL;
  cr_assert_eq(hap_profile_to_cluster(p, &c, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_cluster_find_device(c, "a:0"), 0);
  cr_assert_eq(hap_cluster_find_device(c, "a:1"), 1);
  cr_assert_eq(hap_cluster_find_device(c, "b:0"), 2);
  cr_assert_eq(c->devices[1].host, 0);
  same_link(hap_cluster_link(c, 0, 1), p->p2p[0].fit);
  same_link(hap_cluster_link(c, 2, 1), p->p2p[1].fit);
  const int32_t want[] = {1, 2};
  cr_assert_not_null(hap_cluster_find_fit(c, HAP_COLL_BROADCAST, want, 2));
  hap_cluster_destroy(c);
  hap_profile_destroy(p);
}

Test(cluster, defaults_when_nothing_was_measured) {
  hap_profile *p = machine("solo", 0, 1, "0");
  /* drop the p2p sweep: nothing measured */
  p->n_p2p = 0;
  free(p->p2p[0].sizes_bytes);
  free(p->p2p[0].samples_s);
  free(p->p2p[0].p50_s);
  free(p->p2p[0].p95_s);
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_profile_to_cluster(p, &c, &err), HAP_OK, "%s", err.msg);
  same_link(c->hosts[0].intra, HAP_PROFILE_DEFAULT_INTRA);
  same_link(c->hosts[0].nic, HAP_PROFILE_DEFAULT_NIC);
  hap_cluster_destroy(c);
  hap_profile_destroy(p);
}

/* Every kernel table rewritten without the mean_s member, as hap-profile 2.1 wrote it. */
static void m_as_version_2_1(hid_t f) {
  set_str_attr(f, "version", "2.1");
  char path[64];
  for (int dev = 0;
       snprintf(path, sizeof path, "/devices/%d", dev) > 0 && H5Lexists(f, path, H5P_DEFAULT) > 0;
       dev++) {
    snprintf(path, sizeof path, "/devices/%d/kernels", dev);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT), ft = H5Dget_type(d), s = H5Dget_space(d);
    hid_t old = H5Tcopy(ft);
    cr_assert_geq(H5Tclose(ft), 0);
    /* the 2.2 type less its last member: a 2.1 row (mean_s was appended) */
    int n = H5Tget_nmembers(old);
    char *last = H5Tget_member_name(old, (unsigned)(n - 1));
    cr_assert_str_eq(last, "mean_s");
    H5free_memory(last);
    hid_t t21 = H5Tcreate(H5T_COMPOUND, H5Tget_member_offset(old, (unsigned)(n - 1)));
    for (int i = 0; i < n - 1; i++) {
      char *name = H5Tget_member_name(old, (unsigned)i);
      hid_t mt = H5Tget_member_type(old, (unsigned)i);
      cr_assert_geq(H5Tinsert(t21, name, H5Tget_member_offset(old, (unsigned)i), mt), 0);
      H5Tclose(mt);
      H5free_memory(name);
    }
    hssize_t rows = H5Sget_simple_extent_npoints(s);
    void *buf = calloc((size_t)rows + 1, H5Tget_size(t21));
    cr_assert_geq(H5Dread(d, t21, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    H5Dclose(d);
    cr_assert_geq(H5Ldelete(f, path, H5P_DEFAULT), 0);
    d = H5Dcreate2(f, path, t21, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_geq(d, 0);
    cr_assert_geq(H5Dwrite(d, t21, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    free(buf);
    H5Dclose(d);
    H5Tclose(t21);
    H5Tclose(old);
    H5Sclose(s);
  }
}

/* A replayed row is priced at its mean_s, any other at its p50; a 2.1 file (no mean_s)
 * reads every row as having none. */
Test(cluster, replayed_rows_are_priced_at_their_mean) {
  char *dir = tmpdir_make("profile");
  char *good = path_in(dir, "good.h5");
  hap_profile *p = sample_profile();
  write_ok(p, good);
  hap_profile_destroy(p);
  char *old = mutated(dir, good, "v2.1.h5", m_as_version_2_1);
  for (int file = 0; file < 2; file++) {
    p = read_ok(file == 0 ? good : old);
    hap_cluster *c = NULL;
    hap_err err = {0};
    cr_assert_eq(hap_profile_to_cluster(p, &c, &err), HAP_OK, "%s", err.msg);
    for (int32_t dev = 0; dev < p->n_devices; dev++) {
      const hap_profile_device *pd = &p->devices[dev];
      int32_t cd = hap_cluster_find_device(c, pd->name);
      for (int32_t r = 0; r < pd->n_kernels; r++) {
        const hap_profile_kernel *k = &pd->kernels[r];
        bool replayed = k->op == HAP_OP_LINEAR && k->backward; /* sample_device's third row */
        cr_assert_eq(k->mean_s > 0, replayed && file == 0, "file %d device %d row %d: mean %g",
                     file, dev, r, k->mean_s);
        const hap_kernel_sample *ks =
            hap_device_kernel(&c->devices[cd], k->op, k->backward, k->shape_key);
        cr_assert_not_null(ks);
        cr_assert_eq(ks->seconds, k->mean_s > 0 ? k->mean_s : k->p50_s);
        cr_assert_neq(k->mean_s, k->p50_s);
      }
    }
    hap_cluster_destroy(c);
    hap_profile_destroy(p);
  }
  free(old);
  free(good);
  rm_tree(dir);
}

Test(cluster, invalid_profile_is_refused) {
  hap_profile *p = sample_profile();
  p->devices[1].memory_bw_Bps = NAN;
  hap_cluster *c = (hap_cluster *)1;
  hap_err err = {0};
  cr_assert_eq(hap_profile_to_cluster(p, &c, &err), HAP_EINVAL);
  cr_assert_null(c);
  cr_assert(strstr(err.msg, "profile: /devices/1: memory_bw_Bps is nan"), "%s", err.msg);
  hap_profile_destroy(p);
}

Test(cluster, negative_update_bandwidth_is_refused) {
  hap_profile *p = sample_profile();
  p->devices[0].update_bw_Bps = -1;
  hap_cluster *c = (hap_cluster *)1;
  hap_err err = {0};
  cr_assert_eq(hap_profile_to_cluster(p, &c, &err), HAP_EINVAL);
  cr_assert_null(c);
  cr_assert(strstr(err.msg, "profile: /devices/0: update_bw_Bps is -1"), "%s", err.msg);
  hap_profile_destroy(p);
}
