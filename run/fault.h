/* fault.h — deliberate faults for tests of hap-run --check (never for real runs): the environment
 * variable HAP_FAULT makes the runner corrupt one thing every iteration, so a test can prove that
 * the check reports it. Syntax: KIND[,rank=R][,tensor=NAME]
 *   nan-loss         rank R's loss value becomes NaN after the forward (default rank 0)
 *   nan-grad         element 0 of parameter NAME's gradient on rank R becomes NaN before the update
 *   grad-error       parameter NAME's gradient on rank R is scaled by 1 + 1e-3 before the update
 *   drift            parameter NAME's value on rank R is scaled by 1 + 1e-3 (plus 1e-6) after the
 *                    update: that rank's replica drifts from the others
 *   skip-all-reduce  every rank skips the all-reduce that sums NAME's gradient (storage sfb: the
 *                    all-gather of its linear node's output gradient, which then arrives as zeros)
 *   bad-update       NAME's update uses twice the learning rate (on rank R; default every rank)
 *   skip-recompute   every rank skips the recomputation of what the policy's recompute dropped
 *                    (whose values are NaN by then; kernel state is kept): a plan without
 *                    recomputation is refused
 *   skip-tied-sum    pipelined plans: every rank skips summing the gradients of a parameter used
 *                    by several stages (GPT's tied embedding) over those stages
 * NAME defaults to the first trainable parameter (skip-all-reduce: the first whose gradient is
 * all-reduced); R to 0. Ranks are world ranks. Ownership: plain values. */
#ifndef HAP_RUN_FAULT_H
#define HAP_RUN_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"

typedef enum hap_fault_kind {
  HAP_FAULT_NONE = 0,
  HAP_FAULT_NAN_LOSS,
  HAP_FAULT_NAN_GRAD,
  HAP_FAULT_GRAD_ERROR,
  HAP_FAULT_DRIFT,
  HAP_FAULT_SKIP_ALL_REDUCE,
  HAP_FAULT_BAD_UPDATE,
  HAP_FAULT_SKIP_RECOMPUTE,
  HAP_FAULT_SKIP_TIED_SUM,
  HAP_FAULT_KIND_COUNT
} hap_fault_kind;

typedef struct hap_fault {
  hap_fault_kind kind;
  int32_t rank;   /* world rank it applies to; -1 every rank */
  int32_t tensor; /* parameter id; -1 not yet chosen (the caller picks the default) */
} hap_fault;

/* Parse `text` (NULL or "": no fault) against graph g and `world` ranks. A bad value is one line
 * naming HAP_FAULT, the part and the choices (HAP_EINVAL). */
hap_status hap_fault_parse(const char *text, const hap_graph *g, int32_t world, hap_fault *out,
                           hap_err *err);

const char *hap_fault_kind_name(hap_fault_kind k);

/* Whether fault f applies on world rank `rank` to tensor t. */
bool hap_fault_hits(const hap_fault *f, int32_t rank, int32_t t);

/* The injections, each a no-op unless f is of that kind and hits (rank, t). */
void hap_fault_loss(const hap_fault *f, int32_t rank, float *loss);
void hap_fault_gradient(const hap_fault *f, int32_t rank, int32_t t, float *grad, int64_t n);
void hap_fault_value(const hap_fault *f, int32_t rank, int32_t t, float *value, int64_t n);
/* The learning rate tensor t's update uses on `rank`. */
double hap_fault_lr(const hap_fault *f, int32_t rank, int32_t t, double lr);

#endif
