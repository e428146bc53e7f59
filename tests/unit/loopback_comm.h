/* loopback_comm.h — a one-rank hap_comm without MPI for the unit tests that run the plan runner
 * in-process: every collective is a copy of the rank's own data, point-to-point and split are
 * refused. Header-only (static), for test files. */
#ifndef HAP_TEST_LOOPBACK_COMM_H
#define HAP_TEST_LOOPBACK_COMM_H

#include <stdlib.h>
#include <string.h>

#include "exec/comm.h"

static hap_status lb_all_reduce(hap_comm *c, const void *send, void *recv, int64_t count,
                                hap_dtype dt, hap_reduce_op op, hap_err *err) {
  (void)c, (void)op, (void)err;
  memmove(recv, send, (size_t)count * (size_t)hap_dtype_size(dt));
  return HAP_OK;
}
static hap_status lb_all_gather(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                hap_err *err) {
  (void)c, (void)err;
  memmove(recv, send, (size_t)bytes);
  return HAP_OK;
}
static hap_status lb_all_gatherv(hap_comm *c, const void *send, int64_t send_bytes, void *recv,
                                 const int64_t *recv_bytes, const int64_t *displs, hap_err *err) {
  (void)c, (void)recv_bytes, (void)err;
  memmove((char *)recv + displs[0], send, (size_t)send_bytes);
  return HAP_OK;
}
static hap_status lb_reduce_scatter(hap_comm *c, const void *send, void *recv, int64_t count,
                                    hap_dtype dt, hap_reduce_op op, hap_err *err) {
  return lb_all_reduce(c, send, recv, count, dt, op, err);
}
static hap_status lb_reduce_scatterv(hap_comm *c, const void *send, void *recv,
                                     const int64_t *counts, hap_dtype dt, hap_reduce_op op,
                                     hap_err *err) {
  return lb_all_reduce(c, send, recv, counts[0], dt, op, err);
}
static hap_status lb_all_to_all(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                hap_err *err) {
  return lb_all_gather(c, send, recv, bytes, err);
}
static hap_status lb_all_to_allv(hap_comm *c, const void *send, const int64_t *send_bytes,
                                 const int64_t *send_displs, void *recv, const int64_t *recv_bytes,
                                 const int64_t *recv_displs, hap_err *err) {
  (void)c, (void)recv_bytes, (void)err;
  memmove((char *)recv + recv_displs[0], (const char *)send + send_displs[0],
          (size_t)send_bytes[0]);
  return HAP_OK;
}
static hap_status lb_broadcast(hap_comm *c, void *buf, int64_t bytes, int32_t root, hap_err *err) {
  (void)c, (void)buf, (void)bytes, (void)root, (void)err;
  return HAP_OK;
}
static hap_status lb_p2p(hap_comm *c, void *buf, int64_t bytes, int32_t peer, int32_t tag,
                         hap_err *err) {
  (void)c, (void)buf, (void)bytes, (void)peer, (void)tag;
  return hap_err_set(err, HAP_EUNSUPPORTED, "loop-back comm: no peers");
}
static hap_status lb_send(hap_comm *c, const void *buf, int64_t bytes, int32_t peer, int32_t tag,
                          hap_err *err) {
  (void)c, (void)buf, (void)bytes, (void)peer, (void)tag;
  return hap_err_set(err, HAP_EUNSUPPORTED, "loop-back comm: no peers");
}
static hap_status lb_barrier(hap_comm *c, hap_err *err) {
  (void)c, (void)err;
  return HAP_OK;
}
static hap_status lb_split(hap_comm *c, int32_t color, int32_t key, hap_comm **out, hap_err *err) {
  (void)c, (void)color, (void)key, (void)out;
  return hap_err_set(err, HAP_EUNSUPPORTED, "loop-back comm: no split");
}
static void lb_abort(hap_comm *c, int code) {
  (void)c;
  exit(code);
}
static void lb_destroy(hap_comm *c) { (void)c; }

static const hap_comm_ops lb_ops = {"loopback",
                                    lb_all_reduce,
                                    lb_all_gather,
                                    lb_all_gatherv,
                                    lb_reduce_scatter,
                                    lb_reduce_scatterv,
                                    lb_all_to_all,
                                    lb_all_to_allv,
                                    lb_broadcast,
                                    lb_send,
                                    lb_p2p,
                                    lb_barrier,
                                    lb_split,
                                    lb_abort,
                                    lb_destroy};

/* World rank 0 of 1. */
static inline hap_comm hap_loopback_comm(void) {
  return (hap_comm){.ops = &lb_ops, .rank = 0, .size = 1};
}

#endif
