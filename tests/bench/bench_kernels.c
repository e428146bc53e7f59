/* bench_kernels — time the CPU kernels (kernels/) on every distinct application of a model graph,
 * forward and backward, as one rank of hap-run runs them unsharded.
 * Usage: bench_kernels GRAPH.json [REPS] [WARMUP]   (defaults 20 and 3)
 * Each distinct (op, input shapes) of the graph's nodes is one case; backward computes the
 * gradients of the inputs that require one (hap_graph_validate's marks). Timing is
 * profile/kernel_times.h's hap_kcase_time (CLOCK_MONOTONIC, one call per sample, backward with
 * its gradient buffers passed fresh, as hap-run passes a buffer's first writer). Prints one
 * tab-separated line per case and direction: op  dir  count  p50_us  p95_us  shape count = how many
 * nodes of the graph apply it (their per-iteration time is count x p50). reports/bench-kernels.sh
 * compares two builds' lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "exec/blas_core.h"
#include "model/graph_io.h"
#include "profile/kernel_times.h"

typedef struct bcase {
  hap_kcase kc;
  int32_t count;
} bcase;

/* The application of node n with the graph's shapes; in_grad from requires_grad. */
static hap_status case_of_node(const hap_graph *g, const hap_node *n, hap_kcase *kc, hap_err *err) {
  memset(kc, 0, sizeof *kc);
  kc->op = n->op;
  kc->attrs = n->attrs;
  hap_kcase_fix(kc);
  kc->io.n_in = n->n_inputs;
  for (int32_t i = 0; i < n->n_inputs; i++) {
    const hap_tensor *t = &g->tensors[n->inputs[i]];
    kc->io.in[i] = t->shape;
    kc->io.in_dtype[i] = t->dtype;
    kc->io.in_grad[i] = t->requires_grad;
  }
  HAP_TRY(hap_op_infer(n->op, &kc->io, err));
  kc->fwd = true;
  kc->bwd = true;
  return HAP_OK;
}

static bool same_case(const hap_kcase *a, const hap_kcase *b) {
  if (a->op != b->op || hap_kernel_shape_key(&a->io) != hap_kernel_shape_key(&b->io))
    return false;
  return memcmp(a->io.in_grad, b->io.in_grad, sizeof a->io.in_grad) == 0;
}

static void print_row(const hap_profile_kernel *r, int32_t count) {
  printf("%s\t%s\t%d\t%.2f\t%.2f\t%s\n", hap_op_name(r->op), r->backward ? "bwd" : "fwd", count,
         r->p50_s * 1e6, r->p95_s * 1e6, r->shape);
}

int main(int argc, char **argv) {
  char core[160];
  hap_blas_core_describe(core, sizeof core);
  fprintf(stderr, "bench_kernels: OpenBLAS core %s\n", core);
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: bench_kernels GRAPH.json [REPS] [WARMUP]\n");
    return 2;
  }
  long reps = argc > 2 ? strtol(argv[2], NULL, 10) : 20;
  long warmup = argc > 3 ? strtol(argv[3], NULL, 10) : 3;
  if (reps < 1 || reps > 100000 || warmup < 0 || warmup > 100000) {
    fprintf(stderr, "bench_kernels: REPS must be 1..100000 and WARMUP 0..100000\n");
    return 2;
  }
  hap_err err = {0};
  hap_graph *g = NULL;
  if (hap_graph_read_file(argv[1], &g, &err) != HAP_OK) {
    fprintf(stderr, "bench_kernels: %s\n", err.msg);
    return 1;
  }
  bcase *cases = calloc((size_t)g->n_nodes + 1, sizeof *cases);
  int32_t n_cases = 0;
  int rc = cases == NULL ? 1 : 0;
  for (int32_t i = 0; i < g->n_nodes && rc == 0; i++) {
    hap_kcase kc;
    if (case_of_node(g, &g->nodes[i], &kc, &err) != HAP_OK) {
      fprintf(stderr, "bench_kernels: %s: node %s: %s\n", argv[1], g->nodes[i].name, err.msg);
      rc = 1;
      break;
    }
    int32_t j = 0;
    while (j < n_cases && !same_case(&cases[j].kc, &kc))
      j++;
    if (j == n_cases) {
      cases[n_cases].kc = kc;
      hap_kcase_fix(&cases[n_cases].kc);
      n_cases++;
    }
    cases[j].count++;
  }
  for (int32_t i = 0; i < n_cases && rc == 0; i++) {
    hap_profile_kernel rows[2];
    int32_t n_rows = 0;
    if (hap_kcase_time(&cases[i].kc, (int32_t)reps, (int32_t)warmup, 1.0, rows, &n_rows, &err) !=
        HAP_OK) {
      fprintf(stderr, "bench_kernels: %s %s: %s\n", argv[1], hap_op_name(cases[i].kc.op), err.msg);
      rc = 1;
      break;
    }
    for (int32_t r = 0; r < n_rows; r++)
      print_row(&rows[r], cases[i].count);
    fflush(stdout);
  }
  free(cases);
  hap_graph_destroy(g);
  return rc;
}
