/* optim.h — the optimizer step of every policy optimizer (model/policy.h) on float32 values, the
 * one implementation both hap-run's update task and the single-device reference call.
 *
 * Per element i, with g = grad[i] * grad_scale (grad_scale undoes a loss scale; 1 otherwise) and
 * t the 1-based step count:
 *   sgd       w -= lr g                                   (bit for bit hap_kernel_sgd at scale 1)
 *   momentum  m = mu m + g;  w -= lr m                    (PyTorch's SGD, dampening 0)
 *   adam      m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *             w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *   adamw     w -= lr wd w, then adam's step                (PyTorch's AdamW, decoupled decay)
 * Arithmetic per element in double, w, m and v stored as float32. State buffers start at zero. */
#ifndef HAP_KERNELS_OPTIM_H
#define HAP_KERNELS_OPTIM_H

#include <stdint.h>

#include "model/policy.h"

typedef struct hap_optim_hyper {
  double lr;           /* learning rate */
  double momentum;     /* mu: SGD momentum (0.9) */
  double beta1, beta2; /* Adam's moment decay rates (0.9, 0.999) */
  double eps;          /* Adam's denominator term (1e-8) */
  double weight_decay; /* AdamW's decoupled weight decay (0.01; Adam and SGD ignore it) */
} hap_optim_hyper;

/* The defaults above with learning rate lr. */
hap_optim_hyper hap_optim_defaults(double lr);

/* float32 state buffers per parameter element: 0 (sgd), 1 (momentum: m), 2 (adam, adamw: m, v). */
int hap_optim_state_buffers(hap_optimizer o);

/* One step on n elements. m and v are the state buffers the optimizer needs (NULL otherwise).
 * step >= 1 counts the steps taken on these elements, this one included (skipped steps do not
 * count). */
void hap_optim_step(hap_optimizer o, const hap_optim_hyper *h, int64_t step, float *w,
                    const float *grad, double grad_scale, float *m, float *v, int64_t n);

#endif
