/* bench_sim — discrete-event engine throughput on a large synthetic iteration.
 * Usage: bench_sim [DEVICES] [TASKS] [EVERY]  (defaults 1024 devices, 1,000 compute tasks per
 * device, a collective over all devices every 10 tasks). Each device runs its compute tasks
 * (durations vary by device, 1-2 ms) on its compute stream; after every EVERY-th task a
 * gradient all-reduce over all devices, issued on the comm stream and depending on that task,
 * overlaps the following compute. Builds the task lists once, then prints the median over 3
 * runs of hap_sim_run (preparation + event loop, CLOCK_MONOTONIC): tasks/s and events/s. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "simulate/engine.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static hap_status build(hap_sim *s, int devices, int tasks, int every, hap_err *err) {
  int n_coll = tasks / every;
  int32_t *coll = malloc((size_t)(n_coll > 0 ? n_coll : 1) * sizeof *coll);
  if (coll == NULL)
    return hap_err_set(err, HAP_ENOMEM, "bench_sim: out of memory");
  hap_status st = HAP_OK;
  for (int c = 0; c < n_coll && st == HAP_OK; c++)
    st = hap_sim_new_collective(s, &coll[c], err);
  for (int d = 0; d < devices && st == HAP_OK; d++) {
    double kernel_s = 1e-3 * (1.0 + (double)(d % 7) / 7.0); /* 1..2 ms, heterogeneous */
    for (int k = 0; k < tasks && st == HAP_OK; k++) {
      char name[64];
      snprintf(name, sizeof name, "layers.%d.bwd", k);
      hap_sim_task t = {.name = name, .device = d, .duration_s = kernel_s, .flops = 1e9};
      int32_t id = -1;
      st = hap_sim_add_task(s, &t, &id, err);
      if (st != HAP_OK || (k + 1) % every != 0)
        continue;
      snprintf(name, sizeof name, "grads.%d.all_reduce", k / every);
      hap_sim_task ar = {.name = name,
                         .device = d,
                         .stream = HAP_SIM_COMM,
                         .kind = HAP_SIM_COLLECTIVE,
                         .duration_s = 4e-3,
                         .bytes = 64e6,
                         .deps = &id,
                         .n_deps = 1,
                         .collective = coll[k / every]};
      st = hap_sim_add_task(s, &ar, NULL, err);
    }
  }
  free(coll);
  return st;
}

/* argv[i] as a positive int, `fallback` when absent, -1 when malformed. */
static int arg_int(int argc, char **argv, int i, int fallback) {
  if (argc <= i)
    return fallback;
  char *end = NULL;
  long v = strtol(argv[i], &end, 10);
  return end != argv[i] && *end == '\0' && v > 0 && v <= 1000000 ? (int)v : -1;
}

int main(int argc, char **argv) {
  int devices = arg_int(argc, argv, 1, 1024);
  int tasks = arg_int(argc, argv, 2, 1000);
  int every = arg_int(argc, argv, 3, 10);
  if (devices < 1 || tasks < 1 || every < 1) {
    fprintf(stderr, "usage: bench_sim [DEVICES] [TASKS per device] [EVERY (collective period)]\n");
    return 2;
  }
  hap_sim *s = NULL;
  hap_err err = {0};
  double t0 = now_s();
  if (hap_sim_create(devices, &s, &err) != HAP_OK ||
      build(s, devices, tasks, every, &err) != HAP_OK) {
    fprintf(stderr, "bench_sim: %s\n", err.msg);
    hap_sim_destroy(s);
    return 1;
  }
  double build_s = now_s() - t0;
  double runs[3];
  for (int r = 0; r < 3; r++) {
    double start = now_s();
    if (hap_sim_run(s, NULL, &err) != HAP_OK) {
      fprintf(stderr, "bench_sim: %s\n", err.msg);
      hap_sim_destroy(s);
      return 1;
    }
    runs[r] = now_s() - start;
  }
  qsort(runs, 3, sizeof *runs, cmp_double);
  const hap_sim_results *res = hap_sim_results_get(s);
  double n_tasks = (double)res->n_tasks, n_events = (double)res->n_events;
  printf("bench_sim: %d devices x %d compute tasks, a collective every %d: %d tasks, %lld events\n",
         devices, tasks, every, res->n_tasks, (long long)res->n_events);
  printf("build: %.3f s; run: median %.3f s (min %.3f, max %.3f) = %.2f M tasks/s, %.2f M "
         "events/s\n",
         build_s, runs[1], runs[0], runs[2], n_tasks / runs[1] * 1e-6, n_events / runs[1] * 1e-6);
  printf("simulated iteration: %.6f s, critical path %d steps\n", res->makespan_s, res->n_critical);
  hap_sim_destroy(s);
  return 0;
}
