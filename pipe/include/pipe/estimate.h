/* estimate.h — what a pipeline would do, at stage granularity (docs/design-pipeline.md): the
 * graph's node order cut into p*v ranges (hap_stage_cuts_rated: a range costs its training FLOPs
 * at its group's rate, the sum of its devices' sustained FLOP/s, so a slower group gets fewer, or
 * its boundary sent on and its gradient back over the slowest group-to-group link, whichever is
 * longer), virtual stage k on device group k % p (p groups of
 * consecutive devices, equally many or as groups= says), each stage's program synthesised for one
 * micro-batch of its stage graph on its group's cluster and simulated (stage_times.h), and one
 * iteration of the schedule simulated from those times (pipeline_sim.h). A group sends a boundary
 * with all its devices at once, device i to device i of the next group, those leaving a host
 * sharing its NIC; the slowest such group-to-group link carries every boundary (groups of unequal
 * size: as many pairs as the smaller group has devices). Memory per stage: its program's, with the
 * activations of as many micro-batches as the order keeps in flight. Not yet: per-device lowering,
 * NIC sharing with the stages' own collectives, unequal groups (docs/design-pipeline.md). The
 * result carries the pipelined plan (plan/pipeline.h) it priced. Ownership: hap_pipe_estimate_run
 * returns an owned estimate freed with hap_pipe_estimate_destroy.
 */
#ifndef HAP_PIPE_ESTIMATE_H
#define HAP_PIPE_ESTIMATE_H

#include <stdint.h>

#include "plan/pipeline.h"
#include "plan/schedule.h"
#include "simulate/pipeline_sim.h"
#include "simulate/stage_times.h"
#include "synth/synth.h"

#define HAP_PIPE_MAX_GROUPS 64

/* What --pipeline asks for: "stages=P[,schedule=gpipe|1f1b|interleaved][,chunks=V]
 * [,micro_batches=M][,groups=D1+D2+...]". */
typedef struct hap_pipe_spec {
  int32_t stages;             /* p >= 1 */
  hap_pipe_schedule schedule; /* default 1f1b */
  int32_t chunks;             /* v; default 1 (interleaved: 2) */
  int32_t micro_batches;      /* m; 0: the policy's */
  /* groups=: devices per group, consecutive in device order (a heterogeneous cluster's groups
   * may differ in size and type); n_groups 0: p equal groups. Given alone, it sets p. */
  int32_t n_groups;
  int32_t group_devices[HAP_PIPE_MAX_GROUPS];
  /* The node order's cuts, stages * chunks + 1 of them from 0 to n_nodes, increasing (a planner's
   * own slicing, e.g. alpa's inter-operator pass); n_cuts 0: the cuts weigh each group's compute
   * against the boundary sends (hap_stage_cuts_rated). Not parsed from text. */
  int32_t n_cuts;
  int32_t cuts[HAP_PIPE_MAX_GROUPS + 1];
} hap_pipe_spec;

/* Parse `text` into *out (defaults first). HAP_EINVAL with one line naming the key and what was
 * expected ("pipeline: schedule 'x', expected gpipe, 1f1b, interleaved"). */
hap_status hap_pipe_spec_parse(const char *text, hap_pipe_spec *out, hap_err *err);

/* One virtual stage. */
typedef struct hap_pipe_stage {
  int32_t first, end;    /* nodes [first, end) of the graph */
  int32_t group;         /* device group: devices [group_first[group], + group_devices[group]) */
  hap_stage_times times; /* per micro-batch (the tail once per iteration), s */
  double boundary_bytes; /* activations it sends on per micro-batch, bytes */
  int32_t in_flight;     /* chunk activations its group holds at the peak (plan/schedule.h) */
  double memory_bytes;   /* its fullest device: the program's memory with in_flight / v
                            micro-batches of activations (0 when the plan records no breakdown),
                            bytes */
  double memory_limit;   /* its group's smallest device memory, or the synthesis limit, bytes */
  bool fits;             /* memory_bytes <= memory_limit */
  const hap_plan *plan;  /* its program: the pipeline's stage plan (borrowed from it) */
} hap_pipe_stage;

typedef struct hap_pipe_estimate {
  hap_pipe_spec spec; /* as run: micro_batches resolved */
  int32_t n_stages;   /* p * v */
  int32_t group_size; /* devices per group when the groups are equal, else 0 */
  int32_t group_first[HAP_PIPE_MAX_GROUPS];   /* each group's first device */
  int32_t group_devices[HAP_PIPE_MAX_GROUPS]; /* each group's device count */
  hap_pipe_stage *stages;                     /* [n_stages], model order */
  hap_pipeline *pipeline; /* the pipelined plan (owned): groups, ranges, the stages' programs
                             (for the whole batch, the policy's micro-batches m) and the
                             simulated iteration; hap_pipeline_write_file saves it */
  hap_pipe_link link;     /* the slowest group-to-group link (all of a group's devices sending) */
  hap_pipe_sim *sim;      /* the schedule's iteration (pipeline_sim.h) */
  double synth_seconds;   /* wall time of the stages' synthesis, s */
} hap_pipe_estimate;

/* Estimate a pipeline of `g` on `c`: stages' programs by `o` (its strategy and policy; the policy's
 * micro_batches is the pipeline's m unless spec->micro_batches sets it, and each stage runs one
 * micro-batch). Errors (one line): p not dividing the devices (or groups= not adding up to them)
 * or above the nodes, m not dividing
 * the batch, a schedule that m does not suit (interleaved: m a multiple of p), a stage that cannot
 * be synthesised (named with its node range), HAP_ENOMEM. */
hap_status hap_pipe_estimate_run(const hap_graph *g, const hap_cluster *c,
                                 const hap_pipe_spec *spec, const hap_synth_options *o,
                                 hap_pipe_estimate **out, hap_err *err);
void hap_pipe_estimate_destroy(hap_pipe_estimate *e);

/* One stage on its own, for a planner weighing slicings: nodes [first, end) of g as a stage graph,
 * its program by o for m micro-batches on `group` (a cluster of the stage's devices), its times
 * per micro-batch simulated, *memory its fullest device's bytes with one micro-batch's
 * activations and *limit the group's memory limit, bytes. Errors as hap_stage_graph_build and
 * hap_synthesize. */
hap_status hap_pipe_stage_probe(const hap_graph *g, int32_t first, int32_t end,
                                const hap_cluster *group, int32_t m, const hap_synth_options *o,
                                hap_stage_times *times, double *memory, double *limit,
                                hap_err *err);

/* As hap_pipe_stage_probe, with the fullest device's memory by component (one micro-batch's
 * activations; hap_memory_in_flight scales them) in *peak (zeros when the plan records none). */
hap_status hap_pipe_stage_probe_peak(const hap_graph *g, int32_t first, int32_t end,
                                     const hap_cluster *group, int32_t m,
                                     const hap_synth_options *o, hap_stage_times *times,
                                     hap_memory_breakdown *peak, double *limit, hap_err *err);

/* What a group sends to another at once: device a_first + i to device b_first + i for i <
 * pairs, all in parallel, the pairs that leave a host sharing its NIC (bandwidth summed, NICs
 * capping, the largest latency). per_host: scratch of c->n_hosts doubles. */
hap_pipe_link hap_pipe_group_link(const hap_cluster *c, int32_t a_first, int32_t b_first,
                                  int32_t pairs, double *per_host);

/* Dim 0 of the graph's first input (the batch), or 0 when there is none. */
int64_t hap_pipe_batch_of(const hap_graph *g);

#endif
