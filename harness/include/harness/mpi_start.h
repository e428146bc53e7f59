/* mpi_start.h — MPI for a tool that runs one rank per device: starting it, and set-up that may
 * fail on some ranks (no GPU, a bad plan) agreed on by all, so that one rank says why. */
#ifndef HAP_HARNESS_MPI_START_H
#define HAP_HARNESS_MPI_START_H

#include "base/status.h"
#include "exec/comm.h"

/* MPI_Init and the world communicator (hap_comm_mpi_init); on failure "prog: why" on stderr and
 * the status. A world smaller or larger than the launcher started (hap_launcher_size: srun with an
 * MPI that does not speak its PMI makes each task a world of one) is HAP_EINVAL, said once by
 * the launcher's rank 0, with MPI finalized and *world NULL. Ownership:
 * hap_comm_mpi_finalize(*world) ends MPI. */
hap_status hap_harness_mpi_init(const char *prog, int *argc, char ***argv, hap_comm **world);

/* Collective: every rank passes the status of its set-up; returns the lowest rank whose status
 * is not HAP_OK, or comm->size when every rank succeeded. The rank that gets its own number says
 * why, from *err. When the agreement itself fails, a failing rank returns its own rank and a
 * healthy one 0 with the agreement's error in *err. */
int32_t hap_harness_first_failure(hap_comm *comm, hap_status st, hap_err *err);

#endif
