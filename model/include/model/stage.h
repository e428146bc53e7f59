/* stage.h — a pipeline stage's graph: a contiguous range of a graph's nodes made into a graph of
 * its own (docs/design-pipeline.md). Activations made before the range and used in it become
 * boundary inputs (same name; their gradient is wanted when the original needs one); activations
 * made in it and used after it are boundary outputs. A stage without the whole graph's loss gets a
 * stage loss: for each boundary output y that needs a gradient an input "y@grad" (the gradient
 * received from downstream) and L = sum over the batch of the sum over y of y * y@grad reduced per
 * sample ("y@grad.mul", "y@grad.sum", "y@grad.add", "stage@loss"), so that dL/dy = y@grad and the
 * stage's backward yields the whole graph's gradients; every term keeps the batch (dim 0) until
 * the last sum, so the stage splits into micro-batches and data-parallel shards like any graph.
 * The stage with the graph's loss has it as its loss and must send on nothing that needs a
 * gradient. The result is an ordinary validated graph.
 * Ownership: hap_stage_graph_build returns an owned hap_stage_graph freed with
 * hap_stage_graph_destroy; it does not borrow the whole graph. */
#ifndef HAP_MODEL_STAGE_H
#define HAP_MODEL_STAGE_H

#include <stdint.h>

#include "model/graph.h"

typedef struct hap_stage_graph {
  hap_graph *graph;   /* the stage's graph (owned) */
  int32_t first, end; /* the range [first, end) of the whole graph's node order */
  /* tensor ids of the whole graph */
  int32_t n_in, n_out;
  int32_t *boundary_in;  /* [n_in] activations received, in tensor id order */
  int32_t *boundary_out; /* [n_out] activations sent on, in tensor id order */
  /* [n_out] the stage tensor that receives boundary_out[i]'s gradient ("<name>@grad"), or -1
   * when it needs none */
  int32_t *grad_in;
  int32_t *stage_of; /* [whole graph's tensors] the id in the stage graph, or -1 when not in it */
  int32_t *whole_of; /* [stage tensors] the id in the whole graph, or -1 (stage-loss tensors) */
  bool has_loss;     /* the whole graph's loss is made in the range */
} hap_stage_graph;

/* The stage graph of nodes [first, end) of `g` (validated; 0 <= first < end <= n_nodes). Errors
 * (one line, HAP_EINVAL): an empty or out-of-range range; a range that holds no loss and sends
 * on nothing that needs a gradient; one that holds the loss and sends on something that does; a
 * boundary output that needs a gradient but carries no batch (made from parameters alone); a name
 * the stage loss needs that the graph uses ("h@grad"); and HAP_ENOMEM. */
hap_status hap_stage_graph_build(const hap_graph *g, int32_t first, int32_t end,
                                 hap_stage_graph **out, hap_err *err);
void hap_stage_graph_destroy(hap_stage_graph *s);

/* The training FLOPs of node n (forward + backward, op table at the graph's shapes), FLOP. */
double hap_node_train_flops(const hap_graph *g, int32_t n);

/* Cut `g`'s node order into `stages` non-empty contiguous ranges whose largest training FLOPs
 * (hap_node_train_flops summed) is as small as possible (to 1e-9 relative): cuts[0] = 0 < cuts[1]
 * < ... < cuts[stages] = n_nodes, stage k holding nodes [cuts[k], cuts[k+1]). The first stages
 * take as much as that bound allows; ranges are then split from the back until there are
 * `stages`. HAP_EINVAL naming the count when stages < 1 or > n_nodes. */
hap_status hap_stage_cuts_balanced(const hap_graph *g, int32_t stages, int32_t *cuts, hap_err *err);

/* crossing[i] for i in 0..n_nodes: bytes of the activations a cut before node i sends on (made by
 * a node before i, used by one at or after i); crossing[0] = crossing[n_nodes] = 0. HAP_ENOMEM. */
hap_status hap_stage_crossing_bytes(const hap_graph *g, double *crossing, hap_err *err);

/* As hap_stage_cuts_balanced, but a stage costs its compute (training FLOPs / flops_per_s) or the
 * time to send the bytes crossing its end on and take their gradient back (2x / bytes_per_s),
 * whichever is longer (sends overlap compute), s. The cuts minimise the largest stage cost, then,
 * among those, the sum of squared compute times (the most even compute): two exact dynamic
 * programs of stages x n_nodes^2 steps. So a cut avoids a large tensor (GPT's logits) when the
 * link is slow. Rates > 0 and finite; HAP_EINVAL naming the count or the rate, HAP_ENOMEM. */
hap_status hap_stage_cuts_costed(const hap_graph *g, int32_t stages, double flops_per_s,
                                 double bytes_per_s, int32_t *cuts, hap_err *err);

/* hap_stage_cuts_costed with a rate per range: range k runs at flops_per_s[k] (stages entries;
 * unequal device groups, e.g. a slower group gets fewer FLOPs). The same rules and errors (naming
 * the range whose rate is not a finite number > 0). */
hap_status hap_stage_cuts_rated(const hap_graph *g, int32_t stages, const double *flops_per_s,
                                double bytes_per_s, int32_t *cuts, hap_err *err);

#endif
