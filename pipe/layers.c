/* layers.c — a graph seen as layers by the pipeline planners (pipe_layers.h). */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "pipe_layers.h"

uint64_t hap_pipe_range_key(const hap_graph *g, const int32_t *producer, int32_t first,
                            int32_t end) {
  uint64_t h = hap_fnv1a_word(HAP_FNV1A_OFFSET, (uint64_t)(end - first));
  h = hap_fnv1a_word(h, first == 0);
  h = hap_fnv1a_word(h, end == g->n_nodes);
  for (int32_t k = first; k < end; k++) {
    const hap_node *n = &g->nodes[k];
    h = hap_fnv1a_word(h, (uint64_t)n->op);
    for (int i = 0; i < n->n_inputs; i++) {
      const hap_tensor *t = &g->tensors[n->inputs[i]];
      int32_t p = producer[n->inputs[i]];
      h = hap_fnv1a_word(h, (uint64_t)t->kind * 128 + (uint64_t)t->dtype * 2 + t->requires_grad);
      h = hap_fnv1a_word(h, p >= first && p < end ? (uint64_t)(k - p) : UINT64_MAX);
      for (int32_t d = 0; d < t->shape.rank; d++)
        h = hap_fnv1a_word(h, (uint64_t)t->shape.dims[d]);
    }
    for (int o = 0; o < n->n_outputs; o++) {
      const hap_tensor *t = &g->tensors[n->outputs[o]];
      for (int32_t d = 0; d < t->shape.rank; d++)
        h = hap_fnv1a_word(h, (uint64_t)t->shape.dims[d]);
    }
    for (int o = 0; o < n->n_outputs; o++)
      h = hap_fnv1a_word(h, n->outputs[o] == g->loss);
  }
  return h;
}

int32_t *hap_pipe_producers(const hap_graph *g) {
  int32_t *producer = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *producer);
  if (producer == NULL)
    return NULL;
  for (int32_t t = 0; t < g->n_tensors; t++)
    producer[t] = -1;
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int o = 0; o < g->nodes[k].n_outputs; o++)
      producer[g->nodes[k].outputs[o]] = k;
  return producer;
}

/* A node's signature: its op and its inputs' and outputs' kinds and shapes (no names). */
static uint64_t node_sig(const hap_graph *g, int32_t k) {
  const hap_node *n = &g->nodes[k];
  uint64_t h = hap_fnv1a_word(HAP_FNV1A_OFFSET, (uint64_t)n->op);
  for (int i = 0; i < n->n_inputs + n->n_outputs; i++) {
    const hap_tensor *t = &g->tensors[i < n->n_inputs ? n->inputs[i] : n->outputs[i - n->n_inputs]];
    h = hap_fnv1a_word(h, (uint64_t)t->kind);
    for (int32_t d = 0; d < t->shape.rank; d++)
      h = hap_fnv1a_word(h, (uint64_t)t->shape.dims[d]);
  }
  return h;
}

bool hap_pipe_repeated_block(const hap_graph *g, int32_t min_repeats, int32_t *first,
                             int32_t *period, int32_t *repeats) {
  int32_t n = g->n_nodes;
  uint64_t *sig = malloc((size_t)(n ? n : 1) * sizeof *sig);
  if (sig == NULL)
    return false;
  for (int32_t k = 0; k < n; k++)
    sig[k] = node_sig(g, k);
  bool found = false;
  for (int32_t P = 1; P <= n / 4 && !found; P++) {
    int32_t match = 0, start = -1;
    for (int32_t k = 0; k + P < n; k++)
      if (sig[k] == sig[k + P]) {
        match++;
        if (start < 0)
          start = k;
      }
    if (4 * match < 3 * (n - P) || start < 0)
      continue;
    int32_t R = 1; /* blocks from `start` while each equals the next */
    while (start + (R + 1) * P <= n &&
           memcmp(sig + start + (size_t)(R - 1) * (size_t)P, sig + start + (size_t)R * (size_t)P,
                  (size_t)P * sizeof *sig) == 0)
      R++;
    if (R < min_repeats)
      continue;
    *first = start;
    *period = P;
    *repeats = R;
    found = true;
  }
  free(sig);
  return found;
}
