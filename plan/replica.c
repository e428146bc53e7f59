/* replica.c — data-parallel variants, the per-replica graph and one host's cluster (replica.h). */
#include "plan/replica.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hap_graph_state_tensors(const hap_graph *g, bool *state) {
  for (int32_t t = 0; t < g->n_tensors; t++)
    state[t] =
        g->tensors[t].kind == HAP_TENSOR_PARAMETER || g->tensors[t].kind == HAP_TENSOR_BUFFER;
  for (int32_t k = 0; k < g->n_nodes; k++) {
    const hap_node *n = &g->nodes[k];
    bool from_state = n->n_inputs > 0;
    for (int i = 0; i < n->n_inputs; i++)
      from_state = from_state && state[n->inputs[i]];
    for (int o = 0; o < n->n_outputs; o++)
      state[n->outputs[o]] = from_state;
  }
}

bool hap_variant_is_data_parallel(const hap_graph *g, int32_t k, const hap_variant *v,
                                  const bool *state) {
  const hap_node *node = &g->nodes[k];
  bool all_state = true;
  for (int i = 0; i < node->n_inputs; i++)
    all_state = all_state && state[node->inputs[i]];
  if (all_state) {
    for (int i = 0; i < node->n_inputs; i++)
      if (v->in[i] != HAP_LAYOUT_IDENTITY)
        return false;
    for (int o = 0; o < node->n_outputs; o++)
      if (v->out[o] != HAP_LAYOUT_IDENTITY)
        return false;
    return true;
  }
  for (int i = 0; i < node->n_inputs; i++) {
    const hap_tensor *t = &g->tensors[node->inputs[i]];
    bool st = state[node->inputs[i]];
    if (st && v->in[i] != HAP_LAYOUT_IDENTITY)
      return false;
    if (!st && v->in[i] != 0 && v->in[i] != HAP_LAYOUT_IDENTITY)
      return false;
    if (!st && v->in[i] == HAP_LAYOUT_IDENTITY && t->shape.rank > 0)
      return false; /* data-parallel ops never see a whole activation */
  }
  for (int o = 0; o < node->n_outputs; o++) {
    const hap_tensor *t = &g->tensors[node->outputs[o]];
    bool scalar_loss = t->shape.rank == 0 && v->out[o] == HAP_LAYOUT_REDUCE;
    if (v->out[o] != 0 && !scalar_loss)
      return false;
  }
  return true;
}

static bool same_shape(const hap_shape *a, const hap_shape *b) {
  if (a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d])
      return false;
  return true;
}

/* Node k's first data-parallel variant into *v (vs: scratch); false when it has none. */
static bool first_dp_variant(const hap_graph *g, int32_t k, const bool *state,
                             const hap_op_io *full, hap_variant *vs, hap_variant *v) {
  int nv = hap_op_variants(g->nodes[k].op, full, vs, HAP_MAX_VARIANTS);
  for (int i = 0; i < nv; i++)
    if (hap_variant_is_data_parallel(g, k, &vs[i], state)) {
      *v = vs[i];
      return true;
    }
  return false;
}

hap_status hap_graph_batch_mean(const hap_graph *g, bool *loss_mean, hap_err *err) {
  *loss_mean = false;
  bool *state = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *state);
  hap_variant *vs = malloc(HAP_MAX_VARIANTS * sizeof *vs);
  hap_status st = state && vs ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "out of memory");
  if (st == HAP_OK)
    hap_graph_state_tensors(g, state);
  for (int32_t k = 0; k < g->n_nodes && st == HAP_OK; k++) {
    hap_op_io full;
    hap_variant v;
    hap_graph_node_io(g, k, &full);
    if (!first_dp_variant(g, k, state, &full, vs, &v) || !(v.flags & HAP_VARIANT_GLOBAL_COUNT))
      continue;
    const hap_node *n = &g->nodes[k];
    if (n->n_outputs == 1 && n->outputs[0] == g->loss)
      *loss_mean = true;
    else
      st = hap_err_set(err, HAP_EUNSUPPORTED,
                       "node '%s' (%s) averages over the batch: the replicas of a 2-D plan "
                       "cannot compute it separately",
                       n->name, hap_op_name(n->op));
  }
  free(state);
  free(vs);
  return st;
}

/* Local shapes and attributes of every node of one replica: shapes[t], attrs[k]. */
static hap_status split_shapes(const hap_graph *g, int32_t replicas, const bool *state,
                               hap_shape *shapes, bool *known, hap_attrs *attrs, hap_err *err) {
  for (int32_t t = 0; t < g->n_tensors; t++) {
    shapes[t] = g->tensors[t].shape;
    known[t] = g->tensors[t].kind != HAP_TENSOR_INPUT; /* inputs: set by their first consumer */
  }
  for (int32_t k = 0; k < g->n_nodes; k++) {
    const hap_node *node = &g->nodes[k];
    hap_op_io full, local;
    memset(&local, 0, sizeof local);
    hap_graph_node_io(g, k, &full);
    hap_variant vs[HAP_MAX_VARIANTS], dp;
    if (!first_dp_variant(g, k, state, &full, vs, &dp))
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "node '%s' (%s) has no data-parallel variant: its batch cannot be split "
                         "over replicas",
                         node->name, hap_op_name(node->op));
    int64_t extent = hap_variant_extent(&full, &dp);
    if (extent > 0 && extent % replicas != 0)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "node '%s' (%s): its batch extent %lld is not a multiple of %d replicas",
                         node->name, hap_op_name(node->op), (long long)extent, replicas);
    if (extent > 0) {
      HAP_TRY(hap_op_local_io(node->op, &full, &dp, extent / replicas, &attrs[k], &local, err));
    } else {
      attrs[k] = node->attrs;
      local = full;
    }
    for (int i = 0; i < node->n_inputs; i++) {
      int32_t t = node->inputs[i];
      if (!known[t]) {
        shapes[t] = local.in[i];
        known[t] = true;
      } else if (!same_shape(&shapes[t], &local.in[i])) {
        return hap_err_set(err, HAP_EUNSUPPORTED,
                           "node '%s' (%s): input '%s' splits its batch unlike its producer",
                           node->name, hap_op_name(node->op), g->tensors[t].name);
      }
    }
    for (int o = 0; o < node->n_outputs; o++)
      shapes[node->outputs[o]] = local.out[o];
  }
  return HAP_OK;
}

static hap_status build_split(const hap_graph *g, int32_t replicas, const hap_shape *shapes,
                              const hap_attrs *attrs, hap_graph **out, hap_err *err) {
  hap_graph *r = hap_graph_create(g->name);
  if (r == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory splitting the batch");
  char source[96];
  snprintf(source, sizeof source, "one of %d replicas (batch split evenly)", replicas);
  hap_status st = hap_graph_set_source(r, source);
  for (int32_t t = 0; t < g->n_tensors && st == HAP_OK; t++) {
    int32_t id;
    const hap_tensor *ten = &g->tensors[t];
    st = hap_graph_add_tensor(r, ten->name, ten->kind, ten->dtype, &shapes[t], &id, err);
    if (st == HAP_OK && ten->grad_wanted)
      st = hap_graph_want_grad(r, id, err);
  }
  for (int32_t k = 0; k < g->n_nodes && st == HAP_OK; k++) {
    const hap_node *n = &g->nodes[k];
    st = hap_graph_link_node(r, n->name, n->op, n->inputs, n->n_inputs, n->outputs, n->n_outputs,
                             &attrs[k], n->segment, err);
  }
  if (st == HAP_OK)
    st = hap_graph_set_loss(r, g->loss, err);
  if (st == HAP_OK)
    st = hap_graph_validate(r, err);
  for (int32_t k = 0; k < g->n_nodes && st == HAP_OK; k++)
    if (strcmp(r->nodes[k].name, g->nodes[k].name) != 0)
      st =
          hap_err_set(err, HAP_EINVAL, "splitting the batch reordered node '%s'", g->nodes[k].name);
  if (st != HAP_OK) {
    if (err->status == HAP_OK)
      hap_err_set(err, st, "out of memory splitting the batch");
    hap_graph_destroy(r);
    return st;
  }
  *out = r;
  return HAP_OK;
}

hap_status hap_graph_split_batch(const hap_graph *g, int32_t replicas, hap_graph **out,
                                 hap_err *err) {
  *out = NULL;
  if (replicas < 1)
    return hap_err_set(err, HAP_EINVAL, "replicas %d, expected >= 1", replicas);
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  size_t nn = (size_t)(g->n_nodes ? g->n_nodes : 1);
  bool *state = malloc(nt * sizeof *state);
  bool *known = calloc(nt, sizeof *known);
  hap_shape *shapes = calloc(nt, sizeof *shapes);
  hap_attrs *attrs = malloc(nn * sizeof *attrs);
  hap_status st;
  if (!state || !known || !shapes || !attrs) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory splitting the batch");
  } else {
    hap_graph_state_tensors(g, state);
    st = split_shapes(g, replicas, state, shapes, known, attrs, err);
    if (st == HAP_OK)
      st = build_split(g, replicas, shapes, attrs, out, err);
  }
  free(state);
  free(known);
  free(shapes);
  free(attrs);
  return st;
}

hap_status hap_graph_for_policy(const hap_graph *g, int32_t replicas, const hap_train_policy *pol,
                                hap_graph **out, hap_err *err) {
  *out = NULL;
  int32_t k = pol->micro_batches > 0 ? pol->micro_batches : 1;
  hap_graph *split = NULL, *cast = NULL;
  if (replicas * k > 1)
    HAP_TRY(hap_graph_split_batch(g, replicas * k, &split, err));
  hap_status st =
      hap_graph_cast_float(split ? split : g, hap_policy_compute_dtype(pol), &cast, err);
  if (st != HAP_OK || cast != NULL) {
    hap_graph_destroy(split);
    *out = cast;
    return st;
  }
  *out = split;
  return HAP_OK;
}

hap_status hap_cluster_of_host(const hap_cluster *c, int32_t host, hap_cluster **out,
                               hap_err *err) {
  *out = NULL;
  if (host < 0 || host >= c->n_hosts)
    return hap_err_set(err, HAP_EINVAL, "host %d: the cluster has %d hosts", host, c->n_hosts);
  const hap_host *h = &c->hosts[host];
  char name[256];
  snprintf(name, sizeof name, "%s[%s]", c->name, h->name);
  int32_t *devices = malloc((size_t)(h->n_devices ? h->n_devices : 1) * sizeof *devices);
  if (devices == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory taking one host's devices");
  for (int32_t i = 0; i < h->n_devices; i++)
    devices[i] = h->first_device + i;
  hap_status st = hap_cluster_of_devices(c, devices, h->n_devices, name, out, err);
  free(devices);
  return st;
}

void hap_group_share_nics(hap_group *g, int32_t sharers) {
  if (sharers <= 1 || g->n_hosts <= 1)
    return;
  double f = 1.0 / (double)sharers;
  g->nic_bw_Bps *= f;
  g->inter.bandwidth_Bps *= f;
  /* the ring and the slowest path cross a NIC when the group spans hosts */
  g->ring.bandwidth_Bps = fmin(g->ring.bandwidth_Bps, g->inter.bandwidth_Bps);
  g->worst.bandwidth_Bps = fmin(g->worst.bandwidth_Bps, g->inter.bandwidth_Bps);
  for (int k = 0; k < HAP_COLL_KIND_COUNT; k++)
    g->fit[k] = NULL;
}
