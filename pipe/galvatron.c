/* galvatron.c — the `galvatron` strategy's search (galvatron.h). */
#include "pipe/galvatron.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/spec.h"
#include "base/strmap.h"
#include "model/stage.h"
#include "pipe_layers.h"

#define GALV_BUCKETS 2048 /* memory budget units of the dynamic program */
/* layers of equal training FLOPs for a graph without a repeated block */
#define GALV_FLOP_LAYERS 32

bool hap_galvatron_spec_is(const char *text) {
  return text != NULL && strncmp(text, "galvatron", 9) == 0 && (text[9] == '\0' || text[9] == ':');
}

hap_status hap_galvatron_spec_parse(const char *text, hap_galvatron_spec *out, hap_err *err) {
  hap_galvatron_spec gs = {0, 0};
  if (!hap_galvatron_spec_is(text))
    return hap_err_set(err, HAP_EINVAL, "galvatron: '%s' is not galvatron[:pp=P,tp=T]",
                       text ? text : "");
  hap_spec s;
  hap_err quiet = {0};
  hap_status st = hap_spec_parse(text, HAP_SPEC_PLAIN_NAME, &s, &quiet);
  if (st == HAP_ENOMEM) {
    hap_spec_free(&s);
    return hap_err_set(err, HAP_ENOMEM, "galvatron: out of memory");
  }
  st = HAP_OK;
  for (int i = 0; i < s.n && st == HAP_OK; i++) {
    const char *key = s.items[i].key, *value = s.items[i].value;
    int32_t *slot = strcmp(key, "pp") == 0 ? &gs.pp : strcmp(key, "tp") == 0 ? &gs.tp : NULL;
    if (slot == NULL) {
      st = hap_err_set(err, HAP_EINVAL, "galvatron: unknown key '%s' (keys pp, tp)", key);
      break;
    }
    char *end = NULL;
    long v = strtol(value, &end, 10);
    if (end == value || *end != '\0' || v < 1 || v > 1 << 20 || (v & (v - 1)) != 0)
      st = hap_err_set(err, HAP_EINVAL, "galvatron: %s='%s', expected a power of two", key, value);
    else
      *slot = (int32_t)v;
  }
  if (st == HAP_OK && s.fault != HAP_SPEC_OK)
    st = hap_err_set(err, HAP_EINVAL, "galvatron: '%s' is not of the form key=value (keys pp, tp)",
                     s.bad ? s.bad : "");
  hap_spec_free(&s);
  if (st == HAP_OK)
    *out = gs;
  return st;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A layer's price under one choice, per micro-batch (the tail once per iteration). */
typedef struct layer_cost {
  bool ok;
  double fb_s;              /* forward + backward, s */
  double tail_s;            /* gradient synchronisation and update, s */
  hap_memory_breakdown mem; /* its fullest device, one micro-batch's activations, bytes */
} layer_cost;

typedef struct galv {
  const hap_graph *g;
  const hap_cluster *c;
  hap_synth_options base; /* o without the tool's hooks */
  uint32_t forced;
  hap_galvatron_spec pin;
  int32_t L;
  const int32_t *cuts;
  uint64_t *key;           /* [L] each layer's range key */
  int32_t *layer_of_param; /* [whole tensors] the layer of a parameter's first reader, or -1 */
  hap_strmap names;        /* whole tensor name -> id */
  /* what zero_store applies: every parameter (a probe of SDP), none, or per layer */
  bool all_sdp;
  const bool *sdp;  /* [L] or NULL */
  layer_cost *cost; /* [L][2]: DP, SDP of the candidate being priced */
  bool *choice;     /* [L] scratch: the candidate's per-layer SDP */
  bool *chosen;     /* [n_cand][L]: each candidate's per-layer SDP */
  uint8_t *back;    /* [layers of a stage][GALV_BUCKETS + 1] the dynamic program's choices */
  double *row, *next_row;
  double limit; /* bytes per device */
  int64_t probes;
  double *crossing;   /* [n_nodes + 1] bytes a cut before node i sends on, whole batch */
  double act_scale;   /* activation bytes under the policy over the graph's (fp32) */
  hap_pipe_link link; /* group 0 to group 1 of the current p (as for every pair: equal devices) */
} galv;

/* Layer i's price under choice o (0 DP, 1 SDP). */
static layer_cost *cost_of(const galv *s, int32_t i, int o) {
  return &s->cost[(size_t)2 * (size_t)i + (size_t)o];
}

/* hap_synth_options.zero_store: SDP layers' parameters, by name (stage graphs keep the names). */
static bool zero_store(void *ctx, const hap_graph *g, int32_t t) {
  const galv *s = ctx;
  if (g->tensors[t].kind != HAP_TENSOR_PARAMETER)
    return false;
  if (s->all_sdp)
    return true;
  if (s->sdp == NULL)
    return false;
  int32_t w = hap_strmap_get(&s->names, g->tensors[t].name);
  return w >= 0 && s->layer_of_param[w] >= 0 && s->sdp[s->layer_of_param[w]];
}

/* The layers: whole repeats of the repeated block (grouped so that there are at most
 * HAP_GALV_MAX_LAYERS), the prologue with the first and the epilogue with the last; else ranges
 * of equal training FLOPs. A layer that is no stage graph of its own (it would send on a tensor
 * made from parameters alone, say) is merged with the next, so that every layer can be priced
 * alone and every cut between layers is a stage boundary. */
static hap_status find_layers(const hap_graph *g, int32_t *cuts, int32_t *L, hap_err *err) {
  int32_t first, P, R;
  if (hap_pipe_repeated_block(g, 2, &first, &P, &R)) {
    int32_t per = (R + HAP_GALV_MAX_LAYERS - 1) / HAP_GALV_MAX_LAYERS; /* blocks per layer */
    int32_t n = R / per;
    for (int32_t i = 0; i <= n; i++)
      cuts[i] = i == 0 ? 0 : i == n ? g->n_nodes : first + i * per * P;
    *L = n;
  } else {
    *L = g->n_nodes < GALV_FLOP_LAYERS ? g->n_nodes : GALV_FLOP_LAYERS;
    HAP_TRY(hap_stage_cuts_balanced(g, *L, cuts, err));
  }
  for (int32_t i = 0; i < *L - 1;) {
    hap_stage_graph *sg = NULL;
    hap_err quiet = {0};
    hap_status st = hap_stage_graph_build(g, cuts[i], cuts[i + 1], &sg, &quiet);
    hap_stage_graph_destroy(sg);
    if (st == HAP_ENOMEM)
      return hap_err_set(err, HAP_ENOMEM, "galvatron: out of memory");
    if (st == HAP_OK) {
      i++;
      continue;
    }
    memmove(cuts + i + 1, cuts + i + 2, (size_t)(*L - i - 1) * sizeof *cuts);
    (*L)--;
  }
  return HAP_OK;
}

static hap_status index_graph(galv *s) {
  const hap_graph *g = s->g;
  int32_t *producer = hap_pipe_producers(g);
  s->key = malloc((size_t)s->L * sizeof *s->key);
  s->layer_of_param = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *s->layer_of_param);
  if (producer == NULL || s->key == NULL || s->layer_of_param == NULL) {
    free(producer);
    return HAP_ENOMEM;
  }
  for (int32_t i = 0; i < s->L; i++)
    s->key[i] = hap_pipe_range_key(g, producer, s->cuts[i], s->cuts[i + 1]);
  free(producer);
  for (int32_t t = 0; t < g->n_tensors; t++) {
    s->layer_of_param[t] = -1;
    if (hap_strmap_put(&s->names, g->tensors[t].name, t) != 0)
      return HAP_ENOMEM;
  }
  for (int32_t i = 0; i < s->L; i++)
    for (int32_t k = s->cuts[i]; k < s->cuts[i + 1]; k++)
      for (int in = 0; in < g->nodes[k].n_inputs; in++) {
        int32_t t = g->nodes[k].inputs[in];
        if (g->tensors[t].kind == HAP_TENSOR_PARAMETER && s->layer_of_param[t] < 0)
          s->layer_of_param[t] = i;
      }
  return HAP_OK;
}

/* The stage programs' options of candidate cd (the real memory limit is the caller's). */
static hap_synth_options stage_options(galv *s, const hap_galv_candidate *cd) {
  hap_synth_options so = s->base;
  so.strategy = cd->tp == 1 ? HAP_STRATEGY_DP_EV : HAP_STRATEGY_MEGATRON_TP;
  so.tensor_parallel = cd->tp;
  so.sequence_parallel = HAP_SP_ON;
  so.policy.recompute = cd->ckpt;
  so.policy.zero = cd->zero;
  so.policy.micro_batches = cd->micro_batches;
  so.zero_store = zero_store;
  so.zero_store_ctx = s;
  return so;
}

/* Price every layer under DP and (when sdp) SDP on `group`; layers with one key are probed once.
 * A layer whose program cannot be made is left !ok. */
static void price_layers(galv *s, const hap_galv_candidate *cd, const hap_cluster *group,
                         bool sdp) {
  hap_synth_options so = stage_options(s, cd);
  so.memory_limit_bytes = 1e30; /* the dynamic program judges memory */
  for (int32_t i = 0; i < s->L; i++)
    for (int o = 0; o < 2; o++) {
      layer_cost *lc = cost_of(s, i, o);
      *lc = (layer_cost){0};
      if (o == 1 && !sdp)
        continue;
      int32_t same = -1;
      for (int32_t j = 0; j < i && same < 0; j++)
        if (s->key[j] == s->key[i])
          same = j;
      if (same >= 0) {
        *lc = *cost_of(s, same, o);
        continue;
      }
      s->all_sdp = o == 1;
      s->sdp = NULL;
      hap_stage_times times;
      double limit;
      hap_err quiet = {0};
      s->probes++;
      if (hap_pipe_stage_probe_peak(s->g, s->cuts[i], s->cuts[i + 1], group, cd->micro_batches, &so,
                                    &times, &lc->mem, &limit, &quiet) == HAP_OK)
        *lc = (layer_cost){true, times.fwd_s + times.bwd_s, times.tail_s, lc->mem};
      s->all_sdp = false;
    }
}

/* Bytes layer choice lc needs with f micro-batches in flight, the recompute working set aside. */
static double need_bytes(const layer_cost *lc, double f) {
  const hap_memory_breakdown *m = &lc->mem;
  return m->parameters + m->gradients + m->optimizer + (m->activations - m->recompute_working) * f;
}

/* Galvatron's dynamic program for the stage of layers [a, b) with f micro-batches in flight:
 * each layer DP or SDP (when sdp), least m * forward-backward + tail within the budget; sets
 * s->choice[a..b), the stage's time per micro-batch, tail and memory. false when nothing fits
 * (*bytes then the leanest choice's). */
static bool stage_dp(galv *s, int32_t a, int32_t b, double f, int32_t m, bool sdp, double *fb,
                     double *tail, double *bytes) {
  double working = 0, leanest = 0;
  for (int32_t i = a; i < b; i++) {
    double w = 0, least = HUGE_VAL;
    for (int o = 0; o < (sdp ? 2 : 1); o++)
      if (cost_of(s, i, o)->ok) {
        w = fmax(w, cost_of(s, i, o)->mem.recompute_working);
        least = fmin(least, need_bytes(cost_of(s, i, o), f));
      }
    working = fmax(working, w);
    leanest += least;
  }
  *bytes = leanest + working;
  double budget = s->limit - working;
  if (!(budget > 0) || !(leanest <= budget))
    return false;
  double unit = budget / GALV_BUCKETS;
  for (int32_t u = 0; u <= GALV_BUCKETS; u++)
    s->row[u] = u == 0 ? 0 : HUGE_VAL;
  for (int32_t i = a; i < b; i++) {
    uint8_t *back = s->back + (size_t)(i - a) * (GALV_BUCKETS + 1);
    for (int32_t u = 0; u <= GALV_BUCKETS; u++) {
      s->next_row[u] = HUGE_VAL;
      back[u] = 0;
    }
    for (int o = 0; o < (sdp ? 2 : 1); o++) {
      const layer_cost *lc = cost_of(s, i, o);
      if (!lc->ok)
        continue;
      double w = need_bytes(lc, f) / unit;
      int32_t wu = w > GALV_BUCKETS ? GALV_BUCKETS + 1 : (int32_t)ceil(w);
      double t = lc->fb_s * m + lc->tail_s;
      for (int32_t u = wu; u <= GALV_BUCKETS; u++)
        if (s->row[u - wu] + t < s->next_row[u]) {
          s->next_row[u] = s->row[u - wu] + t;
          back[u] = (uint8_t)o;
        }
    }
    double *swap = s->row;
    s->row = s->next_row;
    s->next_row = swap;
  }
  int32_t best = -1;
  for (int32_t u = 0; u <= GALV_BUCKETS; u++)
    if (isfinite(s->row[u]) && (best < 0 || s->row[u] < s->row[best]))
      best = u;
  if (best < 0)
    return false; /* the rounding up of every layer's units left no room */
  *fb = *tail = 0;
  *bytes = working;
  for (int32_t i = b - 1; i >= a; i--) {
    int o = s->back[(size_t)(i - a) * (GALV_BUCKETS + 1) + (size_t)best];
    const layer_cost *lc = cost_of(s, i, o);
    s->choice[i] = o == 1;
    *fb += lc->fb_s;
    *tail += lc->tail_s;
    *bytes += need_bytes(lc, f);
    best -= (int32_t)ceil(need_bytes(lc, f) / unit);
    best = best < 0 ? 0 : best;
  }
  return true;
}

/* The time stage [a, b) takes per micro-batch to send its boundary on and take the gradient
 * back, s (0 for the last stage). */
static double send_s(const galv *s, int32_t b, int32_t m) {
  if (b >= s->L || !(s->link.bandwidth_Bps > 0))
    return 0;
  double bytes = s->crossing[s->cuts[b]] * s->act_scale / m;
  return 2 * (s->link.latency_s + bytes / s->link.bandwidth_Bps);
}

/* Galvatron's cost of candidate cd (its layers priced) with stage k holding layers [first[k],
 * first[k+1]): every stage's dynamic program, then the pipeline's stage times per micro-batch
 * (compute plus the boundary's send and its gradient's return: in 1F1B's steady state a stage
 * waits for both) summed, plus (m - 1) times the slowest, plus the slowest tail. Sets cd->model_s
 * (HUGE_VAL when a stage does not fit), model_bytes, why, sdp_layers and s->choice. *binds: the
 * time-optimal choice of some stage does not fit. */
static void model_partition(galv *s, hap_galv_candidate *cd, const int32_t *first, bool sdp,
                            bool *binds) {
  int32_t p = cd->pp, m = cd->micro_batches;
  double sum = 0, slowest = 0, tail = 0;
  cd->model_s = 0;
  cd->model_bytes = 0;
  cd->sdp_layers = 0;
  cd->over_memory = false;
  cd->why[0] = '\0';
  *binds = false;
  for (int32_t k = 0; k < p; k++) {
    int32_t a = first[k], b = first[k + 1];
    double f = p - k < m ? p - k : m; /* 1F1B: stage k holds p - k micro-batches at its peak */
    for (int32_t i = a; i < b; i++)
      if (!cost_of(s, i, 0)->ok) {
        cd->model_s = HUGE_VAL;
        cd->model_bytes = 0;
        snprintf(cd->why, sizeof cd->why, "layer %d has no %s program on %d devices", (int)i,
                 cd->tp == 1 ? "dp-ev" : "megatron-tp", (int)(cd->tp * cd->dp));
        return;
      }
    /* does the fastest choice of every layer fit? */
    double fastest = 0, working = 0;
    for (int32_t i = a; i < b; i++) {
      int o = sdp && cost_of(s, i, 1)->ok &&
                      cost_of(s, i, 1)->fb_s * m + cost_of(s, i, 1)->tail_s <
                          cost_of(s, i, 0)->fb_s * m + cost_of(s, i, 0)->tail_s
                  ? 1
                  : 0;
      fastest += need_bytes(cost_of(s, i, o), f);
      working = fmax(working, cost_of(s, i, o)->mem.recompute_working);
    }
    *binds = *binds || fastest + working > s->limit;
    double fb, t, bytes;
    bool fits = stage_dp(s, a, b, f, m, sdp, &fb, &t, &bytes);
    cd->model_bytes = fmax(cd->model_bytes, bytes);
    if (!fits) {
      cd->model_s = HUGE_VAL;
      cd->over_memory = true;
      char need[32], limit[32];
      snprintf(cd->why, sizeof cd->why,
               "stage %d needs %s per device at the leanest (%s), the limit is %s", (int)k,
               hap_fmt_bytes(bytes, need, sizeof need),
               sdp ? "every layer sharded" : "no layer sharded",
               hap_fmt_bytes(s->limit, limit, sizeof limit));
      continue;
    }
    fb += send_s(s, b, m);
    sum += fb;
    slowest = fmax(slowest, fb);
    tail = fmax(tail, t);
  }
  if (cd->model_s == 0) {
    cd->model_s = sum + (m - 1) * slowest + tail;
    for (int32_t i = 0; i < s->L; i++)
      cd->sdp_layers += s->choice[i];
  }
}

/* The cut of the L layers into p contiguous stages whose largest forward-backward time (each
 * layer's DP price) is least (Galvatron-BMW's balancing of the stages' work): the least bound
 * that a greedy cut meets, by bisection; first[0..p]. */
static void balanced_partition(const galv *s, int32_t p, int32_t *first) {
  double lo = 0, hi = 0;
  for (int32_t i = 0; i < s->L; i++) {
    lo = fmax(lo, cost_of(s, i, 0)->fb_s);
    hi += cost_of(s, i, 0)->fb_s;
  }
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; it++) {
    double mid = 0.5 * (lo + hi), run = 0;
    int32_t stages = 1;
    for (int32_t i = 0; i < s->L; i++) {
      if (run + cost_of(s, i, 0)->fb_s > mid) {
        stages++;
        run = 0;
      }
      run += cost_of(s, i, 0)->fb_s;
    }
    if (stages <= p)
      hi = mid;
    else
      lo = mid;
  }
  /* the greedy cut under hi, then the last stages split so that every one of the p has a layer */
  int32_t k = 0;
  double run = 0;
  first[0] = 0;
  for (int32_t i = 0; i < s->L; i++) {
    bool must = s->L - i <= p - 1 - k; /* as many layers left as stages to fill */
    if (i > 0 && k < p - 1 && (run + cost_of(s, i, 0)->fb_s > hi || must)) {
      first[++k] = i;
      run = 0;
    }
    run += cost_of(s, i, 0)->fb_s;
  }
  for (int32_t j = k + 1; j <= p; j++)
    first[j] = s->L; /* not reached: L >= p */
}

/* model_partition under the even cut (Galvatron's) and the balanced one; the cheaper stays in
 * cd (its cut in cd->first_layer) and in s->choice. */
static void model_candidate(galv *s, hap_galv_candidate *cd, bool sdp, bool *binds) {
  int32_t p = cd->pp, even[HAP_PIPE_MAX_GROUPS + 1], bal[HAP_PIPE_MAX_GROUPS + 1];
  for (int32_t k = 0; k <= p; k++)
    even[k] = (int32_t)((int64_t)k * s->L / p);
  bool ok = true;
  for (int32_t i = 0; i < s->L; i++)
    ok = ok && cost_of(s, i, 0)->ok;
  model_partition(s, cd, even, sdp, binds);
  memcpy(cd->first_layer, even, sizeof even);
  if (!ok || p == 1)
    return;
  balanced_partition(s, p, bal);
  if (memcmp(bal, even, (size_t)(p + 1) * sizeof *bal) == 0)
    return;
  hap_galv_candidate other = *cd;
  bool other_binds;
  bool *kept = malloc((size_t)s->L * sizeof *kept);
  if (kept == NULL)
    return; /* the even cut stays */
  memcpy(kept, s->choice, (size_t)s->L * sizeof *kept);
  model_partition(s, &other, bal, sdp, &other_binds);
  if (other.model_s < cd->model_s ||
      (!isfinite(cd->model_s) && other.model_bytes < cd->model_bytes)) {
    *cd = other;
    memcpy(cd->first_layer, bal, sizeof bal);
    *binds = other_binds;
  } else {
    memcpy(s->choice, kept, (size_t)s->L * sizeof *kept);
  }
  free(kept);
}

/* Micro-batch counts for p stages of dp replicas: the policy's when it sets more than one; else
 * for one stage 1, and for a pipeline the largest of 4p, 2p and p whose micro-batch splits over
 * the replicas and one sample per replica (batch / dp, when larger: the least activations in
 * flight and the smallest bubble, the smallest kernels). Returns how many (0: the batch does not
 * split). */
static int micro_counts(const hap_graph *g, const hap_train_policy *pol, int32_t p, int32_t dp,
                        int32_t m[2]) {
  int64_t batch = hap_pipe_batch_of(g);
  if (batch <= 0 || batch % dp != 0)
    return 0;
  if (pol->micro_batches > 1) {
    m[0] = pol->micro_batches;
    return batch % ((int64_t)m[0] * dp) == 0;
  }
  int n = 0;
  for (int32_t f = p == 1 ? 1 : 4; f >= 1 && n == 0; f /= 2)
    if (batch % ((int64_t)f * p * dp) == 0)
      m[n++] = f * p;
  if (p > 1 && batch / dp <= HAP_POLICY_MAX_MICRO_BATCHES && (n == 0 || batch / dp > m[0]))
    m[n++] = (int32_t)(batch / dp);
  return n;
}

/* A copy of "galvatron" replacing *name; false on allocation failure. */
static bool rename_strategy(char **name) {
  static const char galvatron[] = "galvatron";
  char *copy = malloc(sizeof galvatron);
  if (copy == NULL)
    return false;
  memcpy(copy, galvatron, sizeof galvatron);
  free(*name);
  *name = copy;
  return true;
}

/* Estimate candidate ci as a 1F1B pipeline on the real devices with its per-layer choice. */
static hap_status estimate(galv *s, hap_galvatron *out, int ci) {
  hap_galv_candidate *cd = &out->cand[ci];
  hap_pipe_spec spec = {.stages = cd->pp,
                        .schedule = HAP_PIPE_1F1B,
                        .chunks = 1,
                        .micro_batches = cd->micro_batches,
                        .n_cuts = cd->pp + 1};
  for (int32_t k = 0; k <= cd->pp; k++)
    spec.cuts[k] = s->cuts[cd->first_layer[k]];
  hap_synth_options so = stage_options(s, cd);
  s->sdp = s->chosen + (size_t)ci * (size_t)s->L;
  hap_pipe_estimate *e = NULL;
  hap_err err = {0};
  hap_status st = hap_pipe_estimate_run(s->g, s->c, &spec, &so, &e, &err);
  s->sdp = NULL;
  if (st != HAP_OK) {
    snprintf(cd->why, sizeof cd->why, "%.190s", err.msg);
    return err.status == HAP_ENOMEM ? HAP_ENOMEM : HAP_OK;
  }
  cd->iteration_s = e->sim->makespan_s;
  cd->fits = true;
  for (int32_t k = 0; k < e->n_stages; k++) {
    cd->peak_bytes = fmax(cd->peak_bytes, e->stages[k].memory_bytes);
    cd->fits = cd->fits && e->stages[k].fits;
  }
  if (!cd->fits) {
    char need[32];
    snprintf(cd->why, sizeof cd->why,
             "estimated on the real devices a stage needs %s, over its limit",
             hap_fmt_bytes(cd->peak_bytes, need, sizeof need));
    hap_pipe_estimate_destroy(e);
    return HAP_OK;
  }
  bool named = rename_strategy(&e->pipeline->strategy);
  for (int32_t k = 0; named && k < e->pipeline->n_stages; k++)
    named = rename_strategy(&e->pipeline->stages[k].plan->strategy);
  if (!named) {
    hap_pipe_estimate_destroy(e);
    return HAP_ENOMEM;
  }
  out->best = ci;
  out->estimate = e;
  memcpy(out->sdp, s->chosen + (size_t)ci * (size_t)s->L, (size_t)s->L * sizeof *out->sdp);
  out->policy = so.policy;
  return HAP_OK;
}

/* Add candidate (p, t, m, ckpt, zero) priced on `group`; *binds as model_candidate's. */
static void add_candidate(galv *s, hap_galvatron *out, const hap_cluster *group, int32_t p,
                          int32_t t, int32_t m, hap_recompute ckpt, int32_t zero, bool *binds) {
  *binds = false;
  if (out->n_cand == HAP_GALV_MAX_CANDIDATES)
    return;
  int32_t d = s->c->n_devices / p;
  hap_galv_candidate *cd = &out->cand[out->n_cand++];
  *cd = (hap_galv_candidate){
      .pp = p, .tp = t, .dp = d / t, .micro_batches = m, .ckpt = ckpt, .zero = zero};
  bool sdp = t == 1 && d > 1 && !(s->forced & HAP_POLICY_ZERO);
  price_layers(s, cd, group, sdp);
  model_candidate(s, cd, sdp, binds);
  memcpy(s->chosen + (size_t)(out->n_cand - 1) * (size_t)s->L, s->choice,
         (size_t)s->L * sizeof *s->choice);
}

static int cmp_model(const void *a, const void *b, void *cand) {
  const hap_galv_candidate *c = cand;
  double x = c[*(const int *)a].model_s, y = c[*(const int *)b].model_s;
  return (x > y) - (x < y);
}

/* Insertion sort of candidate indices by modelled time (few candidates; qsort_r is not C17). */
static void rank(int *idx, int n, const hap_galv_candidate *cand) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && cmp_model(&idx[j - 1], &idx[j], (void *)cand) > 0; j--) {
      int x = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = x;
    }
}

static hap_status run(galv *s, hap_galvatron *out) {
  const hap_cluster *c = s->c;
  int32_t N = c->n_devices, M = c->hosts[0].n_devices;
  for (int32_t h = 1; h < c->n_hosts; h++)
    M = c->hosts[h].n_devices < M ? c->hosts[h].n_devices : M;
  int32_t *devices = malloc((size_t)N * sizeof *devices);
  double *per_host = malloc((size_t)c->n_hosts * sizeof *per_host);
  if (devices == NULL || per_host == NULL) {
    free(devices);
    free(per_host);
    return HAP_ENOMEM;
  }
  for (int32_t i = 0; i < N; i++)
    devices[i] = i;
  hap_status st = HAP_OK;
  bool ckpt_free = !(s->forced & HAP_POLICY_RECOMPUTE), zero_free = !(s->forced & HAP_POLICY_ZERO);
  for (int32_t p = 1; p <= N && p <= s->L && p <= HAP_PIPE_MAX_GROUPS && st == HAP_OK; p *= 2) {
    if (N % p != 0)
      break;
    if (s->pin.pp > 0 && p != s->pin.pp)
      continue;
    int32_t d = N / p;
    hap_cluster *group = NULL;
    hap_err quiet = {0};
    if (hap_cluster_of_devices(c, devices, d, "galvatron-group", &group, &quiet) != HAP_OK) {
      st = quiet.status == HAP_ENOMEM ? HAP_ENOMEM : HAP_OK;
      continue;
    }
    s->link = p > 1 ? hap_pipe_group_link(c, 0, d, d, per_host) : (hap_pipe_link){0, 0};
    for (int32_t t = 1; t <= d && t <= M; t *= 2) {
      if (d % t != 0)
        break;
      if (s->pin.tp > 0 && t != s->pin.tp)
        continue;
      int32_t m[2];
      int n_m = micro_counts(s->g, &s->base.policy, p, d / t, m);
      /* the plain point first; ZeRO-1, then checkpointing, only while memory binds */
      hap_recompute ckpt0 = ckpt_free ? HAP_RECOMPUTE_NONE : s->base.policy.recompute;
      int32_t zero0 = zero_free ? 0 : s->base.policy.zero;
      bool zero1 = zero_free && t > 1 && d / t > 1 && s->base.policy.optimizer != HAP_OPT_SGD;
      for (int i = 0; i < n_m; i++) {
        bool binds;
        add_candidate(s, out, group, p, t, m[i], ckpt0, zero0, &binds);
        if (binds && zero1)
          add_candidate(s, out, group, p, t, m[i], ckpt0, 1, &binds);
        if (binds && ckpt_free)
          add_candidate(s, out, group, p, t, m[i], HAP_RECOMPUTE_FULL, zero0, &binds);
        if (binds && ckpt_free && zero1)
          add_candidate(s, out, group, p, t, m[i], HAP_RECOMPUTE_FULL, 1, &binds);
      }
    }
    hap_cluster_destroy(group);
  }
  free(devices);
  free(per_host);
  if (st != HAP_OK)
    return st;
  /* Galvatron's choice: the least modelled time; the first of the ranking that fits when
   * estimated on the real devices is the plan */
  int idx[HAP_GALV_MAX_CANDIDATES];
  int n = 0;
  for (int i = 0; i < out->n_cand; i++)
    if (isfinite(out->cand[i].model_s))
      idx[n++] = i;
  rank(idx, n, out->cand);
  for (int i = 0; i < n && i < HAP_GALV_ESTIMATES && out->best < 0 && st == HAP_OK; i++)
    st = estimate(s, out, idx[i]);
  return st;
}

hap_status hap_galvatron_search(const hap_graph *g, const hap_cluster *c,
                                const hap_synth_options *o, uint32_t forced,
                                const hap_galvatron_spec *pin, hap_galvatron *out, hap_err *err) {
  memset(out, 0, sizeof *out);
  out->best = -1;
  double t0 = now_s();
  galv s = {.g = g, .c = c, .base = *o, .forced = forced, .cuts = out->cuts};
  if (pin != NULL)
    s.pin = *pin;
  s.base.rescore = NULL;
  s.base.progress = NULL;
  s.base.cost_bound_s = 0;
  s.base.zero_store = NULL;
  if (!(forced & HAP_POLICY_MICRO_BATCHES))
    s.base.policy.micro_batches = 1;
  s.limit = o->memory_limit_bytes;
  for (int32_t d = 0; d < c->n_devices && !(o->memory_limit_bytes > 0); d++)
    if (s.limit == 0 || c->devices[d].memory_bytes < s.limit)
      s.limit = c->devices[d].memory_bytes;
  out->limit_bytes = s.limit;
  HAP_TRY(find_layers(g, out->cuts, &s.L, err));
  out->layers = s.L;
  hap_strmap_init(&s.names);
  s.cost = calloc((size_t)s.L * 2, sizeof *s.cost);
  s.choice = calloc((size_t)s.L, sizeof *s.choice);
  s.chosen = calloc((size_t)s.L * HAP_GALV_MAX_CANDIDATES, sizeof *s.chosen);
  s.back = malloc((size_t)s.L * (GALV_BUCKETS + 1));
  s.row = malloc((GALV_BUCKETS + 1) * sizeof *s.row);
  s.next_row = malloc((GALV_BUCKETS + 1) * sizeof *s.next_row);
  s.crossing = malloc(((size_t)g->n_nodes + 1) * sizeof *s.crossing);
  s.act_scale = (double)hap_dtype_size(hap_policy_compute_dtype(&o->policy)) / 4;
  hap_status st = s.cost && s.choice && s.chosen && s.back && s.row && s.next_row && s.crossing
                      ? index_graph(&s)
                      : HAP_ENOMEM;
  if (st == HAP_OK)
    st = hap_stage_crossing_bytes(g, s.crossing, err);
  if (st == HAP_OK)
    st = run(&s, out);
  out->probes = s.probes;
  out->seconds = now_s() - t0;
  hap_strmap_free(&s.names);
  free(s.key);
  free(s.layer_of_param);
  free(s.cost);
  free(s.choice);
  free(s.chosen);
  free(s.back);
  free(s.row);
  free(s.next_row);
  free(s.crossing);
  if (st != HAP_OK) {
    hap_galvatron_free(out);
    return hap_err_set(err, st, "galvatron: out of memory");
  }
  return HAP_OK;
}

void hap_galvatron_free(hap_galvatron *r) {
  if (r == NULL)
    return;
  hap_pipe_estimate_destroy(r->estimate);
  r->estimate = NULL;
  r->best = -1;
}

void hap_galv_candidate_describe(const hap_galv_candidate *cd, int32_t layers, char *buf,
                                 size_t len) {
  snprintf(buf, len, "pp=%d,tp=%d,dp=%d,m=%d,ckpt=%s,zero=%d,sdp=%d/%d", (int)cd->pp, (int)cd->tp,
           (int)cd->dp, (int)cd->micro_batches, hap_recompute_name(cd->ckpt), (int)cd->zero,
           (int)cd->sdp_layers, (int)layers);
}
