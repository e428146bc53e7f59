/* synth.c — hap_synthesize: initial ratios, the search/balance alternation, and plan emission. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "synth_internal.h"

static const char *const strategy_names[HAP_STRATEGY_COUNT] = {"hap", "dp-ev", "dp-cp"};

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

/* Improve the ratios for a fixed program (the LP); false when nothing better is known. */
bool syn_balance(syn_ctx *x, const int8_t *variants, double *ratios, hap_err *err);

hap_status hap_synthesize(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                          hap_plan **out, hap_synth_stats *stats, hap_err *err) {
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

  syn_ctx x;
  HAP_TRY(syn_ctx_init(&x, g, c, strategy, err));
  size_t nr = (size_t)x.n_segments * (size_t)x.n;
  double *ratios = malloc(nr * sizeof *ratios);
  double *best_ratios = malloc(nr * sizeof *best_ratios);
  int8_t *prog = malloc((size_t)(g->n_nodes ? g->n_nodes : 1));
  int8_t *best_prog = malloc((size_t)(g->n_nodes ? g->n_nodes : 1));
  hap_plan *plan = NULL;
  hap_status st = HAP_OK;
  double best = HUGE_VAL;
  if (!ratios || !best_ratios || !prog || !best_prog) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory synthesising");
    goto out;
  }

  /* Starting points: compute-proportional and even ratios (the baselines' own), so the result is
   * never worse than either data-parallel baseline under this cost model. */
  int n_starts = strategy == HAP_STRATEGY_HAP ? 2 : 1;
  for (int start = 0; start < n_starts; start++) {
    bool proportional =
        strategy == HAP_STRATEGY_DP_CP || (strategy == HAP_STRATEGY_HAP && start == 0);
    initial_ratios(&x, proportional, ratios);
    for (int round = 0; round < max_rounds; round++) {
      if ((st = syn_set_ratios(&x, ratios, err)) != HAP_OK)
        goto out;
      double cost;
      if ((st = syn_search(&x, o, stats->rounds, prog, &cost, stats, err)) != HAP_OK)
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
      if ((st = syn_replay(&x, prog, NULL, &balanced, err)) != HAP_OK)
        goto out;
      if (balanced < best * (1 - 1e-12)) {
        best = balanced;
        memcpy(best_ratios, ratios, nr * sizeof *ratios);
        memcpy(best_prog, prog, (size_t)g->n_nodes);
      } else {
        break;
      }
    }
    if (stats->interrupted)
      break;
  }

  /* Emit the best (program, ratios) pair, priced again under exactly those ratios. */
  if ((st = syn_set_ratios(&x, best_ratios, err)) != HAP_OK)
    goto out;
  plan = hap_plan_create(hap_strategy_name(strategy), g->name, gd, c->name, cd, x.n, x.n_segments);
  if (plan == NULL) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory emitting the plan");
    goto out;
  }
  memcpy(plan->ratios, best_ratios, nr * sizeof *best_ratios);
  double emitted;
  if ((st = syn_replay(&x, best_prog, plan, &emitted, err)) != HAP_OK)
    goto out;
  *out = plan;
  plan = NULL;
out:
  stats->seconds = now_s() - t0;
  hap_plan_destroy(plan);
  free(ratios);
  free(best_ratios);
  free(prog);
  free(best_prog);
  syn_ctx_free(&x);
  return st;
}
