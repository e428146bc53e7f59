/* fuzz_specs.c — libFuzzer target: the spec strings a user types, model specs (model/zoo.h) and
 * cluster specs (store/cluster_open.h), from arbitrary bytes. The first byte picks which; the
 * rest is the string (up to its first NUL). Strings with '/' are skipped: they name files. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_contract.h"
#include "model/zoo.h"
#include "store/cluster_open.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096)
    return 0;
  char *spec = malloc(size);
  if (spec == NULL)
    return 0;
  memcpy(spec, data + 1, size - 1);
  spec[size - 1] = '\0';
  if (strchr(spec, '/') != NULL || strstr(spec, ".json") != NULL || strstr(spec, ".h5") != NULL) {
    free(spec);
    return 0;
  }
  hap_err err = {0};
  if (data[0] % 2 == 0) {
    hap_graph *g = NULL;
    hap_status st = hap_zoo_build(spec, &g, &err);
    fuzz_check_contract(st, g, &err);
    hap_graph_destroy(g);
  } else {
    hap_cluster *c = NULL;
    hap_status st = hap_cluster_open(spec, &c, &err);
    fuzz_check_contract(st, c, &err);
    hap_cluster_destroy(c);
  }
  free(spec);
  return 0;
}
