/* fuzz_graph.c — libFuzzer target: hap-graph JSON (model/graph_io.h) from arbitrary bytes. A
 * malformed graph must come back as an error status with a message, never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_contract.h"
#include "model/graph_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hap_graph *g = NULL;
  hap_err err = {0};
  hap_status st = hap_graph_from_json((const char *)data, size, "fuzz", &g, &err);
  fuzz_check_contract(st, g, &err);
  hap_graph_destroy(g);
  return 0;
}
