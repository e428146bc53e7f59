/* sweep.h — hap-sim's what-if grid: axes over cluster spec parameters, model options and device
 * substitutions (`--sweep KEY=V1,V2,...`), their points in order, and what one point is: a model
 * spec, a cluster spec and the devices to substitute once the cluster is open.
 *
 * Axes. KEY is a cluster spec parameter (hap_cluster_param_get: gpus_per_host, hosts, ...), an
 * option of the base model when that is a zoo model (batch, layers, ...), or device[M]: every
 * device whose model contains M (ignoring case) becomes the device preset VALUE. Points run over
 * the grid of all axes, the last axis varying fastest. A point's specs are the base specs with its
 * values set (hap_spec_set, in axis order: the value set last comes first in the spec); a base
 * spec that does not parse is left as it is, and loading it reports why.
 *
 * With batch_per_device, the model's batch is batch_per_device x the point's devices (weak
 * scaling), set once the point's cluster is open.
 *
 * Errors are hap_err: one line naming the axis or key and what was expected. hap_sweep_init's are
 * the user's (the caller maps them to a usage error); hap_sweep_point_init fails only when a spec
 * does not fit in HAP_SWEEP_SPEC_MAX, which stops a sweep; hap_sweep_point_load's failures are the
 * point's alone, and the other points still run.
 *
 * Ownership: a hap_sweep is a plain value the caller owns; it borrows the config's model and
 * cluster strings, which must outlive it. hap_sweep_point_load returns an owned graph and cluster
 * (hap_graph_destroy, hap_cluster_destroy). Opening the cluster is the caller's callback, so a
 * cluster given as a measured profile (the store library) needs nothing of this one. */
#ifndef HAP_SIMULATE_SWEEP_H
#define HAP_SIMULATE_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cluster/cluster.h"
#include "cluster/presets.h"
#include "model/graph.h"

#define HAP_SWEEP_MAX_AXES   8
#define HAP_SWEEP_MAX_VALUES 64   /* values of one axis */
#define HAP_SWEEP_TEXT_MAX   64   /* bytes of a key or a value, with its NUL */
#define HAP_SWEEP_SPEC_MAX   1024 /* bytes of a point's model or cluster spec, with its NUL */
#define HAP_SWEEP_LABEL_MAX  256  /* bytes of a point's label, with its NUL (longer: cut) */

typedef enum hap_sweep_kind {
  HAP_SWEEP_CLUSTER = 0, /* a cluster spec parameter */
  HAP_SWEEP_MODEL,       /* a zoo model option */
  HAP_SWEEP_DEVICE,      /* device[MATCH]=PRESET */
} hap_sweep_kind;

typedef struct hap_sweep_axis {
  hap_sweep_kind kind;
  char key[HAP_SWEEP_TEXT_MAX];   /* as given: "gpus_per_host", "batch", "device[V100]" */
  char match[HAP_SWEEP_TEXT_MAX]; /* HAP_SWEEP_DEVICE: M of device[M] */
  int n;                          /* values, >= 1 */
  char values[HAP_SWEEP_MAX_VALUES][HAP_SWEEP_TEXT_MAX]; /* HAP_SWEEP_DEVICE: preset names */
} hap_sweep_axis;

typedef struct hap_sweep_config {
  const char *model;       /* the base model: a zoo spec or a hap-graph file */
  const char *cluster;     /* the base cluster: a spec, a hap-cluster file or a profile */
  bool cluster_is_profile; /* a measured profile: cluster parameters cannot be swept */
  int batch_per_device;    /* > 0: weak scaling (zoo models only, and no batch axis) */
  const char *const *axes; /* n_axes texts "KEY=V1,V2,..." */
  int n_axes;
} hap_sweep_config;

typedef struct hap_sweep {
  const char *model, *cluster; /* borrowed from the config */
  int batch_per_device;
  int n_axes;
  hap_sweep_axis axes[HAP_SWEEP_MAX_AXES];
} hap_sweep;

/* One point of the grid. */
typedef struct hap_sweep_point {
  int index;                   /* 0 .. hap_sweep_points() - 1 */
  int pos[HAP_SWEEP_MAX_AXES]; /* the value of each axis */
  /* "gpus_per_host=2 inter_gbps=10" ("" without axes); hap_sweep_point_load adds "batch=N" */
  char label[HAP_SWEEP_LABEL_MAX];
  char model[HAP_SWEEP_SPEC_MAX];   /* the point's model spec */
  char cluster[HAP_SWEEP_SPEC_MAX]; /* the point's cluster spec */
  int32_t devices;                  /* the cluster's devices once opened; 0 when it did not open */
} hap_sweep_point;

/* Opens a cluster spec (hap_cluster_load's contract); hap-sim passes hap_cluster_open. */
typedef hap_status (*hap_sweep_open_fn)(const char *spec, hap_cluster **out, hap_err *err);

/* Check the config and parse its axes into s, in the order: batch_per_device (a zoo model, no
 * "batch=" axis), then each axis (its form, a known key given once, 1 to HAP_SWEEP_MAX_VALUES
 * non-empty values, known presets; an unknown key lists the valid ones), then cluster axes
 * against a profile. HAP_EINVAL with the first problem. */
hap_status hap_sweep_init(hap_sweep *s, const hap_sweep_config *cfg, hap_err *err);

/* Points of the grid: the product of the axes' value counts (1 without axes). */
int hap_sweep_points(const hap_sweep *s);

/* Point p (0 <= p < hap_sweep_points): positions, label and specs. HAP_EINVAL when a spec is
 * longer than HAP_SWEEP_SPEC_MAX - 1 characters. */
hap_status hap_sweep_point_init(const hap_sweep *s, int p, hap_sweep_point *pt, hap_err *err);

/* Build the point: open its cluster with `open_cluster` (pt->devices), set the batch (pt->model and
 * pt->label), load its model (hap_model_load), substitute its devices. On success *graph and
 * *cluster are owned by the caller; on failure both are NULL and err says why. */
hap_status hap_sweep_point_load(const hap_sweep *s, hap_sweep_point *pt,
                                hap_sweep_open_fn open_cluster, hap_graph **graph,
                                hap_cluster **cluster, hap_err *err);

/* Make every device of c whose model contains `match` (ignoring case) a `preset`: its figures,
 * with its measured GEMM and kernel samples dropped (they were the old device's). Returns how many
 * devices changed. */
int hap_sweep_substitute(hap_cluster *c, const char *match, const hap_device_preset *preset);

#endif
