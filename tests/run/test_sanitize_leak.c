/* test_sanitize_leak.c — for the sanitizer build's MPI tests (test_sanitize_leak.sh): starts and
 * finalizes MPI through the mpi backend as hap-run does, with one all-reduce between, and with
 * `leak` as its argument loses 100 bytes of its own before exiting, which LeakSanitizer must
 * report despite the Open MPI suppressions (tests/profile/lsan-mpi.supp). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/comm_mpi.h"

static void *volatile lost; /* volatile: the store is not optimized away */

int main(int argc, char **argv) {
  bool leak = argc > 1 && strcmp(argv[1], "leak") == 0;
  hap_comm *c = NULL;
  hap_err err = {0};
  if (hap_comm_mpi_init(&argc, &argv, &c, &err) != HAP_OK) {
    fprintf(stderr, "test_sanitize_leak: %s\n", err.msg);
    return 1;
  }
  double one = 1.0, sum = 0.0;
  if (c->ops->all_reduce(c, &one, &sum, 1, HAP_F64, HAP_REDUCE_SUM, &err) != HAP_OK ||
      sum != (double)c->size) {
    fprintf(stderr, "test_sanitize_leak: all-reduce gave %g of %d ranks\n", sum, c->size);
    hap_comm_mpi_finalize(c);
    return 1;
  }
  if (leak) {
    char *p = malloc(100);
    if (p != NULL)
      memset(p, 1, 100);
    lost = p;
    lost = NULL;
  }
  hap_comm_mpi_finalize(c);
  printf("test_sanitize_leak: %d ranks, %s\n", (int)sum, leak ? "100 bytes lost" : "nothing lost");
  return 0;
}
