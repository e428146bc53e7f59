/* galvatron.h — the `galvatron` strategy: Galvatron's search (Miao et al., VLDB'23, and
 * Galvatron-BMW) on hap's cost model (docs/design-galvatron.md). Its decision tree: p pipeline
 * stages (a power of two), the devices split evenly and consecutively into p groups of d (its
 * takeaways 1 and 2), each group a tree of tensor parallelism t (a power of two within a host) over
 * data parallelism d / t, with activation checkpointing and, where tensor parallelism leaves
 * replicas, optimizer state sharded over them (ZeRO-1). The model's layers (the repeated block of
 * its node order, the prologue with the first and the epilogue with the last) are cut evenly into
 * the stages; then, per stage, a dynamic program over its layers chooses each layer's data
 * parallelism as plain (DP) or sharded (SDP: its parameters stored ZeRO-3 style, gathered for
 * use) under the device's memory budget, counting the activations of the micro-batches 1F1B
 * keeps in flight there. A layer's time and memory under each choice come from the stage
 * program of that layer alone, synthesised (dp-ev when t = 1, else megatron-tp with sequence
 * parallelism) and simulated on the cluster's first d devices: as in Galvatron the devices are
 * taken as equal while deciding. The candidates are ranked by Galvatron's pipeline cost (the
 * stages' time per micro-batch summed, plus m - 1 times the slowest, plus the slowest gradient
 * synchronisation); the first that fits when estimated as a 1F1B pipeline on the real devices
 * (pipe/estimate.h) is the plan. What hap's plans cannot hold is left out and said so in the
 * design page: a tensor-parallel degree per layer, checkpointing per layer, sharding over the
 * replicas of a tensor-parallel stage beyond ZeRO-1.
 * Ownership: hap_galvatron_free releases what a search returned. */
#ifndef HAP_PIPE_GALVATRON_H
#define HAP_PIPE_GALVATRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipe/estimate.h"

#define HAP_GALV_MAX_LAYERS     1024 /* layers the dynamic program sees */
#define HAP_GALV_MAX_CANDIDATES 160
#define HAP_GALV_ESTIMATES      3 /* candidates estimated on the real devices at most */

/* One point of the decision tree. */
typedef struct hap_galv_candidate {
  int32_t pp, tp, dp;    /* stages, tensor-parallel degree, data-parallel degree (d / tp) */
  int32_t micro_batches; /* m */
  hap_recompute ckpt;    /* activation checkpointing: none or full */
  int32_t zero;          /* the policy's ZeRO stage: 0, or 1 over a tensor-parallel stage's
                            replicas */
  int32_t sdp_layers;    /* layers the dynamic program shards (SDP) */
  int32_t first_layer[HAP_PIPE_MAX_GROUPS + 1]; /* stage k holds layers [first_layer[k],
                                                   first_layer[k+1]) */
  double model_s;     /* Galvatron's pipeline cost, s (HUGE_VAL: a stage does not fit) */
  double model_bytes; /* the fullest stage's memory per device as modelled, bytes */
  double iteration_s; /* the pipeline simulated on the real devices (0: not estimated), s */
  double peak_bytes;  /* its fullest device there, bytes */
  bool over_memory;   /* some stage's leanest choice is over the budget (model_bytes) */
  bool fits;          /* estimated and every stage fits */
  char why[200];      /* why it has no plan; "" otherwise */
} hap_galv_candidate;

typedef struct hap_galvatron {
  int32_t layers;                        /* L */
  int32_t cuts[HAP_GALV_MAX_LAYERS + 1]; /* layer i is nodes [cuts[i], cuts[i+1]) */
  int32_t n_cand;
  hap_galv_candidate cand[HAP_GALV_MAX_CANDIDATES];
  int best;                      /* the chosen candidate, -1 when none fits */
  bool sdp[HAP_GALV_MAX_LAYERS]; /* the chosen candidate's layers stored sharded */
  hap_pipe_estimate *estimate;   /* its pipeline (owned; one stage: a flat plan), or NULL */
  hap_train_policy policy;       /* its stages' policy */
  double limit_bytes;            /* the memory budget per device, bytes */
  int64_t probes;                /* stage programs synthesised to price layers */
  double seconds;                /* wall time, s */
} hap_galvatron;

/* "galvatron[:pp=P,tp=T]": the tree pinned to P stages and/or tensor-parallel degree T (0:
 * searched), as a user narrows Galvatron's search space. */
typedef struct hap_galvatron_spec {
  int32_t pp, tp;
} hap_galvatron_spec;

/* Is `text` a galvatron spec ("galvatron" or "galvatron:...")? */
bool hap_galvatron_spec_is(const char *text);
/* Parse; HAP_EINVAL with one line naming the key and what was expected ("galvatron: pp='3',
 * expected a power of two"). */
hap_status hap_galvatron_spec_parse(const char *text, hap_galvatron_spec *out, hap_err *err);

/* Run the search for g on c with o's policy and memory limit (o->strategy is ignored). Policy
 * fields `forced` (HAP_POLICY_* bits) holds are not searched: a forced recomputation is every
 * candidate's, a forced ZeRO stage is every candidate's and turns the per-layer choice off.
 * HAP_OK even when nothing fits (out->best -1, each candidate's why, the leanest's model_bytes);
 * HAP_ENOMEM. `out` is large (tens of KiB): keep it off the stack. */
hap_status hap_galvatron_search(const hap_graph *g, const hap_cluster *c,
                                const hap_synth_options *o, uint32_t forced,
                                const hap_galvatron_spec *pin, hap_galvatron *out, hap_err *err);
void hap_galvatron_free(hap_galvatron *r);

/* "pp=4,tp=2,dp=4,m=16,ckpt=full,zero=0,sdp=12/48" */
void hap_galv_candidate_describe(const hap_galv_candidate *cd, int32_t layers, char *buf,
                                 size_t len);

#endif
