/* stage.c — a pipeline stage's graph (stage.h). */
#include "model/stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hap_stage_graph_destroy(hap_stage_graph *s) {
  if (s == NULL)
    return;
  hap_graph_destroy(s->graph);
  free(s->boundary_in);
  free(s->boundary_out);
  free(s->grad_in);
  free(s->stage_of);
  free(s->whole_of);
  free(s);
}

/* Where each tensor of g is made and used relative to [first, end). */
typedef struct usage {
  bool *in_range;  /* used or made by a node of the range */
  bool *used_late; /* used by a node at or after end */
} usage;

static void mark_usage(const hap_graph *g, int32_t first, int32_t end, usage *u) {
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    bool inside = n >= first && n < end;
    for (int i = 0; i < node->n_inputs; i++) {
      u->in_range[node->inputs[i]] |= inside;
      u->used_late[node->inputs[i]] |= n >= end;
    }
    for (int o = 0; o < node->n_outputs; o++)
      u->in_range[node->outputs[o]] |= inside;
  }
}

/* Add tensor t of g to the stage graph: a boundary input when made before the range. */
static hap_status add_tensor(hap_stage_graph *s, const hap_graph *g, int32_t t, hap_err *err) {
  const hap_tensor *ten = &g->tensors[t];
  bool received = ten->kind == HAP_TENSOR_ACTIVATION && ten->producer < s->first;
  hap_tensor_kind kind = received ? HAP_TENSOR_INPUT : ten->kind;
  int32_t id;
  HAP_TRY(hap_graph_add_tensor(s->graph, ten->name, kind, ten->dtype, &ten->shape, &id, err));
  if ((received && ten->requires_grad) || ten->grad_wanted)
    HAP_TRY(hap_graph_want_grad(s->graph, id, err));
  s->stage_of[t] = id;
  s->whole_of[id] = t;
  if (received)
    s->boundary_in[s->n_in++] = t;
  return HAP_OK;
}

static hap_status copy_nodes(hap_stage_graph *s, const hap_graph *g, int32_t base_segment,
                             hap_err *err) {
  for (int32_t n = s->first; n < s->end; n++) {
    const hap_node *node = &g->nodes[n];
    int32_t in[HAP_MAX_OP_INPUTS], out[HAP_MAX_OP_OUTPUTS];
    for (int i = 0; i < node->n_inputs; i++)
      in[i] = s->stage_of[node->inputs[i]];
    for (int o = 0; o < node->n_outputs; o++)
      out[o] = s->stage_of[node->outputs[o]];
    HAP_TRY(hap_graph_link_node(s->graph, node->name, node->op, in, node->n_inputs, out,
                                node->n_outputs, &node->attrs, node->segment - base_segment, err));
  }
  return HAP_OK;
}

/* A stage-loss name must be new to the whole graph and the stage graph. */
static hap_status claim_name(const hap_stage_graph *s, const hap_graph *g, const char *name,
                             hap_err *err) {
  if (hap_graph_find_tensor(g, name) < 0 && hap_graph_find_node(g, name) < 0 &&
      hap_graph_find_tensor(s->graph, name) < 0 && hap_graph_find_node(s->graph, name) < 0)
    return HAP_OK;
  return hap_err_set(err, HAP_EINVAL,
                     "nodes [%d, %d): the stage loss needs the name '%s', which the graph uses",
                     s->first, s->end, name);
}

/* Add a node of one output named `name` through the builder (attrs NULL: defaults); its tensor
 * id into *out. */
static hap_status add_op(hap_stage_graph *s, const hap_graph *g, const char *name, hap_op op,
                         const int32_t *in, int32_t n_in, const hap_attrs *attrs, int32_t *out,
                         hap_err *err) {
  HAP_TRY(claim_name(s, g, name, err));
  const char *names[1] = {name};
  return hap_graph_add_node(s->graph, name, op, in, n_in, attrs, names, out, err);
}

/* nobatch[t]: t is a parameter or buffer, or computed from those alone (no input reaches it), so
 * it carries no batch. Nodes are in topological order: one pass. */
static void mark_batchless(const hap_graph *g, bool *nobatch) {
  for (int32_t t = 0; t < g->n_tensors; t++)
    nobatch[t] =
        g->tensors[t].kind == HAP_TENSOR_PARAMETER || g->tensors[t].kind == HAP_TENSOR_BUFFER;
  for (int32_t n = 0; n < g->n_nodes; n++) {
    const hap_node *node = &g->nodes[n];
    bool all = true;
    for (int i = 0; i < node->n_inputs; i++)
      all = all && nobatch[node->inputs[i]];
    for (int o = 0; o < node->n_outputs; o++)
      nobatch[node->outputs[o]] = all;
  }
}

/* y * y@grad summed over every dim but the batch (dim 0): [B] (rank 1 as is). */
static hap_status per_sample_term(hap_stage_graph *s, const hap_graph *g, int32_t i, int32_t *out,
                                  hap_err *err) {
  const hap_tensor *y = &g->tensors[s->boundary_out[i]];
  char name[512];
  int32_t gid, prod;
  snprintf(name, sizeof name, "%s@grad", y->name);
  HAP_TRY(claim_name(s, g, name, err));
  HAP_TRY(hap_graph_add_tensor(s->graph, name, HAP_TENSOR_INPUT, y->dtype, &y->shape, &gid, err));
  s->grad_in[i] = gid;
  s->whole_of[gid] = -1;
  int32_t pair[2] = {s->stage_of[s->boundary_out[i]], gid};
  snprintf(name, sizeof name, "%s@grad.mul", y->name);
  HAP_TRY(add_op(s, g, name, HAP_OP_MUL, pair, 2, NULL, &prod, err));
  if (y->shape.rank == 1) {
    *out = prod;
    return HAP_OK;
  }
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_SUM);
  int64_t dims[HAP_MAX_DIMS];
  for (int d = 1; d < y->shape.rank; d++)
    dims[d - 1] = d;
  HAP_TRY(hap_attrs_set_ints(&a, HAP_OP_SUM, "dims", dims, y->shape.rank - 1, err));
  snprintf(name, sizeof name, "%s@grad.sum", y->name);
  return add_op(s, g, name, HAP_OP_SUM, &prod, 1, &a, out, err);
}

/* L = sum over the batch of the sum over boundary outputs y needing a gradient of y * y@grad
 * reduced per sample: each term carries the batch until the one final sum, so every node of the
 * stage loss has a data-parallel variant. With the graph's loss in range and nothing sent on
 * that needs a gradient, L is that loss. */
static hap_status add_stage_loss(hap_stage_graph *s, const hap_graph *g, const bool *nobatch,
                                 hap_err *err) {
  int32_t acc = -1, n_terms = 0;
  char name[512];
  for (int32_t i = 0; i < s->n_out; i++) {
    const hap_tensor *y = &g->tensors[s->boundary_out[i]];
    s->grad_in[i] = -1;
    if (!y->requires_grad)
      continue;
    if (s->has_loss)
      return hap_err_set(err, HAP_EINVAL,
                         "nodes [%d, %d) hold the loss and send on '%s', which needs a gradient: "
                         "the loss must end the last stage",
                         s->first, s->end, y->name);
    if (y->shape.rank == 0 || nobatch[s->boundary_out[i]])
      return hap_err_set(err, HAP_EINVAL,
                         "nodes [%d, %d) send on '%s', which carries no batch (made from "
                         "parameters alone): cut elsewhere",
                         s->first, s->end, y->name);
    int32_t term;
    HAP_TRY(per_sample_term(s, g, i, &term, err));
    if (acc < 0) {
      acc = term;
    } else {
      int32_t both[2] = {acc, term};
      snprintf(name, sizeof name, "%s@grad.add", y->name);
      HAP_TRY(add_op(s, g, name, HAP_OP_ADD, both, 2, NULL, &acc, err));
    }
    n_terms++;
  }
  if (s->has_loss)
    return hap_graph_set_loss(s->graph, s->stage_of[g->loss], err);
  if (n_terms == 0)
    return hap_err_set(err, HAP_EINVAL,
                       "nodes [%d, %d) hold no loss and send on nothing that needs a gradient",
                       s->first, s->end);
  int32_t loss;
  HAP_TRY(claim_name(s, g, "stage@loss", err));
  HAP_TRY(add_op(s, g, "stage@loss", HAP_OP_SUM, &acc, 1, NULL, &loss, err));
  return hap_graph_set_loss(s->graph, loss, err);
}

static hap_status build(hap_stage_graph *s, const hap_graph *g, hap_err *err) {
  int32_t nt = g->n_tensors;
  usage u = {calloc((size_t)nt, sizeof(bool)), calloc((size_t)nt, sizeof(bool))};
  bool *nobatch = malloc((size_t)nt * sizeof(bool));
  hap_status st = HAP_OK;
  if (u.in_range == NULL || u.used_late == NULL || nobatch == NULL) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory cutting nodes [%d, %d)", s->first, s->end);
    goto done;
  }
  mark_usage(g, s->first, s->end, &u);
  s->has_loss = g->tensors[g->loss].producer >= s->first && g->tensors[g->loss].producer < s->end;
  for (int32_t t = 0; t < nt && st == HAP_OK; t++) {
    if (!u.in_range[t])
      continue;
    st = add_tensor(s, g, t, err);
    const hap_tensor *ten = &g->tensors[t];
    bool made_here =
        ten->kind == HAP_TENSOR_ACTIVATION && ten->producer >= s->first && ten->producer < s->end;
    if (made_here && u.used_late[t])
      s->boundary_out[s->n_out++] = t;
  }
  int32_t base = g->nodes[s->first].segment, last = g->nodes[s->end - 1].segment;
  if (st == HAP_OK)
    st = copy_nodes(s, g, base, err);
  for (int32_t k = base; k < last; k++) /* the stage loss joins the last segment */
    hap_graph_begin_segment(s->graph);
  if (st == HAP_OK) {
    mark_batchless(g, nobatch);
    st = add_stage_loss(s, g, nobatch, err);
  }
  if (st == HAP_OK)
    st = hap_graph_validate(s->graph, err);
done:
  free(u.in_range);
  free(u.used_late);
  free(nobatch);
  return st;
}

hap_status hap_stage_graph_build(const hap_graph *g, int32_t first, int32_t end,
                                 hap_stage_graph **out, hap_err *err) {
  *out = NULL;
  if (first < 0 || end > g->n_nodes || first >= end)
    return hap_err_set(
        err, HAP_EINVAL,
        "stage nodes [%d, %d): expected a non-empty range within the %d nodes of '%s'", first, end,
        g->n_nodes, g->name);
  hap_stage_graph *s = calloc(1, sizeof *s);
  int32_t nt = g->n_tensors;
  /* stage tensors: at most every tensor of g plus three per boundary output (y@grad, the product
   * and the sum; the adds too: at most 4 per output) */
  size_t cap = (size_t)nt * 5 + 1;
  if (s != NULL) {
    s->first = first;
    s->end = end;
    s->graph = hap_graph_create(g->name);
    s->boundary_in = malloc((size_t)nt * sizeof(int32_t));
    s->boundary_out = malloc((size_t)nt * sizeof(int32_t));
    s->grad_in = malloc((size_t)nt * sizeof(int32_t));
    s->stage_of = malloc((size_t)nt * sizeof(int32_t));
    s->whole_of = malloc(cap * sizeof(int32_t));
  }
  if (s == NULL || s->graph == NULL || !s->boundary_in || !s->boundary_out || !s->grad_in ||
      !s->stage_of || !s->whole_of) {
    hap_stage_graph_destroy(s);
    return hap_err_set(err, HAP_ENOMEM, "out of memory cutting nodes [%d, %d)", first, end);
  }
  for (int32_t t = 0; t < nt; t++)
    s->stage_of[t] = -1;
  for (size_t t = 0; t < cap; t++)
    s->whole_of[t] = -1;
  char source[96];
  snprintf(source, sizeof source, "pipeline stage: nodes [%d, %d)", first, end);
  hap_status st = hap_graph_set_source(s->graph, source);
  if (st != HAP_OK)
    st = hap_err_set(err, st, "out of memory cutting nodes [%d, %d)", first, end);
  if (st == HAP_OK)
    st = build(s, g, err);
  if (st != HAP_OK) {
    hap_stage_graph_destroy(s);
    return st;
  }
  *out = s;
  return HAP_OK;
}

double hap_node_train_flops(const hap_graph *g, int32_t n) {
  hap_op_cost c;
  hap_graph_node_cost(g, n, &c);
  return c.fwd_flops + c.bwd_flops;
}

/* Greedy ranges of at most `bound` FLOP each (a node above it alone); their count, and their
 * starts in cuts when not NULL. */
static int32_t greedy_ranges(const double *w, int32_t n, double bound, int32_t *cuts) {
  int32_t k = 0;
  double sum = 0;
  for (int32_t i = 0; i < n; i++) {
    if (i == 0 || sum + w[i] > bound) {
      if (cuts)
        cuts[k] = i;
      k++;
      sum = 0;
    }
    sum += w[i];
  }
  return k;
}

hap_status hap_stage_cuts_balanced(const hap_graph *g, int32_t stages, int32_t *cuts,
                                   hap_err *err) {
  int32_t n = g->n_nodes;
  if (stages < 1 || stages > n)
    return hap_err_set(err, HAP_EINVAL,
                       "%d stages of '%s': expected 1 to %d (one node at least each)", stages,
                       g->name, n);
  double *w = malloc((size_t)n * sizeof *w);
  int32_t *starts = malloc((size_t)n * sizeof *starts);
  if (w == NULL || starts == NULL) {
    free(w);
    free(starts);
    return hap_err_set(err, HAP_ENOMEM, "out of memory cutting '%s' into stages", g->name);
  }
  double lo = 0, hi = 0;
  for (int32_t i = 0; i < n; i++) {
    w[i] = hap_node_train_flops(g, i);
    lo = w[i] > lo ? w[i] : lo;
    hi += w[i];
  }
  /* the smallest bound whose greedy ranges number at most `stages` */
  for (int it = 0; it < 200 && hi - lo > 1e-9 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (greedy_ranges(w, n, mid, NULL) <= stages)
      hi = mid;
    else
      lo = mid;
  }
  int32_t k = greedy_ranges(w, n, hi, starts);
  /* split ranges of two nodes or more from the back (their largest sum does not grow) */
  for (int32_t end = n; k < stages;) {
    int32_t r = k - 1;
    while (r >= 0 && (r + 1 < k ? starts[r + 1] : end) - starts[r] < 2)
      r--;
    /* r >= 0: k < stages <= n leaves a range of two nodes */
    int32_t last = (r + 1 < k ? starts[r + 1] : end) - 1;
    memmove(&starts[r + 2], &starts[r + 1], (size_t)(k - r - 1) * sizeof *starts);
    starts[r + 1] = last;
    k++;
  }
  for (int32_t i = 0; i < stages; i++)
    cuts[i] = starts[i];
  cuts[stages] = n;
  free(w);
  free(starts);
  return HAP_OK;
}

hap_status hap_stage_crossing_bytes(const hap_graph *g, double *crossing, hap_err *err) {
  int32_t n = g->n_nodes;
  int32_t *last_use = malloc((size_t)(g->n_tensors > 0 ? g->n_tensors : 1) * sizeof *last_use);
  if (last_use == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory measuring the cuts of '%s'", g->name);
  for (int32_t t = 0; t < g->n_tensors; t++)
    last_use[t] = -1;
  for (int32_t k = 0; k < n; k++)
    for (int i = 0; i < g->nodes[k].n_inputs; i++)
      last_use[g->nodes[k].inputs[i]] = k;
  for (int32_t i = 0; i <= n; i++)
    crossing[i] = 0;
  /* tensor t made by node p and last used by node u crosses the cuts before nodes p+1 .. u */
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *ten = &g->tensors[t];
    if (ten->kind != HAP_TENSOR_ACTIVATION || last_use[t] <= ten->producer)
      continue;
    double bytes = (double)hap_tensor_bytes(ten);
    crossing[ten->producer + 1] += bytes;
    crossing[last_use[t] + 1] -= bytes;
  }
  for (int32_t i = 1; i <= n; i++)
    crossing[i] += crossing[i - 1];
  crossing[n] = 0;
  free(last_use);
  return HAP_OK;
}

/* Training FLOPs before node i (pre[i]), the crossing bytes at each cut, and each range's rate. */
typedef struct cut_costs {
  const double *pre, *cross;
  const double *rate; /* [stages] FLOP/s of range k */
  double bytes_per_s;
  int32_t n, stages;
} cut_costs;

/* The compute time of nodes [i, j) as range k, s. */
static double range_compute(const cut_costs *cc, int32_t k, int32_t i, int32_t j) {
  return (cc->pre[j] - cc->pre[i]) / cc->rate[k];
}

/* The cost of nodes [i, j) as range k: its compute time, or the time to send its boundary on and
 * take the gradient back (2x), whichever is longer (the sends overlap the compute), s. */
static double range_cost(const cut_costs *cc, int32_t k, int32_t i, int32_t j) {
  double compute = range_compute(cc, k, i, j), send = 2 * cc->cross[j] / cc->bytes_per_s;
  return compute > send ? compute : send;
}

/* Pass 1: the smallest largest range cost over the ranges. f: (stages+1) x w. */
static double minimax_cost(const cut_costs *cc, double *f) {
  size_t w = (size_t)cc->n + 1;
  for (size_t j = 0; j < w; j++)
    f[j] = j == 0 ? 0 : INFINITY;
  for (int32_t k = 1; k <= cc->stages; k++)
    for (int32_t j = k; j <= cc->n; j++) {
      double best = INFINITY;
      for (int32_t i = k - 1; i < j; i++) {
        double prev = f[(size_t)(k - 1) * w + (size_t)i];
        double here = range_cost(cc, k - 1, i, j);
        double c = prev > here ? prev : here;
        best = c < best ? c : best;
      }
      f[(size_t)k * w + (size_t)j] = best;
    }
  return f[(size_t)cc->stages * w + (size_t)cc->n];
}

/* Pass 2: among the cuts whose every range costs at most `bound`, those with the smallest sum of
 * squared compute times (the most even compute), into cuts. */
static void even_cuts(const cut_costs *cc, double bound, double *f, int32_t *arg, int32_t *cuts) {
  size_t w = (size_t)cc->n + 1;
  for (size_t j = 0; j < w; j++)
    f[j] = j == 0 ? 0 : INFINITY;
  for (int32_t k = 1; k <= cc->stages; k++)
    for (int32_t j = k; j <= cc->n; j++) {
      double best = INFINITY;
      int32_t from = -1;
      for (int32_t i = k - 1; i < j; i++) {
        double prev = f[(size_t)(k - 1) * w + (size_t)i];
        if (!isfinite(prev) || range_cost(cc, k - 1, i, j) > bound)
          continue;
        double t = range_compute(cc, k - 1, i, j), c = prev + t * t;
        if (c < best) { /* strict: ties keep the earliest cut */
          best = c;
          from = i;
        }
      }
      f[(size_t)k * w + (size_t)j] = best;
      arg[(size_t)k * w + (size_t)j] = from;
    }
  for (int32_t k = cc->stages, j = cc->n; k >= 1; k--) {
    cuts[k] = j;
    j = arg[(size_t)k * w + (size_t)j];
  }
  cuts[0] = 0;
}

hap_status hap_stage_cuts_rated(const hap_graph *g, int32_t stages, const double *flops_per_s,
                                double bytes_per_s, int32_t *cuts, hap_err *err) {
  int32_t n = g->n_nodes;
  if (stages < 1 || stages > n)
    return hap_err_set(err, HAP_EINVAL,
                       "%d stages of '%s': expected 1 to %d (one node at least each)", stages,
                       g->name, n);
  for (int32_t k = 0; k < stages; k++)
    if (!(flops_per_s[k] > 0) || !isfinite(flops_per_s[k]))
      return hap_err_set(err, HAP_EINVAL,
                         "stage costs: stage %d at %g FLOP/s, expected a finite "
                         "rate > 0",
                         k, flops_per_s[k]);
  if (!(bytes_per_s > 0) || !isfinite(bytes_per_s))
    return hap_err_set(err, HAP_EINVAL, "stage costs: %g bytes/s, expected a finite rate > 0",
                       bytes_per_s);
  size_t w = (size_t)n + 1;
  double *pre = malloc(w * sizeof *pre), *cross = malloc(w * sizeof *cross);
  double *f = malloc(w * (size_t)(stages + 1) * sizeof *f);
  int32_t *arg = malloc(w * (size_t)(stages + 1) * sizeof *arg);
  hap_status st = HAP_OK;
  if (pre == NULL || cross == NULL || f == NULL || arg == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "out of memory cutting '%s' into stages", g->name);
  if (st == HAP_OK)
    st = hap_stage_crossing_bytes(g, cross, err);
  if (st == HAP_OK) {
    pre[0] = 0;
    for (int32_t i = 0; i < n; i++)
      pre[i + 1] = pre[i] + hap_node_train_flops(g, i);
    cut_costs cc = {pre, cross, flops_per_s, bytes_per_s, n, stages};
    double bound = minimax_cost(&cc, f);
    even_cuts(&cc, bound * (1 + 1e-9), f, arg, cuts);
  }
  free(pre);
  free(cross);
  free(f);
  free(arg);
  return st;
}

hap_status hap_stage_cuts_costed(const hap_graph *g, int32_t stages, double flops_per_s,
                                 double bytes_per_s, int32_t *cuts, hap_err *err) {
  if (stages < 1 || stages > g->n_nodes)
    return hap_stage_cuts_rated(g, stages, &flops_per_s, bytes_per_s, cuts, err);
  double *rate = malloc((size_t)stages * sizeof *rate);
  if (rate == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory cutting '%s' into stages", g->name);
  for (int32_t k = 0; k < stages; k++)
    rate[k] = flops_per_s;
  hap_status st = hap_stage_cuts_rated(g, stages, rate, bytes_per_s, cuts, err);
  free(rate);
  return st;
}
