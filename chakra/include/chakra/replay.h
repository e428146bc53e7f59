/* replay.h — a set of Chakra execution traces (one per rank, recorded anywhere) simulated on a
 * hap cluster by the discrete-event engine (simulate/engine.h; docs/chakra.md):
 *   - compute nodes (and any node that is not communication) run on the rank's compute stream for
 *     their duration (hap_duration_us when given, else duration_micros), scaled to the target
 *     device: with FLOPs (num_ops > 0) by recorded FLOP/s / target FLOP/s, or num_ops / target
 *     FLOP/s when the trace does not say how fast its device was; without FLOPs by the memory
 *     bandwidths' ratio when the trace records its device's; else as recorded;
 *   - collectives are matched across ranks by process group (pg_name; none = every rank with
 *     unnamed collectives) in the order each rank issues them, and priced by the cluster's cost
 *     model (cluster/cost.h) from comm_type, every member's comm_size and the group (its ranks:
 *     hap_pg_ranks, else the ranks that use the name; hap's implementation and NIC sharing when
 *     the trace names them), times hap_repeats, plus the node hap_recompute_of names;
 *   - sends and receives are matched by (sender, receiver, comm_tag) in order and priced as one
 *     message (hap_p2p_time) that both ends take part in;
 *   - data and control dependencies both order nodes of a rank, as does the order of the file on
 *     each stream.
 * Rank r runs on the cluster's device r. Ownership: hap_chakra_load returns an owned set freed
 * with hap_chakra_set_destroy. */
#ifndef HAP_CHAKRA_REPLAY_H
#define HAP_CHAKRA_REPLAY_H

#include <stdint.h>

#include "chakra/et.h"
#include "cluster/cluster.h"

typedef struct hap_chakra_set {
  int32_t n_ranks;
  hap_et_rank **ranks; /* [n_ranks] */
  char **paths;        /* [n_ranks]: the files they came from */
} hap_chakra_set;

/* Read <dir>/<prefix>.<rank>.et for ranks 0 .. N-1: every such file in `dir`, with no rank
 * missing, each one's recorded rank and world size (when given) agreeing with the names. Errors
 * (one line naming the file or directory and what was expected): HAP_EIO, HAP_EPARSE,
 * HAP_ENOTFOUND (no trace, a missing rank). */
hap_status hap_chakra_load(const char *dir, const char *prefix, hap_chakra_set **out, hap_err *err);
void hap_chakra_set_destroy(hap_chakra_set *s);

typedef struct hap_chakra_replay_rank {
  double compute_s, comm_s, exposed_comm_s, idle_s; /* streams busy over the iteration, s */
} hap_chakra_replay_rank;

typedef struct hap_chakra_replay_result {
  double iteration_s;                   /* the simulated iteration (the last node's end), s */
  int64_t nodes, collectives, messages; /* nodes; collectives and messages across ranks */
  int64_t events;                       /* engine events */
  int32_t n_ranks;
  hap_chakra_replay_rank *ranks; /* [n_ranks], owned: free() */
} hap_chakra_replay_result;

/* Simulate the set on `c` (as many devices as ranks). Errors name the file and node: an unknown
 * dependency or duplicate id, collectives or messages that do not match across ranks, a
 * collective the cluster cannot price, a deadlock (HAP_EINVAL, HAP_EUNSUPPORTED). */
hap_status hap_chakra_replay(const hap_chakra_set *s, const hap_cluster *c,
                             hap_chakra_replay_result *out, hap_err *err);

#endif
