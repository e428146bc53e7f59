/* test_replay.c — the kernel replay (profile/replay.h) under a training policy, on one rank
 * without MPI: with micro-batches and recomputation a row is one run of the task's own kernels
 * (not the micro-batches' sum, nor the recomputation nested in a backward task), so that the
 * simulator, which multiplies a row by the task's repeats and adds the recomputed forward task,
 * prices each task as the runner runs it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/policy.h"
#include "model/zoo.h"
#include "profile/replay.h"
#include "run/run.h"
#include "store/cluster_open.h"
#include "synth/synth.h"

/* ---- a one-rank world: what the replay itself calls (all_reduce, barrier) ------------------ */

static hap_status one_all_reduce(hap_comm *c, const void *send, void *recv, int64_t count,
                                 hap_dtype dt, hap_reduce_op op, hap_err *err) {
  (void)c, (void)op, (void)err;
  memmove(recv, send, (size_t)count * (size_t)hap_dtype_size(dt));
  return HAP_OK;
}
static hap_status one_barrier(hap_comm *c, hap_err *err) {
  (void)c, (void)err;
  return HAP_OK;
}
static void one_abort(hap_comm *c, int code) {
  (void)c;
  exit(code);
}
static void one_destroy(hap_comm *c) { (void)c; }

static const hap_comm_ops one_ops = {.name = "one",
                                     .all_reduce = one_all_reduce,
                                     .barrier = one_barrier,
                                     .abort = one_abort,
                                     .destroy = one_destroy};

/* ---- a kernel table with a fixed device time per call --------------------------------------- */

enum { CALL_US = 1000 };

static hap_status fixed_fwd(void *ctx, const hap_kernel_call *c, void *const *out,
                            hap_kernel_state *st, double *kernel_s, double *staging_s,
                            hap_err *err) {
  (void)ctx;
  *kernel_s = CALL_US * 1e-6;
  *staging_s = 0;
  return hap_kernel_forward(c, out, st, err);
}

static hap_status fixed_bwd(void *ctx, const hap_kernel_call *c, const float *const *dout,
                            float *const *din, const hap_kernel_state *st, double *kernel_s,
                            double *staging_s, hap_err *err) {
  (void)ctx;
  *kernel_s = CALL_US * 1e-6;
  *staging_s = 0;
  return hap_kernel_backward(c, dout, din, st, err);
}

static const hap_run_kernels fixed_table = {"fixed", NULL, fixed_fwd, fixed_bwd};

/* ---- fixtures ------------------------------------------------------------------------------- */

typedef struct fixture {
  hap_graph *g;
  hap_cluster *c;
  hap_plan *plan;
  hap_comm world;
} fixture;

static void setup(fixture *f, const char *model, const char *policy) {
  memset(f, 0, sizeof *f);
  hap_err e = {0};
  cr_assert_eq(hap_model_load(model, &f->g, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_cluster_open("paper-homo:gpus_per_host=1,hosts=1", &f->c, &e), HAP_OK, "%s",
               e.msg);
  hap_synth_options so = {0};
  uint32_t given = 0;
  cr_assert_eq(hap_policy_parse(policy, &so.policy, &given, &e), HAP_OK, "%s", e.msg);
  hap_synth_stats stats;
  cr_assert_eq(hap_synthesize(f->g, f->c, &so, &f->plan, &stats, &e), HAP_OK, "%s", e.msg);
  f->world = (hap_comm){.ops = &one_ops, .rank = 0, .size = 1};
}

static void teardown(fixture *f) {
  hap_plan_destroy(f->plan);
  hap_cluster_destroy(f->c);
  hap_graph_destroy(f->g);
}

static hap_replay_options options(const hap_run_kernels *kernels) {
  return (hap_replay_options){.warmup = 1,
                              .iters = 3,
                              .max_iters = 3,
                              .min_s = 0,
                              .speed = 1,
                              .seed = 1,
                              .kernels = kernels};
}

/* Under micro-batches (4) and full recomputation, every compute task's row is one kernel call
 * (1 ms by the table's device time), not 4 calls or 4 calls plus the recomputed forward's. */
Test(replay, a_row_is_one_run_of_the_task_own_kernels) {
  fixture f;
  setup(&f, "mlp:layers=2,batch=16,seq=4,hidden=16", "recompute=full,micro_batches=4");
  cr_assert_eq(f.plan->policy.micro_batches, 4);
  hap_replay_options o = options(&fixed_table);
  hap_profile_kernel *rows = NULL;
  int32_t n = 0;
  double upd = 0;
  hap_err e = {0};
  cr_assert_eq(hap_replay_kernel_rows(f.plan, f.g, &f.world, &o, &rows, &n, &upd, &e), HAP_OK, "%s",
               e.msg);
  cr_assert_gt(n, 0);
  int bwd = 0;
  for (int32_t i = 0; i < n; i++) {
    /* a backward task's own time is its kernel's 1 ms less the host time of the recomputation
     * nested in it (microseconds here: the table's time is not the host's) */
    cr_assert(rows[i].p50_s > 0.5 * CALL_US * 1e-6 && rows[i].p50_s <= CALL_US * 1e-6 * 1.0001,
              "row %d (%s %s): p50 %g s, expected one call of %g s", i, hap_op_name(rows[i].op),
              rows[i].backward ? "bwd" : "fwd", rows[i].p50_s, CALL_US * 1e-6);
    /* the price: the samples' mean, one call too */
    cr_assert(rows[i].mean_s > 0.5 * CALL_US * 1e-6 && rows[i].mean_s <= CALL_US * 1e-6 * 1.0001,
              "row %d: mean %g s, expected one call of %g s", i, rows[i].mean_s, CALL_US * 1e-6);
    /* one sample per task and iteration; tasks of one shape pool */
    cr_assert(rows[i].reps >= 3 && rows[i].reps % 3 == 0, "row %d: %d samples", i, rows[i].reps);
    bwd += rows[i].backward;
  }
  cr_assert_gt(bwd, 0);
  cr_assert_gt(upd, 0);
  free(rows);
  teardown(&f);
}

/* Kernels whose GEMMs compute in bfloat16 (a GPU under a bf16 policy) give rows keyed as bfloat16
 * applications, which half-precision applications on such a device look up (cluster/cost.c);
 * float32 kernels (the CPU's, whatever the policy) give the float32 keys. Same rows otherwise. */
Test(replay, rows_of_half_gemms_are_keyed_in_their_format) {
  fixture f;
  setup(&f, "mlp:layers=2,batch=16,seq=4,hidden=16", "precision=bf16");
  hap_profile_kernel *rows[2] = {NULL, NULL};
  int32_t n[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    hap_replay_options o = options(&fixed_table);
    o.gemm = k ? HAP_BF16 : HAP_F32;
    double upd = 0;
    hap_err e = {0};
    cr_assert_eq(hap_replay_kernel_rows(f.plan, f.g, &f.world, &o, &rows[k], &n[k], &upd, &e),
                 HAP_OK, "%s", e.msg);
  }
  cr_assert_gt(n[0], 0);
  cr_assert_eq(n[0], n[1]);
  for (int32_t i = 0; i < n[0]; i++) {
    cr_assert_eq(rows[0][i].op, rows[1][i].op);
    cr_assert_neq(rows[0][i].shape_key, rows[1][i].shape_key, "row %d (%s)", i,
                  hap_op_name(rows[0][i].op));
    cr_assert(strstr(rows[1][i].shape, " in bfloat16") != NULL, "row %d: '%s'", i,
              rows[1][i].shape);
    cr_assert(strstr(rows[0][i].shape, " in ") == NULL, "row %d: '%s'", i, rows[0][i].shape);
  }
  free(rows[0]);
  free(rows[1]);
  teardown(&f);
}
