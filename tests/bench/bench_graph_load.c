/* bench_graph_load — time reading + validating a hap-graph file (parse, build, shape inference,
 * topological check). Usage: bench_graph_load FILE [REPS]. Prints each phase's median over REPS
 * runs (default 21) in ms, measured with CLOCK_MONOTONIC. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/fileio.h"
#include "model/graph_io.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: bench_graph_load FILE [REPS]\n");
    return 2;
  }
  int reps = argc == 3 ? atoi(argv[2]) : 21;
  if (reps < 1) {
    fprintf(stderr, "bench_graph_load: REPS must be >= 1\n");
    return 2;
  }
  double *total = malloc((size_t)reps * sizeof *total);
  double *parse = malloc((size_t)reps * sizeof *parse);
  if (total == NULL || parse == NULL)
    return 1;
  int nodes = 0, tensors = 0;
  size_t bytes = 0;
  for (int r = 0; r < reps; r++) {
    hap_err err = {0};
    double t0 = now_s();
    char *data = NULL;
    if (hap_read_file(argv[1], &data, &bytes, &err) != HAP_OK) {
      fprintf(stderr, "bench_graph_load: %s\n", err.msg);
      return 1;
    }
    double t1 = now_s();
    hap_graph *g = NULL;
    if (hap_graph_from_json(data, bytes, argv[1], &g, &err) != HAP_OK) {
      fprintf(stderr, "bench_graph_load: %s\n", err.msg);
      free(data);
      return 1;
    }
    double t2 = now_s();
    nodes = g->n_nodes;
    tensors = g->n_tensors;
    hap_graph_destroy(g);
    free(data);
    total[r] = (t2 - t0) * 1e3;
    parse[r] = (t2 - t1) * 1e3;
  }
  qsort(total, (size_t)reps, sizeof *total, cmp_double);
  qsort(parse, (size_t)reps, sizeof *parse, cmp_double);
  printf("file %s: %zu bytes, %d nodes, %d tensors\n", argv[1], bytes, nodes, tensors);
  printf("load+validate (read file, parse, build, validate): median %.2f ms, min %.2f, max %.2f "
         "over %d runs\n",
         total[reps / 2], total[0], total[reps - 1], reps);
  printf("parse+build+validate from memory: median %.2f ms\n", parse[reps / 2]);
  free(total);
  free(parse);
  return 0;
}
