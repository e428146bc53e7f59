/* test_replay_colls.c — the collectives a plan replay times (profile/replay_colls.h, white-box),
 * over a fake two-rank world whose peer's times are scripted: which tasks, under which sizes, the
 * time on a sub-group's fastest member, samples only from iterations where every task ran; then
 * those times as the profile's plan group and, through the cluster model, the prices of exactly
 * the plan's sizes (cluster.h hap_coll_fit_time), the fit everywhere else. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cost.h"
#include "model/zoo.h"
#include "plan/lower.h"
#include "profile/replay.h"
#include "replay_colls.h"
#include "store/cluster_open.h"
#include "store/profile_store.h"
#include "synth/synth.h"

/* ---- a world of two ranks seen from rank 0: the peer's row of an all-gather is scripted ----- */

static double peer_row[256]; /* what rank 1 "sends" to the next all-gather */

static hap_status fake_all_gather(hap_comm *c, const void *send, void *recv, int64_t bytes,
                                  hap_err *err) {
  (void)c, (void)err;
  memcpy(recv, send, (size_t)bytes);
  memcpy((char *)recv + bytes, peer_row, (size_t)bytes);
  return HAP_OK;
}
static void fake_destroy(hap_comm *c) { (void)c; }
static const hap_comm_ops fake_ops = {
    .name = "fake", .all_gather = fake_all_gather, .destroy = fake_destroy};

/* ---- fixture: a data-parallel plan of a small MLP on two devices ----------------------------- */

typedef struct fixture {
  hap_graph *g;
  hap_cluster *c;
  hap_plan *plan;
  hap_lowered *lw;
  hap_coll_timer *timer;
  hap_comm world;
} fixture;

static void setup(fixture *f) {
  memset(f, 0, sizeof *f);
  hap_err e = {0};
  cr_assert_eq(hap_model_load("mlp:layers=2,batch=16,seq=4,hidden=16", &f->g, &e), HAP_OK, "%s",
               e.msg);
  cr_assert_eq(hap_cluster_open("paper-homo:gpus_per_host=2,hosts=1", &f->c, &e), HAP_OK, "%s",
               e.msg);
  hap_synth_options so = {.strategy = HAP_STRATEGY_DP_EV};
  hap_synth_stats stats;
  cr_assert_eq(hap_synthesize(f->g, f->c, &so, &f->plan, &stats, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_lower(f->plan, f->g, &f->lw, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_coll_timer_create(f->lw, 4, &f->timer, &e), HAP_OK, "%s", e.msg);
  f->world = (hap_comm){.ops = &fake_ops, .rank = 0, .size = 2};
}

static void teardown(fixture *f) {
  hap_coll_timer_destroy(f->timer);
  hap_lowered_destroy(f->lw);
  hap_plan_destroy(f->plan);
  hap_cluster_destroy(f->c);
  hap_graph_destroy(f->g);
}

/* One iteration in which every timed task took `v` on its faster member: rank 0 is the faster on
 * even tasks, the peer on odd ones (the slower takes 3v: it waited). */
static void sample(fixture *f, double v) {
  int32_t n = 0;
  hap_coll_timer_tasks(f->timer, &n);
  cr_assert_lt(n, 256);
  double mine[256];
  for (int32_t j = 0; j < n; j++) {
    mine[j] = j % 2 == 0 ? v : 3 * v;
    peer_row[j] = j % 2 == 0 ? 3 * v : v;
  }
  hap_err e = {0};
  cr_assert_eq(hap_coll_timer_sample(f->timer, mine, &f->world, &e), HAP_OK, "%s", e.msg);
}

/* dp-ev: one gradient all-reduce per parameter, each of the whole gradient (float32). */
Test(replay_colls, times_each_gradient_all_reduce_at_its_size_on_the_fastest_member) {
  fixture f;
  setup(&f);
  int32_t n = 0;
  const int32_t *task = hap_coll_timer_tasks(f.timer, &n);
  int32_t n_params = 0;
  for (int32_t i = 0; i < f.g->n_tensors; i++)
    n_params += f.g->tensors[i].kind == HAP_TENSOR_PARAMETER;
  cr_assert_eq(n, n_params, "%d timed tasks, %d parameters", n, n_params);
  for (int32_t j = 0; j < n; j++)
    cr_assert_eq(f.lw->tasks[task[j]].coll, HAP_COLL_ALL_REDUCE);
  sample(&f, 1e-4);
  sample(&f, 2e-4);
  hap_replay_colls out = {0};
  hap_coll_timer_take(f.timer, 5, &out);
  cr_assert_gt(out.n, 0);
  cr_assert_eq(out.warmup, 5);
  for (int32_t k = 0; k < out.n; k++) {
    const hap_replay_coll *c = &out.v[k];
    cr_assert_eq(c->kind, HAP_COLL_ALL_REDUCE);
    cr_assert_eq(c->n_ranks, 2);
    cr_assert(c->ranks[0] == 0 && c->ranks[1] == 1);
    cr_assert_eq(c->n_samples, 2);
    cr_assert_float_eq(c->samples_s[0], 1e-4, 1e-15, "key %d: %g", k, c->samples_s[0]);
    cr_assert_float_eq(c->samples_s[1], 2e-4, 1e-15, "key %d: %g", k, c->samples_s[1]);
    /* the size: some parameter's whole gradient in float32 bytes */
    bool found = false;
    for (int32_t i = 0; i < f.g->n_tensors && !found; i++)
      found = f.g->tensors[i].kind == HAP_TENSOR_PARAMETER &&
              hap_tensor_bytes(&f.g->tensors[i]) == c->bytes;
    cr_assert(found, "key %d: %lld bytes is no parameter's size", k, (long long)c->bytes);
    for (int32_t m = 0; m < k; m++)
      cr_assert_neq(out.v[m].bytes, c->bytes, "two keys of %lld bytes", (long long)c->bytes);
  }
  hap_replay_colls_free(&out);
  teardown(&f);
}

Test(replay_colls, an_iteration_where_a_task_did_not_run_everywhere_gives_no_sample) {
  fixture f;
  setup(&f);
  sample(&f, 1e-4);
  int32_t n = 0;
  hap_coll_timer_tasks(f.timer, &n);
  double mine[256];
  for (int32_t j = 0; j < n; j++)
    mine[j] = peer_row[j] = 5e-4;
  peer_row[n - 1] = -1; /* the peer did not run the last one */
  hap_err e = {0};
  cr_assert_eq(hap_coll_timer_sample(f.timer, mine, &f.world, &e), HAP_OK, "%s", e.msg);
  hap_replay_colls out = {0};
  hap_coll_timer_take(f.timer, 1, &out);
  for (int32_t k = 0; k < out.n; k++)
    cr_assert_eq(out.v[k].n_samples, 1, "key %d: %d samples", k, out.v[k].n_samples);
  hap_replay_colls_free(&out);
  teardown(&f);
}

/* ---- into a profile and the cluster model --------------------------------------------------- */

static const int64_t sweep_sizes[] = {8, 1024, 65536, 1048576};

/* Two CPU devices on one host, an all-reduce sweep over both following alpha + S / beta. */
static hap_profile *two_device_profile(double alpha_s, double beta_Bps) {
  hap_profile *p = hap_profile_create();
  cr_assert_not_null(p);
  hap_err e = {0};
  cr_assert_eq(hap_profile_set_meta(p, "2026-12-02T00:00:00Z", "hap-profile test", "cpu+mpi", &e),
               HAP_OK);
  cr_assert_eq(hap_profile_add_host(p, "vm", &e), HAP_OK);
  for (int i = 0; i < 2; i++) {
    int32_t d;
    cr_assert_eq(
        hap_profile_add_device(p, i == 0 ? "vm:0" : "vm:1", "vm", "cpu", HAP_DEVICE_CPU, &d, &e),
        HAP_OK, "%s", e.msg);
    p->devices[d].memory_bytes = (int64_t)8 << 30;
    p->devices[d].memory_bw_Bps = 20e9;
    p->devices[d].launch_s = 1e-6;
    p->devices[d].peak_flops[HAP_F32] = 50e9;
  }
  const int32_t world[] = {0, 1};
  int32_t j;
  cr_assert_eq(hap_profile_add_coll(p, HAP_COLL_ALL_REDUCE, "world", world, 2, 4, 3, &j, &e),
               HAP_OK, "%s", e.msg);
  hap_profile_coll *c = &p->colls[j];
  for (int i = 0; i < 4; i++) {
    c->sizes_bytes[i] = sweep_sizes[i];
    for (int r = 0; r < 3; r++)
      c->samples_s[i * 3 + r] = alpha_s + (double)sweep_sizes[i] / beta_Bps;
  }
  cr_assert_eq(hap_profile_compute_stats(p, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_profile_fit(p, &e), HAP_OK, "%s", e.msg);
  return p;
}

/* Two keys (sizes 3000 and 500 bytes, given out of order) over both devices, 5 samples each:
 * median 70 and 30 us, priced (mean) at 70.7 and 30.3 us. */
static hap_replay_colls two_keys(int32_t r0, int32_t r1) {
  hap_replay_colls c = {.n = 2, .warmup = 2};
  c.v = calloc(2, sizeof *c.v);
  const int64_t bytes[] = {3000, 500};
  const double t[] = {7e-5, 3e-5};
  for (int k = 0; k < 2; k++) {
    hap_replay_coll *x = &c.v[k];
    x->kind = HAP_COLL_ALL_REDUCE;
    x->n_ranks = 2;
    x->ranks = malloc(2 * sizeof *x->ranks);
    x->ranks[0] = r0;
    x->ranks[1] = r1;
    x->bytes = bytes[k];
    x->n_samples = 5;
    x->samples_s = malloc(5 * sizeof *x->samples_s);
    /* median t[k], mean 1.01 t[k] (the price) */
    const double skew[] = {1.0, 0.9, 1.4, 1.25, 0.5};
    for (int r = 0; r < 5; r++)
      x->samples_s[r] = t[k] * skew[r];
  }
  return c;
}

Test(replay_colls, the_plan_group_prices_exactly_its_sizes_and_the_fit_the_rest) {
  hap_profile *p = two_device_profile(10e-6, 1e9);
  hap_replay_colls c = two_keys(0, 1);
  hap_err e = {0};
  cr_assert_eq(hap_replay_colls_to_profile(&c, p, &e), HAP_OK, "%s", e.msg);
  const hap_profile_coll *pc = hap_profile_find_coll(p, HAP_COLL_ALL_REDUCE, "plan");
  cr_assert_not_null(pc, "no group 'plan'");
  cr_assert_eq(pc->n_sizes, 2);
  cr_assert(pc->sizes_bytes[0] == 500 && pc->sizes_bytes[1] == 3000, "sizes not sorted");
  cr_assert_eq(pc->reps, 5);
  cr_assert_eq(pc->warmup, 2);
  cr_assert_float_eq(pc->p50_s[0], 3e-5, 1e-12);
  cr_assert_float_eq(pc->p50_s[1], 7e-5, 1e-12);
  cr_assert_eq(hap_profile_validate(p, &e), HAP_OK, "%s", e.msg);
  /* one replay per profile */
  cr_assert_eq(hap_replay_colls_to_profile(&c, p, &e), HAP_EINVAL);
  cr_assert_not_null(strstr(e.msg, "already has all_reduce group 'plan'"), "%s", e.msg);

  /* no entry (a profile before it) and "p50": the medians; "mean", hap-profile's default: the
   * means */
  const char *prices[] = {NULL, "p50"};
  for (int k = 0; k < 2; k++) {
    if (prices[k] != NULL)
      cr_assert_eq(hap_profile_set_env(p, HAP_PROFILE_PRICE_ENV, prices[k], &e), HAP_OK);
    hap_cluster *median = NULL;
    cr_assert_eq(hap_profile_to_cluster(p, &median, &e), HAP_OK, "%s", e.msg);
    const int32_t ranks[] = {1, 0};
    const hap_coll_fit *f = hap_cluster_find_fit(median, HAP_COLL_ALL_REDUCE, ranks, 2);
    cr_assert_float_eq(hap_coll_fit_time(f, 500), 3e-5, 1e-12, "price %s", prices[k]);
    cr_assert_float_eq(hap_coll_fit_time(f, 3000), 7e-5, 1e-12);
    hap_cluster_destroy(median);
  }
  cr_assert_eq(hap_profile_set_env(p, HAP_PROFILE_PRICE_ENV, "mean", &e), HAP_OK);
  hap_cluster *cl = NULL;
  hap_err e2 = {0};
  cr_assert_eq(hap_profile_to_cluster(p, &cl, &e2), HAP_OK, "%s", e2.msg);
  const int32_t both[] = {1, 0};
  const hap_coll_fit *fit = hap_cluster_find_fit(cl, HAP_COLL_ALL_REDUCE, both, 2);
  cr_assert_not_null(fit);
  cr_assert_eq(cl->n_fits, 1, "the plan group joins the sweep's fit, %d fits", cl->n_fits);
  cr_assert_eq(fit->n_points, 2);
  cr_assert_float_eq(hap_coll_fit_time(fit, 500), 3.03e-5, 1e-12);
  cr_assert_float_eq(hap_coll_fit_time(fit, 500.4), 3.03e-5, 1e-12); /* rounding of a size */
  cr_assert_float_eq(hap_coll_fit_time(fit, 3000), 7.07e-5, 1e-12);
  /* elsewhere: the sweep's fit (10 us + S / 1 GB/s) */
  cr_assert_float_eq(hap_coll_fit_time(fit, 501), 10e-6 + 501 / 1e9, 1e-9);
  cr_assert_float_eq(hap_coll_fit_time(fit, 65536), 10e-6 + 65536 / 1e9, 1e-9);
  /* what the simulator asks: a group over both devices, the size a fit is read at */
  hap_group g;
  cr_assert_eq(hap_group_init(cl, both, 2, &g, &e2), HAP_OK, "%s", e2.msg);
  cr_assert_float_eq(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, hap_coll_bytes_uniform(3000, 2)),
      7.07e-5, 1e-12);
  /* the simulator adds nothing to a measured time (e.g. an emulated sum's rounding) */
  cr_assert(
      hap_coll_measured(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, hap_coll_bytes_uniform(3000, 2)));
  cr_assert_not(
      hap_coll_measured(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, hap_coll_bytes_uniform(2000, 2)));
  cr_assert_not(
      hap_coll_measured(&g, HAP_COLL_ALL_GATHER, HAP_IMPL_AUTO, hap_coll_bytes_uniform(3000, 2)));
  hap_cluster_destroy(cl);
  hap_replay_colls_free(&c);
  hap_profile_destroy(p);
}

Test(replay_colls, a_plan_group_no_sweep_covers_brings_its_own_fit_and_keeps_through_hdf5) {
  hap_profile *p = two_device_profile(10e-6, 1e9);
  p->colls[0].kind = HAP_COLL_ALL_GATHER; /* the sweep covers another kind */
  hap_replay_colls c = two_keys(1, 0);    /* ring order 1, 0: not the world in order */
  hap_err e = {0};
  cr_assert_eq(hap_replay_colls_to_profile(&c, p, &e), HAP_OK, "%s", e.msg);
  cr_assert_not_null(hap_profile_find_coll(p, HAP_COLL_ALL_REDUCE, "plan:1-0"));
  cr_assert_eq(hap_profile_set_env(p, HAP_PROFILE_PRICE_ENV, "mean", &e), HAP_OK);
  char path[] = "/tmp/hap_replay_colls_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  cr_assert_eq(hap_profile_write(p, path, &e), HAP_OK, "%s", e.msg);
  hap_profile *back = NULL;
  cr_assert_eq(hap_profile_read(path, &back, &e), HAP_OK, "%s", e.msg);
  unlink(path);
  hap_cluster *cl = NULL;
  cr_assert_eq(hap_profile_to_cluster(back, &cl, &e), HAP_OK, "%s", e.msg);
  const int32_t both[] = {0, 1};
  const hap_coll_fit *fit = hap_cluster_find_fit(cl, HAP_COLL_ALL_REDUCE, both, 2);
  cr_assert_not_null(fit, "the plan group's own fit");
  cr_assert_eq(fit->n_points, 2);
  cr_assert_float_eq(hap_coll_fit_time(fit, 3000), 7.07e-5, 1e-12);
  cr_assert(hap_coll_fit_time(fit, 2000) > 0);
  hap_cluster_destroy(cl);
  hap_profile_destroy(back);
  hap_replay_colls_free(&c);
  hap_profile_destroy(p);
}

Test(replay_colls, samples_of_unequal_counts_are_refused) {
  hap_profile *p = two_device_profile(10e-6, 1e9);
  hap_replay_colls c = two_keys(0, 1);
  c.v[1].n_samples = 2;
  hap_err e = {0};
  cr_assert_eq(hap_replay_colls_to_profile(&c, p, &e), HAP_EINVAL);
  cr_assert_not_null(strstr(e.msg, "expected the same number"), "%s", e.msg);
  cr_assert_null(hap_profile_find_coll(p, HAP_COLL_ALL_REDUCE, "plan"));
  hap_replay_colls_free(&c);
  hap_profile_destroy(p);
}
