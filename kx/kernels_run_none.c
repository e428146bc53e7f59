/* kernels_run_none.c — kernels_run.h in a build without CUDA: there is no GPU to open. */
#include "kx/kernels_run.h"

hap_status hap_cuda_kernels_open(int32_t device, hap_cuda_kernels **out, hap_err *err) {
  *out = NULL;
  return hap_err_set(err, HAP_ENOGPU, "built without CUDA: no GPU %d", device);
}

void hap_cuda_kernels_close(hap_cuda_kernels *k) { (void)k; }

static hap_status no_gpu(hap_err *err) {
  return hap_err_set(err, HAP_ENOGPU, "built without CUDA");
}

hap_status hap_cuda_kernels_set_gemm(hap_cuda_kernels *k, hap_dtype gemm, hap_err *err) {
  (void)k, (void)gemm;
  return no_gpu(err);
}

hap_status hap_cuda_kernel_forward(hap_cuda_kernels *k, const hap_kernel_call *c, void *const *out,
                                   double *kernel_s, hap_err *err) {
  (void)k, (void)c, (void)out;
  *kernel_s = 0;
  return no_gpu(err);
}

hap_status hap_cuda_kernel_backward(hap_cuda_kernels *k, const hap_kernel_call *c,
                                    const float *const *dout, float *const *din, double *kernel_s,
                                    hap_err *err) {
  (void)k, (void)c, (void)dout, (void)din;
  *kernel_s = 0;
  return no_gpu(err);
}

hap_status hap_cuda_staged_forward(void *ctx, const hap_kernel_call *c, void *const *out,
                                   hap_kernel_state *st, double *kernel_s, double *staging_s,
                                   hap_err *err) {
  (void)ctx, (void)c, (void)out, (void)st;
  *kernel_s = *staging_s = 0;
  return no_gpu(err);
}

hap_status hap_cuda_staged_backward(void *ctx, const hap_kernel_call *c, const float *const *dout,
                                    float *const *din, const hap_kernel_state *st, double *kernel_s,
                                    double *staging_s, hap_err *err) {
  (void)ctx, (void)c, (void)dout, (void)din, (void)st;
  *kernel_s = *staging_s = 0;
  return no_gpu(err);
}
