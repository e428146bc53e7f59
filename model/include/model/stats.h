/* stats.h — whole-graph statistics: parameters, FLOPs per iteration, activation memory, and a
 * per-op-kind breakdown. Ownership: hap_graph_stats is a caller-owned value. */
#ifndef HAP_STATS_H
#define HAP_STATS_H

#include <stdint.h>

#include "model/graph.h"

typedef struct hap_op_kind_stats {
  int32_t nodes;
  double fwd_flops; /* FLOP per iteration */
  double bwd_flops; /* FLOP per iteration */
  double params;    /* parameter elements consumed first by this op kind */
} hap_op_kind_stats;

typedef struct hap_graph_stats {
  int32_t n_nodes, n_tensors, n_segments;
  double params;           /* trainable elements */
  double param_bytes;      /* bytes */
  double buffer_bytes;     /* constant state, bytes */
  double input_bytes;      /* one iteration's data, bytes */
  double activation_bytes; /* every activation of one forward pass, bytes (no reuse) */
  double fwd_flops;        /* FLOP */
  double bwd_flops;        /* FLOP */
  hap_op_kind_stats per_op[HAP_OP_COUNT];
} hap_graph_stats;

/* `g` must be validated. */
void hap_graph_stats_compute(const hap_graph *g, hap_graph_stats *s);

#endif
