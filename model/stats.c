#include "model/stats.h"

#include <stdlib.h>
#include <string.h>

void hap_graph_stats_compute(const hap_graph *g, hap_graph_stats *s) {
  memset(s, 0, sizeof *s);
  s->n_nodes = g->n_nodes;
  s->n_tensors = g->n_tensors;
  s->n_segments = g->n_segments;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *x = &g->tensors[t];
    double bytes = (double)hap_tensor_bytes(x);
    switch (x->kind) {
    case HAP_TENSOR_PARAMETER:
      s->params += (double)hap_tensor_numel(x);
      s->param_bytes += bytes;
      break;
    case HAP_TENSOR_BUFFER: s->buffer_bytes += bytes; break;
    case HAP_TENSOR_INPUT: s->input_bytes += bytes; break;
    case HAP_TENSOR_ACTIVATION: s->activation_bytes += bytes; break;
    }
  }
  /* Attribute each parameter to the op kind of its first consumer (weight tying counts once). */
  bool *seen = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *seen);
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    hap_op_cost c;
    hap_graph_node_cost(g, n, &c);
    hap_op_kind_stats *k = &s->per_op[node->op];
    k->nodes++;
    k->fwd_flops += c.fwd_flops;
    k->bwd_flops += c.bwd_flops;
    s->fwd_flops += c.fwd_flops;
    s->bwd_flops += c.bwd_flops;
    for (int i = 0; seen && i < node->n_inputs; i++) {
      const hap_tensor *x = &g->tensors[node->inputs[i]];
      if (x->kind == HAP_TENSOR_PARAMETER && !seen[node->inputs[i]]) {
        seen[node->inputs[i]] = true;
        k->params += (double)hap_tensor_numel(x);
      }
    }
  }
  free(seen);
}
