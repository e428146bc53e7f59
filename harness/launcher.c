#include "harness/launcher.h"

#include <stdlib.h>
#include <string.h>

#include "base/cli.h"

int32_t hap_local_rank(int32_t world_rank) {
  static const char *const keys[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                     "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const char *v = getenv(keys[i]);
    long long x = 0;
    if (v != NULL && hap_cli_parse_int(keys[i], v, 0, INT32_MAX - 1, &x, NULL) == HAP_OK)
      return (int32_t)x;
  }
  return world_rank;
}

bool hap_launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
         getenv("PMIX_RANK") != NULL;
}

bool hap_launcher_rank0(void) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if (r == NULL)
    r = getenv("PMI_RANK");
  return r == NULL || strcmp(r, "0") == 0;
}
