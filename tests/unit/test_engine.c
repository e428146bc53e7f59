/* The discrete-event engine against hand-computed schedules: compute chains, communication
 * overlapping computation, collectives waiting for their slowest member, a 4-device mixed case,
 * fair sharing of links, the critical path, deadlocks, per-device accounting, callbacks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "simulate/engine.h"

#define GB 1e9 /* bytes */

static void expect_time(double got, double want) {
  cr_assert(fabs(got - want) <= 1e-12, "got %.17g, want %.17g", got, want);
}

static hap_sim *make_sim(int32_t devices) {
  hap_sim *s = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_sim_create(devices, &s, &err), HAP_OK, "%s", err.msg);
  return s;
}

/* A FIXED task; deps is a -1-terminated list (or NULL). */
static int32_t add(hap_sim *s, const char *name, int32_t dev, hap_sim_stream st, double dur_s,
                   const int32_t *deps) {
  int32_t n = 0;
  while (deps != NULL && deps[n] >= 0)
    n++;
  hap_sim_task t = {
      .name = name, .device = dev, .stream = st, .duration_s = dur_s, .deps = deps, .n_deps = n};
  int32_t id = -1;
  hap_err err = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, &id, &err), HAP_OK, "%s", err.msg);
  return id;
}

static int32_t add_coll(hap_sim *s, const char *name, int32_t dev, int32_t coll, double dur_s,
                        const int32_t *deps) {
  int32_t n = 0;
  while (deps != NULL && deps[n] >= 0)
    n++;
  hap_sim_task t = {.name = name,
                    .device = dev,
                    .stream = HAP_SIM_COMM,
                    .kind = HAP_SIM_COLLECTIVE,
                    .duration_s = dur_s,
                    .deps = deps,
                    .n_deps = n,
                    .collective = coll};
  int32_t id = -1;
  hap_err err = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, &id, &err), HAP_OK, "%s", err.msg);
  return id;
}

static int32_t add_xfer(hap_sim *s, const char *name, int32_t dev, double bytes,
                        const int32_t *path, int32_t n_path, double latency_s) {
  hap_sim_task t = {.name = name,
                    .device = dev,
                    .stream = HAP_SIM_COMM,
                    .kind = HAP_SIM_TRANSFER,
                    .bytes = bytes,
                    .path = path,
                    .n_path = n_path,
                    .latency_s = latency_s};
  int32_t id = -1;
  hap_err err = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, &id, &err), HAP_OK, "%s", err.msg);
  return id;
}

static int32_t new_coll(hap_sim *s) {
  int32_t c = -1;
  cr_assert_eq(hap_sim_new_collective(s, &c, NULL), HAP_OK);
  return c;
}

static int32_t add_res(hap_sim *s, const char *name, double bw_Bps) {
  int32_t r = -1;
  hap_err err = {0};
  cr_assert_eq(hap_sim_add_resource(s, name, bw_Bps, &r, &err), HAP_OK, "%s", err.msg);
  return r;
}

static const hap_sim_results *run_ok(hap_sim *s) {
  hap_err err = {0};
  cr_assert_eq(hap_sim_run(s, NULL, &err), HAP_OK, "%s", err.msg);
  const hap_sim_results *res = hap_sim_results_get(s);
  cr_assert_not_null(res);
  return res;
}

static hap_sim_record rec(const hap_sim *s, int32_t t) {
  hap_sim_record r;
  hap_err err = {0};
  cr_assert_eq(hap_sim_task_record(s, t, &r, &err), HAP_OK, "%s", err.msg);
  return r;
}

static void expect_span(const hap_sim *s, int32_t t, double start_s, double end_s) {
  hap_sim_record r = rec(s, t);
  cr_assert(fabs(r.start_s - start_s) <= 1e-12 && fabs(r.end_s - end_s) <= 1e-12,
            "task \"%s\": ran %.17g..%.17g, want %.17g..%.17g", r.name, r.start_s, r.end_s, start_s,
            end_s);
}

/* (1) Compute-only chains: the makespan is the longer chain. */
Test(engine, compute_chains) {
  hap_sim *s = make_sim(2);
  int32_t a = add(s, "d0.a", 0, HAP_SIM_COMPUTE, 1, NULL);
  int32_t b = add(s, "d0.b", 0, HAP_SIM_COMPUTE, 2, NULL);
  int32_t c = add(s, "d0.c", 0, HAP_SIM_COMPUTE, 3, NULL);
  int32_t d = add(s, "d1.a", 1, HAP_SIM_COMPUTE, 2.5, NULL);
  int32_t e = add(s, "d1.b", 1, HAP_SIM_COMPUTE, 2.5, NULL);
  const hap_sim_results *res = run_ok(s);
  expect_time(res->makespan_s, 6);
  expect_span(s, a, 0, 1);
  expect_span(s, b, 1, 3);
  expect_span(s, c, 3, 6);
  expect_span(s, d, 0, 2.5);
  expect_span(s, e, 2.5, 5);
  expect_time(res->devices[1].idle_s, 1);
  cr_assert_eq(res->n_tasks, 5);
  hap_sim_destroy(s);
}

/* (2) Communication overlaps computation: A 0..3, B 3..5 on compute; C (comm, needs A) 3..7. */
Test(engine, comm_overlaps_compute) {
  hap_sim *s = make_sim(1);
  int32_t a = add(s, "A", 0, HAP_SIM_COMPUTE, 3, NULL);
  int32_t b = add(s, "B", 0, HAP_SIM_COMPUTE, 2, NULL);
  int32_t c = add(s, "C", 0, HAP_SIM_COMM, 4, (int32_t[]){a, -1});
  const hap_sim_results *res = run_ok(s);
  expect_time(res->makespan_s, 7);
  expect_span(s, a, 0, 3);
  expect_span(s, b, 3, 5);
  expect_span(s, c, 3, 7);
  const hap_sim_device_stats *d = &res->devices[0];
  expect_time(d->busy_s[HAP_SIM_COMPUTE], 5);
  expect_time(d->busy_s[HAP_SIM_COMM], 4);
  expect_time(d->overlap_s, 2);      /* 3..5 */
  expect_time(d->exposed_comm_s, 2); /* 5..7 */
  expect_time(d->active_s, 7);
  expect_time(d->idle_s, 0);
  hap_sim_destroy(s);
}

/* (3) An all-reduce after 1, 2, 3 s of compute starts when the slowest member arrives (3 s) and
 * ends at 4 on every member; the tasks after it start at 4. */
Test(engine, collective_waits_for_slowest) {
  hap_sim *s = make_sim(3);
  int32_t ar = new_coll(s);
  int32_t comp[3], red[3], post[3];
  for (int32_t d = 0; d < 3; d++) {
    comp[d] = add(s, "fwd", d, HAP_SIM_COMPUTE, 1.0 + d, NULL);
    red[d] = add_coll(s, "grad.all_reduce", d, ar, 1, (int32_t[]){comp[d], -1});
    post[d] = add(s, "update", d, HAP_SIM_COMPUTE, 0.5, (int32_t[]){red[d], -1});
  }
  const hap_sim_results *res = run_ok(s);
  for (int32_t d = 0; d < 3; d++) {
    expect_span(s, red[d], 3, 4);
    expect_time(rec(s, red[d]).ready_s, 1.0 + d); /* waited 2, 1, 0 s */
    expect_span(s, post[d], 4, 4.5);
    /* waiting for the others is idle, not busy */
    expect_time(res->devices[d].busy_s[HAP_SIM_COMM], 1);
  }
  expect_time(res->makespan_s, 4.5);
  cr_assert_eq(rec(s, red[1]).collective, ar);
  hap_sim_destroy(s);
}

/* (4) Four devices, dependencies across devices, two collectives (derivation inline):
 *   d0: a 0..2, b 2..3, c 3..4.5          d1: a 0..1, b (needs d0.a at 2) 2..5, c (needs
 * X) 5.5..6.5 d2: a 0..4, b 4..6                    d3: a 0..1, b (needs d2.a at 4) 4..5, c (needs
 * Y@d2) 7..7.25 X over d0..d3 (0.5 s, each after its device's last compute before it): arrivals 3,
 * 5, 4, 5
 *     -> 5..5.5 everywhere.
 *   Y over d0, d2 (1 s, queued behind X on comm; d0's needs d0.c, d2's needs d2.b): ready 5.5
 *     and 6 -> 6..7. Makespan 7.25 (d3.c). */
typedef struct mixed {
  int32_t d0a, d0b, d0c, d1a, d1b, d1c, d2a, d2b, d3a, d3b, d3c;
  int32_t x[4], y0, y2;
} mixed;

static hap_sim *build_mixed(mixed *m) {
  hap_sim *s = make_sim(4);
  int32_t cx = new_coll(s), cy = new_coll(s);
  m->d0a = add(s, "d0.a", 0, HAP_SIM_COMPUTE, 2, NULL);
  m->d0b = add(s, "d0.b", 0, HAP_SIM_COMPUTE, 1, NULL);
  m->d0c = add(s, "d0.c", 0, HAP_SIM_COMPUTE, 1.5, NULL);
  m->d1a = add(s, "d1.a", 1, HAP_SIM_COMPUTE, 1, NULL);
  m->d1b = add(s, "d1.b", 1, HAP_SIM_COMPUTE, 3, (int32_t[]){m->d0a, -1});
  m->d2a = add(s, "d2.a", 2, HAP_SIM_COMPUTE, 4, NULL);
  m->d2b = add(s, "d2.b", 2, HAP_SIM_COMPUTE, 2, NULL);
  m->d3a = add(s, "d3.a", 3, HAP_SIM_COMPUTE, 1, NULL);
  m->d3b = add(s, "d3.b", 3, HAP_SIM_COMPUTE, 1, (int32_t[]){m->d2a, -1});
  m->x[0] = add_coll(s, "X", 0, cx, 0.5, (int32_t[]){m->d0b, -1});
  m->x[1] = add_coll(s, "X", 1, cx, 0.5, (int32_t[]){m->d1b, -1});
  m->x[2] = add_coll(s, "X", 2, cx, 0.5, (int32_t[]){m->d2a, -1});
  m->x[3] = add_coll(s, "X", 3, cx, 0.5, (int32_t[]){m->d3b, -1});
  m->y0 = add_coll(s, "Y", 0, cy, 1, (int32_t[]){m->d0c, -1});
  m->y2 = add_coll(s, "Y", 2, cy, 1, (int32_t[]){m->d2b, -1});
  m->d1c = add(s, "d1.c", 1, HAP_SIM_COMPUTE, 1, (int32_t[]){m->x[1], -1});
  m->d3c = add(s, "d3.c", 3, HAP_SIM_COMPUTE, 0.25, (int32_t[]){m->y2, -1});
  return s;
}

Test(engine, four_devices_mixed) {
  mixed m;
  hap_sim *s = build_mixed(&m);
  const hap_sim_results *res = run_ok(s);
  expect_time(res->makespan_s, 7.25);
  expect_span(s, m.d0a, 0, 2);
  expect_span(s, m.d0b, 2, 3);
  expect_span(s, m.d0c, 3, 4.5);
  expect_span(s, m.d1a, 0, 1);
  expect_span(s, m.d1b, 2, 5);
  expect_span(s, m.d1c, 5.5, 6.5);
  expect_span(s, m.d2a, 0, 4);
  expect_span(s, m.d2b, 4, 6);
  expect_span(s, m.d3a, 0, 1);
  expect_span(s, m.d3b, 4, 5);
  expect_span(s, m.d3c, 7, 7.25);
  for (int d = 0; d < 4; d++)
    expect_span(s, m.x[d], 5, 5.5);
  expect_span(s, m.y0, 6, 7);
  expect_span(s, m.y2, 6, 7);
  expect_time(rec(s, m.y0).ready_s, 5.5);
  expect_time(rec(s, m.y2).ready_s, 6);
  hap_sim_destroy(s);
}

/* (5) Link sharing (processor sharing, no latency unless stated, 1 GB over a 1 GB/s link). */
Test(engine, link_one_transfer) {
  hap_sim *s = make_sim(1);
  int32_t nic = add_res(s, "host0 NIC out", 1 * GB);
  int32_t t = add_xfer(s, "send", 0, 1 * GB, &nic, 1, 0);
  expect_time(run_ok(s)->makespan_s, 1);
  expect_span(s, t, 0, 1);
  hap_sim_destroy(s);
}

/* Two at once share the link: 0.5 GB/s each, both end at 2 s (twice one alone). */
Test(engine, link_two_concurrent_take_twice_as_long) {
  hap_sim *s = make_sim(2);
  int32_t nic = add_res(s, "host0 NIC out", 1 * GB);
  int32_t a = add_xfer(s, "send.0", 0, 1 * GB, &nic, 1, 0);
  int32_t b = add_xfer(s, "send.1", 1, 1 * GB, &nic, 1, 0);
  expect_time(run_ok(s)->makespan_s, 2);
  expect_span(s, a, 0, 2);
  expect_span(s, b, 0, 2);
  hap_sim_destroy(s);
}

/* Staggered: a alone 0..0.5 at 1 GB/s (0.5 GB left); b joins at 0.5, both at 0.5 GB/s; a's
 * 0.5 GB take 1 s -> a ends at 1.5, b has moved 0.5 GB; b alone again at 1 GB/s moves its last
 * 0.5 GB in 0.5 s -> ends at 2. */
Test(engine, link_staggered) {
  hap_sim *s = make_sim(2);
  int32_t nic = add_res(s, "host0 NIC out", 1 * GB);
  int32_t a = add_xfer(s, "send.0", 0, 1 * GB, &nic, 1, 0);
  add(s, "wait", 1, HAP_SIM_COMM, 0.5, NULL);
  int32_t b = add_xfer(s, "send.1", 1, 1 * GB, &nic, 1, 0);
  expect_time(run_ok(s)->makespan_s, 2);
  expect_span(s, a, 0, 1.5);
  expect_span(s, b, 0.5, 2);
  hap_sim_destroy(s);
}

/* Two links: alone, a transfer over out (1 GB/s) and in (4 GB/s) runs at the slower 1 GB/s.
 * Shared: t1 over out (1 GB/s) + in (1.5 GB/s), t2 (3 GB) over in only. in has 2 transfers:
 * share 0.75 GB/s < out's 1 GB/s, so t1 moves at 0.75 and ends at 1 / 0.75 = 4/3 s; t2 also
 * moved 1 GB by then, and alone on in moves its last 2 GB at 1.5 GB/s: ends at 4/3 + 4/3. */
Test(engine, link_two_hops_slower_share) {
  hap_sim *s = make_sim(2);
  int32_t path[2] = {add_res(s, "h0 NIC out", 1 * GB), add_res(s, "h1 NIC in", 4 * GB)};
  int32_t t = add_xfer(s, "solo", 0, 1 * GB, path, 2, 0);
  expect_time(run_ok(s)->makespan_s, 1);
  expect_span(s, t, 0, 1);
  hap_sim_destroy(s);

  s = make_sim(2);
  path[0] = add_res(s, "h0 NIC out", 1 * GB);
  path[1] = add_res(s, "h1 NIC in", 1.5 * GB);
  int32_t t1 = add_xfer(s, "t1", 0, 1 * GB, path, 2, 0);
  int32_t t2 = add_xfer(s, "t2", 1, 3 * GB, &path[1], 1, 0);
  expect_time(run_ok(s)->makespan_s, 8.0 / 3.0);
  expect_span(s, t1, 0, 4.0 / 3.0);
  expect_span(s, t2, 0, 8.0 / 3.0);
  hap_sim_destroy(s);
}

/* Latency comes first, then the bytes flow; a zero-byte transfer costs its latency. Re-running
 * after a bandwidth change gives the new times. */
Test(engine, link_latency_and_rerun) {
  hap_sim *s = make_sim(1);
  int32_t nic = add_res(s, "nic", 1 * GB);
  int32_t a = add_xfer(s, "a", 0, 1 * GB, &nic, 1, 0.25);
  int32_t b = add_xfer(s, "empty", 0, 0, &nic, 1, 0.125);
  expect_time(run_ok(s)->makespan_s, 1.375);
  expect_span(s, a, 0, 1.25);
  expect_span(s, b, 1.25, 1.375);
  cr_assert_eq(hap_sim_set_bandwidth(s, nic, 2 * GB, NULL), HAP_OK);
  cr_assert_null(hap_sim_results_get(s));
  expect_time(run_ok(s)->makespan_s, 0.875);
  hap_sim_destroy(s);
}

/* (6) Critical path. Mixed case: d3.c needs Y@d2, which arrived last (6 s, after d2.b; its
 * stream predecessor X ended at 5.5), d2.b followed d2.a on the stream. */
Test(engine, critical_path_mixed) {
  mixed m;
  hap_sim *s = build_mixed(&m);
  const hap_sim_results *res = run_ok(s);
  cr_assert_eq(res->n_critical, 4);
  int32_t want[4] = {m.d2a, m.d2b, m.y2, m.d3c};
  hap_sim_edge via[4] = {HAP_SIM_EDGE_START, HAP_SIM_EDGE_STREAM, HAP_SIM_EDGE_DEPENDENCY,
                         HAP_SIM_EDGE_DEPENDENCY};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(res->critical[i].task, want[i], "step %d: task %d, want %d", i,
                 res->critical[i].task, want[i]);
    cr_assert_eq(res->critical[i].via, via[i], "step %d: via %s", i,
                 hap_sim_edge_name(res->critical[i].via));
  }
  hap_sim_destroy(s);
}

/* Through a collective: d0's update (2 s) ends last; its all-reduce member waited for d2's,
 * which arrived last after d2's 3 s of compute. */
Test(engine, critical_path_through_collective) {
  hap_sim *s = make_sim(3);
  int32_t ar = new_coll(s);
  int32_t comp[3], red[3], post[3];
  for (int32_t d = 0; d < 3; d++) {
    comp[d] = add(s, "fwd", d, HAP_SIM_COMPUTE, 1.0 + d, NULL);
    red[d] = add_coll(s, "grad.all_reduce", d, ar, 1, (int32_t[]){comp[d], -1});
    post[d] = add(s, "update", d, HAP_SIM_COMPUTE, d == 0 ? 2 : 0.5, (int32_t[]){red[d], -1});
  }
  const hap_sim_results *res = run_ok(s);
  expect_time(res->makespan_s, 6);
  cr_assert_eq(res->n_critical, 4);
  hap_sim_step want[4] = {{comp[2], HAP_SIM_EDGE_START},
                          {red[2], HAP_SIM_EDGE_DEPENDENCY},
                          {red[0], HAP_SIM_EDGE_COLLECTIVE},
                          {post[0], HAP_SIM_EDGE_DEPENDENCY}};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(res->critical[i].task, want[i].task, "step %d", i);
    cr_assert_eq(res->critical[i].via, want[i].via, "step %d: via %s", i,
                 hap_sim_edge_name(res->critical[i].via));
  }
  hap_sim_destroy(s);
}

/* (7) Deadlocks: reported with a stuck task per device, never a hang. */
Test(engine, deadlock_collective_order) {
  hap_sim *s = make_sim(2);
  int32_t cx = new_coll(s), cy = new_coll(s);
  add(s, "fwd", 0, HAP_SIM_COMPUTE, 1, NULL);
  add_coll(s, "grad.x.all_reduce", 0, cx, 1, NULL);
  add_coll(s, "grad.y.all_reduce", 0, cy, 1, NULL);
  add_coll(s, "grad.y.all_reduce", 1, cy, 1, NULL);
  add_coll(s, "grad.x.all_reduce", 1, cx, 1, NULL);
  hap_err err = {0};
  cr_assert_eq(hap_sim_run(s, NULL, &err), HAP_EINVAL);
  cr_assert_null(hap_sim_results_get(s));
  cr_assert_not_null(strstr(err.msg, "deadlock: 4 of 5 tasks never ran"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "device 0: \"grad.x.all_reduce\" (collective) waits for "
                                     "device 1"),
                     "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "device 1: \"grad.y.all_reduce\" (collective) waits for "
                                     "device 0"),
                     "%s", err.msg);
  hap_sim_destroy(s);
}

Test(engine, deadlock_dependency_on_later_task) {
  hap_sim *s = make_sim(2);
  int32_t a = add(s, "A", 0, HAP_SIM_COMPUTE, 1, NULL);
  int32_t b = add(s, "B", 0, HAP_SIM_COMPUTE, 1, NULL);
  add(s, "C", 1, HAP_SIM_COMPUTE, 1, (int32_t[]){a, -1});
  cr_assert_eq(hap_sim_add_dep(s, a, b, NULL), HAP_OK);
  hap_err err = {0};
  cr_assert_eq(hap_sim_run(s, NULL, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "device 0: \"A\" waits for \"B\" (device 0, compute stream)"),
                     "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "device 1: \"C\" waits for \"A\""), "%s", err.msg);
  hap_sim_destroy(s);
}

/* Many stuck devices: the message stays one line and says how many were left out. */
Test(engine, deadlock_many_devices) {
  hap_sim *s = make_sim(64);
  int32_t c = new_coll(s);
  for (int32_t d = 0; d < 63; d++)
    add_coll(s, "grad.all_reduce.with.a.long.name", d, c, 1, NULL);
  int32_t never = add(s, "never", 63, HAP_SIM_COMPUTE, 1, NULL);
  int32_t late = add_coll(s, "grad.all_reduce.with.a.long.name", 63, c, 1, (int32_t[]){never, -1});
  cr_assert_eq(hap_sim_add_dep(s, never, late, NULL), HAP_OK); /* a cycle on device 63 */
  hap_err err = {0};
  cr_assert_eq(hap_sim_run(s, NULL, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "more devices"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  hap_sim_destroy(s);
}

/* (8) Per-device accounting sums to the makespan. */
Test(engine, busy_idle_accounting) {
  mixed m;
  hap_sim *s = build_mixed(&m);
  const hap_sim_results *res = run_ok(s);
  double T = res->makespan_s;
  for (int d = 0; d < 4; d++) {
    const hap_sim_device_stats *st = &res->devices[d];
    for (int k = 0; k < HAP_SIM_N_STREAMS; k++)
      expect_time(st->busy_s[k] + st->stream_idle_s[k], T);
    expect_time(st->active_s + st->idle_s, T);
    expect_time(st->busy_s[0] + st->busy_s[1] - st->overlap_s, st->active_s);
  }
  /* d0: compute 0..4.5, comm X 5..5.5 and Y 6..7 */
  const hap_sim_device_stats *d0 = &res->devices[0];
  expect_time(d0->busy_s[HAP_SIM_COMPUTE], 4.5);
  expect_time(d0->comm_s, 1.5);
  expect_time(d0->overlap_s, 0);
  expect_time(d0->active_s, 6);
  expect_time(d0->idle_s, 1.25);
  cr_assert_eq(d0->n_tasks, 5);
  /* d2: compute 0..6, comm X 5..5.5 (overlaps d2.b) and Y 6..7 */
  const hap_sim_device_stats *d2 = &res->devices[2];
  expect_time(d2->overlap_s, 0.5);
  expect_time(d2->exposed_comm_s, 1);
  expect_time(d2->idle_s, 0.25);
  hap_sim_destroy(s);
}

/* Durations from a callback: FLOP / rate of the device (1 and 2 TFLOP/s). */
static hap_status flops_duration(void *ctx, const hap_sim_record *t, double *seconds,
                                 hap_err *err) {
  (void)err;
  const double *rate = ctx;
  *seconds = t->flops / rate[t->device];
  return HAP_OK;
}

Test(engine, duration_callback) {
  hap_sim *s = make_sim(2);
  for (int32_t d = 0; d < 2; d++) {
    hap_sim_task t = {
        .name = "gemm", .device = d, .duration_s = HAP_SIM_DURATION_FN, .flops = 4e12};
    cr_assert_eq(hap_sim_add_task(s, &t, NULL, NULL), HAP_OK);
  }
  hap_err err = {0};
  cr_assert_eq(hap_sim_run(s, NULL, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "\"gemm\" asks for a duration callback"), "%s", err.msg);
  double rate[2] = {1e12, 2e12};
  hap_sim_options opt = {flops_duration, rate};
  cr_assert_eq(hap_sim_run(s, &opt, NULL), HAP_OK);
  expect_span(s, 0, 0, 4);
  expect_span(s, 1, 0, 2);
  expect_time(hap_sim_results_get(s)->makespan_s, 4);
  hap_sim_destroy(s);
}

/* The visitor sees every task in id order with its times and sizes. */
typedef struct visit_log {
  int n;
  double sum_end_s, sum_flops;
  int32_t last_id;
} visit_log;

static hap_status log_task(void *ctx, const hap_sim_record *r, hap_err *err) {
  (void)err;
  visit_log *v = ctx;
  cr_assert_eq(r->task, v->last_id + 1);
  v->last_id = r->task;
  v->n++;
  v->sum_end_s += r->end_s;
  v->sum_flops += r->flops;
  return HAP_OK;
}

static hap_status stop_at_second(void *ctx, const hap_sim_record *r, hap_err *err) {
  (void)ctx;
  if (r->task == 1)
    return hap_err_set(err, HAP_EIO, "trace: disk full at \"%s\"", r->name);
  return HAP_OK;
}

Test(engine, visit) {
  hap_sim *s = make_sim(1);
  hap_sim_task t = {.name = "k", .duration_s = 1, .flops = 10, .bytes = 3};
  cr_assert_eq(hap_sim_add_task(s, &t, NULL, NULL), HAP_OK);
  cr_assert_eq(hap_sim_add_task(s, &t, NULL, NULL), HAP_OK);
  hap_err err = {0};
  cr_assert_eq(hap_sim_visit(s, log_task, NULL, &err), HAP_EINVAL); /* not run yet */
  run_ok(s);
  visit_log v = {0, 0, 0, -1};
  cr_assert_eq(hap_sim_visit(s, log_task, &v, NULL), HAP_OK);
  cr_assert_eq(v.n, 2);
  expect_time(v.sum_end_s, 3);
  expect_time(v.sum_flops, 20);
  hap_err e2 = {0};
  cr_assert_eq(hap_sim_visit(s, stop_at_second, NULL, &e2), HAP_EIO);
  cr_assert_str_eq(e2.msg, "trace: disk full at \"k\"");
  hap_sim_record r = rec(s, 1);
  cr_assert_str_eq(r.name, "k");
  cr_assert_eq(r.stream, HAP_SIM_COMPUTE);
  cr_assert_eq(r.kind, HAP_SIM_FIXED);
  cr_assert_eq(r.collective, -1);
  expect_time(r.bytes, 3);
  hap_sim_destroy(s);
}

/* Bad input is refused with a message naming the task and field. */
Test(engine, bad_input) {
  hap_sim *s = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_sim_create(0, &s, &err), HAP_EINVAL);
  s = make_sim(2);
  hap_sim_task t = {.name = "x", .device = 2, .duration_s = 1};
  hap_err e = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, NULL, &e), HAP_EINVAL);
  cr_assert_not_null(strstr(e.msg, "\"x\": device 2 (expected 0..1)"), "%s", e.msg);
  t.device = 0;
  t.duration_s = -2;
  hap_err e1 = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, NULL, &e1), HAP_EINVAL);
  cr_assert_not_null(strstr(e1.msg, "duration -2 s"), "%s", e1.msg);
  t.duration_s = 1;
  t.deps = (int32_t[]){0};
  t.n_deps = 1;
  hap_err e2 = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, NULL, &e2), HAP_EINVAL);
  cr_assert_not_null(strstr(e2.msg, "dependency 0 is not a task added before it"), "%s", e2.msg);
  t.n_deps = 0;
  t.kind = HAP_SIM_COLLECTIVE;
  t.collective = 5;
  hap_err e3 = {0};
  cr_assert_eq(hap_sim_add_task(s, &t, NULL, &e3), HAP_EINVAL);
  cr_assert_not_null(strstr(e3.msg, "collective 5"), "%s", e3.msg);
  int32_t c = new_coll(s);
  add_coll(s, "ar", 0, c, 1, NULL);
  add_coll(s, "ar.again", 0, c, 1, NULL);
  hap_err e4 = {0};
  cr_assert_eq(hap_sim_run(s, NULL, &e4), HAP_EINVAL);
  cr_assert_not_null(strstr(e4.msg, "two members on device 0: \"ar\" and \"ar.again\""), "%s",
                     e4.msg);
  hap_err e5 = {0};
  cr_assert_eq(hap_sim_add_resource(s, "nic", 0, NULL, &e5), HAP_EINVAL);
  int32_t nic = add_res(s, "nic", 1 * GB);
  hap_sim_task x = {.name = "send",
                    .kind = HAP_SIM_TRANSFER,
                    .bytes = 1,
                    .path = (int32_t[]){nic, nic},
                    .n_path = 2};
  hap_err e6 = {0};
  cr_assert_eq(hap_sim_add_task(s, &x, NULL, &e6), HAP_EINVAL);
  cr_assert_not_null(strstr(e6.msg, "\"nic\" appears twice"), "%s", e6.msg);
  x.n_path = 0;
  cr_assert_eq(hap_sim_add_task(s, &x, NULL, NULL), HAP_EINVAL);
  cr_assert_eq(hap_sim_add_dep(s, 0, 0, NULL), HAP_EINVAL);
  cr_assert_eq(hap_sim_add_dep(s, 0, 99, NULL), HAP_EINVAL);
  hap_sim_destroy(s);
}

Test(engine, empty) {
  hap_sim *s = make_sim(3);
  const hap_sim_results *res = run_ok(s);
  expect_time(res->makespan_s, 0);
  cr_assert_eq(res->n_critical, 0);
  expect_time(res->devices[2].idle_s, 0);
  hap_sim_destroy(s);
}

/* Random task lists (fixed tasks, transfers over shared links, collectives on random device
 * subsets; dependencies only on earlier tasks outside the task's own collective, so no deadlock)
 * against the schedule's invariants. */
static uint32_t lcg(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

typedef struct rand_case {
  int32_t n;
  int32_t coll_of[400];   /* -1 or the collective */
  double dur_s[400];      /* FIXED and COLLECTIVE */
  double min_time_s[400]; /* TRANSFER: latency + bytes at its uncontended rate */
  int32_t deps[400][2];
  int32_t n_deps[400];
} rand_case;

static void build_random(hap_sim *s, rand_case *rc, uint32_t seed) {
  enum { DEV = 6, RES = 3 };
  double bw[RES] = {1 * GB, 2 * GB, 0.5 * GB};
  int32_t res[RES];
  for (int i = 0; i < RES; i++)
    res[i] = add_res(s, "link", bw[i]);
  uint32_t st = seed;
  rc->n = 0;
  while (rc->n < 360) {
    int32_t k = rc->n;
    uint32_t pick = lcg(&st) % 10;
    int32_t nd = 0, deps[2];
    for (int i = 0; i < 2 && k > 0; i++)
      if (lcg(&st) % 2)
        deps[nd++] = (int32_t)(lcg(&st) % (uint32_t)k);
    if (pick < 2) { /* a collective over a random subset (>= 2 devices) */
      int32_t c = new_coll(s);
      double dur_s = (double)(1 + lcg(&st) % 8) / 8;
      for (int32_t d = 0; d < DEV; d++) {
        if (lcg(&st) % 3 == 0 && d != 0 && d != DEV - 1)
          continue;
        hap_sim_task t = {.name = "coll",
                          .device = d,
                          .stream = HAP_SIM_COMM,
                          .kind = HAP_SIM_COLLECTIVE,
                          .duration_s = dur_s,
                          .deps = deps,
                          .n_deps = nd,
                          .collective = c};
        int32_t id;
        cr_assert_eq(hap_sim_add_task(s, &t, &id, NULL), HAP_OK);
        rc->coll_of[id] = c;
        rc->dur_s[id] = dur_s;
        rc->n_deps[id] = nd;
        memcpy(rc->deps[id], deps, sizeof deps);
        rc->n++;
      }
      continue;
    }
    hap_sim_task t = {
        .name = "task", .device = (int32_t)(lcg(&st) % DEV), .deps = deps, .n_deps = nd};
    int32_t path[2] = {res[lcg(&st) % RES], 0};
    if (pick < 5) {
      path[1] = res[(lcg(&st) % (RES - 1) + (uint32_t)path[0] + 1) % RES];
      t.kind = HAP_SIM_TRANSFER;
      t.stream = HAP_SIM_COMM;
      t.bytes = (double)(lcg(&st) % 4) * 0.25 * GB;
      t.latency_s = (double)(lcg(&st) % 3) * 0.01;
      t.path = path;
      t.n_path = 1 + (int32_t)(lcg(&st) % 2);
      double rate = bw[path[0]];
      if (t.n_path == 2)
        rate = fmin(rate, bw[path[1]]);
      rc->min_time_s[k] = t.latency_s + t.bytes / rate;
    } else {
      t.stream = (hap_sim_stream)(lcg(&st) % 4 == 0);
      t.duration_s = (double)(lcg(&st) % 16) / 16;
    }
    cr_assert_eq(hap_sim_add_task(s, &t, NULL, NULL), HAP_OK);
    rc->coll_of[k] = -1;
    rc->dur_s[k] = t.duration_s;
    rc->n_deps[k] = nd;
    memcpy(rc->deps[k], deps, sizeof deps);
    rc->n++;
  }
}

static void check_random(const hap_sim *s, const rand_case *rc) {
  const hap_sim_results *res = hap_sim_results_get(s);
  cr_assert_not_null(res);
  double makespan_s = 0;
  for (int32_t t = 0; t < rc->n; t++) {
    hap_sim_record r = rec(s, t);
    cr_assert(r.ready_s >= 0 && r.start_s >= r.ready_s && r.end_s >= r.start_s);
    makespan_s = fmax(makespan_s, r.end_s);
    for (int i = 0; i < rc->n_deps[t]; i++)
      cr_assert(r.ready_s >= rec(s, rc->deps[t][i]).end_s, "task %d starts before its dependency",
                t);
    if (r.kind == HAP_SIM_FIXED) {
      cr_assert_eq(r.start_s, r.ready_s);
      expect_time(r.end_s - r.start_s, rc->dur_s[t]);
    } else if (r.kind == HAP_SIM_TRANSFER) {
      cr_assert_eq(r.start_s, r.ready_s);
      cr_assert(r.end_s - r.start_s >= rc->min_time_s[t] - 1e-9, "transfer %d too fast", t);
    } else {
      expect_time(r.end_s - r.start_s, rc->dur_s[t]);
    }
    /* the previous task on the same stream finished before this one was ready */
    for (int32_t p = t - 1; p >= 0; p--) {
      hap_sim_record q = rec(s, p);
      if (q.device == r.device && q.stream == r.stream) {
        cr_assert(r.ready_s >= q.end_s, "task %d overlaps its stream predecessor %d", t, p);
        break;
      }
    }
  }
  /* collective members start together, when the last arrives */
  for (int32_t t = 0; t < rc->n; t++) {
    if (rc->coll_of[t] < 0)
      continue;
    double last_ready_s = 0;
    for (int32_t u = 0; u < rc->n; u++)
      if (rc->coll_of[u] == rc->coll_of[t]) {
        cr_assert_eq(rec(s, u).start_s, rec(s, t).start_s);
        last_ready_s = fmax(last_ready_s, rec(s, u).ready_s);
      }
    cr_assert_eq(rec(s, t).start_s, last_ready_s);
  }
  expect_time(res->makespan_s, makespan_s);
  for (int32_t d = 0; d < res->n_devices; d++)
    expect_time(res->devices[d].active_s + res->devices[d].idle_s, makespan_s);
  /* the critical path is gapless: each step is ready when the one before it ends */
  cr_assert_gt(res->n_critical, 0);
  hap_sim_record first = rec(s, res->critical[0].task);
  expect_time(first.ready_s, 0);
  cr_assert_eq(res->critical[0].via, HAP_SIM_EDGE_START);
  for (int32_t i = 1; i < res->n_critical; i++) {
    hap_sim_record prev = rec(s, res->critical[i - 1].task), cur = rec(s, res->critical[i].task);
    if (res->critical[i].via == HAP_SIM_EDGE_COLLECTIVE) {
      cr_assert_eq(cur.collective, prev.collective);
      cr_assert_eq(cur.start_s, prev.start_s);
    } else {
      cr_assert_eq(cur.ready_s, prev.end_s, "step %d ready %.17g, previous ended %.17g", i,
                   cur.ready_s, prev.end_s);
    }
  }
  expect_time(rec(s, res->critical[res->n_critical - 1].task).end_s, makespan_s);
}

Test(engine, random_invariants) {
  for (uint32_t seed = 1; seed <= 40; seed++) {
    hap_sim *s = make_sim(6);
    rand_case *rc = calloc(1, sizeof *rc);
    cr_assert_not_null(rc);
    build_random(s, rc, seed);
    run_ok(s);
    check_random(s, rc);
    free(rc);
    hap_sim_destroy(s);
  }
}
