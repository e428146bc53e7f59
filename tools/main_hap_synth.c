/* hap-synth — synthesise a plan (the SPMD program and the sharding ratios) for a model on a
 * cluster, or build a baseline plan in the same form. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/json_write.h"
#include "hap_config.h"
#include "harness/format.h"
#include "harness/interrupt.h"
#include "harness/report.h"
#include "model/zoo.h"
#include "pipe/layouts.h"
#include "pipe/megatron.h"
#include "pipeline_report.h"
#include "plan/pipeline_io.h"
#include "plan/plan_io.h"
#include "simulate/plan_sim.h"
#include "store/cluster_open.h"
#include "synth/synth.h"

static const char *prog = "hap-synth";

static void usage(FILE *f) {
  fprintf(
      f, "Usage: hap-synth MODEL --cluster SPEC [OPTIONS]\n"
         "\n"
         "Find how to split MODEL across the devices of a cluster: the SPMD program (how each\n"
         "tensor is laid out and communicated) and the per-device sharding ratios that minimise\n"
         "the predicted iteration time (HAP: a search over Hoare triples alternating with a\n"
         "linear program over the ratios). Baselines come out as plans of the same form.\n"
         "\n"
         "MODEL    a zoo spec ('bert-base:layers=24') or a hap-graph file\n"
         "\n"
         "Options:\n"
         "  -c, --cluster SPEC    cluster spec ('paper-hetero:gpus_per_host=4'), hap-cluster\n"
         "                        JSON file or hap-profile .h5 file (required)\n"
         "  -s, --strategy S      hap (default), dp-ev (even batch split), dp-cp (batch split\n"
         "                        proportional to device speed) or megatron-tp (tensor parallel\n"
         "                        inside each host, data parallel across equal hosts);\n"
         "                        alpa is Alpa's intra-operator pass: every op's sharding and\n"
         "                        the resharding between them by an integer linear program,\n"
         "                        even ratios (docs/design-alpa.md);\n"
         "                        megatron[:tp=T,pp=P,dp=D,mbs=B,v=V,sp=on|off,recompute=R]\n"
         "                        is Megatron-LM's 3-D layout: P pipeline stages (1F1B,\n"
         "                        interleaved with V chunks), each tensor parallel over T\n"
         "                        consecutive devices (default a host's) and data parallel\n"
         "                        over D, B samples per micro-batch per replica, sequence\n"
         "                        parallelism on (default) or off;\n"
         "                        galvatron[:pp=P,tp=T] is Galvatron's search: pipeline\n"
         "                        stages x tensor x data parallelism, checkpointing, and\n"
         "                        per layer plain or sharded data parallelism by a dynamic\n"
         "                        program under the memory limit (docs/design-galvatron.md)\n"
         "  -o, --output FILE     write the plan (hap-plan JSON; '-' = stdout)\n"
         "      --compare         also build dp-ev, dp-cp and megatron-tp; print each plan's "
         "estimate\n"
         "                        and simulated time, and hap's speedups by the simulated times\n"
         "      --compare-seeds   with --compare, also the seeds' planners: alpa (its one-stage\n"
         "                        program) and galvatron (its pipeline, simulated stage by stage)\n"
         "      --no-rescore      choose among candidate programs by the synthesizer's own\n"
         "                        estimate instead of simulating them (hap-sim's model)\n"
         "      --sfb WHERE       sufficient-factor broadcasting of linear weights' gradients\n"
         "                        (storage sfb, docs/design-sfb.md) where the search finds it\n"
         "                        cheaper than the all-reduce: auto (default: hap only), off,\n"
         "                        or all (also dp-ev and dp-cp)\n"
         "  -e, --explain         print every step: layouts, cost and why\n"
         "  -f, --format FMT      summary as table (default) or json\n"
         "  -r, --max-rounds N    search/LP alternations (default 8)\n"
         "  -m, --memory-limit B  bytes per device, e.g. 12G, 512M (default: each device's\n"
         "                        memory). When the plan does not fit, the policy fields not\n"
         "                        forced by --policy change until one does: ZeRO stage 0..3,\n"
         "                        then recompute selective, full, then micro-batches 2, 4, ...\n"
         "      --policy SPEC     how the model trains (docs/memory.md), key=value,... of\n"
         "                        precision=fp32|fp16|bf16, optimizer=sgd|momentum|adam|adamw,\n"
         "                        zero=0..3, recompute=none|selective|full, micro_batches=N,\n"
         "                        grad_accum=half|fp32 (default fp32, sgd, 0, none, 1, half);\n"
         "                        the fields given are forced, the others may be steered.\n"
         "                        With --policy (or a steered policy) the summary names the\n"
         "                        policy and breaks memory down per device class\n"
         "      --pipeline SPEC   cut MODEL into pipeline stages instead: stages=P[,schedule=\n"
         "                        gpipe|1f1b|interleaved][,chunks=V][,micro_batches=M]; P equal\n"
         "                        groups of consecutive devices, each stage's program by\n"
         "                        --strategy; prints the stages and -o writes the pipelined\n"
         "                        plan (hap-plan 2.0, docs/formats.md); auto compares 1F1B\n"
         "                        pipelines of every stage count that divides the devices\n"
         "                        (<= 16, one stage included) and one stage per device\n"
         "                        model of a mixed cluster, and writes the fastest whose\n"
         "                        stages all fit; groups=D1+D2+... sets unequal groups\n"
         "      --one-stage       only the one-stage program: with strategy hap, a model\n"
         "                        whose training state does not fit one device is also\n"
         "                        planned as 3-D layouts (tensor parallel over a host's\n"
         "                        devices or fewer x pipeline x data parallel, ZeRO-1,\n"
         "                        recomputation where\n"
         "                        needed) and the fastest that fits wins, and with strategy\n"
         "                        alpa sliced into stages by its inter-operator pass; this\n"
         "                        turns that off\n"
         "  -q, --quiet           no summary (errors only)\n"
         "  -h, --help            this help\n"
         "  -V, --version         print the version\n"
         "\n"
         "Ctrl-C stops the search and keeps the best program found so far.\n"
         "Exit status: 0 ok, 1 failure, 2 usage error.\n");
}

typedef struct opts {
  const char *model, *cluster, *output;
  const char *pipeline;  /* --pipeline SPEC, or NULL */
  const char *megatron;  /* --strategy megatron[:...] (pipe/megatron.h), or NULL */
  const char *galvatron; /* --strategy galvatron[:...] (pipe/galvatron.h), or NULL */
  bool one_stage;        /* --one-stage: no 3-D layouts for models too big for one device */
  hap_strategy strategy;
  hap_format format;
  bool explain, compare, quiet, no_rescore;
  bool compare_seeds; /* --compare-seeds: also alpa and galvatron */
  hap_sfb_use sfb;
  int max_rounds;
  double memory_limit;
  hap_train_policy policy; /* --policy over the default */
  uint32_t forced;         /* HAP_POLICY_* bits --policy set */
  bool policy_given;
} opts;

static void progress(void *ctx, int round, int64_t expanded, double best_s) {
  (void)ctx;
  fprintf(stderr, "\r%s: round %d, %lld states expanded, bound %.6f s   ", prog, round + 1,
          (long long)expanded, best_s);
}

static const char *step_what(const hap_plan *p, const hap_graph *g, const hap_step *s, char *buf,
                             size_t len) {
  char a[4], b[4];
  switch (s->kind) {
  case HAP_STEP_SOURCE:
    snprintf(buf, len, "source  %-36s %-4s %s", g->tensors[s->tensor].name,
             hap_layout_name(s->to, a), hap_storage_name(s->storage));
    break;
  case HAP_STEP_COMM:
    snprintf(buf, len, "comm    %-36s %s->%s %s (%s)", g->tensors[s->tensor].name,
             hap_layout_name(s->from, a), hap_layout_name(s->to, b), hap_comm_op_name(s->comm),
             hap_coll_impl_name(s->impl));
    break;
  default: {
    size_t off = (size_t)snprintf(buf, len, "compute %-36s %s [", g->nodes[s->node].name,
                                  s->variant.name ? s->variant.name : "?");
    const hap_node *n = &g->nodes[s->node];
    for (int i = 0; i < n->n_inputs && off < len; i++)
      off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? " " : "",
                              hap_layout_name(s->variant.in[i], a));
    for (int o = 0; o < n->n_outputs && off < len; o++)
      off += (size_t)snprintf(buf + off, len - off, "%s%s", o ? " " : " -> ",
                              hap_layout_name(s->variant.out[o], a));
    if (off < len)
      snprintf(buf + off, len - off, "]");
  }
  }
  (void)p;
  return buf;
}

/* Whether to show the policy and the memory breakdown: --policy was given, or steering chose a
 * policy other than the default (default runs print what they always printed). */
static bool show_policy(const opts *o, const hap_plan *p) {
  return o->policy_given || !hap_policy_is_default(&p->policy);
}

static double limit_of(const opts *o, const hap_cluster *c, int32_t d) {
  return o->memory_limit > 0 ? o->memory_limit : c->devices[d].memory_bytes;
}

/* The device classes of the breakdown: runs of devices of one model; each shown by its fullest
 * device. *end gets the run's end, the fullest device is returned. */
static int32_t memory_class(const hap_plan *p, const hap_cluster *c, int32_t i, int32_t *end) {
  int32_t j = i + 1, top = i;
  for (; j < c->n_devices && strcmp(c->devices[j].model, c->devices[i].model) == 0; j++)
    if (p->device_memory_bytes[j] > p->device_memory_bytes[top])
      top = j;
  *end = j;
  return top;
}

static void print_policy(const hap_plan *p, const hap_steer_report *rep) {
  char buf[160], brief[160];
  hap_err err = {0};
  if (hap_policy_format(&p->policy, buf, sizeof buf, &err) != HAP_OK)
    snprintf(buf, sizeof buf, "?");
  printf("policy      %s\n", buf);
  if (rep->steered)
    printf("            steered to fit memory: %s (%d candidates, %.3f s)\n",
           hap_policy_brief(&p->policy, brief, sizeof brief), rep->tried, rep->seconds);
}

/* Memory per device class, by component (docs/memory.md). */
static void print_memory(const opts *o, const hap_plan *p, const hap_cluster *c) {
  char b[HAP_MEMORY_PARTS + 2][32];
  printf("\nmemory per device (bytes held at the peak by the fullest device of each class)\n");
  printf("%-18s %5s %11s %11s %11s %11s %11s %11s %11s %11s\n", "devices", "count", "parameters",
         "gradients", "optimizer", "activations", "comm bufs", "workspace", "total", "limit");
  for (int32_t i = 0, j; i < c->n_devices; i = j) {
    int32_t d = memory_class(p, c, i, &j);
    const hap_memory_breakdown *m = &p->device_memory[d];
    for (int k = 0; k < HAP_MEMORY_PARTS; k++)
      hap_fmt_bytes(hap_memory_part_get(m, k), b[k], sizeof b[k]);
    printf("%-18s %5d %11s %11s %11s %11s %11s %11s %11s %11s\n", c->devices[d].model, j - i, b[0],
           b[1], b[2], b[3], b[4], b[5],
           hap_fmt_bytes(p->device_memory_bytes[d], b[6], sizeof b[6]),
           hap_fmt_bytes(limit_of(o, c, d), b[7], sizeof b[7]));
  }
}

static void print_table(const opts *o, const hap_plan *p, const hap_graph *g, const hap_cluster *c,
                        const hap_synth_stats *st, const hap_steer_report *rep) {
  char a[64], b[64], d[64];
  printf("model       %s\n", g->source ? g->source : g->name);
  printf("cluster     %s (%d devices on %d hosts)\n", c->source ? c->source : c->name, c->n_devices,
         c->n_hosts);
  printf("strategy    %s: %d steps, %d segment%s\n", p->strategy, p->n_steps, p->n_segments,
         p->n_segments == 1 ? "" : "s");
  if (p->replicas > 1)
    printf("groups      %d replicas of %d devices: the program inside each, the batch split "
           "evenly across\n",
           p->replicas, p->group_size);
  if (show_policy(o, p))
    print_policy(p, rep);
  printf("predicted   %.6f s per iteration\n", p->predicted_iteration_s);
  printf("search      %d round%s, %lld states expanded, %.3f s%s\n", st->rounds,
         st->rounds == 1 ? "" : "s", (long long)st->states_expanded, st->seconds,
         st->interrupted ? " (interrupted: best so far)" : "");
  /* devices grouped by model, with the first segment's ratio */
  printf("\n%-18s %5s %10s %11s %11s %12s\n", "devices", "count", "ratio", "compute s", "comm s",
         "memory");
  const double *ratio = p->ratios; /* of a device: ratio[i % group_size] */
  int32_t gs = p->group_size;
  for (int32_t i = 0; i < c->n_devices;) {
    int32_t j = i + 1;
    while (j < c->n_devices && strcmp(c->devices[j].model, c->devices[i].model) == 0 &&
           ratio[j % gs] == ratio[i % gs])
      j++;
    printf("%-18s %5d %10.5f %11.6f %11.6f %12s\n", c->devices[i].model, j - i, ratio[i % gs],
           p->device_compute_s[i], p->device_comm_s[i],
           hap_fmt_bytes(p->device_memory_bytes[i], a, sizeof a));
    i = j;
  }
  if (show_policy(o, p) && p->memory_recorded)
    print_memory(o, p, c);
  /* what the program does */
  int n_comm = 0, by_variant = 0;
  double comm_s = 0, comp_s = 0, src_s = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind == HAP_STEP_COMM) {
      n_comm++;
      comm_s += s->predicted_s;
    } else if (s->kind == HAP_STEP_COMPUTE) {
      comp_s += s->predicted_s;
      by_variant += s->variant.name && strcmp(s->variant.name, "replicated") != 0;
    } else {
      src_s += s->predicted_s;
    }
  }
  printf("\nprogram     %d of %d ops sharded, %d activation communications\n", by_variant,
         g->n_nodes, n_comm);
  printf("time        compute %s + activation communication %s + parameter sync %s\n",
         hap_fmt_si(comp_s, "s", a, sizeof a), hap_fmt_si(comm_s, "s", b, sizeof b),
         hap_fmt_si(src_s, "s", d, sizeof d));
  if (o->explain) {
    printf("\n%5s %12s  %s\n", "step", "seconds", "what");
    for (int32_t k = 0; k < p->n_steps; k++) {
      char what[512];
      printf("%5d %12.6f  %s\n", k, p->steps[k].predicted_s,
             step_what(p, g, &p->steps[k], what, sizeof what));
    }
  }
}

/* --compare: the baselines, and every plan's iteration as hap-sim simulates it (HUGE_VAL without
 * the simulator: --no-rescore, or a plan it cannot run). Speedups compare the simulated times when
 * both are known, as hap-sim's do, else the synthesizer's estimates. */
typedef struct comparison {
  hap_plan *base[HAP_STRATEGY_COUNT];
  int n_base;
  double hap_sim_s;
  double base_sim_s[HAP_STRATEGY_COUNT];
  /* --compare-seeds: galvatron's chosen pipeline (simulated stage by stage), when it has one */
  bool galvatron;
  double galvatron_s;
  char galvatron_plan[200];
} comparison;

/* hap's speedup over baseline i; *simulated says which times it compares. */
static double speedup_of(const comparison *cmp, const hap_plan *p, int i, bool *simulated) {
  *simulated = isfinite(cmp->hap_sim_s) && isfinite(cmp->base_sim_s[i]);
  return *simulated ? cmp->base_sim_s[i] / cmp->hap_sim_s
                    : cmp->base[i]->predicted_iteration_s / p->predicted_iteration_s;
}

/* A baseline --compare could not build, and why. */
typedef struct refusal {
  const char *strategy;
  hap_err err;
} refusal;

/* "policy", "steered" and "memory" (per device class) for --format json, when shown. */
static void json_policy(hap_jw *w, const opts *o, const hap_plan *p, const hap_cluster *c,
                        const hap_steer_report *rep) {
  const hap_train_policy *pol = &p->policy;
  hap_jw_key(w, "policy");
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "precision");
  hap_jw_str(w, hap_precision_name(pol->precision));
  hap_jw_key(w, "optimizer");
  hap_jw_str(w, hap_optimizer_name(pol->optimizer));
  hap_jw_key(w, "zero");
  hap_jw_int(w, pol->zero);
  hap_jw_key(w, "recompute");
  hap_jw_str(w, hap_recompute_name(pol->recompute));
  hap_jw_key(w, "micro_batches");
  hap_jw_int(w, pol->micro_batches);
  hap_jw_key(w, "grad_accum");
  hap_jw_str(w, hap_grad_accum_name(pol->grad_accum));
  hap_jw_end_object(w);
  hap_jw_key(w, "steered");
  hap_jw_bool(w, rep->steered);
  hap_jw_key(w, "policy_candidates");
  hap_jw_int(w, rep->tried);
  if (!p->memory_recorded)
    return;
  hap_jw_key(w, "memory");
  hap_jw_begin_array(w);
  for (int32_t i = 0, j; i < c->n_devices; i = j) {
    int32_t d = memory_class(p, c, i, &j);
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "model");
    hap_jw_str(w, c->devices[d].model);
    hap_jw_key(w, "count");
    hap_jw_int(w, j - i);
    hap_jw_key(w, "fullest_device");
    hap_jw_str(w, c->devices[d].name);
    for (int k = 0; k < HAP_MEMORY_PARTS; k++) {
      hap_jw_key(w, hap_memory_part_name(k));
      hap_jw_double(w, hap_memory_part_get(&p->device_memory[d], k));
    }
    hap_jw_key(w, "total");
    hap_jw_double(w, p->device_memory_bytes[d]);
    hap_jw_key(w, "limit");
    hap_jw_double(w, limit_of(o, c, d));
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
}

static void print_json(const opts *o, const hap_plan *p, const hap_cluster *c,
                       const hap_synth_stats *st, const hap_steer_report *rep,
                       const comparison *cmp, const refusal *refused, int n_refused) {
  hap_jw w;
  hap_jw_init(&w, stdout, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "strategy");
  hap_jw_str(&w, p->strategy);
  hap_jw_key(&w, "predicted_iteration_s");
  hap_jw_double(&w, p->predicted_iteration_s);
  if (isfinite(cmp->hap_sim_s)) {
    hap_jw_key(&w, "simulated_iteration_s");
    hap_jw_double(&w, cmp->hap_sim_s);
  }
  hap_jw_key(&w, "steps");
  hap_jw_int(&w, p->n_steps);
  hap_jw_key(&w, "rounds");
  hap_jw_int(&w, st->rounds);
  hap_jw_key(&w, "states_expanded");
  hap_jw_int(&w, st->states_expanded);
  hap_jw_key(&w, "seconds");
  hap_jw_double(&w, st->seconds);
  hap_jw_key(&w, "interrupted");
  hap_jw_bool(&w, st->interrupted);
  if (show_policy(o, p))
    json_policy(&w, o, p, c, rep);
  hap_jw_key(&w, "baselines");
  hap_jw_begin_array(&w);
  for (int i = 0; i < cmp->n_base; i++) {
    const hap_plan *b = cmp->base[i];
    bool simulated;
    double speedup = speedup_of(cmp, p, i, &simulated);
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "strategy");
    hap_jw_str(&w, b->strategy);
    hap_jw_key(&w, "predicted_iteration_s");
    hap_jw_double(&w, b->predicted_iteration_s);
    if (isfinite(cmp->base_sim_s[i])) {
      hap_jw_key(&w, "simulated_iteration_s");
      hap_jw_double(&w, cmp->base_sim_s[i]);
    }
    hap_jw_key(&w, "speedup"); /* simulated where both are, else estimated */
    hap_jw_double(&w, speedup);
    hap_jw_key(&w, "speedup_estimated");
    hap_jw_double(&w, b->predicted_iteration_s / p->predicted_iteration_s);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  if (cmp->galvatron) {
    hap_jw_key(&w, "galvatron");
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "plan");
    hap_jw_str(&w, cmp->galvatron_plan);
    hap_jw_key(&w, "simulated_iteration_s"); /* its pipeline, stage by stage */
    hap_jw_double(&w, cmp->galvatron_s);
    if (isfinite(cmp->hap_sim_s)) {
      hap_jw_key(&w, "speedup");
      hap_jw_double(&w, cmp->galvatron_s / cmp->hap_sim_s);
    }
    hap_jw_end_object(&w);
  }
  hap_jw_key(&w, "refused_baselines");
  hap_jw_begin_array(&w);
  for (int i = 0; i < n_refused; i++) {
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "strategy");
    hap_jw_str(&w, refused[i].strategy);
    hap_jw_key(&w, "reason");
    hap_jw_str(&w, refused[i].err.msg);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_end_object(&w);
  hap_jw_finish(&w);
}

/* How far above the best 3-D layout's simulated time the one-stage search still looks: its
 * estimate leaves out overlap, and its first round splits evenly, so on a cluster of unequal
 * devices it starts up to their speed ratio slower than where the ratio LP takes it. */
#define LAYOUT_BOUND 1.5

/* The fastest device's sustained FLOP/s over the slowest's, in the policy's compute precision. */
static double speed_spread(const hap_cluster *c, const hap_train_policy *pol) {
  hap_dtype dt = hap_policy_compute_dtype(pol);
  double lo = HUGE_VAL, hi = 0;
  for (int32_t d = 0; d < c->n_devices; d++) {
    double f = c->devices[d].sustained_flops[dt] > 0 ? c->devices[d].sustained_flops[dt]
                                                     : c->devices[d].sustained_flops[HAP_F32];
    lo = fmin(lo, f);
    hi = fmax(hi, f);
  }
  return lo > 0 && hi >= lo ? hi / lo : 1;
}

/* The hap strategy chose a 3-D layout over the one-stage plan (`one`: NULL when the bounded
 * search found none under it; one_s its simulated time, s): -o writes its pipelined plan, the
 * report says why. 0 or 1. */
static int report_layout(const opts *o, const hap_graph *g, const hap_cluster *c,
                         const hap_layout_search *ls, const hap_plan *one, double one_s,
                         const hap_synth_stats *st, hap_err *err) {
  if (o->output != NULL &&
      (hap_pipeline_set_specs(ls->estimate->pipeline, o->model, o->cluster) != HAP_OK ||
       hap_pipeline_write_file(ls->estimate->pipeline, g, c, o->output, err) != HAP_OK))
    return 1;
  char line[256];
  if (one != NULL)
    snprintf(line, sizeof line, "%.3f s per iteration: slower (search %.3f s)", one_s, st->seconds);
  else if (st->over_bound)
    snprintf(line, sizeof line,
             "no program estimated under %.1f times the chosen layout's time (search cut short, "
             "%.3f s)",
             LAYOUT_BOUND * speed_spread(c, &o->policy), st->seconds);
  else
    snprintf(line, sizeof line, "none: %.200s", err->msg);
  hap_err_clear(err);
  bool plan_on_stdout = o->output != NULL && strcmp(o->output, "-") == 0;
  if (!o->quiet && !plan_on_stdout)
    hap_layout_report(ls, g, o->model, o->cluster, line, o->explain, o->format);
  return 0;
}

/* alpa's inter-operator pass ran and lost to one stage: what it found, on stderr. */
static void say_inter(const hap_alpa_inter *inter) {
  for (int i = 0; i < inter->n_cand; i++) {
    const hap_alpa_candidate *cd = &inter->cand[i];
    char peak[32];
    if (cd->iteration_s > 0)
      fprintf(stderr,
              "%s: alpa pipeline %d stages x %d devices, %d micro-batches: %.3f s, %s%s%s\n", prog,
              (int)cd->stages, (int)cd->group_devices, (int)cd->micro_batches, cd->iteration_s,
              cd->fits ? "slower than one stage" : "a stage needs ",
              cd->fits ? "" : hap_fmt_bytes(cd->peak_bytes, peak, sizeof peak),
              cd->fits ? "" : ", over its memory");
    else
      fprintf(stderr, "%s: alpa pipeline %d stages x %d devices: %s\n", prog, (int)cd->stages,
              (int)cd->group_devices, cd->why);
  }
}

/* The same for alpa's inter-operator pass. */
static int report_alpa(const opts *o, const hap_graph *g, const hap_cluster *c,
                       const hap_alpa_inter *inter, const hap_plan *one, const hap_synth_stats *st,
                       hap_err *err) {
  if (o->output != NULL &&
      (hap_pipeline_set_specs(inter->estimate->pipeline, o->model, o->cluster) != HAP_OK ||
       hap_pipeline_write_file(inter->estimate->pipeline, g, c, o->output, err) != HAP_OK))
    return 1;
  char line[256];
  if (one != NULL)
    snprintf(line, sizeof line, "%.3f s per iteration: slower (search %.3f s)",
             one->predicted_iteration_s, st->seconds);
  else
    snprintf(line, sizeof line, "none: %.200s", err->msg);
  hap_err_clear(err);
  bool plan_on_stdout = o->output != NULL && strcmp(o->output, "-") == 0;
  if (!o->quiet && !plan_on_stdout)
    hap_alpa_report(inter, g, o->model, o->cluster, line, o->format);
  return 0;
}

/* --compare-seeds: galvatron's plan (pipe/galvatron.h) beside hap's: a flat one simulated like
 * the baselines, a pipeline by its stage-by-stage simulation. Nothing when it finds none (said on
 * stderr). */
static void compare_galvatron(const opts *o, const hap_graph *g, const hap_cluster *c,
                              comparison *cmp) {
  hap_galvatron *gs = calloc(1, sizeof *gs);
  if (gs == NULL)
    return;
  hap_synth_options so = {.memory_limit_bytes = o->memory_limit, .policy = o->policy};
  hap_err err = {0};
  if (hap_galvatron_search(g, c, &so, o->forced, NULL, gs, &err) == HAP_OK && gs->best >= 0) {
    const hap_pipeline *pl = gs->estimate->pipeline;
    cmp->galvatron = true;
    cmp->galvatron_s = pl->n_stages == 1 && !o->no_rescore
                           ? hap_plan_sim_rescore(NULL, pl->stages[0].plan, g, c)
                           : gs->estimate->sim->makespan_s;
    hap_galv_candidate_describe(&gs->cand[gs->best], gs->layers, cmp->galvatron_plan,
                                sizeof cmp->galvatron_plan);
  } else if (!o->quiet) {
    fprintf(stderr, "%s: no galvatron baseline: %s\n", prog,
            err.msg[0] ? err.msg : "no candidate fits the memory limit");
  }
  hap_galvatron_free(gs);
  free(gs);
}

static int run(const opts *o) {
  hap_err err = {0};
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_plan *plan = NULL;
  comparison cmp = {.n_base = 0, .hap_sim_s = HUGE_VAL};
  int n_refused = 0, rc = 1;
  refusal refused[HAP_STRATEGY_COUNT];
  hap_layout_search layouts = {.best = -1};
  hap_alpa_inter inter = {.best = -1};
  if (hap_model_load(o->model, &g, &err) != HAP_OK ||
      hap_cluster_open(o->cluster, &c, &err) != HAP_OK)
    goto out;
  hap_synth_options so = {.strategy = o->strategy,
                          .max_rounds = o->max_rounds,
                          .memory_limit_bytes = o->memory_limit,
                          .interrupt = hap_interrupt_on_sigint(),
                          .rescore = o->no_rescore ? NULL : hap_plan_sim_rescore,
                          .policy = o->policy,
                          .sfb = o->sfb};
  bool tty = hap_cli_progress_enabled(stderr, o->quiet);
  if (tty)
    so.progress = progress;
  hap_synth_stats st;
  hap_steer_report rep;
  /* a model whose training state does not fit one device: 3-D layouts first, and the one-stage
   * search bounded by the best of them (pipe/layouts.h) */
  if (o->strategy == HAP_STRATEGY_HAP && !o->compare && !o->one_stage &&
      hap_layouts_needed(g, c, &so)) {
    if (tty)
      fprintf(stderr, "\rsearching 3-D layouts ...");
    if (hap_layouts_search(g, c, &so, o->forced, &layouts, &err) != HAP_OK)
      goto out;
    /* the synthesizer's own estimate leaves out overlap (a data-parallel program's gradient
     * synchronisation hides behind the backward pass), so a one-stage program estimated up to
     * LAYOUT_BOUND times the layout's simulated time may still simulate faster */
    if (layouts.best >= 0)
      so.cost_bound_s =
          LAYOUT_BOUND * speed_spread(c, &so.policy) * layouts.rows[layouts.best].iteration_s;
  }
  /* alpa: its inter-operator pass for such a model (pipe/alpa_inter.h) */
  if (o->strategy == HAP_STRATEGY_ALPA && !o->compare && !o->one_stage &&
      hap_layouts_needed(g, c, &so)) {
    if (tty)
      fprintf(stderr, "\ralpa: slicing stages and sub-meshes ...");
    if (hap_alpa_inter_search(g, c, &so, o->forced, &inter, &err) != HAP_OK)
      goto out;
  }
  hap_status s = hap_synthesize_steered(g, c, &so, o->forced, &plan, &st, &rep, &err);
  if (tty)
    fprintf(stderr, "\r%*s\r", 70, "");
  /* the one-stage plan against the layout, both simulated (the layout stage by stage) */
  double one_stage_s = HUGE_VAL;
  if (s == HAP_OK)
    one_stage_s =
        o->no_rescore ? plan->predicted_iteration_s : hap_plan_sim_rescore(NULL, plan, g, c);
  if (layouts.best >= 0 && one_stage_s > layouts.rows[layouts.best].iteration_s) {
    rc = report_layout(o, g, c, &layouts, s == HAP_OK ? plan : NULL, one_stage_s, &st, &err);
    goto out;
  }
  if (inter.best >= 0 &&
      (s != HAP_OK || plan->predicted_iteration_s > inter.cand[inter.best].iteration_s)) {
    rc = report_alpa(o, g, c, &inter, s == HAP_OK ? plan : NULL, &st, &err);
    goto out;
  }
  if (s != HAP_OK)
    goto out;
  if (!o->quiet && inter.n_cand > 0)
    say_inter(&inter);
  if (o->compare && o->strategy == HAP_STRATEGY_HAP) {
    if (!o->no_rescore)
      cmp.hap_sim_s = hap_plan_sim_rescore(NULL, plan, g, c);
    int last = o->compare_seeds ? HAP_STRATEGY_ALPA : HAP_STRATEGY_MEGATRON_TP;
    for (int k = HAP_STRATEGY_DP_EV; k <= last; k++) {
      hap_synth_options bo = {
          .strategy = (hap_strategy)k, .memory_limit_bytes = o->memory_limit, .policy = o->policy};
      hap_synth_stats bs;
      hap_err berr = {0};
      if (hap_synthesize_steered(g, c, &bo, o->forced, &cmp.base[cmp.n_base], &bs, NULL, &berr) ==
          HAP_OK) {
        cmp.base_sim_s[cmp.n_base] =
            o->no_rescore ? HUGE_VAL : hap_plan_sim_rescore(NULL, cmp.base[cmp.n_base], g, c);
        cmp.n_base++;
        continue;
      }
      refused[n_refused].strategy = hap_strategy_name((hap_strategy)k);
      refused[n_refused++].err = berr;
      if (!o->quiet)
        fprintf(stderr, "%s: no %s baseline: %s\n", prog, hap_strategy_name((hap_strategy)k),
                berr.msg);
    }
  }
  if (o->compare && o->compare_seeds && o->strategy == HAP_STRATEGY_HAP)
    compare_galvatron(o, g, c, &cmp);
  if (o->output != NULL && hap_plan_specs_set(&plan->specs, o->model, o->cluster) != HAP_OK) {
    hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  if (o->output != NULL && hap_plan_write_file(plan, g, c, o->output, &err) != HAP_OK)
    goto out;
  bool plan_on_stdout = o->output != NULL && strcmp(o->output, "-") == 0;
  if (!o->quiet && !plan_on_stdout) {
    if (o->format == HAP_FORMAT_JSON) {
      print_json(o, plan, c, &st, &rep, &cmp, refused, n_refused);
    } else {
      print_table(o, plan, g, c, &st, &rep);
      if (cmp.n_base > 0 && isfinite(cmp.hap_sim_s))
        printf("simulated   %.6f s per iteration (hap-sim, overlap included: the speedups below "
               "compare simulated times)\n",
               cmp.hap_sim_s);
      for (int i = 0; i < cmp.n_base; i++) {
        const hap_plan *b = cmp.base[i];
        char pb[160];
        bool simulated;
        double speedup = speedup_of(&cmp, plan, i, &simulated);
        if (simulated)
          printf("vs %-8s %.6f s estimated, %.6f s simulated: %.2fx speedup", b->strategy,
                 b->predicted_iteration_s, cmp.base_sim_s[i], speedup);
        else
          printf("vs %-8s %.6f s: %.2fx speedup", b->strategy, b->predicted_iteration_s, speedup);
        if (!hap_policy_equal(&b->policy, &plan->policy))
          printf(" (policy %s)", hap_policy_brief(&b->policy, pb, sizeof pb));
        printf("\n");
      }
      if (cmp.galvatron && isfinite(cmp.hap_sim_s))
        printf("vs %-8s %.6f s simulated (%s; a pipeline stage by stage): %.2fx speedup\n",
               "galvatron", cmp.galvatron_s, cmp.galvatron_plan, cmp.galvatron_s / cmp.hap_sim_s);
    }
  }
  rc = 0;
out:
  if (rc != 0)
    hap_cli_error(prog, &err);
  hap_plan_destroy(plan);
  hap_layouts_free(&layouts);
  hap_alpa_inter_free(&inter);
  for (int i = 0; i < cmp.n_base; i++)
    hap_plan_destroy(cmp.base[i]);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return rc;
}

/* --strategy galvatron: its search (pipe/galvatron.h), the report, -o the chosen pipeline (a
 * flat plan when it has one stage). */
static int run_galvatron(const opts *o) {
  hap_err err = {0};
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_galvatron *gs = calloc(1, sizeof *gs);
  int rc = 1;
  if (gs == NULL) {
    hap_err_set(&err, HAP_ENOMEM, "out of memory");
    goto out;
  }
  gs->best = -1;
  hap_galvatron_spec pin;
  if (hap_galvatron_spec_parse(o->galvatron, &pin, &err) != HAP_OK) {
    free(gs);
    return hap_report_usage(prog, -1, "%s", err.msg);
  }
  if (hap_model_load(o->model, &g, &err) != HAP_OK ||
      hap_cluster_open(o->cluster, &c, &err) != HAP_OK)
    goto out;
  hap_synth_options so = {
      .memory_limit_bytes = o->memory_limit, .policy = o->policy, .sfb = o->sfb};
  bool tty = hap_cli_progress_enabled(stderr, o->quiet);
  if (tty)
    fprintf(stderr, "\rgalvatron: searching stages, tensor parallelism and sharding ...");
  hap_status s = hap_galvatron_search(g, c, &so, o->forced, &pin, gs, &err);
  if (tty)
    fprintf(stderr, "\r%*s\r", 70, "");
  if (s != HAP_OK)
    goto out;
  if (gs->best < 0) {
    /* nothing fits: the leanest candidate and what it needed */
    const hap_galv_candidate *lean = NULL;
    for (int i = 0; i < gs->n_cand; i++)
      if (gs->cand[i].over_memory && (lean == NULL || gs->cand[i].model_bytes < lean->model_bytes))
        lean = &gs->cand[i];
    char d[200];
    if (lean != NULL) {
      hap_galv_candidate_describe(lean, gs->layers, d, sizeof d);
      hap_err_set(&err, HAP_EINVAL,
                  "galvatron: no candidate fits the memory limit: the leanest (%s): %s", d,
                  lean->why);
    } else if (gs->n_cand > 0) {
      hap_galv_candidate_describe(&gs->cand[0], gs->layers, d, sizeof d);
      hap_err_set(&err, HAP_EINVAL, "galvatron: no candidate has a plan: %s: %s", d,
                  gs->cand[0].why);
    } else {
      hap_err_set(&err, HAP_EINVAL,
                  "galvatron: the batch of %lld samples splits over no candidate's replicas",
                  (long long)hap_pipe_batch_of(g));
    }
    goto out;
  }
  if (o->output != NULL &&
      (hap_pipeline_set_specs(gs->estimate->pipeline, o->model, o->cluster) != HAP_OK ||
       hap_pipeline_write_file(gs->estimate->pipeline, g, c, o->output, &err) != HAP_OK))
    goto out;
  bool plan_on_stdout = o->output != NULL && strcmp(o->output, "-") == 0;
  if (!o->quiet && !plan_on_stdout)
    hap_galvatron_report(gs, g, o->model, o->cluster, o->format);
  rc = 0;
out:
  if (rc != 0)
    hap_cli_error(prog, &err);
  hap_galvatron_free(gs);
  free(gs);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return rc;
}

/* --pipeline: the stages' programs and the schedule's iteration (pipeline_report.h). */
static int run_pipeline(const opts *o) {
  if (o->compare || o->explain || o->max_rounds > 0)
    return hap_report_usage(prog, -1,
                            "--pipeline takes --strategy, --policy, --memory-limit, --format, -o "
                            "and --quiet (not --compare, --explain or --max-rounds)");
  const char *specs[1] = {o->pipeline != NULL ? o->pipeline : o->megatron};
  hap_pipeline_report_args a = {.model = o->model,
                                .cluster = o->cluster,
                                .specs = specs,
                                .n_specs = 1,
                                .strategy = o->strategy,
                                .megatron = o->megatron,
                                .policy = o->policy,
                                .memory_limit = o->memory_limit,
                                .format = o->format,
                                .output = o->output,
                                .quiet = o->quiet};
  return hap_pipeline_report(prog, &a);
}

int main(int argc, char **argv) {
  enum {
    OPT_COMPARE = 256,
    OPT_COMPARE_SEEDS,
    OPT_NO_RESCORE,
    OPT_POLICY,
    OPT_PIPELINE,
    OPT_ONE_STAGE,
    OPT_SFB
  };
  static const struct option long_opts[] = {{"cluster", required_argument, NULL, 'c'},
                                            {"strategy", required_argument, NULL, 's'},
                                            {"output", required_argument, NULL, 'o'},
                                            {"compare", no_argument, NULL, OPT_COMPARE},
                                            {"compare-seeds", no_argument, NULL, OPT_COMPARE_SEEDS},
                                            {"no-rescore", no_argument, NULL, OPT_NO_RESCORE},
                                            {"sfb", required_argument, NULL, OPT_SFB},
                                            {"explain", no_argument, NULL, 'e'},
                                            {"format", required_argument, NULL, 'f'},
                                            {"max-rounds", required_argument, NULL, 'r'},
                                            {"memory-limit", required_argument, NULL, 'm'},
                                            {"policy", required_argument, NULL, OPT_POLICY},
                                            {"pipeline", required_argument, NULL, OPT_PIPELINE},
                                            {"one-stage", no_argument, NULL, OPT_ONE_STAGE},
                                            {"quiet", no_argument, NULL, 'q'},
                                            {"help", no_argument, NULL, 'h'},
                                            {"version", no_argument, NULL, 'V'},
                                            {NULL, 0, NULL, 0}};
  opts o = {
      .strategy = HAP_STRATEGY_HAP, .format = HAP_FORMAT_TABLE, .policy = hap_policy_default()};
  hap_err err = {0};
  long long v;
  int c;
  while ((c = getopt_long(argc, argv, "c:s:o:ef:r:m:qhV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'c': o.cluster = optarg; break;
    case 's':
      if (hap_megatron_spec_is(optarg))
        o.megatron = optarg;
      else if (hap_galvatron_spec_is(optarg))
        o.galvatron = optarg;
      else if (hap_strategy_parse(optarg, &o.strategy) != HAP_OK)
        return hap_report_usage(prog, -1,
                                "unknown strategy '%s' (expected hap, dp-ev, dp-cp, megatron-tp, "
                                "alpa, galvatron or megatron[:...])",
                                optarg);
      break;
    case 'o': o.output = optarg; break;
    case OPT_COMPARE: o.compare = true; break;
    case OPT_COMPARE_SEEDS: o.compare = o.compare_seeds = true; break;
    case OPT_NO_RESCORE: o.no_rescore = true; break;
    case OPT_SFB:
      if (hap_sfb_use_parse(optarg, &o.sfb) != HAP_OK)
        return hap_report_usage(prog, -1, "--sfb: '%s', expected auto, off or all", optarg);
      break;
    case 'e': o.explain = true; break;
    case 'f':
      if (hap_format_select(optarg, HAP_FORMATS_TABLE_JSON, &o.format, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      break;
    case 'r':
      if (hap_cli_parse_int("--max-rounds", optarg, 1, 1000, &v, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      o.max_rounds = (int)v;
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
    case OPT_PIPELINE: o.pipeline = optarg; break;
    case OPT_ONE_STAGE: o.one_stage = true; break;
    case 'q': o.quiet = true; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("hap-synth %s\n", HAP_VERSION); return 0;
    default: fprintf(stderr, "Try '%s --help'.\n", prog); return 2;
    }
  }
  if (optind != argc - 1)
    return hap_report_usage(prog, -1,
                            optind >= argc ? "missing MODEL" : "more than one MODEL given");
  o.model = argv[optind];
  if (o.cluster == NULL)
    return hap_report_usage(prog, -1, "missing --cluster SPEC (e.g. --cluster paper-hetero)");
  if (o.megatron != NULL && o.pipeline != NULL)
    return hap_report_usage(prog, -1,
                            "--strategy megatron sets the pipeline itself (pp, v, mbs): not "
                            "--pipeline");
  if (o.galvatron != NULL && (o.pipeline != NULL || o.compare || o.one_stage || o.max_rounds > 0))
    return hap_report_usage(prog, -1,
                            "--strategy galvatron chooses its own stages and programs: not with "
                            "--pipeline, --compare, --one-stage or --max-rounds");
  if (o.galvatron != NULL)
    return run_galvatron(&o);
  if (o.pipeline != NULL || o.megatron != NULL)
    return run_pipeline(&o);
  return run(&o);
}
