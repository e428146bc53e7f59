/* tensor_file.h — named tensors in HDF5, the files that carry a model's numbers between PyTorch
 * and hap-run (docs/import.md):
 *   hap-weights 1.0 (hap-import --weights, read by hap-run --weights): root attributes
 *     format = "hap-weights", version = "1.0"; one dataset at the root per parameter, buffer and
 *     input of the graph, named as its tensor, in its shape, float32 or int64/int32 as it is;
 *   hap-grads 1.0 (hap-run --dump-grads, hap-import --reference): root attributes format =
 *     "hap-grads", version = "1.0"; dataset "loss" (float64 scalar) and group "grad" holding one
 *     float32 dataset per parameter, named and shaped as its tensor.
 * Reads are checked (attributes, presence, class, shape) and fail with one line naming the file,
 * the dataset and what was expected; writes are atomic (a temporary renamed into place).
 * Ownership: hap_weights_read returns an owned set freed with hap_tensor_set_destroy. */
#ifndef HAP_STORE_TENSOR_FILE_H
#define HAP_STORE_TENSOR_FILE_H

#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"

#define HAP_WEIGHTS_FORMAT "hap-weights"
#define HAP_GRADS_FORMAT   "hap-grads"

typedef struct hap_named_tensor {
  const char *name; /* the graph's tensor name (owned by the graph) */
  int32_t tensor;   /* its id in the graph */
  hap_dtype dtype;
  hap_shape shape;
  void *data; /* row-major, numel elements of dtype */
} hap_named_tensor;

typedef struct hap_tensor_set {
  int32_t n;
  hap_named_tensor *t;
} hap_tensor_set;

/* Every parameter, buffer and input of validated graph `g` from hap-weights file `path`: each
 * dataset present with the tensor's shape and dtype (float32 as float32; int64 and int32 inputs
 * as either integer width, converted). The inputs are all there or none (a file of weights
 * alone, as hap-model import --weights writes: the set then has no inputs). Datasets the graph
 * does not name are ignored. */
hap_status hap_weights_read(const char *path, const hap_graph *g, hap_tensor_set **out,
                            hap_err *err);
void hap_tensor_set_destroy(hap_tensor_set *s);

/* Write hap-grads file `path`: `loss` and grads[t] (numel float32 elements) for every trainable
 * parameter t of `g` (grads has g->n_tensors entries; others are ignored and may be NULL). */
hap_status hap_grads_write(const char *path, const hap_graph *g, double loss,
                           const float *const *grads, hap_err *err);

/* Write hap-weights file `path`: values[t] (row-major, the tensor's dtype: float32, int64 or
 * int32) for every tensor t of `g` whose entry is not NULL (parameters, buffers, inputs). */
hap_status hap_weights_write(const char *path, const hap_graph *g, const void *const *values,
                             hap_err *err);

#endif
