/* comm_mpi.h — the `mpi` communication backend (comm.h) over MPI (Open MPI): each rank of
 * MPI_COMM_WORLD is one device. Errors return (MPI_ERRORS_RETURN on every communicator) as
 * HAP_EMPI with MPI's error string. Ownership: hap_comm_mpi_init returns the world communicator;
 * hap_comm_mpi_finalize frees it and finalizes MPI. */
#ifndef HAP_COMM_MPI_H
#define HAP_COMM_MPI_H

#include <stddef.h>

#include "exec/comm.h"

/* All-reduce, all-gather(v) and reduce-scatter(v) reach MPI in pieces of at most this many bytes
 * (the largest buffer of one MPI call; comm_mpi.c says why). The environment variable
 * HAP_MPI_PIECE_BYTES overrides it for every communicator of the process; 0 sends each collective
 * in one call. */
#define HAP_MPI_PIECE_BYTES_DEFAULT ((int64_t)4 << 20)

/* MPI_Init (argc/argv may be NULL), MPI_ERRORS_RETURN on the world, and its hap_comm. First,
 * glibc's allocator is set to keep large blocks on its heap (comm_mpi.c, keep_large_blocks; the
 * environment variable HAP_MALLOC=default leaves glibc's settings). A malformed
 * HAP_MPI_PIECE_BYTES or HAP_MALLOC is HAP_EINVAL, before MPI_Init. */
hap_status hap_comm_mpi_init(int *argc, char ***argv, hap_comm **world, hap_err *err);
/* Set the piece size of c, a communicator of this backend (bytes >= 0; 0: one call per collective);
 * communicators split from it later inherit it. */
void hap_comm_mpi_set_piece_bytes(hap_comm *c, int64_t bytes);
/* The MPI library's version line ("Open MPI v4.1.4, ..."), first line only, into buf; returns buf.
 */
const char *hap_comm_mpi_library(char *buf, size_t len);
/* Destroy the world communicator and MPI_Finalize. */
void hap_comm_mpi_finalize(hap_comm *world);

#endif
