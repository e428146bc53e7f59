/* reference.h — the single-device reference run of a whole graph, independent of any plan: what
 * hap-run's --check compares a distributed run against. Every parameter, buffer and input gets
 * init.h's values (whole tensors), every node's forward kernel (kernels/, unsharded) runs in
 * the graph's topological order, the loss gradient is seeded with 1 (the loss is a scalar;
 * nll_loss / cross_entropy already apply their reduction, "sum" or "mean"; S under a policy, see
 * below), and every node's backward runs in reverse order, accumulating into zeroed gradient
 * buffers. Further iterations (hap_reference_update, then hap_reference_iterate) train the same
 * inputs with the policy's optimizer (SGD by default), as hap-run does, so a check can compare
 * several iterations and the updates between them.
 *
 * Dropout: node n's kernels get seed hap_run_node_seed(seed, node name) in forward and backward;
 * the executor passes the same value on every device, so both runs draw the same masks.
 *
 * Training policy (model/policy.h; hap_reference_run_policy): the semantics hap-run implements
 * too, so that --check can compare them. Micro-batches and recomputation do not change the
 * function computed: the reference ignores them and runs the whole batch at once. ZeRO likewise.
 *   1. fp32: as described above; the optimizer is the policy's (kernels/optim.h).
 *   Mixed precision, D = hap_policy_compute_dtype (float16 or bfloat16), stored as float32 values
 *   representable in D (kernels/half.h, "emulated storage"):
 *   2. Every trainable parameter has a float32 master (what the optimizer updates and what
 *      hap_reference_value returns); the kernels read its compute copy round_D(master)
 *      (hap_reference_compute_value). Other float tensors (non-trainable parameters, buffers,
 *      float inputs) hold round_D(initial value).
 *   3. After each node's forward kernel each float output is rounded to D, except the graph's
 *      loss tensor (autocast computes losses in float32).
 *   4. The loss gradient is seeded with S, the loss scaler's scale (kernels/optim.h's
 *      hap_loss_scaler: 2^16 at the start for fp16, halved on overflow, doubled after 2000 good
 *      steps; always 1 for bf16 and fp32).
 *   5. After each node's backward kernel each gradient buffer it accumulated into is rounded to
 *      D, except trainable parameters' gradients under grad_accum=fp32 (kept float32).
 *   6. Update (hap_reference_update, learning rate lr): fp16 only, if any trainable parameter's
 *      gradient holds a non-finite value the step is skipped (masters, optimizer state and step
 *      count unchanged) and the scaler is told of the overflow. Otherwise the step count t grows
 *      by one and each trainable parameter gets hap_optim_step(policy optimizer,
 *      hap_optim_defaults(lr), t, master, gradient, 1/S, m, v), its compute copy becomes
 *      round_D(master), and the scaler is told of a good step. The optimizer state (m, v; as
 *      many float32 buffers as hap_optim_state_buffers says, zero at the start) is per parameter.
 *   The default policy (fp32, sgd) is hap_kernel_sgd's w -= lr g, bit for bit as before policies.
 * Gradients (hap_reference_grad) are as stored, in the units of the loss gradient's seed: scaled
 * by S (hap_reference_loss_scale), rounded to D where rule 5 says so.
 *
 * Memory: whole tensors (every forward value is kept, plus the parameters' gradients, masters and
 * optimizer state), float32; meant for small configurations. Only float32 tensors and int64 /
 * int32 index inputs.
 * Ownership: hap_reference_run returns an owned result freed with hap_reference_destroy. It
 * borrows `g`, which must outlive it and stay unchanged. Returned pointers belong to the result. */
#ifndef HAP_RUN_REFERENCE_H
#define HAP_RUN_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"
#include "model/policy.h"

typedef struct hap_reference hap_reference;

/* The dropout seed of node `node_name` in a run with seed `seed` (a SplitMix64 hash of both). */
uint64_t hap_run_node_seed(uint64_t seed, const char *node_name);

/* Run forward and backward of validated `g` once. HAP_EUNSUPPORTED for dtypes other than the
 * above (naming the tensor), HAP_ENOMEM, or a kernel's error prefixed with the node's name. */
hap_status hap_reference_run(const hap_graph *g, uint64_t seed, hap_reference **out, hap_err *err);
/* The same under training policy `pol` (NULL: the default, which is hap_reference_run). An
 * invalid policy is HAP_EINVAL with hap_policy_check's line. */
hap_status hap_reference_run_policy(const hap_graph *g, uint64_t seed, const hap_train_policy *pol,
                                    hap_reference **out, hap_err *err);
void hap_reference_destroy(hap_reference *ref);

/* One optimizer step on every trainable parameter from the last pass's gradients (rule 6 above;
 * the default policy: w -= lr * dL/dw in float32, hap_kernel_sgd, as hap-run's update task).
 * Forward values of activations are left as they were (they belong to the parameters before the
 * step). */
void hap_reference_update(hap_reference *ref, double lr);

/* Another forward and backward from the current parameter values (same inputs and dropout
 * masks): the loss, gradients and activations are replaced by this pass's. */
hap_status hap_reference_iterate(hap_reference *ref, hap_err *err);

/* Set trainable parameter t's value (its float32 master in mixed precision, whose compute copy
 * becomes round_D(v)) to v (numel float32 elements, copied). The optimizer state, the loss scaler
 * and the step count are left as they are: the next pass and update start from v. HAP_EINVAL when
 * t is not a trainable parameter. */
hap_status hap_reference_set_value(hap_reference *ref, int32_t t, const float *v, hap_err *err);

/* The loss of the last pass (the value of the graph's scalar loss tensor). */
double hap_reference_loss(const hap_reference *ref);

/* The last pass's full gradient (float32, numel elements, row-major) of tensor t: non-NULL for
 * every trainable parameter (kind parameter, requires_grad); NULL for any other tensor. */
const float *hap_reference_grad(const hap_reference *ref, int32_t t);

/* The value of tensor t (every kind; in the tensor's dtype, numel elements): a parameter's after
 * the last update (a trainable one's float32 master in mixed precision), an activation's from
 * the last pass. NULL when t is out of range. */
const void *hap_reference_value(const hap_reference *ref, int32_t t);
/* What the kernels read for tensor t: hap_reference_value, except a trainable parameter's compute
 * copy round_D(master) in mixed precision. NULL when t is out of range. */
const void *hap_reference_compute_value(const hap_reference *ref, int32_t t);

/* The policy the reference trains under (a copy; the default when run without one). */
const hap_train_policy *hap_reference_policy(const hap_reference *ref);
/* S, the loss scale the last pass seeded its loss gradient with (its gradients are scaled by it;
 * 1 except fp16), and the one the next pass will seed (after the last update's verdict). */
double hap_reference_loss_scale(const hap_reference *ref);
double hap_reference_next_loss_scale(const hap_reference *ref);
/* Whether the last hap_reference_update skipped its step (fp16 overflow), and the optimizer steps
 * taken so far (skipped ones not counted). */
bool hap_reference_skipped(const hap_reference *ref);
int64_t hap_reference_steps(const hap_reference *ref);

/* For finite differences: the loss of a forward run in which element `index` (row-major) of the
 * float32 parameter, buffer or input t (the value the kernels read: a compute copy in mixed
 * precision, not rounded again after the change) is increased by `delta` (restored before
 * returning). Only the nodes downstream of t are recomputed, into scratch buffers: values and
 * gradients of `ref` are unchanged. `*applied` (may be NULL) gets the change actually made to
 * the float32 element ((x + delta) - x after rounding). */
hap_status hap_reference_perturbed_loss(hap_reference *ref, int32_t t, int64_t index, double delta,
                                        double *loss, double *applied, hap_err *err);

#endif
