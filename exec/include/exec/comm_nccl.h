/* comm_nccl.h — the `nccl` communication backend (comm.h) over NCCL: one communicator per GPU,
 * bootstrapped over MPI (rank 0's ncclGetUniqueId broadcast over the `mpi` world, then
 * ncclCommInitRank). Buffers are device memory (or host memory the GPU can address); every call
 * enqueues on the communicator's own stream and waits for it, so calls are blocking as comm.h
 * says. Point-to-point calls have no tags in NCCL: messages between two ranks match in call order
 * (the tag is checked for range and otherwise ignored). Uneven collectives are grouped NCCL calls:
 * all_gatherv = one ncclBroadcast per rank, reduce_scatterv = one ncclReduce per rank,
 * all_to_all(v) = ncclSend/ncclRecv pairs. split is ncclCommSplit (NCCL >= 2.18, else
 * HAP_EUNSUPPORTED); abort is ncclCommAbort then the MPI world's abort. Errors are HAP_ENCCL with
 * NCCL's text (HAP_ECUDA for the stream).
 * Ownership: hap_comm_nccl_init returns an owned communicator (hap_comm_destroy), which borrows
 * the MPI world: destroy the NCCL communicators before hap_comm_mpi_finalize. */
#ifndef HAP_COMM_NCCL_H
#define HAP_COMM_NCCL_H

#include <stdint.h>

#include "exec/comm.h"

/* Collective over `mpi_world` (the `mpi` backend's world): a NCCL communicator of the same ranks
 * in the same order, on CUDA device `device` (made current). HAP_EUNSUPPORTED in a build without
 * NCCL or CUDA. */
hap_status hap_comm_nccl_init(hap_comm *mpi_world, int32_t device, hap_comm **out, hap_err *err);

/* NCCL's version code (e.g. 22809 for 2.28.9) of the library in use, 0 without NCCL. */
int32_t hap_comm_nccl_version(void);

#endif
