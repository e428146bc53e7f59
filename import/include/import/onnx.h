/* onnx.h — ONNX models into hap graphs (hap-model import, docs/import.md): a ModelProto (decoded
 * by protobuf-c code generated at build time from Debian's onnx.proto, libonnx-dev) whose graph
 * has fixed-shape inputs; float initializers used as tensors become parameters (named as in the
 * file: PyTorch's parameter names when torch.onnx.export wrote it), every node is mapped onto
 * hap's ops and built through the graph builder, which infers and checks every shape. The loss is
 * the graph's first output when it is a scalar, else one hap_onnx_options.loss appends.
 * Errors: a file that is not a ModelProto, or a malformed part of one (an initializer whose data
 * does not fit its dims, a symbolic input dim, ...), fails with one line naming the file and the
 * part; unsupported nodes are all collected, one line each in *report ("FILE: node 'NAME' (op
 * 'TYPE'): why"), and fail with HAP_EUNSUPPORTED and a summary naming their op types.
 * Ownership: *out is an owned validated graph (hap_graph_destroy), *report a malloc'd string (may
 * be NULL) the caller frees. */
#ifndef HAP_IMPORT_ONNX_H
#define HAP_IMPORT_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"

typedef enum hap_onnx_loss {
  HAP_ONNX_LOSS_OUTPUT = 0,   /* the output is the (scalar) loss */
  HAP_ONNX_LOSS_MEAN,         /* mean of the output */
  HAP_ONNX_LOSS_SUM,          /* sum of the output */
  HAP_ONNX_LOSS_CROSS_ENTROPY /* cross-entropy of the output ([N, C, ...] logits) against a new
                                 int64 input "target" ([N, ...]), mean over the targets */
} hap_onnx_loss;

/* "output", "mean", "sum", "cross_entropy" -> *out; HAP_EINVAL otherwise. */
hap_status hap_onnx_loss_parse(const char *s, hap_onnx_loss *out);

typedef struct hap_onnx_options {
  hap_onnx_loss loss;
  const char *name; /* the graph's name; NULL: the ONNX graph's, else "onnx" */
  /* comma-separated initializers that are constant state (buffers, no gradient), e.g. PyTorch's
   * registered buffers; every other float initializer read as a tensor is a parameter */
  const char *buffers;
} hap_onnx_options;

/* `len` bytes of an ONNX model, `path` naming it in messages. With `values` (may be NULL):
 * (*values)[t], for each of the graph's tensors t, is a malloc'd copy of the numbers of parameter
 * or buffer t (row-major, in its dtype) where the file holds them as float32, int64 or int32
 * (initializers) or the import computed them (constants made buffers: a Where's mask, a
 * Constant read as a tensor); NULL for the rest. Free with hap_onnx_values_free. */
hap_status hap_onnx_parse(const char *path, const uint8_t *data, size_t len,
                          const hap_onnx_options *o, hap_graph **out, void ***values, char **report,
                          hap_err *err);
/* The same, read from file `path`. */
hap_status hap_onnx_import(const char *path, const hap_onnx_options *o, hap_graph **out,
                           void ***values, char **report, hap_err *err);
/* Frees what hap_onnx_parse put in *values (g: the graph it returned). */
void hap_onnx_values_free(void **values, const hap_graph *g);

#endif
