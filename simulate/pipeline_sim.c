/* pipeline_sim.c — a pipeline order's iteration as engine tasks: one compute task per op, one
 * transfer per boundary crossing, the dependencies between them, and the per-group results
 * (pipeline_sim.h). */
#include "simulate/pipeline_sim.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "simulate/engine.h"

typedef struct pipe_build {
  const hap_pipe_sim_input *in;
  hap_sim *sim;
  int32_t p, m, v, n; /* groups, micro-batches, chunks, ops per group */
  int32_t *first;     /* [p*n] an op's first engine task: where its dependencies attach */
  int32_t *last;      /* [p*n] its last engine task: what its send waits for */
  int32_t *send;      /* [p*n] the transfer after it, or -1 */
  int32_t *at;        /* [2][m][p*v] (pass, micro, virtual stage) -> g*n + k */
  int32_t *res_next;  /* [p] resource group g -> g+1 (mod p) */
  int32_t *res_prev;  /* [p] resource group g -> g-1 (mod p) */
} pipe_build;

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "pipeline sim: out of memory");
}

/* ---- input ---- */

/* Every x[i] finite and >= 0. */
static hap_status check_array(const char *field, const double *x, int32_t n, const char *expect,
                              hap_err *err) {
  for (int32_t i = 0; i < n; i++)
    if (!isfinite(x[i]) || x[i] < 0)
      return hap_err_set(err, HAP_EINVAL, "pipeline sim: %s[%d]: %g, expected %s", field, i, x[i],
                         expect);
  return HAP_OK;
}

static hap_status check_input(const hap_pipe_sim_input *in, hap_err *err) {
  if (in == NULL || in->order == NULL)
    return hap_err_set(err, HAP_EINVAL, "pipeline sim: order: NULL, expected a pipeline order");
  int32_t pv = hap_pipe_order_groups(in->order) * hap_pipe_order_chunks(in->order);
  if (in->fwd_s == NULL || in->bwd_s == NULL)
    return hap_err_set(err, HAP_EINVAL, "pipeline sim: %s: NULL, expected %d times (s)",
                       in->fwd_s == NULL ? "fwd_s" : "bwd_s", pv);
  const char *time = "a finite time >= 0 s";
  HAP_TRY(check_array("fwd_s", in->fwd_s, pv, time, err));
  HAP_TRY(check_array("bwd_s", in->bwd_s, pv, time, err));
  if (in->boundary_bytes != NULL)
    HAP_TRY(check_array("boundary_bytes", in->boundary_bytes, pv, "finite bytes >= 0", err));
  if (in->tail_s != NULL)
    HAP_TRY(check_array("tail_s", in->tail_s, hap_pipe_order_groups(in->order), time, err));
  if (!isfinite(in->link.latency_s) || in->link.latency_s < 0)
    return hap_err_set(err, HAP_EINVAL, "pipeline sim: link.latency_s: %g, expected %s",
                       in->link.latency_s, time);
  if (!isfinite(in->link.bandwidth_Bps) || in->link.bandwidth_Bps <= 0)
    return hap_err_set(err, HAP_EINVAL,
                       "pipeline sim: link.bandwidth_Bps: %g, expected finite bytes/s > 0",
                       in->link.bandwidth_Bps);
  return hap_pipe_order_check(in->order, err);
}

/* ---- building ---- */

static void build_free(pipe_build *b) {
  hap_sim_destroy(b->sim);
  free(b->first);
  free(b->last);
  free(b->send);
  free(b->at);
  free(b->res_next);
  free(b->res_prev);
}

static hap_status build_init(pipe_build *b, const hap_pipe_sim_input *in, hap_err *err) {
  const hap_pipe_order *o = in->order;
  *b = (pipe_build){.in = in,
                    .p = hap_pipe_order_groups(o),
                    .m = hap_pipe_order_micro(o),
                    .v = hap_pipe_order_chunks(o),
                    .n = hap_pipe_order_n_ops(o, 0)};
  size_t ops = (size_t)b->p * (size_t)b->n;
  b->first = malloc(ops * sizeof *b->first);
  b->last = malloc(ops * sizeof *b->last);
  b->send = malloc(ops * sizeof *b->send);
  b->at = malloc(ops * sizeof *b->at); /* 2*m*p*v = p*n entries */
  b->res_next = malloc((size_t)b->p * sizeof *b->res_next);
  b->res_prev = malloc((size_t)b->p * sizeof *b->res_prev);
  if (!b->first || !b->last || !b->send || !b->at || !b->res_next || !b->res_prev)
    return oom(err);
  return hap_sim_create(b->p, &b->sim, err);
}

/* One resource per direction between neighbouring groups (with p = 2, g -> g+1 is g -> g-1). */
static hap_status add_links(pipe_build *b, hap_err *err) {
  char name[64];
  for (int32_t g = 0; g < b->p && b->p > 1; g++) {
    snprintf(name, sizeof name, "group %d -> %d", (int)g, (int)((g + 1) % b->p));
    HAP_TRY(hap_sim_add_resource(b->sim, name, b->in->link.bandwidth_Bps, &b->res_next[g], err));
  }
  for (int32_t g = 0; g < b->p && b->p > 1; g++) {
    int32_t to = (g + b->p - 1) % b->p;
    if (b->p == 2) {
      b->res_prev[g] = b->res_next[g];
      continue;
    }
    snprintf(name, sizeof name, "group %d -> %d", (int)g, (int)to);
    HAP_TRY(hap_sim_add_resource(b->sim, name, b->in->link.bandwidth_Bps, &b->res_prev[g], err));
  }
  return HAP_OK;
}

static int32_t vstage(const pipe_build *b, int32_t g, hap_pipe_op op) {
  return op.chunk * b->p + g;
}

static size_t at_index(const pipe_build *b, bool backward, int32_t micro, int32_t stage) {
  return ((size_t)backward * (size_t)b->m + (size_t)micro) * (size_t)b->p * (size_t)b->v +
         (size_t)stage;
}

/* The engine tasks of one op of group g: here one compute task of its virtual stage's time on
 * the group's one device. Expanding a group to its devices and an op to a stage's lowered task
 * list replaces this function: *first is where incoming dependencies attach, *last what the
 * op's send waits for. */
static hap_status add_op_tasks(pipe_build *b, int32_t g, hap_pipe_op op, int32_t *first,
                               int32_t *last, hap_err *err) {
  int32_t k = vstage(b, g, op);
  char name[64];
  snprintf(name, sizeof name, "%s.m%d.s%d", op.backward ? "bwd" : "fwd", (int)op.micro, (int)k);
  hap_sim_task t = {.name = name,
                    .device = g,
                    .stream = HAP_SIM_COMPUTE,
                    .duration_s = op.backward ? b->in->bwd_s[k] : b->in->fwd_s[k]};
  HAP_TRY(hap_sim_add_task(b->sim, &t, first, err));
  *last = *first;
  return HAP_OK;
}

/* The transfer carrying op's output to the neighbouring group after task `after`; *id = -1 when
 * the op sends nothing (the last stage's forward, the first stage's backward) or the receiver is
 * the same group (p = 1). */
static hap_status add_send(pipe_build *b, int32_t g, hap_pipe_op op, int32_t after, int32_t *id,
                           hap_err *err) {
  int32_t k = vstage(b, g, op), pv = b->p * b->v;
  *id = -1;
  if (b->p == 1 || (!op.backward && k == pv - 1) || (op.backward && k == 0))
    return HAP_OK;
  int32_t res = op.backward ? b->res_prev[g] : b->res_next[g];
  int32_t to = op.backward ? k - 1 : k + 1;
  const double *bb = b->in->boundary_bytes;
  char name[64];
  snprintf(name, sizeof name, "%s.m%d.s%d>s%d", op.backward ? "grad" : "act", (int)op.micro, (int)k,
           (int)to);
  hap_sim_task t = {.name = name,
                    .device = g,
                    .stream = HAP_SIM_COMM,
                    .kind = HAP_SIM_TRANSFER,
                    .bytes = bb != NULL ? bb[op.backward ? k - 1 : k] : 0,
                    .deps = &after,
                    .n_deps = 1,
                    .path = &res,
                    .n_path = 1,
                    .latency_s = b->in->link.latency_s};
  return hap_sim_add_task(b->sim, &t, id, err);
}

/* Every group's ops in its order (each followed by its send), then its tail. */
static hap_status add_groups(pipe_build *b, hap_err *err) {
  for (int32_t g = 0; g < b->p; g++) {
    for (int32_t k = 0; k < b->n; k++) {
      hap_pipe_op op = hap_pipe_order_op(b->in->order, g, k);
      size_t pos = (size_t)g * (size_t)b->n + (size_t)k;
      HAP_TRY(add_op_tasks(b, g, op, &b->first[pos], &b->last[pos], err));
      HAP_TRY(add_send(b, g, op, b->last[pos], &b->send[pos], err));
      b->at[at_index(b, op.backward, op.micro, vstage(b, g, op))] = (int32_t)pos;
    }
    if (b->in->tail_s != NULL) {
      hap_sim_task t = {
          .name = "tail", .device = g, .stream = HAP_SIM_COMPUTE, .duration_s = b->in->tail_s[g]};
      HAP_TRY(hap_sim_add_task(b->sim, &t, NULL, err));
    }
  }
  return HAP_OK;
}

/* What the op at pos waits for from another op: its input's transfer, or, within one group, the
 * producing op itself. */
static int32_t arrival(const pipe_build *b, int32_t pos) {
  return b->send[pos] >= 0 ? b->send[pos] : b->last[pos];
}

static hap_status add_deps(pipe_build *b, hap_err *err) {
  int32_t pv = b->p * b->v;
  for (int32_t g = 0; g < b->p; g++)
    for (int32_t k = 0; k < b->n; k++) {
      hap_pipe_op op = hap_pipe_order_op(b->in->order, g, k);
      int32_t s = vstage(b, g, op), pos = g * b->n + k, from;
      if (!op.backward && s == 0)
        continue;
      if (!op.backward)
        from = arrival(b, b->at[at_index(b, false, op.micro, s - 1)]);
      else if (s == pv - 1)
        from = b->last[b->at[at_index(b, false, op.micro, s)]];
      else
        from = arrival(b, b->at[at_index(b, true, op.micro, s + 1)]);
      HAP_TRY(hap_sim_add_dep(b->sim, b->first[pos], from, err));
    }
  return HAP_OK;
}

/* ---- results ---- */

void hap_pipe_sim_destroy(hap_pipe_sim *r) {
  if (r == NULL)
    return;
  free(r->busy_s);
  free(r->idle_s);
  free(r->bubble);
  free(r->comm_s);
  free(r->spans);
  free(r);
}

hap_pipe_sim_span hap_pipe_sim_op_span(const hap_pipe_sim *r, int32_t group, int32_t k) {
  return r->spans[(size_t)group * (size_t)r->ops_per_group + (size_t)k];
}

static hap_status collect(const pipe_build *b, hap_pipe_sim *r, hap_err *err) {
  const hap_sim_results *res = hap_sim_results_get(b->sim);
  size_t p = (size_t)b->p;
  r->busy_s = malloc(p * sizeof *r->busy_s);
  r->idle_s = malloc(p * sizeof *r->idle_s);
  r->bubble = malloc(p * sizeof *r->bubble);
  r->comm_s = malloc(p * sizeof *r->comm_s);
  r->spans = malloc(p * (size_t)b->n * sizeof *r->spans);
  if (!r->busy_s || !r->idle_s || !r->bubble || !r->comm_s || !r->spans)
    return oom(err);
  r->makespan_s = res->makespan_s;
  for (int32_t g = 0; g < b->p; g++) {
    const hap_sim_device_stats *d = &res->devices[g];
    r->busy_s[g] = d->busy_s[HAP_SIM_COMPUTE];
    r->idle_s[g] = d->stream_idle_s[HAP_SIM_COMPUTE];
    r->comm_s[g] = d->busy_s[HAP_SIM_COMM];
    r->bubble[g] = res->makespan_s > 0 ? r->idle_s[g] / res->makespan_s : 0;
    r->mean_bubble += r->bubble[g] / b->p;
  }
  for (size_t pos = 0; pos < p * (size_t)b->n; pos++) {
    hap_sim_record first, last;
    HAP_TRY(hap_sim_task_record(b->sim, b->first[pos], &first, err));
    HAP_TRY(hap_sim_task_record(b->sim, b->last[pos], &last, err));
    r->spans[pos] = (hap_pipe_sim_span){.start_s = first.start_s, .end_s = last.end_s};
  }
  return HAP_OK;
}

hap_status hap_pipe_sim_run(const hap_pipe_sim_input *in, hap_pipe_sim **out, hap_err *err) {
  *out = NULL;
  HAP_TRY(check_input(in, err));
  pipe_build b;
  hap_status st = build_init(&b, in, err);
  if (st == HAP_OK)
    st = add_links(&b, err);
  if (st == HAP_OK)
    st = add_groups(&b, err);
  if (st == HAP_OK)
    st = add_deps(&b, err);
  if (st == HAP_OK)
    st = hap_sim_run(b.sim, NULL, err);
  hap_pipe_sim *r = NULL;
  if (st == HAP_OK) {
    r = calloc(1, sizeof *r);
    st = r == NULL ? oom(err) : HAP_OK;
  }
  if (st == HAP_OK) {
    *r = (hap_pipe_sim){.n_groups = b.p, .ops_per_group = b.n};
    st = collect(&b, r, err);
  }
  build_free(&b);
  if (st != HAP_OK) {
    hap_pipe_sim_destroy(r);
    return st;
  }
  *out = r;
  return HAP_OK;
}
