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

/* srun sets the step's variables in every task it starts (a batch script's own environment has
 * SLURM_PROCID but no step task count). */
static bool started_by_srun(void) {
  return getenv("SLURM_STEP_NUM_TASKS") != NULL && getenv("SLURM_PROCID") != NULL;
}

bool hap_launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
         getenv("PMIX_RANK") != NULL || started_by_srun();
}

bool hap_launcher_rank0(void) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if (r == NULL)
    r = getenv("PMI_RANK");
  if (r == NULL && started_by_srun())
    r = getenv("SLURM_PROCID");
  return r == NULL || strcmp(r, "0") == 0;
}

int32_t hap_launcher_size(const char **var) {
  static const char *const keys[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const char *v = getenv(keys[i]);
    long long x = 0;
    if (i == 2 && !started_by_srun())
      continue;
    if (v != NULL && hap_cli_parse_int(keys[i], v, 1, INT32_MAX, &x, NULL) == HAP_OK) {
      if (var != NULL)
        *var = keys[i];
      return (int32_t)x;
    }
  }
  return -1;
}
