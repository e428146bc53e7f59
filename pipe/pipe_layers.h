/* pipe_layers.h — how the pipeline planners (alpa_inter.c, galvatron.c) see a graph as layers:
 * the repeated block of its node order (a transformer layer) and a key of a node range that
 * ignores names, so that ranges which build the same stage graph are priced once. Private to
 * pipe/. */
#ifndef HAP_PIPE_LAYERS_H
#define HAP_PIPE_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "model/graph.h"

/* The graph's repeated block: the smallest period P (at most n_nodes / 4) whose shift matches at
 * least 3/4 of the nodes' op-and-shape signatures and that repeats at least min_repeats times;
 * *repeats the R whole repeats of it from the first matching node (*first). false when there is
 * none (or on allocation failure). */
bool hap_pipe_repeated_block(const hap_graph *g, int32_t min_repeats, int32_t *first,
                             int32_t *period, int32_t *repeats);

/* A key of nodes [first, end) that ignores names: each node's op, inputs (kind, dtype, shape,
 * and which earlier node of the range made it) and output shapes, and whether the range starts
 * the graph or holds its loss. producer[t]: the node making tensor t, or -1. */
uint64_t hap_pipe_range_key(const hap_graph *g, const int32_t *producer, int32_t first,
                            int32_t end);

/* producer[t] for every tensor of g (-1: not made by a node); NULL on allocation failure. The
 * caller frees it. */
int32_t *hap_pipe_producers(const hap_graph *g);

#endif
