/* hap-run — execute a plan for real under mpirun (one rank per device of the plan), time every
 * task, and put the measured timeline next to the simulated one. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/fileio.h"
#include "base/json_write.h"
#include "exec/blas_core.h"
#include "exec/clock.h"
#include "exec/comm_mpi.h"
#include "exec/device_cpu.h"
#include "exec/devices.h"
#include "exec/emulate.h"
#include "hap_config.h"
#include "harness/format.h"
#include "harness/launcher.h"
#include "harness/mpi_start.h"
#include "harness/report.h"
#include "harness/watchdog.h"
#include "kx/kernels_run.h"
#include "model/zoo.h"
#include "plan/pipeline_io.h"
#include "plan/pipeline_lower.h"
#include "plan/plan_io.h"
#include "report/report.h"
#include "run/check.h"
#include "run/init.h"
#include "run/pipeline_run.h"
#include "run/run.h"
#include "simulate/pipeline_plan_sim.h"
#include "simulate/plan_sim.h"
#include "store/cluster_open.h"
#include "store/tensor_file.h"
#include "traces/trace.h"

static const char *prog = "hap-run";

static void usage(FILE *f) {
  fprintf(f,
          "Usage: mpirun -np N hap-run PLAN [--model MODEL] [--cluster CLUSTER] [OPTIONS]\n"
          "\n"
          "Run a plan (hap-synth -o PLAN) for real: every rank is one device of the plan and runs\n"
          "its lowered tasks (the kernels compute the real function, layouts move over MPI), with\n"
          "one timestamp pair per task. Prints the measured iteration time (mean, p50, p95) next\n"
          "to the simulated one for CLUSTER, the loss, and the tasks whose times differ most. A\n"
          "plan made with hap-synth --policy trains that way (docs/execution.md): half-precision\n"
          "storage, the optimizer, ZeRO, recomputation, micro-batches (--backend cuda: the\n"
          "GEMMs multiply float16/bfloat16 operands with float32 accumulation).\n"
          "A pipelined plan (hap-synth --pipeline ... -o PLAN) runs its stages on their device\n"
          "groups in its schedule's order (GPipe, 1F1B, interleaved), boundaries sent between the\n"
          "stages' ranks, and is compared with hap-sim --plan's simulation of every device.\n"
          "\n"
          "  -m, --model MODEL      the model the plan was made for (zoo spec or hap-graph file;\n"
          "                         default: the one hap-synth recorded in the plan)\n"
          "  -c, --cluster C        the cluster the plan was made for: a hap-profile .h5 measured\n"
          "                         on these machines (hap-profile measure), or a spec (default:\n"
          "                         the one recorded in the plan)\n"
          "      --sim-cluster C2   simulate on C2 instead: a profile of the same devices taken\n"
          "                         after the plan was made, e.g. with hap-profile --plan PLAN\n"
          "                         (kernel times at exactly this plan's shapes)\n"
          "  -b, --backend NAME     where compute tasks run: cpu (default; the CPU kernels over\n"
          "                         OpenBLAS) or cuda (each rank one GPU, local rank -> device;\n"
          "                         each task's inputs are copied to the GPU and its results\n"
          "                         back, and the copies are reported apart as 'staging')\n"
          "  -n, --iters N          timed iterations (default 10)\n"
          "  -w, --warmup W         untimed iterations first (default 2)\n"
          "  -t, --trace FILE       Chrome trace: simulated and measured rows per rank\n"
          "      --task-times FILE  every rank's task times in every iteration, warm-ups\n"
          "                         included, as CSV (rank, iteration, timed, task, name, kind,\n"
          "                         phase, waits, start_s, end_s; s from the rank's iteration\n"
          "                         start; waits: the rank waits there for the others),\n"
          "                         for analyses of the whole run (reports/rank-skew.py)\n"
          "      --report FILE      also write that trace as an HTML page (hap-report run:\n"
          "                         Gantt lanes per rank, task errors), when the run succeeds\n"
          "      --check            after each of the first 2 iterations compare the loss,\n"
          "                         every rank's copy of every parameter gradient and every\n"
          "                         updated parameter with a single-device run trained the same\n"
          "                         way, under the plan's policy (1e-4 relative in fp32, looser\n"
          "                         in bf16/fp16; any NaN or Inf fails; needs --warmup +\n"
          "                         --iters >= 2, and fp16 two steps its loss scale did not skip)\n"
          "      --threads N        OpenBLAS threads per rank (default 1, as hap-profile)\n"
          "      --overlap MB       sum the replicated parameters' gradients in buckets of MB\n"
          "                         MiB, each started as soon as it fills, so the sums overlap\n"
          "                         the rest of the backward pass (DDP's default is 25); 0: each\n"
          "                         gradient's all-reduce blocks (default 0)\n"
          "      --seed S           parameters, inputs and dropout (default 1)\n"
          "      --weights FILE     start from these parameters, buffers and inputs instead\n"
          "                         (a hap-weights HDF5 file: hap-import --weights)\n"
          "      --dump-grads FILE  write the first iteration's loss and every parameter's\n"
          "                         gradient (HDF5, as hap-import --reference writes PyTorch's)\n"
          "      --lr LR            learning rate of the plan's optimizer (default 0.001)\n"
          "      --emulate-speed L  rank i's kernels take 1/L[i] as long (e.g. 1,0.5)\n"
          "      --timeout S        a task that does not finish in S s ends every rank with an\n"
          "                         error naming it (default 120)\n"
          "  -f, --format FMT       table (default) or json\n"
          "  -q, --quiet            only errors and the one-line result\n"
          "  -h, --help, -V, --version\n"
          "\n"
          "Exit status: 0 ok, 1 failure (a --check mismatch included), 2 usage error.\n");
}

typedef struct opts {
  const char *plan, *model, *cluster, *sim_cluster, *trace, *weights, *dump_grads;
  const char *report;     /* --report FILE: the trace as hap-report's run page */
  const char *task_times; /* --task-times FILE: every rank's task times, CSV */
  int iters, warmup, threads;
  bool check, quiet, cuda;
  uint64_t seed;
  double lr, timeout_s;
  double overlap_mb; /* --overlap: gradient bucket size, MiB; 0 off */
  double *speeds;
  int32_t n_speeds;
  hap_format format;
} opts;

/* ---- watchdog (harness/watchdog.h): {phase} is the task the runner is in ------------------- */

static volatile sig_atomic_t current_task = -1; /* hap_run_options.current_task */

static const hap_watchdog_text watchdog_text = {
    .timeout = "task '{phase}' did not finish within {timeout} s (--timeout): a peer rank died or "
               "hangs; stopping",
    .stopped = "stopped by {signal} during task '{phase}' (mpirun stops every rank when one rank "
               "fails)"};

/* Read in the signal handler: the current task's name in the lowered plan `lw` (may be NULL). */
static const char *task_phase(const void *lw) {
  const hap_lowered *l = lw;
  int t = (int)current_task;
  return l != NULL && t >= 0 && t < l->n_tasks ? l->tasks[t].name : "(between tasks)";
}

/* hap_run_options.on_task: every task gets the whole --timeout. */
static void rearm(void *ctx, int32_t task) {
  (void)ctx;
  (void)task;
  hap_watchdog_arm();
}

/* ---- statistics ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  int i = (int)floor(q * (n - 1) + 0.5);
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* What both reports say: the measured iterations against the simulated one, the losses and the
 * optimizer's steps. */
typedef struct run_summary {
  int n_iter;
  double mean, p50, p95, sim, e; /* s; e = (mean - sim) / mean */
  const double *losses;          /* every iteration's, warm-up included */
  int n_losses;
  hap_run_steps steps;
  const hap_train_policy *policy;
} run_summary;

/* The summary of n_iter measured iterations (iter_s is sorted in place) against `sim`, s. */
static run_summary summarize(double *iter_s, int n_iter, double sim, const double *losses,
                             int n_losses, hap_run_steps steps, const hap_train_policy *policy) {
  run_summary r = {.n_iter = n_iter,
                   .sim = sim,
                   .losses = losses,
                   .n_losses = n_losses,
                   .steps = steps,
                   .policy = policy};
  for (int i = 0; i < n_iter; i++)
    r.mean += iter_s[i] / n_iter;
  r.p50 = quantile(iter_s, n_iter, 0.5);
  r.p95 = quantile(iter_s, n_iter, 0.95);
  r.e = (r.mean - sim) / r.mean;
  return r;
}

static void json_timing(hap_jw *w, const run_summary *r) {
  hap_jw_key(w, "iterations");
  hap_jw_int(w, r->n_iter);
  hap_jw_key(w, "measured_mean_s");
  hap_jw_double(w, r->mean);
  hap_jw_key(w, "measured_p50_s");
  hap_jw_double(w, r->p50);
  hap_jw_key(w, "measured_p95_s");
  hap_jw_double(w, r->p95);
  hap_jw_key(w, "simulated_s");
  hap_jw_double(w, r->sim);
  hap_jw_key(w, "error");
  hap_jw_double(w, r->e);
}

/* "backend" and, on CPUs, the OpenBLAS kernel set the kernels ran (exec/blas_core.h). */
static void json_backend(hap_jw *w, bool cuda) {
  hap_jw_key(w, "backend");
  hap_jw_str(w, cuda ? "cuda" : "cpu");
  if (cuda)
    return;
  hap_jw_key(w, "blas_core");
  hap_jw_str(w, hap_blas_core_name());
  hap_jw_key(w, "blas_core_chosen_by");
  hap_jw_str(w, hap_blas_core_chooser());
}

/* The text line of the same (CPU backend only). */
static void print_blas(bool cuda) {
  if (cuda)
    return;
  char core[160];
  hap_blas_core_describe(core, sizeof core);
  printf("blas        OpenBLAS core %s\n", core);
}

static void json_training(hap_jw *w, const run_summary *r) {
  char pol[160];
  hap_jw_key(w, "policy");
  hap_jw_str(w, hap_policy_brief(r->policy, pol, sizeof pol));
  hap_jw_key(w, "losses"); /* every iteration's, warm-up included */
  hap_jw_begin_array(w);
  for (int i = 0; i < r->n_losses; i++)
    hap_jw_double(w, r->losses[i]);
  hap_jw_end_array(w);
  hap_jw_key(w, "steps_taken");
  hap_jw_int(w, r->steps.taken);
  hap_jw_key(w, "steps_skipped"); /* fp16: gradients overflowed at the loss scale */
  hap_jw_int(w, r->steps.skipped);
  hap_jw_key(w, "loss_scale");
  hap_jw_double(w, r->steps.loss_scale);
}

static void print_iteration(const run_summary *r) {
  printf("iteration   measured mean %.3f ms, p50 %.3f ms, p95 %.3f ms over %d iterations\n",
         1e3 * r->mean, 1e3 * r->p50, 1e3 * r->p95, r->n_iter);
}

static void print_training(const run_summary *r) {
  if (r->n_losses > 0)
    printf("loss        %.6g (iteration 1) -> %.6g (iteration %d)\n", r->losses[0],
           r->losses[r->n_losses - 1], r->n_losses);
  if (hap_policy_is_default(r->policy))
    return;
  char pol[160];
  printf("policy      %s; %lld optimizer steps taken", hap_policy_brief(r->policy, pol, sizeof pol),
         (long long)r->steps.taken);
  if (r->policy->precision == HAP_PREC_FP16)
    printf(", %lld skipped (fp16 gradients overflowed), loss scale now %g",
           (long long)r->steps.skipped, r->steps.loss_scale);
  printf("\n");
}

/* ---- --check ------------------------------------------------------------------------- */

/* A tolerance as printed: "1e-04" when that is exactly its value, else 3 significant digits. */
static const char *tol_text(double v, char *buf, size_t len) {
  snprintf(buf, len, "%.0e", v);
  if (strtod(buf, NULL) != v)
    snprintf(buf, len, "%.3g", v);
  return buf;
}

/* After iteration res->iterations + 1: compare with a single-device run (run/check.h); rank 0
 * prints the verdict once it is known (a failure, or the last iteration compared passing: the
 * first HAP_CHECK_MIN_ITERATIONS iterations, and on until as many optimizer steps were taken, as
 * fp16 skips steps while its loss scale overflows). *done: no further iteration is compared. */
static hap_status check(hap_checker *ck, hap_run *run, hap_pipe_run *prun, hap_comm *comm,
                        hap_check_result *res, bool *ok, bool *done, hap_err *err) {
  HAP_TRY(prun != NULL ? hap_checker_compare_pipeline(ck, prun, res, err)
                       : hap_checker_compare(ck, run, res, err));
  *ok = res->passed;
  hap_run_steps steps = prun != NULL ? hap_pipe_run_steps_taken(prun) : hap_run_steps_taken(run);
  bool last =
      res->iterations >= HAP_CHECK_MIN_ITERATIONS && steps.taken >= HAP_CHECK_MIN_ITERATIONS;
  *done = last || !res->passed;
  if (comm->rank != 0 || (res->passed && !last))
    return HAP_OK;
  printf("check: iteration %d: loss %.9g, single device %.9g, relative error %.2e\n",
         (int)res->iterations, res->loss, res->ref_loss,
         fabs(res->loss - res->ref_loss) / fmax(fabs(res->ref_loss), 1e-30));
  int shown = res->n_failures < HAP_CHECK_MAX_REPORTED ? res->n_failures : HAP_CHECK_MAX_REPORTED;
  for (int i = 0; i < shown; i++)
    printf("check: FAILED: %s\n", res->failures[i]);
  if (res->n_failures > shown)
    printf("check: FAILED: ... and %d smaller\n", res->n_failures - shown);
  int copies = res->n_params > 0 ? (int)(res->n_copies / res->n_params) : 0;
  hap_check_tolerances tol = hap_checker_tolerances(ck);
  char tl[24], tg[24], tp[24], tf[24];
  if (res->passed)
    printf("check: passed: after %d iterations the loss, %d parameter gradients and %d "
           "parameters (%d rank copies each) match a single-device run: loss error %.2e <= %s, "
           "gradient error %.2e <= %s, parameter error %.2e <= %s (of the update, beyond %d "
           "ulp%s); %d tensors with gradients below %s of the largest measured against that\n",
           (int)res->iterations, (int)res->n_params, (int)res->n_params, copies, res->loss_err,
           tol_text(tol.loss, tl, sizeof tl), res->grad_err, tol_text(tol.grad, tg, sizeof tg),
           res->param_err, tol_text(tol.param, tp, sizeof tp), (int)tol.param_ulps,
           tol.adam_allowance ? " and Adam's allowance for noise gradients" : "",
           (int)res->n_floored, tol_text(tol.floor, tf, sizeof tf));
  else
    printf("check: FAILED: %d differences from a single-device run in iteration %d (largest "
           "first; compared: the loss, and %d rank copies of each of %d parameter gradients and "
           "values)\n",
           (int)res->n_failures, (int)res->iterations, copies, (int)res->n_params);
  return HAP_OK;
}

/* ---- report ---------------------------------------------------------------------------- */

typedef struct task_err {
  int32_t task, rank;
  double meas_s, sim_s;
} task_err;

static int cmp_abs_err(const void *a, const void *b) {
  const task_err *x = a, *y = b;
  double dx = fabs(x->meas_s - x->sim_s), dy = fabs(y->meas_s - y->sim_s);
  return (dy > dx) - (dy < dx);
}

/* Rank 0: per-task durations of the median iteration of every rank (meas[rank][task]);
 * staging_s: the largest rank's mean host<->device copy time per iteration (cuda), s. */
static void report(const opts *o, const hap_plan_sim *ps, const double *iter_s, int n_iter,
                   const double *meas, int32_t n_ranks, double staging_s, const double *losses,
                   int n_losses, hap_run_steps steps, double buckets_per_iter) {
  const hap_lowered *lw = ps->lw;
  double *v = malloc((size_t)n_iter * sizeof *v);
  task_err *errs = malloc((size_t)lw->n_tasks * (size_t)n_ranks * sizeof *errs);
  double *rel = malloc((size_t)lw->n_tasks * (size_t)n_ranks * sizeof *rel);
  if (!v || !errs || !rel) {
    free(v);
    free(errs);
    free(rel);
    return;
  }
  memcpy(v, iter_s, (size_t)n_iter * sizeof *v);
  run_summary sum =
      summarize(v, n_iter, ps->iteration_s, losses, n_losses, steps, &lw->plan->policy);
  int ne = 0, nrel = 0;
  for (int32_t r = 0; r < n_ranks; r++)
    for (int32_t t = 0; t < lw->n_tasks; t++) {
      double m = meas[(size_t)r * (size_t)lw->n_tasks + (size_t)t];
      double s = hap_plan_sim_duration(ps, t, r);
      errs[ne++] = (task_err){t, r, m, s};
      if (s >= 20e-6 && lw->tasks[t].kind == HAP_TASK_COMPUTE) /* timer noise below ~20 us */
        rel[nrel++] = fabs(m - s) / s;
    }
  double med_rel = nrel > 0 ? quantile(rel, nrel, 0.5) : NAN;
  if (o->format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_object(&w);
    json_timing(&w, &sum);
    hap_jw_key(&w, "median_task_error");
    hap_jw_double(&w, isfinite(med_rel) ? med_rel : -1);
    hap_jw_key(&w, "tasks_compared");
    hap_jw_int(&w, nrel);
    json_backend(&w, o->cuda);
    hap_jw_key(&w, "staging_s");
    hap_jw_double(&w, staging_s);
    hap_jw_key(&w, "overlap_buckets_per_iteration"); /* -1: off */
    hap_jw_double(&w, buckets_per_iter);
    json_training(&w, &sum);
    hap_jw_end_object(&w);
    hap_jw_finish(&w);
  } else {
    print_iteration(&sum);
    printf("simulated   %.3f ms (%s)  error %+.1f%%\n", 1e3 * sum.sim,
           ps->cluster->source ? ps->cluster->source : ps->cluster->name, 100 * sum.e);
    if (o->cuda)
      printf("staging     %.3f ms per iteration copying compute tasks' data between host and GPU "
             "(not in task times; task times are cudaEvent kernel times)\n",
             1e3 * staging_s);
    if (o->overlap_mb > 0 && buckets_per_iter >= 0)
      printf("overlap     %.0f gradient buckets per iteration of up to %g MiB, each summed while "
             "the backward pass goes on (the simulation keeps communication on the rank's cores)\n",
             buckets_per_iter, o->overlap_mb);
    else if (o->overlap_mb > 0)
      printf("overlap     off for this plan: --overlap applies to float32 plans of one "
             "micro-batch, without replicas or pipeline stages\n");
    print_training(&sum);
    print_blas(o->cuda);
    if (isfinite(med_rel))
      printf("tasks       median |measured - simulated| / simulated over %d compute tasks >= "
             "20 us: %.1f%%\n",
             nrel, 100 * med_rel);
    if (!o->quiet) {
      qsort(errs, (size_t)ne, sizeof *errs, cmp_abs_err);
      printf("\nlargest differences (median iteration):\n%-44s %5s %12s %12s %8s\n", "task", "rank",
             "measured", "simulated", "error");
      for (int i = 0; i < ne && i < 10; i++)
        printf("%-44s %5d %9.3f ms %9.3f ms %+7.0f%%\n", lw->tasks[errs[i].task].name, errs[i].rank,
               1e3 * errs[i].meas_s, 1e3 * errs[i].sim_s,
               errs[i].sim_s > 0 ? 100 * (errs[i].meas_s - errs[i].sim_s) / errs[i].sim_s : 0.0);
    }
  }
  free(v);
  free(errs);
  free(rel);
}

/* The trace's end: its metadata and the rename into place, or (st: a failure writing it) its
 * temporary removed. */
static hap_status finish_trace(const opts *o, hap_trace *t, hap_status st, const char *strategy,
                               hap_err *err) {
  if (st == HAP_OK)
    st = hap_trace_meta(t, "plan_strategy", strategy);
  if (st != HAP_OK) {
    hap_trace_abort(t);
    if (err->status == HAP_OK)
      hap_err_set(err, st, "writing the trace '%s' failed", o->trace);
    return st;
  }
  return hap_trace_close(t, err);
}

/* Rank 0: simulated rows, then the measured rows of the median iteration (starts relative to
 * each rank's first task). */
static hap_status write_trace(const opts *o, hap_plan_sim *ps, const double *start,
                              const double *end, int32_t n_ranks, hap_err *err) {
  hap_trace *t = NULL;
  HAP_TRY(hap_trace_open(o->trace, prog, &t, err));
  hap_status st = hap_plan_sim_trace(ps, t, 0, err);
  const hap_lowered *lw = ps->lw;
  for (int32_t r = 0; r < n_ranks && st == HAP_OK; r++) {
    st = hap_trace_rank(t, HAP_TRACE_MEASURED, r, ps->cluster->devices[r].name);
    const double *s0 = start + (size_t)r * (size_t)lw->n_tasks;
    const double *e0 = end + (size_t)r * (size_t)lw->n_tasks;
    double base = s0[0];
    for (int32_t k = 0; k < lw->n_tasks && st == HAP_OK; k++) {
      const hap_task *task = &lw->tasks[k];
      bool coll = task->kind == HAP_TASK_COLLECTIVE;
      double sim = hap_plan_sim_duration(ps, k, r), meas = e0[k] - s0[k];
      hap_trace_event ev = HAP_TRACE_EVENT_INIT;
      ev.name = task->name;
      ev.task = task->name;
      ev.cat = coll ? "collective" : hap_task_kind_name(task->kind);
      ev.pid = hap_trace_pid(HAP_TRACE_MEASURED, r);
      ev.tid = coll ? HAP_TRACE_LANE_COLLECTIVE : HAP_TRACE_LANE_COMPUTE;
      ev.ts_ns = (int64_t)llround((s0[k] - base) * 1e9);
      ev.dur_ns = (int64_t)llround((e0[k] - base) * 1e9) - ev.ts_ns;
      ev.sim_dur_us = 1e6 * sim;
      if (sim > 0)
        ev.err_pct = 100 * (meas - sim) / sim;
      st = hap_trace_complete(t, &ev);
    }
  }
  return finish_trace(o, t, st, lw->plan->strategy, err);
}

/* The timed iteration whose time is the median (--iters >= 1; the first timed one when out of
 * memory). */
static int median_iteration(const opts *o, const double *iter_s) {
  int pick = o->warmup;
  double sorted[64], *v = o->iters <= 64 ? sorted : malloc((size_t)o->iters * sizeof *v);
  if (v == NULL)
    return pick;
  memcpy(v, iter_s + o->warmup, (size_t)o->iters * sizeof *v);
  double med = quantile(v, o->iters, 0.5);
  if (v != sorted)
    free(v);
  for (int i = o->warmup; i < o->warmup + o->iters; i++)
    if (iter_s[i] == med)
      pick = i;
  return pick;
}

/* What the measured loop runs: an ordinary plan's runner (with its task times) or a pipeline's
 * (with its op times). */
typedef struct under_test {
  hap_run *run;
  hap_pipe_run *pipe;
  const hap_graph *g;  /* run: the graph (--dump-grads) */
  double *start, *end; /* run: [iterations][nt] task times; pipe: [iterations][nt] op times */
  double *begin;       /* [iterations]: when each began on this rank's clock, s (may be NULL) */
  size_t nt;
  double staging; /* run: this rank's mean staging per timed iteration, s */
} under_test;

/* --dump-grads: the first iteration's loss and every trainable parameter's gradient, gathered
 * onto rank 0 (collective) and written there. */
static hap_status dump_grads(const opts *o, hap_comm *comm, const hap_graph *g, hap_run *run,
                             double loss, hap_err *err) {
  float **grads = calloc((size_t)g->n_tensors, sizeof *grads);
  hap_status st = grads != NULL ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "out of memory");
  for (int32_t t = 0; st == HAP_OK && t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (tn->kind != HAP_TENSOR_PARAMETER || !tn->requires_grad)
      continue;
    int64_t n = 0;
    (void)hap_shape_numel(&tn->shape, &n);
    if (comm->rank == 0 && (grads[t] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float))) == NULL)
      st = hap_err_set(err, HAP_ENOMEM, "out of memory");
    if (st == HAP_OK)
      st = hap_run_gather_grad(run, t, grads[t], err);
  }
  if (st == HAP_OK && comm->rank == 0)
    st = hap_grads_write(o->dump_grads, g, loss, (const float *const *)grads, err);
  for (int32_t t = 0; grads != NULL && t < g->n_tensors; t++)
    free(grads[t]);
  free(grads);
  return st;
}

/* The warm-up and timed iterations: each between barriers, its slowest rank's time into iter_s,
 * its loss into losses, and --check after each until it is decided. A failing iteration or check
 * ends every rank (the others may wait in a collective). */
static hap_status iterate(const opts *o, hap_comm *comm, under_test *u, hap_checker *checker,
                          hap_check_result *res, double *iter_s, double *losses, bool *check_ok,
                          hap_err *err) {
  int me = comm->rank;
  bool check_done = false;
  for (int i = 0; i < o->warmup + o->iters; i++) {
    hap_watchdog_arm();
    HAP_TRY(comm->ops->barrier(comm, err));
    double t0 = hap_clock_s();
    if (u->begin != NULL)
      u->begin[i] = t0;
    hap_status st = u->pipe != NULL ? hap_pipe_run_iteration(u->pipe, err)
                                    : hap_run_iteration(u->run, u->start + (size_t)i * u->nt,
                                                        u->end + (size_t)i * u->nt, err);
    double local = hap_clock_s() - t0, slowest = 0;
    if (st != HAP_OK && u->pipe != NULL) {
      const char *where = hap_pipe_run_failed(u->pipe);
      hap_report(prog, me, "%s: %s", where ? where : "pipeline", err->msg);
      comm->ops->abort(comm, 1);
    } else if (st != HAP_OK) {
      const char *task = hap_run_failed_task(u->run);
      hap_report(prog, me, "task '%s': %s", task ? task : "?", err->msg);
      comm->ops->abort(comm, 1);
    }
    hap_watchdog_disarm();
    HAP_TRY(comm->ops->all_reduce(comm, &local, &slowest, 1, HAP_F64, HAP_REDUCE_MAX, err));
    iter_s[i] = slowest;
    if (u->pipe != NULL && u->start != NULL) { /* the ops' times, for the trace */
      int32_t n = 0;
      const double *ends = NULL, *starts = hap_pipe_run_op_times(u->pipe, &ends, &n);
      memcpy(u->start + (size_t)i * u->nt, starts, u->nt * sizeof *starts);
      memcpy(u->end + (size_t)i * u->nt, ends, u->nt * sizeof *ends);
    }
    /* outside the timed part */
    HAP_TRY(u->pipe != NULL ? hap_pipe_run_loss(u->pipe, &losses[i], err)
                            : hap_run_loss(u->run, &losses[i], err));
    if (u->run != NULL && i >= o->warmup)
      u->staging += hap_run_staging_s(u->run) / o->iters;
    if (i == 0 && o->dump_grads != NULL &&
        dump_grads(o, comm, u->g, u->run, losses[0], err) != HAP_OK) {
      hap_report(prog, me, "--dump-grads: %s", err->msg);
      comm->ops->abort(comm, 1);
    }
    if (o->check && *check_ok && !check_done) {
      hap_watchdog_arm();
      if (check(checker, u->run, u->pipe, comm, res, check_ok, &check_done, err) != HAP_OK) {
        hap_report(prog, me, "--check: %s", err->msg);
        comm->ops->abort(comm, 1);
      }
      hap_watchdog_disarm();
    }
  }
  return HAP_OK;
}

/* --task-times: every rank's task times of every iteration, gathered onto rank 0 (collective)
 * and written there as CSV (atomic), s from that rank's iteration start; a task that did not run
 * in an iteration (start and end 0) has no line. `waits`: hap_run_task_waits. */
static hap_status write_task_times(const opts *o, hap_comm *comm, const hap_lowered *lw,
                                   const under_test *u, int total, hap_err *err) {
  size_t n = u->nt * (size_t)total, size = (size_t)comm->size;
  double *starts = calloc(n * size, sizeof *starts), *ends = calloc(n * size, sizeof *ends);
  double *begins = calloc((size_t)total * size, sizeof *begins);
  hap_status st = starts && ends && begins ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "out of memory");
  if (st == HAP_OK)
    st = comm->ops->all_gather(comm, u->start, starts, (int64_t)(n * sizeof *starts), err);
  if (st == HAP_OK)
    st = comm->ops->all_gather(comm, u->end, ends, (int64_t)(n * sizeof *ends), err);
  if (st == HAP_OK)
    st = comm->ops->all_gather(comm, u->begin, begins, (int64_t)total * (int64_t)sizeof *begins,
                               err);
  hap_atomic_file af = {0};
  if (st == HAP_OK && comm->rank == 0 &&
      (st = hap_atomic_open(&af, o->task_times, err)) == HAP_OK) {
    fputs("rank,iteration,timed,task,name,kind,phase,waits,start_s,end_s\n", af.f);
    for (size_t r = 0; r < size; r++)
      for (int i = 0; i < total; i++)
        for (size_t t = 0; t < u->nt; t++) {
          size_t k = r * n + (size_t)i * u->nt + t;
          if (starts[k] == 0 && ends[k] == 0)
            continue;
          const hap_task *task = &lw->tasks[t];
          double b = begins[r * (size_t)total + (size_t)i];
          fprintf(af.f, "%zu,%d,%d,%zu,", r, i, i >= o->warmup, t);
          hap_csv_field(af.f, task->name);
          fprintf(af.f, ",%s,%s,%d,%.9f,%.9f\n", hap_task_kind_name(task->kind),
                  hap_task_phase_name(task->phase), (int)hap_run_task_waits(u->run, (int32_t)t),
                  starts[k] - b, ends[k] - b);
        }
    st = hap_atomic_commit(&af, err);
  }
  free(starts);
  free(ends);
  free(begins);
  return st;
}

/* --check fails closed: fewer optimizer steps than it compares (fp16 skipping) is a failure. */
static void check_steps(const opts *o, hap_comm *comm, hap_run_steps steps, bool *check_ok) {
  if (!o->check || !*check_ok || steps.taken >= HAP_CHECK_MIN_ITERATIONS)
    return;
  if (comm->rank == 0)
    printf("check: FAILED: only %lld of %d iterations took an optimizer step (fp16's loss scale "
           "overflowed in %lld; now %g): the updates were not compared, run more iterations "
           "(--iters)\n",
           (long long)steps.taken, o->warmup + o->iters, (long long)steps.skipped,
           steps.loss_scale);
  *check_ok = false;
}

/* ---- main flow ------------------------------------------------------------------------- */

/* The runner's options from the command line; --backend cuda: the GPU's kernel table in *cuda
 * (which must outlive the runner). */
static hap_run_options run_options(const opts *o, int me, hap_cuda_kernels *ck,
                                   hap_run_kernels *cuda) {
  hap_run_options ro = {.seed = o->seed,
                        .lr = o->lr,
                        .speed = o->n_speeds > 0 ? o->speeds[me] : 1,
                        .current_task = &current_task,
                        .on_task = rearm,
                        .overlap_bucket_bytes = (int64_t)(o->overlap_mb * 1048576.0)};
  *cuda = (hap_run_kernels){"cuda", ck, hap_cuda_staged_forward, hap_cuda_staged_backward};
  if (o->cuda)
    ro.kernels = cuda;
  return ro;
}

/* --backend cuda: this rank's GPU, its GEMMs in the policy's compute format. Every rank opens its
 * own; when any fails, the lowest failing rank says why (one line) and every rank returns 1. */
static int open_cuda(hap_comm *comm, const hap_train_policy *pol, hap_cuda_kernels **ck) {
  hap_err err = {0};
  int count = 0;
  hap_status st = hap_gpu_query(NULL, 0, &count, &err);
  if (st == HAP_OK)
    st = hap_cuda_kernels_open(hap_local_rank(comm->rank) % count, ck, &err);
  if (st == HAP_OK)
    st = hap_cuda_kernels_set_gemm(*ck, hap_policy_compute_dtype(pol), &err);
  int32_t first = hap_harness_first_failure(comm, st, &err);
  if (first >= comm->size)
    return 0;
  if (comm->rank == first && st == HAP_ENOGPU)
    hap_report(prog, -1, "--backend cuda: no CUDA device (%s)", err.msg);
  else if (comm->rank == first)
    hap_report(prog, comm->rank, "--backend cuda: %s", err.msg);
  hap_cuda_kernels_close(*ck);
  *ck = NULL;
  return 1;
}

/* Refused before any rank starts work: a policy the runner does not run (either backend: the
 * policy's work outside the kernels is the runner's, on the host). `replicas` is the plan's
 * (2-D plans > 1), `pipelined` whether it has stages. */
static hap_status refuse_policy(const opts *o, const hap_train_policy *pol, int32_t replicas,
                                bool pipelined, hap_err *err) {
  if (pol->zero == 0 || (replicas <= 1 && !pipelined))
    return HAP_OK;
  char text[160];
  hap_policy_brief(pol, text, sizeof text);
  return hap_err_set(
      err, HAP_EUNSUPPORTED,
      "%s: the plan trains with --policy %s; hap-run shards optimizer state (zero=%d) "
      "on plans of one data-parallel group only so far, and this plan %s",
      o->plan, text, (int)pol->zero, pipelined ? "is pipelined" : "has replicas (a 2-D plan)");
}

/* --sim-cluster: the same devices as `c`, measured again (*out NULL without it). */
static hap_status open_sim_cluster(const opts *o, const hap_cluster *c, hap_cluster **out,
                                   hap_err *err) {
  *out = NULL;
  if (o->sim_cluster == NULL)
    return HAP_OK;
  hap_cluster *c2 = NULL;
  HAP_TRY(hap_cluster_open(o->sim_cluster, &c2, err));
  bool same = c2->n_devices == c->n_devices;
  for (int32_t d = 0; same && d < c->n_devices; d++)
    same = strcmp(c2->devices[d].name, c->devices[d].name) == 0;
  if (!same) {
    hap_cluster_destroy(c2);
    return hap_err_set(err, HAP_EINVAL,
                       "--sim-cluster %s: its devices differ from those of %s (the plan's)",
                       o->sim_cluster, o->cluster);
  }
  *out = c2;
  return HAP_OK;
}

/* Collective: did a step (set-up, or rank 0's output) fail on any rank? The lowest failing rank
 * says why (one line). */
static bool said_by_first(hap_comm *comm, hap_status st, const hap_err *err) {
  hap_err agreed = *err;
  int32_t first = hap_harness_first_failure(comm, st, &agreed);
  if (first >= comm->size)
    return false;
  if (comm->rank == first)
    hap_report(prog, comm->rank, "%s", agreed.msg);
  hap_watchdog_quiet(); /* a rank mpirun stops while it exits has nothing to add */
  return true;
}

static int run(const opts *o, hap_comm *comm, hap_graph *g, hap_cluster *c, hap_plan *plan) {
  hap_err err = {0};
  hap_lowered *lw = NULL;
  hap_plan_sim *ps = NULL;
  hap_run *run = NULL;
  hap_dev *dev = NULL;
  hap_cuda_kernels *ck = NULL;
  hap_checker *checker = NULL;
  hap_check_result *check_res = NULL;
  double *start = NULL, *end = NULL, *begin = NULL, *all_start = NULL, *all_end = NULL;
  double *iter_s = NULL;
  double *losses = NULL; /* every iteration's loss, warm-up included */
  double staging = 0;    /* this rank's mean staging per timed iteration, s */
  int rc = 1, me = comm->rank;
  hap_status st = HAP_OK;
  if ((st = refuse_policy(o, &plan->policy, plan->replicas, false, &err)) != HAP_OK)
    goto out;
  if (o->cuda && open_cuda(comm, &plan->policy, &ck) != 0)
    goto out; /* said by the lowest failing rank */
  if ((st = hap_lower(plan, g, &lw, &err)) != HAP_OK)
    goto out;
  if (o->n_speeds > 0 && o->n_speeds != comm->size) {
    st = hap_err_set(&err, HAP_EINVAL, "--emulate-speed: %d speeds for %d ranks", o->n_speeds,
                     comm->size);
    goto out;
  }
  hap_cluster *sim_c = NULL;
  if ((st = open_sim_cluster(o, c, &sim_c, &err)) != HAP_OK)
    goto out;
  if (sim_c != NULL) {
    hap_cluster_destroy(c);
    c = sim_c;
  }
  /* the cpu device: its kernels' thread count (the profile was measured with the same) */
  if ((st = hap_dev_cpu_open(o->threads, o->n_speeds > 0 ? o->speeds[me] : 1, &dev, &err)) !=
      HAP_OK)
    goto out;
  hap_plan_sim_options so = {.serial = true}; /* cpu + mpi: collectives block the rank */
  if ((st = hap_plan_sim_run(lw, c, &so, &ps, &err)) != HAP_OK)
    goto out;
  hap_watchdog_set_phase_fn(task_phase, lw);
  hap_run_kernels cuda_kernels;
  hap_run_options ro = run_options(o, me, ck, &cuda_kernels);
  if ((st = hap_run_create(lw, g, comm, &ro, &run, &err)) != HAP_OK)
    goto out;
  char fault[256];
  if (me == 0 && hap_run_fault(run, fault, sizeof fault))
    fprintf(stderr,
            "%s: HAP_FAULT: injecting %s in every iteration (a test switch: unset "
            "HAP_FAULT for a real run)\n",
            prog, fault);
  size_t nt = (size_t)lw->n_tasks;
  int total = o->warmup + o->iters;
  start = calloc(nt * (size_t)total, sizeof *start); /* a task that does not run: 0, 0 */
  end = calloc(nt * (size_t)total, sizeof *end);
  begin = calloc((size_t)total, sizeof *begin);
  iter_s = malloc((size_t)total * sizeof *iter_s);
  losses = malloc((size_t)total * sizeof *losses);
  if (!start || !end || !begin || !iter_s || !losses) {
    st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  bool check_ok = true;
  if (o->check &&
      (st = hap_checker_create(g, comm, o->seed, o->lr, &plan->policy, &checker, &err)) != HAP_OK)
    goto out;
  if (o->check && (check_res = calloc(1, sizeof *check_res)) == NULL) {
    st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  under_test u = {.run = run, .g = g, .start = start, .end = end, .begin = begin, .nt = nt};
  if ((st = iterate(o, comm, &u, checker, check_res, iter_s, losses, &check_ok, &err)) != HAP_OK)
    goto out;
  /* only rank 0 writes; every rank ends when it could not (said once, st stays HAP_OK) */
  if (o->task_times != NULL &&
      said_by_first(comm, write_task_times(o, comm, lw, &u, total, &err), &err))
    goto out;
  staging = u.staging;
  /* the timed iteration closest to the median, from every rank, for the report and the trace */
  int pick = median_iteration(o, iter_s);
  all_start = calloc(nt * (size_t)comm->size, sizeof *all_start);
  all_end = calloc(nt * (size_t)comm->size, sizeof *all_end);
  if (!all_start || !all_end) {
    st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  if ((st = comm->ops->all_gather(comm, start + (size_t)pick * nt, all_start,
                                  (int64_t)(nt * sizeof *start), &err)) != HAP_OK ||
      (st = comm->ops->all_gather(comm, end + (size_t)pick * nt, all_end,
                                  (int64_t)(nt * sizeof *end), &err)) != HAP_OK)
    goto out;
  double staging_max = 0;
  if ((st = comm->ops->all_reduce(comm, &staging, &staging_max, 1, HAP_F64, HAP_REDUCE_MAX,
                                  &err)) != HAP_OK)
    goto out;
  if (me == 0 && o->iters > 0) {
    double *meas = calloc(nt * (size_t)comm->size, sizeof *meas);
    if (meas != NULL) {
      for (size_t i = 0; i < nt * (size_t)comm->size; i++)
        meas[i] = all_end[i] - all_start[i];
      int64_t buckets = hap_run_overlap_buckets(run);
      report(o, ps, iter_s + o->warmup, o->iters, meas, comm->size, staging_max, losses, total,
             hap_run_steps_taken(run), buckets < 0 ? -1 : (double)buckets / total);
      free(meas);
    }
    if (o->trace != NULL &&
        (st = write_trace(o, ps, all_start, all_end, comm->size, &err)) != HAP_OK)
      goto out;
  }
  hap_run_steps steps = hap_run_steps_taken(run);
  check_steps(o, comm, steps, &check_ok);
  rc = check_ok ? 0 : 1;
out:
  if (st != HAP_OK && rc != 0)
    hap_report(prog, me, "%s", err.msg);
  hap_watchdog_set_phase_fn(task_phase, NULL); /* lw goes */
  free(start);
  free(end);
  free(begin);
  free(all_start);
  free(all_end);
  free(iter_s);
  free(losses);
  free(check_res);
  hap_checker_destroy(checker);
  hap_run_destroy(run);
  hap_cuda_kernels_close(ck);
  hap_dev_close(dev);
  hap_plan_sim_destroy(ps);
  hap_lowered_destroy(lw);
  hap_plan_destroy(plan);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return rc;
}

/* ---- pipelined plans (run/pipeline_run.h) ------------------------------------------------- */

static const hap_pipe_lowered *running_pw; /* the task_phase context of a pipelined run */
static const hap_pipe_run *running_pr;

/* Read in the signal handler: the running stage's task. */
static const char *pipe_task_phase(const void *ctx) {
  (void)ctx;
  const hap_pipe_lowered *pw = running_pw;
  if (pw == NULL || running_pr == NULL)
    return "(between tasks)";
  int32_t k = hap_pipe_run_stage_running(running_pr);
  int t = (int)current_task;
  if (k < 0 || k >= pw->n_stages || t < 0 || t >= pw->stages[k].lw->n_tasks)
    return "(between tasks)";
  return pw->stages[k].lw->tasks[t].name;
}

/* Rank 0: the pipelined run's measured iterations against the simulated one (iter_s is sorted). */
static void report_pipeline(const opts *o, const hap_pipeline *pl, const hap_pipe_plan_sim *ps,
                            const char *cluster_name, double *iter_s, int n_iter,
                            const double *losses, int n_losses, hap_run_steps steps,
                            const double *busy_s) {
  run_summary sum =
      summarize(iter_s, n_iter, ps->iteration_s, losses, n_losses, steps, &pl->policy);
  if (o->format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_object(&w);
    json_timing(&w, &sum);
    hap_jw_key(&w, "simulated_bubble");
    hap_jw_double(&w, ps->mean_bubble);
    hap_jw_key(&w, "stages");
    hap_jw_int(&w, pl->n_stages);
    hap_jw_key(&w, "groups");
    hap_jw_int(&w, pl->n_groups);
    hap_jw_key(&w, "schedule");
    hap_jw_str(&w, hap_pipe_schedule_name(pl->schedule));
    hap_jw_key(&w, "micro_batches");
    hap_jw_int(&w, pl->policy.micro_batches);
    json_backend(&w, o->cuda);
    hap_jw_key(&w, "measured_busy_s"); /* per rank, the last iteration's ops (tails excluded) */
    hap_jw_begin_array(&w);
    for (int32_t d = 0; d < ps->n_devices; d++)
      hap_jw_double(&w, busy_s[d]);
    hap_jw_end_array(&w);
    hap_jw_key(&w, "simulated_busy_s");
    hap_jw_begin_array(&w);
    for (int32_t d = 0; d < ps->n_devices; d++)
      hap_jw_double(&w, ps->busy_s[d]);
    hap_jw_end_array(&w);
    json_training(&w, &sum);
    hap_jw_end_object(&w);
    hap_jw_finish(&w);
    return;
  }
  printf("pipeline    %d stages on %d device groups, %s, %d micro-batches\n", pl->n_stages,
         pl->n_groups, hap_pipe_schedule_name(pl->schedule), pl->policy.micro_batches);
  if (o->overlap_mb > 0)
    printf("overlap     off for this plan: --overlap applies to float32 plans of one "
           "micro-batch, without replicas or pipeline stages\n");
  print_iteration(&sum);
  printf("simulated   %.3f ms (%s, every device on one engine; bubble %.1f%%)  error %+.1f%%\n",
         1e3 * sum.sim, cluster_name, 100 * ps->mean_bubble, 100 * sum.e);
  printf("busy        per rank in ops, ms (last iteration; simulated):");
  for (int32_t d = 0; d < ps->n_devices && d < 16; d++)
    printf(" %.2f (%.2f)", 1e3 * busy_s[d], 1e3 * ps->busy_s[d]);
  printf("%s\n", ps->n_devices > 16 ? " ..." : "");
  print_training(&sum);
  print_blas(o->cuda);
}

/* Rank 0: the simulated timeline of every device (hap_pipe_plan_sim's, task by task) and then
 * each rank's measured ops of the median iteration (start[r * n + k], op k of its group's order,
 * the last entry its tails; s after the rank's iteration start). */
static hap_status write_pipeline_trace(const opts *o, hap_pipe_lowered *pw, const double *start,
                                       const double *end, size_t n, hap_err *err) {
  hap_trace *t = NULL;
  HAP_TRY(hap_trace_open(o->trace, prog, &t, err));
  hap_pipe_plan_sim_options so = {.serial = true, .trace = t};
  hap_pipe_plan_sim *ps = NULL;
  hap_status st = hap_pipe_plan_sim_run(pw, &so, &ps, err);
  hap_pipe_plan_sim_destroy(ps);
  const hap_pipeline *pl = pw->pipeline;
  for (int32_t r = 0; r < pl->n_devices && st == HAP_OK; r++) {
    st = hap_trace_rank(t, HAP_TRACE_MEASURED, r, pw->cluster->devices[r].name);
    int32_t g = 0;
    for (int32_t gi = 0; gi < pl->n_groups; gi++) { /* the group holding device r */
      int32_t nd;
      const int32_t *dev = hap_pipeline_group(pl, gi, &nd);
      for (int32_t i = 0; i < nd; i++)
        g = dev[i] == r ? gi : g;
    }
    for (size_t k = 0; k < n && st == HAP_OK; k++) {
      char name[64];
      if (k + 1 < n) {
        hap_pipe_op op = hap_pipe_order_op(pw->order, g, (int32_t)k);
        snprintf(name, sizeof name, "stage %d %s micro-batch %d",
                 (int)(op.chunk * pl->n_groups + g), op.backward ? "bwd" : "fwd", (int)op.micro);
      } else {
        snprintf(name, sizeof name, "tails (gradient sync, updates)");
      }
      hap_trace_event ev = HAP_TRACE_EVENT_INIT;
      ev.name = name;
      ev.cat = k + 1 < n ? "op" : "tail";
      ev.pid = hap_trace_pid(HAP_TRACE_MEASURED, r);
      ev.tid = HAP_TRACE_LANE_COMPUTE;
      ev.ts_ns = (int64_t)llround(start[(size_t)r * n + k] * 1e9);
      ev.dur_ns = (int64_t)llround(end[(size_t)r * n + k] * 1e9) - ev.ts_ns;
      st = hap_trace_complete(t, &ev);
    }
  }
  return finish_trace(o, t, st, pl->strategy, err);
}

/* A stage whose memory (its program's, with the schedule's in-flight micro-batches) is above its
 * device's is refused before any work. */
static hap_status refuse_overflow(const opts *o, const hap_pipe_lowered *pw, hap_err *err) {
  int32_t k = 0, d = 0;
  if (!hap_pipe_first_overflow(pw, 0, &k, &d))
    return HAP_OK;
  const hap_pipeline *pl = pw->pipeline;
  int32_t n;
  int32_t dev = hap_pipeline_group(pl, pl->stages[k].group, &n)[d];
  return hap_err_set(err, HAP_EINVAL,
                     "%s: stages[%d] needs %.3f MiB on device %d ('%s'), which has %.3f MiB (%d "
                     "micro-batches in flight under %s): use more stages or micro-batches, "
                     "recomputation, or devices with more memory",
                     o->plan, k, hap_pipe_stage_memory(pw, k, d) / 1048576.0, dev,
                     pw->cluster->devices[dev].name,
                     pw->cluster->devices[dev].memory_bytes / 1048576.0,
                     hap_pipe_order_in_flight(pw->order, pl->stages[k].group),
                     hap_pipe_schedule_name(pl->schedule));
}

static int run_pipeline(const opts *o, hap_comm *comm, hap_graph *g, hap_cluster *c,
                        hap_pipeline *pl) {
  hap_err err = {0};
  hap_pipe_lowered *pw = NULL, *sim_pw = NULL;
  hap_cluster *sim_c = NULL;
  hap_pipe_plan_sim *ps = NULL;
  hap_pipe_run *pr = NULL;
  hap_dev *dev = NULL;
  hap_cuda_kernels *ck = NULL;
  hap_checker *checker = NULL;
  hap_check_result *check_res = NULL;
  double *iter_s = NULL, *losses = NULL, *busy_s = NULL;
  double *op_start = NULL, *op_end = NULL, *all_start = NULL, *all_end = NULL;
  int rc = 1, me = comm->rank, total = o->warmup + o->iters;
  /* set-up, refused before any work: every rank agrees, the lowest failing one says why */
  hap_status st = refuse_policy(o, &pl->policy, 1, true, &err);
  if (st == HAP_OK && comm->size != pl->n_devices)
    st = hap_err_set(&err, HAP_EINVAL,
                     "%s: the pipelined plan is for %d devices (%d stages on %d groups) but %d "
                     "ranks are running (start it with mpirun -np %d)",
                     o->plan, pl->n_devices, pl->n_stages, pl->n_groups, comm->size, pl->n_devices);
  if (st == HAP_OK && o->n_speeds > 0 && o->n_speeds != comm->size)
    st = hap_err_set(&err, HAP_EINVAL, "--emulate-speed: %d speeds for %d ranks", o->n_speeds,
                     comm->size);
  if (st == HAP_OK && (st = hap_pipe_lower(pl, g, c, &pw, &err)) == HAP_OK &&
      (st = open_sim_cluster(o, c, &sim_c, &err)) == HAP_OK && sim_c != NULL)
    st = hap_pipe_lower(pl, g, sim_c, &sim_pw, &err);
  if (st == HAP_OK)
    st = refuse_overflow(o, pw, &err);
  if (st == HAP_OK)
    st = hap_dev_cpu_open(o->threads, o->n_speeds > 0 ? o->speeds[me] : 1, &dev, &err);
  hap_pipe_plan_sim_options so = {.serial = true}; /* cpu + mpi: communication blocks the rank */
  if (st == HAP_OK)
    st = hap_pipe_plan_sim_run(sim_pw != NULL ? sim_pw : pw, &so, &ps, &err);
  if (said_by_first(comm, st, &err) || ps == NULL)
    goto out_quiet;
  if (o->cuda && open_cuda(comm, &pl->policy, &ck) != 0)
    goto out_quiet;
  hap_run_kernels cuda_kernels;
  hap_run_options ro = run_options(o, me, ck, &cuda_kernels);
  if (said_by_first(comm, hap_pipe_run_create(pw, comm, &ro, &pr, &err), &err) || pr == NULL)
    goto out_quiet;
  running_pw = pw;
  running_pr = pr;
  hap_watchdog_set_phase_fn(pipe_task_phase, NULL);
  iter_s = malloc((size_t)total * sizeof *iter_s);
  losses = malloc((size_t)total * sizeof *losses);
  if (!iter_s || !losses) {
    st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  bool check_ok = true;
  if (o->check &&
      ((st = hap_checker_create(g, comm, o->seed, o->lr, &pl->policy, &checker, &err)) != HAP_OK ||
       (check_res = calloc(1, sizeof *check_res)) == NULL)) {
    if (st == HAP_OK)
      st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  int32_t n_ops = 0;
  const double *ignored = NULL;
  (void)hap_pipe_run_op_times(pr, &ignored, &n_ops);
  size_t nt = (size_t)n_ops;
  if ((op_start = malloc(nt * (size_t)total * sizeof *op_start)) == NULL ||
      (op_end = malloc(nt * (size_t)total * sizeof *op_end)) == NULL ||
      (all_start = malloc(nt * (size_t)comm->size * sizeof *all_start)) == NULL ||
      (all_end = malloc(nt * (size_t)comm->size * sizeof *all_end)) == NULL) {
    st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  under_test u = {.pipe = pr, .start = op_start, .end = op_end, .nt = nt};
  if ((st = iterate(o, comm, &u, checker, check_res, iter_s, losses, &check_ok, &err)) != HAP_OK)
    goto out;
  hap_run_steps steps = hap_pipe_run_steps_taken(pr);
  int pick = median_iteration(o, iter_s); /* before the report sorts the times */
  double busy = hap_pipe_run_busy_s(pr);
  if ((busy_s = malloc((size_t)comm->size * sizeof *busy_s)) == NULL)
    st = hap_err_set(&err, HAP_ENOMEM, "out of memory");
  if (st != HAP_OK ||
      (st = comm->ops->all_gather(comm, &busy, busy_s, (int64_t)sizeof busy, &err)) != HAP_OK)
    goto out;
  if (me == 0 && o->iters > 0)
    report_pipeline(o, pl, ps, (sim_c != NULL ? sim_c : c)->name, iter_s + o->warmup, o->iters,
                    losses, total, steps, busy_s);
  check_steps(o, comm, steps, &check_ok);
  if (o->trace != NULL &&
      ((st = comm->ops->all_gather(comm, op_start + (size_t)pick * nt, all_start,
                                   (int64_t)(nt * sizeof *all_start), &err)) != HAP_OK ||
       (st = comm->ops->all_gather(comm, op_end + (size_t)pick * nt, all_end,
                                   (int64_t)(nt * sizeof *all_end), &err)) != HAP_OK))
    goto out;
  if (o->trace != NULL && me == 0 &&
      (st = write_pipeline_trace(o, sim_pw != NULL ? sim_pw : pw, all_start, all_end, nt, &err)) !=
          HAP_OK)
    goto out;
  rc = check_ok ? 0 : 1;
out:
  if (st != HAP_OK && rc != 0)
    hap_report(prog, me, "%s", err.msg);
out_quiet:
  hap_watchdog_set_phase_fn(task_phase, NULL);
  running_pw = NULL;
  running_pr = NULL;
  free(op_start);
  free(op_end);
  free(all_start);
  free(all_end);
  free(busy_s);
  free(iter_s);
  free(losses);
  free(check_res);
  hap_checker_destroy(checker);
  hap_pipe_run_destroy(pr);
  hap_cuda_kernels_close(ck);
  hap_dev_close(dev);
  hap_pipe_plan_sim_destroy(ps);
  hap_pipe_lowered_destroy(sim_pw);
  hap_pipe_lowered_destroy(pw);
  hap_cluster_destroy(sim_c);
  hap_pipeline_destroy(pl);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return rc;
}

/* --weights: every parameter, buffer and input of g from FILE, made the initial values
 * (run/init.h's hap_init_set_values) of every run after. */
static hap_status use_weights(const char *file, const hap_graph *g, hap_tensor_set **set,
                              hap_init_value **values, hap_err *err) {
  HAP_TRY(hap_weights_read(file, g, set, err));
  *values = calloc((size_t)(*set)->n + 1, sizeof **values);
  if (*values == NULL)
    return hap_err_set(err, HAP_ENOMEM, "--weights %s: out of memory", file);
  for (int32_t i = 0; i < (*set)->n; i++) {
    const hap_named_tensor *t = &(*set)->t[i];
    (*values)[i] = (hap_init_value){t->name, t->dtype, t->shape, t->data};
  }
  hap_init_set_values(*values, (*set)->n);
  return HAP_OK;
}

/* Load the model, the cluster and the plan, and run it: a one-stage plan (hap-plan 1.x, or 2.x
 * with one stage over every device) as an SPMD program, else as a pipeline. */
static int start(opts *o, hap_comm *comm) {
  hap_err err = {0};
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_pipeline *pl = NULL;
  hap_plan_specs specs = {0};
  hap_status st = o->plan != NULL ? hap_plan_default_specs(o->plan, &o->model, &o->cluster,
                                                           "--model", "--cluster", &specs, &err)
                                  : HAP_OK;
  /* an unwritable --trace is refused now, not after the whole run (rank 0 writes it) */
  if (st == HAP_OK && o->trace != NULL && comm->rank == 0)
    st = hap_atomic_probe(o->trace, &err);
  if (st == HAP_OK && o->report != NULL && comm->rank == 0)
    st = hap_atomic_probe(o->report, &err);
  if (st == HAP_OK && o->dump_grads != NULL && comm->rank == 0)
    st = hap_atomic_probe(o->dump_grads, &err);
  if (st == HAP_OK && o->task_times != NULL && comm->rank == 0)
    st = hap_atomic_probe(o->task_times, &err);
  hap_tensor_set *weights = NULL;
  hap_init_value *values = NULL;
  if (st == HAP_OK && (st = hap_model_load(o->model, &g, &err)) == HAP_OK &&
      (st = hap_cluster_open(o->cluster, &c, &err)) == HAP_OK)
    st = hap_pipeline_read_file(o->plan, g, c, &pl, &err);
  if (st == HAP_OK && o->weights != NULL)
    st = use_weights(o->weights, g, &weights, &values, &err);
  if (st == HAP_OK && o->dump_grads != NULL && !hap_pipeline_is_flat(pl))
    st = hap_err_set(&err, HAP_EUNSUPPORTED,
                     "--dump-grads: %s is a pipelined plan; gradients are dumped from one-stage "
                     "plans only so far",
                     o->plan);
  if (st == HAP_OK && o->task_times != NULL && !hap_pipeline_is_flat(pl))
    st = hap_err_set(&err, HAP_EUNSUPPORTED,
                     "--task-times: %s is a pipelined plan; task times are written for one-stage "
                     "plans only so far (its --trace has every op of the median iteration)",
                     o->plan);
  int rc = 1;
  if (said_by_first(comm, st, &err) || pl == NULL) {
    hap_pipeline_destroy(pl);
    hap_cluster_destroy(c);
    hap_graph_destroy(g);
  } else if (!hap_pipeline_is_flat(pl)) {
    rc = run_pipeline(o, comm, g, c, pl);
  } else {
    hap_plan *plan = pl->stages[0].plan;
    pl->stages[0].plan = NULL;
    hap_pipeline_destroy(pl);
    rc = run(o, comm, g, c, plan);
  }
  hap_init_set_values(NULL, 0);
  free(values);
  hap_tensor_set_destroy(weights);
  o->model = o->model == specs.model ? NULL : o->model; /* they pointed into specs */
  o->cluster = o->cluster == specs.cluster ? NULL : o->cluster;
  hap_plan_specs_free(&specs);
  return rc;
}

/* start(), then for --report rank 0 renders the trace the run wrote: --trace's, or a temporary
 * one next to the page, removed after. The page is written when the run succeeded. */
static int start_and_report(opts *o, hap_comm *comm) {
  char tmp[4200];
  bool temp = o->report != NULL && o->trace == NULL;
  if (temp) {
    snprintf(tmp, sizeof tmp, "%s.trace.%ld.json", o->report, (long)getpid());
    o->trace = tmp;
  }
  int rc = start(o, comm);
  if (o->report != NULL && comm->rank == 0 && rc == 0) {
    hap_err err = {0};
    char *json = NULL;
    size_t len = 0;
    if (hap_read_file(o->trace, &json, &len, &err) != HAP_OK ||
        hap_report_write_json(json, len, temp ? prog : o->trace, HAP_REPORT_RUN, o->report, &err) !=
            HAP_OK) {
      hap_report(prog, comm->rank, "--report: %s", err.msg);
      rc = 1;
    }
    free(json);
  }
  if (temp) {
    if (comm->rank == 0)
      unlink(tmp);
    o->trace = NULL;
  }
  return rc;
}

/* 0 ok, 2 usage error (printed by rank 0), -1 help/version printed. */
static int parse_args(int argc, char **argv, int rank, opts *o) {
  enum {
    OPT_CHECK = 256,
    OPT_SEED,
    OPT_LR,
    OPT_EMULATE,
    OPT_TIMEOUT,
    OPT_SIM_CLUSTER,
    OPT_THREADS,
    OPT_REPORT,
    OPT_WEIGHTS,
    OPT_DUMP_GRADS,
    OPT_OVERLAP,
    OPT_TASK_TIMES
  };
  static const struct option long_opts[] = {
      {"model", required_argument, NULL, 'm'},
      {"cluster", required_argument, NULL, 'c'},
      {"sim-cluster", required_argument, NULL, OPT_SIM_CLUSTER},
      {"backend", required_argument, NULL, 'b'},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"overlap", required_argument, NULL, OPT_OVERLAP},
      {"iters", required_argument, NULL, 'n'},
      {"warmup", required_argument, NULL, 'w'},
      {"trace", required_argument, NULL, 't'},
      {"report", required_argument, NULL, OPT_REPORT},
      {"task-times", required_argument, NULL, OPT_TASK_TIMES},
      {"check", no_argument, NULL, OPT_CHECK},
      {"seed", required_argument, NULL, OPT_SEED},
      {"weights", required_argument, NULL, OPT_WEIGHTS},
      {"dump-grads", required_argument, NULL, OPT_DUMP_GRADS},
      {"lr", required_argument, NULL, OPT_LR},
      {"emulate-speed", required_argument, NULL, OPT_EMULATE},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"format", required_argument, NULL, 'f'},
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  bool talk = rank == 0;
  opterr = talk;
  hap_err err = {0};
  int c;
  long long v;
  while ((c = getopt_long(argc, argv, "m:c:b:n:w:t:f:qhV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'm': o->model = optarg; break;
    case 'c': o->cluster = optarg; break;
    case OPT_SIM_CLUSTER: o->sim_cluster = optarg; break;
    case 'b':
      if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0)
        return hap_report_usage(prog, rank,
                                "--backend: unknown backend '%s' (expected cpu or cuda)", optarg);
      o->cuda = strcmp(optarg, "cuda") == 0;
      break;
    case 'n':
      if (hap_cli_parse_int("--iters", optarg, 1, 1000000, &v, &err) != HAP_OK)
        return hap_report_usage(prog, rank, "%s", err.msg);
      o->iters = (int)v;
      break;
    case 'w':
      if (hap_cli_parse_int("--warmup", optarg, 0, 1000000, &v, &err) != HAP_OK)
        return hap_report_usage(prog, rank, "%s", err.msg);
      o->warmup = (int)v;
      break;
    case 't': o->trace = optarg; break;
    case OPT_REPORT: o->report = optarg; break;
    case OPT_TASK_TIMES: o->task_times = optarg; break;
    case OPT_CHECK: o->check = true; break;
    case OPT_WEIGHTS: o->weights = optarg; break;
    case OPT_DUMP_GRADS: o->dump_grads = optarg; break;
    case OPT_THREADS:
      if (hap_cli_parse_int("--threads", optarg, 1, 1024, &v, &err) != HAP_OK)
        return hap_report_usage(prog, rank, "%s", err.msg);
      o->threads = (int)v;
      break;
    case OPT_OVERLAP:
      if (hap_cli_parse_double("--overlap", optarg, 0, 65536, &o->overlap_mb, NULL) != HAP_OK)
        return hap_report_usage(prog, rank,
                                "--overlap wants a bucket size in MiB, 0..65536, got '%s'", optarg);
      break;
    case OPT_SEED:
      if (hap_cli_parse_int("--seed", optarg, 0, INT32_MAX, &v, NULL) != HAP_OK)
        return hap_report_usage(prog, rank, "--seed wants a non-negative integer, got '%s'",
                                optarg);
      o->seed = (uint64_t)v;
      break;
    case OPT_LR:
      if (hap_cli_parse_double("--lr", optarg, 0, 1e6, &o->lr, NULL) != HAP_OK)
        return hap_report_usage(prog, rank, "--lr wants a number >= 0, got '%s'", optarg);
      break;
    case OPT_EMULATE:
      free(o->speeds);
      o->speeds = NULL;
      if (hap_emulate_parse(optarg, &o->speeds, &o->n_speeds, &err) != HAP_OK)
        return hap_report_usage(prog, rank, "%s", err.msg);
      break;
    case OPT_TIMEOUT:
      if (hap_cli_parse_double("--timeout", optarg, 1, 86400, &o->timeout_s, NULL) != HAP_OK)
        return hap_report_usage(prog, rank, "--timeout wants seconds in 1..86400, got '%s'",
                                optarg);
      break;
    case 'f':
      if (hap_format_select(optarg, HAP_FORMATS_TABLE_JSON, &o->format, &err) != HAP_OK)
        return hap_report_usage(prog, rank, "%s", err.msg);
      break;
    case 'q': o->quiet = true; break;
    case 'h':
      if (talk)
        usage(stdout);
      return -1;
    case 'V':
      if (talk)
        printf("hap-run %s\n", HAP_VERSION);
      return -1;
    default:
      if (talk)
        fprintf(stderr, "Try '%s --help'.\n", prog);
      return 2;
    }
  }
  const char *missing = optind >= argc      ? "missing PLAN (a hap-plan file from hap-synth -o)"
                        : optind < argc - 1 ? "more than one PLAN given"
                        : o->cuda && o->n_speeds > 0 ? "--emulate-speed is for --backend cpu"
                        : o->check && o->warmup + o->iters < HAP_CHECK_MIN_ITERATIONS
                            ? "--check compares after 2 iterations (an update in between): "
                              "--warmup + --iters must be at least 2"
                            : NULL;
  if (missing != NULL)
    return hap_report_usage(prog, rank, "%s", missing);
  o->plan = argv[optind];
  return 0;
}

int main(int argc, char **argv) {
  hap_comm *comm = NULL;
  if (hap_harness_mpi_init(prog, &argc, &argv, &comm) != HAP_OK)
    return 1;
  opts o = {.iters = 10, .warmup = 2, .threads = 1, .seed = 1, .lr = 1e-3, .timeout_s = 120};
  int rc = parse_args(argc, argv, comm->rank, &o);
  if (rc == 0) {
    hap_err err = {0};
    rc = 1;
    if (hap_watchdog_install(prog, comm->rank, o.timeout_s, &watchdog_text, &err) != HAP_OK)
      hap_report_err(prog, comm->rank, &err);
    else
      rc = start_and_report(&o, comm);
  } else if (rc < 0) {
    rc = 0;
  }
  free(o.speeds);
  fflush(stdout);
  hap_comm_mpi_finalize(comm);
  return rc;
}
