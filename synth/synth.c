/* synth.c — hap_synthesize: initial ratios, the search/balance alternation, and plan emission. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "plan/replica.h"
#include "synth_internal.h"

static const char *const strategy_names[HAP_STRATEGY_COUNT] = {"hap", "dp-ev", "dp-cp",
                                                               "megatron-tp", "alpa"};

const char *hap_strategy_name(hap_strategy s) {
  return (unsigned)s < HAP_STRATEGY_COUNT ? strategy_names[s] : "?";
}

hap_status hap_strategy_parse(const char *s, hap_strategy *out) {
  for (int i = 0; i < HAP_STRATEGY_COUNT; i++) {
    if (strcmp(s, strategy_names[i]) == 0) {
      *out = (hap_strategy)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

static const char *const sfb_use_names[HAP_SFB_USE_COUNT] = {"auto", "off", "all"};

const char *hap_sfb_use_name(hap_sfb_use u) {
  return (unsigned)u < HAP_SFB_USE_COUNT ? sfb_use_names[u] : "?";
}

hap_status hap_sfb_use_parse(const char *s, hap_sfb_use *out) {
  for (int i = 0; s != NULL && i < HAP_SFB_USE_COUNT; i++) {
    if (strcmp(s, sfb_use_names[i]) == 0) {
      *out = (hap_sfb_use)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every segment the same split: even, or proportional to each device's sustained FLOP/s in the
 * graph's floating-point type (HAP's compute-proportional start). */
static void initial_ratios(const syn_ctx *x, bool proportional, double *ratios) {
  hap_dtype dt = x->g->tensors[x->g->loss].dtype;
  double sum = 0;
  for (int32_t i = 0; i < x->n; i++) {
    const hap_device *d = &x->c->devices[i];
    double f = d->sustained_flops[dt] > 0 ? d->sustained_flops[dt] : d->sustained_flops[HAP_F32];
    ratios[i] = proportional ? f : 1;
    sum += ratios[i];
  }
  for (int32_t i = 0; i < x->n; i++)
    ratios[i] /= sum;
  for (int32_t s = 1; s < x->n_segments; s++)
    memcpy(ratios + (size_t)s * (size_t)x->n, ratios, (size_t)x->n * sizeof *ratios);
}

/* "parameters 5.2 GiB, gradients ..., workspace 0 B" into buf. */
static const char *parts_str(const hap_memory_breakdown *m, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int k = 0; k < HAP_MEMORY_PARTS && o < len; k++) {
    char b[32];
    const char *name = k == 2   ? "optimizer state"
                       : k == 4 ? "comm buffers"
                                : hap_memory_part_name(k);
    o += (size_t)snprintf(buf + o, len - o, "%s%s %s", k ? ", " : "", name,
                          hap_fmt_bytes(hap_memory_part_get(m, k), b, sizeof b));
  }
  return buf;
}

/* What device d must hold for plan p to run: its recorded memory, with the kept activations of
 * as many micro-batches as a pipeline stage has in flight (hap_synth_options.activation_copies),
 * bytes. */
static hap_memory_breakdown device_need(const syn_ctx *x, const hap_plan *p, int32_t d) {
  return hap_memory_in_flight(&p->device_memory[d], x->act_copies);
}

/* The device of the leanest program that exceeds its limit the most (its breakdown into stats),
 * replayed under the installed ratios. */
static void leanest_breakdown(syn_ctx *x, const int8_t *prog, hap_synth_stats *stats) {
  hap_plan *p = hap_plan_create("leanest", "", 0, "", 0, x->n, x->n_segments);
  double cost;
  hap_err quiet = {0};
  if (p == NULL || syn_replay(x, prog, p, &cost, &quiet) != HAP_OK) {
    hap_plan_destroy(p);
    return;
  }
  int32_t worst = 0;
  double worst_over = -HUGE_VAL;
  for (int32_t d = 0; d < x->n; d++) {
    hap_memory_breakdown need = device_need(x, p, d);
    double over = hap_memory_total(&need) - x->mem_limit[x->dev_class[d]];
    if (over > worst_over) {
      worst_over = over;
      worst = d;
    }
  }
  stats->no_fit = true;
  stats->leanest_device = worst;
  stats->leanest_limit = x->mem_limit[x->dev_class[worst]];
  stats->leanest = device_need(x, p, worst);
  hap_plan_destroy(p);
}

/* Nothing fit in the memory limit. The program needing the least memory (a search ordered by
 * memory) either fits after all (the time-ordered searches pruned their way past it), and then it
 * is the answer, or it does not, and the error says how much memory any program needs and what
 * it is made of on the device that is most over its limit. */
static hap_status least_memory_program(syn_ctx *x, const hap_synth_options *o,
                                       hap_synth_stats *stats, int8_t *prog, double *cost,
                                       hap_err *err) {
  double *saved = malloc((size_t)x->n_classes * sizeof *saved);
  if (saved == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory");
  memcpy(saved, x->mem_limit, (size_t)x->n_classes * sizeof *saved);
  for (int32_t c = 0; c < x->n_classes; c++)
    x->mem_limit[c] = HUGE_VAL;
  x->minimize_memory = true;
  double peak = 0;
  hap_err quiet = {0};
  hap_status st = syn_search(x, o, stats->rounds, prog, cost, &peak, stats, &quiet);
  x->minimize_memory = false;
  memcpy(x->mem_limit, saved, (size_t)x->n_classes * sizeof *saved);
  double limit = HUGE_VAL;
  for (int32_t c = 0; c < x->n_classes; c++)
    limit = fmin(limit, saved[c]);
  free(saved);
  if (st != HAP_OK)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "no program reaches the loss '%s' at a finite cost: an op has no usable "
                       "sharding variant, or a device cannot run the model's dtype",
                       x->g->tensors[x->g->loss].name);
  if (peak <= limit)
    return HAP_OK;
  leanest_breakdown(x, prog, stats);
  char have[32], need[32], pol[160], parts[400], over[32], lim[32];
  const hap_memory_breakdown *m = &stats->leanest;
  double total = hap_memory_total(m);
  return hap_err_set(
      err, HAP_EINVAL,
      "no program fits in %s per device (policy %s); the leanest program found "
      "needs %s per device, on %s %s over its %s: %s: raise --memory-limit, use "
      "more devices or a leaner policy",
      hap_fmt_bytes(limit, have, sizeof have), hap_policy_brief(&x->pol, pol, sizeof pol),
      hap_fmt_bytes(peak, need, sizeof need),
      stats->no_fit ? x->c->devices[stats->leanest_device].model : "?",
      hap_fmt_bytes(fmax(0, total - stats->leanest_limit), over, sizeof over),
      hap_fmt_bytes(stats->leanest_limit, lim, sizeof lim), parts_str(m, parts, sizeof parts));
}

/* Price a program under the installed ratios and check it fits every device's memory (the LP's
 * continuous ratios become integer shard lengths, which can tip a device over). */
static hap_status replay_fits(syn_ctx *x, const int8_t *prog, double *cost, bool *fits,
                              hap_err *err) {
  hap_plan *p = hap_plan_create("check", "", 0, "", 0, x->n, x->n_segments);
  if (p == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory checking a plan");
  hap_status st = syn_replay(x, prog, p, cost, err);
  *fits = true;
  for (int32_t i = 0; st == HAP_OK && i < x->n; i++) {
    hap_memory_breakdown need = device_need(x, p, i);
    if (hap_memory_total(&need) > x->mem_limit[x->dev_class[i]])
      *fits = false;
  }
  hap_plan_destroy(p);
  return st;
}

hap_synth_options syn_baseline_options(const hap_synth_options *o, hap_strategy b) {
  hap_synth_options bo = *o;
  bo.strategy = b;
  bo.rescore = NULL;
  bo.progress = NULL;
  return bo;
}

bool syn_keep_if_faster(hap_plan **plan, double *best, hap_plan *cand, double score) {
  char *name = score < *best ? strdup(hap_strategy_name(HAP_STRATEGY_HAP)) : NULL;
  if (name == NULL) {
    hap_plan_destroy(cand);
    return false;
  }
  free(cand->strategy);
  cand->strategy = name;
  *best = score;
  hap_plan_destroy(*plan);
  *plan = cand;
  return true;
}

/* Segment by segment, in order: take row s of lp_ratios into best_ratios where the program then
 * costs less and still fits (*best, *improved updated). The ratios installed in x on return are
 * best_ratios. */
static hap_status adopt_segment_rows(syn_ctx *x, const int8_t *prog, const double *lp_ratios,
                                     double *best_ratios, double *best, bool *improved,
                                     hap_err *err) {
  size_t n = (size_t)x->n, nr = (size_t)x->n_segments * n;
  double *trial = malloc(nr * sizeof *trial);
  if (trial == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory balancing segments");
  memcpy(trial, best_ratios, nr * sizeof *trial);
  hap_status st = HAP_OK;
  for (int32_t s = 0; s < x->n_segments && st == HAP_OK; s++) {
    if (memcmp(trial + (size_t)s * n, lp_ratios + (size_t)s * n, n * sizeof *trial) == 0)
      continue;
    memcpy(trial + (size_t)s * n, lp_ratios + (size_t)s * n, n * sizeof *trial);
    double cost;
    bool fits = false;
    if ((st = syn_set_ratios(x, trial, err)) == HAP_OK &&
        (st = replay_fits(x, prog, &cost, &fits, err)) == HAP_OK && fits &&
        cost < *best * (1 - 1e-12)) {
      *best = cost;
      *improved = true;
      memcpy(best_ratios, trial, nr * sizeof *trial);
    } else {
      memcpy(trial + (size_t)s * n, best_ratios + (size_t)s * n, n * sizeof *trial);
    }
  }
  if (st == HAP_OK)
    st = syn_set_ratios(x, best_ratios, err);
  free(trial);
  return st;
}

/* Improve the ratios for a fixed program (the LP); false when nothing better is known. */
bool syn_balance(syn_ctx *x, const int8_t *variants, double *ratios, hap_err *err);

hap_status hap_synthesize(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                          hap_plan **out, hap_synth_stats *stats, hap_err *err) {
  if (o != NULL && o->strategy == HAP_STRATEGY_MEGATRON_TP) {
    double t0 = now_s();
    hap_synth_stats local_stats;
    if (stats == NULL)
      stats = &local_stats;
    memset(stats, 0, sizeof *stats);
    hap_status st = syn_megatron(g, c, o, out, stats, err);
    stats->seconds = now_s() - t0;
    return st;
  }
  if (o != NULL && o->strategy == HAP_STRATEGY_ALPA)
    return syn_alpa(g, c, o, out, stats, err);
  return syn_synthesize_flat(g, c, o, out, stats, err);
}

hap_status syn_synthesize_flat(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                               hap_plan **out, hap_synth_stats *stats, hap_err *err) {
  return syn_synthesize_replica(g, c, o, NULL, out, stats, err);
}

hap_status syn_synthesize_replica(const hap_graph *g, const hap_cluster *c,
                                  const hap_synth_options *o, const hap_group *replica_groups,
                                  hap_plan **out, hap_synth_stats *stats, hap_err *err) {
  return syn_synthesize_replica_program(g, c, o, replica_groups, out, NULL, stats, err);
}

/* The context that prices g on c under o's policy (synth_internal.h). */
hap_status syn_ctx_open(syn_ctx *x, const hap_graph *g, const hap_cluster *c,
                        const hap_synth_options *o, const hap_group *replica_groups, hap_graph **pg,
                        hap_err *err) {
  *pg = NULL;
  hap_train_policy pol = o ? o->policy : hap_policy_default();
  if (pol.micro_batches == 0)
    pol.micro_batches = 1;
  HAP_TRY(hap_policy_check(&pol, err));
  HAP_TRY(hap_graph_for_policy(g, 1, &pol, pg, err));
  hap_strategy strategy = o ? o->strategy : HAP_STRATEGY_HAP;
  hap_status st =
      syn_ctx_init(x, *pg ? *pg : g, c, strategy, o ? o->sequence_parallel : HAP_SP_FREE,
                   o ? o->memory_limit_bytes : 0, err);
  if (st == HAP_OK) {
    x->replica_groups = replica_groups;
    x->sfb = o != NULL ? o->sfb : HAP_SFB_USE_AUTO;
    x->zero_store = o != NULL ? o->zero_store : NULL;
    x->zero_store_ctx = o != NULL ? o->zero_store_ctx : NULL;
    x->act_copies = o && o->activation_copies > 1 ? o->activation_copies : 1;
    x->cost_bound = o && o->cost_bound_s > 0 ? o->cost_bound_s : 0;
    st = syn_ctx_set_policy(x, &pol, replica_groups ? replica_groups[0].n : 1, err);
    if (st != HAP_OK)
      syn_ctx_free(x);
  }
  if (st != HAP_OK) {
    hap_graph_destroy(*pg);
    *pg = NULL;
  }
  return st;
}

hap_status syn_price_replica(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                             const hap_group *replica_groups, const int8_t *variants,
                             const double *ratios, hap_plan **out, hap_err *err) {
  *out = NULL;
  uint64_t gd, cd;
  HAP_TRY(hap_graph_digest(g, &gd, err));
  HAP_TRY(hap_cluster_digest(c, &cd, err));
  hap_graph *pg = NULL;
  syn_ctx x;
  HAP_TRY(syn_ctx_open(&x, g, c, o, replica_groups, &pg, err));
  hap_status st = HAP_OK;
  hap_plan *p = hap_plan_create(hap_strategy_name(o ? o->strategy : HAP_STRATEGY_HAP), g->name, gd,
                                c->name, cd, x.n, x.n_segments);
  double cost = 0;
  if (p == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "out of memory pricing a program");
  if (st == HAP_OK) {
    memcpy(p->ratios, ratios, (size_t)x.n_segments * (size_t)x.n * sizeof *ratios);
    p->policy = x.pol;
    st = syn_set_ratios(&x, ratios, err);
  }
  if (st == HAP_OK)
    st = syn_replay(&x, variants, p, &cost, err);
  syn_ctx_free(&x);
  hap_graph_destroy(pg);
  if (st != HAP_OK) {
    hap_plan_destroy(p);
    return st;
  }
  *out = p;
  return HAP_OK;
}

hap_status syn_synthesize_replica_program(const hap_graph *g, const hap_cluster *c,
                                          const hap_synth_options *o,
                                          const hap_group *replica_groups, hap_plan **out,
                                          int8_t *variants, hap_synth_stats *stats, hap_err *err) {
  *out = NULL;
  hap_synth_stats local_stats;
  if (stats == NULL)
    stats = &local_stats;
  memset(stats, 0, sizeof *stats);
  double t0 = now_s();
  hap_strategy strategy = o ? o->strategy : HAP_STRATEGY_HAP;
  int max_rounds = o && o->max_rounds > 0 ? o->max_rounds : 8;
  if (g->loss < 0 || c->n_devices < 1)
    return hap_err_set(err, HAP_EINVAL, "synthesis needs a validated graph and cluster");
  uint64_t gd, cd;
  HAP_TRY(hap_graph_digest(g, &gd, err));
  HAP_TRY(hap_cluster_digest(c, &cd, err));

  hap_graph *pg = NULL; /* the graph the kernels run: one micro-batch, compute precision */
  syn_ctx x;
  HAP_TRY(syn_ctx_open(&x, g, c, o, replica_groups, &pg, err));
  size_t nr = (size_t)x.n_segments * (size_t)x.n;
  double *ratios = malloc(nr * sizeof *ratios);
  double *best_ratios = malloc(nr * sizeof *best_ratios);
  int8_t *prog = malloc((size_t)(g->n_nodes ? g->n_nodes : 1));
  int8_t *best_prog = malloc((size_t)(g->n_nodes ? g->n_nodes : 1));
  hap_plan *plan = NULL;
  hap_status st = HAP_OK;
  double best = HUGE_VAL;
  enum { MAX_STARTS = 2 };
  int8_t *cand_prog[MAX_STARTS] = {NULL, NULL}; /* each starting point's best pair */
  double *cand_ratios[MAX_STARTS] = {NULL, NULL};
  double cand_cost[MAX_STARTS] = {HUGE_VAL, HUGE_VAL};
  hap_err no_fit_err = {0}; /* a starting point under whose ratios no program fit */
  hap_synth_stats no_fit_stats = {0};
  bool have_no_fit = false;
  if (!ratios || !best_ratios || !prog || !best_prog) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory synthesising");
    goto out;
  }

  /* Starting points: compute-proportional and even ratios (the baselines' own), so the result is
   * never worse than either data-parallel baseline under this cost model. Each start's best pair
   * is a candidate; the re-scoring hook, when given, picks among them. */
  int n_starts = strategy == HAP_STRATEGY_HAP ? 2 : 1;
  for (int start = 0; start < n_starts; start++) {
    best = HUGE_VAL; /* per start; candidates are compared at the end */
    bool proportional =
        strategy == HAP_STRATEGY_DP_CP || (strategy == HAP_STRATEGY_HAP && start == 0);
    initial_ratios(&x, proportional, ratios);
    for (int round = 0; round < max_rounds; round++) {
      if ((st = syn_set_ratios(&x, ratios, err)) != HAP_OK)
        goto out;
      double cost;
      st = syn_search(&x, o, stats->rounds, prog, &cost, NULL, stats, err);
      if (st != HAP_OK && stats->over_bound)
        goto out; /* nothing beats the bound: no leaner or later search will */
      if (st == HAP_EUNSUPPORTED) {
        /* Memory may bind: search again keeping leaner states beside cheaper ones (bounded). */
        hap_err retry = {0};
        x.keep_leaner = true;
        x.max_generated = o && o->leaner_states > 0 ? o->leaner_states : 1000000;
        st = syn_search(&x, o, stats->rounds, prog, &cost, NULL, stats, &retry);
        x.keep_leaner = false;
        x.max_generated = 0;
        if (st != HAP_OK) {
          hap_err_clear(err);
          st = least_memory_program(&x, o, stats, prog, &cost, err);
        }
      }
      if (st != HAP_OK && (isfinite(best) || (start > 0 && cand_prog[0] != NULL))) {
        hap_err_clear(err); /* this starting point found nothing; keep an earlier one's plan */
        break;
      }
      if (st != HAP_OK && stats->no_fit && start + 1 < n_starts) {
        /* Nothing fits under these ratios; the next start's (even) ratios may fit (a
         * compute-proportional split loads the fast devices' memory): try them, and keep this
         * error in case they do not. */
        no_fit_err = *err;
        no_fit_stats = *stats;
        have_no_fit = true;
        hap_err_clear(err);
        stats->no_fit = false;
        st = HAP_OK;
        break;
      }
      if (st != HAP_OK && have_no_fit &&
          (!stats->no_fit || hap_memory_total(&no_fit_stats.leanest) - no_fit_stats.leanest_limit <
                                 hap_memory_total(&stats->leanest) - stats->leanest_limit)) {
        *err = no_fit_err; /* the earlier start's leanest program was leaner: report it */
        st = no_fit_err.status;
        stats->no_fit = true;
        stats->leanest_device = no_fit_stats.leanest_device;
        stats->leanest_limit = no_fit_stats.leanest_limit;
        stats->leanest = no_fit_stats.leanest;
      }
      if (st != HAP_OK)
        goto out;
      stats->rounds++;
      if (stats->rounds == 1)
        stats->initial_s = cost;
      if (cost < best * (1 - 1e-12)) {
        best = cost;
        memcpy(best_ratios, ratios, nr * sizeof *ratios);
        memcpy(best_prog, prog, (size_t)g->n_nodes);
      } else if (round > 0) {
        break; /* the alternation stopped improving */
      }
      if (strategy != HAP_STRATEGY_HAP || stats->interrupted)
        break;
      /* Re-balance the ratios for this program; keep them if the program got cheaper. */
      if (!syn_balance(&x, prog, ratios, err))
        break;
      if ((st = syn_set_ratios(&x, ratios, err)) != HAP_OK)
        goto out;
      double balanced;
      bool fits = false;
      if ((st = replay_fits(&x, prog, &balanced, &fits, err)) != HAP_OK)
        goto out;
      if (fits && balanced < best * (1 - 1e-12)) {
        best = balanced;
        memcpy(best_ratios, ratios, nr * sizeof *ratios);
        memcpy(best_prog, prog, (size_t)g->n_nodes);
      } else {
        /* The LP's ratios as a whole lost (rounding to whole granules, what it linearises):
         * some segments' rows alone may still win. */
        bool improved = false;
        if (x.n_segments > 1 && (st = adopt_segment_rows(&x, prog, ratios, best_ratios, &best,
                                                         &improved, err)) != HAP_OK)
          goto out;
        if (!improved)
          break;
        memcpy(best_prog, prog, (size_t)g->n_nodes);
        memcpy(ratios, best_ratios, nr * sizeof *ratios);
      }
    }
    if (isfinite(best)) {
      cand_prog[start] = malloc((size_t)(g->n_nodes ? g->n_nodes : 1));
      cand_ratios[start] = malloc(nr * sizeof *best_ratios);
      if (cand_prog[start] == NULL || cand_ratios[start] == NULL) {
        st = hap_err_set(err, HAP_ENOMEM, "out of memory synthesising");
        goto out;
      }
      memcpy(cand_prog[start], best_prog, (size_t)g->n_nodes);
      memcpy(cand_ratios[start], best_ratios, nr * sizeof *best_ratios);
      cand_cost[start] = best;
    }
    if (stats->interrupted)
      break;
  }

  /* Emit each candidate (program, ratios) pair, priced again under exactly those ratios, and keep
   * the best by the synthesizer's cost or, with a hook, by the hook's. */
  double best_score = HUGE_VAL;
  for (int k = 0; k < n_starts; k++) {
    if (cand_prog[k] == NULL)
      continue;
    if ((st = syn_set_ratios(&x, cand_ratios[k], err)) != HAP_OK)
      goto out;
    hap_plan *p =
        hap_plan_create(hap_strategy_name(strategy), g->name, gd, c->name, cd, x.n, x.n_segments);
    if (p == NULL) {
      st = hap_err_set(err, HAP_ENOMEM, "out of memory emitting the plan");
      goto out;
    }
    memcpy(p->ratios, cand_ratios[k], nr * sizeof *best_ratios);
    p->policy = x.pol;
    double emitted;
    if ((st = syn_replay(&x, cand_prog[k], p, &emitted, err)) != HAP_OK) {
      hap_plan_destroy(p);
      goto out;
    }
    double score = o && o->rescore ? o->rescore(o->rescore_ctx, p, g, c) : cand_cost[k];
    if (score < best_score) {
      best_score = score;
      hap_plan_destroy(plan);
      plan = p;
      if (variants != NULL)
        memcpy(variants, cand_prog[k], (size_t)g->n_nodes);
    } else {
      hap_plan_destroy(p);
    }
  }
  /* The baselines' programs are in HAP's space; the search ranks by the additive estimate, the
   * hook by its own model (overlap), under which a baseline may win: offer them to it too. */
  if (plan != NULL && strategy == HAP_STRATEGY_HAP && o != NULL && o->rescore != NULL &&
      !stats->interrupted) {
    for (int b = HAP_STRATEGY_DP_EV; b <= HAP_STRATEGY_DP_CP; b++) {
      hap_synth_options bo = syn_baseline_options(o, (hap_strategy)b);
      hap_plan *bp = NULL;
      hap_synth_stats bs;
      hap_err berr = {0};
      if (hap_synthesize(g, c, &bo, &bp, &bs, &berr) != HAP_OK)
        continue; /* e.g. it does not fit in memory */
      stats->states_expanded += bs.states_expanded;
      stats->states_generated += bs.states_generated;
      syn_keep_if_faster(&plan, &best_score, bp, o->rescore(o->rescore_ctx, bp, g, c));
    }
  }
  if (plan == NULL) {
    st = hap_err_set(err, HAP_EUNSUPPORTED, "no plan was found");
    goto out;
  }
  *out = plan;
  plan = NULL;
out:
  for (int k = 0; k < MAX_STARTS; k++) {
    free(cand_prog[k]);
    free(cand_ratios[k]);
  }
  stats->seconds = now_s() - t0;
  hap_plan_destroy(plan);
  free(ratios);
  free(best_ratios);
  free(prog);
  free(best_prog);
  syn_ctx_free(&x);
  hap_graph_destroy(pg);
  return st;
}
