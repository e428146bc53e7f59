/* comm_nccl.c — the `nccl` communication backend (comm_nccl.h). Every data call is
 * [ncclGroupStart, calls, ncclGroupEnd] (or one call) on the communicator's stream followed by
 * cudaStreamSynchronize; a failed call is reported with ncclGetErrorString and ncclGetLastError. */
#include "exec/comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if HAP_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

typedef struct nccl_impl {
  ncclComm_t comm;
  cudaStream_t stream;
  float *scratch; /* one float of device memory: the barrier's all-reduce */
  hap_comm *mpi;  /* the world it was bootstrapped from (borrowed): abort goes through it */
  int32_t device; /* CUDA ordinal */
} nccl_impl;

static nccl_impl *impl_of(hap_comm *c) { return (nccl_impl *)c->impl; }

static hap_status nccl_check(hap_comm *c, ncclResult_t r, const char *call, hap_err *err) {
  if (r == ncclSuccess)
    return HAP_OK;
  const char *last = ncclGetLastError(c != NULL ? impl_of(c)->comm : NULL);
  return hap_err_set(err, HAP_ENCCL, "nccl: %s failed on rank %d: %s%s%s", call,
                     c != NULL ? c->rank : -1, ncclGetErrorString(r),
                     last != NULL && last[0] != '\0' ? ": " : "", last != NULL ? last : "");
}

static hap_status stream_wait(hap_comm *c, const char *call, hap_err *err) {
  cudaError_t e = cudaStreamSynchronize(impl_of(c)->stream);
  if (e == cudaSuccess)
    return HAP_OK;
  (void)cudaGetLastError();
  return hap_err_set(err, HAP_ECUDA, "nccl: %s: cudaStreamSynchronize failed on rank %d: %s", call,
                     c->rank, cudaGetErrorString(e));
}

/* Finish a call: its NCCL result, then the stream. */
static hap_status finish(hap_comm *c, ncclResult_t r, const char *call, hap_err *err) {
  HAP_TRY(nccl_check(c, r, call, err));
  return stream_wait(c, call, err);
}

static hap_status nccl_type(hap_dtype dt, ncclDataType_t *out, hap_err *err) {
  switch (dt) {
  case HAP_F32: *out = ncclFloat32; return HAP_OK;
  case HAP_F64: *out = ncclFloat64; return HAP_OK;
  case HAP_F16: *out = ncclFloat16; return HAP_OK;
  case HAP_BF16: *out = ncclBfloat16; return HAP_OK;
  case HAP_I32: *out = ncclInt32; return HAP_OK;
  case HAP_I64: *out = ncclInt64; return HAP_OK;
  default:
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "nccl: reduction in %s, expected float32, float64, float16, bfloat16, int32 "
                       "or int64",
                       hap_dtype_name(dt));
  }
}

static hap_status nccl_op(hap_reduce_op op, ncclRedOp_t *out, hap_err *err) {
  switch (op) {
  case HAP_REDUCE_SUM: *out = ncclSum; return HAP_OK;
  case HAP_REDUCE_MAX: *out = ncclMax; return HAP_OK;
  case HAP_REDUCE_MIN: *out = ncclMin; return HAP_OK;
  }
  return hap_err_set(err, HAP_EINVAL, "nccl: reduction op %d, expected sum, max or min", (int)op);
}

static hap_status count_ok(int64_t v, const char *call, hap_err *err) {
  if (v < 0)
    return hap_err_set(err, HAP_EINVAL, "nccl: %s count %lld, expected >= 0", call, (long long)v);
  return HAP_OK;
}

/* Every entry of v[0..n) >= 0. */
static hap_status counts_ok(const int64_t *v, int32_t n, const char *call, hap_err *err) {
  for (int32_t i = 0; i < n; i++)
    if (v[i] < 0)
      return hap_err_set(err, HAP_EINVAL, "nccl: %s entry %d is %lld, expected >= 0", call, i,
                         (long long)v[i]);
  return HAP_OK;
}

static hap_status nccl_all_reduce(hap_comm *c, const void *send, void *recv, int64_t count,
                                  hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  ncclDataType_t t = ncclFloat32;
  ncclRedOp_t o = ncclSum;
  HAP_TRY(count_ok(count, "ncclAllReduce", err));
  HAP_TRY(nccl_type(dtype, &t, err));
  HAP_TRY(nccl_op(op, &o, err));
  nccl_impl *m = impl_of(c);
  return finish(c, ncclAllReduce(send, recv, (size_t)count, t, o, m->comm, m->stream),
                "ncclAllReduce", err);
}

static hap_status nccl_all_gather(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                  hap_err *err) {
  HAP_TRY(count_ok(bytes, "ncclAllGather", err));
  nccl_impl *m = impl_of(c);
  return finish(c, ncclAllGather(send, recv, (size_t)bytes, ncclInt8, m->comm, m->stream),
                "ncclAllGather", err);
}

static hap_status nccl_all_gatherv(hap_comm *c, const void *send, int64_t send_bytes, void *recv,
                                   const int64_t *recv_bytes, const int64_t *displs, hap_err *err) {
  const char *call = "all_gatherv (grouped ncclBroadcast)";
  HAP_TRY(count_ok(send_bytes, call, err));
  HAP_TRY(counts_ok(recv_bytes, c->size, call, err));
  HAP_TRY(counts_ok(displs, c->size, call, err));
  if (recv_bytes[c->rank] != send_bytes)
    return hap_err_set(err, HAP_EINVAL, "nccl: %s: rank %d sends %lld bytes, recv_bytes says %lld",
                       call, c->rank, (long long)send_bytes, (long long)recv_bytes[c->rank]);
  nccl_impl *m = impl_of(c);
  ncclResult_t r = ncclGroupStart();
  for (int32_t q = 0; q < c->size && r == ncclSuccess; q++)
    r = ncclBroadcast(send, (char *)recv + displs[q], (size_t)recv_bytes[q], ncclInt8, q, m->comm,
                      m->stream);
  ncclResult_t r2 = ncclGroupEnd();
  return finish(c, r != ncclSuccess ? r : r2, call, err);
}

static hap_status nccl_reduce_scatter(hap_comm *c, const void *send, void *recv, int64_t count,
                                      hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  ncclDataType_t t = ncclFloat32;
  ncclRedOp_t o = ncclSum;
  HAP_TRY(count_ok(count, "ncclReduceScatter", err));
  HAP_TRY(nccl_type(dtype, &t, err));
  HAP_TRY(nccl_op(op, &o, err));
  nccl_impl *m = impl_of(c);
  return finish(c, ncclReduceScatter(send, recv, (size_t)count, t, o, m->comm, m->stream),
                "ncclReduceScatter", err);
}

static hap_status nccl_reduce_scatterv(hap_comm *c, const void *send, void *recv,
                                       const int64_t *counts, hap_dtype dtype, hap_reduce_op op,
                                       hap_err *err) {
  const char *call = "reduce_scatterv (grouped ncclReduce)";
  ncclDataType_t t = ncclFloat32;
  ncclRedOp_t o = ncclSum;
  HAP_TRY(counts_ok(counts, c->size, call, err));
  HAP_TRY(nccl_type(dtype, &t, err));
  HAP_TRY(nccl_op(op, &o, err));
  nccl_impl *m = impl_of(c);
  size_t es = (size_t)hap_dtype_size(dtype), off = 0;
  ncclResult_t r = ncclGroupStart();
  for (int32_t q = 0; q < c->size && r == ncclSuccess; q++) {
    /* recv is used on the root only. */
    r = ncclReduce((const char *)send + off * es, recv, (size_t)counts[q], t, o, q, m->comm,
                   m->stream);
    off += (size_t)counts[q];
  }
  ncclResult_t r2 = ncclGroupEnd();
  return finish(c, r != ncclSuccess ? r : r2, call, err);
}

/* Grouped send/recv of block q (send_bytes[q] at send_displs[q]) to and from every rank q. */
static hap_status exchange(hap_comm *c, const void *send, const int64_t *sb, const int64_t *sd,
                           void *recv, const int64_t *rb, const int64_t *rd, const char *call,
                           hap_err *err) {
  nccl_impl *m = impl_of(c);
  ncclResult_t r = ncclGroupStart();
  for (int32_t q = 0; q < c->size && r == ncclSuccess; q++) {
    if (sb[q] > 0)
      r = ncclSend((const char *)send + sd[q], (size_t)sb[q], ncclInt8, q, m->comm, m->stream);
    if (r == ncclSuccess && rb[q] > 0)
      r = ncclRecv((char *)recv + rd[q], (size_t)rb[q], ncclInt8, q, m->comm, m->stream);
  }
  ncclResult_t r2 = ncclGroupEnd();
  return finish(c, r != ncclSuccess ? r : r2, call, err);
}

static hap_status nccl_all_to_all(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                  hap_err *err) {
  const char *call = "all_to_all (grouped ncclSend/ncclRecv)";
  HAP_TRY(count_ok(bytes, call, err));
  int64_t *v = malloc(2 * (size_t)c->size * sizeof *v);
  if (v == NULL)
    return hap_err_set(err, HAP_ENOMEM, "nccl: %s: out of memory", call);
  for (int32_t q = 0; q < c->size; q++) {
    v[q] = bytes;
    v[c->size + q] = bytes * q;
  }
  hap_status st = exchange(c, send, v, v + c->size, recv, v, v + c->size, call, err);
  free(v);
  return st;
}

static hap_status nccl_all_to_allv(hap_comm *c, const void *send, const int64_t *send_bytes,
                                   const int64_t *send_displs, void *recv,
                                   const int64_t *recv_bytes, const int64_t *recv_displs,
                                   hap_err *err) {
  const char *call = "all_to_allv (grouped ncclSend/ncclRecv)";
  HAP_TRY(counts_ok(send_bytes, c->size, call, err));
  HAP_TRY(counts_ok(send_displs, c->size, call, err));
  HAP_TRY(counts_ok(recv_bytes, c->size, call, err));
  HAP_TRY(counts_ok(recv_displs, c->size, call, err));
  return exchange(c, send, send_bytes, send_displs, recv, recv_bytes, recv_displs, call, err);
}

static hap_status nccl_broadcast(hap_comm *c, void *buf, int64_t bytes, int32_t root,
                                 hap_err *err) {
  HAP_TRY(count_ok(bytes, "ncclBroadcast", err));
  if (root < 0 || root >= c->size)
    return hap_err_set(err, HAP_EINVAL, "nccl: ncclBroadcast root %d, expected 0..%d", root,
                       c->size - 1);
  nccl_impl *m = impl_of(c);
  return finish(c, ncclBroadcast(buf, buf, (size_t)bytes, ncclInt8, root, m->comm, m->stream),
                "ncclBroadcast", err);
}

static hap_status peer_ok(hap_comm *c, int32_t peer, int32_t tag, const char *call, hap_err *err) {
  if (peer < 0 || peer >= c->size || peer == c->rank || tag < 0 || tag > 32767)
    return hap_err_set(err, HAP_EINVAL,
                       "nccl: %s peer %d tag %d, expected another rank of 0..%d and a tag in "
                       "0..32767",
                       call, peer, tag, c->size - 1);
  return HAP_OK;
}

static hap_status nccl_send(hap_comm *c, const void *buf, int64_t bytes, int32_t peer, int32_t tag,
                            hap_err *err) {
  HAP_TRY(count_ok(bytes, "ncclSend", err));
  HAP_TRY(peer_ok(c, peer, tag, "ncclSend", err));
  nccl_impl *m = impl_of(c);
  return finish(c, ncclSend(buf, (size_t)bytes, ncclInt8, peer, m->comm, m->stream), "ncclSend",
                err);
}

static hap_status nccl_recv(hap_comm *c, void *buf, int64_t bytes, int32_t peer, int32_t tag,
                            hap_err *err) {
  HAP_TRY(count_ok(bytes, "ncclRecv", err));
  HAP_TRY(peer_ok(c, peer, tag, "ncclRecv", err));
  nccl_impl *m = impl_of(c);
  return finish(c, ncclRecv(buf, (size_t)bytes, ncclInt8, peer, m->comm, m->stream), "ncclRecv",
                err);
}

static hap_status nccl_barrier(hap_comm *c, hap_err *err) {
  nccl_impl *m = impl_of(c);
  return finish(c,
                ncclAllReduce(m->scratch, m->scratch, 1, ncclFloat32, ncclSum, m->comm, m->stream),
                "barrier (1-element ncclAllReduce)", err);
}

static hap_status wrap(hap_comm *mpi, int32_t device, ncclComm_t comm, hap_comm **out,
                       hap_err *err);

static hap_status nccl_split(hap_comm *c, int32_t color, int32_t key, hap_comm **out,
                             hap_err *err) {
  *out = NULL;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  nccl_impl *m = impl_of(c);
  ncclComm_t nc = NULL;
  HAP_TRY(nccl_check(c,
                     ncclCommSplit(m->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, NULL),
                     "ncclCommSplit", err));
  if (nc == NULL)
    return HAP_OK;
  hap_status st = wrap(m->mpi, m->device, nc, out, err);
  if (st != HAP_OK)
    (void)ncclCommDestroy(nc);
  return st;
#else
  (void)color;
  (void)key;
  return hap_err_set(err, HAP_EUNSUPPORTED,
                     "nccl: split needs ncclCommSplit (NCCL >= 2.18), "
                     "this NCCL is %d",
                     hap_comm_nccl_version());
#endif
}

static void nccl_abort(hap_comm *c, int code) {
  nccl_impl *m = impl_of(c);
  (void)ncclCommAbort(m->comm); /* unblocks this rank's kernels waiting on dead peers */
  m->comm = NULL;
  if (m->mpi != NULL)
    m->mpi->ops->abort(m->mpi, code);
  abort();
}

static void nccl_destroy(hap_comm *c) {
  if (c == NULL)
    return;
  nccl_impl *m = impl_of(c);
  if (m->comm != NULL)
    (void)ncclCommDestroy(m->comm);
  if (m->scratch != NULL)
    (void)cudaFree(m->scratch);
  if (m->stream != NULL)
    (void)cudaStreamDestroy(m->stream);
  free(m);
  free(c);
}

static const hap_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .all_gatherv = nccl_all_gatherv,
    .reduce_scatter = nccl_reduce_scatter,
    .reduce_scatterv = nccl_reduce_scatterv,
    .all_to_all = nccl_all_to_all,
    .all_to_allv = nccl_all_to_allv,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .split = nccl_split,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

/* A hap_comm around `comm` (owned from here on, also on failure's caller side: the caller
 * destroys `comm` when this fails). */
static hap_status wrap(hap_comm *mpi, int32_t device, ncclComm_t comm, hap_comm **out,
                       hap_err *err) {
  *out = NULL;
  hap_comm *c = calloc(1, sizeof *c);
  nccl_impl *m = calloc(1, sizeof *m);
  if (c == NULL || m == NULL) {
    free(c);
    free(m);
    return hap_err_set(err, HAP_ENOMEM, "nccl: out of memory creating a communicator");
  }
  c->ops = &nccl_ops;
  c->impl = m;
  m->mpi = mpi;
  m->device = device;
  int rank = 0, size = 0;
  hap_status st = nccl_check(NULL, ncclCommUserRank(comm, &rank), "ncclCommUserRank", err);
  if (st == HAP_OK)
    st = nccl_check(NULL, ncclCommCount(comm, &size), "ncclCommCount", err);
  cudaError_t e = cudaSuccess;
  if (st == HAP_OK) {
    e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
      e = cudaMalloc((void **)&m->scratch, sizeof(float));
    if (e == cudaSuccess)
      e = cudaMemset(m->scratch, 0, sizeof(float));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      st = hap_err_set(err, HAP_ECUDA, "nccl: creating the communicator's stream and scratch: %s",
                       cudaGetErrorString(e));
    }
  }
  if (st != HAP_OK) {
    nccl_destroy(c); /* m->comm is still NULL: the caller destroys `comm` */
    return st;
  }
  m->comm = comm;
  c->rank = rank;
  c->size = size;
  *out = c;
  return HAP_OK;
}

hap_status hap_comm_nccl_init(hap_comm *mpi_world, int32_t device, hap_comm **out, hap_err *err) {
  *out = NULL;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return hap_err_set(err, HAP_ECUDA, "nccl: cudaSetDevice(%d) failed on rank %d: %s", device,
                       mpi_world->rank, cudaGetErrorString(e));
  }
  struct {
    int32_t ok; /* rank 0 got an id */
    ncclUniqueId id;
  } boot;
  memset(&boot, 0, sizeof boot);
  hap_status st = HAP_OK;
  if (mpi_world->rank == 0) {
    st = nccl_check(NULL, ncclGetUniqueId(&boot.id), "ncclGetUniqueId", err);
    boot.ok = st == HAP_OK;
  }
  /* Every rank joins the broadcast, also when rank 0 failed (it then sends ok = 0). */
  hap_err berr = {0};
  hap_status bst = mpi_world->ops->broadcast(mpi_world, &boot, (int64_t)sizeof boot, 0, &berr);
  if (st != HAP_OK)
    return st;
  if (bst != HAP_OK)
    return hap_err_set(err, bst, "nccl: broadcasting the unique id: %s", berr.msg);
  if (!boot.ok)
    return hap_err_set(err, HAP_ENCCL, "nccl: rank 0 could not create the NCCL unique id");
  ncclComm_t comm = NULL;
  HAP_TRY(nccl_check(NULL, ncclCommInitRank(&comm, mpi_world->size, boot.id, mpi_world->rank),
                     "ncclCommInitRank", err));
  st = wrap(mpi_world, device, comm, out, err);
  if (st != HAP_OK)
    (void)ncclCommDestroy(comm);
  return st;
}

int32_t hap_comm_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? (int32_t)v : 0;
}

#else /* !HAP_HAVE_NCCL */

hap_status hap_comm_nccl_init(hap_comm *mpi_world, int32_t device, hap_comm **out, hap_err *err) {
  (void)mpi_world;
  (void)device;
  *out = NULL;
  return hap_err_set(err, HAP_EUNSUPPORTED,
                     "nccl: this build has no NCCL (set NCCL_HOME and re-run cmake)");
}

int32_t hap_comm_nccl_version(void) { return 0; }

#endif
