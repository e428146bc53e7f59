/* fuzz_profile.c — libFuzzer target: the hap-profile HDF5 reader (store/profile_store.h) on
 * arbitrary file contents, written to a private temporary file per input. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_contract.h"
#include "store/profile_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (path[0] == '\0')
    snprintf(path, sizeof path, "/tmp/hap-fuzz-profile-%ld.h5", (long)getpid());
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  hap_profile *p = NULL;
  hap_err err = {0};
  hap_status st = hap_profile_read(path, &p, &err);
  fuzz_check_contract(st, p, &err);
  hap_profile_destroy(p);
  unlink(path);
  return 0;
}
