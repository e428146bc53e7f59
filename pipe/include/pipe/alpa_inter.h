/* alpa_inter.h — the `alpa` strategy's inter-operator pass (Alpa, OSDI'22, section 5;
 * docs/design-alpa.md). The node order is clustered into at most HAP_ALPA_LAYERS ranges
 * ("layers"): whole repeats of the graph's repeated block (a transformer layer) where it has one,
 * else ranges of equal training FLOPs; for each sub-mesh size d (a power of two within a host, or
 * whole hosts) that makes p = devices / d stages, every contiguous run of layers is one stage whose
 * latency per micro-batch (forward + backward) comes from the intra-operator pass on d devices
 * (hap_pipe_stage_probe; stages whose op sequence and shapes match are probed once; a stage of
 * more than twice the mean number of clusters, or whose training state cannot fit the group even
 * sharded over it, is not probed); then Alpa's
 * dynamic program picks the slicing into p stages that minimises the sum of the stage latencies
 * plus (m - 1) times the largest, over every candidate largest latency. As in Alpa the devices
 * are taken as equal while deciding (each stage probed on the cluster's first d devices); each
 * size's slicing is then estimated as a 1F1B pipeline on the real devices (pipe/estimate.h, every
 * stage's program by the intra-operator pass) and the fastest whose stages fit memory wins. Hosts
 * of unequal size get no candidates.
 * Ownership: hap_alpa_inter_free releases what a search returned. */
#ifndef HAP_PIPE_ALPA_INTER_H
#define HAP_PIPE_ALPA_INTER_H

#include <stdbool.h>
#include <stdint.h>

#include "pipe/estimate.h"

#define HAP_ALPA_LAYERS         16 /* layer clusters the slicing works on */
#define HAP_ALPA_MAX_CANDIDATES 16

/* One sub-mesh size. */
typedef struct hap_alpa_candidate {
  int32_t stages;                          /* p */
  int32_t group_devices;                   /* d */
  int32_t micro_batches;                   /* m */
  int32_t layers[HAP_PIPE_MAX_GROUPS + 1]; /* the slicing: stage k holds layer clusters
                                              [layers[k], layers[k+1]) */
  double dp_s;                             /* the dynamic program's objective, s */
  double iteration_s; /* the pipeline's simulated iteration (0: not estimated), s */
  double peak_bytes;  /* its fullest stage's device, bytes */
  bool fits;
  char why[240]; /* why it has no estimate; "" otherwise */
} hap_alpa_candidate;

typedef struct hap_alpa_inter {
  int32_t layer_clusters;
  int32_t n_cand;
  hap_alpa_candidate cand[HAP_ALPA_MAX_CANDIDATES];
  int best;                    /* the chosen candidate, -1 when none fits */
  hap_pipe_estimate *estimate; /* the chosen candidate's pipeline (owned), or NULL */
  hap_train_policy policy;     /* the stages' policy */
  int64_t probes;              /* intra-operator passes run to price stages */
  double seconds;              /* wall time, s */
} hap_alpa_inter;

/* Run the pass for g on c with o's policy and memory limit (o->strategy is ignored: the stages
 * use alpa). The fields `forced` (HAP_POLICY_* bits) leaves free are set as Alpa trains a model
 * this large: ZeRO-3 storage (its sharding specs shard weights and optimizer state along the
 * data-parallel axis) and full recomputation (its rematerialisation). HAP_OK even when nothing fits
 * (out->best -1, each candidate's why); HAP_ENOMEM, or an error of the layer clustering. */
hap_status hap_alpa_inter_search(const hap_graph *g, const hap_cluster *c,
                                 const hap_synth_options *o, uint32_t forced, hap_alpa_inter *out,
                                 hap_err *err);
void hap_alpa_inter_free(hap_alpa_inter *r);

#endif
