/* slow_first_sends.c — an MPI profiling-interface shim for tests (LD_PRELOAD under mpirun): the
 * first HAP_TEST_SLOW_SENDS calls of MPI_Send with tag HAP_TEST_SLOW_TAG (any tag when unset) to
 * each peer (world rank) sleep HAP_TEST_SLOW_SEND_US microseconds first. It stands in for a
 * transient at the start of a ping-pong sweep (a partner still busy with earlier work, a slow
 * path before a per-peer fast path exists): the warm-up outlier of a profile's first
 * point-to-point size. Unset counts = no delay. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdlib.h>
#include <time.h>

enum { MAX_PEERS = 1024 };

static int sends_to[MAX_PEERS];

static long env_long(const char *name) {
  const char *s = getenv(name);
  return s != NULL ? strtol(s, NULL, 10) : 0;
}

/* The peer's rank in MPI_COMM_WORLD (comm may be a duplicate or a split). */
static int world_rank_of(int dest, MPI_Comm comm) {
  MPI_Group g, w;
  int out = MPI_UNDEFINED;
  PMPI_Comm_group(comm, &g);
  PMPI_Comm_group(MPI_COMM_WORLD, &w);
  PMPI_Group_translate_ranks(g, 1, &dest, w, &out);
  PMPI_Group_free(&g);
  PMPI_Group_free(&w);
  return out;
}

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  long n = env_long("HAP_TEST_SLOW_SENDS"), us = env_long("HAP_TEST_SLOW_SEND_US");
  const char *only = getenv("HAP_TEST_SLOW_TAG");
  if (n <= 0 || us <= 0 || (only != NULL && strtol(only, NULL, 10) != tag))
    return PMPI_Send(buf, count, type, dest, tag, comm);
  int peer = world_rank_of(dest, comm);
  if (peer >= 0 && peer < MAX_PEERS && sends_to[peer] < n) {
    sends_to[peer]++;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
  return PMPI_Send(buf, count, type, dest, tag, comm);
}
