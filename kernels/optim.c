/* optim.c — the policy optimizers' step and the loss scaler (optim.h). */
#include "kernels/optim.h"

#include <math.h>

#include "kernels/kernels.h"

hap_optim_hyper hap_optim_defaults(double lr) {
  return (hap_optim_hyper){
      .lr = lr, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
}

int hap_optim_state_buffers(hap_optimizer o) {
  switch (o) {
  case HAP_OPT_MOMENTUM: return 1;
  case HAP_OPT_ADAM:
  case HAP_OPT_ADAMW: return 2;
  default: return 0;
  }
}

static void sgd(const hap_optim_hyper *h, float *w, const float *grad, double grad_scale,
                int64_t n) {
  float lr = (float)h->lr;
  if (grad_scale == 1.0) {
    hap_kernel_sgd(w, grad, lr, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float g = (float)((double)grad[i] * grad_scale);
    w[i] -= lr * g;
  }
}

static void momentum(const hap_optim_hyper *h, float *w, const float *grad, double grad_scale,
                     float *m, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double mi = h->momentum * (double)m[i] + (double)grad[i] * grad_scale;
    w[i] = (float)((double)w[i] - h->lr * mi);
    m[i] = (float)mi;
  }
}

/* Adam, and AdamW when decay != 0 (w is first multiplied by 1 - lr * decay). */
static void adam(const hap_optim_hyper *h, int64_t step, double decay, float *w, const float *grad,
                 double grad_scale, float *m, float *v, int64_t n) {
  double b1 = h->beta1, b2 = h->beta2;
  double c1 = 1 - pow(b1, (double)step), c2 = 1 - pow(b2, (double)step); /* bias corrections */
  double shrink = 1 - h->lr * decay;
  for (int64_t i = 0; i < n; i++) {
    double g = (double)grad[i] * grad_scale;
    double mi = b1 * (double)m[i] + (1 - b1) * g;
    double vi = b2 * (double)v[i] + (1 - b2) * g * g;
    double wi = (double)w[i] * shrink;
    wi -= h->lr * (mi / c1) / (sqrt(vi / c2) + h->eps);
    w[i] = (float)wi;
    m[i] = (float)mi;
    v[i] = (float)vi;
  }
}

void hap_optim_step(hap_optimizer o, const hap_optim_hyper *h, int64_t step, float *w,
                    const float *grad, double grad_scale, float *m, float *v, int64_t n) {
  if (step < 1)
    step = 1;
  switch (o) {
  case HAP_OPT_MOMENTUM: momentum(h, w, grad, grad_scale, m, n); break;
  case HAP_OPT_ADAM: adam(h, step, 0, w, grad, grad_scale, m, v, n); break;
  case HAP_OPT_ADAMW: adam(h, step, h->weight_decay, w, grad, grad_scale, m, v, n); break;
  default: sgd(h, w, grad, grad_scale, n); break;
  }
}

hap_loss_scaler hap_loss_scaler_start(hap_precision p) {
  if (p == HAP_PREC_FP16)
    return (hap_loss_scaler){.scale = HAP_LOSS_SCALE_INIT, .good_steps = 0, .dynamic = true};
  return (hap_loss_scaler){.scale = 1.0, .good_steps = 0, .dynamic = false};
}

void hap_loss_scaler_after(hap_loss_scaler *s, bool overflow) {
  if (!s->dynamic)
    return;
  if (overflow) {
    s->scale = s->scale / 2 < 1 ? 1 : s->scale / 2;
    s->good_steps = 0;
    return;
  }
  if (++s->good_steps >= HAP_LOSS_SCALE_WINDOW) {
    s->scale *= 2;
    s->good_steps = 0;
  }
}
