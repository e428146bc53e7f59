/* cost.h — the cost queries every planner, simulator and executor asks of a cluster: how long an
 * op takes on a device at given local shapes, a point-to-point transfer, a collective over a group
 * with given per-rank byte counts and implementation. Pure functions of the cluster.
 * Collectives are priced on a hap_group, a summary of a rank set computed once (O(n)) so that each
 * query afterwards is O(1): the search and the simulator ask millions of them.
 * Ownership: hap_group is a caller-owned value that borrows the cluster (its fit pointers). */
#ifndef HAP_COST_H
#define HAP_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "model/ops.h"

typedef enum hap_coll_impl {
  HAP_IMPL_AUTO = 0,     /* a profiled fit if the group has one, else the fastest formula below */
  HAP_IMPL_RING,         /* all-reduce, all-gather (padded), reduce-scatter (padded), broadcast */
  HAP_IMPL_TREE,         /* all-reduce (double binary tree), broadcast */
  HAP_IMPL_HIERARCHICAL, /* all-reduce across hosts: intra reduce-scatter, inter all-reduce, intra
                            all-gather */
  HAP_IMPL_PAIRWISE,     /* all-to-all: n-1 exchange steps */
  HAP_IMPL_GROUPED,      /* uneven all-gather / reduce-scatter as one broadcast / reduce per rank */
  HAP_IMPL_COUNT
} hap_coll_impl;

const char *hap_coll_impl_name(hap_coll_impl i); /* "auto", "ring", ... */
hap_status hap_coll_impl_parse(const char *s, hap_coll_impl *out);

/* Per-rank byte counts, summarised. Meaning per kind:
 *   all_reduce, broadcast: the buffer each rank holds (max is used);
 *   all_gather: the shard each rank contributes; reduce_scatter: the shard each rank receives;
 *   all_to_all: the bytes each rank sends in total (spread evenly over the ranks, itself included).
 */
typedef struct hap_coll_bytes {
  double max, min, sum; /* bytes */
  int32_t n;            /* ranks */
} hap_coll_bytes;

hap_coll_bytes hap_coll_bytes_of(const double *per_rank, int32_t n);
hap_coll_bytes hap_coll_bytes_uniform(double bytes, int32_t n);
/* The pairwise all-to-all model spreads a rank's bytes over all n ranks, itself included. A
 * re-shard in which a rank sends or receives `moved` bytes to or from the others (hap_shard_moved)
 * is priced as an all-to-all of moved * hap_reshard_spread(n) bytes from that rank: n / (n - 1).
 * An all-to-all that moves nothing costs 0 s. */
double hap_reshard_spread(int32_t n);

/* What the formulas need to know about a rank set, in the given rank order (the ring order). */
typedef struct hap_group {
  int32_t n;            /* ranks */
  int32_t n_hosts;      /* hosts spanned */
  int32_t max_per_host; /* most members on one host */
  hap_link ring;        /* bottleneck of the ring: min bandwidth (a NIC shared by the ring edges
                           that cross it counts once per edge), max latency */
  hap_link intra;       /* slowest intra-host path between two members (if any host has two) */
  hap_link inter;       /* slowest path between members on different hosts (if >1 host) */
  hap_link worst;       /* slowest path between any two members */
  double nic_bw_Bps;    /* smallest NIC bandwidth of the spanned hosts, bytes/s */
  const hap_coll_fit *fit[HAP_COLL_KIND_COUNT]; /* profiled fit for exactly this rank set */
} hap_group;

/* Summarise ranks[0..n) (device ids, no repeats). */
hap_status hap_group_init(const hap_cluster *c, const int32_t *ranks, int32_t n, hap_group *g,
                          hap_err *err);

/* The size a measured fit of `kind` is read at (hap_coll_fit_time), in nccl-tests' meaning: the
 * shares' total for a grouped (uneven) gather or scatter, every rank's share at the largest for
 * any other gather or scatter (padded), the largest buffer otherwise. Bytes. */
double hap_coll_fit_bytes(hap_coll_kind kind, hap_coll_impl impl, hap_coll_bytes b);

/* Seconds for one collective. HUGE_VAL when `impl` does not apply to `kind` (e.g. a tree
 * all-gather) or to the group (hierarchical on one host). One rank costs 0. When the group has a
 * measured fit for `kind`, an applicable impl is priced by the fit (the library picks its own
 * algorithm when it runs) at hap_coll_fit_bytes (a point measured at that size first). */
double hap_coll_time(const hap_group *g, hap_coll_kind kind, hap_coll_impl impl, hap_coll_bytes b);

/* Whether hap_coll_time reads this collective from a point of the group's fit: a time measured
 * inside a plan's own iterations (cluster.h), which already holds whatever the runner did inside
 * the task (e.g. hap-run's rounding of an emulated half-precision sum). */
bool hap_coll_measured(const hap_group *g, hap_coll_kind kind, hap_coll_impl impl,
                       hap_coll_bytes b);

/* The fastest applicable implementation and its time (AUTO resolved). */
hap_coll_impl hap_coll_best(const hap_group *g, hap_coll_kind kind, hap_coll_bytes b,
                            double *seconds);

/* Seconds for one message src -> dst: latency + bytes / bandwidth (0 when src == dst). */
double hap_p2p_time(const hap_cluster *c, int32_t src, int32_t dst, double bytes);

/* Whether d runs `dtype`'s arithmetic as float32: a half-precision dtype (float16, bfloat16) for
 * which d has no FLOP/s of its own (a CPU: its preset and its profile rate float32 and float64
 * only). hap-run's CPU backend computes such a plan in float32 on float32 buffers whose values it
 * rounds (docs/execution.md), and hap_compute_time prices it the same way. */
bool hap_device_emulates_dtype(const hap_device *d, hap_dtype dtype);

/* Seconds for one op application on device `dev` at the local shapes in `io` (which must have
 * passed hap_op_infer; in_grad set for backward). A measured kernel time wins; otherwise
 * launch overhead + max(FLOP / rate, bytes / memory bandwidth), the rate from the device's GEMM
 * sweep (interpolated) for GEMM-like ops or its sustained FLOP/s. Views cost 0. Half-precision
 * applications on a device that emulates them (hap_device_emulates_dtype) are priced as the
 * float32 application of the same shapes; measured rows (float32 timings) serve them there and
 * nowhere else. */
double hap_compute_time(const hap_cluster *c, int32_t dev, hap_op op, const hap_op_io *io,
                        bool backward);

/* Group devices that hap_compute_time prices alike (same model, FLOP/s, memory bandwidth and
 * launch overhead, no measured sweep or kernel table): class_of[n_devices] gets 0, 1, ... in order
 * of first appearance; returns the number of classes. */
int32_t hap_device_classes(const hap_cluster *c, int32_t *class_of);

#endif
