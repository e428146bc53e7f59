/* kernels_run.h — hap-run's compute on a GPU: kernel programs (kx.h) executed by CUDA (one launch
 * per pass, GEMMs through cuBLAS: plain FP32 without TF32, or mixed precision's float16/bfloat16
 * operands with float32 accumulation), timed on the device with two cudaEvents around the
 * program.
 *
 * Two call shapes, both hap_kernel_call plus buffers as in kernels/:
 *  - hap_cuda_kernel_forward / _backward take device pointers;
 *  - hap_cuda_staged_forward / _backward take host pointers (hap-run's buffers): they upload the
 *    inputs (and forward outputs, output gradients and the current input gradients), run the
 *    program, and download the outputs (input gradients), reporting the kernels' device time and
 *    the copies' host time separately. Their signature is hap_run_kernels' (run/run.h).
 * Ops without a program are HAP_EUNSUPPORTED "op 'X' has no CUDA kernel yet (hap-run --backend cpu
 * runs it)". No hap_kernel_state is kept (backward recomputes what it needs).
 * Built without CUDA, open returns HAP_ENOGPU (kernels_run_none.c).
 * Run on an H200 (docs/execution.md); CI has no GPU and runs the same programs on the host (kx.h).
 * Ownership: open returns an owned context (hap_cuda_kernels_close); buffers are the caller's; the
 * context's device buffers (staging, scratch) grow to the largest call and live until close. */
#ifndef HAP_KERNELS_RUN_H
#define HAP_KERNELS_RUN_H

#include <stdint.h>

#include "kernels/kernels.h"

typedef struct hap_cuda_kernels hap_cuda_kernels;

/* Make GPU `device` (CUDA ordinal) current, check it runs this build's kernels (hap_gpu_selftest)
 * and create a stream, events and a cuBLAS handle. HAP_ENOGPU with the reason when there is no
 * such usable GPU. */
hap_status hap_cuda_kernels_open(int32_t device, hap_cuda_kernels **out, hap_err *err);
void hap_cuda_kernels_close(hap_cuda_kernels *k);

/* The GEMMs' operand format from now on (hap_kx_gemm_dtype_ok; HAP_F32 after open): with
 * HAP_F16 or HAP_BF16, each GEMM converts its A and B on the device (round to nearest even) and
 * multiplies them with float32 accumulation into its float32 C, as a policy's half compute
 * copies are multiplied. HAP_EINVAL for other dtypes. */
hap_status hap_cuda_kernels_set_gemm(hap_cuda_kernels *k, hap_dtype gemm, hap_err *err);

/* Device pointers. *kernel_s: the program's device time, s. */
hap_status hap_cuda_kernel_forward(hap_cuda_kernels *k, const hap_kernel_call *c, void *const *out,
                                   double *kernel_s, hap_err *err);
hap_status hap_cuda_kernel_backward(hap_cuda_kernels *k, const hap_kernel_call *c,
                                    const float *const *dout, float *const *din, double *kernel_s,
                                    hap_err *err);

/* Host pointers, staged through device buffers; ctx is a hap_cuda_kernels. *kernel_s as above,
 * *staging_s: host time of the uploads and downloads, s. `st` is emptied (forward) or ignored. */
hap_status hap_cuda_staged_forward(void *ctx, const hap_kernel_call *c, void *const *out,
                                   hap_kernel_state *st, double *kernel_s, double *staging_s,
                                   hap_err *err);
hap_status hap_cuda_staged_backward(void *ctx, const hap_kernel_call *c, const float *const *dout,
                                    float *const *din, const hap_kernel_state *st, double *kernel_s,
                                    double *staging_s, hap_err *err);

#endif
