/* estimate.c — a pipeline at stage granularity (estimate.h). */
#include "pipe/estimate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/spec.h"
#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "model/stage.h"
#include "plan/lower.h"
#include "plan/replica.h"
#include "simulate/plan_sim.h"

#define PIPE_KEYS "stages, schedule, chunks, micro_batches, groups"

/* "16+48": devices per group. */
static hap_status parse_groups(hap_pipe_spec *p, const char *value, hap_err *err) {
  p->n_groups = 0;
  const char *s = value;
  for (;;) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 1 << 20 || (*end != '+' && *end != '\0') ||
        p->n_groups == HAP_PIPE_MAX_GROUPS)
      return hap_err_set(err, HAP_EINVAL,
                         "pipeline: groups '%s', expected device counts joined by '+' (e.g. "
                         "16+48), at most %d",
                         value, HAP_PIPE_MAX_GROUPS);
    p->group_devices[p->n_groups++] = (int32_t)v;
    if (*end == '\0')
      return HAP_OK;
    s = end + 1;
  }
}

static hap_status set_key(hap_pipe_spec *p, const char *key, const char *value, bool *chunks_given,
                          hap_err *err) {
  long long v;
  char opt[64];
  snprintf(opt, sizeof opt, "pipeline: %s", key);
  if (strcmp(key, "stages") == 0) {
    HAP_TRY(hap_cli_parse_int(opt, value, 1, 65536, &v, err));
    p->stages = (int32_t)v;
  } else if (strcmp(key, "chunks") == 0) {
    HAP_TRY(hap_cli_parse_int(opt, value, 1, 64, &v, err));
    p->chunks = (int32_t)v;
    *chunks_given = true;
  } else if (strcmp(key, "micro_batches") == 0) {
    HAP_TRY(hap_cli_parse_int(opt, value, 1, 1 << 20, &v, err));
    p->micro_batches = (int32_t)v;
  } else if (strcmp(key, "groups") == 0) {
    HAP_TRY(parse_groups(p, value, err));
  } else if (strcmp(key, "schedule") == 0) {
    if (hap_pipe_schedule_parse(value, &p->schedule) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL, "pipeline: schedule '%s', expected %s", value,
                         HAP_PIPE_SCHEDULE_CHOICES);
  } else {
    return hap_err_set(err, HAP_EINVAL, "pipeline: unknown key '%s', expected one of " PIPE_KEYS,
                       key);
  }
  return HAP_OK;
}

hap_status hap_pipe_spec_parse(const char *text, hap_pipe_spec *out, hap_err *err) {
  hap_pipe_spec p = {.stages = 1, .schedule = HAP_PIPE_1F1B, .chunks = 1, .micro_batches = 0};
  hap_spec sp;
  hap_err quiet = {0};
  hap_status st = hap_spec_parse_params(text ? text : "", &sp, &quiet);
  if (st == HAP_ENOMEM) {
    hap_spec_free(&sp);
    return hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory");
  }
  bool chunks_given = false, stages_given = false;
  st = HAP_OK;
  for (int i = 0; i < sp.n && st == HAP_OK; i++) {
    stages_given |= strcmp(sp.items[i].key, "stages") == 0;
    st = set_key(&p, sp.items[i].key, sp.items[i].value, &chunks_given, err);
  }
  if (st == HAP_OK && sp.fault != HAP_SPEC_OK)
    st = hap_err_set(err, HAP_EINVAL,
                     "pipeline: '%s' is not of the form key=value (keys " PIPE_KEYS ")",
                     sp.bad ? sp.bad : "");
  hap_spec_free(&sp);
  if (st != HAP_OK)
    return st;
  if (!stages_given && p.n_groups > 0)
    p.stages = p.n_groups;
  else if (!stages_given)
    return hap_err_set(err, HAP_EINVAL, "pipeline: missing stages=P (keys " PIPE_KEYS ")");
  if (p.n_groups > 0 && p.n_groups != p.stages)
    return hap_err_set(err, HAP_EINVAL, "pipeline: groups has %d sizes for stages=%d", p.n_groups,
                       p.stages);
  if (p.schedule == HAP_PIPE_INTERLEAVED && !chunks_given)
    p.chunks = 2;
  *out = p;
  return HAP_OK;
}

void hap_pipe_estimate_destroy(hap_pipe_estimate *e) {
  if (e == NULL)
    return;
  free(e->stages);
  hap_pipeline_destroy(e->pipeline);
  hap_pipe_sim_destroy(e->sim);
  free(e);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The program of stage graph `whole` on `group` for m micro-batches keeping `in_flight`
 * micro-batches' activations (the fastest that fits one when none keeps that many): *plan (the
 * caller's), its times per micro-batch, its fullest device's memory with in_flight micro-batches
 * and the group's limit, bytes. */
static hap_status stage_program(const hap_graph *whole, const hap_cluster *group, int32_t m,
                                double in_flight, const hap_synth_options *o, hap_plan **plan,
                                hap_stage_times *times, double *memory, double *limit,
                                hap_err *err) {
  hap_graph *micro = NULL;
  hap_lowered *lw = NULL;
  hap_synth_options so = *o;
  so.policy.micro_batches = m;
  so.activation_copies = in_flight;
  hap_synth_stats stats = {0};
  hap_status st = hap_synthesize(whole, group, &so, plan, &stats, err);
  if (st != HAP_OK && stats.no_fit) {
    /* no program keeps this many micro-batches within the limit: the fastest that fits one,
     * reported as not fitting */
    if (err != NULL)
      *err = (hap_err){0};
    so.activation_copies = 1;
    stats = (hap_synth_stats){0};
    st = hap_synthesize(whole, group, &so, plan, &stats, err);
  }
  /* The times of one micro-batch: the same steps lowered on one micro-batch's graph, the policy
   * run once (a pipeline runs each micro-batch as its own op). */
  if (st == HAP_OK && m > 1)
    st = hap_graph_split_batch(whole, m, &micro, err);
  hap_plan *one = NULL; /* the same steps with the policy run once */
  if (st == HAP_OK && (one = hap_plan_copy(*plan)) == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory");
  if (st == HAP_OK) {
    one->policy.micro_batches = 1;
    st = hap_lower(one, micro ? micro : whole, &lw, err);
    if (st == HAP_OK)
      st = hap_stage_times_run(lw, group, NULL, times, NULL, err);
    hap_lowered_destroy(lw);
  }
  hap_plan_destroy(one);
  *memory = 0;
  for (int32_t d = 0; st == HAP_OK && d < (*plan)->n_devices && (*plan)->memory_recorded; d++) {
    hap_memory_breakdown mb = hap_memory_in_flight(&(*plan)->device_memory[d], in_flight);
    *memory = fmax(*memory, hap_memory_total(&mb));
  }
  *limit = o->memory_limit_bytes;
  for (int32_t d = 0; st == HAP_OK && d < group->n_devices && !(o->memory_limit_bytes > 0); d++)
    if (*limit == 0 || group->devices[d].memory_bytes < *limit)
      *limit = group->devices[d].memory_bytes;
  hap_graph_destroy(micro);
  return st;
}

/* Stage k of e->pipeline: its program synthesised for its stage graph on its group (the policy's
 * micro-batches m: the program of one micro-batch), its simulated times per micro-batch and its
 * memory with the order's in-flight activations. */
static hap_status run_stage(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                            hap_pipe_estimate *e, int32_t k, hap_err *err) {
  hap_pipeline_stage *ks = &e->pipeline->stages[k];
  hap_pipe_stage *s = &e->stages[k];
  int32_t m = e->spec.micro_batches;
  hap_stage_graph *sg = NULL;
  hap_cluster *gc = NULL;
  HAP_TRY(hap_pipeline_stage_context(e->pipeline, k, g, c, &sg, &gc, err));
  const hap_graph *whole = sg ? sg->graph : g;
  const hap_cluster *group = gc ? gc : c;
  double in_flight = (double)s->in_flight / e->spec.chunks; /* the group's count is over chunks */
  hap_status st = stage_program(whole, group, m, in_flight, o, &ks->plan, &s->times,
                                &s->memory_bytes, &s->memory_limit, err);
  s->plan = ks->plan;
  /* boundary bytes per micro-batch: the stage's outputs at 1/m of the batch, float32 ones in the
   * policy's compute precision (what mixed precision's kernels make and send) */
  hap_dtype compute = hap_policy_compute_dtype(&o->policy);
  for (int32_t i = 0; st == HAP_OK && sg != NULL && i < sg->n_out; i++) {
    const hap_tensor *t = &whole->tensors[sg->stage_of[sg->boundary_out[i]]];
    double bytes = (double)hap_tensor_bytes(t);
    if (t->dtype == HAP_F32)
      bytes = bytes / 4 * (double)hap_dtype_size(compute);
    s->boundary_bytes += bytes / m;
  }
  s->fits = s->memory_bytes <= s->memory_limit;
  hap_cluster_destroy(gc);
  hap_stage_graph_destroy(sg);
  return st;
}

hap_status hap_pipe_stage_probe_peak(const hap_graph *g, int32_t first, int32_t end,
                                     const hap_cluster *group, int32_t m,
                                     const hap_synth_options *o, hap_stage_times *times,
                                     hap_memory_breakdown *peak, double *limit, hap_err *err) {
  hap_stage_graph *sg = NULL;
  if (first > 0 || end < g->n_nodes)
    HAP_TRY(hap_stage_graph_build(g, first, end, &sg, err));
  hap_plan *plan = NULL;
  double memory = 0;
  hap_status st =
      stage_program(sg ? sg->graph : g, group, m, 1, o, &plan, times, &memory, limit, err);
  if (peak != NULL)
    *peak = (hap_memory_breakdown){0};
  for (int32_t d = 0; st == HAP_OK && peak != NULL && plan->memory_recorded && d < plan->n_devices;
       d++)
    if (hap_memory_total(&plan->device_memory[d]) > hap_memory_total(peak))
      *peak = plan->device_memory[d];
  hap_plan_destroy(plan);
  hap_stage_graph_destroy(sg);
  return st;
}

hap_status hap_pipe_stage_probe(const hap_graph *g, int32_t first, int32_t end,
                                const hap_cluster *group, int32_t m, const hap_synth_options *o,
                                hap_stage_times *times, double *memory, double *limit,
                                hap_err *err) {
  hap_memory_breakdown peak;
  hap_status st = hap_pipe_stage_probe_peak(g, first, end, group, m, o, times, &peak, limit, err);
  *memory = st == HAP_OK ? hap_memory_total(&peak) : 0;
  return st;
}

int64_t hap_pipe_batch_of(const hap_graph *g) {
  for (int32_t t = 0; t < g->n_tensors; t++)
    if (g->tensors[t].kind == HAP_TENSOR_INPUT && g->tensors[t].shape.rank >= 1)
      return g->tensors[t].shape.dims[0];
  return 0;
}

hap_pipe_link hap_pipe_group_link(const hap_cluster *c, int32_t a_first, int32_t b_first,
                                  int32_t pairs, double *per_host) {
  hap_pipe_link l = {0, 0};
  for (int32_t h = 0; h < c->n_hosts; h++)
    per_host[h] = 0;
  for (int32_t i = 0; i < pairs; i++) {
    int32_t from = a_first + i, to = b_first + i;
    hap_link one = hap_cluster_link(c, from, to);
    int32_t h = c->devices[from].host;
    if (h != c->devices[to].host)
      per_host[h] += one.bandwidth_Bps; /* capped by the NIC below */
    else
      l.bandwidth_Bps += one.bandwidth_Bps;
    l.latency_s = one.latency_s > l.latency_s ? one.latency_s : l.latency_s;
  }
  for (int32_t h = 0; h < c->n_hosts; h++)
    l.bandwidth_Bps +=
        per_host[h] < c->hosts[h].nic.bandwidth_Bps ? per_host[h] : c->hosts[h].nic.bandwidth_Bps;
  return l;
}

/* What group a of e sends to group b at once (hap_pipe_group_link): as many pairs as the smaller
 * group has devices. */
static hap_pipe_link group_link(const hap_cluster *c, const hap_pipe_estimate *e, int32_t a,
                                int32_t b, double *per_host) {
  int32_t pairs =
      e->group_devices[a] < e->group_devices[b] ? e->group_devices[a] : e->group_devices[b];
  return hap_pipe_group_link(c, e->group_first[a], e->group_first[b], pairs, per_host);
}

/* The slowest of the links from one group to the next (every pair of consecutive groups, both
 * ways: interleaving sends from the last group to the first). */
static hap_pipe_link slowest_link(const hap_cluster *c, const hap_pipe_estimate *e,
                                  int32_t groups) {
  hap_pipe_link worst = {0, INFINITY};
  double *per_host = malloc((size_t)c->n_hosts * sizeof *per_host);
  for (int32_t a = 0; a < groups && per_host != NULL; a++)
    for (int dir = 0; dir < 2; dir++) {
      int32_t b = dir == 0 ? (a + 1) % groups : (a + groups - 1) % groups;
      if (a == b)
        continue;
      hap_pipe_link l = group_link(c, e, a, b, per_host);
      worst.bandwidth_Bps =
          l.bandwidth_Bps < worst.bandwidth_Bps ? l.bandwidth_Bps : worst.bandwidth_Bps;
      worst.latency_s = l.latency_s > worst.latency_s ? l.latency_s : worst.latency_s;
    }
  free(per_host);
  if (!isfinite(worst.bandwidth_Bps) || !(worst.bandwidth_Bps > 0))
    worst.bandwidth_Bps = 1e30; /* one group (or no memory to tell): boundaries stay put */
  return worst;
}

/* Group gi's sustained FLOP/s in the policy's compute precision: its devices' summed (its stage
 * program balances the work over them). */
static double group_flops(const hap_cluster *c, const hap_pipe_estimate *e, int32_t gi,
                          const hap_train_policy *pol) {
  hap_dtype dt = hap_policy_compute_dtype(pol);
  double sum = 0;
  for (int32_t i = 0; i < e->group_devices[gi]; i++) {
    const hap_device *d = &c->devices[e->group_first[gi] + i];
    sum += d->sustained_flops[dt] > 0 ? d->sustained_flops[dt] : d->sustained_flops[HAP_F32];
  }
  return sum;
}

static hap_status simulate_order(hap_pipe_estimate *e, const hap_pipe_order *order, hap_err *err) {
  int32_t n = e->n_stages, p = e->spec.stages;
  double *fwd = calloc((size_t)n, sizeof *fwd), *bwd = calloc((size_t)n, sizeof *bwd);
  double *bytes = calloc((size_t)n, sizeof *bytes), *tail = calloc((size_t)p, sizeof *tail);
  hap_status st = HAP_OK;
  if (fwd == NULL || bwd == NULL || bytes == NULL || tail == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory");
  for (int32_t k = 0; k < n && st == HAP_OK; k++) {
    fwd[k] = e->stages[k].times.fwd_s;
    bwd[k] = e->stages[k].times.bwd_s;
    bytes[k] = e->stages[k].boundary_bytes;
    tail[e->stages[k].group] += e->stages[k].times.tail_s; /* each chunk syncs its gradients */
  }
  hap_pipe_sim_input in = {.order = order,
                           .fwd_s = fwd,
                           .bwd_s = bwd,
                           .boundary_bytes = bytes,
                           .link = e->link,
                           .tail_s = tail};
  if (st == HAP_OK)
    st = hap_pipe_sim_run(&in, &e->sim, err);
  free(fwd);
  free(bwd);
  free(bytes);
  free(tail);
  return st;
}

static hap_status check_shape(const hap_graph *g, const hap_cluster *c, const hap_pipe_spec *s,
                              int32_t m, hap_err *err) {
  int32_t n = s->stages * s->chunks;
  if (s->stages > HAP_PIPE_MAX_GROUPS)
    return hap_err_set(err, HAP_EINVAL, "pipeline: %d stages, at most %d", s->stages,
                       HAP_PIPE_MAX_GROUPS);
  int64_t given = 0;
  for (int32_t i = 0; i < s->n_groups; i++)
    given += s->group_devices[i];
  if (s->n_groups > 0 && given != c->n_devices)
    return hap_err_set(err, HAP_EINVAL, "pipeline: groups add up to %lld devices, '%s' has %d",
                       (long long)given, c->name, c->n_devices);
  if (s->n_groups == 0 && c->n_devices % s->stages != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "pipeline: %d stages do not divide the %d devices of '%s' into equal groups",
                       s->stages, c->n_devices, c->name);
  if (n > g->n_nodes)
    return hap_err_set(err, HAP_EINVAL, "pipeline: %d virtual stages but '%s' has %d nodes", n,
                       g->name, g->n_nodes);
  if (m < 1)
    return hap_err_set(err, HAP_EINVAL, "pipeline: micro_batches %d, expected >= 1", m);
  if (s->n_cuts > 0 && s->n_cuts != n + 1)
    return hap_err_set(err, HAP_EINVAL, "pipeline: %d cuts for %d virtual stages, expected %d",
                       s->n_cuts, n, n + 1);
  for (int32_t k = 0; k < s->n_cuts; k++)
    if ((k == 0 && s->cuts[k] != 0) || (k == n && s->cuts[k] != g->n_nodes) ||
        (k > 0 && s->cuts[k] <= s->cuts[k - 1]))
      return hap_err_set(err, HAP_EINVAL,
                         "pipeline: cuts[%d] = %d, expected increasing cuts from 0 to %d", k,
                         s->cuts[k], g->n_nodes);
  return HAP_OK;
}

hap_status hap_pipe_estimate_run(const hap_graph *g, const hap_cluster *c,
                                 const hap_pipe_spec *spec, const hap_synth_options *o,
                                 hap_pipe_estimate **out, hap_err *err) {
  *out = NULL;
  hap_pipe_spec s = *spec;
  int32_t m = s.micro_batches > 0 ? s.micro_batches
                                  : (o->policy.micro_batches > 0 ? o->policy.micro_batches : 1);
  s.micro_batches = m;
  HAP_TRY(check_shape(g, c, &s, m, err));
  hap_pipe_order *order = NULL;
  HAP_TRY(hap_pipe_order_build(s.schedule, s.stages, m, s.chunks, &order, err));
  hap_pipe_estimate *e = calloc(1, sizeof *e);
  int32_t n = s.stages * s.chunks;
  int32_t *cuts = malloc(((size_t)n + 1) * sizeof *cuts);
  hap_status st = HAP_OK;
  if (e == NULL || cuts == NULL || (e->stages = calloc((size_t)n, sizeof *e->stages)) == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory");
  if (st == HAP_OK) {
    e->spec = s;
    e->n_stages = n;
    e->group_size = s.n_groups > 0 ? 0 : c->n_devices / s.stages;
    for (int32_t gi = 0, first = 0; gi < s.stages; gi++) {
      e->group_devices[gi] = s.n_groups > 0 ? s.group_devices[gi] : c->n_devices / s.stages;
      e->group_first[gi] = first;
      first += e->group_devices[gi];
    }
    if (s.n_groups > 0) { /* equal after all: say so */
      bool equal = true;
      for (int32_t gi = 1; gi < s.stages; gi++)
        equal = equal && e->group_devices[gi] == e->group_devices[0];
      e->group_size = equal ? e->group_devices[0] : 0;
    }
    e->link = slowest_link(c, e, s.stages);
    double *rate = malloc((size_t)n * sizeof *rate); /* virtual stage k on group k % p */
    for (int32_t k = 0; rate != NULL && k < n; k++)
      rate[k] = group_flops(c, e, k % s.stages, &o->policy);
    st = rate != NULL ? hap_stage_cuts_rated(g, n, rate, e->link.bandwidth_Bps, cuts, err)
                      : hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory");
    free(rate);
    if (st == HAP_OK && s.n_cuts > 0)
      memcpy(cuts, s.cuts, ((size_t)n + 1) * sizeof *cuts); /* the caller's slicing */
  }
  if (st == HAP_OK) {
    int32_t *sizes = malloc((size_t)s.stages * sizeof *sizes);
    for (int32_t gi = 0; sizes != NULL && gi < s.stages; gi++)
      sizes[gi] = e->group_devices[gi];
    uint64_t gd = 0, cd = 0;
    st = sizes ? hap_graph_digest(g, &gd, err) : hap_err_set(err, HAP_ENOMEM, "out of memory");
    if (st == HAP_OK)
      st = hap_cluster_digest(c, &cd, err);
    if (st == HAP_OK) {
      e->pipeline = hap_pipeline_create(hap_strategy_name(o->strategy), g->name, gd, c->name, cd,
                                        c->n_devices, s.schedule, s.chunks, s.stages, sizes);
      if (e->pipeline == NULL)
        st = hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory");
    }
    free(sizes);
  }
  double t0 = now_s();
  for (int32_t k = 0; k < n && st == HAP_OK; k++) {
    hap_pipe_stage *ps = &e->stages[k];
    ps->first = e->pipeline->stages[k].first = cuts[k];
    ps->end = e->pipeline->stages[k].end = cuts[k + 1];
    ps->group = k % s.stages;
    ps->in_flight = hap_pipe_order_in_flight(order, ps->group);
  }
  if (st == HAP_OK) {
    e->pipeline->policy = o->policy;
    e->pipeline->policy.micro_batches = m;
  }
  for (int32_t k = 0; k < n && st == HAP_OK; k++) {
    hap_pipe_stage *ps = &e->stages[k];
    st = run_stage(g, c, o, e, k, err);
    if (st != HAP_OK)
      hap_err_prefix(err, "pipeline stage %d (nodes %d..%d, '%s' to '%s')", k, ps->first,
                     ps->end - 1, g->nodes[ps->first].name, g->nodes[ps->end - 1].name);
  }
  if (e != NULL)
    e->synth_seconds = now_s() - t0;
  if (st == HAP_OK)
    st = simulate_order(e, order, err);
  if (st == HAP_OK)
    e->pipeline->predicted_iteration_s = e->sim->makespan_s;
  hap_pipe_order_destroy(order);
  free(cuts);
  if (st != HAP_OK) {
    hap_pipe_estimate_destroy(e);
    return st;
  }
  *out = e;
  return HAP_OK;
}
