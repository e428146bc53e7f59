/* et.h — one rank's Chakra execution trace (a `.et` file) in hap's own terms, read and written in
 * Chakra's wire format: a stream of messages, each a varint byte count then the protobuf message,
 * one GlobalMetadata first, then one Node per operation (chakra/et.proto, docs/chakra.md). Only
 * the fields and attributes hap uses are kept; others are skipped on read.
 * Ownership: hap_et_rank_create and hap_et_parse / hap_et_read return an owned trace freed with
 * hap_et_rank_destroy; every string and array in it belongs to it. */
#ifndef HAP_CHAKRA_ET_H
#define HAP_CHAKRA_ET_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Chakra's NodeType values (the ones hap reads or writes). */
typedef enum hap_et_type {
  HAP_ET_INVALID = 0,
  HAP_ET_METADATA = 1,
  HAP_ET_COMP = 4,
  HAP_ET_SEND = 5,
  HAP_ET_RECV = 6,
  HAP_ET_COLL = 7,
  HAP_ET_TYPE_MAX = 10 /* the largest value Chakra defines */
} hap_et_type;

/* Chakra's CollectiveCommType values. */
typedef enum hap_et_coll {
  HAP_ET_ALL_REDUCE = 0,
  HAP_ET_REDUCE = 1,
  HAP_ET_ALL_GATHER = 2,
  HAP_ET_GATHER = 3,
  HAP_ET_SCATTER = 4,
  HAP_ET_BROADCAST = 5,
  HAP_ET_ALL_TO_ALL = 6,
  HAP_ET_REDUCE_SCATTER = 7,
  HAP_ET_REDUCE_SCATTER_BLOCK = 8,
  HAP_ET_BARRIER = 9,
  HAP_ET_COLL_COUNT
} hap_et_coll;

const char *hap_et_type_name(int type); /* "COMP_NODE", ...; "unknown" */
const char *hap_et_coll_name(int coll); /* "ALL_REDUCE", ...; "unknown" */

/* One Node. -1 (or NULL, 0) marks what the node does not carry. */
typedef struct hap_et_node {
  uint64_t id;
  char *name;
  int type; /* hap_et_type */
  uint64_t *data_deps, *ctrl_deps;
  int32_t n_data_deps, n_ctrl_deps;
  uint64_t start_us, duration_us; /* start_time_micros, duration_micros, us */
  /* attributes */
  double exact_us;      /* hap_duration_us: duration_micros unrounded, us; -1 */
  double num_ops;       /* num_ops: FLOP (all runs in the iteration); -1 */
  double tensor_size;   /* tensor_size: bytes read + written; -1 */
  int is_cpu_op;        /* is_cpu_op: 0, 1; -1 */
  int comm_type;        /* comm_type: hap_et_coll; -1 */
  double comm_size;     /* comm_size: bytes this rank sends / holds (hap_coll_bytes); -1 */
  int64_t comm_src;     /* comm_src: RECV's sender rank; -1 */
  int64_t comm_dst;     /* comm_dst: SEND's receiver rank; -1 */
  int64_t comm_tag;     /* comm_tag; -1 */
  char *pg_name;        /* pg_name: the process group; NULL = every rank */
  int64_t *pg_ranks;    /* hap_pg_ranks: the group's ranks in ring order; NULL */
  int32_t n_pg_ranks;   /* */
  char *coll_impl;      /* hap_coll_impl: hap's implementation name ("ring", ...); NULL */
  int64_t nic_sharers;  /* hap_nic_sharers: sibling groups sharing a NIC; -1 */
  int64_t repeats;      /* hap_repeats: runs per iteration (collectives); -1 */
  int64_t recompute_of; /* hap_recompute_of: node id whose run precedes this one's; -1 */
  char *kind;           /* hap_kind: "compute", "local", "update", "collective"; NULL */
} hap_et_node;

/* One rank's trace. */
typedef struct hap_et_rank {
  char *version; /* GlobalMetadata.version, e.g. "0.0.4" */
  /* GlobalMetadata attributes hap writes (-1, NULL when absent) */
  int64_t rank, world_size;                                 /* hap_rank, hap_world_size */
  char *device, *device_model, *dtype, *cluster, *strategy; /* hap_device, ... (docs/chakra.md) */
  double flops_per_s; /* hap_device_flops_per_s: the recording device's compute rate, FLOP/s */
  double memory_Bps;  /* hap_device_memory_bw_Bps: its memory bandwidth, bytes/s */
  double iteration_s; /* hap_iteration_s: the simulated iteration it was exported from, s */
  int64_t node_count; /* hap_node_count: the nodes that follow (a truncation check) */
  hap_et_node *nodes;
  int32_t n_nodes, cap_nodes;
} hap_et_rank;

#define HAP_ET_VERSION "0.0.4" /* the GlobalMetadata version hap writes */

/* An empty trace (version HAP_ET_VERSION, every attribute absent). NULL when out of memory. */
hap_et_rank *hap_et_rank_create(void);
void hap_et_rank_destroy(hap_et_rank *r);
/* Append a node with every field absent (type COMP, the next id); NULL when out of memory. */
hap_et_node *hap_et_add_node(hap_et_rank *r);
/* Copy a string into a trace-owned field (*dst freed first); HAP_ENOMEM. */
hap_status hap_et_set_str(char **dst, const char *s, hap_err *err);

/* Decode `len` bytes. `label` names the source in errors: "<label>: truncated: ...",
 * "<label>: not a Chakra execution trace: ...", "<label>: node N: ...". Errors: HAP_EPARSE,
 * HAP_ENOMEM. Never reads outside data[0..len). */
hap_status hap_et_parse(const char *label, const uint8_t *data, size_t len, hap_et_rank **out,
                        hap_err *err);
/* hap_et_parse of a whole file (HAP_EIO naming it when it cannot be read). */
hap_status hap_et_read(const char *path, hap_et_rank **out, hap_err *err);
/* Write `r` to `path` atomically (a temporary, then rename). */
hap_status hap_et_write(const char *path, const hap_et_rank *r, hap_err *err);

#endif
