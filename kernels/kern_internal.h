/* kern_internal.h — helpers shared by the kernel files (not installed; kernels.h is the API).
 * Every kernel function here is called by kernels.c after the call has been validated: shapes
 * consistent with the op, dtypes supported, buffers non-NULL where they hold elements. */
#ifndef HAP_KERN_INTERNAL_H
#define HAP_KERN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel_parts.h"
#include "kernels/kernels.h"

typedef hap_status (*k_fwd_fn)(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                               hap_err *err);
typedef hap_status (*k_bwd_fn)(const hap_kernel_call *c, const float *const *dout,
                               float *const *din, const hap_kernel_state *st, hap_err *err);

/* ---- dropout (kernels.c) --------------------------------------------------------------------- */

/* y[i] = x[i] * scale where hap_kernel_keep(seed, pos0 + i, p) keeps element i, else 0
 * (accumulate: added to y[i] instead), for i < n; decisions bit for bit hap_kernel_keep's.
 * x may be y. */
void k_dropout_run(uint64_t seed, double p, int64_t pos0, const float *x, float scale, float *y,
                   int64_t n, bool accumulate);
/* The same over n local elements whose global positions g gives (k_gpos_at). */
void k_dropout_gpos(const k_gpos *g, uint64_t seed, double p, const float *x, float scale, float *y,
                    int64_t n, bool accumulate);

/* ---- kernels, by file ------------------------------------------------------------------------ */

/* k_gemm.c */
hap_status k_linear_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_linear_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);
hap_status k_matmul_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_matmul_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);
hap_status k_einsum_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_einsum_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);
hap_status k_conv2d_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_conv2d_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);

/* Column sums of g [m, n] added to db [n], in double, reading g row by row (k_gemm.c). */
hap_status k_add_col_sums(const float *g, int64_t m, int64_t n, float *db, hap_err *err);

/* k_elem.c */
/* Softmax (or log_softmax) of one contiguous row x [len] into y (may be x): float32 exp
 * (kern_math.h), the normaliser summed in double; a row of all -inf gives zeros (-inf). */
void k_softmax_row(const float *x, float *y, int64_t len, bool log_form);
/* Log-sum-exp down the columns of x [rows, cols]: lse[j] (-inf for a column of -inf), with
 * scratch mx [cols] and z [cols]; float32 exp, sums in double. */
void k_lse_columns(const float *x, int64_t rows, int64_t cols, float *mx, double *z, double *lse);
/* dx [rows, cols] += scale exp(x - lse[column]): a softmax down the columns, scaled. */
void k_add_softmax_columns(const float *x, int64_t rows, int64_t cols, const double *lse,
                           double scale, float *dx);
hap_status k_unary_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                       hap_err *err);
hap_status k_unary_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                       const hap_kernel_state *st, hap_err *err);
hap_status k_binary_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_binary_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);
hap_status k_softmax_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                         hap_err *err);
hap_status k_softmax_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                         const hap_kernel_state *st, hap_err *err);
hap_status k_reduce_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_reduce_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);
hap_status k_layout_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err);
hap_status k_layout_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err);
hap_status k_cls_append_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err);
hap_status k_cls_append_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err);

/* k_nn.c */
hap_status k_max_pool2d_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err);
hap_status k_max_pool2d_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err);
hap_status k_avg_pool_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                          hap_err *err);
hap_status k_avg_pool_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                          const hap_kernel_state *st, hap_err *err);
hap_status k_embedding_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                           hap_err *err);
hap_status k_embedding_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                           const hap_kernel_state *st, hap_err *err);
hap_status k_layer_norm_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err);
hap_status k_layer_norm_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err);
hap_status k_loss_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                      hap_err *err);
hap_status k_loss_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                      const hap_kernel_state *st, hap_err *err);

/* k_attn.c */
hap_status k_mha_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                     hap_err *err);
hap_status k_mha_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                     const hap_kernel_state *st, hap_err *err);
hap_status k_top2_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                      hap_err *err);
hap_status k_top2_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                      const hap_kernel_state *st, hap_err *err);

#endif
