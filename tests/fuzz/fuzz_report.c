/* fuzz_report.c — libFuzzer target: hap-report's readers and pages (report/report.h) from
 * arbitrary bytes, the kind detected from the document. Beyond memory safety it checks the
 * contract: a page exactly on success (starting with the doctype), a message and not one byte
 * written on failure. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *page = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&page, &len);
  if (f == NULL)
    return 0;
  hap_err err = {0};
  hap_status st =
      hap_report_render_json((const char *)data, size, "fuzz", HAP_REPORT_AUTO, f, &err);
  if (fclose(f) != 0)
    abort();
  if (st == HAP_OK ? len < 15 || memcmp(page, "<!DOCTYPE html>", 15) != 0
                   : len != 0 || err.msg[0] == '\0' || strchr(err.msg, '\n') != NULL)
    abort();
  free(page);
  return 0;
}
