#include "harness/mpi_start.h"

#include "exec/comm_mpi.h"
#include "harness/report.h"

hap_status hap_harness_mpi_init(const char *prog, int *argc, char ***argv, hap_comm **world) {
  hap_err err = {0};
  hap_status st = hap_comm_mpi_init(argc, argv, world, &err);
  if (st != HAP_OK)
    hap_report_err(prog, -1, &err);
  return st;
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
