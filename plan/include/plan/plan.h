/* plan.h — a plan: the SPMD program hap-synth emits for one graph on one cluster (how every tensor
 * is laid out and communicated, forward order), the per-segment sharding ratios, and what the
 * synthesizer predicts. hap-sim lowers and simulates it; hap-run executes it. Its validation (the
 * property flow) is here; the JSON form ("hap-plan") is in plan_io.h, the rules in docs/formats.md.
 * Ownership: hap_plan_create returns an owned plan freed with hap_plan_destroy; every array and
 * string inside belongs to it. Steps reference the graph by node and tensor ids, so a plan is only
 * meaningful with the graph (and cluster) whose digests it records. */
#ifndef HAP_PLAN_H
#define HAP_PLAN_H

#include <stdint.h>

#include "cluster/cost.h"
#include "model/graph.h"
#include "model/policy.h"
#include "model/sharding.h"

typedef enum hap_step_kind {
  HAP_STEP_SOURCE = 0, /* make an input or parameter available in a layout */
  HAP_STEP_COMPUTE,    /* apply a graph node with a sharding variant */
  HAP_STEP_COMM,       /* give a tensor another layout */
  HAP_STEP_KIND_COUNT
} hap_step_kind;

typedef enum hap_comm_op {
  HAP_COMM_ALL_GATHER = 0, /* Gather(d) -> Identity;        backward: reduce-scatter */
  HAP_COMM_REDUCE_SCATTER, /* Reduce -> Gather(d);          backward: all-gather */
  HAP_COMM_ALL_REDUCE,     /* Reduce -> Identity;           backward: all-reduce */
  HAP_COMM_ALL_TO_ALL,     /* Gather(a) -> Gather(b), or Gather(d) re-sharded from one segment's
                              ratios to another's;          backward: the inverse all-to-all */
  HAP_COMM_SLICE,          /* Identity -> Gather(d), local; backward: all-gather of the gradient */
  HAP_COMM_KEEP_ONCE,      /* Identity -> Reduce, local: device 0 keeps it, others hold zeros;
                              backward: none (each device's gradient is already the full one) */
  HAP_COMM_OP_COUNT
} hap_comm_op;

typedef enum hap_storage {
  HAP_STORE_INPUT = 0,  /* data fed each iteration: every device loads its layout directly */
  HAP_STORE_REPLICATED, /* parameter held whole on every device; its gradient is all-reduced */
  HAP_STORE_SHARDED,    /* parameter held as its layout's slice (Gather(d)); no synchronisation */
  HAP_STORE_ZERO,       /* parameter stored sharded along dim 0 (ZeRO-3 style) and all-gathered
                           into Identity when used; its gradient is reduce-scattered */
  HAP_STORE_SFB,        /* sufficient-factor broadcasting: a linear node's weight held whole on
                           every device; its gradient is not reduced: every device all-gathers
                           the node's input and output gradient along the batch and forms the
                           whole weight gradient itself (docs/design-sfb.md) */
  HAP_STORAGE_COUNT
} hap_storage;

const char *hap_step_kind_name(hap_step_kind k); /* "source", "compute", "comm" */
hap_status hap_step_kind_parse(const char *s, hap_step_kind *out);
const char *hap_comm_op_name(hap_comm_op op); /* "all_gather", ... "keep_once" */
const char *hap_storage_name(hap_storage s);  /* "input", "replicated", "sharded", "zero", "sfb" */
/* Names the functions above give back; HAP_ENOTFOUND for anything else. */
hap_status hap_comm_op_parse(const char *s, hap_comm_op *out);
hap_status hap_storage_parse(const char *s, hap_storage *out);
/* "I", "R", "G0".."G7" ("?" for anything else); returns buf. */
const char *hap_layout_name(hap_layout l, char buf[4]);
hap_status hap_layout_parse(const char *s, hap_layout *out);

/* A Gather layout is always tied to the ratios of one segment and a granule: device i holds
 * hap_shard_lengths(extent, granule, ratios[segment])[i] of the sharded dim. A step that needs a
 * Gather needs it with that segment and granule; only an all-to-all changes the segment. Two
 * segments whose ratios are identical (hap_plan_same_split) split alike: a Gather under one is the
 * Gather under the other, and no step changes between them. */
typedef struct hap_step {
  hap_step_kind kind;
  int32_t segment; /* ratios this step's Gather lengths use (a COMM: those of `to`); COMPUTE: its
                      node's segment */
  /* SOURCE */
  int32_t tensor;      /* SOURCE and COMM: graph tensor id */
  hap_storage storage; /* SOURCE */
  /* COMPUTE */
  int32_t node;        /* graph node id */
  hap_variant variant; /* layouts of the node's inputs and outputs, granule, flags */
  /* SOURCE and COMM: the layout made available; COMM also the layout it starts from */
  hap_layout from, to;
  hap_comm_op comm;     /* COMM */
  hap_coll_impl impl;   /* COMM: the implementation chosen (ring, grouped, pairwise, ...) */
  int32_t from_segment; /* COMM: the ratios a Gather `from` uses (the tensor's producer's); an
                           all-to-all between segments has it differ from `segment` */
  int64_t granule;      /* SOURCE and COMM: granule of their Gather lengths (the consuming
                           variant's: attention heads' E / heads, else 1); 0 means 1 */
  double predicted_s;   /* forward + backward + gradient synchronisation of this step, s */
} hap_step;

/* What the tools loaded a plan's graph and cluster from, as given: a zoo spec or a graph file path,
 * a cluster spec or a profile path. NULL: not recorded. hap-run and hap-sim --plan default
 * --model / --cluster to them (the digests still decide). Owned (hap_plan_specs_set / _free). */
typedef struct hap_plan_specs {
  char *model, *cluster;
} hap_plan_specs;

/* Replace s's strings with copies of model and cluster (either may be NULL). HAP_ENOMEM leaves
 * both NULL. */
hap_status hap_plan_specs_set(hap_plan_specs *s, const char *model, const char *cluster);
void hap_plan_specs_free(hap_plan_specs *s);

typedef struct hap_plan {
  char *strategy; /* "hap", "dp-ev", "dp-cp", "megatron-tp" */
  char *graph_name;
  uint64_t graph_digest; /* hap_graph_digest (model/graph_io.h) */
  char *cluster_name;
  uint64_t cluster_digest; /* hap_cluster_digest (cluster/cluster_io.h) */
  hap_plan_specs specs;    /* where they were loaded from (may be empty) */
  int32_t n_devices;
  /* 2-D device groups: the devices split into `replicas` consecutive groups of group_size =
   * n_devices / replicas; the steps are the SPMD program of one group, run by every group on an
   * even share of the batch (hap_graph_split_batch), each collective inside its group; then each
   * trainable parameter's gradient shard is all-reduced across the groups (devices with the same
   * index in their group). 1 (the default): one group of every device. */
  int32_t replicas;
  int32_t group_size;
  int32_t n_segments;
  double *ratios; /* [n_segments][group_size], each row >= 0 summing to 1 */
  int32_t n_steps, cap_steps;
  hap_step *steps;              /* forward order; every step's inputs are made available earlier */
  double predicted_iteration_s; /* s */
  double *device_memory_bytes;  /* [n_devices] peak per device, bytes */
  double *device_compute_s;     /* [n_devices] busy computing per iteration, s */
  double *device_comm_s;        /* [n_devices] communicating per iteration, s */
  /* How the plan trains (model/policy.h): precision, optimizer, ZeRO stage, recomputation,
   * micro-batches. The default for files without one. With micro_batches k > 1 the steps, ratios
   * and lengths are those of one micro-batch: the graph split k ways (x replicas for 2-D plans,
   * hap_graph_split_batch). */
  hap_train_policy policy;
  /* [n_devices] device_memory_bytes by component (docs/memory.md), bytes; meaningful only when
   * memory_recorded (the synthesizer records it; older files have none) */
  hap_memory_breakdown *device_memory;
  bool memory_recorded;
} hap_plan;

/* NULL on allocation failure or when n_devices or n_segments < 1. Arrays are sized and zeroed;
 * ratios start even; the policy is the default. NULL names are taken as "". */
hap_plan *hap_plan_create(const char *strategy, const char *graph_name, uint64_t graph_digest,
                          const char *cluster_name, uint64_t cluster_digest, int32_t n_devices,
                          int32_t n_segments);
void hap_plan_destroy(hap_plan *p);
/* A deep copy (owned by the caller); NULL on allocation failure. A step's variant.name points
 * into the op table, shared. */
hap_plan *hap_plan_copy(const hap_plan *p);
/* Make the plan 2-D: `replicas` groups (>= 1, dividing n_devices); the ratios become
 * [n_segments][n_devices / replicas], even. HAP_EINVAL or HAP_ENOMEM otherwise. */
hap_status hap_plan_set_replicas(hap_plan *p, int32_t replicas, hap_err *err);
/* The graph the steps run on: `g` split over replicas x micro-batches (hap_graph_split_batch) into
 * *out, or *out NULL when that is 1 (the steps run on g itself). Errors name the replicas or the
 * micro-batches that do not divide the batch. */
hap_status hap_plan_step_graph(const hap_plan *p, const hap_graph *g, hap_graph **out,
                               hap_err *err);
/* Whether segments a and b split every dim alike: a == b, or both are segments whose ratio rows
 * are identical (bit for bit). */
bool hap_plan_same_split(const hap_plan *p, int32_t a, int32_t b);
/* Append a copy of `step`; HAP_ENOMEM on failure. */
hap_status hap_plan_add_step(hap_plan *p, const hap_step *step, hap_err *err);

/* Check the program against its graph (validated) and cluster: names, digests, device and
 * segment counts match; the policy is in range (hap_policy_check); replicas divide the devices
 * and replicas x micro-batches the graph's batch (the steps are then checked against the graph of
 * one micro-batch of one replica, hap_plan_step_graph); a recorded memory breakdown is finite,
 * >= 0 and adds up to each device's memory_bytes (relative 1e-9); ratios are finite, >= 0 and sum
 * to 1 (1e-9) per segment; predictions are finite and >= 0; every node is computed exactly once, in
 * its segment, with a variant that hap_op_variants offers for it (layouts, granule, flags and once;
 * the name is not compared); every step only uses layouts made available before it (the property
 * flow: sources and compute outputs make layouts available, a comm needs its `from` and makes its
 * `to`, a Gather carries its segment and granule); each input, parameter or buffer is sourced at
 * most once, with a storage that fits its kind (input: inputs, any layout but R; replicated and
 * zero: parameters and buffers as I; sharded: as a Gather; sfb: below) and activations never; each
 * comm's layouts suit its op (all_gather G->I, reduce_scatter R->G, all_reduce R->I, all_to_all
 * G(a)->G(b) with a != b or another from_segment, slice I->G, keep_once I->R); the loss ends up
 * available as R or I. An sfb source is a trainable 2-D parameter as I whose one consumer is a
 * linear node taking it as its weight with the input and output split alike along a dim that is not
 * the last, in a 1-D plan whose policy is fp32 without micro-batches, ZeRO or recomputation
 * (hap_sfb_shape_ok, hap_sfb_allowed). Errors name the step (`steps[12]`), the node or tensor, and
 * what was expected. */
hap_status hap_plan_validate(const hap_plan *p, const hap_graph *g, const hap_cluster *c,
                             hap_err *err);

/* Sufficient-factor broadcasting: the compute step of the linear node that consumes parameter
 * `tensor` (an sfb source's), or -1 when the plan has none. */
int32_t hap_plan_sfb_consumer(const hap_plan *p, const hap_graph *g, int32_t tensor);
/* Whether a plan under policy `pol` with `replicas` groups may use sfb storage: fp32, one
 * micro-batch, ZeRO 0, no recomputation, replicas 1 (any optimizer). */
bool hap_sfb_allowed(const hap_train_policy *pol, int32_t replicas);
/* Whether node `node` of g with `variant` can make its weight's gradient by sufficient factors:
 * a linear node whose weight (input 1) is a trainable 2-D parameter consumed by no other node and
 * held whole (I), with the input and output split alike (a Gather) along a dim that is not the
 * last (the rows of the GEMM). */
bool hap_sfb_shape_ok(const hap_graph *g, int32_t node, const hap_variant *variant);

#endif
