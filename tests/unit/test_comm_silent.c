/* test_comm_silent.c — the silent communicator (exec/comm_silent.h) over a fake backing
 * communicator that counts barriers and splits: every data call writes the blocks the real call
 * writes, from this rank's own data only; sync meets at the backing barrier; split wraps. */
#include <criterion/criterion.h>
#include <string.h>

#include "exec/comm_silent.h"

/* A fake backing communicator: rank 1 of 3; counts barriers; split gives rank 0 of 2. */
typedef struct fake {
  int barriers, splits, destroyed;
} fake;

static hap_status f_barrier(hap_comm *c, hap_err *err) {
  (void)err;
  ((fake *)c->impl)->barriers++;
  return HAP_OK;
}

static void f_destroy(hap_comm *c);

static const hap_comm_ops fake_ops;

static hap_status f_split(hap_comm *c, int32_t color, int32_t key, hap_comm **out, hap_err *err) {
  (void)key;
  (void)err;
  ((fake *)c->impl)->splits++;
  *out = NULL;
  if (color < 0)
    return HAP_OK;
  hap_comm *part = calloc(1, sizeof *part);
  *part = (hap_comm){&fake_ops, 0, 2, c->impl};
  *out = part;
  return HAP_OK;
}

static void f_destroy(hap_comm *c) {
  ((fake *)c->impl)->destroyed++;
  free(c);
}

static const hap_comm_ops fake_ops = {
    .name = "fake", .barrier = f_barrier, .split = f_split, .destroy = f_destroy};

static hap_comm *silent_over(fake *f, hap_comm *backing, bool sync) {
  *backing = (hap_comm){&fake_ops, 1, 3, f};
  hap_comm *s = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_comm_silent_create(backing, sync, &s, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(s->rank, 1);
  cr_assert_eq(s->size, 3);
  return s;
}

Test(comm_silent, data_calls_write_from_own_data_only) {
  fake f = {0};
  hap_comm backing;
  hap_comm *s = silent_over(&f, &backing, false);
  hap_err err = {0};
  float send[6] = {1, 2, 3, 4, 5, 6}, recv[6];
  /* all-reduce: recv = send (this rank's contribution alone) */
  memset(recv, 0, sizeof recv);
  cr_assert_eq(s->ops->all_reduce(s, send, recv, 6, HAP_F32, HAP_REDUCE_SUM, &err), HAP_OK);
  cr_assert_arr_eq(recv, send, sizeof send);
  /* all-gather: every rank's block holds what this rank sends */
  memset(recv, 0, sizeof recv);
  cr_assert_eq(s->ops->all_gather(s, send, recv, 2 * sizeof(float), &err), HAP_OK);
  float gathered[6] = {1, 2, 1, 2, 1, 2};
  cr_assert_arr_eq(recv, gathered, sizeof gathered);
  /* reduce-scatter: this rank (1) keeps its block of send */
  memset(recv, 0, sizeof recv);
  cr_assert_eq(s->ops->reduce_scatter(s, send, recv, 2, HAP_F32, HAP_REDUCE_SUM, &err), HAP_OK);
  cr_assert(recv[0] == 3 && recv[1] == 4 && recv[2] == 0);
  int64_t counts[3] = {1, 3, 2};
  memset(recv, 0, sizeof recv);
  cr_assert_eq(s->ops->reduce_scatterv(s, send, recv, counts, HAP_F32, HAP_REDUCE_SUM, &err),
               HAP_OK);
  cr_assert(recv[0] == 2 && recv[1] == 3 && recv[2] == 4 && recv[3] == 0);
  /* all-to-all(v): each recv block receives (the start of) the block this rank sends itself */
  memset(recv, 0, sizeof recv);
  cr_assert_eq(s->ops->all_to_all(s, send, recv, 2 * sizeof(float), &err), HAP_OK);
  float a2a[6] = {3, 4, 3, 4, 3, 4};
  cr_assert_arr_eq(recv, a2a, sizeof a2a);
  int64_t sb[3] = {4, 8, 4}, sd[3] = {0, 4, 12}, rb[3] = {4, 8, 4}, rd[3] = {0, 4, 12};
  memset(recv, 0, sizeof recv);
  cr_assert_eq(s->ops->all_to_allv(s, send, sb, sd, recv, rb, rd, &err), HAP_OK);
  float a2av[4] = {2, 2, 3, 2}; /* blocks of 1, 2, 1 floats, each from send[1..3) */
  cr_assert_arr_eq(recv, a2av, sizeof a2av);
  /* in place is fine, broadcast leaves the buffer, barrier does not wait without sync */
  cr_assert_eq(s->ops->all_reduce(s, send, send, 6, HAP_F32, HAP_REDUCE_SUM, &err), HAP_OK);
  cr_assert(send[5] == 6);
  cr_assert_eq(s->ops->broadcast(s, send, sizeof send, 0, &err), HAP_OK);
  cr_assert_eq(s->ops->barrier(s, &err), HAP_OK);
  cr_assert_eq(f.barriers, 0);
  /* nothing point-to-point */
  cr_assert_eq(s->ops->send(s, send, 4, 0, 0, &err), HAP_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "send to rank 0"), "%s", err.msg);
  hap_comm_destroy(s);
  cr_assert_eq(f.destroyed, 0, "the world's backing is borrowed");
}

Test(comm_silent, sync_meets_at_every_collective_and_split_wraps) {
  fake f = {0};
  hap_comm backing;
  hap_comm *s = silent_over(&f, &backing, true);
  hap_err err = {0};
  float x[3] = {1, 2, 3}, y[3];
  cr_assert_eq(s->ops->all_reduce(s, x, y, 3, HAP_F32, HAP_REDUCE_SUM, &err), HAP_OK);
  cr_assert_eq(s->ops->all_gather(s, x, y, sizeof(float), &err), HAP_OK);
  cr_assert_eq(s->ops->broadcast(s, x, sizeof x, 0, &err), HAP_OK);
  cr_assert_eq(s->ops->barrier(s, &err), HAP_OK);
  cr_assert_eq(f.barriers, 4);
  hap_comm *part = NULL;
  cr_assert_eq(s->ops->split(s, 0, 0, &part, &err), HAP_OK);
  cr_assert_not_null(part);
  cr_assert_str_eq(part->ops->name, "silent");
  cr_assert(part->rank == 0 && part->size == 2);
  cr_assert_eq(part->ops->barrier(part, &err), HAP_OK);
  cr_assert_eq(f.barriers, 5, "the part meets on its own backing");
  hap_comm_destroy(part);
  cr_assert_eq(f.destroyed, 1, "a split's backing is owned");
  hap_comm *none = (hap_comm *)1;
  cr_assert_eq(s->ops->split(s, -1, 0, &none, &err), HAP_OK);
  cr_assert_null(none);
  hap_comm_destroy(s);
}

Test(comm_silent, needs_a_backing_communicator) {
  hap_comm *s = (hap_comm *)1;
  hap_err err = {0};
  cr_assert_eq(hap_comm_silent_create(NULL, false, &s, &err), HAP_EINVAL);
  cr_assert_null(s);
}
