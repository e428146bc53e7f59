/* lower.h — a plan lowered to the task list every device runs (docs/simulation.md): forward steps
 * in plan order; backward in reverse, with each computation's gradient kernels, each
 * communication's dual (all-gather <-> reduce-scatter, all-reduce <-> all-reduce, all-to-all <->
 * the inverse all-to-all, slice <-> pad, keep_once <-> keep_once) and each parameter's gradient
 * synchronisation (replicated: all-reduce; ZeRO: reduce-scatter); then the SGD update. The program
 * is SPMD, so every device runs the same tasks in the same order; only the local sizes differ
 * (hap_lowered_work). The simulator prices these tasks and the executor runs them, and their names
 * are the join key between the two:
 *   "<node>.fwd", "<node>.bwd", "<node>.upd"           computations and updates
 *   "<tensor>.<op>"                                     forward layout changes, e.g. "h.all_gather"
 *   "<tensor>.grad.<op>"                                backward duals and gradient synchronisation
 *   "<param>.grad.replica_all_reduce"                 2-D plans: a gradient shard across replicas
 *   "<param>.grad.sfb_gather_x", "...sfb_gather_dy"   sufficient-factor broadcasting (sfb storage):
 *   "<param>.grad.sfb"                                 a linear's input and output gradient
 *                                                      all-gathered, then its weight's gradient
 * A name that would repeat gets ".2", ".3", ... in order of appearance.
 * 2-D plans (hap_plan.replicas > 1): every group of group_size consecutive devices runs the task
 * list on one replica's graph (hap_graph_split_batch); a collective spans either the devices of
 * one group or, for the replica all-reduces, the devices with the same index in every group.
 * The training policy (plan->policy, model/policy.h) changes no task and no name: it changes what
 * the simulator prices (hap_lowered_priced_work): one micro-batch of the graph in the compute
 * precision (priced_graph), each batch-carrying task run once per micro-batch (repeats), a
 * recomputed node's forward (or a dropped tensor's forward collective) run again before its
 * backward task (recompute_of), the policy's optimizer pass, gradient reductions in the gradient's
 * precision, ZeRO-3 parameters gathered twice (forward and backward). The executor's work
 * (hap_lowered_work) is that of exec_graph: one micro-batch of local_graph in float32 (hap-run
 * stores half precision as rounded float32 values) and the SGD update.
 * Ownership: hap_lower returns an owned hap_lowered freed with hap_lowered_destroy; it borrows the
 * plan and the graph, which must outlive it. */
#ifndef HAP_LOWER_H
#define HAP_LOWER_H

#include <stdint.h>

#include "cluster/cost.h"
#include "model/graph.h"
#include "plan/plan.h"

typedef enum hap_task_kind {
  HAP_TASK_COMPUTE = 0, /* a node's forward or backward kernels; compute stream */
  HAP_TASK_LOCAL,       /* a layout change without communication; compute stream */
  HAP_TASK_COLLECTIVE,  /* over the devices of its span; communication stream */
  HAP_TASK_UPDATE,      /* SGD update of the parameters a node owns; compute stream */
  HAP_TASK_KIND_COUNT
} hap_task_kind;

typedef enum hap_task_phase { HAP_PHASE_FWD = 0, HAP_PHASE_BWD, HAP_PHASE_UPD } hap_task_phase;

/* Which devices a COLLECTIVE runs over. */
typedef enum hap_task_span {
  HAP_SPAN_GROUP = 0, /* the devices of one group (every device when replicas == 1) */
  HAP_SPAN_REPLICAS   /* the devices with the same index in every group */
} hap_task_span;

/* What a LOCAL task does on each device. */
typedef enum hap_local_op {
  HAP_LOCAL_SLICE = 0, /* Identity -> Gather(d): keep the device's slice */
  HAP_LOCAL_PAD,       /* Gather(d) -> Reduce: the slice in place, zeros elsewhere (slice's dual) */
  HAP_LOCAL_KEEP_ONCE, /* Identity -> Reduce: device 0 keeps the tensor, the others zeros */
  HAP_LOCAL_COPY,      /* Gather(d) of one segment -> Gather(d) of another with the same split: the
                          device's part as it is (an all-to-all that would move nothing) */
  HAP_LOCAL_OP_COUNT
} hap_local_op;

/* A task's part in sufficient-factor broadcasting (HAP_STORE_SFB) of a linear node's weight. */
typedef enum hap_sfb_role {
  HAP_SFB_NONE = 0,
  HAP_SFB_NO_WEIGHT_GRAD, /* COMPUTE bwd of the linear node: every gradient but the weight's */
  HAP_SFB_GATHER_X,       /* COLLECTIVE: the node's input (values) all-gathered to I */
  HAP_SFB_GATHER_DY,      /* COLLECTIVE: the node's output gradient all-gathered to I */
  HAP_SFB_WEIGHT_GRAD,    /* COMPUTE: dW = dYᵀ X over the whole batch, on every device */
} hap_sfb_role;

const char *hap_task_kind_name(hap_task_kind k);   /* "compute", "local", "collective", "update" */
const char *hap_task_phase_name(hap_task_phase p); /* "fwd", "bwd", "upd" */
const char *hap_local_op_name(hap_local_op op);    /* "slice", "pad", "keep_once", "copy" */

typedef struct hap_task {
  const char *name; /* owned by the hap_lowered */
  hap_task_kind kind;
  hap_task_phase phase;
  int32_t step;        /* the plan step it comes from; -1 for UPDATE */
  int32_t node;        /* COMPUTE, UPDATE: graph node; -1 otherwise */
  int32_t tensor;      /* LOCAL, COLLECTIVE: the tensor whose value (FWD) or gradient (BWD) moves */
  hap_coll_kind coll;  /* COLLECTIVE */
  hap_task_span span;  /* COLLECTIVE */
  hap_coll_impl impl;  /* COLLECTIVE: the implementation the plan chose */
  hap_local_op local;  /* LOCAL */
  hap_layout from, to; /* LOCAL, COLLECTIVE: layout of the data before and after */
  int32_t from_segment, to_segment; /* ratios a Gather `from` / `to` is split by */
  int64_t granule;                  /* of those Gathers; 1 otherwise */
  int32_t dep0, n_deps;     /* deps[dep0 .. dep0+n_deps): tasks (earlier ids) it waits for */
  int32_t param0, n_params; /* UPDATE: params[param0 ..): the parameter tensors it updates */
  int32_t repeats;          /* runs per iteration (the policy's micro-batches; 1 by default) */
  int32_t recompute_of;     /* -1, or the forward task (earlier id) whose whole work runs again
                               before this backward task: recomputation */
  hap_sfb_role sfb;         /* NONE but for sufficient-factor broadcasting; its tasks' `step` is
                               the linear node's compute step */
} hap_task;

typedef struct hap_lowered {
  const hap_plan *plan;
  const hap_graph *graph;
  int32_t n_devices;
  int32_t replicas, group_size; /* the plan's; device d is index d % group_size of group
                                   d / group_size */
  const hap_graph *local_graph; /* shapes one group runs: graph, or one replica's (owned) */
  /* what the simulator prices: one micro-batch of local_graph in the policy's compute precision
   * (hap_graph_for_policy); local_graph itself under the default policy (owned otherwise) */
  const hap_graph *priced_graph;
  /* what the executor runs: one micro-batch of local_graph, float32 (local_graph itself with one
   * micro-batch; owned otherwise) */
  const hap_graph *exec_graph;
  int32_t n_tasks;
  hap_task *tasks; /* every device's order: per stream, tasks run in id order */
  int32_t *deps;
  int32_t *params;
  int32_t *source_step;           /* [graph tensors]: the step that sources it, or -1 */
  struct hap_lower_private *priv; /* names and the shard-length cache */
} hap_lowered;

/* Is task t a gradient synchronisation (a parameter's gradient all-reduce or reduce-scatter at its
 * source, a 2-D plan's replica all-reduce, or sufficient-factor broadcasting's two all-gathers)?
 * With micro-batches, the reduce-scatter of a ZeRO parameter runs once per micro-batch (its
 * `repeats`), the others once per iteration. */
bool hap_lowered_is_grad_sync(const hap_lowered *lw, int32_t t);

/* Lower a plan validated against `g` (hap_plan_validate). Errors: HAP_ENOMEM, or HAP_EINVAL for
 * a plan that does not follow its own property flow. */
hap_status hap_lower(const hap_plan *p, const hap_graph *g, hap_lowered **out, hap_err *err);
void hap_lowered_destroy(hap_lowered *lw);

/* Lengths of a dim of `extent` (of local_graph) split in units of `granule` by segment `seg`'s
 * ratios (cached; owned by lw): group_size entries, device d's at d % group_size; NULL on
 * allocation failure. */
const int64_t *hap_lowered_lengths(hap_lowered *lw, int64_t extent, int64_t granule, int32_t seg);

/* What task `t` does on device `dev`. For COMPUTE, `io` (whose attrs point into this struct: use
 * it in place, do not copy the struct) holds the local shapes and `backward` the direction; for
 * every kind, `flops` and `bytes` are the device's share: COMPUTE the op's FLOPs and bytes read +
 * written, LOCAL the bytes written, COLLECTIVE the bytes this device contributes in the
 * hap_coll_bytes sense, UPDATE 2 FLOPs per parameter element and 3x the bytes it holds.
 * Sufficient-factor broadcasting: the linear's backward without its weight gradient
 * (io.in_grad[1] false), and the weight-gradient task with the whole node's shapes and only
 * in_grad[1] set (len -1). */
typedef struct hap_task_work {
  hap_op op; /* COMPUTE */
  bool backward;
  int64_t len; /* the device's length of the sharded index, or -1 (nothing sharded) */
  hap_attrs attrs;
  hap_op_io io;
  double flops; /* FLOP */
  double bytes; /* bytes */
} hap_task_work;

hap_status hap_lowered_work(hap_lowered *lw, int32_t t, int32_t dev, hap_task_work *out,
                            hap_err *err);
/* The same as the simulator prices one run of it under the plan's policy: shapes and bytes of
 * priced_graph; UPDATE the policy's pass (hap_policy_update_bytes and _flops per element held,
 * over the copies when ZeRO >= 1 shards the update); gradient reductions of parameters in the
 * gradient's precision. Equal to hap_lowered_work under the default policy. */
hap_status hap_lowered_priced_work(hap_lowered *lw, int32_t t, int32_t dev, hap_task_work *out,
                                   hap_err *err);

/* The bytes per element of the tensor a COLLECTIVE or LOCAL task moves, as priced
 * (hap_lowered_priced_work): its dtype's size in priced_graph (2 for a half-precision
 * activation), a parameter's gradient reduction in the gradient's precision; 0 for other tasks. */
double hap_lowered_elem_bytes(const hap_lowered *lw, int32_t t);

/* A COLLECTIVE task's per-device bytes as priced (n_devices entries, as hap_coll_bytes_of wants
 * them; hap_lowered_priced_work's). An all-to-all between two segments' splits of one dim: only
 * what moves (hap_shard_moved, hap_reshard_spread). */
hap_status hap_lowered_coll_bytes(hap_lowered *lw, int32_t t, double *per_rank, hap_err *err);

/* The sub-groups a collective of span sp runs over: GROUP, one per group of group_size
 * consecutive devices; REPLICAS, one per index in a group. Their number, their size, and member i
 * of sub-group s (a device id). */
int32_t hap_lowered_n_subgroups(const hap_lowered *lw, hap_task_span sp);
int32_t hap_lowered_subgroup_size(const hap_lowered *lw, hap_task_span sp);
int32_t hap_lowered_subgroup_member(const hap_lowered *lw, hap_task_span sp, int32_t s, int32_t i);
/* The sub-group of collective task t that device d joins: its members in ring order into ranks[]
 * (at most n_devices); returns how many. */
int32_t hap_lowered_coll_group(const hap_lowered *lw, int32_t t, int32_t d, int32_t *ranks);

/* How many times its priced bytes collective or local task t moves on a device that holds the
 * policy's half-precision values in float32 (cost.h hap_device_emulates_dtype: hap-run's CPU
 * backend): 4 / the priced bytes per element for a half-precision tensor, else 1. */
double hap_lowered_emulated_scale(const hap_lowered *lw, int32_t t);

/* What collective task t moves on the devices of cluster c, as the simulator prices it
 * (n_devices entries, as hap_coll_bytes_of wants a sub-group's): hap_lowered_coll_bytes, times
 * hap_lowered_emulated_scale on a sub-group whose members all emulate the policy's half
 * precision. c NULL: every device emulates it (what hap-run's CPU runner moves). */
hap_status hap_lowered_coll_moved_bytes(hap_lowered *lw, const hap_cluster *c, int32_t t,
                                        double *per_rank, hap_err *err);

#endif
