/* fuzz_plan.c — libFuzzer target: hap-plan JSON (plan/plan_io.h) from arbitrary bytes, read
 * against a small mlp on cpu-2 (the graph and cluster the seed plans were made for). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_contract.h"
#include "model/zoo.h"
#include "plan/plan_io.h"
#include "store/cluster_open.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hap_graph *graph;
static hap_cluster *cluster;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hap_err err = {0};
  if (graph == NULL && (hap_zoo_build(FUZZ_PLAN_MODEL, &graph, &err) != HAP_OK ||
                        hap_cluster_open("cpu-2", &cluster, &err) != HAP_OK))
    abort();
  hap_plan *p = NULL;
  hap_status st = hap_plan_from_json((const char *)data, size, "fuzz", graph, cluster, &p, &err);
  fuzz_check_contract(st, p, &err);
  hap_plan_destroy(p);
  return 0;
}
