/* kernels.h — CPU reference kernels of every op in the op table (model/ops.h), forward and
 * backward, computing the real function in float32 (GEMMs through OpenBLAS, reductions in double).
 * These are what the executor runs on the `cpu` backend and what its --check compares against.
 *
 * Ownership: every buffer is caller-owned; the kernels never keep a pointer past the call. A
 * hap_kernel_state is caller-owned too; forward fills it (allocating) and hap_kernel_state_free
 * releases it. Nothing here prints, exits or keeps global state: calls are re-entrant.
 *
 * Contract of one call (hap_kernel_call):
 *  - `io` is the application on this device: the local shapes and attributes that
 *    hap_op_local_io gives for the device's shard (or the full io when unsharded). Dims may be 0
 *    (an empty shard): the kernel then writes empty outputs, or the partial its flags ask for.
 *  - Data types: float inputs and outputs are float32 (HAP_F32); index inputs (embedding indices,
 *    loss targets) are int64 or int32 as io->in_dtype says; layout ops (reshape, flatten,
 *    transpose, permute, narrow, cls_select) move elements of any dtype. Anything else is
 *    HAP_EUNSUPPORTED. Buffers are dense row-major, with numel(shape) elements each.
 *  - `shard` (NULL: unsharded) tells the kernel how this device's application relates to the full
 *    one, for the flags of the variant (model/sharding.h):
 *      BIAS_ONCE     the inputs in variant->once (and the scalar of a one-input add/sub) are used
 *                    on rank 0 only; other ranks treat them as zero and get no gradient for them.
 *                    The caller passes the real (Identity) values on every rank.
 *      GLOBAL_COUNT  mean and mean-reduced losses divide by the full element count (full io).
 *      GLOBAL_MASK   dropout (and attention dropout) keeps element e iff
 *                    hap_kernel_keep(seed, global_position(e), p): the global position is the
 *                    element's row-major index in the full tensor (for attention: in the full
 *                    [N, heads, L, S] weights), the local index plus `offset` along the sharded
 *                    dim. The mask is always drawn this way; without a shard the position is the
 *                    local index, so an unsharded and a sharded run draw the same mask.
 *      LOCAL_ROWS    embedding rows [offset, offset + local V) are held here; other ids give zero
 *                    rows (and no gradient).
 *  - `seed` keys the dropout masks: the same seed on every device for one application of a node
 *    (e.g. hash(run seed, node, step)); forward and backward must get the same seed.
 *
 * Forward writes every output (overwrite). Backward reads the forward inputs `in`, the forward
 * outputs `out` (required: pass what forward wrote), the output gradients `dout` (NULL entries
 * are zero gradients, e.g. top2_gating's dispatch) and ACCUMULATES into `din[i]` (din[i] +=
 * dL/d in[i]) for each input with io->in_grad[i]; din[i] for other inputs is ignored and may be
 * NULL. The caller zeroes a gradient buffer before its first contribution; two inputs may share
 * one gradient buffer (x + x, self-attention's q = k = v). Index inputs never get gradients.
 *
 * Saved state: layer_norm (mean, rstd), max_pool2d (argmax), multi_head_attention (projections,
 * attention weights, context) and top2_gating (choices, slots, gate probabilities) keep what
 * backward needs in a hap_kernel_state when forward is given one; backward uses it when it
 * matches the call (same op and size) and otherwise recomputes it from the inputs. Other ops keep
 * nothing (the state is left empty). */
#ifndef HAP_KERNELS_H
#define HAP_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/ops.h"
#include "model/sharding.h"

/* Where one device's application sits in the full one (NULL in a call: unsharded). */
typedef struct hap_kernel_shard {
  const hap_op_io *full; /* the full application (hap_op_infer'd); its attrs are the full ones */
  const hap_variant *variant; /* the variant being run: layouts, flags, once bits, granule */
  int32_t rank;               /* this device's index in the group; rank 0 applies BIAS_ONCE terms */
  int64_t offset;             /* start of this device's slice of the sharded index: the sum of the
                                 local lengths of ranks below (elements; heads * granule for
                                 head-parallel attention) */
} hap_kernel_shard;

/* Backward-only data forward leaves behind. Zero-initialise; free with hap_kernel_state_free. */
typedef struct hap_kernel_state {
  hap_op op;
  size_t n_bytes; /* size of data, bytes */
  void *data;
} hap_kernel_state;

typedef struct hap_kernel_call {
  hap_op op;
  const hap_op_io *io;           /* local application: shapes, dtypes, attributes, in_grad */
  const hap_kernel_shard *shard; /* NULL: unsharded */
  uint64_t seed;                 /* dropout masks */
  const void *const *in;         /* io->n_in input buffers */
  const void *const *out;        /* backward: io->n_out forward outputs (forward ignores it) */
  /* 2-D plans: this device's replica r when the batch is split evenly over replicas (its tensors
   * are the r-th block of dim 0 of the whole batch's); GLOBAL_MASK positions are shifted by r
   * whole blocks so that every replica draws the masks of its rows. 0 otherwise. */
  int32_t replica;
  /* Backward: bit i set when din[i] holds no gradient yet and has not been zeroed (its first
   * writer this iteration): the call leaves the gradient itself there instead of adding it.
   * Ops whose kernels write such a buffer directly save the clearing and a read of it (GEMMs
   * with beta 0, loops that store); for the others hap_kernel_backward clears it first. 0 (the
   * default): every din[i] is added to. */
  uint32_t fresh_din;
} hap_kernel_call;

/* Compute the outputs into out[0 .. io->n_out). `state` may be NULL. HAP_EINVAL for inconsistent
 * shapes or data (an index out of range names it), HAP_EUNSUPPORTED for dtypes other than the
 * above, HAP_ENOMEM when a scratch buffer cannot be allocated. */
hap_status hap_kernel_forward(const hap_kernel_call *c, void *const *out, hap_kernel_state *state,
                              hap_err *err);

/* din[i] += gradient of input i, for every i with io->in_grad[i] (din[i] = gradient where
 * c->fresh_din has bit i; inputs that share one gradient buffer: only the lowest of them may have
 * it, and the buffer then ends as the sum of their gradients). `state` may be NULL.
 *
 * Fault injection, for tests only (tests/unit/test_kernel_faults.sh): when the environment
 * variable HAP_FAULT_KERNEL names an op ("multi_head_attention"), that op's backward adds
 * HAP_FAULT_SCALE times its gradient (din[i] += (1 + 1e-3) x dL/d in[i], a 0.1 % error, computed
 * into scratch so the scale is exact); other ops are untouched. An unset or empty variable does
 * nothing; a name that is no op fails every backward call with HAP_EINVAL "HAP_FAULT_KERNEL:
 * unknown op '<name>'", so a typo cannot pass silently. Read with getenv on every call. */
#define HAP_FAULT_SCALE (1 + 1e-3)
hap_status hap_kernel_backward(const hap_kernel_call *c, const float *const *dout,
                               float *const *din, const hap_kernel_state *state, hap_err *err);

void hap_kernel_state_free(hap_kernel_state *s);

/* The checks forward and backward make before they compute (shapes against the op table, dtypes,
 * buffers present, shard fields), for other executors of the same calls (kx/kx.h): buffers
 * are compared with NULL but never read, so device pointers are fine. Backward: *needed is false
 * when there is nothing to do (no input wants a gradient, or every output gradient is NULL). */
hap_status hap_kernel_check_forward(const hap_kernel_call *c, void *const *out, hap_err *err);
hap_status hap_kernel_check_backward(const hap_kernel_call *c, const float *const *dout,
                                     float *const *din, bool *needed, hap_err *err);

/* The dropout decision for the element at global position `pos` (a counter-based generator:
 * a hash of seed and pos, no sequence state): true keeps it (scaled by 1 / (1 - p)). */
bool hap_kernel_keep(uint64_t seed, int64_t pos, double p);

/* The SGD step w[i] -= lr * g[i] over n elements: the executor's update task, and what the
 * profiler times to price it (update bandwidth: 3 x 4 bytes per element). */
void hap_kernel_sgd(float *w, const float *g, float lr, int64_t n);

#endif
