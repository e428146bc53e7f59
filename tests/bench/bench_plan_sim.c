/* bench_plan_sim — time lowering + simulating one training iteration of a plan.
 * Usage: bench_plan_sim MODEL CLUSTER [STRATEGY] [REPS]
 *   defaults: dp-ev, 5 repetitions. The plan is synthesised once (untimed, with no memory limit so
 *   that a data-parallel plan exists even where it would not fit); then each repetition lowers the
 *   plan and simulates it, folded (identical devices simulated once) and unfolded (every device),
 *   timed with CLOCK_MONOTONIC. Prints medians, tasks, engine events and events per second. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/zoo.h"
#include "simulate/plan_sim.h"
#include "store/cluster_open.h"
#include "synth/synth.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct timing {
  double median_s, iteration_s;
  int64_t engine_tasks, events;
  int32_t groups, tasks;
} timing;

static hap_status time_runs(const hap_plan *p, const hap_graph *g, const hap_cluster *c, bool fold,
                            int reps, timing *out, hap_err *err) {
  double *t = malloc((size_t)reps * sizeof *t);
  if (t == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory");
  hap_status st = HAP_OK;
  for (int r = 0; r < reps && st == HAP_OK; r++) {
    double t0 = now_s();
    hap_lowered *lw = NULL;
    hap_plan_sim *ps = NULL;
    hap_plan_sim_options o = {.no_fold = !fold};
    st = hap_lower(p, g, &lw, err);
    if (st == HAP_OK)
      st = hap_plan_sim_run(lw, c, &o, &ps, err);
    t[r] = now_s() - t0;
    if (st == HAP_OK) {
      out->iteration_s = ps->iteration_s;
      out->engine_tasks = ps->n_engine_tasks;
      out->events = ps->n_events;
      out->groups = ps->n_groups;
      out->tasks = ps->n_tasks;
    }
    hap_plan_sim_destroy(ps);
    hap_lowered_destroy(lw);
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  out->median_s = t[reps / 2];
  free(t);
  return st;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_plan_sim MODEL CLUSTER [STRATEGY] [REPS]\n");
    return 2;
  }
  hap_strategy s = HAP_STRATEGY_DP_EV;
  if (argc > 3 && hap_strategy_parse(argv[3], &s) != HAP_OK) {
    fprintf(stderr, "bench_plan_sim: unknown strategy '%s'\n", argv[3]);
    return 2;
  }
  char *end = NULL;
  long reps_l = argc > 4 ? strtol(argv[4], &end, 10) : 5;
  int reps = (int)reps_l;
  if (reps_l < 1 || reps_l > 1000 || (end != NULL && *end != '\0')) {
    fprintf(stderr, "bench_plan_sim: REPS must be a positive integer\n");
    return 2;
  }
  hap_err err = {0};
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_plan *p = NULL;
  int rc = 1;
  hap_synth_options so = {.strategy = s, .memory_limit_bytes = 1e18};
  hap_synth_stats stats;
  timing folded = {0}, unfolded = {0};
  if (hap_model_load(argv[1], &g, &err) != HAP_OK ||
      hap_cluster_open(argv[2], &c, &err) != HAP_OK ||
      hap_synthesize(g, c, &so, &p, &stats, &err) != HAP_OK ||
      time_runs(p, g, c, true, reps, &folded, &err) != HAP_OK ||
      time_runs(p, g, c, false, reps, &unfolded, &err) != HAP_OK) {
    fprintf(stderr, "bench_plan_sim: %s\n", err.msg);
    goto out;
  }
  printf("model %s (%d nodes), cluster %s (%d devices), plan %s\n", argv[1], g->n_nodes, argv[2],
         c->n_devices, p->strategy);
  printf("tasks per device %d; simulated iteration %.6f s\n", folded.tasks, folded.iteration_s);
  printf("%-9s %8s %12s %12s %12s %14s\n", "mode", "devices", "engine tasks", "events", "median s",
         "events/s");
  const timing *t[2] = {&folded, &unfolded};
  const char *name[2] = {"folded", "unfolded"};
  for (int i = 0; i < 2; i++)
    printf("%-9s %8d %12lld %12lld %12.4f %14.3g\n", name[i], t[i]->groups,
           (long long)t[i]->engine_tasks, (long long)t[i]->events, t[i]->median_s,
           (double)t[i]->events / t[i]->median_s);
  if (folded.iteration_s != unfolded.iteration_s)
    printf("WARNING: folded and unfolded iterations differ\n");
  rc = 0;
out:
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return rc;
}
