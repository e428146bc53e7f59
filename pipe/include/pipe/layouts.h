/* layouts.h — the `hap` strategy's search over 3-D layouts (docs/design-pipeline.md, "The
 * partitioner and the strategies"). For a model whose training state does not fit one device
 * (hap_layouts_needed), Megatron-style layouts are estimated stage by stage (estimate.h):
 * tensor parallelism over a host's devices or fewer (every power of two dividing a host; with
 * none, each stage is hap's own program over its group, searched, with its ratios), pp
 * stages for every pp dividing the devices / tp (at most 64 and a quarter of the nodes), data
 * parallelism over the rest, one sample per micro-batch per
 * replica, the search free to split along the sequence. The policy fields the user did not
 * force are set as Megatron-LM trains: ZeRO-1 across the replicas (its distributed optimizer),
 * no recomputation, then full recomputation where that does not fit. A layout whose parameters
 * alone exceed the memory limit is skipped without synthesis. The fastest whose stages all fit
 * wins. Hosts of unequal size get no candidates (unequal groups: future work).
 * Ownership: hap_layouts_free releases what a search returned. */
#ifndef HAP_PIPE_LAYOUTS_H
#define HAP_PIPE_LAYOUTS_H

#include <stdbool.h>
#include <stdint.h>

#include "pipe/estimate.h"
#include "pipe/megatron.h"

#define HAP_LAYOUTS_MAX 96

/* One candidate. */
typedef struct hap_layout_row {
  hap_megatron_spec layout; /* resolved */
  hap_train_policy policy;  /* the stage programs' */
  double iteration_s;       /* simulated, s; 0 when not estimated */
  double peak_bytes;        /* the fullest stage's device, bytes; 0 when not estimated */
  bool fits;                /* estimated and every stage fits */
  double seconds;           /* wall time spent on it, s */
  char why[320];            /* why it was skipped or failed (cut at 300 bytes); "" otherwise */
} hap_layout_row;

typedef struct hap_layout_search {
  hap_layout_row rows[HAP_LAYOUTS_MAX];
  int n_rows;
  int best;                    /* the chosen row, or -1 */
  hap_pipe_estimate *estimate; /* the chosen row's (owned), or NULL */
  hap_synth_options stage;     /* the options its stage programs were made with */
  double seconds;              /* wall time of the whole search, s */
} hap_layout_search;

/* Does g's training state (its trainable parameters under o's policy, hap_policy_param_bytes)
 * exceed the smallest device's memory (or o->memory_limit_bytes)? Then one device cannot hold a
 * replica, and the search below is worth its time. */
bool hap_layouts_needed(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o);

/* Estimate every candidate; `forced` (HAP_POLICY_* bits) are the policy fields the user set.
 * HAP_OK even when nothing fits (out->best is -1); HAP_ENOMEM. */
hap_status hap_layouts_search(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                              uint32_t forced, hap_layout_search *out, hap_err *err);
void hap_layouts_free(hap_layout_search *s);

/* "tp=8,pp=16,dp=8,mbs=1,v=1,sp=free zero=1 recompute=full" of a row. */
void hap_layout_row_describe(const hap_layout_row *r, char *buf, size_t len);

#endif
