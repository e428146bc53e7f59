/* steer.c — --memory-limit as a constraint (synth.h, hap_synthesize_steered): the policy fields
 * the user left free are changed, cheapest first, until a plan fits. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "synth/synth.h"
#include "synth_internal.h"

enum { MAX_CANDIDATES = 32 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The candidates in order of expected cost (synth.h); returns how many. */
static int candidates(const hap_graph *g, const hap_train_policy *base, uint32_t forced,
                      hap_train_policy *out) {
  int n = 0;
  hap_train_policy p = *base;
  out[n++] = p;
  if (!(forced & HAP_POLICY_ZERO))
    for (int z = p.zero + 1; z <= 3; z++) {
      p.zero = z;
      out[n++] = p;
    }
  if (!(forced & HAP_POLICY_RECOMPUTE) && p.recompute == HAP_RECOMPUTE_NONE) {
    /* selective only where the graph has an attention core to drop */
    hap_recompute_map m;
    hap_err quiet = {0};
    if (hap_recompute_map_build(g, HAP_RECOMPUTE_SELECTIVE, &m, &quiet) == HAP_OK &&
        m.n_dropped > 0) {
      p.recompute = HAP_RECOMPUTE_SELECTIVE;
      out[n++] = p;
    }
    hap_recompute_map_free(&m);
    p.recompute = HAP_RECOMPUTE_FULL;
    out[n++] = p;
  }
  if (!(forced & HAP_POLICY_MICRO_BATCHES))
    for (int k = p.micro_batches * 2; k <= HAP_POLICY_MAX_MICRO_BATCHES && n < MAX_CANDIDATES;
         k *= 2) {
      p.micro_batches = k;
      out[n++] = p;
    }
  return n;
}

/* A candidate the graph cannot run (micro-batches that do not divide the batch): skipped. */
static bool cannot_split(const hap_err *e) {
  return strstr(e->msg, "is not a multiple of") != NULL;
}

/* "parameters 5.2 GiB, gradients ...": the parts, and which one alone exceeds the limit. */
static void describe(const hap_synth_stats *s, const hap_cluster *c, const hap_train_policy *pol,
                     hap_err *err) {
  const hap_memory_breakdown *m = &s->leanest;
  char parts[512], buf[32], lim[32], tot[32], over[32], pb[160];
  size_t o = 0;
  int largest = 0;
  for (int k = 0; k < HAP_MEMORY_PARTS && o < sizeof parts; k++) {
    double v = hap_memory_part_get(m, k);
    if (v > hap_memory_part_get(m, largest))
      largest = k;
    o += (size_t)snprintf(parts + o, sizeof parts - o, "%s%s %s", k ? ", " : "",
                          hap_memory_part_name(k), hap_fmt_bytes(v, buf, sizeof buf));
  }
  double total = hap_memory_total(m), big = hap_memory_part_get(m, largest);
  char verdict[160];
  if (big > s->leanest_limit)
    snprintf(verdict, sizeof verdict, "%s alone (%s) exceed the limit",
             hap_memory_part_name(largest), hap_fmt_bytes(big, buf, sizeof buf));
  else
    snprintf(verdict, sizeof verdict, "no part alone exceeds it, the largest is %s (%s)",
             hap_memory_part_name(largest), hap_fmt_bytes(big, buf, sizeof buf));
  hap_err_clear(err);
  hap_err_set(err, HAP_EINVAL,
              "no program fits in %s per %s with any policy tried: the leanest (policy %s) needs "
              "%s, %s over: %s; %s. Raise --memory-limit or use more devices",
              hap_fmt_bytes(s->leanest_limit, lim, sizeof lim), c->devices[s->leanest_device].model,
              hap_policy_brief(pol, pb, sizeof pb), hap_fmt_bytes(total, tot, sizeof tot),
              hap_fmt_bytes(total - s->leanest_limit, over, sizeof over), parts, verdict);
}

/* hap under a limit that steered its policy: the baselines steer on their own and may land on
 * another policy (dp-cp on more micro-batches, say) that the simulator finds faster. With a
 * re-scoring hook, their steered plans are offered to it too, so hap is never slower than a
 * baseline it could have been; a winner is renamed hap and its policy reported as chosen. */
static void offer_steered_baselines(const hap_graph *g, const hap_cluster *c,
                                    const hap_synth_options *o, uint32_t forced, hap_plan **out,
                                    hap_steer_report *rep) {
  if (o->rescore == NULL)
    return;
  double best = o->rescore(o->rescore_ctx, *out, g, c);
  for (int b = HAP_STRATEGY_DP_EV; b <= HAP_STRATEGY_DP_CP; b++) {
    hap_synth_options bo = syn_baseline_options(o, (hap_strategy)b);
    hap_plan *bp = NULL;
    hap_steer_report brep;
    hap_err berr = {0};
    if (hap_synthesize_steered(g, c, &bo, forced, &bp, NULL, &brep, &berr) != HAP_OK)
      continue; /* it does not fit either */
    rep->tried += brep.tried;
    if (syn_keep_if_faster(out, &best, bp, o->rescore(o->rescore_ctx, bp, g, c)))
      rep->chosen = brep.chosen;
  }
}

hap_status hap_synthesize_steered(const hap_graph *g, const hap_cluster *c,
                                  const hap_synth_options *o, uint32_t forced, hap_plan **out,
                                  hap_synth_stats *stats, hap_steer_report *report, hap_err *err) {
  *out = NULL;
  double t0 = now_s();
  hap_synth_options so = o ? *o : (hap_synth_options){0};
  if (so.policy.micro_batches == 0)
    so.policy.micro_batches = 1;
  HAP_TRY(hap_policy_check(&so.policy, err));
  hap_train_policy cand[MAX_CANDIDATES];
  int n = candidates(g, &so.policy, forced, cand);
  hap_steer_report rep = {.chosen = so.policy, .leanest = so.policy};
  hap_synth_stats total = {0}, best_fail = {0};
  hap_train_policy best_fail_pol = so.policy;
  hap_err first = {0}; /* the first candidate's error, when nothing else is known */
  hap_status st = HAP_EINVAL;
  for (int i = 0; i < n; i++) {
    so.policy = cand[i];
    hap_synth_stats s;
    hap_err e = {0};
    st = hap_synthesize(g, c, &so, out, &s, &e);
    rep.tried++;
    total.rounds += s.rounds;
    total.states_expanded += s.states_expanded;
    total.states_generated += s.states_generated;
    if (i == 0) {
      total.initial_s = s.initial_s;
      first = e;
    }
    if (st == HAP_OK) {
      total.interrupted = s.interrupted;
      rep.chosen = cand[i];
      rep.steered = i > 0;
      break;
    }
    if (s.over_bound) { /* slower than the bound: a costlier candidate is no better */
      total.over_bound = true;
      if (err->status == HAP_OK)
        *err = e;
      st = e.status;
      break;
    }
    if (s.no_fit) {
      if (!best_fail.no_fit || hap_memory_total(&s.leanest) - s.leanest_limit <
                                   hap_memory_total(&best_fail.leanest) - best_fail.leanest_limit) {
        best_fail = s;
        best_fail_pol = cand[i];
      }
      continue;
    }
    if (i > 0 && cannot_split(&e))
      continue;
    *err = e; /* anything else stops the search */
    break;
  }
  if (st == HAP_OK && rep.steered && o != NULL && o->strategy == HAP_STRATEGY_HAP &&
      !total.interrupted)
    offer_steered_baselines(g, c, o, forced, out, &rep);
  total.seconds = now_s() - t0;
  rep.seconds = total.seconds;
  if (st != HAP_OK && total.over_bound) {
    /* said above */
  } else if (st != HAP_OK && best_fail.no_fit) {
    total.no_fit = true;
    total.leanest = best_fail.leanest;
    total.leanest_device = best_fail.leanest_device;
    total.leanest_limit = best_fail.leanest_limit;
    rep.leanest = best_fail_pol;
    if (n == 1)
      *err = first; /* nothing was free to change: the synthesizer's own words */
    else
      describe(&best_fail, c, &best_fail_pol, err);
    st = HAP_EINVAL;
  } else if (st != HAP_OK && err->status == HAP_OK) {
    *err = first;
    st = first.status != HAP_OK ? first.status : HAP_EINVAL;
  }
  if (stats != NULL)
    *stats = total;
  if (report != NULL)
    *report = rep;
  return st;
}
