/* write_sample_profile.c — writes the small known hap-profile that tests/profile_h5py_check.py
 * reads back with h5py. Every number follows a formula the Python check repeats:
 *   hosts v100-0 (devices 0, 1) and p100-0 (devices 2, 3)
 *   device i: memory_bytes 16 GiB, memory_bw_Bps 900e9 (V100) / 732e9 (P100), launch_s 5e-6,
 *             peak_flops_float32 15.7e12 / 9.3e12; GEMM rows r = 0..2: m = n = k = 1024 (r + 1),
 *             float32, flops_per_s = 14e12 / 9e12 (V100 / P100), seconds = 2 m n k / flops_per_s;
 *             kernels: linear fwd (shape_key 1234, p50 1e-4, p95 1.2e-4, reps 20) and
 *             gelu bwd (shape_key 5678, p50 2e-5, p95 3e-5, reps 50)
 *   sweeps over sizes 8, 1024, 1048576, 16777216 bytes, 3 repetitions:
 *             samples_s[i][r] = (alpha + S_i / beta) * (1 + 0.01 (r - 1))
 *   p2p 0-1 (alpha 8e-6, beta 40e9), p2p 0-2 (alpha 25e-6, beta 10e9),
 *   all_reduce "world" ranks 0..3 (alpha 50e-6, beta 5e9), all_gather "cross-host" ranks 0, 2
 *   (alpha 30e-6, beta 9e9); env NCCL_DEBUG=INFO, CUDA_VISIBLE_DEVICES=0,1.
 * With HOST: a one-host profile instead, as one host profiled alone gives: host HOST, devices
 * HOST:0 and HOST:1 (the V100 numbers above), p2p 0-1 and all_reduce "world" ranks 0, 1 (the
 * numbers above); what `hap-profile merge` combines.
 * Usage: write_sample_profile FILE [HOST] */
#include <stdio.h>

#include "store/profile_store.h"

static const int64_t sizes[] = {8, 1024, 1048576, 16777216};
enum { N_SIZES = 4, REPS = 3 };

static void fill(int64_t *s, double *samples, double alpha_s, double beta_Bps) {
  for (int i = 0; i < N_SIZES; i++) {
    s[i] = sizes[i];
    for (int r = 0; r < REPS; r++)
      samples[i * REPS + r] = (alpha_s + (double)sizes[i] / beta_Bps) * (1 + 0.01 * (r - 1));
  }
}

static hap_status add_device(hap_profile *p, int i, hap_err *err) {
  static const char *const names[] = {"v100-0:0", "v100-0:1", "p100-0:0", "p100-0:1"};
  bool v100 = i < 2;
  int32_t idx;
  HAP_TRY(hap_profile_add_device(p, names[i], v100 ? "v100-0" : "p100-0",
                                 v100 ? "Tesla V100-SXM2-16GB" : "Tesla P100-PCIE-16GB",
                                 HAP_DEVICE_GPU, &idx, err));
  hap_profile_device *d = &p->devices[idx];
  d->memory_bytes = (int64_t)16 << 30;
  d->memory_bw_Bps = v100 ? 900e9 : 732e9;
  d->launch_s = 5e-6;
  d->peak_flops[HAP_F32] = v100 ? 15.7e12 : 9.3e12;
  for (int r = 0; r < 3; r++) {
    int64_t n = (int64_t)1024 * (r + 1);
    hap_profile_gemm g = {n, n, n, HAP_F32, 0, v100 ? 14e12 : 9e12};
    g.seconds = 2.0 * (double)n * (double)n * (double)n / g.flops_per_s;
    HAP_TRY(hap_profile_add_gemm(d, &g, err));
  }
  hap_profile_kernel lin = {HAP_OP_LINEAR, false,  1234, "[64, 1024] x [4096, 1024]",
                            1e-4,          1.2e-4, 20,   1.05e-4}; /* a replayed row's price */
  hap_profile_kernel gelu = {HAP_OP_GELU, true, 5678, "[64, 4096]", 2e-5, 3e-5, 50};
  HAP_TRY(hap_profile_add_kernel(d, &lin, err));
  return hap_profile_add_kernel(d, &gelu, err);
}

static hap_status build(hap_profile *p, hap_err *err) {
  HAP_TRY(hap_profile_set_meta(p, "2025-01-31T12:00:00Z", "hap-profile 0.1.0", "cuda+nccl", err));
  HAP_TRY(hap_profile_add_host(p, "v100-0", err));
  HAP_TRY(hap_profile_add_host(p, "p100-0", err));
  for (int i = 0; i < 4; i++)
    HAP_TRY(add_device(p, i, err));
  const struct {
    int32_t src, dst;
    double alpha_s, beta_Bps;
  } p2p[] = {{0, 1, 8e-6, 40e9}, {0, 2, 25e-6, 10e9}};
  for (int j = 0; j < 2; j++) {
    int32_t idx;
    HAP_TRY(hap_profile_add_p2p(p, p2p[j].src, p2p[j].dst, N_SIZES, REPS, &idx, err));
    fill(p->p2p[idx].sizes_bytes, p->p2p[idx].samples_s, p2p[j].alpha_s, p2p[j].beta_Bps);
  }
  const int32_t world[] = {0, 1, 2, 3}, cross[] = {0, 2};
  int32_t idx;
  HAP_TRY(
      hap_profile_add_coll(p, HAP_COLL_ALL_REDUCE, "world", world, 4, N_SIZES, REPS, &idx, err));
  fill(p->colls[idx].sizes_bytes, p->colls[idx].samples_s, 50e-6, 5e9);
  HAP_TRY(hap_profile_add_coll(p, HAP_COLL_ALL_GATHER, "cross-host", cross, 2, N_SIZES, REPS, &idx,
                               err));
  fill(p->colls[idx].sizes_bytes, p->colls[idx].samples_s, 30e-6, 9e9);
  HAP_TRY(hap_profile_set_env(p, "NCCL_DEBUG", "INFO", err));
  HAP_TRY(hap_profile_set_env(p, "CUDA_VISIBLE_DEVICES", "0,1", err));
  HAP_TRY(hap_profile_compute_stats(p, err));
  return hap_profile_fit(p, err);
}

/* The one-host profile of host `host`. */
static hap_status build_one_host(hap_profile *p, const char *host, hap_err *err) {
  HAP_TRY(hap_profile_set_meta(p, "2025-01-31T12:00:00Z", "hap-profile 0.1.0", "cuda+nccl", err));
  HAP_TRY(hap_profile_add_host(p, host, err));
  for (int i = 0; i < 2; i++) {
    char name[128];
    snprintf(name, sizeof name, "%s:%d", host, i);
    int32_t idx;
    HAP_TRY(
        hap_profile_add_device(p, name, host, "Tesla V100-SXM2-16GB", HAP_DEVICE_GPU, &idx, err));
    hap_profile_device *d = &p->devices[idx];
    d->memory_bytes = (int64_t)16 << 30;
    d->memory_bw_Bps = 900e9;
    d->launch_s = 5e-6;
    d->peak_flops[HAP_F32] = 15.7e12;
    hap_profile_gemm g = {1024, 1024, 1024, HAP_F32, 2.0 * 1024 * 1024 * 1024 / 14e12, 14e12};
    HAP_TRY(hap_profile_add_gemm(d, &g, err));
  }
  int32_t idx;
  HAP_TRY(hap_profile_add_p2p(p, 0, 1, N_SIZES, REPS, &idx, err));
  fill(p->p2p[idx].sizes_bytes, p->p2p[idx].samples_s, 8e-6, 40e9);
  const int32_t world[] = {0, 1};
  HAP_TRY(
      hap_profile_add_coll(p, HAP_COLL_ALL_REDUCE, "world", world, 2, N_SIZES, REPS, &idx, err));
  fill(p->colls[idx].sizes_bytes, p->colls[idx].samples_s, 50e-6, 5e9);
  HAP_TRY(hap_profile_compute_stats(p, err));
  return hap_profile_fit(p, err);
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "Usage: write_sample_profile FILE [HOST]\n");
    return 2;
  }
  hap_err err = {0};
  hap_profile *p = hap_profile_create();
  hap_status st = p == NULL   ? HAP_ENOMEM
                  : argc == 3 ? build_one_host(p, argv[2], &err)
                              : build(p, &err);
  if (st == HAP_OK)
    st = hap_profile_write(p, argv[1], &err);
  hap_profile_destroy(p);
  if (st != HAP_OK) {
    fprintf(stderr, "write_sample_profile: %s\n", err.msg[0] ? err.msg : hap_status_str(st));
    return 1;
  }
  return 0;
}
