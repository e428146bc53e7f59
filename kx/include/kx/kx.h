/* kx.h — kernel programs: the GPU path's kernels as a short list of passes (a GEMM, or one
 * element body run for `count` indices), built in C from a hap_kernel_call with exactly the
 * semantics of the CPU kernels (kernels/, docs/kernels.md: every sharding flag).
 *
 * One program runs two ways: on the host (hap_kx_run_host: a loop per pass, GEMMs through
 * k_sgemm), which is what the CPU unit tests check against the CPU kernels, and on a GPU
 * (kernels_run.h: one CUDA launch per pass, GEMMs through cuBLAS, in float32 or, for mixed
 * precision, on float16/bfloat16 operands). The element bodies are shared
 * source (kx_body.h), so the host run exercises the same code the GPU runs.
 *
 * Ops with programs: linear, matmul, bmm, relu, gelu, sigmoid, tanh, rsqrt, pow, dropout, add,
 * sub, mul, div, softmax, log_softmax, sum, mean, reshape, flatten, transpose, permute, narrow,
 * cls_select, cls_append, embedding, layer_norm, nll_loss, cross_entropy. Others (einsum, conv2d,
 * pooling, attention, top2_gating) are HAP_EUNSUPPORTED with "op 'X' has no CUDA kernel yet".
 *
 * Differences from the CPU kernels, by design: sums that the CPU does in element order are done
 * with atomic adds on a GPU (the same values, another rounding order); no hap_kernel_state is kept
 * (layer_norm's backward recomputes its statistics, as the CPU kernel does without a state).
 * Ownership: a program holds no pointers; slots are the caller's buffers. */
#ifndef HAP_KX_H
#define HAP_KX_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kx/kx_body.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { HAP_KX_MAX_PASSES = 8 };

typedef struct hap_kx_prog {
  hap_kx_pass pass[HAP_KX_MAX_PASSES];
  int32_t n;
  int64_t scratch; /* doubles the program needs */
  bool uses_flag;
  /* for the message when the flag is set */
  int32_t index_slot, index_bytes;
  hap_op op;
  int64_t index_hi;
} hap_kx_prog;

/* HAP_OK when op `op` has a program; else HAP_EUNSUPPORTED "op 'X' has no CUDA kernel yet
 * (hap-run --backend cpu runs it)". */
hap_status hap_kx_supported(hap_op op, hap_err *err);

/* Validate the call (as the CPU kernels do) and build its program. Backward: *needed false means
 * there is nothing to do (no input wants a gradient, or every output gradient is zero). Buffers are
 * not read (device pointers are fine). */
hap_status hap_kx_build_forward(const hap_kernel_call *c, void *const *out, hap_kx_prog *p,
                                hap_err *err);
hap_status hap_kx_build_backward(const hap_kernel_call *c, const float *const *dout,
                                 float *const *din, hap_kx_prog *p, bool *needed, hap_err *err);

/* The slots of a call: in, out (forward: `out`; backward: c->out), dout, din; scratch and flag
 * are the executor's. */
void hap_kx_slots(const hap_kernel_call *c, void *const *out, const float *const *dout,
                  float *const *din, void **slots);

/* Matrix offsets of operands a and b for batch t of a GEMM pass. */
void hap_kx_gemm_offsets(const hap_kx_pass *p, int64_t t, int64_t *ia, int64_t *ib);

/* Element offsets of batch t's operands a, b and c (from their slots' starts). */
void hap_kx_gemm_operands(const hap_kx_pass *p, int64_t t, int64_t off[3]);

/* How many batches of a GEMM pass form one strided run, and the strides (elements) of a, b and
 * c from one batch of the run to the next: the innermost batch dimension, along which every
 * offset moves by a fixed stride. Runs start at multiples of the length. 1 where the batches'
 * C would overlap (a sum over batches into one C) or A's or B's stride is negative: those
 * products run one after another. Both
 * executors walk GEMM passes by these runs (the GPU: one strided-batched call per run). */
int64_t hap_kx_gemm_run(const hap_kx_pass *p, int64_t stride[3]);

/* Elements of operands a and b (span[0], span[1]) that a run of `run` batches reads, from its
 * first batch's offsets (hap_kx_gemm_operands) with the run's strides (hap_kx_gemm_run's, >= 0):
 * what a half-precision GEMM converts. Needs m, n, k > 0. */
void hap_kx_gemm_spans(const hap_kx_pass *p, int64_t run, const int64_t stride[3], int64_t span[2]);

/* GEMM operand formats the executors run: HAP_F32 (float32 products, no TF32), HAP_F16 and
 * HAP_BF16 (mixed precision: A and B rounded to the format, round to nearest even; products
 * accumulated and C kept in float32). */
bool hap_kx_gemm_dtype_ok(hap_dtype gemm);

/* The error of a set flag: index `value` at position `pos`. */
hap_status hap_kx_index_error(const hap_kx_prog *p, int64_t pos, int64_t value, hap_err *err);

/* Run a program on the host (slots as from hap_kx_slots; scratch and flag are allocated here),
 * its GEMMs with operands in `gemm` (hap_kx_gemm_dtype_ok; else HAP_EINVAL). */
hap_status hap_kx_run_host(const hap_kx_prog *p, void **slots, hap_dtype gemm, hap_err *err);

/* Build and run on the host: the GPU kernels' logic, on CPU buffers (for tests). */
hap_status hap_kx_forward_host(const hap_kernel_call *c, void *const *out, hap_dtype gemm,
                               hap_err *err);
hap_status hap_kx_backward_host(const hap_kernel_call *c, const float *const *dout,
                                float *const *din, hap_dtype gemm, hap_err *err);

#ifdef __cplusplus
}
#endif

#endif
