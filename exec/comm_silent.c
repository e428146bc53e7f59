/* comm_silent.c — the silent communicator (comm_silent.h). */
#include "exec/comm_silent.h"

#include <stdlib.h>
#include <string.h>

typedef struct silent {
  hap_comm *backing;
  bool sync;
  bool owns_backing; /* a split's part */
} silent;

/* With sync: wait where the real collective would make this rank wait for the others. */
static hap_status meet(hap_comm *c, hap_err *err) {
  const silent *s = c->impl;
  return s->sync ? s->backing->ops->barrier(s->backing, err) : HAP_OK;
}

/* memmove: send and recv may be the same buffer (in place). */
static void copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0 && dst != src)
    memmove(dst, src, (size_t)bytes);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static hap_status s_all_reduce(hap_comm *c, const void *send, void *recv, int64_t count,
                               hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  (void)op;
  HAP_TRY(meet(c, err));
  copy(recv, send, count * hap_dtype_size(dtype));
  return HAP_OK;
}

static hap_status s_all_gather(hap_comm *c, const void *send, void *recv, int64_t bytes,
                               hap_err *err) {
  HAP_TRY(meet(c, err));
  for (int32_t r = 0; r < c->size; r++)
    copy((char *)recv + (size_t)r * (size_t)bytes, send, bytes);
  return HAP_OK;
}

static hap_status s_all_gatherv(hap_comm *c, const void *send, int64_t send_bytes, void *recv,
                                const int64_t *recv_bytes, const int64_t *displs, hap_err *err) {
  HAP_TRY(meet(c, err));
  for (int32_t r = 0; r < c->size; r++)
    copy((char *)recv + displs[r], send, min64(send_bytes, recv_bytes[r]));
  return HAP_OK;
}

static hap_status s_reduce_scatter(hap_comm *c, const void *send, void *recv, int64_t count,
                                   hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  (void)op;
  HAP_TRY(meet(c, err));
  int64_t bytes = count * hap_dtype_size(dtype);
  copy(recv, (const char *)send + (size_t)c->rank * (size_t)bytes, bytes);
  return HAP_OK;
}

static hap_status s_reduce_scatterv(hap_comm *c, const void *send, void *recv,
                                    const int64_t *counts, hap_dtype dtype, hap_reduce_op op,
                                    hap_err *err) {
  (void)op;
  HAP_TRY(meet(c, err));
  int64_t at = 0;
  for (int32_t r = 0; r < c->rank; r++)
    at += counts[r];
  int64_t es = hap_dtype_size(dtype);
  copy(recv, (const char *)send + (size_t)(at * es), counts[c->rank] * es);
  return HAP_OK;
}

static hap_status s_all_to_all(hap_comm *c, const void *send, void *recv, int64_t bytes,
                               hap_err *err) {
  HAP_TRY(meet(c, err));
  const char *mine = (const char *)send + (size_t)c->rank * (size_t)bytes;
  for (int32_t r = 0; r < c->size; r++)
    copy((char *)recv + (size_t)r * (size_t)bytes, mine, bytes);
  return HAP_OK;
}

static hap_status s_all_to_allv(hap_comm *c, const void *send, const int64_t *send_bytes,
                                const int64_t *send_displs, void *recv, const int64_t *recv_bytes,
                                const int64_t *recv_displs, hap_err *err) {
  HAP_TRY(meet(c, err));
  const char *mine = (const char *)send + send_displs[c->rank];
  for (int32_t r = 0; r < c->size; r++)
    copy((char *)recv + recv_displs[r], mine, min64(send_bytes[c->rank], recv_bytes[r]));
  return HAP_OK;
}

static hap_status s_broadcast(hap_comm *c, void *buf, int64_t bytes, int32_t root, hap_err *err) {
  (void)buf;
  (void)bytes;
  (void)root;
  return meet(c, err);
}

static hap_status s_send(hap_comm *c, const void *buf, int64_t bytes, int32_t peer, int32_t tag,
                         hap_err *err) {
  (void)c;
  (void)buf;
  (void)bytes;
  (void)tag;
  return hap_err_set(err, HAP_EUNSUPPORTED, "silent comm: send to rank %d: nothing crosses ranks",
                     peer);
}

static hap_status s_recv(hap_comm *c, void *buf, int64_t bytes, int32_t peer, int32_t tag,
                         hap_err *err) {
  (void)c;
  (void)buf;
  (void)bytes;
  (void)tag;
  return hap_err_set(err, HAP_EUNSUPPORTED, "silent comm: recv from rank %d: nothing crosses ranks",
                     peer);
}

static hap_status s_barrier(hap_comm *c, hap_err *err) { return meet(c, err); }

static hap_status wrap(hap_comm *backing, bool sync, bool owns, hap_comm **out, hap_err *err);

static hap_status s_split(hap_comm *c, int32_t color, int32_t key, hap_comm **out, hap_err *err) {
  *out = NULL;
  const silent *s = c->impl;
  hap_comm *part = NULL;
  HAP_TRY(s->backing->ops->split(s->backing, color, key, &part, err));
  if (part == NULL)
    return HAP_OK;
  hap_status st = wrap(part, s->sync, true, out, err);
  if (st != HAP_OK)
    hap_comm_destroy(part);
  return st;
}

static void s_abort(hap_comm *c, int code) {
  const silent *s = c->impl;
  s->backing->ops->abort(s->backing, code);
}

static void s_destroy(hap_comm *c) {
  silent *s = c->impl;
  if (s->owns_backing)
    hap_comm_destroy(s->backing);
  free(s);
  free(c);
}

static const hap_comm_ops silent_ops = {
    .name = "silent",
    .all_reduce = s_all_reduce,
    .all_gather = s_all_gather,
    .all_gatherv = s_all_gatherv,
    .reduce_scatter = s_reduce_scatter,
    .reduce_scatterv = s_reduce_scatterv,
    .all_to_all = s_all_to_all,
    .all_to_allv = s_all_to_allv,
    .broadcast = s_broadcast,
    .send = s_send,
    .recv = s_recv,
    .barrier = s_barrier,
    .split = s_split,
    .abort = s_abort,
    .destroy = s_destroy,
};

static hap_status wrap(hap_comm *backing, bool sync, bool owns, hap_comm **out, hap_err *err) {
  *out = NULL;
  hap_comm *c = calloc(1, sizeof *c);
  silent *s = calloc(1, sizeof *s);
  if (c == NULL || s == NULL) {
    free(c);
    free(s);
    return hap_err_set(err, HAP_ENOMEM, "silent comm: out of memory");
  }
  *s = (silent){backing, sync, owns};
  c->ops = &silent_ops;
  c->rank = backing->rank;
  c->size = backing->size;
  c->impl = s;
  *out = c;
  return HAP_OK;
}

hap_status hap_comm_silent_create(hap_comm *backing, bool sync, hap_comm **out, hap_err *err) {
  if (backing == NULL) {
    *out = NULL;
    return hap_err_set(err, HAP_EINVAL, "silent comm: no backing communicator");
  }
  return wrap(backing, sync, false, out, err);
}
