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
 * Arithmetic per element in double, w, m and v stored as float32 (momentum and Adam update w
 * with the double m before it is stored); sgd alone computes in float32, g = (float)(grad *
 * grad_scale) then w -= (float)lr * g, which at grad_scale 1 is hap_kernel_sgd's expression. State
 * buffers start at zero. */
#ifndef HAP_KERNELS_OPTIM_H
#define HAP_KERNELS_OPTIM_H

#include <stdbool.h>
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

/* ---- dynamic loss scaling (fp16) --------------------------------------------------------- */

/* The loss gradient is seeded with `scale` S so that small gradients survive float16; the update
 * multiplies the gradients by 1/S (grad_scale). fp16 is dynamic: it starts at 2^16; a step whose
 * gradients hold a non-finite value is skipped and halves S (never below 1), and every
 * HAP_LOSS_SCALE_WINDOW consecutive good steps double it (PyTorch's GradScaler without its
 * growth cap). bf16 and fp32 keep S = 1 (bfloat16 has float32's exponent range). */
#define HAP_LOSS_SCALE_INIT   65536.0
#define HAP_LOSS_SCALE_WINDOW 2000

typedef struct hap_loss_scaler {
  double scale;       /* S, a power of two >= 1 */
  int32_t good_steps; /* consecutive steps without overflow since S last changed */
  bool dynamic;       /* false: S stays 1 */
} hap_loss_scaler;

/* fp16: dynamic, S = HAP_LOSS_SCALE_INIT; bf16 and fp32: S = 1, not dynamic. */
hap_loss_scaler hap_loss_scaler_start(hap_precision p);
/* After a step: `overflow` when its gradients held a non-finite value (and it was skipped). */
void hap_loss_scaler_after(hap_loss_scaler *s, bool overflow);

#endif
