/* fuzz_cluster.c — libFuzzer target: hap-cluster JSON (cluster/cluster_io.h) from arbitrary
 * bytes; a cluster that loads must also validate and write back. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cluster/cluster.h"
#include "cluster/cluster_io.h"
#include "fuzz_contract.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  hap_status st = hap_cluster_from_json((const char *)data, size, "fuzz", NULL, &c, &err);
  fuzz_check_contract(st, c, &err);
  if (c != NULL) {
    hap_err e2 = {0};
    if (hap_cluster_validate(c, &e2) != HAP_OK)
      abort(); /* a cluster that loads is a valid one */
    uint64_t digest;
    (void)hap_cluster_digest(c, &digest, &e2);
  }
  hap_cluster_destroy(c);
  return 0;
}
