/* alpa_inter.c — the `alpa` strategy's inter-operator pass (alpa_inter.h). */
#include "pipe/alpa_inter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/stage.h"
#include "pipe_layers.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Layer clusters that follow the graph's repeated block (pipe_layers.h): L = the largest divisor
 * of its repeats R up to HAP_ALPA_LAYERS (at least 4), each cluster R / L blocks, the prologue in
 * the first and the epilogue in the last. Equal clusters then price alike. Returns L, or 0 when
 * the graph has no such structure. */
static int32_t repeated_clusters(const hap_graph *g, int32_t *cuts) {
  int32_t first, P, R, L = 0;
  if (!hap_pipe_repeated_block(g, 4, &first, &P, &R))
    return 0;
  for (int32_t l = R < HAP_ALPA_LAYERS ? R : HAP_ALPA_LAYERS; l >= 4 && L == 0; l--)
    if (R % l == 0)
      L = l;
  for (int32_t i = 0; i <= L; i++)
    cuts[i] = i == 0 ? 0 : i == L ? g->n_nodes : first + i * (R / L) * P;
  return L;
}

typedef struct probe_memo {
  uint64_t key;
  double latency_s; /* forward + backward per micro-batch, s; HUGE_VAL: the stage has no program */
} probe_memo;

typedef struct search {
  const hap_graph *g;
  const hap_cluster *c;
  hap_synth_options stage; /* the stages' options: strategy alpa */
  int32_t L;
  int32_t cuts[HAP_ALPA_LAYERS + 1]; /* the layer clusters' node cuts */
  int32_t *producer;                 /* [tensors] */
  probe_memo *memo;
  int32_t n_memo, cap_memo;
  int64_t probes;
  double *param_elems; /* [L + 1]: trainable parameter elements of clusters [0, i) */
  double limit;        /* a device's memory limit, bytes */
} search;

/* Trainable parameter elements first used by a node before each cluster cut (a parameter counts
 * in the cluster that reads it first). */
static hap_status count_params(search *s) {
  const hap_graph *g = s->g;
  bool *seen = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *seen);
  s->param_elems = calloc((size_t)s->L + 1, sizeof *s->param_elems);
  if (seen == NULL || s->param_elems == NULL) {
    free(seen);
    return HAP_ENOMEM;
  }
  double sum = 0;
  for (int32_t i = 0, k = 0; i < s->L; i++) {
    s->param_elems[i] = sum;
    for (; k < s->cuts[i + 1]; k++)
      for (int in = 0; in < g->nodes[k].n_inputs; in++) {
        int32_t t = g->nodes[k].inputs[in];
        if (g->tensors[t].kind == HAP_TENSOR_PARAMETER && g->tensors[t].requires_grad && !seen[t]) {
          seen[t] = true;
          sum += (double)hap_tensor_numel(&g->tensors[t]);
        }
      }
  }
  s->param_elems[s->L] = sum;
  free(seen);
  return HAP_OK;
}

/* The latency of layer clusters [i, j) as one stage on `group`, m micro-batches. */
static double latency(search *s, const hap_cluster *group, int32_t m, int32_t i, int32_t j) {
  int32_t first = s->cuts[i], end = s->cuts[j];
  /* its training state alone, sharded over the group at best, over the limit: no program */
  hap_param_bytes pb = hap_policy_param_bytes_zero(&s->stage.policy, group->n_devices);
  if ((s->param_elems[j] - s->param_elems[i]) * hap_param_bytes_total(&pb) /
          (s->stage.policy.zero >= 3 ? 1 : group->n_devices) >
      s->limit)
    return HUGE_VAL;
  uint64_t key = hap_pipe_range_key(s->g, s->producer, first, end);
  for (int32_t k = 0; k < s->n_memo; k++)
    if (s->memo[k].key == key)
      return s->memo[k].latency_s;
  hap_stage_times times;
  double memory = 0, limit = 0;
  hap_err quiet = {0};
  s->probes++;
  double t = HUGE_VAL;
  if (hap_pipe_stage_probe(s->g, first, end, group, m, &s->stage, &times, &memory, &limit,
                           &quiet) == HAP_OK)
    t = times.fwd_s + times.bwd_s;
  if (s->n_memo == s->cap_memo) {
    int32_t cap = s->cap_memo ? 2 * s->cap_memo : 64;
    probe_memo *grown = realloc(s->memo, (size_t)cap * sizeof *grown);
    if (grown == NULL)
      return t; /* not cached: priced again if asked again */
    s->memo = grown;
    s->cap_memo = cap;
  }
  s->memo[s->n_memo++] = (probe_memo){key, t};
  return t;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Alpa's dynamic program: the slicing of L layer clusters into p stages (t[i][j]: the latency of
 * clusters [i, j), row stride L + 1) minimising sum t + (m - 1) max t. *layers gets the stages'
 * first clusters and L; returns the objective (HUGE_VAL when no slicing has finite stages). */
static double slice(const double *t, int32_t L, int32_t p, int32_t m, int32_t *layers) {
  size_t W = (size_t)L + 1;
  double *cand = malloc(W * W * sizeof *cand);
  double *G = malloc((size_t)(p + 1) * W * sizeof *G);
  int32_t *next = malloc((size_t)(p + 1) * W * sizeof *next);
  double best = HUGE_VAL;
  if (cand == NULL || G == NULL || next == NULL)
    goto out;
  size_t nc = 0;
  for (int32_t i = 0; i < L; i++)
    for (int32_t j = i + 1; j <= L; j++)
      if (isfinite(t[(size_t)i * W + (size_t)j]))
        cand[nc++] = t[(size_t)i * W + (size_t)j];
  qsort(cand, nc, sizeof *cand, cmp_double);
  for (size_t c = 0; c < nc; c++) {
    double tmax = cand[c];
    if (c > 0 && tmax == cand[c - 1])
      continue;
    if ((m - 1) * tmax >= best)
      break; /* every later bound costs at least this much */
    /* G[s][i]: the least sum covering clusters [i, L) with s stages, each at most tmax */
    for (int32_t i = 0; i <= L; i++)
      G[i] = i == L ? 0 : HUGE_VAL;
    for (int32_t st = 1; st <= p; st++)
      for (int32_t i = 0; i <= L; i++) {
        double v = HUGE_VAL;
        int32_t arg = -1;
        for (int32_t j = i + 1; j <= L; j++) {
          double tij = t[(size_t)i * W + (size_t)j];
          double rest = G[(size_t)(st - 1) * W + (size_t)j];
          if (tij <= tmax && tij + rest < v) {
            v = tij + rest;
            arg = j;
          }
        }
        G[(size_t)st * W + (size_t)i] = v;
        next[(size_t)st * W + (size_t)i] = arg;
      }
    double total = G[(size_t)p * W] + (m - 1) * tmax;
    if (total < best) {
      best = total;
      int32_t i = 0;
      for (int32_t st = p; st >= 1; st--) {
        layers[p - st] = i;
        i = next[(size_t)st * W + (size_t)i];
      }
      layers[p] = L;
    }
  }
out:
  free(cand);
  free(G);
  free(next);
  return best;
}

/* Micro-batches for p stages: the policy's when it sets more than one, else the largest of 4p,
 * 2p and p that divides the batch; 0 when none does. */
static int32_t micro_for(const hap_graph *g, const hap_train_policy *pol, int32_t p) {
  if (pol->micro_batches > 1)
    return pol->micro_batches;
  int64_t batch = hap_pipe_batch_of(g);
  for (int32_t f = 4; f >= 1; f /= 2)
    if (batch > 0 && batch % ((int64_t)f * p) == 0)
      return f * p;
  return 0;
}

/* Estimate candidate `cd` as a 1F1B pipeline; keeps it in out->estimate when it is the fastest
 * that fits so far. */
static hap_status estimate(search *s, hap_alpa_inter *out, int ci) {
  hap_alpa_candidate *cd = &out->cand[ci];
  hap_pipe_spec spec = {.stages = cd->stages,
                        .schedule = HAP_PIPE_1F1B,
                        .chunks = 1,
                        .micro_batches = cd->micro_batches,
                        .n_cuts = cd->stages + 1};
  for (int32_t k = 0; k <= cd->stages; k++)
    spec.cuts[k] = s->cuts[cd->layers[k]];
  hap_pipe_estimate *e = NULL;
  hap_err err = {0};
  hap_synth_options so = s->stage;
  so.alpa_time_only = false; /* the chosen stages' programs may use the ILP's memory rows */
  if (hap_pipe_estimate_run(s->g, s->c, &spec, &so, &e, &err) != HAP_OK) {
    snprintf(cd->why, sizeof cd->why, "%.230s", err.msg);
    return err.status == HAP_ENOMEM ? HAP_ENOMEM : HAP_OK;
  }
  cd->iteration_s = e->sim->makespan_s;
  cd->fits = true;
  for (int32_t k = 0; k < e->n_stages; k++) {
    cd->peak_bytes = fmax(cd->peak_bytes, e->stages[k].memory_bytes);
    cd->fits = cd->fits && e->stages[k].fits;
  }
  if (cd->fits && (out->best < 0 || cd->iteration_s < out->cand[out->best].iteration_s)) {
    hap_pipe_estimate_destroy(out->estimate);
    out->estimate = e;
    out->best = ci;
  } else {
    hap_pipe_estimate_destroy(e);
  }
  return HAP_OK;
}

/* Every sub-mesh size under the stages' current policy. */
static hap_status run_sizes(search *s, hap_alpa_inter *out) {
  const hap_cluster *c = s->c;
  int32_t M = c->hosts[0].n_devices, H = c->n_hosts, N = c->n_devices;
  size_t W = (size_t)s->L + 1;
  double *t = malloc(W * W * sizeof *t);
  int32_t *devices = malloc((size_t)N * sizeof *devices);
  hap_status st = t && devices ? HAP_OK : HAP_ENOMEM;
  for (int32_t d = 0; d < N && st == HAP_OK; d++)
    devices[d] = d;
  for (int32_t d = 1; d < N && st == HAP_OK && out->n_cand < HAP_ALPA_MAX_CANDIDATES; d++) {
    bool in_host = d <= M && (d & (d - 1)) == 0; /* (1, 2^k) */
    bool hosts = d % M == 0 && H % (d / M) == 0; /* (n, M) */
    int32_t p = N / d;
    if ((!in_host && !hosts) || N % d != 0 || p < 2 || p > s->L || p > HAP_PIPE_MAX_GROUPS)
      continue;
    hap_alpa_candidate *cd = &out->cand[out->n_cand++];
    memset(cd, 0, sizeof *cd);
    cd->stages = p;
    cd->group_devices = d;
    cd->micro_batches = micro_for(s->g, &s->stage.policy, p);
    if (cd->micro_batches == 0) {
      snprintf(cd->why, sizeof cd->why, "no micro-batch count of p, 2p or 4p divides the batch");
      continue;
    }
    hap_cluster *group = NULL;
    hap_err err = {0};
    if (hap_cluster_of_devices(c, devices, d, "alpa-submesh", &group, &err) != HAP_OK) {
      snprintf(cd->why, sizeof cd->why, "%.230s", err.msg);
      continue;
    }
    s->n_memo = 0;                            /* latencies are per sub-mesh and micro-batch count */
    int32_t longest = (2 * s->L + p - 1) / p; /* a stage of at most twice the mean clusters */
    for (int32_t i = 0; i < s->L; i++)
      for (int32_t j = i + 1; j <= s->L; j++)
        t[(size_t)i * W + (size_t)j] =
            j - i <= longest ? latency(s, group, cd->micro_batches, i, j) : HUGE_VAL;
    hap_cluster_destroy(group);
    cd->dp_s = slice(t, s->L, p, cd->micro_batches, cd->layers);
    if (!isfinite(cd->dp_s)) {
      snprintf(cd->why, sizeof cd->why,
               "no slicing into %d stages of %d devices has a program for every stage", p, d);
      continue;
    }
    st = estimate(s, out, out->n_cand - 1);
  }
  free(t);
  free(devices);
  return st;
}

hap_status hap_alpa_inter_search(const hap_graph *g, const hap_cluster *c,
                                 const hap_synth_options *o, uint32_t forced, hap_alpa_inter *out,
                                 hap_err *err) {
  memset(out, 0, sizeof *out);
  out->best = -1;
  double t0 = now_s();
  search s = {.g = g, .c = c, .stage = *o};
  s.stage.strategy = HAP_STRATEGY_ALPA;
  s.stage.alpa_time_only = true; /* stages profiled as Alpa does: out of memory, not a stage */
  s.stage.rescore = NULL;
  s.stage.progress = NULL;
  s.stage.cost_bound_s = 0;
  /* Alpa's sharding specs shard weights and optimizer state along the data-parallel axis too (as
   * ZeRO does): ZeRO-3 storage unless the policy says otherwise, so that most stages' fastest
   * programs fit without the ILP's memory rows (slow to branch on) */
  if (!(forced & HAP_POLICY_ZERO))
    s.stage.policy.zero = 3;
  /* the pass runs for models whose training state does not fit one device: with rematerialisation
   * (full recomputation) on unless the policy says otherwise, as Alpa trains such models */
  if (!(forced & HAP_POLICY_RECOMPUTE))
    s.stage.policy.recompute = HAP_RECOMPUTE_FULL;
  s.limit = o->memory_limit_bytes;
  for (int32_t d = 0; d < c->n_devices && !(o->memory_limit_bytes > 0); d++)
    if (s.limit == 0 || c->devices[d].memory_bytes < s.limit)
      s.limit = c->devices[d].memory_bytes;
  for (int32_t h = 1; h < c->n_hosts; h++)
    if (c->hosts[h].n_devices != c->hosts[0].n_devices)
      return HAP_OK; /* hosts of unequal size: no sub-mesh shapes (as in Alpa) */
  s.L = repeated_clusters(g, s.cuts);
  if (s.L == 0) { /* no repeated block: clusters of equal training FLOPs */
    s.L = g->n_nodes < HAP_ALPA_LAYERS ? g->n_nodes : HAP_ALPA_LAYERS;
    HAP_TRY(hap_stage_cuts_balanced(g, s.L, s.cuts, err));
  }
  out->layer_clusters = s.L;
  s.producer = hap_pipe_producers(g);
  if (s.producer == NULL)
    return hap_err_set(err, HAP_ENOMEM, "alpa: out of memory");
  hap_status st = count_params(&s) == HAP_OK ? run_sizes(&s, out) : HAP_ENOMEM;
  out->policy = s.stage.policy;
  out->probes = s.probes;
  out->seconds = now_s() - t0;
  free(s.producer);
  free(s.memo);
  free(s.param_elems);
  if (st != HAP_OK) {
    hap_alpa_inter_free(out);
    return hap_err_set(err, st, "alpa: out of memory in the inter-operator pass");
  }
  return HAP_OK;
}

void hap_alpa_inter_free(hap_alpa_inter *r) {
  if (r == NULL)
    return;
  hap_pipe_estimate_destroy(r->estimate);
  r->estimate = NULL;
  r->best = -1;
}
