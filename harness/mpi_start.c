#include "harness/mpi_start.h"

#include "exec/comm_mpi.h"
#include "harness/launcher.h"
#include "harness/report.h"

hap_status hap_harness_mpi_init(const char *prog, int *argc, char ***argv, hap_comm **world) {
  hap_err err = {0};
  hap_status st = hap_comm_mpi_init(argc, argv, world, &err);
  if (st != HAP_OK) {
    hap_report_err(prog, -1, &err);
    return st;
  }
  const char *var = NULL;
  int32_t started = hap_launcher_size(&var);
  if (started > 0 && started != (*world)->size) {
    /* every task is a world of its own: each would run the whole job alone */
    hap_err_set(&err, HAP_EINVAL,
                "the launcher started %d ranks (%s) but MPI's world has %d: this MPI did not "
                "join them into one job; under Slurm run srun --mpi=pmix (srun --mpi=list shows "
                "the plugins this Slurm has), or start with mpirun",
                (int)started, var, (int)(*world)->size);
    if (hap_launcher_rank0()) /* the same line from every task: the first says it */
      hap_report_err(prog, -1, &err);
    hap_comm_mpi_finalize(*world);
    *world = NULL;
    return HAP_EINVAL;
  }
  return HAP_OK;
}

int32_t hap_harness_first_failure(hap_comm *comm, hap_status st, hap_err *err) {
  int32_t mine = st != HAP_OK ? comm->rank : comm->size, first = comm->size;
  hap_err aerr = {0};
  if (comm->ops->all_reduce(comm, &mine, &first, 1, HAP_I32, HAP_REDUCE_MIN, &aerr) == HAP_OK)
    return first;
  if (st != HAP_OK)
    return comm->rank;
  *err = aerr;
  return 0;
}
