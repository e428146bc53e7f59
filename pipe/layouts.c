/* layouts.c — the `hap` strategy's search over 3-D layouts (layouts.h). */
#include "pipe/layouts.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Trainable parameter elements of g. */
static double param_elements(const hap_graph *g) {
  double n = 0;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *x = &g->tensors[t];
    if (x->kind != HAP_TENSOR_PARAMETER)
      continue;
    double e = 1;
    for (int32_t d = 0; d < x->shape.rank; d++)
      e *= (double)x->shape.dims[d];
    n += e;
  }
  return n;
}

/* The smallest device memory, or the limit, bytes. */
static double memory_limit(const hap_cluster *c, const hap_synth_options *o) {
  if (o->memory_limit_bytes > 0)
    return o->memory_limit_bytes;
  double m = HUGE_VAL;
  for (int32_t d = 0; d < c->n_devices; d++)
    m = fmin(m, c->devices[d].memory_bytes);
  return m;
}

bool hap_layouts_needed(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o) {
  hap_param_bytes b = hap_policy_param_bytes(&o->policy);
  return param_elements(g) * hap_param_bytes_total(&b) > memory_limit(c, o);
}

void hap_layout_row_describe(const hap_layout_row *r, char *buf, size_t len) {
  const hap_megatron_spec *m = &r->layout;
  snprintf(buf, len, "tp=%d,pp=%d,dp=%d,mbs=%d zero=%d recompute=%s", (int)m->tp, (int)m->pp,
           (int)m->dp, (int)m->mbs, (int)r->policy.zero, hap_recompute_name(r->policy.recompute));
}

/* A lower bound of what the fullest device holds for its parameters alone: an even share of the
 * parameters over the stages, split tp ways, ZeRO dividing what the policy says by dp, bytes. */
static double parameter_floor(double params, const hap_layout_row *r) {
  hap_param_bytes b = hap_policy_param_bytes_zero(&r->policy, r->layout.dp);
  return params / r->layout.pp / r->layout.tp * hap_param_bytes_total(&b);
}

/* What the fullest device of e (made with full recomputation) would hold without it: each
 * stage's kept activations plus, for every layer of the stage, a working set as large as the
 * one recomputed at once, per micro-batch in flight. A guess that skips hopeless candidates
 * (a program made without recomputation may keep other layouts), bytes. */
static double without_recompute(const hap_graph *g, const hap_pipe_estimate *e) {
  double most = 0;
  for (int32_t k = 0; k < e->n_stages; k++) {
    const hap_pipe_stage *s = &e->stages[k];
    const hap_plan *p = s->plan;
    int32_t layers = 0; /* nodes that start a layer scope: "<word>.<integer>." changes */
    for (int32_t j = s->first; j < s->end; j++) {
      const char *a = g->nodes[j].name, *b = j > s->first ? g->nodes[j - 1].name : "";
      const char *da = strchr(a, '.'), *db = strchr(b, '.');
      const char *ea = da ? strchr(da + 1, '.') : NULL, *eb = db ? strchr(db + 1, '.') : NULL;
      if (ea != NULL && (eb == NULL || ea - a != eb - b || strncmp(a, b, (size_t)(ea - a)) != 0))
        layers++;
    }
    double copies = (double)s->in_flight / e->spec.chunks;
    for (int32_t d = 0; d < p->n_devices && p->memory_recorded; d++) {
      const hap_memory_breakdown *m = &p->device_memory[d];
      double kept = m->activations - m->recompute_working;
      double per_micro = kept + (layers > 0 ? layers : 1) * m->recompute_working;
      most = fmax(most, hap_memory_total(m) - m->activations + per_micro * copies);
    }
  }
  return most;
}

/* Estimate row r (layout and policy set): fills iteration_s, peak_bytes, fits, why; keeps the
 * estimate in *est (owned) when it ran. */
static hap_status estimate_row(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                               hap_layout_row *r, hap_synth_options *stage, hap_pipe_estimate **est,
                               hap_err *err) {
  hap_synth_options base = *o;
  base.policy = r->policy;
  base.leaner_states = 200000; /* many candidates: give up on hard fits sooner */
  hap_megatron_spec resolved;
  hap_pipe_spec pipe;
  hap_err e = {0};
  hap_status st = hap_megatron_layout(&r->layout, g, c, &base, &resolved, &pipe, stage, &e);
  if (st == HAP_OK) {
    r->layout = resolved;
    r->policy = stage->policy;
    /* without tensor parallelism a stage is hap's own program over its group (its search and
     * ratios: the devices of a group may differ), not megatron-tp's replicas of one device */
    if (resolved.tp == 1)
      stage->strategy = HAP_STRATEGY_HAP;
    st = hap_pipe_estimate_run(g, c, &pipe, stage, est, &e);
  }
  if (st == HAP_ENOMEM)
    return hap_err_set(err, HAP_ENOMEM, "%s", e.msg);
  if (st != HAP_OK) {
    snprintf(r->why, sizeof r->why, "%.300s", e.msg);
    return HAP_OK;
  }
  r->iteration_s = (*est)->sim->makespan_s;
  r->fits = true;
  for (int32_t k = 0; k < (*est)->n_stages; k++) {
    r->peak_bytes = fmax(r->peak_bytes, (*est)->stages[k].memory_bytes);
    r->fits = r->fits && (*est)->stages[k].fits;
  }
  if (!r->fits) {
    char b[32];
    snprintf(r->why, sizeof r->why, "a stage needs %s", hap_fmt_bytes(r->peak_bytes, b, sizeof b));
  }
  return HAP_OK;
}

/* The layouts with tensor-parallel degree tp: pp stages of whole hosts (or, with tp under a
 * host, of whole tensor-parallel groups) for every pp dividing the devices / tp. */
static void layouts_of_tp(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                          uint32_t forced, int32_t tp, int64_t batch, double params, double limit,
                          hap_layout_search *out, hap_status *status, hap_err *err) {
  hap_status st = HAP_OK;
  for (int32_t pp = 1; pp <= 64 && st == HAP_OK; pp *= 2) {
    if (c->n_devices % (tp * pp) != 0 || pp > g->n_nodes / 4 + 1)
      continue;
    int32_t dp = c->n_devices / (tp * pp);
    int32_t m = o->policy.micro_batches;
    bool m_forced = (forced & HAP_POLICY_MICRO_BATCHES) != 0 && m > 0;
    if (batch <= 0 || batch % dp != 0 ||
        (m_forced ? batch % ((int64_t)m * dp) != 0 : batch / dp > HAP_POLICY_MAX_MICRO_BATCHES))
      continue;
    int32_t mbs = m_forced ? (int32_t)(batch / ((int64_t)m * dp)) : 1;
    /* full recomputation first: it fits where anything does; none only when its activations,
     * judged from full's, may fit too */
    const hap_recompute tries[2] = {HAP_RECOMPUTE_FULL, HAP_RECOMPUTE_NONE};
    int n_tries = forced & HAP_POLICY_RECOMPUTE ? 1 : 2;
    double none_guess = 0; /* bytes the fullest device would hold without recomputation */
    for (int t = 0; t < n_tries && out->n_rows < HAP_LAYOUTS_MAX && st == HAP_OK; t++) {
      hap_layout_row *r = &out->rows[out->n_rows++];
      r->layout =
          (hap_megatron_spec){.tp = tp, .pp = pp, .dp = dp, .mbs = mbs, .v = 1, .sp = HAP_SP_FREE};
      r->policy = o->policy;
      if (!(forced & HAP_POLICY_ZERO))
        r->policy.zero = dp > 1 ? 1 : 0;
      if (!(forced & HAP_POLICY_RECOMPUTE))
        r->policy.recompute = tries[t];
      double floor = parameter_floor(params, r);
      if (floor > limit) {
        char b[32], l[32];
        snprintf(r->why, sizeof r->why, "parameters alone need at least %s of %s",
                 hap_fmt_bytes(floor, b, sizeof b), hap_fmt_bytes(limit, l, sizeof l));
        break; /* recomputation does not shed parameters */
      }
      if (t > 0 && none_guess > limit) {
        char b[32];
        snprintf(r->why, sizeof r->why,
                 "skipped: about %s without recomputation (every layer's activations of each "
                 "micro-batch in flight)",
                 hap_fmt_bytes(none_guess, b, sizeof b));
        continue;
      }
      hap_synth_options stage;
      hap_pipe_estimate *est = NULL;
      double t1 = now_s();
      st = estimate_row(g, c, o, r, &stage, &est, err);
      r->seconds = now_s() - t1;
      if (st == HAP_OK && est != NULL && t == 0 && r->policy.recompute == HAP_RECOMPUTE_FULL)
        none_guess = without_recompute(g, est);
      int i = out->n_rows - 1;
      if (st == HAP_OK && r->fits &&
          (out->best < 0 || r->iteration_s < out->rows[out->best].iteration_s)) {
        hap_pipe_estimate_destroy(out->estimate);
        out->estimate = est;
        out->stage = stage;
        out->best = i;
        est = NULL;
      }
      hap_pipe_estimate_destroy(est);
      if (!r->fits && t == 0)
        break; /* not even with full recomputation */
    }
  }
  *status = st;
}

hap_status hap_layouts_search(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                              uint32_t forced, hap_layout_search *out, hap_err *err) {
  memset(out, 0, sizeof *out);
  out->best = -1;
  double t0 = now_s();
  int32_t host = c->hosts[0].n_devices;
  for (int32_t h = 1; h < c->n_hosts; h++)
    if (c->hosts[h].n_devices != host)
      return HAP_OK; /* unequal hosts: no Megatron layout */
  int64_t batch = hap_pipe_batch_of(g);
  double params = param_elements(g), limit = memory_limit(c, o);
  hap_status st = HAP_OK;
  /* tensor parallelism over a host's devices first (Megatron's), then over fewer */
  for (int32_t tp = host; tp >= 1 && st == HAP_OK; tp /= 2) {
    if (host % tp != 0)
      continue;
    layouts_of_tp(g, c, o, forced, tp, batch, params, limit, out, &st, err);
  }
  out->seconds = now_s() - t0;
  return st;
}

void hap_layouts_free(hap_layout_search *s) {
  if (s == NULL)
    return;
  hap_pipe_estimate_destroy(s->estimate);
  s->estimate = NULL;
}
