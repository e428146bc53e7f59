#include "model/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strmap.h"
#include "base/vec.h"

struct hap_graph_impl {
  hap_arena strings;
  hap_strmap tensor_ids;
  hap_strmap node_ids;
  int32_t cap_tensors;
  int32_t cap_nodes;
  int32_t cur_segment;
};

static const char *const kind_names[] = {"input", "parameter", "buffer", "activation"};

const char *hap_tensor_kind_name(hap_tensor_kind k) {
  return (unsigned)k < 4 ? kind_names[k] : "?";
}

hap_status hap_tensor_kind_parse(const char *s, hap_tensor_kind *out) {
  for (int i = 0; i < 4; i++) {
    if (strcmp(s, kind_names[i]) == 0) {
      *out = (hap_tensor_kind)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

hap_graph *hap_graph_create(const char *name) {
  hap_graph *g = calloc(1, sizeof *g);
  if (g == NULL)
    return NULL;
  g->impl = calloc(1, sizeof *g->impl);
  if (g->impl == NULL) {
    free(g);
    return NULL;
  }
  hap_arena_init(&g->impl->strings);
  hap_strmap_init(&g->impl->tensor_ids);
  hap_strmap_init(&g->impl->node_ids);
  g->loss = -1;
  g->n_segments = 1;
  g->name = hap_arena_strdup(&g->impl->strings, name ? name : "");
  if (g->name == NULL) {
    hap_graph_destroy(g);
    return NULL;
  }
  return g;
}

void hap_graph_destroy(hap_graph *g) {
  if (g == NULL)
    return;
  if (g->impl != NULL) {
    hap_arena_free(&g->impl->strings);
    hap_strmap_free(&g->impl->tensor_ids);
    hap_strmap_free(&g->impl->node_ids);
    free(g->impl);
  }
  free(g->tensors);
  free(g->nodes);
  free(g);
}

hap_status hap_graph_set_source(hap_graph *g, const char *source) {
  g->source = source ? hap_arena_strdup(&g->impl->strings, source) : NULL;
  return (source && !g->source) ? HAP_ENOMEM : HAP_OK;
}

int32_t hap_graph_find_tensor(const hap_graph *g, const char *name) {
  return hap_strmap_get(&g->impl->tensor_ids, name);
}

int32_t hap_graph_find_node(const hap_graph *g, const char *name) {
  return hap_strmap_get(&g->impl->node_ids, name);
}

static hap_status check_shape(const hap_shape *s, const char *what, const char *name,
                              hap_err *err) {
  if (s->rank < 0 || s->rank > HAP_MAX_DIMS)
    return hap_err_set(err, HAP_EINVAL, "%s '%s': rank %d, expected 0..%d", what, name, s->rank,
                       HAP_MAX_DIMS);
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] <= 0)
      return hap_err_set(err, HAP_EINVAL, "%s '%s': shape[%d] is %lld, expected a positive size",
                         what, name, i, (long long)s->dims[i]);
  }
  return HAP_OK;
}

static hap_status tensor_bytes_checked(const hap_tensor *t, int64_t *bytes, hap_err *err) {
  int64_t numel;
  if (hap_shape_numel(&t->shape, &numel) != HAP_OK ||
      __builtin_mul_overflow(numel, (int64_t)hap_dtype_size(t->dtype), bytes)) {
    char buf[160];
    return hap_err_set(err, HAP_EOVERFLOW, "tensor '%s': shape %s has more bytes than int64 holds",
                       t->name, hap_shape_str(&t->shape, buf, sizeof buf));
  }
  return HAP_OK;
}

hap_status hap_graph_add_tensor(hap_graph *g, const char *name, hap_tensor_kind kind,
                                hap_dtype dtype, const hap_shape *shape, int32_t *id,
                                hap_err *err) {
  hap_graph_impl *im = g->impl;
  if (name == NULL || name[0] == '\0')
    return hap_err_set(err, HAP_EINVAL, "tensor name is empty");
  if (hap_strmap_get(&im->tensor_ids, name) >= 0)
    return hap_err_set(err, HAP_EINVAL, "tensor '%s' is defined twice", name);
  if ((unsigned)kind > HAP_TENSOR_ACTIVATION || (unsigned)dtype >= HAP_DTYPE_COUNT)
    return hap_err_set(err, HAP_EINVAL, "tensor '%s': bad kind or dtype", name);
  HAP_TRY(check_shape(shape, "tensor", name, err));
  if (g->n_tensors == im->cap_tensors && im->cap_tensors > INT32_MAX / 2)
    return hap_err_set(err, HAP_EOVERFLOW, "too many tensors (limit %d)", INT32_MAX / 2);
  if (HAP_VEC_RESERVE(g->tensors, im->cap_tensors, (int64_t)g->n_tensors + 1, 64) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding tensor '%s'", name);
  hap_tensor *t = &g->tensors[g->n_tensors];
  memset(t, 0, sizeof *t);
  t->name = name;
  t->kind = kind;
  t->dtype = dtype;
  t->shape = *shape;
  t->producer = -1;
  int64_t bytes;
  HAP_TRY(tensor_bytes_checked(t, &bytes, err)); /* before the name is registered */
  t->name = hap_arena_strdup(&im->strings, name);
  if (t->name == NULL || hap_strmap_put(&im->tensor_ids, t->name, g->n_tensors) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding tensor '%s'", name);
  if (id)
    *id = g->n_tensors;
  g->n_tensors++;
  return HAP_OK;
}

static hap_status push_node(hap_graph *g, const char *name, hap_op op, const hap_attrs *attrs,
                            int32_t segment, int32_t *id, hap_err *err) {
  hap_graph_impl *im = g->impl;
  if (name == NULL || name[0] == '\0')
    return hap_err_set(err, HAP_EINVAL, "node name is empty");
  if (hap_strmap_get(&im->node_ids, name) >= 0)
    return hap_err_set(err, HAP_EINVAL, "node '%s' is defined twice", name);
  if ((unsigned)op >= HAP_OP_COUNT)
    return hap_err_set(err, HAP_EINVAL, "node '%s': unknown op", name);
  if (g->n_nodes == im->cap_nodes && im->cap_nodes > INT32_MAX / 2)
    return hap_err_set(err, HAP_EOVERFLOW, "too many nodes (limit %d)", INT32_MAX / 2);
  if (HAP_VEC_RESERVE(g->nodes, im->cap_nodes, (int64_t)g->n_nodes + 1, 64) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding node '%s'", name);
  hap_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->name = hap_arena_strdup(&im->strings, name);
  if (n->name == NULL || hap_strmap_put(&im->node_ids, n->name, g->n_nodes) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory adding node '%s'", name);
  n->op = op;
  n->segment = segment;
  if (attrs)
    n->attrs = *attrs;
  else
    hap_attrs_init(&n->attrs, op);
  *id = g->n_nodes;
  g->n_nodes++;
  if (segment >= g->n_segments)
    g->n_segments = segment + 1;
  return HAP_OK;
}

static hap_status check_inputs(const hap_graph *g, const char *node, const int32_t *inputs,
                               int32_t n_inputs, hap_err *err) {
  if (n_inputs < 0 || n_inputs > HAP_MAX_OP_INPUTS)
    return hap_err_set(err, HAP_EINVAL, "node '%s': %d inputs, at most %d allowed", node, n_inputs,
                       HAP_MAX_OP_INPUTS);
  for (int i = 0; i < n_inputs; i++) {
    if (inputs[i] < 0 || inputs[i] >= g->n_tensors)
      return hap_err_set(err, HAP_EINVAL, "node '%s': input %d refers to no tensor", node, i);
  }
  return HAP_OK;
}

hap_status hap_graph_add_node(hap_graph *g, const char *name, hap_op op, const int32_t *inputs,
                              int32_t n_inputs, const hap_attrs *attrs,
                              const char *const *out_names, int32_t *outputs, hap_err *err) {
  if ((unsigned)op >= HAP_OP_COUNT)
    return hap_err_set(err, HAP_EINVAL, "node '%s': unknown op", name ? name : "");
  HAP_TRY(check_inputs(g, name ? name : "", inputs, n_inputs, err));
  hap_attrs defaults;
  if (attrs == NULL) {
    hap_attrs_init(&defaults, op);
    attrs = &defaults;
  }
  hap_op_io io;
  memset(&io, 0, sizeof io);
  io.attrs = attrs;
  io.n_in = n_inputs;
  for (int i = 0; i < n_inputs; i++) {
    io.in[i] = g->tensors[inputs[i]].shape;
    io.in_dtype[i] = g->tensors[inputs[i]].dtype;
  }
  hap_status st = hap_op_infer(op, &io, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "node '%s'", name ? name : "");
    return st;
  }
  const hap_op_def *def = hap_op_get(op);
  /* Check every output name first, so a failure never leaves a half-made node behind. */
  char names[HAP_MAX_OP_OUTPUTS][512];
  for (int o = 0; o < io.n_out; o++) {
    if (out_names && out_names[o])
      snprintf(names[o], sizeof names[o], "%s", out_names[o]);
    else if (io.n_out == 1)
      snprintf(names[o], sizeof names[o], "%s", name ? name : "");
    else
      snprintf(names[o], sizeof names[o], "%s.%s", name ? name : "", def->out_names[o]);
    if (names[o][0] == '\0' || hap_graph_find_tensor(g, names[o]) >= 0 ||
        (o == 1 && strcmp(names[0], names[1]) == 0))
      return hap_err_set(err, HAP_EINVAL, "node '%s': output tensor name '%s' is empty or taken",
                         name ? name : "", names[o]);
  }
  int32_t id;
  HAP_TRY(push_node(g, name, op, attrs, g->impl->cur_segment, &id, err));
  hap_node *n = &g->nodes[id];
  n->n_inputs = n_inputs;
  memcpy(n->inputs, inputs, (size_t)n_inputs * sizeof *inputs);
  n->n_outputs = io.n_out;
  for (int o = 0; o < io.n_out; o++) {
    const char *oname = names[o];
    int32_t tid;
    HAP_TRY(hap_graph_add_tensor(g, oname, HAP_TENSOR_ACTIVATION, io.out_dtype[o], &io.out[o], &tid,
                                 err));
    g->tensors[tid].producer = id;
    n = &g->nodes[id];
    n->outputs[o] = tid;
    if (outputs)
      outputs[o] = tid;
  }
  return HAP_OK;
}

hap_status hap_graph_link_node(hap_graph *g, const char *name, hap_op op, const int32_t *inputs,
                               int32_t n_inputs, const int32_t *outputs, int32_t n_outputs,
                               const hap_attrs *attrs, int32_t segment, hap_err *err) {
  if (name == NULL)
    name = "";
  HAP_TRY(check_inputs(g, name, inputs, n_inputs, err));
  if (segment == INT32_MAX)
    return hap_err_set(err, HAP_EINVAL, "node '%s': segment %d is too large", name, segment);
  if (n_outputs < 0 || n_outputs > HAP_MAX_OP_OUTPUTS)
    return hap_err_set(err, HAP_EINVAL, "node '%s': %d outputs, at most %d allowed", name,
                       n_outputs, HAP_MAX_OP_OUTPUTS);
  if (segment < 0)
    return hap_err_set(err, HAP_EINVAL, "node '%s': segment %d, expected >= 0", name, segment);
  for (int o = 0; o < n_outputs; o++) {
    if (outputs[o] < 0 || outputs[o] >= g->n_tensors)
      return hap_err_set(err, HAP_EINVAL, "node '%s': output %d refers to no tensor", name, o);
  }
  int32_t id;
  HAP_TRY(push_node(g, name, op, attrs, segment, &id, err));
  hap_node *n = &g->nodes[id];
  n->n_inputs = n_inputs;
  memcpy(n->inputs, inputs, (size_t)n_inputs * sizeof *inputs);
  n->n_outputs = n_outputs;
  memcpy(n->outputs, outputs, (size_t)n_outputs * sizeof *outputs);
  if (segment >= g->impl->cur_segment)
    g->impl->cur_segment = segment;
  return HAP_OK;
}

hap_status hap_graph_set_loss(hap_graph *g, int32_t tensor, hap_err *err) {
  if (tensor < 0 || tensor >= g->n_tensors)
    return hap_err_set(err, HAP_EINVAL, "loss refers to no tensor");
  g->loss = tensor;
  return HAP_OK;
}

hap_status hap_graph_want_grad(hap_graph *g, int32_t tensor, hap_err *err) {
  if (tensor < 0 || tensor >= g->n_tensors)
    return hap_err_set(err, HAP_EINVAL, "a wanted gradient refers to no tensor");
  hap_tensor *t = &g->tensors[tensor];
  if (t->kind != HAP_TENSOR_INPUT || !hap_dtype_is_float(t->dtype))
    return hap_err_set(err, HAP_EINVAL,
                       "tensor '%s' is a %s %s: only a floating-point input can want a gradient",
                       t->name, hap_dtype_name(t->dtype), hap_tensor_kind_name(t->kind));
  t->grad_wanted = true;
  return HAP_OK;
}

void hap_graph_begin_segment(hap_graph *g) {
  g->impl->cur_segment++;
  g->n_segments = g->impl->cur_segment + 1;
}

/* ---- validation ---------------------------------------------------------------------------- */

static const char *node_label(const hap_graph *g, int32_t n, char *buf, size_t len) {
  snprintf(buf, len, "nodes[%d] '%s' (%s)", n, g->nodes[n].name, hap_op_name(g->nodes[n].op));
  return buf;
}

/* Assign producers; reject outputs that are not activations or produced twice, and activations
 * nobody produces. */
static hap_status link_producers(hap_graph *g, hap_err *err) {
  char lbl[256];
  for (int32_t t = 0; t < g->n_tensors; t++)
    g->tensors[t].producer = -1;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    for (int o = 0; o < node->n_outputs; o++) {
      hap_tensor *t = &g->tensors[node->outputs[o]];
      if (t->kind != HAP_TENSOR_ACTIVATION)
        return hap_err_set(err, HAP_EINVAL, "%s: output '%s' is a %s, expected an activation",
                           node_label(g, n, lbl, sizeof lbl), t->name,
                           hap_tensor_kind_name(t->kind));
      if (t->producer >= 0)
        return hap_err_set(err, HAP_EINVAL, "%s: output '%s' is already produced by nodes[%d] '%s'",
                           node_label(g, n, lbl, sizeof lbl), t->name, t->producer,
                           g->nodes[t->producer].name);
      t->producer = n;
    }
  }
  for (int32_t t = 0; t < g->n_tensors; t++) {
    if (g->tensors[t].kind == HAP_TENSOR_ACTIVATION && g->tensors[t].producer < 0)
      return hap_err_set(err, HAP_EINVAL, "tensor '%s' is an activation that no node produces",
                         g->tensors[t].name);
  }
  return HAP_OK;
}

/* Describe a cycle among the nodes left unsorted by Kahn's algorithm (remaining[n] != 0). */
static hap_status report_cycle(const hap_graph *g, const int32_t *remaining, hap_err *err) {
  int32_t start = -1;
  for (int32_t n = 0; n < g->n_nodes && start < 0; n++)
    if (remaining[n])
      start = n;
  /* Walk backwards through unsorted producers until a node repeats. */
  int32_t *seen = calloc((size_t)g->n_nodes, sizeof *seen);
  if (seen == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory");
  int32_t n = start;
  int32_t step = 1;
  while (!seen[n]) {
    seen[n] = step++;
    const hap_node *node = &g->nodes[n];
    int32_t next = -1;
    for (int i = 0; i < node->n_inputs && next < 0; i++) {
      int32_t p = g->tensors[node->inputs[i]].producer;
      if (p >= 0 && remaining[p])
        next = p;
    }
    if (next < 0)
      break;
    n = next;
  }
  free(seen);
  char lbl[256];
  return hap_err_set(err, HAP_EINVAL, "%s: is part of a cycle (its inputs depend on its outputs)",
                     node_label(g, n, lbl, sizeof lbl));
}

/* Reorder nodes into a stable topological order (lowest index first among ready nodes). */
static hap_status sort_topologically(hap_graph *g, hap_err *err) {
  bool ordered = true;
  for (int32_t n = 0; n < g->n_nodes && ordered; n++) {
    const hap_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (g->tensors[node->inputs[i]].producer >= n)
        ordered = false;
  }
  if (ordered)
    return HAP_OK;

  int32_t nn = g->n_nodes;
  int32_t *indeg = calloc((size_t)nn, sizeof *indeg);
  int32_t *order = malloc((size_t)(nn ? nn : 1) * sizeof *order);
  hap_node *sorted = malloc((size_t)(nn ? nn : 1) * sizeof *sorted);
  int32_t *heap = malloc((size_t)(nn ? nn : 1) * sizeof *heap);
  /* consumers in CSR form */
  int32_t *cstart = calloc((size_t)nn + 1, sizeof *cstart);
  int32_t total = 0;
  for (int32_t n = 0; n < nn; n++)
    total += g->nodes[n].n_inputs;
  int32_t *cons = malloc((size_t)(total ? total : 1) * sizeof *cons);
  hap_status st = HAP_OK;
  if (!indeg || !order || !sorted || !heap || !cstart || !cons) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory sorting nodes");
    goto out;
  }
  for (int32_t n = 0; n < nn; n++) {
    for (int i = 0; i < g->nodes[n].n_inputs; i++) {
      int32_t p = g->tensors[g->nodes[n].inputs[i]].producer;
      if (p >= 0) {
        indeg[n]++;
        cstart[p + 1]++;
      }
    }
  }
  for (int32_t n = 0; n < nn; n++)
    cstart[n + 1] += cstart[n];
  {
    int32_t *fill = calloc((size_t)nn, sizeof *fill);
    if (fill == NULL) {
      st = hap_err_set(err, HAP_ENOMEM, "out of memory sorting nodes");
      goto out;
    }
    for (int32_t n = 0; n < nn; n++)
      for (int i = 0; i < g->nodes[n].n_inputs; i++) {
        int32_t p = g->tensors[g->nodes[n].inputs[i]].producer;
        if (p >= 0)
          cons[cstart[p] + fill[p]++] = n;
      }
    free(fill);
  }
  /* Kahn with a min-heap on node index for a stable order. */
  int32_t hn = 0, done = 0;
  for (int32_t n = 0; n < nn; n++) {
    if (indeg[n] == 0) {
      heap[hn++] = n; /* pushed in increasing order: already a valid min-heap */
    }
  }
  while (hn > 0) {
    int32_t n = heap[0];
    heap[0] = heap[--hn];
    for (int32_t i = 0;;) { /* sift down */
      int32_t l = 2 * i + 1, r = l + 1, m = i;
      if (l < hn && heap[l] < heap[m])
        m = l;
      if (r < hn && heap[r] < heap[m])
        m = r;
      if (m == i)
        break;
      int32_t tmp = heap[i];
      heap[i] = heap[m];
      heap[m] = tmp;
      i = m;
    }
    order[done++] = n;
    for (int32_t k = cstart[n]; k < cstart[n + 1]; k++) {
      int32_t c = cons[k];
      if (--indeg[c] == 0) {
        int32_t i = hn++;
        heap[i] = c;
        while (i > 0 && heap[(i - 1) / 2] > heap[i]) { /* sift up */
          int32_t p = (i - 1) / 2, tmp = heap[p];
          heap[p] = heap[i];
          heap[i] = tmp;
          i = p;
        }
      }
    }
  }
  if (done < nn) {
    for (int32_t n = 0; n < nn; n++)
      indeg[n] = indeg[n] > 0;
    st = report_cycle(g, indeg, err);
    goto out;
  }
  for (int32_t i = 0; i < nn; i++)
    sorted[i] = g->nodes[order[i]];
  memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
  for (int32_t i = 0; i < nn; i++) {
    hap_strmap_put(&g->impl->node_ids, g->nodes[i].name, i); /* key exists: cannot fail */
    for (int o = 0; o < g->nodes[i].n_outputs; o++)
      g->tensors[g->nodes[i].outputs[o]].producer = i;
  }
out:
  free(indeg);
  free(order);
  free(sorted);
  free(heap);
  free(cstart);
  free(cons);
  return st;
}

void hap_graph_node_io(const hap_graph *g, int32_t n, hap_op_io *io) {
  const hap_node *node = &g->nodes[n];
  memset(io, 0, sizeof *io);
  io->attrs = &node->attrs;
  io->n_in = node->n_inputs;
  for (int i = 0; i < node->n_inputs; i++) {
    const hap_tensor *t = &g->tensors[node->inputs[i]];
    io->in[i] = t->shape;
    io->in_dtype[i] = t->dtype;
    io->in_grad[i] = t->requires_grad;
  }
  io->n_out = node->n_outputs;
  for (int o = 0; o < node->n_outputs; o++) {
    io->out[o] = g->tensors[node->outputs[o]].shape;
    io->out_dtype[o] = g->tensors[node->outputs[o]].dtype;
  }
}

void hap_graph_node_cost(const hap_graph *g, int32_t n, hap_op_cost *cost) {
  hap_op_io io;
  hap_graph_node_io(g, n, &io);
  hap_op_cost_of(g->nodes[n].op, &io, cost);
}

/* Infer each node's outputs and compare with the declared tensors. */
static hap_status check_node_shapes(hap_graph *g, int32_t n, hap_err *err) {
  const hap_node *node = &g->nodes[n];
  const hap_op_def *def = hap_op_get(node->op);
  char lbl[256];
  hap_op_io io;
  memset(&io, 0, sizeof io);
  io.attrs = &node->attrs;
  io.n_in = node->n_inputs;
  for (int i = 0; i < node->n_inputs; i++) {
    io.in[i] = g->tensors[node->inputs[i]].shape;
    io.in_dtype[i] = g->tensors[node->inputs[i]].dtype;
  }
  hap_status st = hap_op_infer(node->op, &io, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "%s", node_label(g, n, lbl, sizeof lbl));
    return st;
  }
  if (io.n_out != node->n_outputs)
    return hap_err_set(err, HAP_EINVAL, "%s: has %d outputs, expected %d",
                       node_label(g, n, lbl, sizeof lbl), node->n_outputs, def->n_out);
  for (int o = 0; o < io.n_out; o++) {
    const hap_tensor *t = &g->tensors[node->outputs[o]];
    char want[160], got[160];
    if (!hap_shape_eq(&t->shape, &io.out[o]))
      return hap_err_set(
          err, HAP_EINVAL, "%s: output '%s' is declared with shape %s, but the inputs give %s",
          node_label(g, n, lbl, sizeof lbl), t->name, hap_shape_str(&t->shape, got, sizeof got),
          hap_shape_str(&io.out[o], want, sizeof want));
    if (t->dtype != io.out_dtype[o])
      return hap_err_set(err, HAP_EINVAL, "%s: output '%s' is declared %s, but the op gives %s",
                         node_label(g, n, lbl, sizeof lbl), t->name, hap_dtype_name(t->dtype),
                         hap_dtype_name(io.out_dtype[o]));
  }
  return HAP_OK;
}

hap_status hap_graph_validate(hap_graph *g, hap_err *err) {
  char lbl[256];
  for (int32_t t = 0; t < g->n_tensors; t++) {
    int64_t bytes;
    HAP_TRY(check_shape(&g->tensors[t].shape, "tensor", g->tensors[t].name, err));
    HAP_TRY(tensor_bytes_checked(&g->tensors[t], &bytes, err));
  }
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    for (int o = 0; o < node->n_outputs; o++)
      for (int p = 0; p < o; p++)
        if (node->outputs[o] == node->outputs[p])
          return hap_err_set(err, HAP_EINVAL, "%s: lists output '%s' twice",
                             node_label(g, n, lbl, sizeof lbl), g->tensors[node->outputs[o]].name);
  }
  HAP_TRY(link_producers(g, err));
  /* Shapes do not depend on the order: check them while node ids are still the caller's. */
  for (int32_t n = 0; n < g->n_nodes; n++)
    HAP_TRY(check_node_shapes(g, n, err));
  HAP_TRY(sort_topologically(g, err));

  int32_t prev_segment = 0;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    if (node->segment < prev_segment)
      return hap_err_set(err, HAP_EINVAL,
                         "%s: segment %d comes after segment %d; segments must be contiguous "
                         "runs in execution order",
                         node_label(g, n, lbl, sizeof lbl), node->segment, prev_segment);
    prev_segment = node->segment;
  }
  g->n_segments = prev_segment + 1;

  /* Gradient flow: parameters (and inputs whose gradient is wanted) need gradients, and so does
   * every float activation computed from something that does. Nodes are in topological order, so
   * one pass suffices. */
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    bool leaf =
        tn->kind == HAP_TENSOR_PARAMETER || (tn->kind == HAP_TENSOR_INPUT && tn->grad_wanted);
    g->tensors[t].requires_grad = leaf && hap_dtype_is_float(tn->dtype);
  }
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    bool any = false;
    for (int i = 0; i < node->n_inputs; i++)
      any = any || g->tensors[node->inputs[i]].requires_grad;
    for (int o = 0; o < node->n_outputs; o++) {
      hap_tensor *t = &g->tensors[node->outputs[o]];
      t->requires_grad = any && hap_dtype_is_float(t->dtype);
    }
  }

  if (g->loss < 0)
    return hap_err_set(err, HAP_EINVAL, "the graph has no loss tensor");
  const hap_tensor *loss = &g->tensors[g->loss];
  if (loss->kind != HAP_TENSOR_ACTIVATION)
    return hap_err_set(err, HAP_EINVAL, "loss '%s' is a %s, expected an activation", loss->name,
                       hap_tensor_kind_name(loss->kind));
  if (loss->shape.rank != 0)
    return hap_err_set(err, HAP_EINVAL, "loss '%s' has rank %d, expected a scalar (rank 0)",
                       loss->name, loss->shape.rank);
  if (!hap_dtype_is_float(loss->dtype))
    return hap_err_set(err, HAP_EINVAL, "loss '%s' is %s, expected a floating-point type",
                       loss->name, hap_dtype_name(loss->dtype));
  if (!loss->requires_grad)
    return hap_err_set(err, HAP_EINVAL, "loss '%s' does not depend on any parameter", loss->name);
  return HAP_OK;
}

int64_t hap_tensor_numel(const hap_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->shape.rank; i++)
    n *= t->shape.dims[i];
  return n;
}

int64_t hap_tensor_bytes(const hap_tensor *t) {
  return hap_tensor_numel(t) * hap_dtype_size(t->dtype);
}
