/* pipeline_lower.h — a pipelined plan lowered for the simulator and the executor
 * (docs/design-pipeline.md): each stage's program lowered on one micro-batch of its stage graph
 * (run once per op of the schedule), its tasks sorted into the parts an op runs, and the boundary
 * transfers between stages as (sender, receiver, bytes) pairs of the cluster's devices.
 *
 * What device d runs: for each op of its group's order (plan/schedule.h; op (micro j, chunk c) is
 * virtual stage c * p + group), a forward op runs the stage's FWD tasks on d's index in the group,
 * after the boundary values sent to d for micro-batch j have arrived, and then sends its boundary
 * outputs on; a backward op waits for the boundary gradients sent to d, runs the LOSS tasks (the
 * stage loss's forward, which reads the received gradient) and the BWD tasks, and sends the
 * gradients of its boundary inputs back. After the group's last op, each of its stages runs its
 * TAIL once: gradient synchronisation (hap_task_is_grad_sync's rule) and the updates.
 *
 * A boundary tensor moves from the layout its producing stage holds it in to the layout the
 * consuming stage sources it in, every (sender, receiver) pair whose boxes intersect exchanging
 * the intersection: from a Gather or Identity layout one sender per distinct box (receiver j takes
 * from the (j mod k)-th of the k senders holding it); partial sums (Reduce) are reduce-scattered
 * in the sending group first (hap_pipe_xfer.reduce_scatter), or, on a one-device group, sent as
 * they are; a tensor sourced whole (Identity) on several devices arrives as shards that the
 * receiving group all-gathers (hap_pipe_xfer.all_gather). The gradient of a boundary input leaves
 * the consuming stage as the gradient of the input's source: the same Gather, or, for an input
 * sourced whole (Identity) on several devices, partial sums that are reduce-scattered like a
 * Reduce value (Megatron-LM's tensor-parallel all-reduce before the send, halved); it arrives in
 * the layout the producing stage sources "<y>@grad" in. A parameter used by several stages
 * (GPT's tied embedding) has its gradients summed across them by the executor
 * (run/pipeline_run.h) and the simulation (simulate/pipeline_plan_sim.h). Ownership:
 * hap_pipe_lower returns an owned hap_pipe_lowered freed with hap_pipe_lowered_destroy; it borrows
 * the pipeline, the graph and the cluster. */
#ifndef HAP_PLAN_PIPELINE_LOWER_H
#define HAP_PLAN_PIPELINE_LOWER_H

#include <stdbool.h>
#include <stdint.h>

#include "plan/lower.h"
#include "plan/pipeline.h"
#include "plan/schedule.h"

/* Which op of the schedule runs a stage task. */
typedef enum hap_pipe_part {
  HAP_PIPE_PART_FWD = 0, /* a forward op */
  HAP_PIPE_PART_LOSS,    /* a backward op, first: the stage loss's forward (it reads y@grad) */
  HAP_PIPE_PART_BWD,     /* a backward op */
  HAP_PIPE_PART_TAIL,    /* once per iteration, after the group's last op */
  HAP_PIPE_PART_COUNT
} hap_pipe_part;

const char *hap_pipe_part_name(hap_pipe_part p); /* "fwd", "loss", "bwd", "tail" */

typedef struct hap_pipe_lowered_stage {
  hap_stage_graph *sg;    /* the stage graph (owned); NULL: the whole graph */
  hap_cluster *gc;        /* the group's cluster (owned); NULL: the whole cluster */
  hap_plan *plan;         /* the stage program for one micro-batch (owned copy, micro_batches 1) */
  hap_graph *micro;       /* one micro-batch of the stage graph (owned); NULL when m is 1 */
  hap_lowered *lw;        /* plan lowered on it (owned) */
  const hap_graph *graph; /* what lw runs on: micro, sg->graph or the whole graph */
  const hap_cluster *cluster; /* gc or the whole cluster */
  const int32_t *devices;     /* [lw->n_devices]: the cluster's device ids, the group's order */
  uint8_t *part;              /* [lw->n_tasks]: hap_pipe_part */
} hap_pipe_lowered_stage;

/* How a stage holds a boundary tensor: a layout, with the ratios' segment and the granule of a
 * Gather (-1 and 1 otherwise). */
typedef struct hap_pipe_holding {
  hap_layout layout;
  int32_t segment;
  int64_t granule;
} hap_pipe_holding;

/* Elements [lo, hi) per dim of a boundary tensor, in one micro-batch's coordinates (a 2-D stage
 * program's replica r holds slice r of dim 0 of what its replica graph splits). */
typedef struct hap_pipe_box {
  int32_t rank;
  int64_t lo[HAP_MAX_DIMS], hi[HAP_MAX_DIMS];
} hap_pipe_box;

/* One boundary movement per micro-batch: a tensor's value (forward) or its gradient (backward). */
typedef struct hap_pipe_xfer {
  int32_t tensor; /* the whole graph's tensor id */
  bool gradient;
  int32_t from_stage, to_stage; /* value: producer -> consumer; gradient: consumer -> producer */
  int32_t pair0, n_pairs;       /* pairs[pair0 .. pair0 + n_pairs) */
  /* What the sender reads: stage tensor send_tensor of from_stage held as `held` (a value: that
   * prop's values; a gradient: the gradient of the boundary input sourced as `held`). What the
   * receiver fills: the values of stage tensor recv_tensor of to_stage (the boundary input, or
   * "<y>@grad") sourced as `wanted`. */
  int32_t send_tensor, recv_tensor;
  hap_pipe_holding held, wanted;
  /* Each sender holds a partial sum of the whole (a Reduce value, or the gradient of an input
   * sourced whole on several devices): receivers add what arrives unless it was reduce-scattered
   * first. */
  bool partial;
  /* The producing stage holds the value as partial sums (Reduce): each replica's devices first
   * reduce-scatter it along dim shard_dim (the holding's ratios), then each sends its shard (pairs
   * count from that Gather), as Megatron-LM's scatter/gather does, instead of every device sending
   * a partial. */
  bool reduce_scatter;
  int32_t shard_dim;  /* -1 without reduce_scatter */
  double shard_bytes; /* each sender's shard after the reduce-scatter, bytes */
  /* The consuming stage sources it whole (Identity) on several devices per replica: each
   * receives a shard along gather_dim and the replica all-gathers them before the op
   * (Megatron-LM's scatter/gather), so a replica's slice crosses the link once. */
  bool all_gather;
  int32_t gather_dim;        /* -1 without all_gather */
  double gather_shard_bytes; /* each receiver's shard, bytes */
} hap_pipe_xfer;

typedef struct hap_pipe_pair {
  int32_t src, dst; /* the cluster's device ids (src != dst or the same device: a local copy) */
  double bytes;     /* per micro-batch, as priced (the stage's compute precision), bytes */
  hap_pipe_box box; /* the elements that move: the sender's box (after any reduce-scatter) meets
                       the receiver's (before any all-gather) */
} hap_pipe_pair;

typedef struct hap_pipe_lowered {
  const hap_pipeline *pipeline;
  const hap_graph *graph;
  const hap_cluster *cluster;
  hap_pipe_order *order; /* the groups' op orders (owned) */
  int32_t n_stages;
  hap_pipe_lowered_stage *stages; /* [n_stages] */
  int32_t n_xfers, n_pairs;
  hap_pipe_xfer *xfers; /* by from_stage, then tensor id; values before gradients */
  hap_pipe_pair *pairs;
} hap_pipe_lowered;

/* Lower `pl` (validated against `g` and `c`). Errors: HAP_ENOMEM; HAP_EINVAL naming the stage
 * ("stages[2]: ...") for a stage program that does not lower, or a boundary tensor the producing
 * stage never makes available. */
hap_status hap_pipe_lower(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                          hap_pipe_lowered **out, hap_err *err);
void hap_pipe_lowered_destroy(hap_pipe_lowered *pw);

/* Stage k's memory on device d of its group (index in the group), bytes: its program's
 * (hap_plan.device_memory, as the synthesizer recorded it for one micro-batch) with the
 * activations of the micro-batches the schedule keeps in flight on the group
 * (hap_pipe_order_in_flight, a chunk's share: / v); -1 when the program recorded none. */
double hap_pipe_stage_memory(const hap_pipe_lowered *pw, int32_t k, int32_t d);

/* The first (stage, device of its group) whose memory (hap_pipe_stage_memory) is above its
 * device's memory_bytes, or limit_bytes when > 0: false when every recorded one fits. */
bool hap_pipe_first_overflow(const hap_pipe_lowered *pw, double limit_bytes, int32_t *stage,
                             int32_t *device);

#endif
