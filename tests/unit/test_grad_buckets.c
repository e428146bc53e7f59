/* The runner's overlapped gradient buckets (run/grad_buckets.h) over a fake comm that records each
 * started reduction and, at reduce_wait, "sums" it as size ranks holding the same values would
 * (times the size), so every copy in and out is visible. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "grad_buckets.h"

enum { MAX_STARTS = 16 };

typedef struct fake {
  float *buf[MAX_STARTS];
  int64_t count[MAX_STARTS];
  int n_started, n_done, tests, waits;
} fake;

static hap_status f_start(hap_comm *c, void *buf, int64_t count, hap_dtype dtype, hap_reduce_op op,
                          hap_err *err) {
  fake *f = c->impl;
  cr_assert_eq(dtype, HAP_F32);
  cr_assert_eq(op, HAP_REDUCE_SUM);
  if (f->n_started == MAX_STARTS)
    return hap_err_set(err, HAP_EINVAL, "fake: too many starts");
  f->buf[f->n_started] = buf;
  f->count[f->n_started++] = count;
  return HAP_OK;
}

static hap_status f_test(hap_comm *c, bool *done, hap_err *err) {
  (void)err;
  fake *f = c->impl;
  f->tests++;
  *done = f->n_done == f->n_started;
  return HAP_OK;
}

static hap_status f_wait(hap_comm *c, hap_err *err) {
  (void)err;
  fake *f = c->impl;
  f->waits++;
  for (; f->n_done < f->n_started; f->n_done++)
    for (int64_t i = 0; i < f->count[f->n_done]; i++)
      f->buf[f->n_done][i] *= (float)c->size;
  return HAP_OK;
}

static hap_status f_fail(hap_comm *c, void *buf, int64_t count, hap_dtype dtype, hap_reduce_op op,
                         hap_err *err) {
  (void)c, (void)buf, (void)count, (void)dtype, (void)op;
  return hap_err_set(err, HAP_EMPI, "fake: peer gone");
}

static const hap_comm_ops fake_ops = {
    .name = "fake", .all_reduce_start = f_start, .reduce_test = f_test, .reduce_wait = f_wait};
static const hap_comm_ops failing_ops = {
    .name = "failing", .all_reduce_start = f_fail, .reduce_test = f_test, .reduce_wait = f_wait};
static const hap_comm_ops blocking_only_ops = {.name = "blocking"};

static void fill(float *g, int64_t n, float base) {
  for (int64_t i = 0; i < n; i++)
    g[i] = base + (float)i;
}

static void expect_times(const float *g, int64_t n, float base, float k) {
  for (int64_t i = 0; i < n; i++)
    cr_assert_float_eq(g[i], k * (base + (float)i), 0, "element %lld", (long long)i);
}

Test(grad_buckets, fill_start_when_full_and_copy_sums_back) {
  fake f = {0};
  hap_comm c = {.ops = &fake_ops, .rank = 0, .size = 3, .impl = &f};
  hap_buckets *b = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_buckets_create(&c, 10 * sizeof(float), &b, &err), HAP_OK, "%s", err.msg);
  float g1[4], g2[6], g3[25], g4[3];
  for (int iter = 0; iter < 2; iter++) { /* the second iteration reuses the staging buffers */
    fill(g1, 4, 1), fill(g2, 6, 100), fill(g3, 25, 1000), fill(g4, 3, -7);
    int started0 = f.n_started;
    cr_assert_not(hap_buckets_pending(b));
    cr_assert_eq(hap_buckets_add(b, g1, 4, &err), HAP_OK);
    cr_assert_eq(f.n_started, started0, "4 of 10 floats: the bucket stays open");
    cr_assert(hap_buckets_pending(b));
    cr_assert_eq(hap_buckets_add(b, g2, 6, &err), HAP_OK);
    cr_assert_eq(f.n_started, started0 + 1, "10 of 10: started");
    cr_assert_eq(f.count[started0], 10);
    cr_assert_eq(hap_buckets_add(b, g3, 25, &err), HAP_OK); /* larger than a bucket: its own */
    cr_assert_eq(f.n_started, started0 + 2);
    cr_assert_eq(f.count[started0 + 1], 25);
    cr_assert_eq(f.buf[started0 + 1], g3, "summed in place, not copied");
    cr_assert_eq(hap_buckets_add(b, g4, 3, &err), HAP_OK);
    cr_assert_eq(hap_buckets_add(b, g4, 0, &err), HAP_OK); /* nothing to sum */
    cr_assert_eq(hap_buckets_progress(b, &err), HAP_OK);
    cr_assert_gt(f.tests, 0);
    expect_times(g1, 4, 1, 1); /* nothing copied back before finish */
    cr_assert_eq(hap_buckets_finish(b, &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(f.n_started, started0 + 3, "finish starts the partial last bucket");
    cr_assert_eq(f.count[started0 + 2], 3);
    expect_times(g1, 4, 1, 3);
    expect_times(g2, 6, 100, 3);
    expect_times(g3, 25, 1000, 3);
    expect_times(g4, 3, -7, 3);
    cr_assert_not(hap_buckets_pending(b));
  }
  cr_assert_eq(hap_buckets_started(b), 6);
  cr_assert_eq(hap_buckets_finish(b, &err), HAP_OK, "an empty finish waits for nothing");
  cr_assert_eq(f.waits, 2);
  hap_buckets_destroy(b);
}

Test(grad_buckets, errors_name_the_cause) {
  hap_comm c = {.ops = &blocking_only_ops, .rank = 0, .size = 2};
  hap_buckets *b = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_buckets_create(&c, 1024, &b, &err), HAP_EUNSUPPORTED);
  cr_assert_str_eq(err.msg, "hap-run: the blocking backend has no all-reduce that does not wait");
  cr_assert_null(b);
  fake f = {0};
  hap_comm ok = {.ops = &fake_ops, .rank = 0, .size = 2, .impl = &f};
  err = (hap_err){0};
  cr_assert_eq(hap_buckets_create(&ok, 3, &b, &err), HAP_EINVAL);
  cr_assert_str_eq(err.msg, "hap-run: bucket size 3 bytes, expected >= 4");
  hap_comm bad = {.ops = &failing_ops, .rank = 0, .size = 2, .impl = &f};
  cr_assert_eq(hap_buckets_create(&bad, 8, &b, &err), HAP_OK);
  float g[2] = {1, 2};
  err = (hap_err){0};
  cr_assert_eq(hap_buckets_add(b, g, 2, &err), HAP_EMPI);
  cr_assert_str_eq(err.msg, "fake: peer gone");
  hap_buckets_destroy(b);
}
