/* replica.h — what 2-D device groups need from the graph and the cluster
 * (docs/design-megatron-tp.md): which sharding variant of a node is data-parallel (the batch
 * split), the graph one replica runs when the batch is split evenly over R replicas, and the
 * cluster of one host's devices. Ownership: the graph and cluster returned through `out` belong to
 * the caller (hap_graph_destroy, hap_cluster_destroy). */
#ifndef HAP_REPLICA_H
#define HAP_REPLICA_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "cluster/cost.h"
#include "model/graph.h"
#include "model/policy.h"
#include "model/sharding.h"

/* state[t] (g->n_tensors entries): tensor t is a parameter or buffer, or is computed from those
 * alone (a transposed weight). Such tensors carry no batch: whole on every device under data
 * parallelism. `g` must be validated. */
void hap_graph_state_tensors(const hap_graph *g, bool *state);

/* Is `v` a data-parallel variant of node `k`: state inputs whole (Identity), every other input of
 * rank > 0 split along dim 0 (the batch) or whole only when the node reads state alone, outputs
 * split along dim 0 except a scalar loss kept as partial sums (Reduce)? A node whose inputs are
 * all state is data-parallel only replicated. `state` from hap_graph_state_tensors. */
bool hap_variant_is_data_parallel(const hap_graph *g, int32_t k, const hap_variant *v,
                                  const bool *state);

/* The graph one of `replicas` (>= 1) replicas runs when the batch is split evenly: same tensor and
 * node ids and names, every batch-carrying dim (found through each node's first data-parallel
 * variant) divided by `replicas`, attributes that follow the batch adjusted (reshape targets).
 * HAP_EUNSUPPORTED naming the node when a node has no data-parallel variant or its batch extent
 * is not a multiple of `replicas`. The result is validated. */
hap_status hap_graph_split_batch(const hap_graph *g, int32_t replicas, hap_graph **out,
                                 hap_err *err);

/* The graph the kernels of one micro-batch of one of `replicas` replicas run under policy `pol`:
 * `g` split over replicas x micro-batches (hap_graph_split_batch), its float32 tensors in the
 * policy's compute precision (hap_graph_cast_float). Same tensor and node ids and names. *out is
 * NULL when that is `g` itself (1 x 1, fp32); otherwise the caller destroys it. */
hap_status hap_graph_for_policy(const hap_graph *g, int32_t replicas, const hap_train_policy *pol,
                                hap_graph **out, hap_err *err);

/* What running the replicas of a 2-D plan separately must correct for: *loss_mean is true when
 * the loss averages over the batch (its data-parallel variant divides by the whole batch's count,
 * HAP_VARIANT_GLOBAL_COUNT), so that the replicas' gradients sum to R times the whole batch's.
 * HAP_EUNSUPPORTED naming the node when another node averages over the batch (the replicas would
 * each compute a different value). */
hap_status hap_graph_batch_mean(const hap_graph *g, bool *loss_mean, hap_err *err);

/* The cluster made of host `host`'s devices alone (same device specs, intra-host link and NIC,
 * per-pair overrides and collective fits among those devices, renumbered from 0). */
hap_status hap_cluster_of_host(const hap_cluster *c, int32_t host, hap_cluster **out, hap_err *err);

/* The group runs at the same time as sharers - 1 sibling collectives whose rings cross the same
 * NICs (2-D plans: the replica all-reduces of every index in a host): every path through a NIC
 * gets 1/sharers of its bandwidth, and a profiled fit (measured alone) no longer applies. */
void hap_group_share_nics(hap_group *g, int32_t sharers);

#endif
