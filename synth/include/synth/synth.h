/* synth.h — hap-synth: find the SPMD program (how every tensor is laid out and communicated) and
 * the per-device sharding ratios that minimise the predicted iteration time of a graph on a cluster
 * (HAP's synthesis: a search over Hoare triples, alternating with a linear program over the
 * ratios), and the baselines as plans of the same form.
 * Ownership: the plan returned through `out` belongs to the caller (hap_plan_destroy). */
#ifndef HAP_SYNTH_H
#define HAP_SYNTH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "model/graph.h"
#include "model/policy.h"
#include "plan/plan.h"

typedef enum hap_strategy {
  HAP_STRATEGY_HAP = 0, /* search + LP */
  HAP_STRATEGY_DP_EV,   /* data parallel, even batch split */
  HAP_STRATEGY_DP_CP,   /* data parallel, batch split proportional to device speed */
  /* Megatron-style: tensor parallel inside each host (even ratios, no activation split along the
   * batch), data parallel across hosts (one replica per host, the batch split evenly) */
  HAP_STRATEGY_MEGATRON_TP,
  /* Alpa's intra-operator pass (synth/alpa.c): one sharding variant per node and the resharding
   * between them chosen by an integer linear program, even ratios (devices taken as equal) */
  HAP_STRATEGY_ALPA,
  HAP_STRATEGY_COUNT
} hap_strategy;

/* Sequence parallelism in megatron-tp programs (Korthikanti et al.): the activations between the
 * tensor-parallel blocks ([batch, seq, ...], dim 1 the graph's sequence length) split along the
 * sequence, with reduce-scatter and all-gather in place of all-reduce. */
typedef enum hap_seq_parallel {
  HAP_SP_FREE = 0, /* the search decides (it splits them when that is faster or needed to fit) */
  HAP_SP_ON,       /* never computed whole on every device of the group */
  HAP_SP_OFF       /* never split along the sequence (Megatron-LM without --sequence-parallel) */
} hap_seq_parallel;

/* "hap", "dp-ev", "dp-cp", "megatron-tp", "alpa" */
const char *hap_strategy_name(hap_strategy s);
hap_status hap_strategy_parse(const char *s, hap_strategy *out);

/* Where sufficient-factor broadcasting may replace a linear weight's gradient all-reduce. */
typedef enum hap_sfb_use {
  HAP_SFB_USE_AUTO = 0, /* strategy hap only: the baselines synchronise as their systems do */
  HAP_SFB_USE_OFF,      /* nowhere (an ablation) */
  HAP_SFB_USE_ALL,      /* also the data-parallel baselines dp-ev and dp-cp (a study) */
  HAP_SFB_USE_COUNT
} hap_sfb_use;

const char *hap_sfb_use_name(hap_sfb_use u); /* "auto", "off", "all" */
hap_status hap_sfb_use_parse(const char *s, hap_sfb_use *out);

typedef struct hap_synth_options {
  hap_strategy strategy;
  int max_rounds;            /* search/LP alternations; 0 = default (8) */
  double memory_limit_bytes; /* per device; 0 = each device's memory. What the policy
                                keeps counts (docs/memory.md: parameters, gradients,
                                optimizer state, activations kept for the backward pass);
                                programs that do not fit are never emitted */
  /* How the model trains (model/policy.h): precision, optimizer, ZeRO stage, recomputation,
   * micro-batches. All zeros is the default policy (micro_batches 0 means 1), under which costs
   * and memory are exactly those hap computed before policies existed. The plan records it. */
  hap_train_policy policy;
  /* Micro-batches whose kept activations a device holds at once (a pipeline stage's in-flight
   * count, pipe/estimate.h); 0 or 1: one. They count against memory_limit_bytes, so a stage
   * with many in flight gets a program that keeps fewer activations (e.g. sequence-sharded
   * layer norms); the plan records one micro-batch's memory (hap_memory_in_flight). */
  double activation_copies;
  /* megatron-tp only: devices per tensor-parallel group, consecutive (0: a host's; then hosts
   * must be equal); the others are data-parallel replicas. */
  int32_t tensor_parallel;
  hap_seq_parallel sequence_parallel; /* megatron-tp only */
  /* Which strategies may store a linear weight sfb (sufficient-factor broadcasting, plan.h),
   * where the search finds it cheaper than the gradient all-reduce */
  hap_sfb_use sfb;
  /* Parameters stored ZeRO-3 style (storage zero: sharded over the group, gathered for use)
   * whatever the strategy and the policy's ZeRO stage, where this returns true for the graph being
   * synthesised and the parameter's id (galvatron's per-layer sharded data parallelism,
   * pipe/galvatron.h); NULL: the strategy and policy decide. Parameters that cannot be sharded
   * along dim 0 (scalars, dim 0 of 1) and single-device groups keep theirs. */
  bool (*zero_store)(void *ctx, const hap_graph *g, int32_t tensor);
  void *zero_store_ctx;
  /* alpa only: solve the intra-operator ILP for time alone, without the memory rows it adds when
   * the time-optimal program does not fit (a program over the limit is then refused): how Alpa's
   * inter-operator pass profiles a stage, which drops the stages that run out of memory */
  bool alpa_time_only;
  /* > 0: programs whose estimated iteration (the synthesizer's own estimate, which leaves out
   * overlap) exceeds this are not followed, s; when no program is under it the synthesis fails
   * with stats->over_bound. hap-synth sets it to the best 3-D layout's simulated iteration
   * (pipe/layouts.h), so a one-stage search that cannot beat it ends early. */
  double cost_bound_s;
  /* When memory binds, the search runs again keeping leaner states beside cheaper ones, up to
   * this many generated states (0: 1,000,000, about 0.5 GB); a search that must be quick (hap's
   * 3-D layouts try many) sets fewer and may then miss a program that just fits. */
  int64_t leaner_states;
  volatile sig_atomic_t *interrupt; /* set (e.g. by SIGINT) to stop with the best plan so far */
  /* Progress callback (may be NULL), called every few thousand expansions: states expanded so far
   * and the round. */
  void (*progress)(void *ctx, int round, int64_t expanded, double best_s);
  void *progress_ctx;
  /* Re-scoring hook (may be NULL): the best plan of each starting point, and for strategy hap the
   * dp-ev and dp-cp plans (their programs are in HAP's space), are priced again by this function
   * (e.g. the discrete-event simulator, which models overlap), in seconds, and the lowest wins;
   * the plan keeps its strategy name "hap". Without it the synthesizer's own cost decides. */
  double (*rescore)(void *ctx, const hap_plan *plan, const hap_graph *g, const hap_cluster *c);
  void *rescore_ctx;
} hap_synth_options;

typedef struct hap_synth_stats {
  int rounds;               /* search/LP alternations run */
  int64_t states_expanded;  /* over all rounds */
  int64_t states_generated; /* over all rounds */
  double seconds;           /* wall time, s */
  double initial_s;         /* predicted iteration time of the first round's program, s */
  bool interrupted;
  bool over_bound; /* no program estimated under hap_synth_options.cost_bound_s */
  /* Set when no program fits the memory limit (the error says so): the leanest program found,
   * on the device that exceeds its limit the most: the device, its limit and its memory by
   * component, bytes. */
  bool no_fit;
  int32_t leanest_device;
  double leanest_limit;
  hap_memory_breakdown leanest;
} hap_synth_stats;

/* Synthesise a plan for validated `g` on validated `c`. The plan's predicted times are those of
 * the emitted program under the emitted ratios (the pair always belongs together). */
hap_status hap_synthesize(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                          hap_plan **out, hap_synth_stats *stats, hap_err *err);

/* ---- steering: --memory-limit as a constraint (steer.c) --------------------------------------
 * The policy fields the user did not force (bits of `forced`: HAP_POLICY_*) may change so that a
 * plan fits: the candidates are tried in order of expected cost — ZeRO stage 0, 1, 2, 3 (each
 * only sheds memory; 3 also gathers weights before use), then with the highest free stage
 * recomputation selective then full, then micro-batches 2, 4, 8, ... (dividing the batch) with
 * full recomputation — and the first that fits is kept (the default policy when it fits, so an
 * unconstrained run is the plain synthesis). Candidates that cannot fit are recognised by the
 * leanest program search and cost little. Precision and optimizer are never changed. */
typedef struct hap_steer_report {
  hap_train_policy chosen;  /* the policy of the plan returned */
  bool steered;             /* chosen differs from the policy asked for */
  int tried;                /* candidates synthesised */
  double seconds;           /* wall time over every candidate, s */
  hap_train_policy leanest; /* when nothing fits: the last candidate tried */
} hap_steer_report;

/* As hap_synthesize with o->policy as the starting point. When nothing fits, the error names the
 * device model, its limit, the leanest plan's memory by component and by how much it is over, and
 * stats->no_fit is set. */
hap_status hap_synthesize_steered(const hap_graph *g, const hap_cluster *c,
                                  const hap_synth_options *o, uint32_t forced, hap_plan **out,
                                  hap_synth_stats *stats, hap_steer_report *report, hap_err *err);

#endif
