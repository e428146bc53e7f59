/* One pipeline iteration through the engine (simulate/pipeline_sim.h): the bubble of GPipe and
 * 1F1B against (p-1)/(m+p-1), interleaving's bubble reduced by v, transfer costs, a slow stage,
 * tails, the 1F1B timeline of docs/pipeline-schedules.md, invariants of every run (busy + idle =
 * makespan, ops in order and after their inputs), and every malformed input. Every number
 * asserted is read from the engine run. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simulate/pipeline_sim.h"

#define MAX_STAGES 64 /* virtual stages in these tests */

/* Free transfers: no latency, a bandwidth no activation notices (bytes/s). */
static const hap_pipe_link free_link = {.latency_s = 0, .bandwidth_Bps = 1e30};

static hap_pipe_order *build(hap_pipe_schedule s, int32_t p, int32_t m, int32_t v) {
  hap_pipe_order *o = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_order_build(s, p, m, v, &o, &err), HAP_OK, "%s", err.msg);
  return o;
}

static bool close_to(double got, double want, double rel) {
  return fabs(got - want) <= rel * fabs(want) + 1e-12;
}

/* The op's own time, s. */
static double op_time(const hap_pipe_sim_input *in, int32_t g, hap_pipe_op op) {
  int32_t k = op.chunk * hap_pipe_order_groups(in->order) + g;
  return op.backward ? in->bwd_s[k] : in->fwd_s[k];
}

/* Span of the (pass, micro, virtual stage) op. */
static hap_pipe_sim_span find(const hap_pipe_sim_input *in, const hap_pipe_sim *r, bool backward,
                              int32_t micro, int32_t stage) {
  int32_t p = hap_pipe_order_groups(in->order), g = stage % p;
  for (int32_t k = 0; k < hap_pipe_order_n_ops(in->order, g); k++) {
    hap_pipe_op op = hap_pipe_order_op(in->order, g, k);
    if (op.backward == backward && op.micro == micro && op.chunk == stage / p)
      return hap_pipe_sim_op_span(r, g, k);
  }
  cr_assert_fail("no op for micro %d stage %d", micro, stage);
  return (hap_pipe_sim_span){0};
}

/* What holds for every run: finite numbers, busy + idle = makespan and bubble = idle / makespan
 * per group, each op running for its time after the previous op of its group, each op starting
 * after its input (plus the link latency across groups), busy = the sum of op times and tail. */
static void check_invariants(const hap_pipe_sim_input *in, const hap_pipe_sim *r) {
  const hap_pipe_order *o = in->order;
  int32_t p = hap_pipe_order_groups(o), pv = p * hap_pipe_order_chunks(o);
  double ms = r->makespan_s, eps = 1e-9 * (ms > 1 ? ms : 1), mean = 0;
  cr_assert(isfinite(ms) && ms >= 0, "makespan %g", ms);
  cr_assert_eq(r->n_groups, p);
  cr_assert_eq(r->ops_per_group, hap_pipe_order_n_ops(o, 0));
  for (int32_t g = 0; g < p; g++) {
    cr_assert(isfinite(r->busy_s[g]) && isfinite(r->idle_s[g]) && isfinite(r->comm_s[g]));
    cr_assert(r->busy_s[g] >= 0 && r->idle_s[g] >= -eps && r->comm_s[g] >= 0);
    cr_assert(fabs(r->busy_s[g] + r->idle_s[g] - ms) <= eps, "group %d: %g + %g != %g", g,
              r->busy_s[g], r->idle_s[g], ms);
    cr_assert(fabs(r->bubble[g] - (ms > 0 ? r->idle_s[g] / ms : 0)) <= 1e-12);
    cr_assert(r->bubble[g] >= -1e-12 && r->bubble[g] <= 1 + 1e-12);
    mean += r->bubble[g] / p;
    double sum = in->tail_s != NULL ? in->tail_s[g] : 0, prev_end = 0;
    for (int32_t k = 0; k < r->ops_per_group; k++) {
      hap_pipe_op op = hap_pipe_order_op(o, g, k);
      hap_pipe_sim_span sp = hap_pipe_sim_op_span(r, g, k);
      double t = op_time(in, g, op);
      sum += t;
      cr_assert(fabs(sp.end_s - sp.start_s - t) <= eps, "group %d op %d", g, k);
      cr_assert(sp.start_s >= prev_end - eps && sp.end_s <= ms + eps, "group %d op %d", g, k);
      prev_end = sp.end_s;
      int32_t s = op.chunk * p + g, from = op.backward ? s + 1 : s - 1;
      if (from < 0)
        continue;
      bool across = p > 1;
      if (from == pv) { /* the last stage's backward reads its own forward */
        from = s;
        across = false;
      }
      hap_pipe_sim_span in_sp = find(in, r, op.backward && from != s, op.micro, from);
      double lat = across ? in->link.latency_s : 0;
      cr_assert(sp.start_s >= in_sp.end_s + lat - eps, "group %d op %d starts before its input", g,
                k);
    }
    cr_assert(fabs(sum - r->busy_s[g]) <= eps, "group %d: busy %g, ops %g", g, r->busy_s[g], sum);
  }
  cr_assert(fabs(mean - r->mean_bubble) <= 1e-12);
}

static hap_pipe_sim *simulate(const hap_pipe_sim_input *in) {
  hap_pipe_sim *r = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_sim_run(in, &r, &err), HAP_OK, "%s", err.msg);
  cr_assert_not_null(r);
  check_invariants(in, r);
  return r;
}

/* Every virtual stage alike: a group's forward f_s and backward b_s split evenly over its v
 * chunks, `bytes` per boundary. */
typedef struct uniform {
  double fwd[MAX_STAGES], bwd[MAX_STAGES], bytes[MAX_STAGES];
  hap_pipe_sim_input in;
} uniform;

static void uniform_init(uniform *u, const hap_pipe_order *o, double f_s, double b_s, double bytes,
                         hap_pipe_link link) {
  int32_t v = hap_pipe_order_chunks(o), pv = hap_pipe_order_groups(o) * v;
  cr_assert(pv <= MAX_STAGES);
  for (int32_t k = 0; k < pv; k++) {
    u->fwd[k] = f_s / v;
    u->bwd[k] = b_s / v;
    u->bytes[k] = bytes;
  }
  u->in = (hap_pipe_sim_input){
      .order = o, .fwd_s = u->fwd, .bwd_s = u->bwd, .boundary_bytes = u->bytes, .link = link};
}

static hap_pipe_sim *run_uniform(const hap_pipe_order *o, double f_s, double b_s, double bytes,
                                 hap_pipe_link link) {
  uniform u;
  uniform_init(&u, o, f_s, b_s, bytes, link);
  return simulate(&u.in);
}

/* Acceptance 1: identical stages, free transfers, fwd:bwd = 1:2 — GPipe's and 1F1B's bubble
 * fraction (every group's and the mean) is (p-1)/(m+p-1) within 1 % (relative). */
Test(pipeline_sim, bubble_gpipe_and_1f1b) {
  const int32_t ps[] = {2, 4, 8}, ms[] = {4, 8, 16, 32};
  for (int si = HAP_PIPE_GPIPE; si <= HAP_PIPE_1F1B; si++)
    for (size_t a = 0; a < 3; a++)
      for (size_t b = 0; b < 4; b++) {
        int32_t p = ps[a], m = ms[b];
        hap_pipe_order *o = build((hap_pipe_schedule)si, p, m, 1);
        hap_pipe_sim *r = run_uniform(o, 1e-3, 2e-3, 1e6, free_link);
        double want = (p - 1.0) / (m + p - 1.0);
        cr_assert(close_to(r->mean_bubble, want, 0.01), "%s p=%d m=%d: bubble %g, want %g",
                  hap_pipe_schedule_name((hap_pipe_schedule)si), p, m, r->mean_bubble, want);
        for (int32_t g = 0; g < p; g++)
          cr_assert(close_to(r->bubble[g], want, 0.01), "group %d: %g", g, r->bubble[g]);
        hap_pipe_sim_destroy(r);
        hap_pipe_order_destroy(o);
      }
}

/* Interleaved, v chunks each taking 1/v of a group's time, free transfers, fwd:bwd = 1:2: every
 * group's idle time is (p-1)/(v*m) of its ideal compute time m*(f+b) (asserted: idle_s / busy_s
 * against (p-1)/(v*m) within 2 %), and 1F1B's idle time over interleaved's is v within 2 %. */
Test(pipeline_sim, bubble_interleaved) {
  const int32_t ps[] = {2, 4, 8}, vs[] = {2, 4}, mult[] = {1, 2, 4};
  for (size_t a = 0; a < 3; a++)
    for (size_t c = 0; c < 2; c++)
      for (size_t b = 0; b < 3; b++) {
        int32_t p = ps[a], v = vs[c], m = p * mult[b];
        hap_pipe_order *o = build(HAP_PIPE_INTERLEAVED, p, m, v);
        hap_pipe_order *flat = build(HAP_PIPE_1F1B, p, m, 1);
        hap_pipe_sim *r = run_uniform(o, 1e-3, 2e-3, 1e6, free_link);
        hap_pipe_sim *r1 = run_uniform(flat, 1e-3, 2e-3, 1e6, free_link);
        double want = (p - 1.0) / (v * m);
        for (int32_t g = 0; g < p; g++) {
          double got = r->idle_s[g] / r->busy_s[g];
          cr_assert(close_to(got, want, 0.02), "p=%d m=%d v=%d group %d: bubble/ideal %g, want %g",
                    p, m, v, g, got, want);
          cr_assert(close_to(r1->idle_s[g] / r->idle_s[g], v, 0.02), "p=%d m=%d v=%d group %d", p,
                    m, v, g);
        }
        hap_pipe_sim_destroy(r);
        hap_pipe_sim_destroy(r1);
        hap_pipe_order_destroy(o);
        hap_pipe_order_destroy(flat);
      }
}

/* Transfers that cost something make the iteration longer; each group's communication stream
 * is busy for exactly its sends (group 0 m activations, the last group m gradients, the others
 * both) at latency + bytes / bandwidth each, as no two sends share a link resource. */
Test(pipeline_sim, transfer_cost) {
  const double bytes = 2e6, bw = 1e9, lat = 1e-4, t_x = lat + bytes / bw; /* s */
  for (int si = 0; si < HAP_PIPE_SCHEDULE_COUNT; si++) {
    hap_pipe_schedule s = (hap_pipe_schedule)si;
    int32_t p = 4, m = 8, v = s == HAP_PIPE_INTERLEAVED ? 2 : 1;
    hap_pipe_order *o = build(s, p, m, v);
    hap_pipe_sim *r0 = run_uniform(o, 1e-3, 2e-3, bytes, free_link);
    hap_pipe_sim *r1 = run_uniform(o, 1e-3, 2e-3, bytes, (hap_pipe_link){lat, bw});
    hap_pipe_sim *r2 = run_uniform(o, 1e-3, 2e-3, bytes, (hap_pipe_link){2 * lat, bw / 2});
    cr_assert(r1->makespan_s > r0->makespan_s * 1.01, "%s: %g vs free %g",
              hap_pipe_schedule_name(s), r1->makespan_s, r0->makespan_s);
    cr_assert(r2->makespan_s > r1->makespan_s, "%s", hap_pipe_schedule_name(s));
    for (int32_t g = 0; g < p; g++) {
      /* sends per group: forwards of every stage but the last, backwards of all but the first */
      int32_t sends = 0;
      for (int32_t c = 0; c < v; c++) {
        int32_t k = c * p + g;
        sends += (k < p * v - 1) * m + (k > 0) * m;
      }
      cr_assert(close_to(r1->comm_s[g], sends * t_x, 1e-9), "%s group %d: comm %g, want %d x %g",
                hap_pipe_schedule_name(s), g, r1->comm_s[g], sends, t_x);
      cr_assert(close_to(r1->busy_s[g], r0->busy_s[g], 1e-12),
                "transfers keep off the compute stream");
    }
    hap_pipe_sim_destroy(r0);
    hap_pipe_sim_destroy(r1);
    hap_pipe_sim_destroy(r2);
    hap_pipe_order_destroy(o);
  }
}

/* One stage s twice as slow (forward and backward), free transfers, S = f + b of the slow stage.
 * Lower bounds: any order fills the stages before s first and drains them after, so the iteration
 * is at least m*S + sum_{k<s} S_k; GPipe's slow stage also waits between its last forward and
 * its first backward for that micro-batch to pass every later stage, so m*S + sum_{k != s} S_k.
 * Upper bound: (m + p - 1)*S, the iteration with every stage as slow (a longest path cannot grow
 * when durations shrink). It is longer than the uniform iteration, and the slow group idles
 * least. */
Test(pipeline_sim, slow_stage_dominates) {
  const double f = 1e-3, b = 2e-3; /* s */
  for (int si = HAP_PIPE_GPIPE; si <= HAP_PIPE_1F1B; si++)
    for (int32_t slow = 0; slow < 4; slow++) {
      int32_t p = 4, m = 8;
      hap_pipe_order *o = build((hap_pipe_schedule)si, p, m, 1);
      uniform u;
      uniform_init(&u, o, f, b, 0, free_link);
      hap_pipe_sim *even = simulate(&u.in);
      u.fwd[slow] *= 2;
      u.bwd[slow] *= 2;
      hap_pipe_sim *r = simulate(&u.in);
      double s_slow = 2 * (f + b);
      int32_t others = si == HAP_PIPE_GPIPE ? p - 1 : slow; /* stages in the lower bound */
      double lower = m * s_slow + others * (f + b);
      double upper = (m + p - 1) * s_slow, eps = 1e-12;
      cr_assert(r->makespan_s >= lower - eps && r->makespan_s <= upper + eps,
                "%s slow %d: %g not in [%g, %g]", hap_pipe_schedule_name((hap_pipe_schedule)si),
                slow, r->makespan_s, lower, upper);
      cr_assert(r->makespan_s > even->makespan_s);
      for (int32_t g = 0; g < p; g++)
        cr_assert(g == slow || r->idle_s[slow] < r->idle_s[g], "slow %d vs group %d", slow, g);
      hap_pipe_sim_destroy(even);
      hap_pipe_sim_destroy(r);
      hap_pipe_order_destroy(o);
    }
}

/* 1F1B with free transfers: group i starts at i*f; the last group works without a gap from
 * (p-1)*f to makespan - (p-1)*b, and the iteration is (m + p - 1)(f + b). */
Test(pipeline_sim, one_f_one_b_timeline) {
  const double f = 1, b = 2; /* s */
  hap_pipe_order *o = build(HAP_PIPE_1F1B, 4, 8, 1);
  hap_pipe_sim *r = run_uniform(o, f, b, 0, free_link);
  for (int32_t g = 0; g < 4; g++)
    cr_assert(close_to(hap_pipe_sim_op_span(r, g, 0).start_s, g * f, 1e-12), "group %d", g);
  cr_assert(close_to(r->makespan_s, 11 * (f + b), 1e-12), "%g", r->makespan_s);
  double first = hap_pipe_sim_op_span(r, 3, 0).start_s;
  double last = hap_pipe_sim_op_span(r, 3, r->ops_per_group - 1).end_s;
  cr_assert(close_to(first, 3 * f, 1e-12) && close_to(last, r->makespan_s - 3 * b, 1e-12));
  cr_assert(close_to(last - first, r->busy_s[3], 1e-12), "the last group never waits in between");
  hap_pipe_sim_destroy(r);
  hap_pipe_order_destroy(o);
}

/* The docs' timeline (docs/pipeline-schedules.md), 1F1B, p = 4, m = 8, f = 1 s, b = 2 s, free
 * transfers: one column per second, a forward prints its micro-batch, a backward 'B' and its
 * micro-batch over its 2 s, idle '.'. */
static void timeline(const hap_pipe_order *o, const hap_pipe_sim *r, int32_t g, char *buf,
                     size_t n) {
  size_t cols = (size_t)lround(r->makespan_s);
  cr_assert(cols < n);
  memset(buf, '.', cols);
  buf[cols] = '\0';
  for (int32_t k = 0; k < r->ops_per_group; k++) {
    hap_pipe_op op = hap_pipe_order_op(o, g, k);
    size_t c = (size_t)lround(hap_pipe_sim_op_span(r, g, k).start_s);
    if (op.backward)
      buf[c++] = 'B';
    buf[c] = (char)('0' + op.micro);
  }
}

Test(pipeline_sim, one_f_one_b_doc_timeline) {
  hap_pipe_order *o = build(HAP_PIPE_1F1B, 4, 8, 1);
  hap_pipe_sim *r = run_uniform(o, 1, 2, 0, free_link);
  const char *want[4] = {"0123......B04B15B26B37B4.B5.B6.B7", ".012....B03B14B25B36B47B5.B6.B7..",
                         "..01..B02B13B24B35B46B57B6.B7....", "...0B01B12B23B34B45B56B67B7......"};
  char got[128];
  for (int32_t g = 0; g < 4; g++) {
    timeline(o, r, g, got, sizeof got);
    cr_assert_str_eq(got, want[g], "group %d", g);
  }
  hap_pipe_sim_destroy(r);
  hap_pipe_order_destroy(o);
}

/* A tail after every group's last op: with the same tail everywhere the iteration grows by it
 * (group 0 ends last in 1F1B) and each group's busy time by it. */
Test(pipeline_sim, tail) {
  hap_pipe_order *o = build(HAP_PIPE_1F1B, 4, 8, 1);
  uniform u;
  uniform_init(&u, o, 1e-3, 2e-3, 1e6, (hap_pipe_link){1e-5, 1e11});
  hap_pipe_sim *r0 = simulate(&u.in);
  double tail[4] = {5e-3, 5e-3, 5e-3, 5e-3};
  u.in.tail_s = tail;
  hap_pipe_sim *r1 = simulate(&u.in);
  cr_assert(close_to(r1->makespan_s, r0->makespan_s + 5e-3, 1e-12), "%g vs %g", r1->makespan_s,
            r0->makespan_s);
  for (int32_t g = 0; g < 4; g++)
    cr_assert(close_to(r1->busy_s[g], r0->busy_s[g] + 5e-3, 1e-12));
  /* A long tail on the last group alone makes it the one that ends last. */
  double late[4] = {0, 0, 0, 0.1};
  u.in.tail_s = late;
  hap_pipe_sim *r2 = simulate(&u.in);
  double end3 = hap_pipe_sim_op_span(r2, 3, r2->ops_per_group - 1).end_s;
  cr_assert(close_to(r2->makespan_s, end3 + 0.1, 1e-12));
  cr_assert(r2->idle_s[3] < r2->idle_s[0]);
  hap_pipe_sim_destroy(r0);
  hap_pipe_sim_destroy(r1);
  hap_pipe_sim_destroy(r2);
  hap_pipe_order_destroy(o);
}

/* One group: no transfers at all (even with a costly link), no bubble; interleaved chunks of
 * one group run back to back. */
Test(pipeline_sim, one_group) {
  for (int si = 0; si < HAP_PIPE_SCHEDULE_COUNT; si++) {
    int32_t v = si == HAP_PIPE_INTERLEAVED ? 3 : 1;
    hap_pipe_order *o = build((hap_pipe_schedule)si, 1, 5, v);
    hap_pipe_sim *r = run_uniform(o, 1e-3, 2e-3, 1e9, (hap_pipe_link){1, 1});
    cr_assert(close_to(r->makespan_s, 5 * 3e-3, 1e-12), "%g", r->makespan_s);
    cr_assert(r->bubble[0] <= 1e-12 && r->comm_s[0] == 0);
    hap_pipe_sim_destroy(r);
    hap_pipe_order_destroy(o);
  }
}

/* Every order of a range of shapes runs without deadlock, with costly transfers, and keeps the
 * invariants. */
Test(pipeline_sim, every_order_runs) {
  for (int si = 0; si < HAP_PIPE_SCHEDULE_COUNT; si++)
    for (int32_t p = 1; p <= 6; p++)
      for (int32_t m = 1; m <= 12; m++)
        for (int32_t v = 1; v <= 3; v++) {
          hap_pipe_schedule s = (hap_pipe_schedule)si;
          if ((s == HAP_PIPE_INTERLEAVED) != (v > 1) || (v > 1 && m % p != 0))
            continue;
          hap_pipe_order *o = build(s, p, m, v);
          hap_pipe_sim *r = run_uniform(o, 1e-3, 2e-3, 1e6, (hap_pipe_link){2e-5, 5e9});
          /* at least a group's own work, m * (f + b) */
          cr_assert(r->makespan_s >= m * 3e-3 * (1 - 1e-12), "%s p=%d m=%d v=%d",
                    hap_pipe_schedule_name(s), p, m, v);
          hap_pipe_sim_destroy(r);
          hap_pipe_order_destroy(o);
        }
}

static void expect_refused(const hap_pipe_sim_input *in, const char *msg) {
  hap_pipe_sim *r = (hap_pipe_sim *)&r; /* not NULL: the call must clear it */
  hap_err err = {0};
  cr_assert_eq(hap_pipe_sim_run(in, &r, &err), HAP_EINVAL, "want: %s", msg);
  cr_assert_null(r);
  cr_assert_str_eq(err.msg, msg);
}

Test(pipeline_sim, malformed_inputs) {
  hap_pipe_order *o = build(HAP_PIPE_INTERLEAVED, 2, 4, 2);
  uniform u;
  uniform_init(&u, o, 1e-3, 2e-3, 1e6, (hap_pipe_link){1e-5, 1e10});
  hap_pipe_sim_input in = u.in;
  expect_refused(NULL, "pipeline sim: order: NULL, expected a pipeline order");
  in.order = NULL;
  expect_refused(&in, "pipeline sim: order: NULL, expected a pipeline order");
  in = u.in;
  in.fwd_s = NULL;
  expect_refused(&in, "pipeline sim: fwd_s: NULL, expected 4 times (s)");
  in = u.in;
  in.bwd_s = NULL;
  expect_refused(&in, "pipeline sim: bwd_s: NULL, expected 4 times (s)");
  in = u.in;
  u.fwd[3] = -1;
  expect_refused(&in, "pipeline sim: fwd_s[3]: -1, expected a finite time >= 0 s");
  u.fwd[3] = INFINITY;
  expect_refused(&in, "pipeline sim: fwd_s[3]: inf, expected a finite time >= 0 s");
  u.fwd[3] = 1e-3;
  u.bwd[1] = NAN;
  expect_refused(&in, "pipeline sim: bwd_s[1]: nan, expected a finite time >= 0 s");
  u.bwd[1] = 2e-3;
  u.bytes[2] = -5;
  expect_refused(&in, "pipeline sim: boundary_bytes[2]: -5, expected finite bytes >= 0");
  u.bytes[2] = 1e6;
  double tail[2] = {0, -1e-3};
  in.tail_s = tail;
  expect_refused(&in, "pipeline sim: tail_s[1]: -0.001, expected a finite time >= 0 s");
  tail[1] = NAN;
  expect_refused(&in, "pipeline sim: tail_s[1]: nan, expected a finite time >= 0 s");
  in.tail_s = NULL;
  in.link.latency_s = -1e-6;
  expect_refused(&in, "pipeline sim: link.latency_s: -1e-06, expected a finite time >= 0 s");
  in.link.latency_s = NAN;
  expect_refused(&in, "pipeline sim: link.latency_s: nan, expected a finite time >= 0 s");
  in.link.latency_s = 0;
  in.link.bandwidth_Bps = 0;
  expect_refused(&in, "pipeline sim: link.bandwidth_Bps: 0, expected finite bytes/s > 0");
  in.link.bandwidth_Bps = -1e9;
  expect_refused(&in, "pipeline sim: link.bandwidth_Bps: -1e+09, expected finite bytes/s > 0");
  in.link.bandwidth_Bps = INFINITY;
  expect_refused(&in, "pipeline sim: link.bandwidth_Bps: inf, expected finite bytes/s > 0");
  /* Back to valid: it runs, and zero durations give a zero makespan and zero bubble. */
  in.link.bandwidth_Bps = 1e10;
  hap_pipe_sim *r = simulate(&in);
  hap_pipe_sim_destroy(r);
  for (int k = 0; k < 4; k++)
    u.fwd[k] = u.bwd[k] = 0;
  in.boundary_bytes = NULL;
  in.link.latency_s = 0;
  r = simulate(&in);
  cr_assert(r->makespan_s == 0 && r->mean_bubble == 0);
  hap_pipe_sim_destroy(r);
  hap_pipe_order_destroy(o);
}
