/* fuzz_onnx.c — libFuzzer target: an ONNX model (import/onnx.h) from arbitrary bytes, read as if
 * named "fuzz.onnx" with a cross-entropy loss appended; a model that imports is a validated graph,
 * and an unsupported one comes with its report. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_contract.h"
#include "import/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1 << 20))
    return 0;
  hap_err err = {0};
  hap_graph *g = NULL;
  char *report = NULL;
  hap_onnx_options o = {.loss = HAP_ONNX_LOSS_CROSS_ENTROPY};
  void **values = NULL;
  hap_status st = hap_onnx_parse("fuzz.onnx", data, size, &o, &g, &values, &report, &err);
  fuzz_check_contract(st, g, &err);
  if (report != NULL && st != HAP_EUNSUPPORTED)
    abort(); /* a report only comes with unsupported nodes */
  if ((values != NULL) != (st == HAP_OK))
    abort(); /* values come with a graph, and only then */
  free(report);
  hap_onnx_values_free(values, g);
  hap_graph_destroy(g);
  return 0;
}
