/* fuzz_contract.h — the readers' contract every fuzz target checks: an object exactly on success,
 * a message on failure. A broken contract aborts, which libFuzzer reports as a crash. */
#ifndef HAP_FUZZ_CONTRACT_H
#define HAP_FUZZ_CONTRACT_H

#include <stdlib.h>

#include "base/status.h"

static inline void fuzz_check_contract(hap_status st, const void *object, const hap_err *err) {
  if ((st == HAP_OK) != (object != NULL) || (st != HAP_OK && err->msg[0] == '\0'))
    abort();
}

#endif
