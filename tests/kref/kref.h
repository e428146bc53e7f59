/* kref.h — an independent float64 reference of every op in the op table (model/ops.h), forward
 * only, for the kernel tests (tests/unit/test_kernels_ref64.c): naive loops in double, no BLAS and
 * no code shared with kernels/, so that a kernel bug cannot cancel against itself. Its one link to
 * the kernels is the documented dropout mask, hap_kernel_keep (kernels.h), which it calls with the
 * same positions the unsharded kernels use (the element's row-major index; for attention the
 * index in the [N, heads, L, S] weights).
 *
 * Not a production library: tests/CMakeLists.txt builds it as the static library `hap_kref`.
 *
 * One call: `io` is an unsharded application that hap_op_infer accepted (its attributes are the
 * ones the kernels read). Float inputs are `const double *`, index inputs (embedding indices, loss
 * targets) `const int64_t *`, each dense row-major with numel(io->in[i]) elements; outputs are
 * `double *` with numel(io->out[o]) elements, overwritten. `seed` keys the dropout masks.
 * Semantics are those of docs/ops.md and docs/kernels.md (top2_gating's choice and slot rules,
 * max_pool2d's -inf padding, PyTorch's adaptive bins, ...). */
#ifndef HAP_KREF_H
#define HAP_KREF_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/ops.h"

/* Compute every output of op. HAP_EINVAL for an index or target out of range or an einsum
 * equation it cannot read, HAP_EUNSUPPORTED for an op without a reference, HAP_ENOMEM. */
hap_status hap_kref_forward(hap_op op, const hap_op_io *io, uint64_t seed, const void *const *in,
                            double *const *out, hap_err *err);

/* Whether op has a reference (every op of HAP_OP_LIST should). */
bool hap_kref_has(hap_op op);

/* Input i of op holds indices (int64), not float values: embedding's indices, the losses'
 * targets. Such inputs never take a gradient. */
bool hap_kref_index_input(hap_op op, int i);

#endif
