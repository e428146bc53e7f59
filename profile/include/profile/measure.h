/* measure.h — hap-profile's measurements over exec/'s device (backend.h) and communication
 * (comm.h) tables, gathered into one hap_profile (core's profile_store.h) on rank 0.
 *   compute:  GEMM sweep over (m, n, k, dtype) -> seconds (median) and FLOP/s per shape;
 *             memory bandwidth (copy, 2 x bytes / p50); launch overhead (empty kernel, p50)
 *   kernels:  the CPU kernels of kernels/ at the configured local shapes (kernel_times.h),
 *             p50/p95 per op, direction and shape -> the device's kernel table
 *   comm:     every ordered rank pair: ping-pong, one sample = half a round trip of S bytes
 *             (outlier sizes measured again: hap_p2p_outliers);
 *             each collective over the world, each host's ranks and one rank per host (when those
 *             differ from the world): one sample = the slowest rank's time for one call after a
 *             barrier; sizes as nccl-tests count them (cluster.h, hap_coll_fit)
 * then p50/p95, algbw/busbw (hap_profile_compute_stats) and the alpha-beta fits (fit_rel.h).
 * Contract: collective over `world` (every rank calls with the same configuration); ranks agree on
 * failures (a rank-local error stops every rank with the same status). Only rank 0 gets a
 * profile. The progress callback runs on every rank between measurements (a watchdog can use it).
 * Ownership: the configuration's arrays belong to the caller; *out (rank 0) is owned by the
 * caller (hap_profile_destroy). */
#ifndef HAP_MEASURE_H
#define HAP_MEASURE_H

#include <stdbool.h>
#include <stdint.h>

#include "exec/backend.h"
#include "exec/comm.h"
#include "profile/kernel_times.h"
#include "store/profile_store.h"

typedef struct hap_gemm_shape {
  int64_t m, n, k;
  hap_dtype dtype;
} hap_gemm_shape;

/* Called before each measurement step: phase ("gemm", "p2p 0->1", "all_reduce world"), step
 * done so far and total steps of the whole run. */
typedef void (*hap_measure_progress_fn)(void *arg, const char *phase, int32_t done, int32_t total);

enum { HAP_MEASURE_MAX_EXTEND = 16 };

/* Bytes each rank writes before a cold collective sample (coll_cold): beyond any last-level cache
 * of the CPUs hap runs on. */
#define HAP_MEASURE_FLUSH_BYTES ((size_t)64 << 20)

typedef struct hap_measure_config {
  bool gemm; /* the GEMM sweep (memory bandwidth and launch overhead are always measured) */
  bool comm; /* point-to-point and collective sweeps */
  const hap_gemm_shape *gemm_shapes;
  int32_t n_gemm_shapes, gemm_reps, gemm_warmup;
  int64_t membw_bytes; /* copied buffer, bytes */
  int32_t membw_reps;
  int32_t launch_reps, launch_iters; /* samples, and empty kernels averaged into each */
  const int64_t *p2p_sizes;          /* strictly increasing, bytes */
  int32_t n_p2p_sizes, p2p_reps, p2p_warmup;
  int32_t p2p_iters;         /* round trips averaged into one sample */
  const int64_t *coll_sizes; /* strictly increasing, bytes; rounded up per group to a multiple
                                of 4 x ranks (float32 elements, equal shares) */
  int32_t n_coll_sizes, coll_reps, coll_warmup;
  int32_t coll_iters; /* back-to-back calls averaged into one sample */
  /* Cold collective samples (hap-profile --coll-caches cold): before each sample every rank writes
   * HAP_MEASURE_FLUSH_BYTES elsewhere, and a sample is one call, so a collective meets the caches
   * as one between a layer's backward and the next meets them in hap-run (bench_coll_cold: a
   * 256 KiB all-reduce ~2x the back-to-back price on dev-2c). false: back-to-back (the default). */
  bool coll_cold;
  uint32_t coll_kinds; /* bit (1u << hap_coll_kind) per collective to measure */
  /* Per kind (0 = none): continue that collective's sweep past coll_sizes, by the factor of its
   * last two sizes, until it reaches this many bytes (a plan's largest message of the kind, so
   * its fit is measured, not extrapolated). These sizes are timed with one warm-up call and one
   * call per sample (they take 10-1000 ms each); at most HAP_MEASURE_MAX_EXTEND of them. */
  int64_t coll_extend_bytes[HAP_COLL_KIND_COUNT];
  /* The communicator whose buffers are device memory (nccl on a GPU), for the pair and
   * collective sweeps; NULL = world. `world` (host memory) always carries the bookkeeping:
   * device records, samples, barriers around timed calls and the slowest-rank reduction. It must
   * have world's ranks in world's order. */
  hap_comm *data;
  /* Per-op kernel timings (CPU devices only): this rank's cases (they may differ per rank, e.g.
   * the shapes a plan gives each device), each timed kernel_reps times after kernel_warmup. */
  bool kernels;
  const hap_kcase *kcases;
  int32_t n_kcases, kernel_reps, kernel_warmup;
  /* When set, this rank's kernel rows come from this call instead of timing kcases one by one
   * (e.g. hap-profile's replay of a plan in execution order, replay.h); *rows is malloc'd. It is
   * called on every rank at once, after the GEMM sweep; speed is this device's emulated speed.
   * *update_Bps > 0 replaces the measured SGD update bandwidth (bytes/s, in the bytes the simulator
   * prices the plan's updates with: replay.h). */
  hap_status (*kernel_rows)(void *arg, double speed, hap_profile_kernel **rows, int32_t *n_rows,
                            double *update_Bps, hap_err *err);
  void *kernel_rows_arg;
  hap_measure_progress_fn progress;
  void *progress_arg;
} hap_measure_config;

/* The built-in plans: quick (CI, seconds on two CPU ranks) or default (real use, minutes).
 * Arrays point to static storage. */
void hap_measure_defaults(hap_measure_config *cfg, bool quick);

/* The GEMM sweep of a GPU (after hap_measure_defaults): larger shapes, and float16 and bfloat16
 * GEMMs (float32 accumulation) beside float32, so the profile has their sustained rates. */
void hap_measure_gpu_gemm(hap_measure_config *cfg, bool quick);

/* Check a configuration: positive repetitions, strictly increasing positive sizes, known dtypes. */
hap_status hap_measure_check(const hap_measure_config *cfg, hap_err *err);

/* Point-to-point sizes to measure again: those whose p50 exceeds HAP_P2P_OUTLIER_FACTOR times the
 * smallest p50 of any larger size (more bytes never take less time, so such a point is a
 * transient: a partner still busy with earlier work, a slow first path). p50_s: n sizes in
 * increasing order of bytes. Writes the indices, increasing, to idx (n entries); returns how many.
 */
#define HAP_P2P_OUTLIER_FACTOR 2.0
int32_t hap_p2p_outliers(const double *p50_s, int32_t n, int32_t *idx);

/* Run the configured measurements on every rank (dev is this rank's device) and, on rank 0,
 * return the profile (statistics and fits computed, validated; backend and environment left to
 * the caller). Other ranks get *out = NULL. */
hap_status hap_measure_profile(hap_comm *world, hap_dev *dev, const hap_measure_config *cfg,
                               hap_profile **out, hap_err *err);

#endif
