/* pipeline.h — a pipelined plan (docs/design-pipeline.md): the graph's node order cut into
 * p * v contiguous virtual stages, stage k run by device group k % p (v model chunks per group
 * when v > 1), each stage an ordinary SPMD program (plan.h) of its stage graph (model/stage.h) on
 * its group's cluster, and the schedule (plan/schedule.h) that orders each group's forward and
 * backward passes over the policy's m micro-batches. A plan without stages is the one-stage
 * pipeline of every device (hap_pipeline_of_plan), so every plan is a pipeline.
 *
 * A stage's program is made for its stage graph at the full batch with the pipeline's policy
 * (micro_batches m): its steps, ratios and lengths are those of one micro-batch, as for any plan
 * (hap_plan_step_graph). The stage's graph is `g` itself when the stage holds every node; its
 * cluster is `c` itself when its group holds every device (in order), else
 * hap_cluster_of_devices(c, group, "<cluster>[group G]"). The stage program's devices are its
 * group's, in the group's order.
 * Ownership: a hap_pipeline owns its names, groups and its stages' plans; hap_pipeline_destroy
 * frees them. */
#ifndef HAP_PLAN_PIPELINE_H
#define HAP_PLAN_PIPELINE_H

#include <stdint.h>

#include "cluster/cluster.h"
#include "model/graph.h"
#include "model/stage.h"
#include "plan/plan.h"
#include "plan/schedule.h"

typedef struct hap_pipeline_stage {
  int32_t first, end; /* nodes [first, end) of the whole graph's order */
  int32_t group;      /* the device group that runs it: stage k on group k % n_groups */
  hap_plan *plan;     /* its SPMD program (owned; NULL until set) */
} hap_pipeline_stage;

typedef struct hap_pipeline {
  char *strategy;
  char *graph_name;
  uint64_t graph_digest; /* hap_graph_digest of the whole graph */
  char *cluster_name;
  uint64_t cluster_digest; /* hap_cluster_digest of the whole cluster */
  hap_plan_specs specs;    /* where they were loaded from (may be empty) */
  int32_t n_devices;       /* the whole cluster's */
  hap_pipe_schedule schedule;
  int32_t chunks;         /* v >= 1: virtual stages per group */
  int32_t n_groups;       /* p >= 1 */
  int32_t *group_first;   /* [n_groups + 1]: group g holds group_devices[group_first[g] ..
                             group_first[g+1]) */
  int32_t *group_devices; /* [n_devices]: device ids, increasing within a group */
  int32_t n_stages;       /* p * v, model order */
  hap_pipeline_stage *stages;
  hap_train_policy policy;      /* every stage's; micro_batches is the pipeline's m */
  double predicted_iteration_s; /* the pipeline's simulated iteration, s (0: not predicted) */
} hap_pipeline;

/* Record where the graph and cluster were loaded from (hap_plan_specs): on the pipeline, and on
 * its stage's plan when it is flat (written as that plan). */
hap_status hap_pipeline_set_specs(hap_pipeline *pl, const char *model, const char *cluster);

/* A pipeline of `n_groups` groups with `group_size[g]` devices each (summing to n_devices) and
 * n_groups * chunks stages, stage k on group k % n_groups; group devices start as 0..n_devices-1
 * in order, stage ranges and plans empty, the policy the default. NULL on allocation failure or a
 * count below 1 or not adding up. NULL names are taken as "". */
hap_pipeline *hap_pipeline_create(const char *strategy, const char *graph_name,
                                  uint64_t graph_digest, const char *cluster_name,
                                  uint64_t cluster_digest, int32_t n_devices,
                                  hap_pipe_schedule schedule, int32_t chunks, int32_t n_groups,
                                  const int32_t *group_size);
void hap_pipeline_destroy(hap_pipeline *pl);

/* The one-stage pipeline of every device that runs `plan`, made for `g` (taken: owned by the
 * result, also on failure). Schedule gpipe, one chunk, the plan's policy, strategy and
 * prediction. */
hap_status hap_pipeline_of_plan(hap_plan *plan, const hap_graph *g, hap_pipeline **out,
                                hap_err *err);

/* Group g's devices and their count. */
static inline const int32_t *hap_pipeline_group(const hap_pipeline *pl, int32_t g, int32_t *n) {
  *n = pl->group_first[g + 1] - pl->group_first[g];
  return pl->group_devices + pl->group_first[g];
}

/* Is `pl` one stage over every device in order (an ordinary plan)? */
bool hap_pipeline_is_flat(const hap_pipeline *pl);

/* The graph and cluster stage k's program is made for: *sg the stage graph (owned; NULL when the
 * stage holds every node and runs on `g` itself), *gc its group's cluster (owned; NULL when the
 * group is every device in order and runs on `c` itself). Errors as hap_stage_graph_build and
 * hap_cluster_of_devices, prefixed with "stages[k]". */
hap_status hap_pipeline_stage_context(const hap_pipeline *pl, int32_t k, const hap_graph *g,
                                      const hap_cluster *c, hap_stage_graph **sg, hap_cluster **gc,
                                      hap_err *err);

/* Check the pipeline against its validated graph and cluster: names and digests match; the
 * schedule is known and suits the chunks (gpipe and 1f1b one, interleaved two or more with m a
 * multiple of p: hap_pipe_order_build's rules); the groups partition the devices (each device in
 * exactly one group, increasing within a group); stage k runs on group k % p and the stages cut
 * the node order into contiguous, non-empty ranges from 0 to n_nodes; every stage has a program
 * that passes hap_plan_validate on its stage graph and group cluster with the pipeline's policy.
 * Errors are one line naming the field ("groups[1]", "stages[2].nodes", "stages[0].plan: ..."). */
hap_status hap_pipeline_validate(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                                 hap_err *err);
/* hap_pipeline_validate without the stages' programs and the policy: the header, the groups and
 * the stages' groups and ranges (what hap_pipeline_stage_context needs). */
hap_status hap_pipeline_validate_layout(const hap_pipeline *pl, const hap_graph *g,
                                        const hap_cluster *c, hap_err *err);
/* The schedule and chunks suit the groups and the policy's micro-batches (part of
 * hap_pipeline_validate). */
hap_status hap_pipeline_check_schedule(const hap_pipeline *pl, hap_err *err);

#endif
