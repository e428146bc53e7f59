/* profile_store.h — hap-profile: what hap-profile measured on a cluster (devices, GEMM sweeps,
 * kernel timings, point-to-point sweeps, collective sweeps, environment), its HDF5 file (atomic
 * write, checked read), merging per-machine profiles, and loading one into the cluster model.
 * The HDF5 layout is documented at the top of profile_store.c.
 * Ownership: hap_profile_create / _read / _merge return an owned profile freed with
 * hap_profile_destroy; every string and array inside belongs to it. Numbers and array elements may
 * be written directly; strings and arrays are set or grown only through the functions below. */
#ifndef HAP_PROFILE_STORE_H
#define HAP_PROFILE_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "cluster/cluster.h"
#include "model/ops.h"
#include "store/fit.h"

#define HAP_PROFILE_FORMAT        "hap-profile"
#define HAP_PROFILE_VERSION_MAJOR 2 /* 2.0: N-piece fits; 1.x (two pieces) is still read */
#define HAP_PROFILE_VERSION_MINOR 2 /* 2.1: update_bw_Bps; 2.2: kernels mean_s */

/* Bytes of a kernel row's readable shape string, NUL included (a fixed-length field on disk). */
#define HAP_PROFILE_SHAPE_MAX 128

/* Links to_cluster uses where nothing was measured: a PCIe-class path inside a host, and a
 * 100 Gb/s NIC (a path between hosts crosses two, 10 us in all). */
#define HAP_PROFILE_DEFAULT_INTRA ((hap_link){.latency_s = 5e-6, .bandwidth_Bps = 10e9})
#define HAP_PROFILE_DEFAULT_NIC   ((hap_link){.latency_s = 5e-6, .bandwidth_Bps = 12.5e9})

/* One GEMM of the sweep: (m x k) times (k x n). */
typedef struct hap_profile_gemm {
  int64_t m, n, k;
  hap_dtype dtype;
  double seconds;     /* median, s */
  double flops_per_s; /* 2 m n k / seconds, FLOP/s */
} hap_profile_gemm;

/* One op kernel at exact local shapes. */
typedef struct hap_profile_kernel {
  hap_op op;
  bool backward;
  uint64_t shape_key;                /* hap_kernel_shape_key of the input shapes */
  char shape[HAP_PROFILE_SHAPE_MAX]; /* readable, e.g. "[256, 768] x [3072, 768]" */
  double p50_s, p95_s;               /* s */
  int32_t reps;                      /* timed runs behind the statistics */
  double mean_s; /* a replayed row's price: the runs' mean (fit.h HAP_PRICE_TRIM; earlier
                    hap-profiles cut 5 % from each end), s;
                    0 = not recorded (hot-loop rows, files before 2.2): p50_s prices it */
} hap_profile_kernel;

typedef struct hap_profile_device {
  char *name;  /* unique, e.g. "v100-0:3" */
  char *host;  /* one of hap_profile.hosts */
  char *model; /* "Tesla V100-SXM2-16GB", "cpu" */
  hap_device_kind kind;
  int64_t memory_bytes;               /* bytes */
  double memory_bw_Bps;               /* measured, bytes/s */
  double peak_flops[HAP_DTYPE_COUNT]; /* published peak, FLOP/s; 0 = unknown */
  double launch_s;                    /* empty-kernel launch overhead, s */
  double update_bw_Bps;     /* the SGD update's bytes/s (12 B per element); 0 = not measured */
  int32_t n_gemm, cap_gemm; /* cap_*: allocated length, private */
  hap_profile_gemm *gemm;
  int32_t n_kernels, cap_kernels;
  hap_profile_kernel *kernels;
} hap_profile_device;

/* A sweep of one ordered device pair. Arrays have n_sizes (N) entries, samples N * reps
 * (row-major: samples_s[i * reps + r] is repetition r at size i). */
typedef struct hap_profile_p2p {
  int32_t src, dst; /* device indices, different */
  int32_t n_sizes, reps;
  int32_t warmup;       /* untimed iterations before each size */
  int32_t iters;        /* launches averaged into one sample (1: every launch timed) */
  int64_t *sizes_bytes; /* strictly increasing message sizes, bytes */
  double *samples_s;
  double *p50_s, *p95_s;
  hap_link fit;      /* one alpha-beta over (sizes, p50): the cluster model's link */
  hap_ab_fit pieces; /* piecewise alpha-beta over (sizes, p50) (1.x files: fit as one piece) */
} hap_profile_p2p;

/* A sweep of one collective over one group; arrays as in hap_profile_p2p. */
typedef struct hap_profile_coll {
  hap_coll_kind kind;
  char *group; /* "world", "host:v100-0", "cross-host" ("world:in-place": nccl-tests' in-place
                  columns, nccl_import.h): unique per kind, no '/' */
  int32_t n_ranks;
  int32_t *ranks; /* device indices in the communicator's rank order */
  int32_t n_sizes, reps, warmup, iters;
  int64_t *sizes_bytes; /* nccl-tests meaning (see hap_coll_fit in cluster.h), bytes */
  double *samples_s;
  double *p50_s, *p95_s;
  double *algbw_Bps, *busbw_Bps; /* sizes / p50 and algbw * hap_busbw_factor, bytes/s */
  hap_ab_fit fit;                /* piecewise alpha-beta over (sizes, p50) */
} hap_profile_coll;

/* The group name (or its prefix, "plan:...") of a collective timed inside a plan's own iterations
 * (hap-profile --plan's replay, profile/replay.h): its sizes are the plan's, and hap_profile_to_
 * cluster makes each size and its price a point of the fit over the same devices (cluster.h),
 * which prices exactly those sizes. The price follows the environment entry
 * HAP_PROFILE_PRICE_ENV: "mean", the samples' mean (store/fit.h HAP_PRICE_TRIM, as a replayed
 * kernel's mean_s), or "p50" (and for a profile without the entry, written before it). */
#define HAP_PROFILE_PLAN_GROUP "plan"
#define HAP_PROFILE_PRICE_ENV  "hap.price"
bool hap_profile_is_plan_group(const char *group);

typedef struct hap_profile_kv {
  char *key, *value;
} hap_profile_kv;

typedef struct hap_profile {
  int32_t version_major, version_minor; /* of the file read; create sets the current */
  char *created;                        /* ISO-8601 UTC, "2025-01-31T12:00:00Z" */
  char *tool;                           /* "hap-profile 0.1.0" */
  char *backend;                        /* "cpu+mpi" | "cuda+nccl" */
  char *source;                         /* file it was read from, or NULL; not stored */
  int32_t n_hosts, cap_hosts;
  char **hosts;
  int32_t n_env, cap_env;
  hap_profile_kv *env; /* NCCL_*, OMPI_*, CUDA_VISIBLE_DEVICES, versions ... */
  int32_t n_devices, cap_devices;
  hap_profile_device *devices;
  int32_t n_p2p, cap_p2p;
  hap_profile_p2p *p2p;
  int32_t n_colls, cap_colls;
  hap_profile_coll *colls;
} hap_profile;

/* An empty profile: the current version, created = now, tool = "hap-profile <version>", backend "".
 * NULL on allocation failure. */
hap_profile *hap_profile_create(void);
void hap_profile_destroy(hap_profile *p);

/* Replace the root strings; NULL keeps a field. */
hap_status hap_profile_set_meta(hap_profile *p, const char *created, const char *tool,
                                const char *backend, hap_err *err);
hap_status hap_profile_add_host(hap_profile *p, const char *name, hap_err *err);
/* Set (or replace) an environment entry. */
hap_status hap_profile_set_env(hap_profile *p, const char *key, const char *value, hap_err *err);
const char *hap_profile_get_env(const hap_profile *p, const char *key); /* NULL if unset */

/* Append a device (numbers zero, to be filled in); *index gets its index. Pointers into
 * p->devices stay valid until the next hap_profile_add_device. */
hap_status hap_profile_add_device(hap_profile *p, const char *name, const char *host,
                                  const char *model, hap_device_kind kind, int32_t *index,
                                  hap_err *err);
hap_status hap_profile_add_gemm(hap_profile_device *d, const hap_profile_gemm *row, hap_err *err);
hap_status hap_profile_add_kernel(hap_profile_device *d, const hap_profile_kernel *row,
                                  hap_err *err);

/* Append a sweep with zeroed arrays of n_sizes (and n_sizes * reps samples), warmup 0, iters 1;
 * *index (may be NULL) gets its index. The collective's group name and ranks are copied. */
hap_status hap_profile_add_p2p(hap_profile *p, int32_t src, int32_t dst, int32_t n_sizes,
                               int32_t reps, int32_t *index, hap_err *err);
hap_status hap_profile_add_coll(hap_profile *p, hap_coll_kind kind, const char *group,
                                const int32_t *ranks, int32_t n_ranks, int32_t n_sizes,
                                int32_t reps, int32_t *index, hap_err *err);

int32_t hap_profile_find_device(const hap_profile *p, const char *name); /* -1 if none */
const hap_profile_p2p *hap_profile_find_p2p(const hap_profile *p, int32_t src, int32_t dst);
const hap_profile_coll *hap_profile_find_coll(const hap_profile *p, hap_coll_kind kind,
                                              const char *group);

/* From the samples: p50_s and p95_s of every sweep (hap_p50_p95), and of every collective
 * algbw_Bps = sizes / p50 and busbw_Bps = algbw * hap_busbw_factor(kind, n_ranks). */
hap_status hap_profile_compute_stats(hap_profile *p, hap_err *err);
/* From the p50s: every p2p fit (hap_fit_alpha_beta; its pieces = that one piece) and collective
 * fit (hap_fit_piecewise's two pieces). hap-profile refits with profile/fit_rel.h. */
hap_status hap_profile_fit(hap_profile *p, hap_err *err);

/* Check everything a reader relies on. Errors name the profile path of the offending item
 * ("/p2p/0-1: bandwidth_Bps is nan, expected a finite number > 0"). */
hap_status hap_profile_validate(const hap_profile *p, hap_err *err);

/* Validate, then write `path.tmp.<pid>` and rename it onto `path`; on failure nothing is left
 * behind. Errors start with the path. Like hap_profile_read, turns HDF5's automatic error
 * printing off for the calling thread (and leaves it off), so nothing is ever printed. */
hap_status hap_profile_write(const hap_profile *p, const char *path, hap_err *err);
/* Read and validate. A newer major version is HAP_EVERSION; a malformed or corrupted file is
 * HAP_EPARSE (HAP_EIO when it cannot be opened), with one line naming the file and the
 * group, dataset or attribute. Devices and p2p sweeps come back in file order, collectives
 * ordered by kind, then as written; p->source is the path. */
hap_status hap_profile_read(const char *path, hap_profile **out, hap_err *err);

/* Combine per-machine profiles: hosts, devices, sweeps and environment of parts[0], then
 * parts[1], ...; device indices are renumbered and every p2p / collective index remapped. A host
 * or device name in two parts is an error. A collective group name already taken for its kind
 * becomes "<group>@<first host of its part>". An environment key whose value differs between
 * parts becomes "<key>@<host>" for every part that has it. Root strings come from parts[0]
 * (created = now); the backends must agree. */
hap_status hap_profile_merge(hap_profile *const *parts, int n, hap_profile **out, hap_err *err);

/* Build the cluster model (cluster.h): one host per profile host, its devices contiguous in the
 * order of p->devices; each host's intra link is the median (latency and bandwidth separately)
 * of the fitted p2p links inside it, else inside any host, else HAP_PROFILE_DEFAULT_INTRA; its
 * NIC is the median of the fitted p2p links with one end on it and the other elsewhere (latency
 * halved, since a path crosses two NICs), else of all cross-host links, else
 * HAP_PROFILE_DEFAULT_NIC; the host's intra_origin and nic_origin say which (measured, borrowed,
 * assumed). Devices take the measured fields, sustained FLOP/s per dtype = the
 * best GEMM rate (else the peak), GEMM rows as hap_gemm_sample, kernel rows as hap_kernel_sample
 * (p50). Every p2p fit becomes a hap_cluster_set_link override, every collective fit a
 * hap_cluster_add_fit (a second group with the same kind and rank set is skipped), with the
 * (size, p50) pairs of the plan groups (HAP_PROFILE_PLAN_GROUP) of its kind and devices as its
 * points; a plan group over devices no sweep covers brings its own fit. The cluster is
 * validated; its name and source are p->source (or "profile"). */
hap_status hap_profile_to_cluster(const hap_profile *p, hap_cluster **out, hap_err *err);

#endif
