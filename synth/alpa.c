/* alpa.c — the `alpa` strategy: Alpa's intra-operator pass (Zheng et al., OSDI'22) on hap's cost
 * model (docs/design-alpa.md). Every node picks one sharding variant (Alpa's sharding spec) and
 * every edge pays for resharding the producer's layout into the one its consumer's variant needs:
 * an integer linear program over
 *   s[k][v]  binary, node k runs variant v (sum over v = 1), cost: its forward + backward time
 *            plus the sources only it reads, sourced in the layout v needs
 *   x[t][q]  binary, a source read by several nodes is sourced once as q (sum over q = 1), cost:
 *            its source time (gradient synchronisation and update)
 *   e[a][j]  >= 0 per edge (producer choice a, consumer variant j), sum_j e[a][j] = the producer
 *            choice's binary and sum_a e[a][j] = s[k][j] (Alpa's edge variables), cost: the
 *            communication from a's layout to what j needs
 * and, when the time-optimal program does not fit, one memory row per device class. Solved by
 * GLPK's branch and cut with even ratios (the devices taken as equal, as in Alpa; the plan is then
 * priced on the real devices). The chosen variants are priced and emitted as every program is
 * (syn_price_replica), which takes each input the cheapest way the program allows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/vec.h"
#include "synth/lp.h"
#include "synth_internal.h"

/* Branch and cut's time limit, s: past it the best integer point found is used. */
#define ALPA_MIP_SECONDS 10.0

/* A producer of a tensor as the ILP sees it: a node's variants, or a source's choices. */
typedef struct alpa_side {
  int n;
  int var[HAP_MAX_VARIANTS * HAP_MAX_OP_INPUTS];       /* binary of each choice, -1: not offered */
  syn_prop prop[HAP_MAX_VARIANTS * HAP_MAX_OP_INPUTS]; /* the property each choice gives */
} alpa_side;

typedef struct alpa_build {
  syn_ctx *x;
  hap_lp *lp;
  /* the memory rows: per device class, sum over chosen variables of mem * var <= the limit */
  int *mem_vars;
  double *mem_coef; /* [n_classes][cap_mem] */
  int32_t n_mem, cap_mem;
  double *scratch;  /* [n_classes] */
  bool memory_rows; /* add them (off: the time-optimal program, whatever it holds) */
  int *s;           /* [n_nodes][HAP_MAX_VARIANTS] variable of s[k][v], -1: not offered */
  double *own;      /* [n_nodes][HAP_MAX_VARIANTS] sources folded into the node's cost, s */
  hap_err *err;
} alpa_build;

static int *svar(alpa_build *b, int32_t k, int v) {
  return &b->s[(size_t)k * HAP_MAX_VARIANTS + (size_t)v];
}

static bool same_prop(const syn_ctx *x, const syn_prop *a, const syn_prop *b) {
  return a->tensor == b->tensor && a->layout == b->layout &&
         (a->layout < 0 || (a->granule == b->granule && syn_same_split(x, a->segment, b->segment)));
}

static syn_prop prop_of(int32_t tensor, hap_layout l, int32_t segment, int64_t granule) {
  syn_prop p = {tensor, l, 0, 1};
  if (l >= 0) {
    p.segment = segment;
    p.granule = granule;
  }
  return p;
}

static hap_status oom(alpa_build *b) {
  return hap_err_set(b->err, HAP_ENOMEM, "alpa: out of memory building the ILP");
}

/* Add the memory of property p under `storage` to b->scratch (per class, bytes); nothing for a
 * tensor recomputation drops (priced as kept at the layer's input only). */
static void add_memory(alpa_build *b, const syn_prop *p, hap_storage storage) {
  syn_ctx *x = b->x;
  if (x->rmap.dropped != NULL && x->rmap.dropped[p->tensor])
    return;
  syn_prop_memory(x, p, storage, NULL, b->scratch);
}

/* Variable `var` holds b->scratch's bytes on each class when 1 (then b->scratch is cleared). */
static hap_status memory_term(alpa_build *b, int var) {
  int32_t nc = b->x->n_classes;
  if (b->n_mem == b->cap_mem) {
    int32_t cap = b->cap_mem ? 2 * b->cap_mem : 256;
    int *v = realloc(b->mem_vars, (size_t)cap * sizeof *v);
    if (v != NULL)
      b->mem_vars = v;
    double *c = v ? realloc(b->mem_coef, (size_t)cap * (size_t)nc * sizeof *c) : NULL;
    if (c == NULL)
      return oom(b);
    b->mem_coef = c;
    b->cap_mem = cap;
  }
  b->mem_vars[b->n_mem] = var;
  for (int32_t c = 0; c < nc; c++)
    b->mem_coef[(size_t)b->n_mem * (size_t)nc + (size_t)c] = b->scratch[c];
  b->n_mem++;
  memset(b->scratch, 0, (size_t)nc * sizeof *b->scratch);
  return HAP_OK;
}

/* sum of memory terms <= each class's limit (Alpa's intra-operator ILP has no memory term; here a
 * program over the memory limit is useless, and the rows let the ILP trade time for memory). */
static hap_status memory_rows(alpa_build *b) {
  int32_t nc = b->x->n_classes;
  double *col = malloc((size_t)(b->n_mem > 0 ? b->n_mem : 1) * sizeof *col);
  if (col == NULL)
    return oom(b);
  hap_status st = HAP_OK;
  for (int32_t c = 0; c < nc && st == HAP_OK; c++) {
    if (!isfinite(b->x->mem_limit[c]))
      continue;
    for (int32_t i = 0; i < b->n_mem; i++)
      col[i] = b->mem_coef[(size_t)i * (size_t)nc + (size_t)c];
    st = hap_lp_add_row(b->lp, b->mem_vars, col, b->n_mem, -INFINITY, b->x->mem_limit[c], b->err);
  }
  free(col);
  return st;
}

/* The property input i of node k needs under variant v. */
static syn_prop needs(const syn_ctx *x, int32_t k, int v, int i) {
  const hap_variant *var = &x->nodes[k].variants[v];
  return prop_of(x->g->nodes[k].inputs[i], var->in[i], x->nodes[k].segment, var->granule);
}

/* Node variables: one variant each; the loss's producer only with the loss as R or I; a source
 * only this node reads priced into the node's variants (b->own). */
static hap_status node_vars(alpa_build *b) {
  syn_ctx *x = b->x;
  const hap_graph *g = x->g;
  for (int32_t k = 0; k < g->n_nodes; k++) {
    const syn_node *sn = &x->nodes[k];
    const hap_node *node = &g->nodes[k];
    int vars[HAP_MAX_VARIANTS];
    double ones[HAP_MAX_VARIANTS];
    int n = 0;
    for (int v = 0; v < sn->n_variants; v++) {
      *svar(b, k, v) = -1;
      bool ok = sn->allowed[v] && isfinite(sn->cost_s[v]);
      for (int o = 0; o < node->n_outputs; o++)
        ok = ok && (node->outputs[o] != g->loss || sn->variants[v].out[o] < 0);
      double own = 0;
      for (int i = 0; i < node->n_inputs && ok; i++) {
        int32_t t = node->inputs[i];
        if (g->tensors[t].kind == HAP_TENSOR_ACTIVATION || x->n_uses[t] != 1)
          continue;
        bool repeated = false;
        for (int j = 0; j < i; j++)
          repeated = repeated || node->inputs[j] == t;
        /* sourced directly in the layout v needs: the emitted program's first use of a source
         * is its source (a layout made from another, e.g. I kept once as R, needs the first
         * present, which only a later use has) */
        syn_prop p = needs(x, k, v, i);
        hap_storage storage = HAP_STORE_INPUT;
        double c = repeated ? 0 : syn_source_time(x, &p, &storage);
        ok = isfinite(c);
        own += c;
        if (ok && !repeated)
          add_memory(b, &p, storage);
      }
      for (int o = 0; o < node->n_outputs && ok; o++) {
        const hap_variant *var = &sn->variants[v];
        syn_prop p = prop_of(node->outputs[o], var->out[o], sn->segment, var->granule);
        add_memory(b, &p, HAP_STORE_INPUT);
      }
      if (!ok) {
        memset(b->scratch, 0, (size_t)x->n_classes * sizeof *b->scratch);
        continue;
      }
      b->own[(size_t)k * HAP_MAX_VARIANTS + (size_t)v] = own;
      HAP_TRY(hap_lp_add_var(b->lp, 0, 1, sn->cost_s[v] + own, svar(b, k, v), b->err));
      HAP_TRY(hap_lp_set_integer(b->lp, *svar(b, k, v), b->err));
      HAP_TRY(memory_term(b, *svar(b, k, v)));
      vars[n] = *svar(b, k, v);
      ones[n++] = 1;
    }
    if (n == 0)
      return hap_err_set(b->err, HAP_EINVAL,
                         "alpa: node '%s' has no variant the cost model can price", node->name);
    HAP_TRY(hap_lp_add_row(b->lp, vars, ones, n, 1, 1, b->err));
  }
  return HAP_OK;
}

/* One edge, from `from` to input i of node k: e[a][j] >= 0 with sum_j e[a][j] = from.var[a] and
 * sum_a e[a][j] = s[k][j] (Alpa's edge variables, tight in the relaxation), e[a][j] costing the
 * communication from from.prop[a] to what variant j needs. */
static hap_status edge(alpa_build *b, const alpa_side *from, int32_t k, int i) {
  syn_ctx *x = b->x;
  const syn_node *sn = &x->nodes[k];
  int na = from->n, nj = sn->n_variants;
  int *e = malloc((size_t)(na * nj > 0 ? na * nj : 1) * sizeof *e);
  int *vars = malloc((size_t)(na + nj + 1) * sizeof *vars);
  double *coefs = malloc((size_t)(na + nj + 1) * sizeof *coefs);
  hap_status st = e && vars && coefs ? HAP_OK : oom(b);
  for (int a = 0; a < na && st == HAP_OK; a++)
    for (int j = 0; j < nj && st == HAP_OK; j++) {
      e[a * nj + j] = -1;
      if (from->var[a] < 0 || *svar(b, k, j) < 0)
        continue;
      syn_prop want = needs(x, k, j, i);
      double c = 0;
      if (!same_prop(x, &from->prop[a], &want)) {
        hap_comm_op op;
        hap_coll_impl impl;
        c = syn_comm_time(x, &from->prop[a], &want, &op, &impl);
      }
      if (isfinite(c))
        st = hap_lp_add_var(b->lp, 0, 1, c, &e[a * nj + j], b->err);
    }
  for (int a = 0; a < na && st == HAP_OK; a++) { /* sum_j e[a][j] = from[a] */
    if (from->var[a] < 0)
      continue;
    int n = 0;
    for (int j = 0; j < nj; j++)
      if (e[a * nj + j] >= 0) {
        vars[n] = e[a * nj + j];
        coefs[n++] = 1;
      }
    vars[n] = from->var[a];
    coefs[n++] = -1;
    st = hap_lp_add_row(b->lp, vars, coefs, n, 0, 0, b->err);
  }
  for (int j = 0; j < nj && st == HAP_OK; j++) { /* sum_a e[a][j] = s[k][j] */
    if (*svar(b, k, j) < 0)
      continue;
    int n = 0;
    for (int a = 0; a < na; a++)
      if (e[a * nj + j] >= 0) {
        vars[n] = e[a * nj + j];
        coefs[n++] = 1;
      }
    vars[n] = *svar(b, k, j);
    coefs[n++] = -1;
    st = hap_lp_add_row(b->lp, vars, coefs, n, 0, 0, b->err);
  }
  free(e);
  free(vars);
  free(coefs);
  return st;
}

/* A source read by several nodes (or twice by one): sourced once, as one of the properties its
 * consumers need (x[q], sum 1); each consumer's input an edge from it. */
static hap_status shared_source(alpa_build *b, int32_t t, alpa_side *side) {
  syn_ctx *x = b->x;
  const hap_graph *g = x->g;
  side->n = 0;
  int vars[HAP_MAX_VARIANTS * HAP_MAX_OP_INPUTS];
  double ones[HAP_MAX_VARIANTS * HAP_MAX_OP_INPUTS];
  int m = 0;
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int i = 0; i < g->nodes[k].n_inputs; i++)
      for (int v = 0; g->nodes[k].inputs[i] == t && v < x->nodes[k].n_variants; v++) {
        if (*svar(b, k, v) < 0)
          continue;
        syn_prop p = needs(x, k, v, i);
        bool seen = false;
        for (int a = 0; a < side->n && !seen; a++)
          seen = same_prop(x, &side->prop[a], &p);
        if (seen || side->n == HAP_MAX_VARIANTS * HAP_MAX_OP_INPUTS)
          continue;
        hap_storage st;
        double c = syn_source_time(x, &p, &st);
        side->prop[side->n] = p;
        side->var[side->n] = -1;
        if (isfinite(c)) {
          HAP_TRY(hap_lp_add_var(b->lp, 0, 1, c, &side->var[side->n], b->err));
          HAP_TRY(hap_lp_set_integer(b->lp, side->var[side->n], b->err));
          add_memory(b, &p, st);
          HAP_TRY(memory_term(b, side->var[side->n]));
          vars[m] = side->var[side->n];
          ones[m++] = 1;
        }
        side->n++;
      }
  if (m == 0)
    return hap_err_set(b->err, HAP_EINVAL,
                       "alpa: tensor '%s' cannot be sourced in any layout its consumers need",
                       g->tensors[t].name);
  return hap_lp_add_row(b->lp, vars, ones, m, 1, 1, b->err);
}

static hap_status build(alpa_build *b) {
  syn_ctx *x = b->x;
  const hap_graph *g = x->g;
  alpa_side *side = malloc(sizeof *side);
  size_t nt = (size_t)(g->n_tensors ? g->n_tensors : 1);
  int32_t *producer = malloc(nt * sizeof *producer); /* node making each tensor, -1 */
  int *output = malloc(nt * sizeof *output);         /* which of its outputs */
  if (side == NULL || producer == NULL || output == NULL) {
    free(side);
    free(producer);
    free(output);
    return oom(b);
  }
  for (int32_t t = 0; t < g->n_tensors; t++)
    producer[t] = -1;
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int o = 0; o < g->nodes[k].n_outputs; o++) {
      producer[g->nodes[k].outputs[o]] = k;
      output[g->nodes[k].outputs[o]] = o;
    }
  hap_status st = node_vars(b);
  for (int32_t t = 0; t < g->n_tensors && st == HAP_OK; t++) {
    int32_t u = producer[t];
    bool source = g->tensors[t].kind != HAP_TENSOR_ACTIVATION || u < 0;
    if (x->n_uses[t] == 0 || (source && x->n_uses[t] == 1))
      continue; /* unread, or priced into its one consumer */
    if (source) {
      st = shared_source(b, t, side);
    } else {
      side->n = x->nodes[u].n_variants;
      for (int v = 0; v < side->n; v++) {
        const hap_variant *var = &x->nodes[u].variants[v];
        int o = output[t];
        side->var[v] = *svar(b, u, v);
        side->prop[v] = prop_of(t, var->out[o], x->nodes[u].segment, var->granule);
      }
    }
    for (int32_t k = 0; k < g->n_nodes && st == HAP_OK; k++)
      for (int i = 0; i < g->nodes[k].n_inputs && st == HAP_OK; i++)
        if (g->nodes[k].inputs[i] == t)
          st = edge(b, side, k, i);
  }
  if (st == HAP_OK && b->memory_rows)
    st = memory_rows(b);
  free(side);
  free(producer);
  free(output);
  return st;
}

/* Alpa's intra-operator pass weighs time only: a program over a device's memory limit is
 * refused, naming the device most over its limit and what fills it. */
static hap_status check_memory(const syn_ctx *x, const hap_plan *p, hap_synth_stats *stats,
                               hap_err *err) {
  int32_t worst = -1;
  double over = 0;
  for (int32_t d = 0; d < x->n; d++) {
    double o = p->device_memory_bytes[d] - x->mem_limit[x->dev_class[d]];
    if (o > over) {
      over = o;
      worst = d;
    }
  }
  if (worst < 0)
    return HAP_OK;
  double limit = x->mem_limit[x->dev_class[worst]];
  if (stats != NULL) {
    stats->no_fit = true;
    stats->leanest_device = worst;
    stats->leanest_limit = limit;
    if (p->memory_recorded)
      stats->leanest = p->device_memory[worst];
  }
  char need[32], lim[32], pol[160];
  return hap_err_set(err, HAP_EINVAL,
                     "alpa: the intra-operator program needs %s on %s (%s), over its %s (policy "
                     "%s); Alpa's ILP weighs time, not memory: raise --memory-limit, use more "
                     "devices, a leaner --policy, or -s hap (which steers the policy)",
                     hap_fmt_bytes(p->device_memory_bytes[worst], need, sizeof need),
                     x->c->devices[worst].name, x->c->devices[worst].model,
                     hap_fmt_bytes(limit, lim, sizeof lim),
                     hap_policy_brief(&x->pol, pol, sizeof pol));
}

/* Each node's variant in the solution. */
static void pick_variants(alpa_build *b, const double *sol, int8_t *variants) {
  const syn_ctx *x = b->x;
  for (int32_t k = 0; k < x->g->n_nodes; k++) {
    int best = -1;
    for (int v = 0; v < x->nodes[k].n_variants; v++)
      if (*svar(b, k, v) >= 0 && (best < 0 || sol[*svar(b, k, v)] > sol[*svar(b, k, best)]))
        best = v;
    variants[k] = (int8_t)best;
  }
}

/* Whether the solution's memory terms stay within every class's limit. */
static bool memory_fits(const alpa_build *b, const double *sol) {
  int32_t nc = b->x->n_classes;
  for (int32_t c = 0; c < nc; c++) {
    double sum = 0;
    for (int32_t i = 0; i < b->n_mem; i++)
      sum += b->mem_coef[(size_t)i * (size_t)nc + (size_t)c] * sol[b->mem_vars[i]];
    if (sum > b->x->mem_limit[c] * (1 + 1e-9))
      return false;
  }
  return true;
}

/* Even ratios for every segment. */
static void even(const syn_ctx *x, double *ratios) {
  for (int32_t i = 0; i < x->n_segments * x->n; i++)
    ratios[i] = 1.0 / x->n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

hap_status syn_alpa(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                    hap_plan **out, hap_synth_stats *stats, hap_err *err) {
  *out = NULL;
  double t0 = now_s();
  if (g->loss < 0 || c->n_devices < 1)
    return hap_err_set(err, HAP_EINVAL, "synthesis needs a validated graph and cluster");
  hap_graph *pg = NULL;
  syn_ctx x;
  HAP_TRY(syn_ctx_open(&x, g, c, o, NULL, &pg, err));
  size_t nr = (size_t)x.n_segments * (size_t)x.n;
  double *ratios = malloc(nr * sizeof *ratios);
  int8_t *variants = malloc((size_t)(g->n_nodes ? g->n_nodes : 1));
  alpa_build b = {.x = &x, .lp = hap_lp_create("alpa intra-op"), .err = err};
  size_t ns = (size_t)(g->n_nodes ? g->n_nodes : 1) * HAP_MAX_VARIANTS;
  b.s = malloc(ns * sizeof *b.s);
  b.own = calloc(ns, sizeof *b.own);
  b.scratch = calloc((size_t)x.n_classes, sizeof *b.scratch);
  double *sol = NULL;
  hap_status st = HAP_OK;
  if (!ratios || !variants || !b.lp || !b.s || !b.own || !b.scratch) {
    st = oom(&b);
    goto out;
  }
  even(&x, ratios);
  if ((st = syn_set_ratios(&x, ratios, err)) != HAP_OK)
    goto out;
  bool stopped = false;
  /* the time-optimal program first; only when it does not fit, again with the memory rows (a
   * knapsack row makes branch and cut slower); when nothing fits them, the time-optimal program
   * stays, and check_memory refuses it */
  for (int pass = 0; pass < (o != NULL && o->alpa_time_only ? 1 : 2); pass++) {
    b.memory_rows = pass == 1;
    b.n_mem = 0;
    hap_lp_destroy(b.lp);
    b.lp = hap_lp_create("alpa intra-op");
    if (b.lp == NULL) {
      st = oom(&b);
      goto out;
    }
    if ((st = build(&b)) != HAP_OK)
      goto out;
    hap_lp_set_mip_time_limit(b.lp, ALPA_MIP_SECONDS);
    free(sol);
    if ((sol = malloc((size_t)hap_lp_n_vars(b.lp) * sizeof *sol)) == NULL) {
      st = oom(&b);
      goto out;
    }
    hap_err attempt = {0};
    st = hap_lp_solve_mip(b.lp, sol, NULL, &stopped, &attempt);
    if (st == HAP_ELP && pass == 1)
      break; /* nothing fits the memory rows: keep pass 0's program (priced below) */
    if (st != HAP_OK) {
      hap_err_set(err, st, "%s", attempt.msg);
      goto out;
    }
    pick_variants(&b, sol, variants);
    if (memory_fits(&b, sol))
      break;
  }
  if (stats != NULL) {
    memset(stats, 0, sizeof *stats);
    stats->rounds = 1;
    stats->interrupted = stopped; /* the time limit, not a proven optimum */
  }
  st = syn_price_replica(g, c, o, NULL, variants, ratios, out, err);
  if (st == HAP_OK && (st = check_memory(&x, *out, stats, err)) != HAP_OK) {
    hap_plan_destroy(*out);
    *out = NULL;
  }
  if (stats != NULL)
    stats->seconds = now_s() - t0;
out:
  free(sol);
  free(b.s);
  free(b.own);
  free(b.scratch);
  free(b.mem_vars);
  free(b.mem_coef);
  hap_lp_destroy(b.lp);
  free(variants);
  free(ratios);
  syn_ctx_free(&x);
  hap_graph_destroy(pg);
  return st;
}
