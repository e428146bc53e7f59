/* init.h — deterministic parameters and inputs for hap-run: every element of every parameter,
 * buffer and input is a pure function of (seed, tensor name, global element index), so each rank
 * fills exactly its box of a tensor without ever building the whole tensor, and a single-device
 * run of the same graph and seed sees the same numbers.
 *
 * Values:
 *   parameters: uniform in [-a, a] with a = 1 / sqrt(fan_in) as the consuming op defines fan_in
 *     (init.c documents the rule per op); layer_norm weights 1 and biases 0;
 *   buffers: the values the zoo model means them to hold (sinusoidal position encodings, causal
 *     masks: 0 on and below the diagonal, -inf above), each rule documented in init.c; a buffer
 *     no rule recognises gets uniform [-1, 1];
 *   inputs: integer inputs (token ids, labels) uniform in [0, range) where the range comes from
 *     the op that consumes them (embedding: rows of its weight; nll_loss / cross_entropy: the
 *     class dim of the scores); float inputs uniform in [-1, 1].
 * Ownership: plain functions; buffers belong to the caller. */
#ifndef HAP_RUN_INIT_H
#define HAP_RUN_INIT_H

#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"
#include "run/box.h"

/* Fill `out` (box `b` of tensor t, row-major, in the tensor's dtype: float32, int64 or int32)
 * with the tensor's initial values. Tensor t must be a parameter, buffer or input of validated
 * `g`. HAP_EUNSUPPORTED for a dtype other than those (integers: inputs only), or an integer input
 * whose range cannot be found from its consumers; HAP_EINVAL for an activation or a box outside
 * the tensor. Every message is one line naming the tensor. */
hap_status hap_init_fill(const hap_graph *g, int32_t t, uint64_t seed, const hap_box *b, void *out,
                         hap_err *err);

/* Given values instead of the rules (hap-run --weights: a model's own weights and batch, e.g.
 * PyTorch's through hap-import): while set, hap_init_fill fills tensor t from the entry named as
 * t, whatever the seed, when there is one (its dtype and shape must be t's: HAP_EINVAL naming the
 * tensor otherwise), and by the rules above when there is none. Process-wide, not thread-safe:
 * set before any run starts; the arrays must outlive the runs. NULL / 0 restores the rules. */
typedef struct hap_init_value {
  const char *name;
  hap_dtype dtype;
  hap_shape shape;
  const void *data; /* row-major, whole tensor */
} hap_init_value;
void hap_init_set_values(const hap_init_value *values, int32_t n);

#endif
