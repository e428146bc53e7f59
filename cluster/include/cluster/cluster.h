/* cluster.h — the cluster model: hosts, devices, links and collective fits, fed either by a
 * hypothetical spec (hap-cluster JSON, cluster_io.h) or by a measured profile (HDF5,
 * profile_store.h). Cost queries on it live in cost.h.
 * Ownership: hap_cluster_create returns an owned cluster freed with hap_cluster_destroy; every
 * string and array inside belongs to it. Fields are read-only outside cluster.c: mutate through the
 * functions below. Devices are numbered host by host (a host's devices are contiguous). */
#ifndef HAP_CLUSTER_H
#define HAP_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/ops.h"

typedef enum hap_device_kind { HAP_DEVICE_GPU = 0, HAP_DEVICE_CPU } hap_device_kind;

/* A point-to-point path: one message of S bytes takes latency_s + S / bandwidth_Bps. */
typedef struct hap_link {
  double latency_s;     /* s */
  double bandwidth_Bps; /* bytes/s, one direction */
} hap_link;

/* A measured GEMM: m x k times k x n at this rate. */
typedef struct hap_gemm_sample {
  int64_t m, n, k;
  hap_dtype dtype;
  double flops_per_s; /* FLOP/s */
} hap_gemm_sample;

/* A measured kernel time for one op application at exact local shapes. */
typedef struct hap_kernel_sample {
  hap_op op;
  bool backward;
  uint64_t shape_key; /* hap_kernel_shape_key of the op's input shapes */
  double seconds;     /* median, s */
} hap_kernel_sample;

typedef struct hap_device {
  const char *name;  /* unique, e.g. "v100-0:3" */
  const char *model; /* preset or measured name, e.g. "V100-16GB" */
  int32_t host;
  int32_t local_index; /* index within its host */
  hap_device_kind kind;
  double peak_flops[HAP_DTYPE_COUNT];      /* FLOP/s; 0 = dtype not supported */
  double sustained_flops[HAP_DTYPE_COUNT]; /* FLOP/s that large GEMMs reach */
  double memory_bytes;                     /* bytes */
  double memory_bw_Bps;                    /* bytes/s sustained */
  double launch_s;                         /* fixed cost per kernel, s */
  double update_bw_Bps; /* bytes/s of the SGD update w -= lr * g, 12 bytes per element (3 streams);
                           0 = not measured: memory_bw_Bps prices it */
  int32_t n_gemm;
  hap_gemm_sample *gemm; /* measured sweep, may be empty */
  int32_t n_kernels;
  hap_kernel_sample *kernels; /* sorted by (op, backward, shape_key) */
} hap_device;

/* Where a host's link numbers come from (what `hap-profile show` tells its reader). */
typedef enum hap_link_origin {
  HAP_LINK_STATED = 0, /* written in a cluster file or spec */
  HAP_LINK_MEASURED,   /* fitted from this host's own measured p2p sweeps */
  HAP_LINK_BORROWED,   /* none of this host's: the median of other hosts' measured links */
  HAP_LINK_ASSUMED,    /* nothing of the kind measured: hap's default */
} hap_link_origin;

/* "stated", "measured", "borrowed", "assumed". */
const char *hap_link_origin_name(hap_link_origin o);

typedef struct hap_host {
  const char *name;
  int32_t first_device, n_devices;
  hap_link intra; /* between two devices of this host */
  hap_link nic;   /* this host's network link, per direction, shared by its devices */
  hap_link_origin intra_origin, nic_origin; /* HAP_LINK_STATED unless set after adding */
} hap_host;

typedef enum hap_coll_kind {
  HAP_COLL_ALL_REDUCE = 0,
  HAP_COLL_ALL_GATHER,
  HAP_COLL_REDUCE_SCATTER,
  HAP_COLL_ALL_TO_ALL,
  HAP_COLL_BROADCAST,
  HAP_COLL_KIND_COUNT
} hap_coll_kind;

const char *hap_coll_kind_name(hap_coll_kind k); /* "all_reduce", ... */
hap_status hap_coll_kind_parse(const char *s, hap_coll_kind *out);

/* Piecewise alpha-beta in a message size S (bytes): piece i serves
 *   upper_bytes[i-1] <= S < upper_bytes[i]   (the first from 0, the last up to +inf)
 * and takes t(S) = alpha_s[i] + S / beta_Bps[i]. Bounds strictly increase and the last is +inf,
 * so sizes beyond the measured range take the last piece (its bandwidth term); alpha_s >= 0 and
 * 0 < beta_Bps < inf keep every time > 0 for S > 0 (hap_ab_fit_check). */
#define HAP_FIT_MAX_PIECES 8
typedef struct hap_ab_fit {
  int32_t n_pieces;                       /* 1 .. HAP_FIT_MAX_PIECES */
  double upper_bytes[HAP_FIT_MAX_PIECES]; /* bytes, exclusive; [n_pieces - 1] = +inf */
  double alpha_s[HAP_FIT_MAX_PIECES];     /* s */
  double beta_Bps[HAP_FIT_MAX_PIECES];    /* bytes/s */
} hap_ab_fit;

/* One piece (upper bound +inf). */
hap_ab_fit hap_ab_fit_one(double alpha_s, double beta_Bps);
/* The two-piece form of hap-profile 1.x and hap-cluster "threshold_bytes": small below the
 * threshold, large from it; threshold 0 = one piece (the large one). */
hap_ab_fit hap_ab_fit_two(double threshold_bytes, double alpha_small_s, double beta_small_Bps,
                          double alpha_large_s, double beta_large_Bps);
/* Seconds for S bytes (the piece holding S). */
double hap_ab_fit_time(const hap_ab_fit *f, double bytes);
/* NULL if f is well-formed, else what is wrong and what was expected ("upper_bytes[1] = 4096 is
 * not above upper_bytes[0] = 8192, expected strictly increasing bounds"), in buf. */
const char *hap_ab_fit_check(const hap_ab_fit *f, char *buf, size_t len);

/* One collective time measured at one size: bytes (nccl-tests' meaning, as below) and s. */
typedef struct hap_coll_point {
  double bytes, seconds;
} hap_coll_point;

/* A profiled collective over one group: piecewise alpha-beta (hap_ab_fit) in the message size S
 * (bytes, with nccl-tests' meaning: the full buffer for all-reduce and broadcast, the
 * gathered/scattered total for all-gather and reduce-scatter, the per-rank send total for
 * all-to-all). */
typedef struct hap_coll_fit {
  hap_coll_kind kind;
  int32_t n_ranks;
  int32_t *ranks; /* sorted device ids */
  hap_ab_fit fit;
  /* Times measured at exact sizes inside a plan's own iterations (hap-profile --plan's replay,
   * profile/replay.h): a query at one of these sizes gets the measured time, not the fit's.
   * Sorted by bytes, distinct; n_points may be 0 (points NULL). */
  int32_t n_points;
  hap_coll_point *points;
} hap_coll_fit;

/* Seconds for S bytes over this fit's group: a point's time where S is one of its sizes (within
 * half a byte, or a relative 1e-9 of sizes over 500 MB), else the fit's piece holding S. */
double hap_coll_fit_time(const hap_coll_fit *f, double bytes);
/* The point hap_coll_fit_time reads for S bytes, or NULL when S is at none (the fit prices it). */
const hap_coll_point *hap_coll_fit_point(const hap_coll_fit *f, double bytes);

typedef struct hap_cluster_impl hap_cluster_impl;

typedef struct hap_cluster {
  const char *name;
  const char *source; /* spec or file it came from; may be NULL */
  int32_t n_hosts;
  hap_host *hosts;
  int32_t n_devices;
  hap_device *devices;
  double inter_latency_s; /* extra latency of a path between hosts, s (added to both NICs' own) */
  int32_t n_fits;
  hap_coll_fit *fits;
  hap_cluster_impl *impl;
} hap_cluster;

/* NULL on allocation failure. */
hap_cluster *hap_cluster_create(const char *name);
void hap_cluster_destroy(hap_cluster *c);
hap_status hap_cluster_set_source(hap_cluster *c, const char *source);

/* Add a host with its intra-host and NIC links; devices are added to the last host added. */
hap_status hap_cluster_add_host(hap_cluster *c, const char *name, hap_link intra, hap_link nic,
                                int32_t *id, hap_err *err);
/* Add a device to the last host. `proto` supplies every field but name/host/local_index; its
 * gemm and kernel arrays are copied. */
hap_status hap_cluster_add_device(hap_cluster *c, const char *name, const hap_device *proto,
                                  int32_t *id, hap_err *err);
/* Extra latency of every path between two hosts, s (>= 0). */
void hap_cluster_set_inter_latency(hap_cluster *c, double seconds);
/* Override the path src -> dst (device ids). */
hap_status hap_cluster_set_link(hap_cluster *c, int32_t src, int32_t dst, hap_link link,
                                hap_err *err);
/* Record a profiled collective fit (ranks are copied and sorted, points copied and sorted by
 * bytes; HAP_EINVAL for a point that is not positive and finite, or two points at one size as
 * hap_coll_fit_time matches them). */
hap_status hap_cluster_add_fit(hap_cluster *c, const hap_coll_fit *fit, hap_err *err);

/* The path src -> dst: an override if set, else the host's intra link for two devices of one
 * host, else min of the two NIC bandwidths with both NIC latencies plus inter_latency_s. */
hap_link hap_cluster_link(const hap_cluster *c, int32_t src, int32_t dst);

/* Per-pair overrides: their number, and iteration (start with *cursor = 0; returns false at the
 * end; the order is unspecified). */
int32_t hap_cluster_n_link_overrides(const hap_cluster *c);
bool hap_cluster_next_link_override(const hap_cluster *c, size_t *cursor, int32_t *src,
                                    int32_t *dst, hap_link *link);

/* The fit for (kind, exactly this rank set), or NULL. `ranks` need not be sorted. */
const hap_coll_fit *hap_cluster_find_fit(const hap_cluster *c, hap_coll_kind kind,
                                         const int32_t *ranks, int32_t n);

int32_t hap_cluster_find_device(const hap_cluster *c, const char *name);
int32_t hap_cluster_find_host(const hap_cluster *c, const char *name);

/* Check the cluster is usable: at least one device, positive bandwidths and memory, non-negative
 * latencies, a float dtype with positive sustained FLOP/s on every device. Errors name the host or
 * device and the field. */
hap_status hap_cluster_validate(const hap_cluster *c, hap_err *err);

/* The cluster of devices[0..n) of `c` (strictly increasing ids), renumbered 0..n-1 in that order:
 * each with its host (name, intra-host link and NIC; only the hosts that hold one of them), the
 * inter-host latency, the per-pair link overrides and the collective fits among them. Named
 * `name` (NULL: c's name). A pipeline stage's device group is one (docs/design-pipeline.md).
 * HAP_EINVAL naming the entry for an empty, unordered or out-of-range list; HAP_ENOMEM. *out is
 * the caller's (hap_cluster_destroy). */
hap_status hap_cluster_of_devices(const hap_cluster *c, const int32_t *devices, int32_t n,
                                  const char *name, hap_cluster **out, hap_err *err);

/* The dtype an application computes in: its first float input's, else its first output's. */
hap_dtype hap_io_compute_dtype(const hap_op_io *io);

/* A stable 64-bit key of an op's input shapes (for measured kernel tables), and of the format
 * when it computes in float16 or bfloat16 (hap_io_compute_dtype): rows a GPU timed with
 * half-precision GEMMs serve half-precision applications only, float32 rows the others. */
uint64_t hap_kernel_shape_key(const hap_op_io *io);
/* The key of a measured kernel row: hap_kernel_shape_key, and for a backward application that
 * leaves some float input's gradient out (in_grad false: e.g. a first layer's input) also which
 * ones, since it does less work than the full backward of the same shapes. A backward computing
 * every float input's gradient (the usual case, and every grid case) keys as its shapes alone. */
uint64_t hap_kernel_key(const hap_op_io *io, bool backward);

/* Device d's measured kernel row for (op, direction, hap_kernel_shape_key), found by binary
 * search in its sorted rows; NULL when it has none. The one lookup of measured kernels: cost.h's
 * compute time and kernel_model.h's fallback both use it. */
const hap_kernel_sample *hap_device_kernel(const hap_device *d, hap_op op, bool backward,
                                           uint64_t shape_key);

/* The sustained FLOP/s of `dtype` on d; float32's when d has none for the dtype. */
double hap_device_flops(const hap_device *d, hap_dtype dtype);

/* The sustained GEMM rate of d for an m x k by k x n product in `dtype`, FLOP/s: interpolated from
 * its sweep when it has one for the dtype, else hap_device_flops. */
double hap_gemm_rate(const hap_device *d, hap_dtype dtype, double m, double n, double k);

#endif
