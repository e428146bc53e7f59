/* synth_internal.h — what the synthesizer's modules share: the context (graph, cluster, ratios,
 * each node's sharding variants and their costs) and the cost evaluator every triple is priced
 * with. Private to synth/. */
#ifndef HAP_SYNTH_INTERNAL_H
#define HAP_SYNTH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/cost.h"
#include "model/sharding.h"
#include "plan/plan.h"
#include "synth/synth.h"

typedef struct syn_node {
  hap_op_io io; /* full shapes; in_grad as in the graph */
  int32_t segment;
  int32_t n_variants;
  hap_variant variants[HAP_MAX_VARIANTS];
  bool allowed[HAP_MAX_VARIANTS];  /* the strategy may use it */
  double cost_s[HAP_MAX_VARIANTS]; /* forward + backward, slowest device, under the ratios */
  /* cost_s plus the sources of the parameters only this node uses (every program pays them with
   * this variant): what the heuristic counts, s */
  double bound_s[HAP_MAX_VARIANTS];
  /* sufficient-factor broadcasting of the weight with this variant (syn_sfb_time), s; NaN until
   * asked under the current ratios */
  double sfb_s[HAP_MAX_VARIANTS];
} syn_node;

typedef struct syn_memo_entry syn_memo_entry;

typedef struct syn_ctx {
  const hap_graph *g;
  const hap_cluster *c;
  hap_strategy strategy;
  int32_t n;       /* devices */
  hap_group world; /* every collective spans all devices (SPMD) */
  int32_t n_segments;
  double *ratios;     /* [n_segments][n] */
  syn_node *nodes;    /* [g->n_nodes], graph (topological) order */
  int32_t *last_use;  /* [g->n_tensors]: last consuming node; the loss lives to the end */
  int32_t *n_uses;    /* [g->n_tensors]: consuming nodes */
  double *h_suffix;   /* [n_nodes + 1]: sum over nodes >= k of their cheapest allowed variant */
  int32_t *dev_class; /* [n]: devices with identical specs share a class */
  /* [g->n_tensors]: the node after which a tensor is in the search's states (its producer, or a
   * source's first consumer); -1 if no node uses or makes it */
  int32_t *avail;
  /* [n_nodes + 1]: the search's heuristic after k nodes, s (window bounds, search.c), valid while
   * h_window_ready; syn_set_ratios clears the flag */
  double *h_window;
  bool h_window_ready;
  /* h_window = h_suffix, no window bounds (tests compare the two) */
  bool plain_heuristic;
  int32_t n_classes;
  hap_shard_cache lengths; /* shard lengths per (extent, granule, segment) under the ratios */
  /* cache of communication and source times and per-class memory per property (evaluate.c),
   * emptied with the lengths when the ratios change */
  syn_memo_entry *memo;
  size_t n_memo, cap_memo;
  double *memo_vals; /* per-class bytes of the memory entries */
  size_t n_memo_vals, cap_memo_vals;
  double *mem_limit;     /* [n_classes] bytes a device of the class may hold */
  double *mem_scratch;   /* [n] */
  double *class_scratch; /* [n_classes] */
  /* Keep a costlier state next to a cheaper one with the same properties when it holds less
   * memory (needed only when memory binds; it can multiply the states) */
  bool keep_leaner;
  int64_t max_generated; /* give up beyond this many generated states (0 = no cap) */
  /* Order the search by memory (the fullest class's bytes) instead of time: finds the program
   * that needs the least memory, for when nothing fits */
  bool minimize_memory;
  double cost_bound; /* hap_synth_options.cost_bound_s (0: none), s */
  bool pruned;       /* a state was dropped for exceeding cost_bound */
  /* [n] or NULL: 2-D plans, the group across replicas each device's gradients are all-reduced in
   * (megatron.c); priced into every trainable parameter's source */
  const hap_group *replica_groups;
  hap_sfb_use sfb; /* hap_synth_options.sfb */
  /* hap_synth_options.zero_store and its context (NULL: the policy decides) */
  bool (*zero_store)(void *ctx, const hap_graph *g, int32_t tensor);
  void *zero_store_ctx;
  /* ---- the training policy (syn_ctx_set_policy; the default after syn_ctx_init) ---- */
  hap_train_policy pol;
  bool plain;        /* the default policy: every cost and byte exactly as before policies */
  double act_copies; /* kept activations count this many times against the limit (>= 1; a
                        pipeline stage's micro-batches in flight) */
  int32_t micro;     /* micro-batches per iteration */
  double replicas;   /* copies of each device's data across 2-D replicas (1 when flat) */
  double grad_scale; /* bytes a gradient reduction moves per byte of the tensor in g */
  bool *state;       /* [g->n_tensors]: parameters, buffers and what is made from them alone (no
                        batch: communicated once per iteration, not per micro-batch) */
  hap_recompute_map rmap; /* dropped tensors and recomputed nodes (none without recomputation) */
  bool *scope_start;      /* [n_nodes]: node k starts a new recomputation scope (layer) */
  /* Memory vectors per search state, each [n_classes]: 1 (kept bytes), or 3 with recomputation
   * (kept; the current layer's dropped bytes; the largest layer's so far): the peak is kept +
   * the largest layer, recomputed one at a time in the backward pass. */
  int32_t n_mem;
} syn_ctx;

/* hap_synthesize over every device as one SPMD group (hap, dp-ev, dp-cp, and megatron-tp's
 * program inside one host). */
hap_status syn_synthesize_flat(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                               hap_plan **out, hap_synth_stats *stats, hap_err *err);
/* The same for one replica of a 2-D plan: replica_groups[c->n_devices] (or NULL) are the groups
 * across which each device's parameter gradients are all-reduced after the program; their cost
 * is added to every trainable parameter's source. */
hap_status syn_synthesize_replica(const hap_graph *g, const hap_cluster *c,
                                  const hap_synth_options *o, const hap_group *replica_groups,
                                  hap_plan **out, hap_synth_stats *stats, hap_err *err);
/* syn_synthesize_replica, also giving the chosen program (variants[g->n_nodes], caller's buffer).
 */
hap_status syn_synthesize_replica_program(const hap_graph *g, const hap_cluster *c,
                                          const hap_synth_options *o,
                                          const hap_group *replica_groups, hap_plan **out,
                                          int8_t *variants, hap_synth_stats *stats, hap_err *err);
/* Price a program syn_synthesize_replica chose (variants, under `ratios`) on c, another group of
 * the same size (its devices may differ): a fresh plan of c's devices with the steps, per-device
 * compute, communication and memory and the predicted iteration. */
hap_status syn_price_replica(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                             const hap_group *replica_groups, const int8_t *variants,
                             const double *ratios, hap_plan **out, hap_err *err);
/* A context for o's strategy and policy on g and c (replica_groups as syn_synthesize_replica
 * takes them); *pg: the graph the kernels run (one micro-batch in the policy's compute
 * precision; NULL when that is g itself), destroyed by the caller after the context. Nothing to
 * free on failure. */
hap_status syn_ctx_open(syn_ctx *x, const hap_graph *g, const hap_cluster *c,
                        const hap_synth_options *o, const hap_group *replica_groups, hap_graph **pg,
                        hap_err *err);
/* The alpa strategy (alpa.c): Alpa's intra-operator ILP over every node's variant, even ratios. */
hap_status syn_alpa(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                    hap_plan **out, hap_synth_stats *stats, hap_err *err);
/* The megatron-tp baseline (megatron.c): a 2-D plan, one replica per host. */
hap_status syn_megatron(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                        hap_plan **out, hap_synth_stats *stats, hap_err *err);

/* memory_limit: bytes per device, 0 = each device's own memory. */
hap_status syn_ctx_init(syn_ctx *x, const hap_graph *g, const hap_cluster *c, hap_strategy s,
                        hap_seq_parallel sp, double memory_limit, hap_err *err);
void syn_ctx_free(syn_ctx *x);
/* Install the training policy (x->g is already the graph its kernels run: one micro-batch, the
 * compute precision); `replicas` copies across 2-D replicas (1 when flat). Call before
 * syn_set_ratios. */
hap_status syn_ctx_set_policy(syn_ctx *x, const hap_train_policy *pol, int32_t replicas,
                              hap_err *err);
/* Install ratios ([n_segments][n]) and re-price every node's variants. */
hap_status syn_set_ratios(syn_ctx *x, const double *ratios, hap_err *err);

/* o for baseline strategy b, offered to hap: no re-scoring hook, no progress. */
hap_synth_options syn_baseline_options(const hap_synth_options *o, hap_strategy b);

/* A baseline's plan offered to hap (re-scored by the hook): when `score` beats *best, it replaces
 * *plan (destroyed), renamed "hap", and *best becomes score; otherwise it is destroyed. Returns
 * whether it was kept (false also when out of memory). */
bool syn_keep_if_faster(hap_plan **plan, double *best, hap_plan *cand, double score);

/* Whether segments a and b have identical ratios (hap_plan_same_split under the current ratios):
 * a Gather under one is then the Gather under the other. */
bool syn_same_split(const syn_ctx *x, int32_t a, int32_t b);

/* Per-device lengths of a dim of `extent` split in `granule` units by segment `seg`'s ratios. */
const int64_t *syn_lengths(syn_ctx *x, int64_t extent, int64_t granule, int32_t seg);

/* Forward + backward compute time of node k under variant v on every device (per_device may be
 * NULL), returning the slowest device's, s: every micro-batch, and a recomputed node's forward
 * again. */
double syn_node_time(syn_ctx *x, int32_t k, int v, double *per_device);
/* What the policy makes of one node's forward and backward time on one device, s. */
double syn_node_policy_time(const syn_ctx *x, int32_t k, double fwd_s, double bwd_s);
/* Kernel launches behind syn_node_policy_time (2 per micro-batch, 3 when recomputed). */
double syn_node_launches(const syn_ctx *x, int32_t k);
/* How often a communication of tensor t runs per iteration, forward and backward (its dual):
 * once per micro-batch unless t is state, and a dropped tensor's forward again. */
void syn_comm_weights(const syn_ctx *x, int32_t t, double *fwd, double *bwd);

/* A tensor's layout on the devices: which layout, which segment's ratios split its Gather dim,
 * and in which granule. */
typedef struct syn_prop {
  int32_t tensor;
  hap_layout layout;
  int32_t segment; /* Gather only; 0 otherwise */
  int64_t granule; /* Gather only; 1 otherwise */
} syn_prop;

/* Forward + backward time to turn `from` into `to` (same tensor), with the comm op and the
 * implementation chosen; HUGE_VAL when no single communication does it. */
double syn_comm_time(syn_ctx *x, const syn_prop *from, const syn_prop *to, hap_comm_op *op,
                     hap_coll_impl *impl);
/* Time to make a source tensor (input, parameter, buffer) available as `to`, including its
 * gradient synchronisation, with the storage chosen; HUGE_VAL when impossible. */
double syn_source_time(syn_ctx *x, const syn_prop *to, hap_storage *storage);

/* How a node's input property is obtained from the properties already there. */
typedef struct syn_choice {
  double seconds; /* HUGE_VAL: impossible */
  bool present;   /* already there */
  bool source;    /* made by a source triple */
  hap_storage storage;
  syn_prop from; /* else communicated from this property */
  hap_comm_op op;
  hap_coll_impl impl;
} syn_choice;

/* The cheapest way to obtain `want`, input `input` of node k applied with variant v, given `have`
 * (n properties). A linear weight's source may be sfb (syn_sfb_time). */
syn_choice syn_choose_input(syn_ctx *x, const syn_prop *have, int32_t n, const syn_prop *want,
                            int32_t k, int v, int input);
/* The source of node k's weight (input 1) stored sfb under variant v: its consumer's input and
 * output gradient all-gathered, the whole-batch weight-gradient GEMM on every device less the
 * share the node's own backward no longer computes (the slowest device's), and the optimizer
 * update, s; HUGE_VAL where sfb does not apply (hap_sfb_shape_ok, hap_sfb_allowed, a strategy
 * x->sfb allows, more than one device, not a pipeline stage). */
double syn_sfb_time(syn_ctx *x, int32_t k, int v);

/* Search under the installed ratios: the variant of every node and the program's cost, s. */
hap_status syn_search(syn_ctx *x, const hap_synth_options *o, int round, int8_t *variants,
                      double *cost_s, double *peak_bytes, hap_synth_stats *stats, hap_err *err);

/* Replay a program under the installed ratios: its cost, s, and (when plan is not NULL) its steps
 * and per-device compute, communication and memory added to the plan. */
hap_status syn_replay(syn_ctx *x, const int8_t *variants, hap_plan *plan, double *cost_s,
                      hap_err *err);

/* Memory a property occupies, added per device to mem[n] (and, when per_class is not NULL, the
 * largest device's share per class to per_class[n_classes]): a parameter's source its value,
 * gradient and optimizer state under the policy (ZeRO storage holds its shard; ZeRO stages divide
 * by the copies), a communicated parameter its compute copy and gradient, everything else once
 * (kept for the backward pass). Under the default policy: parameters twice, the rest once. */
void syn_prop_memory(syn_ctx *x, const syn_prop *p, hap_storage storage, double *mem,
                     double *per_class);
/* The same by component, added to parts[n] (which may be NULL) and total[n]. */
void syn_prop_memory_parts(syn_ctx *x, const syn_prop *p, hap_storage storage,
                           hap_memory_breakdown *parts, double *total);
/* Bytes per byte of the tensor a property holds, by component (the parts above). */
hap_memory_breakdown syn_prop_rates(const syn_ctx *x, const syn_prop *p, hap_storage storage);
/* Micro-batches' copies of tensor t held at once: act_copies for a kept activation, else 1. */
double syn_act_copies(const syn_ctx *x, int32_t t);

/* Search-state memory (n_mem vectors of n_classes): enter node k (a new layer starts with an
 * empty working set), add a property (kept, or in the layer's working set when recomputation
 * drops its tensor), the peak per class and whether every class fits its limit. */
void syn_mem_enter(const syn_ctx *x, int32_t k, double *mem);
void syn_mem_add(syn_ctx *x, const syn_prop *p, hap_storage storage, double *mem);
double syn_mem_class(const syn_ctx *x, const double *mem, int32_t c);
bool syn_mem_fits(const syn_ctx *x, const double *mem);

/* Bytes of tensor t on each device under a property. */
void syn_bytes(syn_ctx *x, const syn_prop *p, double *per_rank);

#endif
