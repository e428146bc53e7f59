/* Pipeline orders (plan/schedule.h): names, op counts and consistency, GPipe's and 1F1B's exact
 * sequences, 1F1B's warm-up per group, interleaved 1F1B's chunk-major order and warm-up, peak
 * in-flight activations walked from the orders, and every refused shape and malformed op list. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/schedule.h"

static hap_pipe_order *build(hap_pipe_schedule s, int32_t p, int32_t m, int32_t v) {
  hap_pipe_order *o = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_order_build(s, p, m, v, &o, &err), HAP_OK, "%s p=%d m=%d v=%d: %s",
               hap_pipe_schedule_name(s), p, m, v, err.msg);
  cr_assert_eq(hap_pipe_order_check(o, &err), HAP_OK, "%s", err.msg);
  return o;
}

/* Group g's ops as "F0 F1 B0 ..." (v = 1) or "F0c0 F1c0 ..." (v > 1). */
static void render(const hap_pipe_order *o, int32_t g, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int32_t k = 0; k < hap_pipe_order_n_ops(o, g) && len < n; k++) {
    hap_pipe_op op = hap_pipe_order_op(o, g, k);
    char chunk[16] = "";
    if (hap_pipe_order_chunks(o) > 1)
      snprintf(chunk, sizeof chunk, "c%d", op.chunk);
    len += (size_t)snprintf(buf + len, n - len, "%s%c%d%s", k ? " " : "", op.backward ? 'B' : 'F',
                            op.micro, chunk);
  }
}

static void expect_order(const hap_pipe_order *o, int32_t g, const char *want) {
  char got[1024];
  render(o, g, got, sizeof got);
  cr_assert_str_eq(got, want, "group %d", g);
}

/* Forwards before the first backward. */
static int32_t leading_forwards(const hap_pipe_order *o, int32_t g) {
  int32_t k = 0;
  while (k < hap_pipe_order_n_ops(o, g) && !hap_pipe_order_op(o, g, k).backward)
    k++;
  return k;
}

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

Test(schedule, names_round_trip) {
  for (int i = 0; i < HAP_PIPE_SCHEDULE_COUNT; i++) {
    hap_pipe_schedule s = HAP_PIPE_SCHEDULE_COUNT;
    const char *name = hap_pipe_schedule_name((hap_pipe_schedule)i);
    cr_assert_eq(hap_pipe_schedule_parse(name, &s), HAP_OK, "%s", name);
    cr_assert_eq((int)s, i);
    cr_assert_not_null(strstr(HAP_PIPE_SCHEDULE_CHOICES, name), "%s", name);
  }
  cr_assert_str_eq(hap_pipe_schedule_name(HAP_PIPE_GPIPE), "gpipe");
  cr_assert_str_eq(hap_pipe_schedule_name(HAP_PIPE_1F1B), "1f1b");
  cr_assert_str_eq(hap_pipe_schedule_name(HAP_PIPE_INTERLEAVED), "interleaved");
  cr_assert_str_eq(hap_pipe_schedule_name((hap_pipe_schedule)7), "?");
  hap_pipe_schedule s = HAP_PIPE_1F1B;
  cr_assert_eq(hap_pipe_schedule_parse("pipedream", &s), HAP_ENOTFOUND);
  cr_assert_eq(hap_pipe_schedule_parse("GPipe", &s), HAP_ENOTFOUND);
  cr_assert_eq(hap_pipe_schedule_parse("", &s), HAP_ENOTFOUND);
  cr_assert_eq(hap_pipe_schedule_parse(NULL, &s), HAP_ENOTFOUND);
  cr_assert_eq(s, HAP_PIPE_1F1B, "a failed parse leaves the output alone");
}

/* Every group runs 2*m*v ops, one forward and one backward of each (micro, chunk), forward
 * first; accessors report the shape. */
Test(schedule, counts_and_consistency) {
  const int32_t ps[] = {1, 2, 3, 4, 8}, ms[] = {1, 2, 3, 4, 5, 8, 16, 32};
  for (int si = 0; si < HAP_PIPE_SCHEDULE_COUNT; si++)
    for (size_t a = 0; a < sizeof ps / sizeof *ps; a++)
      for (size_t b = 0; b < sizeof ms / sizeof *ms; b++)
        for (int32_t v = 1; v <= 4; v++) {
          hap_pipe_schedule s = (hap_pipe_schedule)si;
          int32_t p = ps[a], m = ms[b];
          if ((s == HAP_PIPE_INTERLEAVED) != (v > 1) || (v > 1 && m % p != 0))
            continue;
          hap_pipe_order *o = build(s, p, m, v);
          cr_assert_eq(hap_pipe_order_schedule(o), s);
          cr_assert_eq(hap_pipe_order_groups(o), p);
          cr_assert_eq(hap_pipe_order_micro(o), m);
          cr_assert_eq(hap_pipe_order_chunks(o), v);
          for (int32_t g = 0; g < p; g++) {
            cr_assert_eq(hap_pipe_order_n_ops(o, g), 2 * m * v);
            int32_t fwd = 0;
            for (int32_t k = 0; k < 2 * m * v; k++)
              fwd += !hap_pipe_order_op(o, g, k).backward;
            cr_assert_eq(fwd, m * v, "%s p=%d m=%d v=%d group %d", hap_pipe_schedule_name(s), p, m,
                         v, g);
          }
          cr_assert_eq(hap_pipe_order_n_ops(o, -1), 0);
          cr_assert_eq(hap_pipe_order_n_ops(o, p), 0);
          cr_assert_eq(hap_pipe_order_in_flight(o, p), 0);
          hap_pipe_order_destroy(o);
        }
}

/* GPipe: all forwards in order, then the backwards last micro-batch first, on every group. */
Test(schedule, gpipe_order) {
  hap_pipe_order *o = build(HAP_PIPE_GPIPE, 3, 4, 1);
  for (int32_t g = 0; g < 3; g++)
    expect_order(o, g, "F0 F1 F2 F3 B3 B2 B1 B0");
  hap_pipe_order_destroy(o);
}

/* 1F1B, p = 4, m = 8: group i warms up with 3 - i forwards (the doc's timeline). */
Test(schedule, one_f_one_b_order) {
  hap_pipe_order *o = build(HAP_PIPE_1F1B, 4, 8, 1);
  expect_order(o, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  expect_order(o, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  expect_order(o, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  expect_order(o, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  hap_pipe_order_destroy(o);
  /* Fewer micro-batches than warm-up slots: group 0 of p = 4 runs all 2 forwards first. */
  o = build(HAP_PIPE_1F1B, 4, 2, 1);
  expect_order(o, 0, "F0 F1 B0 B1");
  expect_order(o, 2, "F0 F1 B0 B1");
  expect_order(o, 3, "F0 B0 F1 B1");
  hap_pipe_order_destroy(o);
}

/* Group i runs W = min(p-i-1, m) warm-up forwards F0..F(W-1), then F(W+s) B(s) for s < m-W,
 * then B(m-W)..B(m-1): checked op by op over many (p, m). */
Test(schedule, one_f_one_b_warmup_per_group) {
  for (int32_t p = 1; p <= 8; p++)
    for (int32_t m = 1; m <= 20; m++) {
      hap_pipe_order *o = build(HAP_PIPE_1F1B, p, m, 1);
      for (int32_t i = 0; i < p; i++) {
        int32_t w = min32(p - i - 1, m), k = 0;
        for (int32_t j = 0; j < w; j++, k++) {
          hap_pipe_op op = hap_pipe_order_op(o, i, k);
          cr_assert(!op.backward && op.micro == j && op.chunk == 0, "p=%d m=%d group %d op %d", p,
                    m, i, k);
        }
        for (int32_t s = 0; s < m - w; s++, k += 2) {
          hap_pipe_op f = hap_pipe_order_op(o, i, k), b = hap_pipe_order_op(o, i, k + 1);
          cr_assert(!f.backward && f.micro == w + s, "p=%d m=%d group %d op %d", p, m, i, k);
          cr_assert(b.backward && b.micro == s, "p=%d m=%d group %d op %d", p, m, i, k + 1);
        }
        for (int32_t j = m - w; j < m; j++, k++) {
          hap_pipe_op op = hap_pipe_order_op(o, i, k);
          cr_assert(op.backward && op.micro == j, "p=%d m=%d group %d op %d", p, m, i, k);
        }
        cr_assert_eq(k, 2 * m);
        cr_assert_eq(leading_forwards(o, i), min32(p - i, m));
      }
      hap_pipe_order_destroy(o);
    }
}

/* Peak activations held: 1F1B p - i (m >= p), min(p - i, m) in general; GPipe m everywhere. */
Test(schedule, in_flight_gpipe_and_1f1b) {
  for (int32_t p = 1; p <= 8; p++)
    for (int32_t m = 1; m <= 32; m++) {
      hap_pipe_order *f = build(HAP_PIPE_1F1B, p, m, 1);
      hap_pipe_order *g = build(HAP_PIPE_GPIPE, p, m, 1);
      for (int32_t i = 0; i < p; i++) {
        cr_assert_eq(hap_pipe_order_in_flight(f, i), min32(p - i, m), "1f1b p=%d m=%d group %d", p,
                     m, i);
        cr_assert_eq(hap_pipe_order_in_flight(g, i), m, "gpipe p=%d m=%d group %d", p, m, i);
      }
      hap_pipe_order_destroy(f);
      hap_pipe_order_destroy(g);
    }
  hap_pipe_order *o = build(HAP_PIPE_1F1B, 4, 8, 1);
  cr_assert_eq(hap_pipe_order_in_flight(o, 0), 4);
  cr_assert_eq(hap_pipe_order_in_flight(o, 3), 1);
  hap_pipe_order_destroy(o);
}

/* Interleaved p = 2, v = 2, m = 4: forwards in groups of p micro-batches, chunk 0 then chunk 1
 * (backwards chunk 1 then 0); group 0 warms up with 2*(2-0-1) + (2-1)*2 = 4 forwards, group 1
 * with 2. */
Test(schedule, interleaved_order) {
  hap_pipe_order *o = build(HAP_PIPE_INTERLEAVED, 2, 4, 2);
  expect_order(o, 0,
               "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0");
  expect_order(o, 1,
               "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0");
  hap_pipe_order_destroy(o);
}

/* Interleaved: forwards before the first backward = min(W_i + 1, m*v) with the warm-up
 * W_i = 2(p-i-1) + (v-1)p; the forward sequence is chunk-major in groups of p micro-batches. */
Test(schedule, interleaved_warmup_and_chunk_major) {
  for (int32_t p = 1; p <= 6; p++)
    for (int32_t v = 2; v <= 4; v++)
      for (int32_t m = p; m <= 4 * p; m += p) {
        hap_pipe_order *o = build(HAP_PIPE_INTERLEAVED, p, m, v);
        for (int32_t i = 0; i < p; i++) {
          int32_t w = 2 * (p - i - 1) + (v - 1) * p;
          cr_assert_eq(leading_forwards(o, i), min32(w + 1, m * v), "p=%d m=%d v=%d group %d", p, m,
                       v, i);
          int32_t t = 0; /* t-th forward of the group */
          for (int32_t k = 0; k < 2 * m * v; k++) {
            hap_pipe_op op = hap_pipe_order_op(o, i, k);
            if (op.backward)
              continue;
            int32_t round = t / (p * v), in = t % (p * v);
            cr_assert(op.micro == round * p + in % p && op.chunk == in / p,
                      "p=%d m=%d v=%d group %d forward %d: micro %d chunk %d", p, m, v, i, t,
                      op.micro, op.chunk);
            t++;
          }
        }
        hap_pipe_order_destroy(o);
      }
}

/* Interleaved in-flight, walked from the order: group i peaks at min(W_i + 1, m*v) chunk
 * activations. For group 0 with m >= 2p (a steady phase exists) that is exactly p*v + p - 1
 * chunk activations; one chunk holds 1/v of a group's layers, so in whole-stage activations it
 * is (p*v + p - 1)/v = p*(1 + (p-1)/(p*v)), TRAINING.md's factor, asserted both ways. */
Test(schedule, interleaved_in_flight) {
  for (int32_t p = 1; p <= 8; p++)
    for (int32_t v = 2; v <= 4; v++)
      for (int32_t m = p; m <= 4 * p; m += p) {
        hap_pipe_order *o = build(HAP_PIPE_INTERLEAVED, p, m, v);
        for (int32_t i = 0; i < p; i++) {
          int32_t w = 2 * (p - i - 1) + (v - 1) * p;
          cr_assert_eq(hap_pipe_order_in_flight(o, i), min32(w + 1, m * v),
                       "p=%d m=%d v=%d group %d", p, m, v, i);
        }
        if (m >= 2 * p) {
          int32_t peak = hap_pipe_order_in_flight(o, 0);
          cr_assert_eq(peak, p * v + p - 1, "p=%d m=%d v=%d", p, m, v);
          double stages = (double)peak / v, want = p * (1.0 + (p - 1.0) / (p * v));
          cr_assert(fabs(stages - want) <= 1e-12, "p=%d v=%d: %g stage activations, want %g", p, v,
                    stages, want);
        }
        hap_pipe_order_destroy(o);
      }
  hap_pipe_order *o = build(HAP_PIPE_INTERLEAVED, 4, 8, 2);
  cr_assert_eq(hap_pipe_order_in_flight(o, 0), 11); /* 5.5 stage activations vs 1F1B's 4 */
  cr_assert_eq(hap_pipe_order_in_flight(o, 3), 5);
  hap_pipe_order_destroy(o);
}

static void expect_refused(hap_pipe_schedule s, int32_t p, int32_t m, int32_t v, const char *msg) {
  hap_pipe_order *o = (hap_pipe_order *)&o; /* not NULL: the call must clear it */
  hap_err err = {0};
  cr_assert_eq(hap_pipe_order_build(s, p, m, v, &o, &err), HAP_EINVAL, "p=%d m=%d v=%d", p, m, v);
  cr_assert_null(o);
  cr_assert_str_eq(err.msg, msg);
}

Test(schedule, refused_shapes) {
  expect_refused(HAP_PIPE_1F1B, 0, 4, 1, "pipeline: stages: 0, expected >= 1");
  expect_refused(HAP_PIPE_GPIPE, -2, 4, 1, "pipeline: stages: -2, expected >= 1");
  expect_refused(HAP_PIPE_1F1B, 4, 0, 1, "pipeline: micro_batches: 0, expected >= 1");
  expect_refused(HAP_PIPE_INTERLEAVED, 4, 8, 0, "pipeline: chunks: 0, expected >= 1");
  expect_refused(HAP_PIPE_GPIPE, 4, 8, 2,
                 "pipeline: chunks: 2, expected 1 for gpipe (more chunks per group need "
                 "interleaved)");
  expect_refused(HAP_PIPE_1F1B, 4, 8, 3,
                 "pipeline: chunks: 3, expected 1 for 1f1b (more chunks per group need "
                 "interleaved)");
  expect_refused(HAP_PIPE_INTERLEAVED, 4, 8, 1,
                 "pipeline: chunks: 1, expected >= 2 for interleaved (one chunk per group is "
                 "1f1b)");
  expect_refused(HAP_PIPE_INTERLEAVED, 4, 6, 2,
                 "interleaved 1F1B needs micro_batches a multiple of the 4 stages, got 6");
  expect_refused(HAP_PIPE_INTERLEAVED, 3, 2, 2,
                 "interleaved 1F1B needs micro_batches a multiple of the 3 stages, got 2");
  expect_refused((hap_pipe_schedule)7, 4, 8, 1,
                 "pipeline: schedule: 7, expected one of gpipe, 1f1b, interleaved");
  expect_refused(HAP_PIPE_1F1B, 4096, 8192, 1,
                 "pipeline: stages 4096 x micro_batches 8192 x chunks 1 = 33554432, expected <= "
                 "16777216");
  expect_refused(HAP_PIPE_INTERLEAVED, 2, 1 << 30, 1 << 30,
                 "pipeline: stages 2 x micro_batches 1073741824 x chunks 1073741824 = "
                 "2305843009213693952, expected <= 16777216");
}

static void expect_bad_ops(int32_t m, int32_t v, const hap_pipe_op *ops, int32_t n,
                           const char *msg) {
  hap_err err = {0};
  cr_assert_eq(hap_pipe_ops_check(m, v, ops, n, &err), HAP_EINVAL, "want: %s", msg);
  cr_assert_str_eq(err.msg, msg);
}

#define F(j, c) ((hap_pipe_op){.backward = false, .micro = (j), .chunk = (c)})
#define B(j, c) ((hap_pipe_op){.backward = true, .micro = (j), .chunk = (c)})

Test(schedule, check_accepts_and_refuses_op_lists) {
  hap_err err = {0};
  hap_pipe_op ok[] = {F(0, 0), F(1, 0), B(1, 0), B(0, 0)};
  cr_assert_eq(hap_pipe_ops_check(2, 1, ok, 4, &err), HAP_OK, "%s", err.msg);
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), F(1, 0), B(1, 0)}, 3,
                 "micro-batch 0 chunk 0: no backward");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), B(0, 0)}, 2, "micro-batch 1 chunk 0: no forward");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), B(1, 0), F(1, 0), B(0, 0)}, 4,
                 "op 1: backward of micro-batch 1 chunk 0 before its forward");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), F(0, 0), F(1, 0), B(1, 0), B(0, 0)}, 5,
                 "op 1: forward of micro-batch 0 chunk 0 twice");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), F(1, 0), B(1, 0), B(1, 0), B(0, 0)}, 5,
                 "op 3: backward of micro-batch 1 chunk 0 twice");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), B(0, 0), F(0, 0)}, 3,
                 "op 2: forward of micro-batch 0 chunk 0 after its backward");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(0, 0), F(2, 0)}, 2, "op 1: micro-batch 2, expected 0..1");
  expect_bad_ops(2, 1, (hap_pipe_op[]){F(-1, 0)}, 1, "op 0: micro-batch -1, expected 0..1");
  expect_bad_ops(1, 2, (hap_pipe_op[]){F(0, 0), F(0, 2)}, 2, "op 1: chunk 2, expected 0..1");
  expect_bad_ops(0, 1, ok, 4,
                 "pipeline order: micro_batches 0, chunks 1, 4 ops: expected m, v >= 1 and ops");
  expect_bad_ops(2, 1, NULL, 4,
                 "pipeline order: micro_batches 2, chunks 1, 4 ops: expected m, v >= 1 and ops");
}
