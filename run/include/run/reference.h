/* reference.h — the single-device reference run of a whole graph, independent of any plan: what
 * hap-run's --check compares a distributed run against. Every parameter, buffer and input gets
 * init.h's values (whole tensors), every node's forward kernel (kernels/, unsharded) runs in
 * the graph's topological order, the loss gradient is seeded with 1 (the loss is a scalar;
 * nll_loss / cross_entropy already apply their reduction, "sum" or "mean"), and every node's
 * backward runs in reverse order, accumulating into zeroed gradient buffers. Further iterations
 * (hap_reference_update, then hap_reference_iterate) train the same inputs with SGD, as hap-run
 * does, so a check can compare several iterations and the updates between them.
 *
 * Dropout: node n's kernels get seed hap_run_node_seed(seed, node name) in forward and backward;
 * the executor passes the same value on every device, so both runs draw the same masks.
 *
 * Memory: whole tensors (every forward value is kept, plus the parameters' gradients), float32;
 * meant for small configurations. Only float32 tensors and int64 / int32 index inputs.
 * Ownership: hap_reference_run returns an owned result freed with hap_reference_destroy. It
 * borrows `g`, which must outlive it and stay unchanged. Returned pointers belong to the result. */
#ifndef HAP_RUN_REFERENCE_H
#define HAP_RUN_REFERENCE_H

#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"

typedef struct hap_reference hap_reference;

/* The dropout seed of node `node_name` in a run with seed `seed` (a SplitMix64 hash of both). */
uint64_t hap_run_node_seed(uint64_t seed, const char *node_name);

/* Run forward and backward of validated `g` once. HAP_EUNSUPPORTED for dtypes other than the
 * above (naming the tensor), HAP_ENOMEM, or a kernel's error prefixed with the node's name. */
hap_status hap_reference_run(const hap_graph *g, uint64_t seed, hap_reference **out, hap_err *err);
void hap_reference_destroy(hap_reference *ref);

/* The SGD step w -= lr * dL/dw (float32, hap_kernel_sgd, as hap-run's update task) on every
 * trainable parameter, from the last pass's gradients. Forward values of activations are left
 * as they were (they belong to the parameters before the step). */
void hap_reference_update(hap_reference *ref, double lr);

/* Another forward and backward from the current parameter values (same inputs and dropout
 * masks): the loss, gradients and activations are replaced by this pass's. */
hap_status hap_reference_iterate(hap_reference *ref, hap_err *err);

/* The loss of the last pass (the value of the graph's scalar loss tensor). */
double hap_reference_loss(const hap_reference *ref);

/* The last pass's full gradient (float32, numel elements, row-major) of tensor t: non-NULL for
 * every trainable parameter (kind parameter, requires_grad); NULL for any other tensor. */
const float *hap_reference_grad(const hap_reference *ref, int32_t t);

/* The value of tensor t (every kind; in the tensor's dtype, numel elements): a parameter's after
 * the last update, an activation's from the last pass. NULL when t is out of range. */
const void *hap_reference_value(const hap_reference *ref, int32_t t);

/* For finite differences: the loss of a forward run in which element `index` (row-major) of the
 * float32 parameter, buffer or input t is increased by `delta` (the element is restored before
 * returning). Only the nodes downstream of t are recomputed, into scratch buffers: values and
 * gradients of `ref` are unchanged. `*applied` (may be NULL) gets the change actually made to
 * the float32 element ((x + delta) - x after rounding). */
hap_status hap_reference_perturbed_loss(hap_reference *ref, int32_t t, int64_t index, double delta,
                                        double *loss, double *applied, hap_err *err);

#endif
