/* hap-sim — simulate training iterations of a model on a cluster under HAP's plan and the
 * baselines, and answer what-if questions by sweeping the cluster, its devices and the model.
 * The grid of points is simulate/sweep.h's; this file runs the strategies at each point and
 * prints the rows. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/fileio.h"
#include "base/json_write.h"
#include "chakra_report.h"
#include "hap_config.h"
#include "harness/format.h"
#include "harness/report.h"
#include "pipe/megatron.h"
#include "pipeline_report.h"
#include "plan/pipeline_io.h"
#include "plan/pipeline_lower.h"
#include "plan/plan_io.h"
#include "report/report.h"
#include "simulate/pipeline_plan_sim.h"
#include "simulate/plan_sim.h"
#include "simulate/sweep.h"
#include "store/cluster_open.h"
#include "synth/synth.h"
#include "traces/trace.h"

static const char *prog = "hap-sim";

#define DEFAULT_MODEL            "bert-base"
#define DEFAULT_CLUSTER          "paper-hetero"
#define DEFAULT_SWEEP            "gpus_per_host=1,2,4,8"
#define DEFAULT_BATCH_PER_DEVICE 32

static void usage(FILE *f) {
  fprintf(
      f,
      "Usage: hap-sim [MODEL] [--cluster SPEC] [--strategy S | --plan FILE] [--sweep K=V,...]\n"
      "       hap-sim --chakra-in DIR [--cluster SPEC]\n"
      "\n"
      "Simulate one training iteration of MODEL on a cluster, event by event: per device a\n"
      "compute and a communication stream, collectives that wait for every member, durations\n"
      "from the cluster's cost model. Prints the iteration time of each strategy, the speedups\n"
      "over the data-parallel baselines, busy and exposed-communication time and peak memory.\n"
      "\n"
      "With no arguments: the bundled study, %s on %s, hap vs dp-ev vs dp-cp vs megatron-tp,\n"
      "--sweep %s.\n"
      "\n"
      "MODEL    a zoo spec ('bert-base:layers=24') or a hap-graph file (default %s)\n"
      "\n"
      "Options:\n"
      "  -c, --cluster SPEC    cluster spec, hap-cluster JSON or hap-profile .h5 (default\n"
      "                        %s)\n"
      "  -s, --strategy S      hap, dp-ev, dp-cp, megatron-tp, alpa or all (default all:\n"
      "                        the first four), or\n"
      "                        megatron[:tp=T,pp=P,dp=D,mbs=B,v=V,sp=on|off,recompute=R]:\n"
      "                        Megatron-LM's 3-D layout (hap-synth --help)\n"
      "  -p, --plan FILE       simulate this hap-plan file instead of synthesising (it must\n"
      "                        have been made for MODEL on the cluster: digests are checked;\n"
      "                        without MODEL or --cluster, the ones the plan records)\n"
      "  -w, --sweep K=V,V...  what-if axis; repeat for a grid. Keys: the cluster spec\n"
      "                        parameters (gpus_per_host, hosts, inter_gbps,\n"
      "                        inter_latency_us, intra_gbps, intra_latency_us), the model's\n"
      "                        options (batch, layers, seq, ...), and device[M]=PRESET,...\n"
      "                        which replaces every device whose model contains M\n"
      "                        (e.g. device[V100]=A100-80GB,H100-80GB)\n"
      "  -b, --batch-per-device N  the model's batch is N x devices at every point (weak\n"
      "                        scaling, as HAP's experiments: 32 per GPU)\n"
      "  -t, --trace FILE      write the simulated timeline (Chrome trace JSON, opens in\n"
      "                        Perfetto); with several runs, FILE gets '.<point>.<strategy>'\n"
      "                        before its extension\n"
      "      --trace-devices N devices written to a trace (default 64; 0 = all)\n"
      "  -f, --format FMT      table (default), csv or json\n"
      "      --report FILE     also write the rows as an HTML page (hap-report sweep: the\n"
      "                        iteration time against the swept parameter per strategy)\n"
      "  -m, --memory-limit B  per-device memory for synthesis, e.g. 12G; a plan that does\n"
      "                        not fit steers the policy fields --policy does not force\n"
      "                        (ZeRO stage, then recomputation, then micro-batches)\n"
      "      --policy SPEC     how the model trains, as hap-synth's --policy\n"
      "                        (precision=bf16,optimizer=adam,zero=1,...; docs/memory.md);\n"
      "                        with it, or a plan or steering with another policy than the\n"
      "                        default, each row's policy and memory by component follow\n"
      "                        the table\n"
      "      --pipeline SPEC   a pipeline instead: stages=P[,schedule=gpipe|1f1b|\n"
      "                        interleaved][,chunks=V][,micro_batches=M] (default 1f1b,\n"
      "                        M from --policy): the graph cut into P*V stages (compute\n"
      "                        against boundary sends) on P groups of the devices in\n"
      "                        order, each stage's program (--strategy, default hap)\n"
      "                        synthesised for one micro-batch and simulated, then the\n"
      "                        schedule over those stage times; prints every stage, the\n"
      "                        iteration and the bubble (docs/design-pipeline.md); repeat\n"
      "                        it to compare pipelines, one row each; auto compares 1F1B\n"
      "                        pipelines of every stage count that divides the devices\n"
      "                        (<= 16) and one stage per device model of a mixed\n"
      "                        cluster, and chooses the fastest whose stages all fit;\n"
      "                        groups=D1+D2+... sets unequal groups (devices in order)\n"
      "      --tasks           list every lowered task: dependencies, start and end on\n"
      "                        device 0 (before the summary)\n"
      "      --no-fold         simulate identical devices separately (slower, same result)\n"
      "      --chakra DIR      also write the simulated plan as Chakra execution traces:\n"
      "                        DIR/PREFIX.<rank>.et per device (several rows:\n"
      "                        PREFIX.<point.strategy>.<rank>.et; docs/chakra.md)\n"
      "      --chakra-in DIR   instead: simulate the Chakra traces DIR/PREFIX.<rank>.et\n"
      "                        (one per rank, recorded anywhere) on --cluster (default:\n"
      "                        the cluster they record), compute scaled to each device\n"
      "      --chakra-prefix P the traces' file name prefix (default " HAP_CHAKRA_DEFAULT_PREFIX
      ")\n"
      "  -q, --quiet           no progress on stderr\n"
      "  -h, --help            this help\n"
      "  -V, --version         print the version\n"
      "\n"
      "Exit status: 0 ok, 1 failure (including a strategy with no plan), 2 usage error.\n",
      DEFAULT_MODEL, DEFAULT_CLUSTER, DEFAULT_SWEEP, DEFAULT_MODEL, DEFAULT_CLUSTER);
}

typedef struct opts {
  const char *model, *cluster, *plan, *trace;
  const char *report;                 /* --report FILE: the rows as hap-report's sweep page */
  const char *chakra, *chakra_prefix; /* --chakra DIR, --chakra-prefix */
  int strategies;                     /* bit per hap_strategy */
  hap_sweep sweep;                    /* the grid of points (simulate/sweep.h) */
  hap_format format;
  double memory_limit;
  int trace_devices;
  bool no_fold, quiet, tasks;
  hap_train_policy policy; /* --policy over the default */
  uint32_t forced;         /* HAP_POLICY_* bits --policy set */
  bool policy_given;
} opts;

enum { MEM_CLASSES = 8 };

/* One device class of a row's memory breakdown: its fullest device. */
typedef struct mem_class {
  char model[48];
  int32_t count;
  hap_memory_breakdown m;
  double total, limit; /* bytes */
} mem_class;

/* ---- one point of the grid ------------------------------------------------------------- */

typedef struct row {
  int point_idx; /* which grid point (rows of one point share it) */
  char point[HAP_SWEEP_LABEL_MAX];
  char strategy[32];
  bool ok;
  char error[1024];
  int32_t devices;
  double sim_s, synth_s;
  double busy_frac;    /* mean compute-stream busy / iteration */
  double exposed_frac; /* mean exposed communication / iteration */
  double peak_bytes;   /* largest device peak */
  double synth_seconds;
  int64_t events;
  int32_t groups;
  char *details; /* printed after the table (owned; may be NULL) */
  /* the policy and the memory by component, shown when --policy was given or the policy is not
   * the default */
  bool show_policy, steered;
  hap_train_policy policy;
  int n_mem; /* classes in mem (0: the plan recorded no breakdown) */
  mem_class mem[MEM_CLASSES];
} row;

/* The row's policy and memory per device class (runs of one model, the fullest device of each). */
static void record_policy(const opts *o, const hap_plan *plan, const hap_cluster *c,
                          const hap_steer_report *rep, row *r) {
  r->policy = plan->policy;
  r->steered = rep != NULL && rep->steered;
  r->show_policy = o->policy_given || !hap_policy_is_default(&plan->policy);
  r->n_mem = 0;
  if (!plan->memory_recorded)
    return;
  for (int32_t i = 0, j; i < c->n_devices && r->n_mem < MEM_CLASSES; i = j) {
    int32_t top = i;
    for (j = i + 1; j < c->n_devices && strcmp(c->devices[j].model, c->devices[i].model) == 0; j++)
      if (plan->device_memory_bytes[j] > plan->device_memory_bytes[top])
        top = j;
    mem_class *m = &r->mem[r->n_mem++];
    snprintf(m->model, sizeof m->model, "%s", c->devices[top].model);
    m->count = j - i;
    m->m = plan->device_memory[top];
    m->total = plan->device_memory_bytes[top];
    m->limit = o->memory_limit > 0 ? o->memory_limit : c->devices[top].memory_bytes;
  }
}

static void trace_path(const opts *o, const row *r, bool several, char *buf, size_t len) {
  if (!several) {
    snprintf(buf, len, "%s", o->trace);
    return;
  }
  char label[320];
  snprintf(label, sizeof label, "%s%s%s", r->point, r->point[0] ? "." : "", r->strategy);
  for (char *p = label; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '=' || *p == '-' || *p == '.'))
      *p = '_';
  const char *dot = strrchr(o->trace, '.');
  const char *slash = strrchr(o->trace, '/');
  if (dot == NULL || (slash != NULL && dot < slash))
    snprintf(buf, len, "%s.%s", o->trace, label);
  else
    snprintf(buf, len, "%.*s.%s%s", (int)(dot - o->trace), o->trace, label, dot);
}

static hap_status write_trace(const opts *o, hap_plan_sim *ps, const char *path, hap_err *err) {
  hap_trace *t = NULL;
  HAP_TRY(hap_trace_open(path, "hap-sim", &t, err));
  hap_status st = hap_plan_sim_trace(ps, t, o->trace_devices, err);
  if (st == HAP_OK)
    st = hap_trace_meta(t, "plan_strategy", ps->lw->plan->strategy);
  if (st != HAP_OK) {
    hap_trace_abort(t);
    return st;
  }
  return hap_trace_close(t, err);
}

/* "1.234 s", "12.345 ms", "56.7 us". */
static const char *fmt_time(double s, char *buf, size_t len) {
  if (s >= 1)
    snprintf(buf, len, "%.3f s", s);
  else if (s >= 1e-3)
    snprintf(buf, len, "%.3f ms", 1e3 * s);
  else
    snprintf(buf, len, "%.1f us", 1e6 * s);
  return buf;
}

/* --tasks: the lowered task list with dependencies and the simulated times of device 0. */
static void print_tasks(const hap_plan_sim *ps, const row *r) {
  const hap_lowered *lw = ps->lw;
  printf("# %s %s: %d tasks per device; times of device 0 (%s), ms\n", r->point, r->strategy,
         lw->n_tasks, ps->cluster->devices[0].name);
  printf("%6s %-44s %-10s %-4s %10s %10s  %s\n", "id", "task", "kind", "pass", "start", "end",
         "waits for");
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    const hap_task *k = &lw->tasks[t];
    size_t g0 = (size_t)ps->group[0] * (size_t)ps->n_tasks + (size_t)t;
    printf("%6d %-44s %-10s %-4s %10.3f %10.3f ", t, k->name, hap_task_kind_name(k->kind),
           hap_task_phase_name(k->phase), 1e3 * ps->start_s[g0], 1e3 * ps->end_s[g0]);
    for (int32_t i = 0; i < k->n_deps; i++)
      printf(" %s", lw->tasks[lw->deps[k->dep0 + i]].name);
    printf("\n");
  }
  printf("\n");
}

/* Where the iteration's time goes along the critical path: shares by task kind and pass, the
 * devices it runs on, and its longest tasks. Printed for a single run in table format. */
static void print_critical(FILE *f, const hap_plan_sim *ps) {
  const hap_lowered *lw = ps->lw;
  double by_kind[HAP_TASK_KIND_COUNT][3] = {{0}}, total = 0;
  enum { TOP = 5 };
  int32_t top[TOP];
  double top_s[TOP];
  int n_top = 0;
  for (int32_t i = 0; i < ps->n_critical; i++) {
    const hap_plan_sim_crit *c = &ps->critical[i];
    if (c->via == HAP_SIM_EDGE_COLLECTIVE)
      continue; /* a member that waited: the step before it is the same collective, on the
                   device that arrived last */
    const hap_task *k = &lw->tasks[c->task];
    double d = hap_plan_sim_duration(ps, c->task, c->device);
    by_kind[k->kind][k->phase] += d;
    total += d;
    int pos = n_top < TOP ? n_top++ : TOP;
    while (pos > 0 && top_s[pos - 1] < d) {
      if (pos < TOP) {
        top[pos] = top[pos - 1];
        top_s[pos] = top_s[pos - 1];
      }
      pos--;
    }
    if (pos < TOP) {
      top[pos] = i;
      top_s[pos] = d;
    }
  }
  if (total <= 0)
    return;
  fprintf(f,
          "\ncritical path (%d tasks), by time on it:\n  compute fwd %.0f%%, compute bwd %.0f%%, "
          "collectives fwd %.0f%% bwd %.0f%%, local "
          "%.0f%%, updates %.0f%%\n",
          ps->n_critical, 100 * by_kind[HAP_TASK_COMPUTE][0] / total,
          100 * by_kind[HAP_TASK_COMPUTE][1] / total, 100 * by_kind[HAP_TASK_COLLECTIVE][0] / total,
          100 * by_kind[HAP_TASK_COLLECTIVE][1] / total,
          100 * (by_kind[HAP_TASK_LOCAL][0] + by_kind[HAP_TASK_LOCAL][1]) / total,
          100 * by_kind[HAP_TASK_UPDATE][2] / total);
  fprintf(f, "  longest tasks on it:\n");
  char a[32];
  for (int i = 0; i < n_top; i++) {
    const hap_plan_sim_crit *c = &ps->critical[top[i]];
    const hap_device *dev = &ps->cluster->devices[c->device];
    fprintf(f, "    %-48s %10s  on %s (%s)\n", lw->tasks[c->task].name,
            fmt_time(top_s[i], a, sizeof a), dev->name, dev->model);
  }
}

/* A pipelined plan read with --plan: lowered and simulated with every device on one engine
 * (simulate/pipeline_plan_sim.h); the row's details list the stages and each group's bubble. */
static hap_status run_pipelined(const opts *o, const hap_graph *g, const hap_cluster *c,
                                const hap_pipeline *pl, bool several, row *r, hap_err *err) {
  if (o->tasks || o->no_fold)
    return hap_err_set(err, HAP_EINVAL,
                       "%s: a pipelined plan: --tasks and --no-fold are not available for it yet "
                       "(every device is simulated already)",
                       o->plan);
  if (o->chakra != NULL)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "%s: a pipelined plan: --chakra exports flat plans only (yet)", o->plan);
  hap_pipe_lowered *pw = NULL;
  hap_pipe_plan_sim *ps = NULL;
  hap_trace *t = NULL;
  char path[1024];
  HAP_TRY(hap_pipe_lower(pl, g, c, &pw, err));
  hap_status st = HAP_OK;
  if (o->trace != NULL) {
    trace_path(o, r, several, path, sizeof path);
    st = hap_trace_open(path, "hap-sim", &t, err);
  }
  hap_pipe_plan_sim_options po = {.trace = t, .trace_devices = o->trace_devices};
  if (st == HAP_OK)
    st = hap_pipe_plan_sim_run(pw, &po, &ps, err);
  if (t != NULL && st == HAP_OK)
    st = hap_trace_meta(t, "plan_strategy", pl->strategy);
  if (t != NULL && st != HAP_OK)
    hap_trace_abort(t);
  else if (t != NULL)
    st = hap_trace_close(t, err);
  if (st == HAP_OK) {
    r->ok = true;
    r->sim_s = ps->iteration_s;
    r->synth_s = pl->predicted_iteration_s;
    r->events = ps->n_events;
    r->groups = ps->n_devices;
    double busy = 0;
    for (int32_t d = 0; d < ps->n_devices; d++)
      busy += ps->busy_s[d];
    r->busy_frac = ps->iteration_s > 0 ? busy / ps->n_devices / ps->iteration_s : 0;
    /* memory per device: the stage program's, with the order's in-flight activations */
    int32_t over = 0, fullest = -1;
    double fullest_frac = 0, fullest_bytes = 0, fullest_limit = 0;
    for (int32_t k = 0; k < pl->n_stages; k++) {
      int32_t n;
      const int32_t *dev = hap_pipeline_group(pl, pl->stages[k].group, &n);
      bool fits = true;
      for (int32_t d = 0; d < n && pl->stages[k].plan->memory_recorded; d++) {
        double bytes = hap_pipe_stage_memory(pw, k, d);
        double limit = o->memory_limit > 0 ? o->memory_limit : c->devices[dev[d]].memory_bytes;
        r->peak_bytes = fmax(r->peak_bytes, bytes);
        fits = fits && bytes <= limit;
        if (limit > 0 && bytes / limit > fullest_frac) {
          fullest_frac = bytes / limit;
          fullest = k;
          fullest_bytes = bytes;
          fullest_limit = limit;
        }
      }
      over += !fits;
    }
    size_t len = 0;
    FILE *f = !several && o->format == HAP_FORMAT_TABLE ? open_memstream(&r->details, &len) : NULL;
    if (f != NULL) {
      fprintf(f,
              "\npipeline    %d stages on %d groups, %s, %d micro-batches; every device "
              "simulated (%lld engine tasks)\n",
              pl->n_stages, pl->n_groups, hap_pipe_schedule_name(pl->schedule),
              pl->policy.micro_batches, (long long)ps->n_engine_tasks);
      for (int32_t k = 0; k < pl->n_stages; k++)
        fprintf(f, "  stage %-3d group %-3d nodes %d..%d (%s .. %s)\n", k, pl->stages[k].group,
                pl->stages[k].first, pl->stages[k].end - 1, g->nodes[pl->stages[k].first].name,
                g->nodes[pl->stages[k].end - 1].name);
      fprintf(f, "bubble      per group");
      for (int32_t gi = 0; gi < ps->n_groups; gi++)
        fprintf(f, " %.3f", ps->group_bubble[gi]);
      fprintf(f, " (mean %.3f; idle compute before the last backward ends at %.6f s)\n",
              ps->mean_bubble, ps->flush_s);
      fprintf(f, "transfers   %.3f MiB between stages per iteration\n",
              ps->transfer_bytes / 1048576.0);
      if (fullest >= 0)
        fprintf(f,
                "memory      %s%d of %d stages fit (fullest: stage %d, %.3f GiB of %.3f GiB, the "
                "schedule's in-flight micro-batches counted)\n",
                over ? "" : "all ", pl->n_stages - over, pl->n_stages, fullest,
                fullest_bytes / 1073741824.0, fullest_limit / 1073741824.0);
      fclose(f);
    }
  }
  hap_pipe_plan_sim_destroy(ps);
  hap_pipe_lowered_destroy(pw);
  return st;
}

/* Plan (synthesised or read), lower, simulate: fills r; a failure of this strategy is a row,
 * not an abort (r->ok false). Returns non-OK only for errors that should stop everything. */
static hap_status run_strategy(const opts *o, const hap_graph *g, const hap_cluster *c,
                               hap_strategy s, bool several, row *r) {
  hap_err err = {0};
  hap_plan *plan = NULL;
  hap_lowered *lw = NULL;
  hap_plan_sim *ps = NULL;
  hap_steer_report rep = {0};
  hap_status st;
  snprintf(r->strategy, sizeof r->strategy, "%s", o->plan ? "plan" : hap_strategy_name(s));
  r->devices = c->n_devices;
  if (o->plan != NULL) {
    hap_pipeline *pl = NULL;
    st = hap_pipeline_read_file(o->plan, g, c, &pl, &err);
    if (st == HAP_OK)
      snprintf(r->strategy, sizeof r->strategy, "%s", pl->strategy);
    if (st == HAP_OK && !hap_pipeline_is_flat(pl)) {
      st = run_pipelined(o, g, c, pl, several, r, &err);
      hap_pipeline_destroy(pl);
      if (st != HAP_OK) {
        snprintf(r->error, sizeof r->error, "%s", err.msg);
        hap_cli_error(prog, &err);
      }
      return st;
    }
    if (st == HAP_OK) { /* a one-stage plan: take it out of its pipeline */
      plan = pl->stages[0].plan;
      pl->stages[0].plan = NULL;
    }
    hap_pipeline_destroy(pl);
  } else {
    hap_synth_options so = {.strategy = s,
                            .memory_limit_bytes = o->memory_limit,
                            .rescore = hap_plan_sim_rescore,
                            .policy = o->policy};
    hap_synth_stats stats;
    st = hap_synthesize_steered(g, c, &so, o->forced, &plan, &stats, &rep, &err);
    r->synth_seconds = stats.seconds;
  }
  if (st == HAP_OK)
    record_policy(o, plan, c, o->plan == NULL ? &rep : NULL, r);
  hap_plan_sim_options po = {.no_fold = o->no_fold};
  if (st == HAP_OK && (st = hap_lower(plan, g, &lw, &err)) == HAP_OK)
    st = hap_plan_sim_run(lw, c, &po, &ps, &err);
  if (st == HAP_OK) {
    r->ok = true;
    r->sim_s = ps->iteration_s;
    r->synth_s = plan->predicted_iteration_s;
    r->events = ps->n_events;
    r->groups = ps->n_groups;
    double busy = 0, exposed = 0;
    for (int32_t d = 0; d < ps->n_devices; d++) {
      busy += ps->devices[d].compute_s;
      exposed += ps->devices[d].exposed_comm_s;
      r->peak_bytes = fmax(r->peak_bytes, ps->devices[d].memory_bytes);
    }
    r->busy_frac = ps->iteration_s > 0 ? busy / ps->n_devices / ps->iteration_s : 0;
    r->exposed_frac = ps->iteration_s > 0 ? exposed / ps->n_devices / ps->iteration_s : 0;
    if (o->tasks)
      print_tasks(ps, r);
    size_t len = 0;
    FILE *f = !several && o->format == HAP_FORMAT_TABLE ? open_memstream(&r->details, &len) : NULL;
    if (f != NULL) {
      print_critical(f, ps);
      fclose(f);
    }
    if (o->chakra != NULL) {
      char label[320];
      snprintf(label, sizeof label, "%s%s%s", r->point, r->point[0] ? "." : "", r->strategy);
      st = hap_chakra_report_export(prog, ps, o->chakra, o->chakra_prefix, several ? label : NULL,
                                    o->quiet, &err);
      if (st != HAP_OK) {
        hap_cli_error(prog, &err);
        r->ok = false;
      }
    }
    if (o->trace != NULL && st == HAP_OK) {
      char path[1024];
      trace_path(o, r, several, path, sizeof path);
      st = write_trace(o, ps, path, &err);
      if (st != HAP_OK) {
        hap_cli_error(prog, &err);
        r->ok = false;
      }
    }
  } else {
    snprintf(r->error, sizeof r->error, "%s", err.msg);
    if (o->plan != NULL) /* a plan that does not load is the user's error, not a result */
      hap_cli_error(prog, &err);
    st = o->plan != NULL ? st : HAP_OK;
  }
  hap_plan_sim_destroy(ps);
  hap_lowered_destroy(lw);
  hap_plan_destroy(plan);
  return st;
}

/* ---- output ---------------------------------------------------------------------------- */

/* Iteration time of `strategy` at the same point, or NAN. */
static double peer_time(const row *rows, int n, int i, const char *strategy) {
  for (int k = 0; k < n; k++)
    if (rows[k].ok && rows[k].point_idx == rows[i].point_idx &&
        strcmp(rows[k].strategy, strategy) == 0)
      return rows[k].sim_s;
  return NAN;
}

static void print_table(const row *rows, int n) {
  char a[32], b[32], m[32];
  int w = 5;
  for (int i = 0; i < n; i++)
    w = (int)fmax(w, (double)strlen(rows[i].point));
  printf("%-*s %-11s %7s %12s %12s %8s %8s %9s %6s %8s %10s\n", w, "point", "strategy", "devices",
         "iteration", "synth est", "vs dp-ev", "vs dp-cp", "vs mgt-tp", "busy", "exposed",
         "peak mem");
  for (int i = 0; i < n; i++) {
    const row *r = &rows[i];
    const char *point = r->point[0] ? r->point : "-";
    if (!r->ok) {
      printf("%-*s %-11s %7d  no plan: %s\n", w, point, r->strategy, r->devices, r->error);
      continue;
    }
    double ev = peer_time(rows, n, i, "dp-ev"), cp = peer_time(rows, n, i, "dp-cp");
    double tp = peer_time(rows, n, i, "megatron-tp");
    char sev[16] = "-", scp[16] = "-", stp[16] = "-";
    if (isfinite(ev))
      snprintf(sev, sizeof sev, "%.2fx", ev / r->sim_s);
    if (isfinite(cp))
      snprintf(scp, sizeof scp, "%.2fx", cp / r->sim_s);
    if (isfinite(tp))
      snprintf(stp, sizeof stp, "%.2fx", tp / r->sim_s);
    printf("%-*s %-11s %7d %12s %12s %8s %8s %9s %5.0f%% %7.0f%% %10s\n", w, point, r->strategy,
           r->devices, fmt_time(r->sim_s, a, sizeof a), fmt_time(r->synth_s, b, sizeof b), sev, scp,
           stp, 100 * r->busy_frac, 100 * r->exposed_frac,
           hap_fmt_bytes(r->peak_bytes, m, sizeof m));
  }
}

/* After the table: each row's policy and memory by component, when shown. */
static void print_policies(const row *rows, int n) {
  bool any = false;
  for (int i = 0; i < n; i++)
    any = any || (rows[i].ok && rows[i].show_policy);
  if (!any)
    return;
  int w = 5;
  for (int i = 0; i < n; i++)
    w = (int)fmax(w, (double)strlen(rows[i].point));
  printf("\npolicy and memory per device (the fullest device of each class, at the peak)\n");
  for (int i = 0; i < n; i++) {
    const row *r = &rows[i];
    if (!r->ok || !r->show_policy)
      continue;
    char pb[200];
    hap_err err = {0};
    if (hap_policy_format(&r->policy, pb, sizeof pb, &err) != HAP_OK)
      snprintf(pb, sizeof pb, "?");
    printf("%-*s %-11s policy %s%s\n", w, r->point[0] ? r->point : "-", r->strategy, pb,
           r->steered ? " (steered to fit memory)" : "");
    if (r->n_mem == 0) {
      printf("%-*s %-11s   memory breakdown not recorded in the plan\n", w, "", "");
      continue;
    }
    printf("%-*s %-11s   %-14s %5s %11s %11s %11s %11s %11s %11s %11s %11s\n", w, "", "", "devices",
           "count", "parameters", "gradients", "optimizer", "activations", "comm bufs", "workspace",
           "total", "limit");
    for (int k = 0; k < r->n_mem; k++) {
      const mem_class *m = &r->mem[k];
      char b[8][32];
      for (int j = 0; j < HAP_MEMORY_PARTS; j++)
        hap_fmt_bytes(hap_memory_part_get(&m->m, j), b[j], sizeof b[j]);
      printf("%-*s %-11s   %-14s %5d %11s %11s %11s %11s %11s %11s %11s %11s\n", w, "", "",
             m->model, m->count, b[0], b[1], b[2], b[3], b[4], b[5],
             hap_fmt_bytes(m->total, b[6], sizeof b[6]),
             hap_fmt_bytes(m->limit, b[7], sizeof b[7]));
    }
  }
}

static void print_csv(const row *rows, int n) {
  printf("point,strategy,devices,ok,iteration_s,synth_predicted_s,speedup_vs_dp_ev,"
         "speedup_vs_dp_cp,speedup_vs_megatron_tp,busy_fraction,exposed_comm_fraction,"
         "peak_memory_bytes,synthesis_s,events,error\n");
  for (int i = 0; i < n; i++) {
    const row *r = &rows[i];
    double ev = peer_time(rows, n, i, "dp-ev"), cp = peer_time(rows, n, i, "dp-cp");
    double tp = peer_time(rows, n, i, "megatron-tp");
    printf("\"%s\",%s,%d,%d,", r->point, r->strategy, r->devices, r->ok ? 1 : 0);
    if (r->ok)
      printf("%.9g,%.9g,%.6g,%.6g,%.6g,%.6g,%.6g,%.0f,%.6g,%lld,", r->sim_s, r->synth_s,
             isfinite(ev) ? ev / r->sim_s : NAN, isfinite(cp) ? cp / r->sim_s : NAN,
             isfinite(tp) ? tp / r->sim_s : NAN, r->busy_frac, r->exposed_frac, r->peak_bytes,
             r->synth_seconds, (long long)r->events);
    else
      printf(",,,,,,,,,,");
    printf("\"");
    for (const char *p = r->error; *p; p++)
      putchar(*p == '"' ? '\'' : *p);
    printf("\"\n");
  }
}

static void print_json(const opts *o, const row *rows, int n, FILE *f) {
  hap_jw w;
  hap_jw_init(&w, f, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "model");
  hap_jw_str(&w, o->model);
  hap_jw_key(&w, "cluster");
  hap_jw_str(&w, o->cluster);
  hap_jw_key(&w, "rows");
  hap_jw_begin_array(&w);
  for (int i = 0; i < n; i++) {
    const row *r = &rows[i];
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "point");
    hap_jw_str(&w, r->point);
    hap_jw_key(&w, "strategy");
    hap_jw_str(&w, r->strategy);
    hap_jw_key(&w, "devices");
    hap_jw_int(&w, r->devices);
    hap_jw_key(&w, "ok");
    hap_jw_bool(&w, r->ok);
    if (r->ok) {
      double ev = peer_time(rows, n, i, "dp-ev"), cp = peer_time(rows, n, i, "dp-cp");
      hap_jw_key(&w, "iteration_s");
      hap_jw_double(&w, r->sim_s);
      hap_jw_key(&w, "synth_predicted_s");
      hap_jw_double(&w, r->synth_s);
      if (isfinite(ev)) {
        hap_jw_key(&w, "speedup_vs_dp_ev");
        hap_jw_double(&w, ev / r->sim_s);
      }
      if (isfinite(cp)) {
        hap_jw_key(&w, "speedup_vs_dp_cp");
        hap_jw_double(&w, cp / r->sim_s);
      }
      double tp = peer_time(rows, n, i, "megatron-tp");
      if (isfinite(tp)) {
        hap_jw_key(&w, "speedup_vs_megatron_tp");
        hap_jw_double(&w, tp / r->sim_s);
      }
      hap_jw_key(&w, "busy_fraction");
      hap_jw_double(&w, r->busy_frac);
      hap_jw_key(&w, "exposed_comm_fraction");
      hap_jw_double(&w, r->exposed_frac);
      hap_jw_key(&w, "peak_memory_bytes");
      hap_jw_double(&w, r->peak_bytes);
      hap_jw_key(&w, "events");
      hap_jw_int(&w, r->events);
      if (r->show_policy) {
        char pb[200];
        hap_err err = {0};
        if (hap_policy_format(&r->policy, pb, sizeof pb, &err) == HAP_OK) {
          hap_jw_key(&w, "policy");
          hap_jw_str(&w, pb);
        }
        hap_jw_key(&w, "steered");
        hap_jw_bool(&w, r->steered);
        hap_jw_key(&w, "memory");
        hap_jw_begin_array(&w);
        for (int k = 0; k < r->n_mem; k++) {
          const mem_class *m = &r->mem[k];
          hap_jw_begin_object_inline(&w);
          hap_jw_key(&w, "model");
          hap_jw_str(&w, m->model);
          hap_jw_key(&w, "count");
          hap_jw_int(&w, m->count);
          for (int j = 0; j < HAP_MEMORY_PARTS; j++) {
            hap_jw_key(&w, hap_memory_part_name(j));
            hap_jw_double(&w, hap_memory_part_get(&m->m, j));
          }
          hap_jw_key(&w, "total");
          hap_jw_double(&w, m->total);
          hap_jw_key(&w, "limit");
          hap_jw_double(&w, m->limit);
          hap_jw_end_object(&w);
        }
        hap_jw_end_array(&w);
      }
    } else {
      hap_jw_key(&w, "error");
      hap_jw_str(&w, r->error);
    }
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_end_object(&w);
  hap_jw_finish(&w);
}

/* --report: the JSON rows, rendered by report/ as hap-report's sweep page. */
static hap_status write_report(const opts *o, const row *rows, int n) {
  char *json = NULL;
  size_t len = 0;
  hap_err err = {0};
  FILE *ms = open_memstream(&json, &len);
  if (ms == NULL) {
    fprintf(stderr, "%s: --report: out of memory\n", prog);
    return HAP_ENOMEM;
  }
  print_json(o, rows, n, ms);
  hap_status st = fclose(ms) == 0 ? HAP_OK : HAP_ENOMEM;
  if (st == HAP_OK)
    st = hap_report_write_json(json, len, prog, HAP_REPORT_SWEEP, o->report, &err);
  if (st != HAP_OK)
    hap_report(prog, -1, "--report: %s", err.msg[0] ? err.msg : hap_status_str(st));
  free(json);
  return st;
}

/* ---- the grid -------------------------------------------------------------------------- */

static int run(const opts *o) {
  int np = hap_sweep_points(&o->sweep), ns = 0;
  for (int s = 0; s < HAP_STRATEGY_COUNT; s++)
    ns += (o->strategies >> s) & 1;
  if (o->plan != NULL)
    ns = 1;
  row *rows = calloc((size_t)np * (size_t)ns, sizeof *rows);
  if (rows == NULL) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  int n_rows = 0, rc = 0;
  bool progress = hap_cli_progress_enabled(stderr, o->quiet);
  bool several = np * ns > 1;
  for (int p = 0; p < np && rc == 0; p++) {
    hap_sweep_point pt;
    hap_err err = {0};
    if (hap_sweep_point_init(&o->sweep, p, &pt, &err) != HAP_OK) {
      hap_cli_error(prog, &err);
      rc = 1;
      break;
    }
    hap_graph *g = NULL;
    hap_cluster *c = NULL;
    hap_status lst = hap_sweep_point_load(&o->sweep, &pt, hap_cluster_open, &g, &c, &err);
    if (lst != HAP_OK) /* this point fails; the others still run and print */
      hap_cli_error(prog, &err);
    for (int s = 0; s < HAP_STRATEGY_COUNT && rc == 0; s++) {
      if (o->plan == NULL && !((o->strategies >> s) & 1))
        continue;
      row *r = &rows[n_rows++];
      r->point_idx = p;
      snprintf(r->point, sizeof r->point, "%s", pt.label);
      if (lst != HAP_OK) {
        snprintf(r->strategy, sizeof r->strategy, "%s",
                 o->plan ? "plan" : hap_strategy_name((hap_strategy)s));
        snprintf(r->error, sizeof r->error, "%s", err.msg);
        r->devices = pt.devices;
        if (o->plan != NULL)
          break;
        continue;
      }
      if (progress)
        fprintf(stderr, "\r%s: [%d/%d] %s %s ...%20s", prog, n_rows, np * ns, pt.label,
                o->plan ? "plan" : hap_strategy_name((hap_strategy)s), "");
      if (run_strategy(o, g, c, (hap_strategy)s, several, r) != HAP_OK)
        rc = 1;
      if (o->plan != NULL)
        break;
    }
    hap_cluster_destroy(c);
    hap_graph_destroy(g);
  }
  if (progress)
    fprintf(stderr, "\r%*s\r", 100, "");
  if (rc == 0) {
    if (o->format == HAP_FORMAT_JSON)
      print_json(o, rows, n_rows, stdout);
    else if (o->format == HAP_FORMAT_CSV)
      print_csv(rows, n_rows);
    else
      print_table(rows, n_rows);
    if (o->format == HAP_FORMAT_TABLE)
      print_policies(rows, n_rows);
    for (int i = 0; i < n_rows && o->format == HAP_FORMAT_TABLE; i++)
      if (rows[i].details != NULL)
        fputs(rows[i].details, stdout);
    for (int i = 0; i < n_rows; i++)
      if (!rows[i].ok)
        rc = 1;
    if (o->report != NULL && write_report(o, rows, n_rows) != HAP_OK && rc == 0)
      rc = 1;
  }
  for (int i = 0; i < n_rows; i++)
    free(rows[i].details);
  free(rows);
  return rc;
}

/* --pipeline: the estimates (pipeline_report.h); what a pipeline cannot take is refused. */
static int run_pipeline(const opts *o, const char *const *specs, int n_specs, const char *strategy,
                        int n_sweeps, int batch_per_device) {
  if (o->plan != NULL || n_sweeps > 0 || batch_per_device > 0 || o->trace != NULL || o->tasks)
    return hap_report_usage(prog, -1,
                            "--pipeline takes a model, a cluster, --strategy, --policy, "
                            "--memory-limit and --format table|json (not --plan, --sweep, "
                            "--batch-per-device, --trace or --tasks)");
  if (o->format == HAP_FORMAT_CSV)
    return hap_report_usage(prog, -1, "--pipeline prints a table or json, not csv");
  hap_pipeline_report_args a = {.model = o->model,
                                .cluster = o->cluster,
                                .specs = specs,
                                .n_specs = n_specs,
                                .strategy = HAP_STRATEGY_HAP,
                                .policy = o->policy,
                                .memory_limit = o->memory_limit,
                                .format = o->format};
  if (strategy != NULL && hap_megatron_spec_is(strategy))
    a.megatron = strategy;
  else if (strategy != NULL && hap_strategy_parse(strategy, &a.strategy) != HAP_OK)
    return hap_report_usage(prog, -1,
                            "--pipeline: strategy '%s', expected hap, dp-ev, dp-cp or megatron-tp "
                            "(one: every stage's program)",
                            strategy);
  return hap_pipeline_report(prog, &a);
}

int main(int argc, char **argv) {
  enum {
    OPT_NO_FOLD = 256,
    OPT_TRACE_DEVICES,
    OPT_TASKS,
    OPT_POLICY,
    OPT_PIPELINE,
    OPT_CHAKRA,
    OPT_CHAKRA_IN,
    OPT_CHAKRA_PREFIX,
    OPT_REPORT
  };
  static const struct option long_opts[] = {
      {"cluster", required_argument, NULL, 'c'},
      {"strategy", required_argument, NULL, 's'},
      {"plan", required_argument, NULL, 'p'},
      {"sweep", required_argument, NULL, 'w'},
      {"trace", required_argument, NULL, 't'},
      {"trace-devices", required_argument, NULL, OPT_TRACE_DEVICES},
      {"format", required_argument, NULL, 'f'},
      {"memory-limit", required_argument, NULL, 'm'},
      {"policy", required_argument, NULL, OPT_POLICY},
      {"pipeline", required_argument, NULL, OPT_PIPELINE},
      {"no-fold", no_argument, NULL, OPT_NO_FOLD},
      {"tasks", no_argument, NULL, OPT_TASKS},
      {"chakra", required_argument, NULL, OPT_CHAKRA},
      {"chakra-in", required_argument, NULL, OPT_CHAKRA_IN},
      {"chakra-prefix", required_argument, NULL, OPT_CHAKRA_PREFIX},
      {"report", required_argument, NULL, OPT_REPORT},
      {"batch-per-device", required_argument, NULL, 'b'},
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  opts o = {.model = DEFAULT_MODEL,
            .cluster = DEFAULT_CLUSTER,
            .format = HAP_FORMAT_TABLE,
            .trace_devices = 64,
            .chakra_prefix = HAP_CHAKRA_DEFAULT_PREFIX,
            .policy = hap_policy_default()};
  const char *strategy = NULL, *chakra_in = NULL;
  const char *pipelines[HAP_PIPELINE_REPORT_MAX];
  int n_pipelines = 0;
  const char *sweeps[HAP_SWEEP_MAX_AXES + 1] = {0};
  int n_sweeps = 0, batch_per_device = 0; /* > 0: the batch is this x the devices */
  int c;
  long long v;
  hap_err err = {0};
  bool cluster_given = false;
  while ((c = getopt_long(argc, argv, "c:s:p:w:t:f:m:b:qhV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'c':
      o.cluster = optarg;
      cluster_given = true;
      break;
    case 's': strategy = optarg; break;
    case 'p': o.plan = optarg; break;
    case 'w':
      if (n_sweeps == HAP_SWEEP_MAX_AXES)
        return hap_report_usage(prog, -1, "at most %d --sweep axes", HAP_SWEEP_MAX_AXES);
      sweeps[n_sweeps++] = optarg;
      break;
    case 't': o.trace = optarg; break;
    case OPT_TRACE_DEVICES:
      if (hap_cli_parse_int("--trace-devices", optarg, 0, 65536, &v, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      o.trace_devices = (int)v;
      break;
    case 'f':
      if (hap_format_select(optarg, HAP_FORMATS_ALL, &o.format, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      break;
    case 'm':
      if (hap_parse_bytes(optarg, &o.memory_limit) != HAP_OK || o.memory_limit <= 0)
        return hap_report_usage(
            prog, -1, "--memory-limit wants a size such as 12G or 512M, got '%s'", optarg);
      break;
    case OPT_POLICY: {
      uint32_t given = 0;
      if (hap_policy_parse(optarg, &o.policy, &given, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "--%s", err.msg);
      o.forced |= given;
      o.policy_given = true;
      break;
    }
    case OPT_PIPELINE:
      if (n_pipelines == HAP_PIPELINE_REPORT_MAX)
        return hap_report_usage(prog, -1, "at most %d --pipeline options", HAP_PIPELINE_REPORT_MAX);
      pipelines[n_pipelines++] = optarg;
      break;
    case OPT_NO_FOLD: o.no_fold = true; break;
    case OPT_TASKS: o.tasks = true; break;
    case OPT_CHAKRA: o.chakra = optarg; break;
    case OPT_CHAKRA_IN: chakra_in = optarg; break;
    case OPT_REPORT: o.report = optarg; break;
    case OPT_CHAKRA_PREFIX:
      if (optarg[0] == '\0' || strchr(optarg, '/') != NULL)
        return hap_report_usage(prog, -1, "--chakra-prefix wants a file name prefix, got '%s'",
                                optarg);
      o.chakra_prefix = optarg;
      break;
    case 'b':
      if (hap_cli_parse_int("--batch-per-device", optarg, 1, 1000000, &v, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      batch_per_device = (int)v;
      break;
    case 'q': o.quiet = true; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("hap-sim %s\n", HAP_VERSION); return 0;
    default: fprintf(stderr, "Try '%s --help'.\n", prog); return 2;
    }
  }
  if (optind < argc - 1)
    return hap_report_usage(prog, -1, "more than one MODEL given");
  if (o.report != NULL && (chakra_in != NULL || n_pipelines > 0 ||
                           (strategy != NULL && hap_megatron_spec_is(strategy))))
    return hap_report_usage(prog, -1,
                            "--report draws the rows of a simulation or sweep: not with "
                            "--chakra-in, --pipeline or --strategy megatron");
  if (chakra_in != NULL) {
    if (optind < argc || strategy || o.plan || n_sweeps || n_pipelines || o.trace || o.chakra ||
        o.tasks || o.policy_given || batch_per_device || o.memory_limit > 0)
      return hap_report_usage(
          prog, -1,
          "--chakra-in takes --cluster, --chakra-prefix and --format table|json "
          "only (the traces are the program)");
    if (o.format == HAP_FORMAT_CSV)
      return hap_report_usage(prog, -1, "--chakra-in prints a table or json, not csv");
    return hap_chakra_report_replay(prog, chakra_in, o.chakra_prefix,
                                    cluster_given ? o.cluster : NULL, o.format);
  }
  bool bare = argc == 1;
  if (optind == argc - 1)
    o.model = argv[optind];
  if (strategy != NULL && hap_megatron_spec_is(strategy) && n_pipelines > 0)
    return hap_report_usage(prog, -1,
                            "--strategy megatron sets the pipeline itself (pp, v, mbs): not "
                            "--pipeline");
  if (o.chakra != NULL && (n_pipelines > 0 || (strategy && hap_megatron_spec_is(strategy))))
    return hap_report_usage(prog, -1, "--chakra exports a flat plan's simulation, not --pipeline");
  if (n_pipelines > 0 || (strategy != NULL && hap_megatron_spec_is(strategy)))
    return run_pipeline(&o, pipelines, n_pipelines, strategy, n_sweeps, batch_per_device);
  if (strategy == NULL || strcmp(strategy, "all") == 0) {
    /* the study's four; the seeds' planners (alpa) are asked for by name */
    o.strategies = (1 << HAP_STRATEGY_HAP) | (1 << HAP_STRATEGY_DP_EV) | (1 << HAP_STRATEGY_DP_CP) |
                   (1 << HAP_STRATEGY_MEGATRON_TP);
  } else {
    hap_strategy s;
    if (strncmp(strategy, "galvatron", 9) == 0 && (strategy[9] == '\0' || strategy[9] == ':'))
      return hap_report_usage(prog, -1,
                              "%s plans pipelines with its own search: make the plan with "
                              "hap-synth MODEL -c CLUSTER -s %s -o plan.json, then simulate it "
                              "with hap-sim --plan plan.json",
                              strategy, strategy);
    if (hap_strategy_parse(strategy, &s) != HAP_OK)
      return hap_report_usage(
          prog, -1,
          "unknown strategy '%s' (expected hap, dp-ev, dp-cp, megatron-tp, alpa, all or "
          "megatron[:...])",
          strategy);
    o.strategies = 1 << s;
  }
  if (o.plan != NULL && strategy != NULL)
    return hap_report_usage(prog, -1, "--plan and --strategy exclude each other");
  if (o.plan != NULL && n_sweeps > 0)
    return hap_report_usage(prog, -1,
                            "--plan cannot be swept: a plan is made for one graph and cluster");
  if (o.plan != NULL && o.policy_given)
    return hap_report_usage(prog, -1,
                            "--plan and --policy exclude each other: a plan carries "
                            "its policy");
  /* --plan without MODEL or --cluster: the ones hap-synth recorded in the plan */
  hap_plan_specs specs = {0};
  if (o.plan != NULL && (optind == argc || !cluster_given)) {
    const char *model = optind == argc ? NULL : o.model;
    const char *cluster = cluster_given ? o.cluster : NULL;
    if (hap_plan_default_specs(o.plan, &model, &cluster, "MODEL", "--cluster", &specs, &err) !=
        HAP_OK)
      return hap_report_usage(prog, -1, "%s", err.msg);
    o.model = model;
    o.cluster = cluster;
  }
  if (bare) {
    sweeps[n_sweeps++] = DEFAULT_SWEEP;
    batch_per_device = DEFAULT_BATCH_PER_DEVICE;
  }
  hap_sweep_config sc = {.model = o.model,
                         .cluster = o.cluster,
                         .cluster_is_profile = hap_is_hdf5_path(o.cluster),
                         .batch_per_device = batch_per_device,
                         .axes = sweeps,
                         .n_axes = n_sweeps};
  if (hap_sweep_init(&o.sweep, &sc, &err) != HAP_OK) {
    hap_plan_specs_free(&specs);
    return hap_report_usage(prog, -1, "%s", err.msg);
  }
  if (bare && !o.quiet)
    fprintf(stderr,
            "%s: the bundled study: %s on %s, hap vs dp-ev vs dp-cp vs megatron-tp, --sweep %s "
            "--batch-per-device %d (see --help)\n",
            prog, o.model, o.cluster, DEFAULT_SWEEP, DEFAULT_BATCH_PER_DEVICE);
  if (o.report != NULL && hap_atomic_probe(o.report, &err) != HAP_OK) {
    hap_plan_specs_free(&specs);
    hap_cli_error(prog, &err);
    return 1;
  }
  int rc = run(&o);
  hap_plan_specs_free(&specs); /* o.model and o.cluster may point into it */
  return rc;
}
