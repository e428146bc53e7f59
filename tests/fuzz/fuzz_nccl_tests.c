/* fuzz_nccl_tests.c — libFuzzer target: nccl-tests logs (store/nccl_tests.h) from arbitrary bytes,
 * then, for a log that parses, the profile made of it (profile/nccl_import.h) and the profile
 * printed back in nccl-tests' layout. The first byte is the test hint (byte % 7, 6: none); the
 * rest is the log, read as if named "run.log" (no test in the name). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fuzz_contract.h"
#include "profile/nccl_import.h"
#include "store/nccl_tests.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1 << 20))
    return 0;
  int hint = data[0] % 7 == 6 ? -1 : data[0] % 7;
  hap_nt_log log;
  hap_err err = {0};
  hap_status st = hap_nt_parse("run.log", (const char *)data + 1, size - 1, hint, &log, &err);
  fuzz_check_contract(st, st == HAP_OK ? (const void *)&log : NULL, &err);
  if (st != HAP_OK)
    return 0;
  const char *path = "run.log";
  hap_profile *p = NULL;
  hap_err ierr = {0};
  st = hap_profile_from_nccl_tests(&log, &path, 1, "A100-80GB", &p, &ierr);
  fuzz_check_contract(st, p, &ierr);
  if (p != NULL) {
    FILE *sink = fopen("/dev/null", "w");
    if (sink != NULL) {
      hap_nt_print_profile(sink, p);
      fclose(sink);
    }
  }
  hap_profile_destroy(p);
  hap_nt_log_free(&log);
  return 0;
}
