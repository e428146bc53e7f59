/* test_run_kernels.c — the runner's kernel table (run.h: hap_run_kernels), on one rank without
 * MPI (a loop-back comm): compute tasks go through the table chosen at hap_run_create, a table's
 * device time is the task's time and its staging time is summed apart, a refused op names the
 * task, and the GPU path's kernel programs (kx/kx.h), run on the host, train the mlp and a
 * fine-grained gpt to the same loss and gradients as the single-device CPU reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kx/kx.h"
#include "loopback_comm.h"
#include "model/zoo.h"
#include "run/reference.h"
#include "run/run.h"
#include "store/cluster_open.h"
#include "synth/synth.h"

/* ---- fixtures ------------------------------------------------------------------------------- */

typedef struct fixture {
  hap_graph *g;
  hap_cluster *c;
  hap_plan *plan;
  hap_lowered *lw;
  hap_comm comm;
} fixture;

static void setup(fixture *f, const char *model) {
  memset(f, 0, sizeof *f);
  hap_err e = {0};
  cr_assert_eq(hap_model_load(model, &f->g, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_cluster_open("paper-homo:gpus_per_host=1,hosts=1", &f->c, &e), HAP_OK, "%s",
               e.msg);
  hap_synth_options so = {0};
  hap_synth_stats stats;
  cr_assert_eq(hap_synthesize(f->g, f->c, &so, &f->plan, &stats, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_lower(f->plan, f->g, &f->lw, &e), HAP_OK, "%s", e.msg);
  f->comm = hap_loopback_comm();
}

static void teardown(fixture *f) {
  hap_lowered_destroy(f->lw);
  hap_plan_destroy(f->plan);
  hap_cluster_destroy(f->c);
  hap_graph_destroy(f->g);
}

/* A table over the CPU kernels that claims a device time and staging per call. */
typedef struct fake {
  int calls;
  bool refuse; /* HAP_EUNSUPPORTED for sigmoid */
} fake;

static hap_status fake_fwd(void *ctx, const hap_kernel_call *c, void *const *out,
                           hap_kernel_state *st, double *kernel_s, double *staging_s,
                           hap_err *err) {
  fake *f = ctx;
  f->calls++;
  *kernel_s = 1e-3;
  *staging_s = 2e-4;
  if (f->refuse && c->op == HAP_OP_SIGMOID)
    return hap_err_set(err, HAP_EUNSUPPORTED, "op 'sigmoid' refused");
  return hap_kernel_forward(c, out, st, err);
}

static hap_status fake_bwd(void *ctx, const hap_kernel_call *c, const float *const *dout,
                           float *const *din, const hap_kernel_state *st, double *kernel_s,
                           double *staging_s, hap_err *err) {
  fake *f = ctx;
  f->calls++;
  *kernel_s = 1e-3;
  *staging_s = 2e-4;
  return hap_kernel_backward(c, dout, din, st, err);
}

/* The GPU path's programs, on the host. */
static hap_status kx_fwd(void *ctx, const hap_kernel_call *c, void *const *out,
                         hap_kernel_state *st, double *kernel_s, double *staging_s, hap_err *err) {
  (void)ctx;
  *kernel_s = -1;
  *staging_s = 0;
  hap_kernel_state_free(st);
  return hap_kx_forward_host(c, out, HAP_F32, err);
}

static hap_status kx_bwd(void *ctx, const hap_kernel_call *c, const float *const *dout,
                         float *const *din, const hap_kernel_state *st, double *kernel_s,
                         double *staging_s, hap_err *err) {
  (void)ctx, (void)st;
  *kernel_s = -1;
  *staging_s = 0;
  return hap_kx_backward_host(c, dout, din, HAP_F32, err);
}

static int compute_tasks(const hap_lowered *lw) {
  int n = 0;
  for (int32_t t = 0; t < lw->n_tasks; t++)
    n += lw->tasks[t].kind == HAP_TASK_COMPUTE;
  return n;
}

Test(run_kernels, table_times_compute_tasks) {
  fixture f;
  setup(&f, "mlp:layers=2,batch=8,seq=4,hidden=16");
  fake fk = {0};
  hap_run_kernels table = {"fake", &fk, fake_fwd, fake_bwd};
  hap_run_options o = {.seed = 1, .lr = 1e-3, .speed = 1, .kernels = &table};
  hap_run *run = NULL;
  hap_err e = {0};
  cr_assert_eq(hap_run_create(f.lw, f.g, &f.comm, &o, &run, &e), HAP_OK, "%s", e.msg);
  size_t nt = (size_t)f.lw->n_tasks;
  double *start = calloc(nt, sizeof *start), *end = calloc(nt, sizeof *end);
  cr_assert_eq(hap_run_iteration(run, start, end, &e), HAP_OK, "%s", e.msg);
  int n = compute_tasks(f.lw);
  cr_assert_gt(n, 0);
  cr_assert_eq(fk.calls, n, "%d table calls for %d compute tasks", fk.calls, n);
  for (size_t t = 0; t < nt; t++)
    if (f.lw->tasks[t].kind == HAP_TASK_COMPUTE)
      cr_assert_float_eq(end[t] - start[t], 1e-3, 1e-9, "task %s", f.lw->tasks[t].name);
  cr_assert_float_eq(hap_run_staging_s(run), 2e-4 * n, 1e-12);
  /* the values are the CPU kernels' */
  double loss = 0;
  cr_assert_eq(hap_run_loss(run, &loss, &e), HAP_OK, "%s", e.msg);
  hap_reference *ref = NULL;
  cr_assert_eq(hap_reference_run(f.g, 1, &ref, &e), HAP_OK, "%s", e.msg);
  cr_assert_float_eq(loss, hap_reference_loss(ref), 1e-4 * fabs(hap_reference_loss(ref)));
  hap_reference_destroy(ref);
  free(start);
  free(end);
  hap_run_destroy(run);
  teardown(&f);
}

Test(run_kernels, a_refused_op_names_the_task) {
  fixture f;
  setup(&f, "mlp:layers=1,batch=4,seq=2,hidden=8");
  fake fk = {.refuse = true};
  hap_run_kernels table = {"fake", &fk, fake_fwd, fake_bwd};
  hap_run_options o = {.seed = 1, .speed = 1, .kernels = &table};
  hap_run *run = NULL;
  hap_err e = {0};
  cr_assert_eq(hap_run_create(f.lw, f.g, &f.comm, &o, &run, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_run_iteration(run, NULL, NULL, &e), HAP_EUNSUPPORTED);
  cr_assert_str_eq(e.msg, "op 'sigmoid' refused");
  cr_assert_not_null(hap_run_failed_task(run));
  cr_assert(strstr(hap_run_failed_task(run), "sigmoid") != NULL, "%s", hap_run_failed_task(run));
  hap_run_destroy(run);
  teardown(&f);
}

/* Every parameter gradient of run r against the reference, 1e-4 of the largest of its tensor —
 * or of 1e-3 of the largest of the model, for gradients that are zero in exact arithmetic (the
 * key bias of attention: softmax ignores a constant added to a row) and so only rounding noise,
 * which two correct implementations round differently. */
static void expect_grads(const fixture *f, hap_run *r, const hap_reference *ref) {
  double model_scale = 0;
  for (int32_t t = 0; t < f->g->n_tensors; t++) {
    const hap_tensor *ten = &f->g->tensors[t];
    if (ten->kind != HAP_TENSOR_PARAMETER || !ten->requires_grad)
      continue;
    const float *want = hap_reference_grad(ref, t);
    for (int64_t i = 0; i < hap_tensor_numel(ten); i++)
      model_scale = fmax(model_scale, fabs((double)want[i]));
  }
  for (int32_t t = 0; t < f->g->n_tensors; t++) {
    const hap_tensor *ten = &f->g->tensors[t];
    if (ten->kind != HAP_TENSOR_PARAMETER || !ten->requires_grad)
      continue;
    int64_t n = hap_tensor_numel(ten);
    float *got = calloc((size_t)n, sizeof *got);
    hap_err e = {0};
    cr_assert_eq(hap_run_gather_grad(r, t, got, &e), HAP_OK, "%s", e.msg);
    const float *want = hap_reference_grad(ref, t);
    double scale = fmax(1e-30, 1e-3 * model_scale);
    for (int64_t i = 0; i < n; i++)
      scale = fmax(scale, fabs((double)want[i]));
    for (int64_t i = 0; i < n; i++)
      cr_assert_leq(fabs((double)got[i] - want[i]), 1e-4 * scale, "%s[%lld]: %g vs %g", ten->name,
                    (long long)i, got[i], want[i]);
    free(got);
  }
}

Test(run_kernels, gpu_programs_on_the_host_train_like_the_cpu_kernels) {
  static const char *const models[] = {
      "mlp:layers=2,batch=8,seq=4,hidden=16",
      /* every op of the fine-grained gpt has a program: matmul, embedding, softmax, dropout, ... */
      "gpt:layers=1,batch=4,seq=4,width=16,heads=2,vocab=32,granularity=fine",
  };
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    fixture f;
    setup(&f, models[m]);
    hap_run_kernels table = {"kx-host", NULL, kx_fwd, kx_bwd};
    hap_run_options o = {.seed = 1, .speed = 1, .kernels = &table};
    hap_run *run = NULL;
    hap_err e = {0};
    cr_assert_eq(hap_run_create(f.lw, f.g, &f.comm, &o, &run, &e), HAP_OK, "%s", e.msg);
    cr_assert_eq(hap_run_iteration(run, NULL, NULL, &e), HAP_OK, "%s: %s", models[m], e.msg);
    double loss = 0;
    cr_assert_eq(hap_run_loss(run, &loss, &e), HAP_OK, "%s", e.msg);
    hap_reference *ref = NULL;
    cr_assert_eq(hap_reference_run(f.g, 1, &ref, &e), HAP_OK, "%s", e.msg);
    cr_assert_float_eq(loss, hap_reference_loss(ref), 1e-4 * fabs(hap_reference_loss(ref)));
    expect_grads(&f, run, ref);
    hap_reference_destroy(ref);
    hap_run_destroy(run);
    teardown(&f);
  }
}
