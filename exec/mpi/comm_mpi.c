/* comm_mpi.c — the `mpi` communication backend (comm_mpi.h). Counts are checked against INT_MAX
 * (MPI's int counts); uneven variants convert their int64 arrays to int on the heap.
 *
 * All-reduce, all-gather(v) and reduce-scatter(v) reach MPI in pieces of at most piece_bytes (the
 * largest buffer of one MPI call). glibc serves a block above its mmap threshold (32 MiB at most)
 * with a fresh mapping, so Open MPI's reductions over bigger buffers page-fault their temporary
 * buffers on every call: on dev-2c (2 ranks, shared memory) an in-place all-reduce of 392 MiB took
 * 1.3 s in one call and 0.08 s in 4 MiB pieces, a reduce-scatter 3.9 s against 0.10 s; all-gather
 * 0.07-1.9 s in one call, 0.07 s in pieces; all-to-all and point-to-point showed no such cliff
 * (tests/bench/bench_comm_mpi, reports/BENCHMARKS.md). NCCL and DDP's gradient buckets move large
 * tensors in pieces too. all_reduce_start queues its pieces the same way and keeps at most
 * NB_ACTIVE of them in flight, on a duplicate of the communicator (pump, below). */
#include "exec/comm_mpi.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A piece of a non-blocking all-reduce, not yet started. */
typedef struct nb_piece {
  void *buf;
  int count;
  MPI_Datatype type;
  MPI_Op op;
} nb_piece;

/* Pieces of non-blocking all-reduces in flight at once: more only thrash the caches (411 MB as
 * 100 pieces started together took 1.2x the blocking call on dev-2c). */
enum { NB_ACTIVE = 2 };

/* MPI requests in flight. */
typedef struct requests {
  MPI_Request *r;
  int n, cap;
} requests;

typedef struct mpi_impl {
  MPI_Comm comm;
  int owned;           /* MPI_Comm_free on destroy (not the world) */
  int64_t piece_bytes; /* largest buffer of one MPI call of a pieced collective; 0: no pieces */
  requests sends;      /* started and not yet waited for (send_start) */
  /* all_reduce_start's pieces: at most NB_ACTIVE in flight on nb_comm, the rest queued in the
   * order they were started */
  MPI_Comm nb_comm; /* a duplicate of comm (made at the first start), MPI_COMM_NULL before */
  requests reducing;
  nb_piece *queue;
  int64_t n_queued, next_queued, cap_queued;
} mpi_impl;

static MPI_Comm comm_of(hap_comm *c) { return ((mpi_impl *)c->impl)->comm; }

/* HAP_EMPI with "mpi: CALL failed (rank R): MPI's text" for a non-success code. */
static hap_status check(hap_comm *c, int rc, const char *call, hap_err *err) {
  if (rc == MPI_SUCCESS)
    return HAP_OK;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len <= 0) {
    len = 0;
  }
  text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
  return hap_err_set(err, HAP_EMPI, "mpi: %s failed on rank %d: %s", call, c->rank,
                     len > 0 ? text : "unknown error");
}

static hap_status fits_int(int64_t v, const char *call, hap_err *err) {
  if (v < 0 || v > INT_MAX)
    return hap_err_set(err, v < 0 ? HAP_EINVAL : HAP_EUNSUPPORTED,
                       "mpi: %s count %lld, expected 0..%d", call, (long long)v, INT_MAX);
  return HAP_OK;
}

static hap_status mpi_type(hap_dtype dt, MPI_Datatype *out, hap_err *err) {
  switch (dt) {
  case HAP_F32: *out = MPI_FLOAT; return HAP_OK;
  case HAP_F64: *out = MPI_DOUBLE; return HAP_OK;
  case HAP_I32: *out = MPI_INT32_T; return HAP_OK;
  case HAP_I64: *out = MPI_INT64_T; return HAP_OK;
  default:
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "mpi: reduction in %s, expected float32, float64, int32 or int64",
                       hap_dtype_name(dt));
  }
}

static hap_status mpi_op(hap_reduce_op op, MPI_Op *out, hap_err *err) {
  switch (op) {
  case HAP_REDUCE_SUM: *out = MPI_SUM; return HAP_OK;
  case HAP_REDUCE_MAX: *out = MPI_MAX; return HAP_OK;
  case HAP_REDUCE_MIN: *out = MPI_MIN; return HAP_OK;
  }
  return hap_err_set(err, HAP_EINVAL, "mpi: reduction op %d, expected sum, max or min", (int)op);
}

/* int copies of n int64 values (each in 0..INT_MAX); NULL on failure with err set. */
static int *int_array(const int64_t *v, int32_t n, const char *call, hap_err *err) {
  int *a = malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
  if (a == NULL) {
    hap_err_set(err, HAP_ENOMEM, "mpi: %s: out of memory", call);
    return NULL;
  }
  for (int32_t i = 0; i < n; i++) {
    if (fits_int(v[i], call, err) != HAP_OK) {
      free(a);
      return NULL;
    }
    a[i] = (int)v[i];
  }
  return a;
}

static int64_t piece_bytes(hap_comm *c) { return ((mpi_impl *)c->impl)->piece_bytes; }

/* Whether a collective whose largest buffer is `bytes` goes to MPI in pieces. */
static int in_pieces(hap_comm *c, int64_t bytes) {
  return piece_bytes(c) > 0 && bytes > piece_bytes(c);
}

/* Elements of `elem` bytes per piece when `parts` blocks share one call (>= 1, fits an int). */
static int64_t piece_elems(hap_comm *c, int64_t elem, int64_t parts) {
  int64_t n = piece_bytes(c) / (elem * parts);
  n = n < 1 ? 1 : n;
  return n > INT_MAX / parts ? INT_MAX / parts : n;
}

static int64_t clamp_piece(int64_t left, int64_t per) {
  return left <= 0 ? 0 : (left < per ? left : per);
}

static hap_status mpi_all_reduce(hap_comm *c, const void *send, void *recv, int64_t count,
                                 hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_Op o = MPI_OP_NULL;
  HAP_TRY(mpi_type(dtype, &t, err));
  HAP_TRY(mpi_op(op, &o, err));
  int64_t es = hap_dtype_size(dtype);
  if (!in_pieces(c, count * es)) {
    HAP_TRY(fits_int(count, "MPI_Allreduce", err));
    const void *s = send == recv ? MPI_IN_PLACE : send;
    return check(c, MPI_Allreduce(s, recv, (int)count, t, o, comm_of(c)), "MPI_Allreduce", err);
  }
  int64_t per = piece_elems(c, es, 1);
  for (int64_t off = 0; off < count; off += per) {
    int64_t n = clamp_piece(count - off, per);
    char *r = (char *)recv + off * es;
    const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * es;
    HAP_TRY(check(c, MPI_Allreduce(s, r, (int)n, t, o, comm_of(c)), "MPI_Allreduce", err));
  }
  return HAP_OK;
}

/* One piece of an all-gather: bytes [off, off + n) of every rank's block (blocks `stride` bytes
 * apart in recv), through a receive type of n bytes whose extent is the stride. */
static hap_status gather_piece(hap_comm *c, const char *send, char *recv, int64_t stride,
                               int64_t off, int64_t n, hap_err *err) {
  MPI_Datatype block = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
  int rc = MPI_Type_contiguous((int)n, MPI_BYTE, &block);
  if (rc == MPI_SUCCESS)
    rc = MPI_Type_create_resized(block, 0, (MPI_Aint)stride, &strided);
  if (rc == MPI_SUCCESS)
    rc = MPI_Type_commit(&strided);
  if (rc == MPI_SUCCESS)
    rc = MPI_Allgather(send + off, (int)n, MPI_BYTE, recv + off, 1, strided, comm_of(c));
  if (block != MPI_DATATYPE_NULL)
    MPI_Type_free(&block);
  if (strided != MPI_DATATYPE_NULL)
    MPI_Type_free(&strided);
  return check(c, rc, "MPI_Allgather", err);
}

static hap_status mpi_all_gather(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                 hap_err *err) {
  HAP_TRY(fits_int(bytes, "MPI_Allgather", err));
  if (!in_pieces(c, bytes * c->size))
    return check(c,
                 MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c)),
                 "MPI_Allgather", err);
  int64_t per = piece_elems(c, 1, c->size);
  for (int64_t off = 0; off < bytes; off += per)
    HAP_TRY(gather_piece(c, send, recv, bytes, off, clamp_piece(bytes - off, per), err));
  return HAP_OK;
}

/* Pieces of an uneven all-gather: bytes [off, off + per) of every rank's block, per call. */
static hap_status gatherv_pieces(hap_comm *c, const char *send, int64_t send_bytes, char *recv,
                                 const int64_t *recv_bytes, const int *offs, int *counts,
                                 int *piece_offs, hap_err *err) {
  int64_t per = piece_elems(c, 1, c->size), longest = 0;
  for (int32_t i = 0; i < c->size; i++)
    longest = recv_bytes[i] > longest ? recv_bytes[i] : longest;
  for (int64_t off = 0; off < longest; off += per) {
    for (int32_t i = 0; i < c->size; i++) {
      counts[i] = (int)clamp_piece(recv_bytes[i] - off, per);
      int64_t at = offs[i] + (counts[i] > 0 ? off : 0);
      HAP_TRY(fits_int(at, "MPI_Allgatherv", err));
      piece_offs[i] = (int)at;
    }
    int n = (int)clamp_piece(send_bytes - off, per);
    HAP_TRY(check(c,
                  MPI_Allgatherv(send + (n > 0 ? off : 0), n, MPI_BYTE, recv, counts, piece_offs,
                                 MPI_BYTE, comm_of(c)),
                  "MPI_Allgatherv", err));
  }
  return HAP_OK;
}

static hap_status mpi_all_gatherv(hap_comm *c, const void *send, int64_t send_bytes, void *recv,
                                  const int64_t *recv_bytes, const int64_t *displs, hap_err *err) {
  HAP_TRY(fits_int(send_bytes, "MPI_Allgatherv", err));
  int *counts = int_array(recv_bytes, c->size, "MPI_Allgatherv", err);
  int *offs = counts ? int_array(displs, c->size, "MPI_Allgatherv", err) : NULL;
  hap_status st = HAP_EINVAL;
  int64_t total = 0;
  for (int32_t i = 0; offs != NULL && i < c->size; i++)
    total += recv_bytes[i];
  if (offs != NULL && in_pieces(c, total)) {
    int *piece_counts = malloc((size_t)c->size * 2 * sizeof *piece_counts);
    st = piece_counts == NULL ? hap_err_set(err, HAP_ENOMEM, "mpi: MPI_Allgatherv: out of memory")
                              : gatherv_pieces(c, send, send_bytes, recv, recv_bytes, offs,
                                               piece_counts, piece_counts + c->size, err);
    free(piece_counts);
  } else if (offs != NULL) {
    st = check(
        c,
        MPI_Allgatherv(send, (int)send_bytes, MPI_BYTE, recv, counts, offs, MPI_BYTE, comm_of(c)),
        "MPI_Allgatherv", err);
  }
  free(counts);
  free(offs);
  return st;
}

/* Reduce-scatter with rank i's block of counts[i] elements starting at element starts[i] of send
 * (the blocks may be uneven), in pieces: elements [off, off + per) of every block are packed
 * into one contiguous buffer per call. */
static hap_status reduce_scatter_pieces(hap_comm *c, const char *send, char *recv,
                                        const int64_t *counts, const int64_t *starts,
                                        MPI_Datatype t, MPI_Op o, int64_t es, hap_err *err) {
  const int32_t ranks = c->size;
  int64_t per = piece_elems(c, es, ranks), longest = 0;
  for (int32_t i = 0; i < ranks; i++)
    longest = counts[i] > longest ? counts[i] : longest;
  int *n = malloc((size_t)ranks * sizeof *n);
  char *packed = malloc((size_t)(per * ranks * es));
  hap_status st = HAP_OK;
  if (n == NULL || packed == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "mpi: MPI_Reduce_scatter: out of memory");
  for (int64_t off = 0; st == HAP_OK && off < longest; off += per) {
    char *at = packed;
    for (int32_t i = 0; i < ranks; i++) {
      int64_t m = clamp_piece(counts[i] - off, per);
      if (m > 0)
        memcpy(at, send + (starts[i] + off) * es, (size_t)(m * es));
      at += m * es;
      n[i] = (int)m;
    }
    st = check(
        c, MPI_Reduce_scatter(packed, recv + (n[c->rank] > 0 ? off * es : 0), n, t, o, comm_of(c)),
        "MPI_Reduce_scatter", err);
  }
  free(n);
  free(packed);
  return st;
}

/* Even blocks through MPI_Reduce_scatter, not MPI_Reduce_scatter_block: Open MPI 4.1's _block
 * took 5x as long here (1 MiB on 2 shared-memory ranks: 259 us vs 55 us), and the executor's
 * uneven calls use MPI_Reduce_scatter too, so the profile times the call hap-run makes. */
static hap_status mpi_reduce_scatter(hap_comm *c, const void *send, void *recv, int64_t count,
                                     hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_Op o = MPI_OP_NULL;
  HAP_TRY(mpi_type(dtype, &t, err));
  HAP_TRY(mpi_op(op, &o, err));
  int64_t es = hap_dtype_size(dtype);
  bool pieces = in_pieces(c, count * c->size * es);
  if (!pieces)
    HAP_TRY(fits_int(count * c->size, "MPI_Reduce_scatter", err));
  size_t ranks = (size_t)c->size;
  int64_t *counts = malloc(ranks * sizeof *counts), *starts = malloc(ranks * sizeof *starts);
  int *ni = malloc(ranks * sizeof *ni);
  hap_status st = HAP_OK;
  if (counts == NULL || starts == NULL || ni == NULL) {
    st = hap_err_set(err, HAP_ENOMEM, "mpi: MPI_Reduce_scatter: out of memory");
  } else {
    for (size_t i = 0; i < ranks; i++) {
      counts[i] = count;
      starts[i] = (int64_t)i * count;
      ni[i] = (int)count;
    }
    st = pieces ? reduce_scatter_pieces(c, send, recv, counts, starts, t, o, es, err)
                : check(c, MPI_Reduce_scatter(send, recv, ni, t, o, comm_of(c)),
                        "MPI_Reduce_scatter", err);
  }
  free(counts);
  free(starts);
  free(ni);
  return st;
}

static hap_status mpi_reduce_scatterv(hap_comm *c, const void *send, void *recv,
                                      const int64_t *counts, hap_dtype dtype, hap_reduce_op op,
                                      hap_err *err) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_Op o = MPI_OP_NULL;
  HAP_TRY(mpi_type(dtype, &t, err));
  HAP_TRY(mpi_op(op, &o, err));
  const int32_t ranks = c->size;
  int *n = int_array(counts, ranks, "MPI_Reduce_scatter", err);
  if (n == NULL)
    return err ? err->status : HAP_EINVAL;
  int64_t es = hap_dtype_size(dtype), total = 0;
  for (int32_t i = 0; i < ranks; i++)
    total += counts[i];
  hap_status st = HAP_OK;
  if (in_pieces(c, total * es)) {
    int64_t *starts = malloc((size_t)ranks * sizeof *starts);
    if (starts == NULL) {
      st = hap_err_set(err, HAP_ENOMEM, "mpi: MPI_Reduce_scatter: out of memory");
    } else {
      int64_t at = 0;
      for (int32_t i = 0; i < ranks; i++) {
        starts[i] = at;
        at += counts[i];
      }
      st = reduce_scatter_pieces(c, send, recv, counts, starts, t, o, es, err);
    }
    free(starts);
  } else {
    st = check(c, MPI_Reduce_scatter(send, recv, n, t, o, comm_of(c)), "MPI_Reduce_scatter", err);
  }
  free(n);
  return st;
}

static hap_status mpi_all_to_all(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                 hap_err *err) {
  HAP_TRY(fits_int(bytes * c->size, "MPI_Alltoall", err));
  return check(c, MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c)),
               "MPI_Alltoall", err);
}

static hap_status mpi_all_to_allv(hap_comm *c, const void *send, const int64_t *send_bytes,
                                  const int64_t *send_displs, void *recv, const int64_t *recv_bytes,
                                  const int64_t *recv_displs, hap_err *err) {
  const char *call = "MPI_Alltoallv";
  int *sc = int_array(send_bytes, c->size, call, err);
  int *sd = sc ? int_array(send_displs, c->size, call, err) : NULL;
  int *rc = sd ? int_array(recv_bytes, c->size, call, err) : NULL;
  int *rd = rc ? int_array(recv_displs, c->size, call, err) : NULL;
  hap_status st = HAP_EINVAL;
  if (rd != NULL)
    st = check(c, MPI_Alltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, comm_of(c)), call,
               err);
  free(sc);
  free(sd);
  free(rc);
  free(rd);
  return st;
}

static hap_status mpi_broadcast(hap_comm *c, void *buf, int64_t bytes, int32_t root, hap_err *err) {
  HAP_TRY(fits_int(bytes, "MPI_Bcast", err));
  if (root < 0 || root >= c->size)
    return hap_err_set(err, HAP_EINVAL, "mpi: MPI_Bcast root %d, expected 0..%d", root,
                       c->size - 1);
  return check(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, comm_of(c)), "MPI_Bcast", err);
}

static hap_status peer_ok(hap_comm *c, int32_t peer, int32_t tag, const char *call, hap_err *err) {
  if (peer < 0 || peer >= c->size || peer == c->rank || tag < 0 || tag > 32767)
    return hap_err_set(err, HAP_EINVAL,
                       "mpi: %s peer %d tag %d, expected another rank of 0..%d and a tag in "
                       "0..32767",
                       call, peer, tag, c->size - 1);
  return HAP_OK;
}

static hap_status mpi_send(hap_comm *c, const void *buf, int64_t bytes, int32_t peer, int32_t tag,
                           hap_err *err) {
  HAP_TRY(fits_int(bytes, "MPI_Send", err));
  HAP_TRY(peer_ok(c, peer, tag, "MPI_Send", err));
  return check(c, MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, comm_of(c)), "MPI_Send", err);
}

static hap_status mpi_recv(hap_comm *c, void *buf, int64_t bytes, int32_t peer, int32_t tag,
                           hap_err *err) {
  HAP_TRY(fits_int(bytes, "MPI_Recv", err));
  HAP_TRY(peer_ok(c, peer, tag, "MPI_Recv", err));
  return check(c, MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, comm_of(c), MPI_STATUS_IGNORE),
               "MPI_Recv", err);
}

/* A free slot at the end of q (grown as needed); NULL when out of memory, with err set. */
static MPI_Request *next_request(requests *q, const char *call, hap_err *err) {
  if (q->n == q->cap) {
    int cap = q->cap > 0 ? 2 * q->cap : 16;
    MPI_Request *grown = realloc(q->r, (size_t)cap * sizeof(MPI_Request));
    if (grown == NULL) {
      hap_err_set(err, HAP_ENOMEM, "mpi: %s: out of memory", call);
      return NULL;
    }
    q->r = grown;
    q->cap = cap;
  }
  return &q->r[q->n];
}

static hap_status wait_all(hap_comm *c, requests *q, hap_err *err) {
  int n = q->n;
  q->n = 0;
  if (n == 0)
    return HAP_OK;
  return check(c, MPI_Waitall(n, q->r, MPI_STATUSES_IGNORE), "MPI_Waitall", err);
}

static hap_status mpi_send_start(hap_comm *c, const void *buf, int64_t bytes, int32_t peer,
                                 int32_t tag, hap_err *err) {
  HAP_TRY(fits_int(bytes, "MPI_Isend", err));
  HAP_TRY(peer_ok(c, peer, tag, "MPI_Isend", err));
  mpi_impl *m = c->impl;
  MPI_Request *r = next_request(&m->sends, "MPI_Isend", err);
  if (r == NULL)
    return HAP_ENOMEM;
  HAP_TRY(check(c, MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm, r), "MPI_Isend", err));
  m->sends.n++;
  return HAP_OK;
}

static hap_status mpi_send_wait(hap_comm *c, hap_err *err) {
  return wait_all(c, &((mpi_impl *)c->impl)->sends, err);
}

/* Start queued pieces while fewer than NB_ACTIVE are in flight. They go on their own communicator
 * (nb_comm): when a piece starts depends on when the one before it finished, so it may fall
 * before a blocking collective on one rank and after it on another; MPI orders collectives per
 * communicator, so the two streams cannot mismatch. */
static hap_status pump(hap_comm *c, hap_err *err) {
  mpi_impl *m = c->impl;
  while (m->reducing.n < NB_ACTIVE && m->next_queued < m->n_queued) {
    MPI_Request *r = next_request(&m->reducing, "MPI_Iallreduce", err);
    if (r == NULL)
      return HAP_ENOMEM;
    const nb_piece *p = &m->queue[m->next_queued++];
    HAP_TRY(check(c, MPI_Iallreduce(MPI_IN_PLACE, p->buf, p->count, p->type, p->op, m->nb_comm, r),
                  "MPI_Iallreduce", err));
    m->reducing.n++;
  }
  if (m->next_queued == m->n_queued)
    m->n_queued = m->next_queued = 0;
  return HAP_OK;
}

/* In place, in pieces of at most piece_bytes as mpi_all_reduce goes, queued for pump. */
static hap_status mpi_all_reduce_start(hap_comm *c, void *buf, int64_t count, hap_dtype dtype,
                                       hap_reduce_op op, hap_err *err) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_Op o = MPI_OP_NULL;
  HAP_TRY(mpi_type(dtype, &t, err));
  HAP_TRY(mpi_op(op, &o, err));
  if (count < 0)
    return hap_err_set(err, HAP_EINVAL, "mpi: MPI_Iallreduce count %lld, expected >= 0",
                       (long long)count);
  mpi_impl *m = c->impl;
  if (m->nb_comm == MPI_COMM_NULL) /* collective: every rank's first start */
    HAP_TRY(check(c, MPI_Comm_dup(m->comm, &m->nb_comm), "MPI_Comm_dup", err));
  int64_t es = hap_dtype_size(dtype);
  int64_t per = in_pieces(c, count * es) ? piece_elems(c, es, 1) : (count > 0 ? count : 1);
  HAP_TRY(fits_int(per < count ? per : count, "MPI_Iallreduce", err));
  int64_t pieces = (count + per - 1) / per;
  if (m->n_queued + pieces > m->cap_queued) {
    int64_t cap = 2 * (m->n_queued + pieces);
    nb_piece *grown = realloc(m->queue, (size_t)cap * sizeof *grown);
    if (grown == NULL)
      return hap_err_set(err, HAP_ENOMEM, "mpi: MPI_Iallreduce: out of memory");
    m->queue = grown;
    m->cap_queued = cap;
  }
  for (int64_t off = 0; off < count; off += per)
    m->queue[m->n_queued++] =
        (nb_piece){(char *)buf + off * es, (int)clamp_piece(count - off, per), t, o};
  return pump(c, err);
}

static hap_status mpi_reduce_test(hap_comm *c, bool *done, hap_err *err) {
  mpi_impl *m = c->impl;
  requests *q = &m->reducing;
  int flag = 1;
  if (q->n > 0)
    HAP_TRY(check(c, MPI_Testall(q->n, q->r, &flag, MPI_STATUSES_IGNORE), "MPI_Testall", err));
  if (flag)
    q->n = 0;
  HAP_TRY(pump(c, err));
  *done = q->n == 0;
  return HAP_OK;
}

static hap_status mpi_reduce_wait(hap_comm *c, hap_err *err) {
  mpi_impl *m = c->impl;
  do {
    HAP_TRY(wait_all(c, &m->reducing, err));
    HAP_TRY(pump(c, err));
  } while (m->reducing.n > 0);
  return HAP_OK;
}

static hap_status mpi_barrier(hap_comm *c, hap_err *err) {
  return check(c, MPI_Barrier(comm_of(c)), "MPI_Barrier", err);
}

static hap_status wrap(MPI_Comm comm, int owned, int64_t piece_bytes, hap_comm **out, hap_err *err);

static hap_status mpi_split(hap_comm *c, int32_t color, int32_t key, hap_comm **out, hap_err *err) {
  *out = NULL;
  MPI_Comm nc = MPI_COMM_NULL;
  HAP_TRY(check(c, MPI_Comm_split(comm_of(c), color < 0 ? MPI_UNDEFINED : color, key, &nc),
                "MPI_Comm_split", err));
  if (nc == MPI_COMM_NULL)
    return HAP_OK;
  hap_status st =
      check(c, MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", err);
  if (st == HAP_OK)
    st = wrap(nc, 1, piece_bytes(c), out, err);
  if (st != HAP_OK)
    MPI_Comm_free(&nc);
  return st;
}

static void mpi_abort(hap_comm *c, int code) {
  MPI_Abort(comm_of(c), code);
  abort(); /* MPI_Abort does not return; this keeps the contract if it ever does */
}

static void mpi_destroy(hap_comm *c) {
  if (c == NULL)
    return;
  mpi_impl *m = c->impl;
  if (m->owned)
    MPI_Comm_free(&m->comm);
  free(m->sends.r);
  free(m->reducing.r);
  free(m->queue);
  if (m->nb_comm != MPI_COMM_NULL)
    MPI_Comm_free(&m->nb_comm);
  free(m);
  free(c);
}

static const hap_comm_ops mpi_ops = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .all_gatherv = mpi_all_gatherv,
    .reduce_scatter = mpi_reduce_scatter,
    .reduce_scatterv = mpi_reduce_scatterv,
    .all_to_all = mpi_all_to_all,
    .all_to_allv = mpi_all_to_allv,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .split = mpi_split,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
    .send_start = mpi_send_start,
    .send_wait = mpi_send_wait,
    .all_reduce_start = mpi_all_reduce_start,
    .reduce_test = mpi_reduce_test,
    .reduce_wait = mpi_reduce_wait,
};

static hap_status wrap(MPI_Comm comm, int owned, int64_t piece_bytes, hap_comm **out,
                       hap_err *err) {
  hap_comm *c = calloc(1, sizeof *c);
  mpi_impl *m = calloc(1, sizeof *m);
  if (c == NULL || m == NULL) {
    free(c);
    free(m);
    return hap_err_set(err, HAP_ENOMEM, "mpi: out of memory creating a communicator");
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  m->comm = comm;
  m->nb_comm = MPI_COMM_NULL;
  m->owned = owned;
  m->piece_bytes = piece_bytes;
  c->ops = &mpi_ops;
  c->impl = m;
  c->rank = rank;
  c->size = size;
  *out = c;
  return HAP_OK;
}

/* HAP_MPI_PIECE_BYTES, else HAP_MPI_PIECE_BYTES_DEFAULT. */
static hap_status piece_bytes_from_env(int64_t *out, hap_err *err) {
  *out = HAP_MPI_PIECE_BYTES_DEFAULT;
  const char *v = getenv("HAP_MPI_PIECE_BYTES");
  if (v == NULL)
    return HAP_OK;
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || n < 0)
    return hap_err_set(err, HAP_EINVAL,
                       "environment variable HAP_MPI_PIECE_BYTES='%s': expected a byte count >= 0 "
                       "(0: every collective in one MPI call)",
                       v);
  *out = (int64_t)n;
  return HAP_OK;
}

/* glibc's allocator for a rank that moves large buffers (unless HAP_MALLOC=default): blocks up to
 * 1 GiB come from the heap instead of a fresh mapping, and the heap grows with a 256 MiB pad and
 * is not trimmed below 2 GiB free, so freed buffers (Open MPI's temporaries, a gradient bucket)
 * are reused instead of mapped and page-faulted afresh on every call. On dev-2c (2 ranks): a
 * 392 MiB all-reduce in one call 0.99 -> 0.10 s, a reduce-scatter 3.4 -> 0.07 s, and VGG19's
 * overlapped gradient sums no longer fall into a 4x slower mode in some runs
 * (reports/BENCHMARKS.md). */
static hap_status keep_large_blocks(hap_err *err) {
  const char *v = getenv("HAP_MALLOC");
  if (v != NULL && strcmp(v, "default") != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "environment variable HAP_MALLOC='%s': expected 'default' (glibc's own "
                       "allocator settings) or unset",
                       v);
#ifdef __GLIBC__
  if (v == NULL) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    mallopt(M_TOP_PAD, 256 << 20);
  }
#endif
  return HAP_OK;
}

hap_status hap_comm_mpi_init(int *argc, char ***argv, hap_comm **world, hap_err *err) {
  *world = NULL;
  int64_t pieces = 0;
  HAP_TRY(piece_bytes_from_env(&pieces, err));
  HAP_TRY(keep_large_blocks(err));
  int inited = 0;
  MPI_Initialized(&inited);
  /* Open MPI's non-blocking all-reduce (coll/libnbc) picks a binomial tree by default, 2.3x the
   * blocking call's time for 16 MiB on 2 shared-memory ranks; its ring matches the blocking call
   * (0.39 against 0.39 ms for 4 MiB, 3.66 against 3.60 ms for 16 MiB on dev-2c). The gradient
   * buckets are MiBs, where a ring is the bandwidth-optimal choice. A value the user set wins. */
  if (!inited)
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
  if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
    return hap_err_set(err, HAP_EMPI, "mpi: MPI_Init failed");
  if (MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) != MPI_SUCCESS)
    return hap_err_set(err, HAP_EMPI, "mpi: cannot set MPI_ERRORS_RETURN on MPI_COMM_WORLD");
  return wrap(MPI_COMM_WORLD, 0, pieces, world, err);
}

void hap_comm_mpi_set_piece_bytes(hap_comm *c, int64_t bytes) {
  ((mpi_impl *)c->impl)->piece_bytes = bytes > 0 ? bytes : 0;
}

const char *hap_comm_mpi_library(char *buf, size_t len) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (len == 0)
    return buf;
  buf[0] = '\0';
  if (MPI_Get_library_version(v, &n) != MPI_SUCCESS || n <= 0)
    return buf;
  v[n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
  snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
  return buf;
}

void hap_comm_mpi_finalize(hap_comm *world) {
  hap_comm_destroy(world);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}
