/* pipeline_report.c — hap-sim and hap-synth --pipeline (pipeline_report.h). */
#include "pipeline_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/json_write.h"
#include "harness/report.h"
#include "model/zoo.h"
#include "pipe/estimate.h"
#include "pipe/megatron.h"
#include "plan/pipeline_io.h"
#include "simulate/plan_sim.h"
#include "store/cluster_open.h"

/* The bubble fraction of identical stages with free transfers, for comparison. */
static double ideal_bubble(const hap_pipe_spec *s) {
  double p = s->stages, m = s->micro_batches, v = s->chunks;
  double idle = (p - 1) / (v * m); /* of the ideal compute time */
  return idle / (1 + idle);
}

/* "8 devices per group" or "groups of 16+48 devices". */
static const char *groups_text(const hap_pipe_estimate *e, char *buf, size_t len) {
  if (e->group_size > 0) {
    snprintf(buf, len, "%d devices per group", (int)e->group_size);
    return buf;
  }
  size_t o = (size_t)snprintf(buf, len, "groups of ");
  for (int32_t gi = 0; gi < e->spec.stages && o < len; gi++)
    o += (size_t)snprintf(buf + o, len - o, "%s%d", gi ? "+" : "", (int)e->group_devices[gi]);
  if (o < len)
    snprintf(buf + o, len - o, " devices");
  return buf;
}

static void print_stages(const hap_pipeline_report_args *a, const hap_graph *g,
                         const hap_pipe_estimate *e, const char *layout) {
  const hap_pipe_spec *s = &e->spec;
  char groups[400];
  printf("pipeline    %s on %s: %d stages x %d chunk%s, %s, %d micro-batches, %s, %s "
         "programs\n",
         a->model, a->cluster, s->stages, s->chunks, s->chunks > 1 ? "s" : "",
         hap_pipe_schedule_name(s->schedule), s->micro_batches,
         groups_text(e, groups, sizeof groups),
         layout != NULL ? "megatron-tp" : hap_strategy_name(a->strategy));
  if (layout != NULL)
    printf("megatron    %s: each stage tensor parallel over tp consecutive devices, data parallel "
           "over dp of them\n",
           layout);
  printf("links       between groups: %.3f GB/s, %.2f us (the slowest pair of groups, every device "
         "sending)\n\n",
         e->link.bandwidth_Bps / 1e9, e->link.latency_s * 1e6);
  printf("%-5s %-5s %-11s %-44s %9s %9s %9s %10s %9s %11s\n", "stage", "group", "nodes",
         "first .. last node", "fwd ms", "bwd ms", "tail ms", "sends MiB", "in flight",
         "memory GiB");
  for (int32_t k = 0; k < e->n_stages; k++) {
    const hap_pipe_stage *st = &e->stages[k];
    char nodes[32], names[256];
    snprintf(nodes, sizeof nodes, "%d..%d", st->first, st->end - 1);
    snprintf(names, sizeof names, "%s .. %s", g->nodes[st->first].name, g->nodes[st->end - 1].name);
    printf("%-5d %-5d %-11s %-44.44s %9.3f %9.3f %9.3f %10.3f %9d %11.3f\n", k, st->group, nodes,
           names, st->times.fwd_s * 1e3, st->times.bwd_s * 1e3, st->times.tail_s * 1e3,
           st->boundary_bytes / 1048576.0, st->in_flight, st->memory_bytes / 1073741824.0);
  }
  const hap_pipe_sim *r = e->sim;
  printf("\niteration   %.3f ms simulated (stage by stage: each stage's program simulated for one "
         "micro-batch, the schedule over those times)\n",
         r->makespan_s * 1e3);
  printf("bubble      per group");
  for (int32_t gi = 0; gi < r->n_groups; gi++)
    printf(" %.3f", r->bubble[gi]);
  printf(" (mean %.3f; identical stages with free transfers: %.3f)\n", r->mean_bubble,
         ideal_bubble(s));
  int32_t over = 0, worst = 0;
  for (int32_t k = 0; k < e->n_stages; k++) {
    const hap_pipe_stage *st = &e->stages[k];
    over += !st->fits;
    if (st->memory_bytes / st->memory_limit >
        e->stages[worst].memory_bytes / e->stages[worst].memory_limit)
      worst = k;
  }
  const hap_pipe_stage *w = &e->stages[worst];
  char what[64];
  if (over)
    snprintf(what, sizeof what, "%d of %d stages do not fit", over, e->n_stages);
  else
    snprintf(what, sizeof what, "every stage fits");
  printf("memory      %s (fullest: stage %d, %.3f GiB of %.3f GiB, %d micro-batches in flight)\n",
         what, worst, w->memory_bytes / 1073741824.0, w->memory_limit / 1073741824.0, w->in_flight);
  printf("synthesis   %.3f s for %d stage programs\n", e->synth_seconds, e->n_stages);
}

static double peak_memory(const hap_pipe_estimate *e) {
  double peak = 0;
  for (int32_t k = 0; k < e->n_stages; k++)
    peak = e->stages[k].memory_bytes > peak ? e->stages[k].memory_bytes : peak;
  return peak;
}

/* Several pipelines: one row each (a failed one says why). */
static void print_rows(const hap_pipeline_report_args *a, hap_pipe_estimate *const *est,
                       const hap_err *errs) {
  printf("pipelines   %s on %s, %s programs\n\n", a->model, a->cluster,
         hap_strategy_name(a->strategy));
  printf("%-56s %6s %6s %11s %6s %12s %11s %8s %11s\n", "pipeline", "stages", "chunks", "schedule",
         "micro", "iteration ms", "mean bubble", "ideal", "peak GiB");
  for (int i = 0; i < a->n_specs; i++) {
    const hap_pipe_estimate *e = est[i];
    if (e == NULL) {
      printf("%-56.56s failed: %s\n", a->specs[i], errs[i].msg);
      continue;
    }
    const hap_pipe_spec *s = &e->spec;
    printf("%-56.56s %6d %6d %11s %6d %12.3f %11.3f %8.3f %11.3f\n", a->specs[i], s->stages,
           s->chunks, hap_pipe_schedule_name(s->schedule), s->micro_batches,
           e->sim->makespan_s * 1e3, e->sim->mean_bubble, ideal_bubble(s),
           peak_memory(e) / 1073741824.0);
  }
}

static void write_estimate(hap_jw *w, const hap_graph *g, const hap_pipe_estimate *e) {
  hap_jw_key(w, "schedule");
  hap_jw_str(w, hap_pipe_schedule_name(e->spec.schedule));
  hap_jw_key(w, "stages");
  hap_jw_int(w, e->spec.stages);
  hap_jw_key(w, "chunks");
  hap_jw_int(w, e->spec.chunks);
  hap_jw_key(w, "micro_batches");
  hap_jw_int(w, e->spec.micro_batches);
  hap_jw_key(w, "group_size");
  hap_jw_int(w, e->group_size);
  hap_jw_key(w, "group_devices");
  hap_jw_begin_array_inline(w);
  for (int32_t gi = 0; gi < e->spec.stages; gi++)
    hap_jw_int(w, e->group_devices[gi]);
  hap_jw_end_array(w);
  hap_jw_key(w, "link_bandwidth_Bps");
  hap_jw_double(w, e->link.bandwidth_Bps);
  hap_jw_key(w, "link_latency_s");
  hap_jw_double(w, e->link.latency_s);
  hap_jw_key(w, "iteration_s");
  hap_jw_double(w, e->sim->makespan_s);
  hap_jw_key(w, "mean_bubble");
  hap_jw_double(w, e->sim->mean_bubble);
  hap_jw_key(w, "bubble");
  hap_jw_begin_array_inline(w);
  for (int32_t gi = 0; gi < e->sim->n_groups; gi++)
    hap_jw_double(w, e->sim->bubble[gi]);
  hap_jw_end_array(w);
  hap_jw_key(w, "synth_seconds");
  hap_jw_double(w, e->synth_seconds);
  hap_jw_key(w, "virtual_stages");
  hap_jw_begin_array(w);
  for (int32_t k = 0; k < e->n_stages; k++) {
    const hap_pipe_stage *st = &e->stages[k];
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "group");
    hap_jw_int(w, st->group);
    hap_jw_key(w, "first_node");
    hap_jw_str(w, g->nodes[st->first].name);
    hap_jw_key(w, "last_node");
    hap_jw_str(w, g->nodes[st->end - 1].name);
    hap_jw_key(w, "nodes");
    hap_jw_int(w, st->end - st->first);
    hap_jw_key(w, "fwd_s");
    hap_jw_double(w, st->times.fwd_s);
    hap_jw_key(w, "bwd_s");
    hap_jw_double(w, st->times.bwd_s);
    hap_jw_key(w, "tail_s");
    hap_jw_double(w, st->times.tail_s);
    hap_jw_key(w, "boundary_bytes");
    hap_jw_double(w, st->boundary_bytes);
    hap_jw_key(w, "in_flight");
    hap_jw_int(w, st->in_flight);
    hap_jw_key(w, "memory_bytes");
    hap_jw_double(w, st->memory_bytes);
    hap_jw_key(w, "memory_limit_bytes");
    hap_jw_double(w, st->memory_limit);
    hap_jw_key(w, "fits");
    hap_jw_bool(w, st->fits);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
}

/* One estimate: {"model", "cluster", "strategy", "spec", "ok", ...} (its fields, or "error"). */
static void write_json(hap_jw *w, const hap_pipeline_report_args *a, const char *spec,
                       const hap_graph *g, const hap_pipe_estimate *e, const hap_err *err) {
  hap_jw_begin_object(w);
  hap_jw_key(w, "model");
  hap_jw_str(w, a->model);
  hap_jw_key(w, "cluster");
  hap_jw_str(w, a->cluster);
  hap_jw_key(w, "strategy");
  hap_jw_str(w, hap_strategy_name(a->strategy));
  hap_jw_key(w, "spec");
  hap_jw_str(w, spec);
  hap_jw_key(w, "ok");
  hap_jw_bool(w, e != NULL);
  if (e != NULL)
    write_estimate(w, g, e);
  else {
    hap_jw_key(w, "error");
    hap_jw_str(w, err->msg);
  }
  hap_jw_end_object(w);
}

/* Does every stage of `e` fit its devices? */
static bool all_fit(const hap_pipe_estimate *e) {
  for (int32_t k = 0; k < e->n_stages; k++)
    if (!e->stages[k].fits)
      return false;
  return true;
}

/* --pipeline auto: 1F1B pipelines of every stage count P that divides the devices into equal
 * groups (P <= 16 and at most the graph's nodes), each with the policy's micro-batches or, when
 * fewer, 4 P (a bubble of at most (P-1)/(5P-1)); 1 stage is the one-stage plan. The specs go to
 * texts[0..*n) (HAP_PIPELINE_REPORT_MAX at most). */
static void auto_specs(const hap_graph *g, const hap_cluster *c, const hap_train_policy *pol,
                       char texts[][96], int *n) {
  *n = 0;
  /* a cluster of several device models in runs (paper-hetero's V100 hosts, then its P100
   * hosts): one stage per run as well, however unequal */
  int32_t runs = 0, sizes[16];
  for (int32_t d = 0; d < c->n_devices && runs <= 16; d++) {
    if (d == 0 || strcmp(c->devices[d].model, c->devices[d - 1].model) != 0) {
      if (runs < 16)
        sizes[runs] = 0;
      runs++;
    }
    if (runs <= 16)
      sizes[runs - 1]++;
  }
  for (int32_t p = 1; p <= 16 && p <= c->n_devices && p <= g->n_nodes; p++) {
    if (c->n_devices % p != 0 || *n >= HAP_PIPELINE_REPORT_MAX)
      continue;
    int32_t m = pol->micro_batches > 4 * p ? pol->micro_batches : 4 * p;
    snprintf(texts[*n], 96, "stages=%d,schedule=1f1b,micro_batches=%d", (int)p,
             (int)(p == 1 ? (pol->micro_batches > 0 ? pol->micro_batches : 1) : m));
    (*n)++;
  }
  if (runs > 1 && runs <= 16 && runs <= g->n_nodes && *n < HAP_PIPELINE_REPORT_MAX) {
    int32_t m = pol->micro_batches > 4 * runs ? pol->micro_batches : 4 * runs;
    size_t o = (size_t)snprintf(
        texts[*n], 96, "stages=%d,schedule=1f1b,micro_batches=%d,groups=", (int)runs, (int)m);
    for (int32_t r = 0; r < runs && o < 96; r++)
      o += (size_t)snprintf(texts[*n] + o, 96 - o, "%s%d", r ? "+" : "", (int)sizes[r]);
    if (o < 96)
      (*n)++;
  }
}

/* The fastest estimate whose stages all fit (ties: fewer stages), or -1. */
static int best_fitting(hap_pipe_estimate *const *est, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (est[i] != NULL && all_fit(est[i]) &&
        (best < 0 || est[i]->sim->makespan_s < est[best]->sim->makespan_s))
      best = i;
  return best;
}

int hap_pipeline_report(const char *prog, const hap_pipeline_report_args *given) {
  hap_pipeline_report_args args = *given, *a = &args;
  char mspec[96] = "";
  const char *mspec_list[1] = {mspec};
  if (a->megatron != NULL) { /* one spec, made from the layout once the graph is loaded */
    args.n_specs = 1;
    args.specs = mspec_list;
  }
  bool search = a->megatron == NULL && a->n_specs == 1 && strcmp(a->specs[0], "auto") == 0;
  static char auto_texts[HAP_PIPELINE_REPORT_MAX][96];
  const char *auto_ptrs[HAP_PIPELINE_REPORT_MAX];
  if (search) { /* the candidates need the graph and the cluster: sized below */
    args.n_specs = HAP_PIPELINE_REPORT_MAX;
    args.specs = auto_ptrs;
    for (int i = 0; i < HAP_PIPELINE_REPORT_MAX; i++)
      auto_ptrs[i] = auto_texts[i];
  }
  hap_err err = {0};
  hap_pipe_spec *specs = calloc((size_t)a->n_specs, sizeof *specs);
  hap_pipe_estimate **est = calloc((size_t)a->n_specs, sizeof(hap_pipe_estimate *));
  hap_err *errs = calloc((size_t)a->n_specs, sizeof *errs);
  if (specs == NULL || est == NULL || errs == NULL) {
    free(specs);
    free(est);
    free(errs);
    hap_err_set(&err, HAP_ENOMEM, "out of memory");
    hap_report_err(prog, -1, &err);
    return 1;
  }
  int rc = 0;
  for (int i = 0; i < a->n_specs && rc == 0 && !search && a->megatron == NULL; i++)
    if (hap_pipe_spec_parse(a->specs[i], &specs[i], &err) != HAP_OK)
      rc = hap_report_usage(prog, -1, "--%s", err.msg);
  hap_megatron_spec m;
  if (rc == 0 && a->megatron != NULL && hap_megatron_spec_parse(a->megatron, &m, &err) != HAP_OK)
    rc = hap_report_usage(prog, -1, "--strategy %s", err.msg);
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_status st = rc == 0 ? hap_model_load(a->model, &g, &err) : HAP_OK;
  if (rc == 0 && st == HAP_OK)
    st = hap_cluster_open(a->cluster, &c, &err);
  if (rc == 0 && st != HAP_OK) {
    hap_report_err(prog, -1, &err);
    rc = 1;
  }
  hap_synth_options o = {.strategy = a->strategy,
                         .memory_limit_bytes = a->memory_limit,
                         .rescore = hap_plan_sim_rescore,
                         .policy = a->policy};
  char layout[128] = "";
  if (rc == 0 && a->megatron != NULL) { /* one pipeline: the layout's */
    hap_megatron_spec resolved;
    hap_synth_options base = o;
    if (hap_megatron_layout(&m, g, c, &base, &resolved, &specs[0], &o, &err) != HAP_OK) {
      hap_report(prog, -1, "--strategy %s: %s", a->megatron, err.msg);
      rc = 1;
    } else {
      hap_megatron_describe(&resolved, layout, sizeof layout);
      snprintf(mspec, sizeof mspec, "stages=%d,schedule=%s,chunks=%d,micro_batches=%d",
               (int)specs[0].stages, hap_pipe_schedule_name(specs[0].schedule),
               (int)specs[0].chunks, (int)specs[0].micro_batches);
    }
  }
  if (rc == 0 && search) {
    auto_specs(g, c, &a->policy, auto_texts, &args.n_specs);
    for (int i = 0; i < a->n_specs && rc == 0; i++)
      if (hap_pipe_spec_parse(a->specs[i], &specs[i], &err) != HAP_OK)
        rc = hap_report_usage(prog, -1, "--pipeline auto: %s", err.msg);
  }
  bool ran = rc == 0, single = a->n_specs == 1;
  for (int i = 0; i < a->n_specs && ran; i++)
    (void)hap_pipe_estimate_run(g, c, &specs[i], &o, &est[i], &errs[i]);
  int chosen = single ? 0 : -1;
  if (ran && search)
    chosen = best_fitting(est, a->n_specs);
  if (rc == 0 && chosen >= 0 && est[chosen] != NULL && a->output != NULL &&
      (hap_pipeline_set_specs(est[chosen]->pipeline, a->model, a->cluster) != HAP_OK ||
       hap_pipeline_write_file(est[chosen]->pipeline, g, c, a->output, &err) != HAP_OK)) {
    hap_report_err(prog, -1, &err);
    rc = 1;
  }
  bool report = rc == 0 && !a->quiet && !(a->output != NULL && strcmp(a->output, "-") == 0);
  if (report && a->format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    if (!single)
      hap_jw_begin_array(&w);
    for (int i = 0; i < a->n_specs; i++)
      write_json(&w, a, a->specs[i], g, est[i], &errs[i]);
    if (!single)
      hap_jw_end_array(&w);
    fputc('\n', stdout);
  } else if (report && single && est[0] != NULL) {
    print_stages(a, g, est[0], a->megatron != NULL ? layout : NULL);
  } else if (report && !single) {
    print_rows(a, est, errs);
    if (search && chosen >= 0)
      printf("\nchosen      %s: the fastest whose stages all fit%s\n", a->specs[chosen],
             a->output != NULL ? " (written to -o)" : "");
  }
  if (ran && search && chosen < 0) { /* after the rows, which show what each needs */
    fflush(stdout);
    hap_report(prog, -1,
               "--pipeline auto: no pipeline of 1 to %d stages fits every stage's devices",
               specs[a->n_specs - 1].stages);
    rc = 1;
  }
  for (int i = 0; i < a->n_specs && ran && !search; i++)
    if (est[i] == NULL) { /* said on stderr, one line per failed pipeline */
      hap_report(prog, -1, "%s %s: %s", a->megatron ? "--strategy" : "--pipeline",
                 a->megatron ? a->megatron : a->specs[i], errs[i].msg);
      rc = 1;
    }
  for (int i = 0; i < a->n_specs; i++)
    hap_pipe_estimate_destroy(est[i]);
  free(specs);
  free(est);
  free(errs);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return rc;
}

/* ---- hap's 3-D layouts (hap-synth) ---------------------------------------------------------- */

/* A stage program's choices, from its steps: ops sharded (any variant but replicated), and
 * [batch, seq, ...] activations computed split along the sequence (dim 1 the stage graph's
 * sequence: dim 1 of its first input of rank >= 2). */
static void stage_choices(const hap_pipeline *pl, int32_t k, const hap_graph *g,
                          const hap_cluster *c, int *sharded, int *seq_split, int *ops) {
  *sharded = *seq_split = *ops = 0;
  hap_stage_graph *sg = NULL;
  hap_cluster *gc = NULL;
  hap_err quiet = {0};
  if (hap_pipeline_stage_context(pl, k, g, c, &sg, &gc, &quiet) != HAP_OK) {
    hap_cluster_destroy(gc);
    hap_stage_graph_destroy(sg);
    return;
  }
  const hap_graph *sgg = sg ? sg->graph : g;
  int64_t seq = 0;
  for (int32_t t = 0; t < sgg->n_tensors && seq == 0; t++)
    if (sgg->tensors[t].kind == HAP_TENSOR_INPUT && sgg->tensors[t].shape.rank >= 2)
      seq = sgg->tensors[t].shape.dims[1];
  const hap_plan *p = pl->stages[k].plan;
  for (int32_t j = 0; j < p->n_steps; j++) {
    const hap_step *st = &p->steps[j];
    if (st->kind != HAP_STEP_COMPUTE)
      continue;
    (*ops)++;
    *sharded += st->variant.name != NULL && strcmp(st->variant.name, "replicated") != 0;
    const hap_node *n = &sgg->nodes[st->node];
    bool split = false;
    for (int o = 0; o < n->n_outputs; o++) {
      const hap_shape *sh = &sgg->tensors[n->outputs[o]].shape;
      split = split || (sh->rank >= 3 && sh->dims[1] == seq && st->variant.out[o] == 1);
    }
    *seq_split += split;
  }
  hap_cluster_destroy(gc);
  hap_stage_graph_destroy(sg);
}

static void print_layout_explain(const hap_layout_search *s, const hap_graph *g,
                                 const hap_cluster *c) {
  const hap_pipe_estimate *e = s->estimate;
  const hap_layout_row *r = &s->rows[s->best];
  printf("\nwhy         tensor parallel over the %d devices of a host (their fast links carry the "
         "per-layer collectives), %d pipeline stages, data parallel over %d replicas with the "
         "gradients reduced once per iteration%s; each stage's program was searched with its "
         "in-flight micro-batches counted against memory, so it splits activations along the "
         "sequence (sequence parallelism) where that is needed to fit\n",
         (int)r->layout.tp, (int)r->layout.pp, (int)r->layout.dp,
         r->policy.zero >= 1 ? " and the optimizer state sharded across them (ZeRO-1)" : "");
  printf("\n%-5s %9s %6s %8s %10s %11s %11s %11s %11s %11s\n", "stage", "in flight", "ops",
         "sharded", "seq split", "parameters", "gradients", "optimizer", "activations", "total");
  for (int32_t k = 0; k < e->n_stages; k++) {
    const hap_pipe_stage *st = &e->stages[k];
    int sharded, seq_split, ops;
    stage_choices(e->pipeline, k, g, c, &sharded, &seq_split, &ops);
    const hap_plan *p = st->plan;
    int32_t worst = 0;
    double copies = (double)st->in_flight / e->spec.chunks, most = -1;
    for (int32_t d = 0; d < p->n_devices && p->memory_recorded; d++) {
      hap_memory_breakdown m = hap_memory_in_flight(&p->device_memory[d], copies);
      if (hap_memory_total(&m) > most) {
        most = hap_memory_total(&m);
        worst = d;
      }
    }
    hap_memory_breakdown m = p->memory_recorded
                                 ? hap_memory_in_flight(&p->device_memory[worst], copies)
                                 : (hap_memory_breakdown){0};
    char b[5][32];
    printf("%-5d %9d %6d %8d %10d %11s %11s %11s %11s %11s\n", (int)k, st->in_flight, ops, sharded,
           seq_split, hap_fmt_bytes(m.parameters, b[0], sizeof b[0]),
           hap_fmt_bytes(m.gradients, b[1], sizeof b[1]),
           hap_fmt_bytes(m.optimizer, b[2], sizeof b[2]),
           hap_fmt_bytes(m.activations, b[3], sizeof b[3]),
           hap_fmt_bytes(hap_memory_total(&m), b[4], sizeof b[4]));
  }
}

void hap_layout_report(const hap_layout_search *s, const hap_graph *g, const char *model,
                       const char *cluster, const char *one_stage, bool explain,
                       hap_format format) {
  hap_cluster *c = NULL;
  hap_err quiet = {0};
  (void)hap_cluster_open(cluster, &c, &quiet);
  char d[160];
  if (format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_object(&w);
    hap_jw_key(&w, "model");
    hap_jw_str(&w, model);
    hap_jw_key(&w, "cluster");
    hap_jw_str(&w, cluster);
    hap_jw_key(&w, "strategy");
    hap_jw_str(&w, "hap");
    hap_jw_key(&w, "one_stage");
    hap_jw_str(&w, one_stage);
    hap_jw_key(&w, "layouts");
    hap_jw_begin_array(&w);
    for (int i = 0; i < s->n_rows; i++) {
      const hap_layout_row *r = &s->rows[i];
      hap_layout_row_describe(r, d, sizeof d);
      hap_jw_begin_object_inline(&w);
      hap_jw_key(&w, "layout");
      hap_jw_str(&w, d);
      hap_jw_key(&w, "chosen");
      hap_jw_bool(&w, i == s->best);
      hap_jw_key(&w, "fits");
      hap_jw_bool(&w, r->fits);
      hap_jw_key(&w, "iteration_s");
      hap_jw_double(&w, r->iteration_s);
      hap_jw_key(&w, "peak_bytes");
      hap_jw_double(&w, r->peak_bytes);
      hap_jw_key(&w, "why");
      hap_jw_str(&w, r->why);
      hap_jw_end_object(&w);
    }
    hap_jw_end_array(&w);
    hap_jw_key(&w, "search_seconds");
    hap_jw_double(&w, s->seconds);
    write_estimate(&w, g, s->estimate);
    hap_jw_end_object(&w);
    fputc('\n', stdout);
    hap_cluster_destroy(c);
    return;
  }
  const hap_layout_row *best = &s->rows[s->best];
  hap_layout_row_describe(best, d, sizeof d);
  printf("model       %s\n", g->source ? g->source : model);
  if (c != NULL)
    printf("cluster     %s (%d devices on %d hosts)\n", c->source ? c->source : c->name,
           c->n_devices, c->n_hosts);
  printf("strategy    hap: a 3-D layout (its training state does not fit one device): %s\n", d);
  printf("\n%-40s %14s %10s %9s  %s\n", "layouts tried", "iteration s", "peak GiB", "search s", "");
  for (int i = 0; i < s->n_rows; i++) {
    const hap_layout_row *r = &s->rows[i];
    hap_layout_row_describe(r, d, sizeof d);
    if (r->iteration_s > 0)
      printf("%-40s %14.3f %10.3f %9.3f  %s\n", d, r->iteration_s, r->peak_bytes / 1073741824.0,
             r->seconds,
             i == s->best ? "chosen: the fastest that fits"
             : r->fits    ? "fits, slower"
                          : r->why);
    else
      printf("%-40s %14s %10s %9s  %s\n", d, "-", "-", "-", r->why);
  }
  printf("%-40s %s\n", "one stage (no pipeline)", one_stage);
  printf("search      %.3f s for the layouts\n\n", s->seconds);
  hap_pipeline_report_args a = {
      .model = model, .cluster = cluster, .strategy = HAP_STRATEGY_MEGATRON_TP};
  char layout[128];
  hap_megatron_describe(&best->layout, layout, sizeof layout);
  print_stages(&a, g, s->estimate, layout);
  if (explain && c != NULL)
    print_layout_explain(s, g, c);
  hap_cluster_destroy(c);
}

static void alpa_candidate_describe(const hap_alpa_candidate *cd, char *buf, size_t len) {
  snprintf(buf, len, "%d stages x %d devices, %d micro-batches", (int)cd->stages,
           (int)cd->group_devices, (int)cd->micro_batches);
}

void hap_alpa_report(const hap_alpa_inter *s, const hap_graph *g, const char *model,
                     const char *cluster, const char *one_stage, hap_format format) {
  hap_cluster *c = NULL;
  hap_err quiet = {0};
  (void)hap_cluster_open(cluster, &c, &quiet);
  char d[160], pol[160];
  hap_policy_brief(&s->policy, pol, sizeof pol);
  if (format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_object(&w);
    hap_jw_key(&w, "model");
    hap_jw_str(&w, model);
    hap_jw_key(&w, "cluster");
    hap_jw_str(&w, cluster);
    hap_jw_key(&w, "strategy");
    hap_jw_str(&w, "alpa");
    hap_jw_key(&w, "policy");
    hap_jw_str(&w, pol);
    hap_jw_key(&w, "one_stage");
    hap_jw_str(&w, one_stage);
    hap_jw_key(&w, "layer_clusters");
    hap_jw_int(&w, s->layer_clusters);
    hap_jw_key(&w, "candidates");
    hap_jw_begin_array(&w);
    for (int i = 0; i < s->n_cand; i++) {
      const hap_alpa_candidate *cd = &s->cand[i];
      hap_jw_begin_object_inline(&w);
      hap_jw_key(&w, "stages");
      hap_jw_int(&w, cd->stages);
      hap_jw_key(&w, "group_devices");
      hap_jw_int(&w, cd->group_devices);
      hap_jw_key(&w, "micro_batches");
      hap_jw_int(&w, cd->micro_batches);
      hap_jw_key(&w, "chosen");
      hap_jw_bool(&w, i == s->best);
      hap_jw_key(&w, "fits");
      hap_jw_bool(&w, cd->fits);
      hap_jw_key(&w, "dp_objective_s");
      hap_jw_double(&w, isfinite(cd->dp_s) ? cd->dp_s : -1);
      hap_jw_key(&w, "iteration_s");
      hap_jw_double(&w, cd->iteration_s);
      hap_jw_key(&w, "peak_bytes");
      hap_jw_double(&w, cd->peak_bytes);
      hap_jw_key(&w, "why");
      hap_jw_str(&w, cd->why);
      hap_jw_end_object(&w);
    }
    hap_jw_end_array(&w);
    hap_jw_key(&w, "probes");
    hap_jw_int(&w, s->probes);
    hap_jw_key(&w, "search_seconds");
    hap_jw_double(&w, s->seconds);
    write_estimate(&w, g, s->estimate);
    hap_jw_end_object(&w);
    fputc('\n', stdout);
    hap_cluster_destroy(c);
    return;
  }
  alpa_candidate_describe(&s->cand[s->best], d, sizeof d);
  printf("model       %s\n", g->source ? g->source : model);
  if (c != NULL)
    printf("cluster     %s (%d devices on %d hosts)\n", c->source ? c->source : c->name,
           c->n_devices, c->n_hosts);
  printf("strategy    alpa: inter-operator pass: %s (1F1B), %d layer clusters\n", d,
         (int)s->layer_clusters);
  printf("policy      %s\n", pol);
  printf("\n%-44s %11s %13s %10s  %s\n", "sub-meshes tried", "DP obj. s", "iteration s", "peak GiB",
         "");
  for (int i = 0; i < s->n_cand; i++) {
    const hap_alpa_candidate *cd = &s->cand[i];
    alpa_candidate_describe(cd, d, sizeof d);
    if (cd->iteration_s > 0)
      printf("%-44s %11.3f %13.3f %10.3f  %s\n", d, cd->dp_s, cd->iteration_s,
             cd->peak_bytes / 1073741824.0,
             i == s->best ? "chosen: the fastest that fits"
             : cd->fits   ? "fits, slower"
                          : "a stage over its memory");
    else
      printf("%-44s %11s %13s %10s  %s\n", d, "-", "-", "-", cd->why);
  }
  printf("%-44s %s\n", "one stage (no pipeline)", one_stage);
  printf("search      %.3f s, %lld stages priced by the intra-operator pass\n\n", s->seconds,
         (long long)s->probes);
  hap_pipeline_report_args a = {.model = model, .cluster = cluster, .strategy = HAP_STRATEGY_ALPA};
  print_stages(&a, g, s->estimate, NULL);
  hap_cluster_destroy(c);
}

/* The chosen per-layer choice as runs: "DP 0-11, SDP 12-47". */
static void galv_layers_describe(const hap_galvatron *s, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i < s->layers && at + 32 < len;) {
    int32_t j = i;
    while (j + 1 < s->layers && s->sdp[j + 1] == s->sdp[i])
      j++;
    at += (size_t)snprintf(buf + at, len - at, "%s%s %d-%d", at ? ", " : "",
                           s->sdp[i] ? "SDP" : "DP", (int)i, (int)j);
    i = j + 1;
  }
}

void hap_galvatron_report(const hap_galvatron *s, const hap_graph *g, const char *model,
                          const char *cluster, hap_format format) {
  hap_cluster *c = NULL;
  hap_err quiet = {0};
  (void)hap_cluster_open(cluster, &c, &quiet);
  char d[200], pol[160], layers[512];
  hap_policy_brief(&s->policy, pol, sizeof pol);
  galv_layers_describe(s, layers, sizeof layers);
  if (format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_object(&w);
    hap_jw_key(&w, "model");
    hap_jw_str(&w, model);
    hap_jw_key(&w, "cluster");
    hap_jw_str(&w, cluster);
    hap_jw_key(&w, "strategy");
    hap_jw_str(&w, "galvatron");
    hap_jw_key(&w, "policy");
    hap_jw_str(&w, pol);
    hap_jw_key(&w, "layers");
    hap_jw_int(&w, s->layers);
    hap_jw_key(&w, "layer_choice");
    hap_jw_str(&w, layers);
    hap_jw_key(&w, "memory_limit_bytes");
    hap_jw_double(&w, s->limit_bytes);
    hap_jw_key(&w, "candidates");
    hap_jw_begin_array(&w);
    for (int i = 0; i < s->n_cand; i++) {
      const hap_galv_candidate *cd = &s->cand[i];
      hap_jw_begin_object_inline(&w);
      hap_jw_key(&w, "pp");
      hap_jw_int(&w, cd->pp);
      hap_jw_key(&w, "tp");
      hap_jw_int(&w, cd->tp);
      hap_jw_key(&w, "dp");
      hap_jw_int(&w, cd->dp);
      hap_jw_key(&w, "micro_batches");
      hap_jw_int(&w, cd->micro_batches);
      hap_jw_key(&w, "ckpt");
      hap_jw_str(&w, hap_recompute_name(cd->ckpt));
      hap_jw_key(&w, "zero");
      hap_jw_int(&w, cd->zero);
      hap_jw_key(&w, "sdp_layers");
      hap_jw_int(&w, cd->sdp_layers);
      hap_jw_key(&w, "chosen");
      hap_jw_bool(&w, i == s->best);
      hap_jw_key(&w, "model_s");
      hap_jw_double(&w, isfinite(cd->model_s) ? cd->model_s : -1);
      hap_jw_key(&w, "model_bytes");
      hap_jw_double(&w, cd->model_bytes);
      hap_jw_key(&w, "iteration_s");
      hap_jw_double(&w, cd->iteration_s);
      hap_jw_key(&w, "peak_bytes");
      hap_jw_double(&w, cd->peak_bytes);
      hap_jw_key(&w, "fits");
      hap_jw_bool(&w, cd->fits);
      hap_jw_key(&w, "why");
      hap_jw_str(&w, cd->why);
      hap_jw_end_object(&w);
    }
    hap_jw_end_array(&w);
    hap_jw_key(&w, "probes");
    hap_jw_int(&w, s->probes);
    hap_jw_key(&w, "search_seconds");
    hap_jw_double(&w, s->seconds);
    write_estimate(&w, g, s->estimate);
    hap_jw_end_object(&w);
    fputc('\n', stdout);
    hap_cluster_destroy(c);
    return;
  }
  hap_galv_candidate_describe(&s->cand[s->best], s->layers, d, sizeof d);
  printf("model       %s\n", g->source ? g->source : model);
  if (c != NULL)
    printf("cluster     %s (%d devices on %d hosts)\n", c->source ? c->source : c->name,
           c->n_devices, c->n_hosts);
  printf("strategy    galvatron: %s (1F1B), %d layers\n", d, (int)s->layers);
  printf("layers      %s (SDP: parameters stored sharded, gathered for use)\n", layers);
  printf("policy      %s\n", pol);
  printf("\n%-52s %10s %13s %10s  %s\n", "candidates (by Galvatron's cost model)", "model s",
         "simulated s", "peak GiB", "");
  for (int pass = 0; pass < 2; pass++) /* the ranked ones first, then those that do not fit */
    for (int i = 0; i < s->n_cand; i++) {
      const hap_galv_candidate *cd = &s->cand[i];
      if (isfinite(cd->model_s) != (pass == 0))
        continue;
      hap_galv_candidate_describe(cd, s->layers, d, sizeof d);
      char model_s[32] = "-";
      if (isfinite(cd->model_s))
        snprintf(model_s, sizeof model_s, "%.3f", cd->model_s);
      if (cd->iteration_s > 0)
        printf("%-52s %10s %13.3f %10.3f  %s\n", d, model_s, cd->iteration_s,
               cd->peak_bytes / 1073741824.0,
               i == s->best ? "chosen"
               : cd->fits   ? "fits"
                            : "a stage over its memory");
      else
        printf("%-52s %10s %13s %10s  %s\n", d, model_s, "-", "-", cd->why);
    }
  printf("search      %.3f s, %lld layer programs priced\n\n", s->seconds, (long long)s->probes);
  hap_pipeline_report_args a = {.model = model,
                                .cluster = cluster,
                                .strategy = s->cand[s->best].tp == 1 ? HAP_STRATEGY_DP_EV
                                                                     : HAP_STRATEGY_MEGATRON_TP};
  print_stages(&a, g, s->estimate, NULL);
  hap_cluster_destroy(c);
}
