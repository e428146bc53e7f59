/* comm.h — the communication table every execution backend implements (docs/execution.md):
 * collectives (all-reduce, all-gather(v), reduce-scatter(v), all-to-all(v), broadcast),
 * point-to-point send/recv (and sends that do not wait: send_start, send_wait), all-reduces that
 * do not wait (all_reduce_start, reduce_test, reduce_wait), barrier, and splitting a communicator
 * into groups. Contract: every call is blocking and collective over the
 * communicator unless it says otherwise (send and recv involve two ranks). Data calls move bytes;
 * reductions take a dtype (float32, float64, int32, int64) and an operation. Byte counts and
 * element counts are >= 0; a backend returns HAP_EUNSUPPORTED for a count it cannot carry (MPI:
 * above INT_MAX). Failures (a peer that died, a transport error) come back as a status with a
 * message naming the call and the backend's own error text; nothing prints or exits, except abort.
 * Ownership: a backend's init/split returns an owned hap_comm freed with hap_comm_destroy (a world
 * communicator: the backend's finalize). Buffers belong to the caller. */
#ifndef HAP_COMM_H
#define HAP_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/ops.h"

typedef enum hap_reduce_op { HAP_REDUCE_SUM = 0, HAP_REDUCE_MAX, HAP_REDUCE_MIN } hap_reduce_op;

typedef struct hap_comm hap_comm;

typedef struct hap_comm_ops {
  const char *name; /* "mpi" */
  /* recv[0..count) = op over ranks of send[0..count); send may equal recv (in place). */
  hap_status (*all_reduce)(hap_comm *c, const void *send, void *recv, int64_t count,
                           hap_dtype dtype, hap_reduce_op op, hap_err *err);
  /* recv = the concatenation of every rank's `bytes` bytes, in rank order. */
  hap_status (*all_gather)(hap_comm *c, const void *send, void *recv, int64_t bytes, hap_err *err);
  /* Uneven: rank r contributes recv_bytes[r] bytes placed at recv + displs[r]. */
  hap_status (*all_gatherv)(hap_comm *c, const void *send, int64_t send_bytes, void *recv,
                            const int64_t *recv_bytes, const int64_t *displs, hap_err *err);
  /* send holds size * count elements; rank r gets the reduction of block r in recv[0..count). */
  hap_status (*reduce_scatter)(hap_comm *c, const void *send, void *recv, int64_t count,
                               hap_dtype dtype, hap_reduce_op op, hap_err *err);
  /* Uneven: rank r gets counts[r] elements; blocks are contiguous in send. */
  hap_status (*reduce_scatterv)(hap_comm *c, const void *send, void *recv, const int64_t *counts,
                                hap_dtype dtype, hap_reduce_op op, hap_err *err);
  /* Block r (bytes bytes) of send goes to rank r; recv block r comes from rank r. */
  hap_status (*all_to_all)(hap_comm *c, const void *send, void *recv, int64_t bytes, hap_err *err);
  hap_status (*all_to_allv)(hap_comm *c, const void *send, const int64_t *send_bytes,
                            const int64_t *send_displs, void *recv, const int64_t *recv_bytes,
                            const int64_t *recv_displs, hap_err *err);
  /* buf on every rank <- buf on root. */
  hap_status (*broadcast)(hap_comm *c, void *buf, int64_t bytes, int32_t root, hap_err *err);
  /* Point-to-point (only the two ranks call): matched by peer and tag (0..32767). */
  hap_status (*send)(hap_comm *c, const void *buf, int64_t bytes, int32_t peer, int32_t tag,
                     hap_err *err);
  hap_status (*recv)(hap_comm *c, void *buf, int64_t bytes, int32_t peer, int32_t tag,
                     hap_err *err);
  hap_status (*barrier)(hap_comm *c, hap_err *err);
  /* Collective: ranks with the same color >= 0 form a new communicator ordered by (key, rank);
   * a rank passing color < 0 gets *out = NULL. */
  hap_status (*split)(hap_comm *c, int32_t color, int32_t key, hap_comm **out, hap_err *err);
  /* Stop every rank of the job (after printing nothing); does not return. */
  void (*abort)(hap_comm *c, int code);
  void (*destroy)(hap_comm *c);
  /* Point-to-point without waiting for the receiver (pipelined plans: a rank never blocks on
   * its own sends, so any order of sends and receives that would finish with unbounded buffers
   * finishes). Matched like send; messages between two ranks with one tag arrive in the order
   * they were started. buf must stay unchanged until send_wait returns. NULL in a backend that
   * has none. */
  hap_status (*send_start)(hap_comm *c, const void *buf, int64_t bytes, int32_t peer, int32_t tag,
                           hap_err *err);
  /* Wait until every send this rank started on c has completed (not collective). */
  hap_status (*send_wait)(hap_comm *c, hap_err *err);
  /* Reductions that do not wait (gradient buckets overlapping the backward pass): buf[0..count)
   * becomes the op over ranks of every rank's buf, in place, once reduce_wait has returned; buf
   * stays untouched until then. Every rank starts the same reductions in the same order; blocking
   * collectives on c may come in between (they keep their order). They progress inside
   * reduce_test, reduce_wait and other calls on c. NULL in a backend that has none: the caller
   * reduces with all_reduce instead. */
  hap_status (*all_reduce_start)(hap_comm *c, void *buf, int64_t count, hap_dtype dtype,
                                 hap_reduce_op op, hap_err *err);
  /* Progress the started reductions without blocking; *done: every one has completed. */
  hap_status (*reduce_test)(hap_comm *c, bool *done, hap_err *err);
  /* Wait until every reduction started on c has completed. */
  hap_status (*reduce_wait)(hap_comm *c, hap_err *err);
} hap_comm_ops;

struct hap_comm {
  const hap_comm_ops *ops;
  int32_t rank, size; /* this process's rank in 0..size-1 */
  void *impl;
};

static inline void hap_comm_destroy(hap_comm *c) {
  if (c != NULL)
    c->ops->destroy(c);
}

#endif
