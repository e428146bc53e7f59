/* replay.c — kernel timings in execution order (replay.h). */
#include "profile/replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/clock.h"
#include "exec/comm_silent.h"
#include "plan/lower.h"
#include "profile/kernel_times.h"
#include "replay_colls.h"
#include "run/run.h"
#include "store/fit.h"

/* The distinct (op, shape key, direction) cases of this rank's compute tasks, and each task's. */
typedef struct cases {
  hap_kcase *v;        /* [n] */
  int32_t n;           /* distinct cases */
  int32_t *of;         /* [n_tasks]: the task's case, -1 for other tasks and empty shards */
  double *upd_bytes;   /* [n_tasks]: an update task's bytes as the simulator prices them (lower.h
                          hap_lowered_priced_work: the policy's optimizer pass), else 0 */
  double *upd_s_per_B; /* [max_iters]: each timed iteration's update time / update bytes, s/B */
  int32_t n_upd;
  int32_t *count;  /* [n]: tasks per case */
  double **sample; /* [n][count * iters], s */
  int32_t *filled; /* [n] */
} cases;

static void cases_free(cases *c) {
  for (int32_t i = 0; c->sample != NULL && i < c->n; i++)
    free(c->sample[i]);
  free(c->sample);
  free(c->v);
  free(c->of);
  free(c->upd_bytes);
  free(c->upd_s_per_B);
  free(c->count);
  free(c->filled);
}

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "kernel replay: out of memory");
}

static bool same_case(const hap_kcase *a, const hap_kcase *b) {
  return a->op == b->op && a->bwd == b->bwd &&
         hap_kernel_key(&a->io, a->bwd) == hap_kernel_key(&b->io, b->bwd);
}

/* io as an application computed in `format`: its float32 inputs and outputs in that dtype. */
static void computed_in(hap_op_io *io, hap_dtype format) {
  if (format == HAP_F32)
    return;
  for (int32_t i = 0; i < io->n_in; i++)
    if (io->in_dtype[i] == HAP_F32)
      io->in_dtype[i] = format;
  for (int32_t o = 0; o < io->n_out; o++)
    if (io->out_dtype[o] == HAP_F32)
      io->out_dtype[o] = format;
}

static bool empty_shard(const hap_kcase *kc) {
  for (int32_t i = 0; i < kc->io.n_in; i++)
    for (int32_t d = 0; d < kc->io.in[i].rank; d++)
      if (kc->io.in[i].dims[d] == 0)
        return true;
  return false;
}

static hap_status list_cases(hap_lowered *lw, int32_t dev, int32_t iters, cases *c, hap_err *err) {
  memset(c, 0, sizeof *c);
  size_t nt = (size_t)lw->n_tasks;
  c->v = calloc(nt + 1, sizeof *c->v);
  c->of = malloc((nt + 1) * sizeof *c->of);
  c->count = calloc(nt + 1, sizeof *c->count);
  c->upd_bytes = calloc(nt + 1, sizeof *c->upd_bytes);
  hap_task_work *w = malloc(sizeof *w);
  if (c->v == NULL || c->of == NULL || c->count == NULL || c->upd_bytes == NULL || w == NULL) {
    free(w);
    return oom(err);
  }
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    c->of[t] = -1;
    if (lw->tasks[t].kind == HAP_TASK_UPDATE) {
      hap_status st = hap_lowered_priced_work(lw, t, dev, w, err);
      if (st != HAP_OK) {
        free(w);
        return st;
      }
      c->upd_bytes[t] = w->bytes;
    }
    if (lw->tasks[t].kind != HAP_TASK_COMPUTE)
      continue;
    hap_kcase kc;
    hap_status st = hap_kcase_of_task(lw, t, dev, &kc, err);
    if (st != HAP_OK) {
      free(w);
      return st;
    }
    if (empty_shard(&kc))
      continue; /* the simulator prices it at 0 */
    int32_t i = 0;
    while (i < c->n && !same_case(&c->v[i], &kc))
      i++;
    if (i == c->n) {
      c->v[c->n] = kc;
      hap_kcase_fix(&c->v[c->n]);
      c->n++;
    }
    c->of[t] = i;
    c->count[i]++;
  }
  free(w);
  c->sample = calloc((size_t)c->n + 1, sizeof *c->sample);
  c->filled = calloc((size_t)c->n + 1, sizeof *c->filled);
  c->upd_s_per_B = malloc(((size_t)iters + 1) * sizeof *c->upd_s_per_B);
  if (c->sample == NULL || c->filled == NULL || c->upd_s_per_B == NULL)
    return oom(err);
  for (int32_t i = 0; i < c->n; i++)
    if ((c->sample[i] = malloc(((size_t)c->count[i] * (size_t)iters + 1) * sizeof(double))) == NULL)
      return oom(err);
  return HAP_OK;
}

/* The last iteration's times of the collectives the timer times: one sample of each key. */
static hap_status sample_colls(hap_coll_timer *x, const hap_run *run, hap_comm *world,
                               hap_err *err) {
  int32_t n = 0;
  const int32_t *task = hap_coll_timer_tasks(x, &n);
  double *mine = malloc(((size_t)n + 1) * sizeof *mine);
  if (mine == NULL)
    return oom(err);
  for (int32_t j = 0; j < n; j++) {
    double own_s = 0;
    int32_t runs = hap_run_task_runs(run, task[j], &own_s);
    mine[j] = runs > 0 ? fmax(own_s, 0) / runs : -1;
  }
  hap_status st = hap_coll_timer_sample(x, mine, world, err);
  free(mine);
  return st;
}

/* Run the warm-ups, then timed iterations until at least iters of them and min_s seconds (at
 * most max_iters), keeping their compute task durations. Every rank stops after the same
 * iteration (the silent communicator's barriers need them all): they agree after each one.
 * A sample is one run of the task's own kernels (hap_run_task_runs): a task run in every
 * micro-batch gives its runs' mean, without the recomputation nested in a backward task, as the
 * simulator multiplies a row by the task's repeats and adds its recompute_of forward task. */
static hap_status replay(hap_run *run, hap_comm *world, const hap_lowered *lw,
                         const hap_replay_options *o, cases *c, hap_coll_timer *colls,
                         hap_err *err) {
  hap_status st = HAP_OK;
  int32_t total = o->warmup + o->max_iters, all_done = 0;
  double timed_from = 0;
  for (int32_t i = 0; i < total && st == HAP_OK && !all_done; i++) {
    if (i == o->warmup)
      timed_from = hap_clock_s();
    st = hap_run_iteration(run, NULL, NULL, err);
    double upd_bytes = 0, upd_s = 0;
    for (int32_t t = 0; st == HAP_OK && i >= o->warmup && t < lw->n_tasks; t++) {
      if (c->of[t] < 0 && !(c->upd_bytes[t] > 0))
        continue;
      double own_s = 0;
      int32_t runs = hap_run_task_runs(run, t, &own_s);
      if (runs <= 0)
        continue;
      if (c->of[t] >= 0)
        c->sample[c->of[t]][c->filled[c->of[t]]++] = fmax(own_s, 0) / runs;
      if (c->upd_bytes[t] > 0) { /* the simulator prices each run at these bytes */
        upd_bytes += c->upd_bytes[t] * runs;
        upd_s += own_s;
      }
    }
    if (st == HAP_OK && i >= o->warmup && colls != NULL)
      st = sample_colls(colls, run, world, err);
    if (upd_s > 0 && upd_bytes > 0 && c->n_upd < o->max_iters)
      c->upd_s_per_B[c->n_upd++] = upd_s / upd_bytes;
    if (st == HAP_OK && o->progress != NULL)
      o->progress(o->progress_arg, i + 1, total);
    int32_t timed = i + 1 - o->warmup;
    int32_t done = timed >= o->iters && hap_clock_s() - timed_from >= o->min_s;
    if (st == HAP_OK)
      st = world->ops->all_reduce(world, &done, &all_done, 1, HAP_I32, HAP_REDUCE_MIN, err);
  }
  return st;
}

hap_status hap_replay_kernel_rows(const hap_plan *p, const hap_graph *g, hap_comm *world,
                                  const hap_replay_options *o, hap_profile_kernel **rows,
                                  int32_t *n_rows, double *update_Bps, hap_err *err) {
  hap_replay_options only_kernels = *o;
  only_kernels.collectives = false;
  return hap_replay_plan(p, g, world, &only_kernels, rows, n_rows, update_Bps, NULL, err);
}

hap_status hap_replay_plan(const hap_plan *p, const hap_graph *g, hap_comm *world,
                           const hap_replay_options *o, hap_profile_kernel **rows, int32_t *n_rows,
                           double *update_Bps, hap_replay_colls *colls, hap_err *err) {
  *rows = NULL;
  *n_rows = 0;
  *update_Bps = 0;
  if (colls != NULL)
    memset(colls, 0, sizeof *colls);
  if (o->collectives && colls == NULL)
    return hap_err_set(err, HAP_EINVAL,
                       "kernel replay: collectives timed, but nowhere to put them");
  if (o->warmup < 0 || o->iters < 1 || o->max_iters < o->iters || !(o->min_s >= 0) ||
      !(o->speed > 0 && o->speed <= 1))
    return hap_err_set(err, HAP_EINVAL,
                       "kernel replay: warmup %d, iters %d..%d, min_s %g, speed %g: expected >= 0, "
                       "1 <= iters <= max_iters, >= 0, (0, 1]",
                       o->warmup, o->iters, o->max_iters, o->min_s, o->speed);
  hap_lowered *lw = NULL;
  hap_comm *silent = NULL;
  hap_coll_timer *timer = NULL;
  hap_run *run = NULL;
  cases c = {0};
  HAP_TRY(hap_lower(p, g, &lw, err));
  hap_status st = o->collectives ? hap_coll_timer_create(lw, o->max_iters, &timer, err)
                                 : hap_comm_silent_create(world, true, &silent, err);
  if (st == HAP_OK)
    st = list_cases(lw, world->rank, o->max_iters, &c, err);
  /* as hap-run by default: the same learning rate, so updates touch every weight */
  hap_run_options ro = {.seed = o->seed, .lr = 1e-3, .speed = o->speed, .kernels = o->kernels};
  if (st == HAP_OK)
    st = hap_run_create(lw, g, o->collectives ? world : silent, &ro, &run, err);
  if (st == HAP_OK)
    st = replay(run, world, lw, o, &c, timer, err);
  if (st == HAP_OK && timer != NULL)
    hap_coll_timer_take(timer, o->warmup, colls);
  hap_profile_kernel *out = NULL;
  if (st == HAP_OK && (out = calloc((size_t)c.n + 1, sizeof *out)) == NULL)
    st = oom(err);
  int32_t n_out = 0;
  for (int32_t i = 0; i < c.n && st == HAP_OK; i++) {
    if (c.filled[i] == 0) /* a task that never ran has no row: the model prices it */
      continue;
    hap_kcase kc = c.v[i];
    hap_kcase_fix(&kc);
    computed_in(&kc.io, o->gemm);
    hap_profile_kernel *row = &out[n_out++];
    st = hap_kcase_row(&kc, kc.bwd, c.sample[i], c.filled[i], row, err);
    /* the price: sums of medians fall short of a mean iteration (every task's times skew long) */
    if (st == HAP_OK && !o->price_p50 &&
        hap_trimmed_mean(c.sample[i], c.filled[i], HAP_PRICE_TRIM, &row->mean_s) != HAP_OK)
      st = oom(err);
  }
  double upd_s_per_B = 0, upd_p95 = 0; /* priced as the kernels */
  if (st == HAP_OK && c.n_upd > 0 &&
      (o->price_p50
           ? hap_p50_p95(c.upd_s_per_B, c.n_upd, &upd_s_per_B, &upd_p95)
           : hap_trimmed_mean(c.upd_s_per_B, c.n_upd, HAP_PRICE_TRIM, &upd_s_per_B)) != HAP_OK)
    st = oom(err);
  if (st == HAP_OK && upd_s_per_B > 0)
    *update_Bps = 1 / upd_s_per_B;
  if (st == HAP_OK) {
    *rows = out;
    *n_rows = n_out;
  } else {
    *update_Bps = 0;
    free(out);
  }
  hap_run_destroy(run);
  hap_comm_destroy(silent);
  hap_coll_timer_destroy(timer);
  cases_free(&c);
  hap_lowered_destroy(lw);
  return st;
}
