/* test_comm_mpi.c — the mpi backend's collectives move the right values, whole and in pieces
 * (comm_mpi.h: HAP_MPI_PIECE_BYTES). Run under mpirun on 2+ ranks, once with the default piece
 * size and once with a small odd one so that every pieced path (even and uneven blocks, pieces
 * that end inside one rank's block, ranks with nothing in a piece) runs on small buffers.
 * Element values are small integers, so float sums are exact and every element is compared
 * exactly. Before anything else the comparison itself must report a buffer with one wrong element
 * (a checker that can pass must be able to fail). Exit 0 when every check holds on every rank,
 * 1 otherwise (each failure printed with the rank, the call, its size and the first wrong
 * element), 2 when the communicator cannot start (e.g. a malformed HAP_MPI_PIECE_BYTES: its
 * message on stderr). Usage: test_comm_mpi [--max-elems N] (skip sizes above N elements per
 * block: tiny pieces over megabytes take minutes). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/comm_mpi.h"

static int failures = 0;

/* 0 when got[0..n) equals want[0..n), else the index of the first difference + 1 (printed). */
static int64_t differs(const char *what, int rank, int64_t size, const float *got,
                       const float *want, int64_t n, int quiet) {
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (!quiet)
        printf("FAIL rank %d: %s of %lld elements: element %lld is %g, expected %g\n", rank, what,
               (long long)size, (long long)i, (double)got[i], (double)want[i]);
      return i + 1;
    }
  return 0;
}

static void expect_same(const char *what, int rank, int64_t size, const float *got,
                        const float *want, int64_t n) {
  if (differs(what, rank, size, got, want, n, 0) != 0)
    failures++;
}

static void expect_ok(hap_status st, const hap_err *err, const char *what) {
  if (st != HAP_OK) {
    printf("FAIL: %s: %s\n", what, err->msg);
    failures++;
  }
}

/* The value rank r contributes at element i of a collective. */
static float value(int r, int64_t i) { return (float)((int64_t)(r + 1) * 1000 + i % 997); }

static void all_reduce(hap_comm *c, int64_t n, float *a, float *b, float *want) {
  hap_err err = {0};
  for (int64_t i = 0; i < n; i++) {
    a[i] = value(c->rank, i);
    want[i] = 0;
    for (int r = 0; r < c->size; r++)
      want[i] += value(r, i);
  }
  expect_ok(c->ops->all_reduce(c, a, b, n, HAP_F32, HAP_REDUCE_SUM, &err), &err, "all_reduce");
  expect_same("all_reduce", c->rank, n, b, want, n);
  expect_ok(c->ops->all_reduce(c, a, a, n, HAP_F32, HAP_REDUCE_SUM, &err), &err,
            "all_reduce in place");
  expect_same("all_reduce in place", c->rank, n, a, want, n);
}

/* all_reduce_start in place on two buffers at once (a blocking collective in between), progressed
 * by reduce_test and finished by reduce_wait. */
static void all_reduce_nb(hap_comm *c, int64_t n, float *a, float *b, float *want) {
  hap_err err = {0};
  for (int64_t i = 0; i < n; i++) {
    a[i] = value(c->rank, i);
    b[i] = 2 * value(c->rank, i);
    want[i] = 0;
    for (int r = 0; r < c->size; r++)
      want[i] += value(r, i);
  }
  expect_ok(c->ops->all_reduce_start(c, a, n, HAP_F32, HAP_REDUCE_SUM, &err), &err,
            "all_reduce_start");
  expect_ok(c->ops->barrier(c, &err), &err, "barrier between started reductions");
  expect_ok(c->ops->all_reduce_start(c, b, n, HAP_F32, HAP_REDUCE_SUM, &err), &err,
            "all_reduce_start (second)");
  bool done = false;
  expect_ok(c->ops->reduce_test(c, &done, &err), &err, "reduce_test");
  expect_ok(c->ops->reduce_wait(c, &err), &err, "reduce_wait");
  expect_ok(c->ops->reduce_test(c, &done, &err), &err, "reduce_test after the wait");
  if (!done) {
    printf("FAIL: reduce_test after reduce_wait says not done\n");
    failures++;
  }
  expect_same("all_reduce_start", c->rank, n, a, want, n);
  for (int64_t i = 0; i < n; i++)
    want[i] *= 2;
  expect_same("all_reduce_start (second)", c->rank, n, b, want, n);
}

/* Even all-gather of n floats per rank, and an uneven one (rank r gives n + r floats, placed in
 * reverse rank order with a gap of 3 floats). */
static void all_gather(hap_comm *c, int64_t n, float *a, float *b, float *want) {
  hap_err err = {0};
  for (int64_t i = 0; i < n + c->size; i++)
    a[i] = value(c->rank, i);
  for (int r = 0; r < c->size; r++)
    for (int64_t i = 0; i < n; i++)
      want[r * n + i] = value(r, i);
  expect_ok(c->ops->all_gather(c, a, b, n * 4, &err), &err, "all_gather");
  expect_same("all_gather", c->rank, n, b, want, n * c->size);

  int64_t bytes[64], displs[64], at = 0;
  for (int r = c->size - 1; r >= 0; r--) {
    bytes[r] = (n + r) * 4;
    displs[r] = at * 4;
    for (int64_t i = 0; i < n + r; i++)
      want[at + i] = value(r, i);
    for (int64_t i = n + r; i < n + r + 3; i++)
      want[at + i] = -1;
    at += n + r + 3;
  }
  for (int64_t i = 0; i < at; i++)
    b[i] = -1;
  expect_ok(c->ops->all_gatherv(c, a, (n + c->rank) * 4, b, bytes, displs, &err), &err,
            "all_gatherv");
  expect_same("all_gatherv", c->rank, n, b, want, at);
}

/* Even reduce-scatter (n floats to each rank), and an uneven one (rank r gets n + 2r floats). */
static void reduce_scatter(hap_comm *c, int64_t n, float *a, float *b, float *want) {
  hap_err err = {0};
  for (int64_t i = 0; i < n * c->size; i++)
    a[i] = value(c->rank, i);
  for (int64_t i = 0; i < n; i++) {
    want[i] = 0;
    for (int r = 0; r < c->size; r++)
      want[i] += value(r, c->rank * n + i);
  }
  expect_ok(c->ops->reduce_scatter(c, a, b, n, HAP_F32, HAP_REDUCE_SUM, &err), &err,
            "reduce_scatter");
  expect_same("reduce_scatter", c->rank, n, b, want, n);

  int64_t counts[64], start = 0, mine = 0;
  for (int r = 0; r < c->size; r++) {
    counts[r] = n + 2 * (int64_t)r;
    if (r == c->rank)
      mine = start;
    start += counts[r];
  }
  for (int64_t i = 0; i < start; i++)
    a[i] = value(c->rank, i);
  for (int64_t i = 0; i < counts[c->rank]; i++) {
    want[i] = 0;
    for (int r = 0; r < c->size; r++)
      want[i] += value(r, mine + i);
  }
  expect_ok(c->ops->reduce_scatterv(c, a, b, counts, HAP_F32, HAP_REDUCE_SUM, &err), &err,
            "reduce_scatterv");
  expect_same("reduce_scatterv", c->rank, n, b, want, counts[c->rank]);
}

int main(int argc, char **argv) {
  hap_comm *c = NULL;
  hap_err err = {0};
  if (hap_comm_mpi_init(&argc, &argv, &c, &err) != HAP_OK) {
    fprintf(stderr, "test_comm_mpi: %s\n", err.msg);
    return 2;
  }
  if (c->size > 64) {
    fprintf(stderr, "test_comm_mpi: %d ranks, expected at most 64\n", c->size);
    hap_comm_mpi_finalize(c);
    return 2;
  }
  int64_t max_elems = INT64_MAX;
  if (argc == 3 && strcmp(argv[1], "--max-elems") == 0)
    max_elems = strtoll(argv[2], NULL, 10); /* a malformed N reads as 0: sizes 0 only */
  float probe[3] = {1, 2, 3}, wrong[3] = {1, 2, 4};
  if (differs("self-test", c->rank, 3, probe, wrong, 3, 1) != 3) {
    printf("FAIL: the comparison does not see a wrong last element\n");
    failures++;
  }
  /* sizes below, at and above a piece of the small setting (ctest: 40 B), and 3 MiB of floats
   * per block (above the default piece with 3+ ranks) */
  static const int64_t sizes[] = {0, 1, 2, 9, 10, 11, 37, 1000, 3 << 18};
  int64_t most = 0;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    most = sizes[k] > most ? sizes[k] : most;
  size_t cap = (size_t)(most + 2 * (int64_t)c->size + 3) * (size_t)c->size * 2 + 16;
  float *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b), *want = malloc(cap * 4);
  if (a == NULL || b == NULL || want == NULL) {
    fprintf(stderr, "test_comm_mpi: out of memory\n");
    hap_comm_mpi_finalize(c);
    return 2;
  }
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && sizes[k] <= max_elems; k++) {
    all_reduce(c, sizes[k], a, b, want);
    all_reduce_nb(c, sizes[k], a, b, want);
    all_gather(c, sizes[k], a, b, want);
    reduce_scatter(c, sizes[k], a, b, want);
  }
  /* split communicators inherit the piece size: the same checks on each half */
  hap_comm *half = NULL;
  expect_ok(c->ops->split(c, c->rank % 2, c->rank, &half, &err), &err, "split");
  if (half != NULL && half->size > 1)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && sizes[k] <= max_elems; k++)
      all_reduce(half, sizes[k], a, b, want);
  hap_comm_destroy(half);

  double mine = failures, total = 0;
  expect_ok(c->ops->all_reduce(c, &mine, &total, 1, HAP_F64, HAP_REDUCE_SUM, &err), &err,
            "failure count");
  if (c->rank == 0)
    printf("test_comm_mpi: %d ranks, HAP_MPI_PIECE_BYTES=%s: %s (%g failed checks)\n", c->size,
           getenv("HAP_MPI_PIECE_BYTES") ? getenv("HAP_MPI_PIECE_BYTES") : "(default)",
           total == 0 ? "ok" : "FAILED", total);
  free(a);
  free(b);
  free(want);
  hap_comm_mpi_finalize(c);
  return total == 0 ? 0 : 1;
}
