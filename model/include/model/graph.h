/* graph.h — the model graph IR: tensors, nodes (an op applied to tensors), the loss and segment
 * marks; a builder that infers shapes through the op table, and a validator. Ownership:
 * hap_graph_create returns an owned graph freed with hap_graph_destroy; every string and array
 * inside it is owned by the graph. Fields are read-only outside graph.c: mutate only through the
 * functions below. Tensor and node ids are dense indices, stable until hap_graph_validate reorders
 * nodes into topological order. */
#ifndef HAP_GRAPH_H
#define HAP_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/ops.h"

typedef enum hap_tensor_kind {
  HAP_TENSOR_INPUT = 0, /* fed per iteration (data, labels) */
  HAP_TENSOR_PARAMETER, /* trainable weight */
  HAP_TENSOR_BUFFER,    /* constant state (positional encoding, masks): no gradient */
  HAP_TENSOR_ACTIVATION /* produced by exactly one node */
} hap_tensor_kind;

const char *hap_tensor_kind_name(hap_tensor_kind k); /* "input", "parameter", ... */
hap_status hap_tensor_kind_parse(const char *s, hap_tensor_kind *out);

typedef struct hap_tensor {
  const char *name;
  hap_tensor_kind kind;
  hap_dtype dtype;
  hap_shape shape;
  int32_t producer;   /* node id, -1 unless an activation */
  bool requires_grad; /* set by hap_graph_validate */
  bool grad_wanted;   /* an input whose gradient is wanted (a pipeline stage's boundary input,
                         model/stage.h): it then requires a gradient like a parameter */
} hap_tensor;

typedef struct hap_node {
  const char *name;
  hap_op op;
  int32_t segment; /* 0-based; non-decreasing along the node order */
  int32_t n_inputs;
  int32_t n_outputs;
  int32_t inputs[HAP_MAX_OP_INPUTS];   /* tensor ids; one tensor may appear twice (x + x) */
  int32_t outputs[HAP_MAX_OP_OUTPUTS]; /* tensor ids */
  hap_attrs attrs;
} hap_node;

typedef struct hap_graph_impl hap_graph_impl;

typedef struct hap_graph {
  const char *name;   /* model name, e.g. "bert-base" */
  const char *source; /* how it was made, e.g. "hap-model bert-base:layers=12"; may be NULL */
  hap_tensor *tensors;
  int32_t n_tensors;
  hap_node *nodes;
  int32_t n_nodes;
  int32_t loss;       /* tensor id, -1 until set */
  int32_t n_segments; /* >= 1 */
  hap_graph_impl *impl;
} hap_graph;

/* NULL on allocation failure. */
hap_graph *hap_graph_create(const char *name);
void hap_graph_destroy(hap_graph *g);
hap_status hap_graph_set_source(hap_graph *g, const char *source);

/* Add a tensor. Names are unique across tensors. Activation tensors are normally created by
 * hap_graph_add_node; adding one here (as a file reader does) leaves it without producer until a
 * node lists it as output. */
hap_status hap_graph_add_tensor(hap_graph *g, const char *name, hap_tensor_kind kind,
                                hap_dtype dtype, const hap_shape *shape, int32_t *id, hap_err *err);

/* Builder: add a node applying `op` to `inputs`; infer its outputs through the op table and create
 * them as activation tensors named `out_names[i]` (NULL: the node name for one output,
 * "<node>.<output name>" for several). `attrs` NULL means all defaults. Output ids go to `outputs`
 * (may be NULL). The node joins the current segment. */
hap_status hap_graph_add_node(hap_graph *g, const char *name, hap_op op, const int32_t *inputs,
                              int32_t n_inputs, const hap_attrs *attrs,
                              const char *const *out_names, int32_t *outputs, hap_err *err);

/* Reader: add a node whose outputs are existing tensors (declared with their shapes). Shapes are
 * checked later by hap_graph_validate. */
hap_status hap_graph_link_node(hap_graph *g, const char *name, hap_op op, const int32_t *inputs,
                               int32_t n_inputs, const int32_t *outputs, int32_t n_outputs,
                               const hap_attrs *attrs, int32_t segment, hap_err *err);

hap_status hap_graph_set_loss(hap_graph *g, int32_t tensor, hap_err *err);

/* Ask for the gradient of input `tensor` (a floating-point input; HAP_EINVAL otherwise). */
hap_status hap_graph_want_grad(hap_graph *g, int32_t tensor, hap_err *err);

/* Start a new segment: nodes added from now on get the next segment id. */
void hap_graph_begin_segment(hap_graph *g);

/* -1 when absent. */
int32_t hap_graph_find_tensor(const hap_graph *g, const char *name);
int32_t hap_graph_find_node(const hap_graph *g, const char *name);

/* Check the whole graph and derive what depends on it (producers, requires_grad, node order).
 * Rejects, naming the node or tensor: arity and attribute errors, dangling or duplicate references,
 * activations without exactly one producer, cycles, declared shapes that differ from inferred
 * ones, non-positive dims, sizes that overflow int64, segment marks out of order, a missing or
 * non-scalar or non-float loss. Nodes are put in a stable topological order. */
hap_status hap_graph_validate(hap_graph *g, hap_err *err);

/* Fill io with the shapes, dtypes and gradient needs of node `n` (graph must be validated). */
void hap_graph_node_io(const hap_graph *g, int32_t n, hap_op_io *io);
/* Cost of node `n` through the op table (graph must be validated). */
void hap_graph_node_cost(const hap_graph *g, int32_t n, hap_op_cost *cost);

/* Bytes of a tensor (numel * dtype size; validated graphs cannot overflow). */
int64_t hap_tensor_bytes(const hap_tensor *t);
int64_t hap_tensor_numel(const hap_tensor *t);

#endif
