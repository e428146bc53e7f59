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
#include "plan/plan.h"

typedef enum hap_strategy {
  HAP_STRATEGY_HAP = 0, /* search + LP */
  HAP_STRATEGY_DP_EV,   /* data parallel, even batch split */
  HAP_STRATEGY_DP_CP,   /* data parallel, batch split proportional to device speed */
  /* Megatron-style: tensor parallel inside each host (even ratios, no activation split along the
   * batch), data parallel across hosts (one replica per host, the batch split evenly) */
  HAP_STRATEGY_MEGATRON_TP,
  HAP_STRATEGY_COUNT
} hap_strategy;

const char *hap_strategy_name(hap_strategy s); /* "hap", "dp-ev", "dp-cp", "megatron-tp" */
hap_status hap_strategy_parse(const char *s, hap_strategy *out);

typedef struct hap_synth_options {
  hap_strategy strategy;
  int max_rounds;                   /* search/LP alternations; 0 = default (8) */
  double memory_limit_bytes;        /* per device; 0 = each device's memory. Parameters (value +
                                       gradient) and every tensor kept for the backward pass
                                       count; programs that do not fit are never emitted */
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
} hap_synth_stats;

/* Synthesise a plan for validated `g` on validated `c`. The plan's predicted times are those of
 * the emitted program under the emitted ratios (the pair always belongs together). */
hap_status hap_synthesize(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                          hap_plan **out, hap_synth_stats *stats, hap_err *err);

#endif
