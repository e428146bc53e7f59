/* plan.c — the plan data model: names, construction, and hap_plan_validate, which replays the
 * program's property flow.
 *
 * The flow: an available set of properties (tensor, layout; a Gather also with its segment and
 * granule) starts empty. A source adds (tensor, to); a compute needs (input i, variant.in[i]) for
 * every input and adds (output o, variant.out[o]); a comm needs (tensor, from) and adds
 * (tensor, to). Properties are never removed: once made, a layout stays usable (the executor
 * keeps what a later step reads). */
#include "plan/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "plan/replica.h"

/* ---- names -------------------------------------------------------------------------------- */

static const char *const step_kind_names[HAP_STEP_KIND_COUNT] = {"source", "compute", "comm"};
static const char *const comm_op_names[HAP_COMM_OP_COUNT] = {
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "slice", "keep_once"};
static const char *const storage_names[HAP_STORAGE_COUNT] = {"input", "replicated", "sharded",
                                                             "zero", "sfb"};

static hap_status lookup(const char *const *names, int n, const char *s, int *out) {
  for (int i = 0; s != NULL && i < n; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return HAP_OK;
    }
  return HAP_ENOTFOUND;
}

const char *hap_step_kind_name(hap_step_kind k) {
  return (unsigned)k < HAP_STEP_KIND_COUNT ? step_kind_names[k] : "?";
}

const char *hap_comm_op_name(hap_comm_op op) {
  return (unsigned)op < HAP_COMM_OP_COUNT ? comm_op_names[op] : "?";
}

const char *hap_storage_name(hap_storage s) {
  return (unsigned)s < HAP_STORAGE_COUNT ? storage_names[s] : "?";
}

hap_status hap_step_kind_parse(const char *s, hap_step_kind *out) {
  int i;
  HAP_TRY(lookup(step_kind_names, HAP_STEP_KIND_COUNT, s, &i));
  *out = (hap_step_kind)i;
  return HAP_OK;
}

hap_status hap_comm_op_parse(const char *s, hap_comm_op *out) {
  int i;
  HAP_TRY(lookup(comm_op_names, HAP_COMM_OP_COUNT, s, &i));
  *out = (hap_comm_op)i;
  return HAP_OK;
}

hap_status hap_storage_parse(const char *s, hap_storage *out) {
  int i;
  HAP_TRY(lookup(storage_names, HAP_STORAGE_COUNT, s, &i));
  *out = (hap_storage)i;
  return HAP_OK;
}

const char *hap_layout_name(hap_layout l, char buf[4]) {
  if (l == HAP_LAYOUT_IDENTITY || l == HAP_LAYOUT_REDUCE) {
    buf[0] = l == HAP_LAYOUT_IDENTITY ? 'I' : 'R';
    buf[1] = '\0';
  } else if (l >= 0 && l < HAP_MAX_DIMS) {
    buf[0] = 'G';
    buf[1] = (char)('0' + l);
    buf[2] = '\0';
  } else {
    buf[0] = '?';
    buf[1] = '\0';
  }
  return buf;
}

hap_status hap_layout_parse(const char *s, hap_layout *out) {
  if (s == NULL)
    return HAP_ENOTFOUND;
  if ((s[0] == 'I' || s[0] == 'R') && s[1] == '\0') {
    *out = s[0] == 'I' ? HAP_LAYOUT_IDENTITY : HAP_LAYOUT_REDUCE;
    return HAP_OK;
  }
  if (s[0] == 'G' && s[1] >= '0' && s[1] < '0' + HAP_MAX_DIMS && s[2] == '\0') {
    *out = (hap_layout)(s[1] - '0');
    return HAP_OK;
  }
  return HAP_ENOTFOUND;
}

/* ---- construction --------------------------------------------------------------------------- */

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

hap_status hap_plan_specs_set(hap_plan_specs *s, const char *model, const char *cluster) {
  char *m = model ? strdup(model) : NULL, *c = cluster ? strdup(cluster) : NULL;
  hap_plan_specs_free(s);
  if ((model && !m) || (cluster && !c)) {
    free(m);
    free(c);
    return HAP_ENOMEM;
  }
  s->model = m;
  s->cluster = c;
  return HAP_OK;
}

void hap_plan_specs_free(hap_plan_specs *s) {
  free(s->model);
  free(s->cluster);
  s->model = s->cluster = NULL;
}

hap_plan *hap_plan_create(const char *strategy, const char *graph_name, uint64_t graph_digest,
                          const char *cluster_name, uint64_t cluster_digest, int32_t n_devices,
                          int32_t n_segments) {
  if (n_devices < 1 || n_segments < 1 || n_segments > INT32_MAX / n_devices)
    return NULL;
  hap_plan *p = calloc(1, sizeof *p);
  if (p == NULL)
    return NULL;
  size_t nd = (size_t)n_devices;
  p->strategy = dup_or_empty(strategy);
  p->graph_name = dup_or_empty(graph_name);
  p->cluster_name = dup_or_empty(cluster_name);
  p->graph_digest = graph_digest;
  p->cluster_digest = cluster_digest;
  p->n_devices = n_devices;
  p->replicas = 1;
  p->group_size = n_devices;
  p->n_segments = n_segments;
  p->ratios = malloc((size_t)n_segments * nd * sizeof *p->ratios);
  p->device_memory_bytes = calloc(nd, sizeof *p->device_memory_bytes);
  p->device_compute_s = calloc(nd, sizeof *p->device_compute_s);
  p->device_comm_s = calloc(nd, sizeof *p->device_comm_s);
  p->device_memory = calloc(nd, sizeof *p->device_memory);
  p->policy = hap_policy_default();
  if (!p->strategy || !p->graph_name || !p->cluster_name || !p->ratios || !p->device_memory_bytes ||
      !p->device_compute_s || !p->device_comm_s || !p->device_memory) {
    hap_plan_destroy(p);
    return NULL;
  }
  for (size_t i = 0; i < (size_t)n_segments * nd; i++)
    p->ratios[i] = 1.0 / (double)n_devices;
  return p;
}

hap_status hap_plan_set_replicas(hap_plan *p, int32_t replicas, hap_err *err) {
  if (replicas < 1 || p->n_devices % replicas != 0)
    return hap_err_set(err, HAP_EINVAL, "replicas: %d, expected a divisor of the %d devices",
                       replicas, p->n_devices);
  int32_t gs = p->n_devices / replicas;
  size_t n = (size_t)p->n_segments * (size_t)gs;
  double *r = malloc(n * sizeof *r);
  if (r == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    r[i] = 1.0 / (double)gs;
  free(p->ratios);
  p->ratios = r;
  p->replicas = replicas;
  p->group_size = gs;
  return HAP_OK;
}

hap_plan *hap_plan_copy(const hap_plan *p) {
  hap_plan *q = hap_plan_create(p->strategy, p->graph_name, p->graph_digest, p->cluster_name,
                                p->cluster_digest, p->n_devices, p->n_segments);
  if (q == NULL || hap_plan_set_replicas(q, p->replicas, NULL) != HAP_OK ||
      hap_plan_specs_set(&q->specs, p->specs.model, p->specs.cluster) != HAP_OK) {
    hap_plan_destroy(q);
    return NULL;
  }
  size_t nd = (size_t)p->n_devices;
  memcpy(q->ratios, p->ratios, (size_t)p->n_segments * (size_t)p->group_size * sizeof *q->ratios);
  if (p->n_steps > 0) {
    q->steps = malloc((size_t)p->n_steps * sizeof *q->steps);
    if (q->steps == NULL) {
      hap_plan_destroy(q);
      return NULL;
    }
    memcpy(q->steps, p->steps, (size_t)p->n_steps * sizeof *q->steps);
    q->n_steps = q->cap_steps = p->n_steps;
  }
  q->predicted_iteration_s = p->predicted_iteration_s;
  memcpy(q->device_memory_bytes, p->device_memory_bytes, nd * sizeof *q->device_memory_bytes);
  memcpy(q->device_compute_s, p->device_compute_s, nd * sizeof *q->device_compute_s);
  memcpy(q->device_comm_s, p->device_comm_s, nd * sizeof *q->device_comm_s);
  memcpy(q->device_memory, p->device_memory, nd * sizeof *q->device_memory);
  q->policy = p->policy;
  q->memory_recorded = p->memory_recorded;
  return q;
}

void hap_plan_destroy(hap_plan *p) {
  if (p == NULL)
    return;
  free(p->strategy);
  free(p->graph_name);
  free(p->cluster_name);
  hap_plan_specs_free(&p->specs);
  free(p->ratios);
  free(p->steps);
  free(p->device_memory_bytes);
  free(p->device_compute_s);
  free(p->device_comm_s);
  free(p->device_memory);
  free(p);
}

hap_status hap_plan_step_graph(const hap_plan *p, const hap_graph *g, hap_graph **out,
                               hap_err *err) {
  *out = NULL;
  int32_t k = p->policy.micro_batches;
  if (p->replicas < 1 || k < 1 || k > HAP_POLICY_MAX_MICRO_BATCHES)
    return hap_err_set(err, HAP_EINVAL, "replicas %d x micro_batches %d: expected both >= 1",
                       p->replicas, k);
  if (p->replicas * k == 1)
    return HAP_OK;
  hap_err why = {0};
  if (hap_graph_split_batch(g, p->replicas * k, out, &why) == HAP_OK)
    return HAP_OK;
  if (k == 1)
    return hap_err_set(err, HAP_EINVAL, "replicas: %d: %s", p->replicas, why.msg);
  return hap_err_set(err, HAP_EINVAL, "policy: micro_batches=%d (x %d replicas): %s", k,
                     p->replicas, why.msg);
}

bool hap_plan_same_split(const hap_plan *p, int32_t a, int32_t b) {
  return hap_ratio_rows_same(p->ratios, p->n_segments, p->group_size, a, b);
}

hap_status hap_plan_add_step(hap_plan *p, const hap_step *step, hap_err *err) {
  if (p->n_steps == p->cap_steps && p->cap_steps > INT32_MAX / 2)
    return hap_err_set(err, HAP_ENOMEM, "plan: too many steps (%d)", p->n_steps);
  if (HAP_VEC_RESERVE(p->steps, p->cap_steps, (int64_t)p->n_steps + 1, 64) != 0)
    return hap_err_set(err, HAP_ENOMEM, "plan: out of memory adding step %d", p->n_steps);
  p->steps[p->n_steps++] = *step;
  return HAP_OK;
}

/* ---- validation: plan header ---------------------------------------------------------------- */

static hap_status check_graph(const hap_plan *p, const hap_graph *g, hap_err *err) {
  uint64_t d;
  HAP_TRY(hap_graph_digest(g, &d, err));
  if (d != p->graph_digest || strcmp(p->graph_name, g->name) != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "graph: made for graph '%s' digest %016llx, this graph '%s' has digest "
                       "%016llx; re-run hap-synth",
                       p->graph_name, (unsigned long long)p->graph_digest, g->name,
                       (unsigned long long)d);
  if (p->n_segments != g->n_segments)
    return hap_err_set(err, HAP_EINVAL,
                       "segments: the plan has %d, expected %d (the segments of graph '%s')",
                       p->n_segments, g->n_segments, g->name);
  return HAP_OK;
}

static hap_status check_cluster(const hap_plan *p, const hap_cluster *c, hap_err *err) {
  uint64_t d;
  HAP_TRY(hap_cluster_digest(c, &d, err));
  if (d != p->cluster_digest) /* not the name: a profile's is its path (hap_cluster_digest) */
    return hap_err_set(err, HAP_EINVAL,
                       "cluster: made for cluster '%s' digest %016llx, this cluster '%s' has "
                       "digest %016llx; re-run hap-synth",
                       p->cluster_name, (unsigned long long)p->cluster_digest, c->name,
                       (unsigned long long)d);
  if (p->n_devices != c->n_devices)
    return hap_err_set(err, HAP_EINVAL,
                       "cluster.devices: the plan has %d, expected %d (the devices of cluster "
                       "'%s')",
                       p->n_devices, c->n_devices, c->name);
  return HAP_OK;
}

/* Every segment's ratios: finite, >= 0, summing to 1 within 1e-9. */
static hap_status check_ratios(const hap_plan *p, hap_err *err) {
  for (int32_t s = 0; s < p->n_segments; s++) {
    const double *r = &p->ratios[(size_t)s * (size_t)p->group_size];
    double sum = 0;
    for (int32_t i = 0; i < p->group_size; i++) {
      if (!isfinite(r[i]) || r[i] < 0)
        return hap_err_set(err, HAP_EINVAL,
                           "segments[%d].ratios[%d]: %g, expected a finite ratio >= 0", s, i, r[i]);
      sum += r[i];
    }
    if (fabs(sum - 1) > 1e-9)
      return hap_err_set(err, HAP_EINVAL,
                         "segments[%d].ratios: sum to %.17g, expected 1 (within 1e-9)", s, sum);
  }
  return HAP_OK;
}

static bool nonneg(double v) { return isfinite(v) && v >= 0; }

/* Predicted times and memory: finite and >= 0 (written files must read back). */
static hap_status check_predicted(const hap_plan *p, hap_err *err) {
  if (!nonneg(p->predicted_iteration_s))
    return hap_err_set(err, HAP_EINVAL, "predicted.iteration_s: %g, expected a finite time >= 0",
                       p->predicted_iteration_s);
  for (int32_t i = 0; i < p->n_devices; i++) {
    const double v[3] = {p->device_compute_s[i], p->device_comm_s[i], p->device_memory_bytes[i]};
    static const char *const names[3] = {"compute_s", "comm_s", "memory_bytes"};
    for (int k = 0; k < 3; k++)
      if (!nonneg(v[k]))
        return hap_err_set(err, HAP_EINVAL,
                           "predicted.devices[%d].%s: %g, expected a finite value >= 0", i,
                           names[k], v[k]);
  }
  for (int32_t k = 0; k < p->n_steps; k++)
    if (!nonneg(p->steps[k].predicted_s))
      return hap_err_set(err, HAP_EINVAL, "steps[%d].predicted_s: %g, expected a finite time >= 0",
                         k, p->steps[k].predicted_s);
  return HAP_OK;
}

/* A recorded breakdown: parts finite and >= 0, adding up to the device's memory_bytes. */
static hap_status check_memory(const hap_plan *p, hap_err *err) {
  if (!p->memory_recorded)
    return HAP_OK;
  for (int32_t i = 0; i < p->n_devices; i++) {
    const hap_memory_breakdown *m = &p->device_memory[i];
    for (int k = 0; k < HAP_MEMORY_PARTS; k++)
      if (!nonneg(hap_memory_part_get(m, k)))
        return hap_err_set(err, HAP_EINVAL,
                           "predicted.devices[%d].memory.%s: %g, expected a finite byte count >= 0",
                           i, hap_memory_part_name(k), hap_memory_part_get(m, k));
    double sum = hap_memory_total(m), want = p->device_memory_bytes[i];
    if (fabs(sum - want) > 1e-9 * fmax(1, fabs(want)))
      return hap_err_set(err, HAP_EINVAL,
                         "predicted.devices[%d].memory: the parts add up to %.17g bytes, expected "
                         "memory_bytes %.17g",
                         i, sum, want);
  }
  return HAP_OK;
}

/* ---- validation: the property flow ---------------------------------------------------------- */

/* A property; segment and granule only for a Gather (-1 and 1 otherwise). */
typedef struct prop {
  hap_layout layout;
  int32_t segment;
  int64_t granule;
} prop;

/* One available property of a tensor, chained per tensor. */
typedef struct entry {
  prop p;
  int32_t next; /* next entry of the same tensor, -1 at the end */
} entry;

typedef struct flow {
  const hap_plan *p;
  const hap_graph *g;
  hap_err *err;
  int32_t *head;     /* [n_tensors] first entry, -1 */
  int32_t *sourced;  /* [n_tensors] step that sources the tensor, -1 */
  int32_t *computed; /* [n_nodes] step that computes the node, -1 */
  entry *ent;
  int32_t n_ent, cap_ent;
} flow;

__attribute__((format(printf, 3, 4))) static hap_status fail(flow *f, hap_status st,
                                                             const char *fmt, ...) {
  char msg[sizeof f->err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return hap_err_set(f->err, st, "%s", msg);
}

static prop make_prop(hap_layout l, int32_t segment, int64_t granule) {
  prop p = {.layout = l, .segment = -1, .granule = 1};
  if (l >= 0) {
    p.segment = segment;
    p.granule = granule > 1 ? granule : 1;
  }
  return p;
}

/* The same property: a Gather under segments that split alike is one. */
static bool prop_eq(const flow *f, prop a, prop b) {
  return a.layout == b.layout && a.granule == b.granule &&
         (a.segment == b.segment ||
          (a.layout >= 0 && hap_plan_same_split(f->p, a.segment, b.segment)));
}

/* "G0 (segment 1)", "G1 (segment 0, granule 64)", "I", "R". */
static const char *prop_str(prop p, char *buf, size_t len) {
  char l[4];
  hap_layout_name(p.layout, l);
  if (p.layout < 0)
    snprintf(buf, len, "%s", l);
  else if (p.granule == 1)
    snprintf(buf, len, "%s (segment %d)", l, p.segment);
  else
    snprintf(buf, len, "%s (segment %d, granule %lld)", l, p.segment, (long long)p.granule);
  return buf;
}

static bool has_prop(const flow *f, int32_t t, prop p) {
  for (int32_t e = f->head[t]; e >= 0 && f->ent != NULL; e = f->ent[e].next)
    if (prop_eq(f, f->ent[e].p, p))
      return true;
  return false;
}

static hap_status add_prop(flow *f, int32_t t, prop p) {
  if (has_prop(f, t, p))
    return HAP_OK;
  if (HAP_VEC_RESERVE(f->ent, f->cap_ent, (int64_t)f->n_ent + 1, 256) != 0)
    return fail(f, HAP_ENOMEM, "out of memory validating the plan");
  f->ent[f->n_ent] = (entry){.p = p, .next = f->head[t]};
  f->head[t] = f->n_ent++;
  return HAP_OK;
}

/* "I, G2 (segment 0)" (oldest first) or "nothing". */
static const char *avail_str(const flow *f, int32_t t, char *buf, size_t len) {
  int32_t ids[16], n = 0;
  for (int32_t e = f->head[t]; e >= 0 && n < 16 && f->ent != NULL; e = f->ent[e].next)
    ids[n++] = e;
  size_t o = 0;
  buf[0] = '\0';
  for (int32_t i = n - 1; i >= 0 && o < len; i--) {
    char pb[64];
    o += (size_t)snprintf(buf + o, len - o, "%s%s", i == n - 1 ? "" : ", ",
                          prop_str(f->ent[ids[i]].p, pb, sizeof pb));
  }
  if (n == 0)
    snprintf(buf, len, "nothing");
  return buf;
}

/* Step k needs property p of tensor t (`what` says which role, e.g. "input 0"). */
static hap_status need(flow *f, int32_t k, const char *who, const char *what, int32_t t, prop p) {
  if (has_prop(f, t, p))
    return HAP_OK;
  char pb[64], ab[256];
  return fail(f, HAP_EINVAL,
              "steps[%d]: %s needs %s '%s' as %s, but no earlier step makes it so (available: "
              "%s); expected a source, compute or comm step that produces it first",
              k, who, what, f->g->tensors[t].name, prop_str(p, pb, sizeof pb),
              avail_str(f, t, ab, sizeof ab));
}

/* A layout a tensor of this rank can have. */
static hap_status check_layout(flow *f, int32_t k, const char *who, const char *field, hap_layout l,
                               int32_t rank) {
  if (l == HAP_LAYOUT_IDENTITY || l == HAP_LAYOUT_REDUCE || (l >= 0 && l < rank))
    return HAP_OK;
  char lb[16];
  if (l >= 0 && l < HAP_MAX_DIMS)
    hap_layout_name(l, lb);
  else
    snprintf(lb, sizeof lb, "%d", l);
  if (rank == 0)
    return fail(f, HAP_EINVAL, "steps[%d]: %s: %s layout %s, expected I or R (a scalar)", k, who,
                field, lb);
  return fail(f, HAP_EINVAL,
              "steps[%d]: %s: %s layout %s, expected I, R or G0..G%d (a rank-%d tensor)", k, who,
              field, lb, rank - 1, rank);
}

static hap_status check_tensor_id(flow *f, int32_t k, const hap_step *s) {
  if (s->tensor < 0 || s->tensor >= f->g->n_tensors)
    return fail(f, HAP_EINVAL, "steps[%d]: %s: tensor id %d, expected 0..%d", k,
                hap_step_kind_name(s->kind), s->tensor, f->g->n_tensors - 1);
  return HAP_OK;
}

/* A Gather's extent must split into whole granules. */
static hap_status check_granule(flow *f, int32_t k, const char *who, int32_t t, prop p) {
  if (p.layout < 0)
    return HAP_OK;
  int64_t extent = f->g->tensors[t].shape.dims[p.layout];
  if (extent % p.granule != 0)
    return fail(f, HAP_EINVAL,
                "steps[%d]: %s: dim %d of '%s' has %lld elements, expected a multiple of the "
                "granule %lld",
                k, who, p.layout, f->g->tensors[t].name, (long long)extent, (long long)p.granule);
  return HAP_OK;
}

/* Which storages a tensor kind takes, and which layouts a storage takes. */
static hap_status check_storage(flow *f, int32_t k, const char *who, const hap_tensor *t,
                                const hap_step *s) {
  char lb[4];
  bool weight = t->kind == HAP_TENSOR_PARAMETER || t->kind == HAP_TENSOR_BUFFER;
  switch (s->storage) {
  case HAP_STORE_INPUT:
    if (t->kind != HAP_TENSOR_INPUT)
      return fail(
          f, HAP_EINVAL,
          "steps[%d]: %s: storage input for a %s, expected replicated, sharded, zero or sfb", k,
          who, hap_tensor_kind_name(t->kind));
    if (s->to == HAP_LAYOUT_REDUCE)
      return fail(f, HAP_EINVAL, "steps[%d]: %s: an input fed as R, expected I or a Gather", k,
                  who);
    return HAP_OK;
  case HAP_STORE_REPLICATED:
  case HAP_STORE_ZERO:
  case HAP_STORE_SHARDED:
    if (!weight)
      return fail(f, HAP_EINVAL, "steps[%d]: %s: storage %s for an input, expected input", k, who,
                  hap_storage_name(s->storage));
    if (s->storage == HAP_STORE_SHARDED && s->to < 0)
      return fail(f, HAP_EINVAL, "steps[%d]: %s: storage sharded as %s, expected a Gather (G0..)",
                  k, who, hap_layout_name(s->to, lb));
    if (s->storage != HAP_STORE_SHARDED && s->to != HAP_LAYOUT_IDENTITY)
      return fail(f, HAP_EINVAL, "steps[%d]: %s: storage %s as %s, expected I", k, who,
                  hap_storage_name(s->storage), hap_layout_name(s->to, lb));
    if (s->storage == HAP_STORE_ZERO && t->shape.rank == 0)
      return fail(f, HAP_EINVAL,
                  "steps[%d]: %s: storage zero for a scalar, expected replicated (zero shards "
                  "dim 0)",
                  k, who);
    return HAP_OK;
  case HAP_STORE_SFB:
    if (t->kind != HAP_TENSOR_PARAMETER || !t->requires_grad || t->shape.rank != 2)
      return fail(f, HAP_EINVAL,
                  "steps[%d]: %s: storage sfb for a %s of rank %d, expected a trainable 2-D "
                  "parameter (a linear weight)",
                  k, who, hap_tensor_kind_name(t->kind), t->shape.rank);
    if (s->to != HAP_LAYOUT_IDENTITY)
      return fail(f, HAP_EINVAL, "steps[%d]: %s: storage sfb as %s, expected I", k, who,
                  hap_layout_name(s->to, lb));
    return HAP_OK;
  case HAP_STORAGE_COUNT: break;
  }
  return fail(f, HAP_EINVAL,
              "steps[%d]: %s: storage %d, expected input, replicated, sharded, zero or sfb", k, who,
              (int)s->storage);
}

static hap_status flow_source(flow *f, int32_t k, const hap_step *s) {
  HAP_TRY(check_tensor_id(f, k, s));
  const hap_tensor *t = &f->g->tensors[s->tensor];
  char who[160];
  snprintf(who, sizeof who, "source '%s'", t->name);
  if (t->kind == HAP_TENSOR_ACTIVATION)
    return fail(f, HAP_EINVAL,
                "steps[%d]: %s: '%s' is an activation, expected an input, parameter or buffer "
                "(activations come from compute steps)",
                k, who, t->name);
  if (f->sourced[s->tensor] >= 0)
    return fail(f, HAP_EINVAL,
                "steps[%d]: %s: already sourced by steps[%d], expected one source per tensor (a "
                "comm step gives it another layout)",
                k, who, f->sourced[s->tensor]);
  HAP_TRY(check_layout(f, k, who, "to", s->to, t->shape.rank));
  HAP_TRY(check_storage(f, k, who, t, s));
  prop p = make_prop(s->to, s->segment, s->granule);
  HAP_TRY(check_granule(f, k, who, s->tensor, p));
  f->sourced[s->tensor] = k;
  return add_prop(f, s->tensor, p);
}

/* "G0,I,I->G0", with " (granule G, flags 0xF, once 0xO)" when any is not the default. */
static const char *variant_str(const hap_variant *v, int n_in, int n_out, char *buf, size_t len) {
  size_t o = 0;
  char lb[4];
  buf[0] = '\0';
  for (int i = 0; i < n_in + n_out && o < len; i++) {
    const char *sep = i == 0 ? "" : i == n_in ? "->" : ",";
    hap_layout l = i < n_in ? v->in[i] : v->out[i - n_in];
    o += (size_t)snprintf(buf + o, len - o, "%s%s", sep, hap_layout_name(l, lb));
  }
  if (o < len && (v->granule != 1 || v->flags || v->once))
    snprintf(buf + o, len - o, " (granule %lld, flags 0x%x, once 0x%x)", (long long)v->granule,
             v->flags, v->once);
  return buf;
}

static bool variant_eq(const hap_variant *a, const hap_variant *b, int n_in, int n_out) {
  for (int i = 0; i < n_in; i++)
    if (a->in[i] != b->in[i])
      return false;
  for (int o = 0; o < n_out; o++)
    if (a->out[o] != b->out[o])
      return false;
  return a->granule == b->granule && a->flags == b->flags && a->once == b->once;
}

static hap_status no_variant(flow *f, int32_t k, const hap_node *node, const hap_variant *v,
                             const hap_variant *offered, int n) {
  char want[96], list[512];
  size_t o = 0;
  list[0] = '\0';
  for (int i = 0; i < n && o < sizeof list; i++) {
    char vb[96];
    o += (size_t)snprintf(list + o, sizeof list - o, "%s%s %s", i ? "; " : "", offered[i].name,
                          variant_str(&offered[i], node->n_inputs, node->n_outputs, vb, sizeof vb));
  }
  return fail(f, HAP_EINVAL,
              "steps[%d]: compute '%s': op %s offers no variant %s, expected one of: %s", k,
              node->name, hap_op_name(node->op),
              variant_str(v, node->n_inputs, node->n_outputs, want, sizeof want), list);
}

static hap_status flow_compute(flow *f, int32_t k, const hap_step *s) {
  const hap_graph *g = f->g;
  if (s->node < 0 || s->node >= g->n_nodes)
    return fail(f, HAP_EINVAL, "steps[%d]: compute: node id %d, expected 0..%d", k, s->node,
                g->n_nodes - 1);
  const hap_node *node = &g->nodes[s->node];
  char who[160];
  snprintf(who, sizeof who, "compute '%s'", node->name);
  if (f->computed[s->node] >= 0)
    return fail(f, HAP_EINVAL,
                "steps[%d]: %s: the node is already computed by steps[%d], expected every node "
                "computed exactly once",
                k, who, f->computed[s->node]);
  if (s->segment != node->segment)
    return fail(f, HAP_EINVAL, "steps[%d]: %s: segment %d, expected the node's segment %d", k, who,
                s->segment, node->segment);
  hap_op_io io;
  hap_graph_node_io(g, s->node, &io);
  hap_variant offered[HAP_MAX_VARIANTS];
  int n = hap_op_variants(node->op, &io, offered, HAP_MAX_VARIANTS);
  int match = -1;
  for (int i = 0; i < n && match < 0; i++)
    if (variant_eq(&offered[i], &s->variant, node->n_inputs, node->n_outputs))
      match = i;
  if (match < 0)
    return no_variant(f, k, node, &s->variant, offered, n);
  const hap_variant *v = &offered[match];
  for (int i = 0; i < node->n_inputs; i++) {
    char what[32];
    snprintf(what, sizeof what, "input %d", i);
    HAP_TRY(need(f, k, who, what, node->inputs[i], make_prop(v->in[i], s->segment, v->granule)));
  }
  for (int o = 0; o < node->n_outputs; o++)
    HAP_TRY(add_prop(f, node->outputs[o], make_prop(v->out[o], s->segment, v->granule)));
  f->computed[s->node] = k;
  return HAP_OK;
}

/* The layouts each op goes between (docs/formats.md). */
static bool comm_fits(const hap_step *s) {
  bool from_g = s->from >= 0, to_g = s->to >= 0;
  switch (s->comm) {
  case HAP_COMM_ALL_GATHER: return from_g && s->to == HAP_LAYOUT_IDENTITY;
  case HAP_COMM_REDUCE_SCATTER: return s->from == HAP_LAYOUT_REDUCE && to_g;
  case HAP_COMM_ALL_REDUCE: return s->from == HAP_LAYOUT_REDUCE && s->to == HAP_LAYOUT_IDENTITY;
  case HAP_COMM_ALL_TO_ALL:
    return from_g && to_g && (s->from != s->to || s->from_segment != s->segment);
  case HAP_COMM_SLICE: return s->from == HAP_LAYOUT_IDENTITY && to_g;
  case HAP_COMM_KEEP_ONCE: return s->from == HAP_LAYOUT_IDENTITY && s->to == HAP_LAYOUT_REDUCE;
  case HAP_COMM_OP_COUNT: break;
  }
  return false;
}

static const char *const comm_expect[HAP_COMM_OP_COUNT] = {
    "G(d) -> I", "R -> G(d)", "R -> I", "G(a) -> G(b) with a != b, or from_segment != segment",
    "I -> G(d)", "I -> R"};

static hap_status flow_comm(flow *f, int32_t k, const hap_step *s) {
  HAP_TRY(check_tensor_id(f, k, s));
  const hap_tensor *t = &f->g->tensors[s->tensor];
  char who[160];
  snprintf(who, sizeof who, "comm %s of '%s'", hap_comm_op_name(s->comm), t->name);
  if ((unsigned)s->comm >= HAP_COMM_OP_COUNT)
    return fail(f, HAP_EINVAL, "steps[%d]: comm of '%s': op %d, expected 0..%d", k, t->name,
                (int)s->comm, HAP_COMM_OP_COUNT - 1);
  if ((unsigned)s->impl >= HAP_IMPL_COUNT)
    return fail(f, HAP_EINVAL, "steps[%d]: %s: impl %d, expected 0..%d", k, who, (int)s->impl,
                HAP_IMPL_COUNT - 1);
  if (s->from_segment < 0 || s->from_segment >= f->p->n_segments)
    return fail(f, HAP_EINVAL, "steps[%d]: %s: from_segment %d, expected 0..%d", k, who,
                s->from_segment, f->p->n_segments - 1);
  HAP_TRY(check_layout(f, k, who, "from", s->from, t->shape.rank));
  HAP_TRY(check_layout(f, k, who, "to", s->to, t->shape.rank));
  if (!comm_fits(s)) {
    char fb[64], tb[64];
    prop from = make_prop(s->from, s->from_segment, 1), to = make_prop(s->to, s->segment, 1);
    return fail(f, HAP_EINVAL, "steps[%d]: %s: goes %s -> %s, expected %s", k, who,
                prop_str(from, fb, sizeof fb), prop_str(to, tb, sizeof tb), comm_expect[s->comm]);
  }
  prop from = make_prop(s->from, s->from_segment, s->granule);
  prop to = make_prop(s->to, s->segment, s->granule);
  HAP_TRY(check_granule(f, k, who, s->tensor, from));
  HAP_TRY(check_granule(f, k, who, s->tensor, to));
  HAP_TRY(need(f, k, who, "tensor", s->tensor, from));
  return add_prop(f, s->tensor, to);
}

static hap_status flow_step(flow *f, int32_t k) {
  const hap_step *s = &f->p->steps[k];
  if (s->segment < 0 || s->segment >= f->p->n_segments)
    return fail(f, HAP_EINVAL, "steps[%d]: segment %d, expected 0..%d", k, s->segment,
                f->p->n_segments - 1);
  switch (s->kind) {
  case HAP_STEP_SOURCE: return flow_source(f, k, s);
  case HAP_STEP_COMPUTE: return flow_compute(f, k, s);
  case HAP_STEP_COMM: return flow_comm(f, k, s);
  case HAP_STEP_KIND_COUNT: break;
  }
  return fail(f, HAP_EINVAL, "steps[%d]: kind %d, expected source, compute or comm", k,
              (int)s->kind);
}

/* After the last step: the loss summed over the devices or replicated, every node computed. */
static hap_status flow_end(flow *f) {
  const hap_graph *g = f->g;
  if (g->loss < 0 || g->loss >= g->n_tensors)
    return fail(f, HAP_EINVAL, "graph '%s' has no loss; validate it first", g->name);
  if (!has_prop(f, g->loss, make_prop(HAP_LAYOUT_REDUCE, 0, 1)) &&
      !has_prop(f, g->loss, make_prop(HAP_LAYOUT_IDENTITY, 0, 1))) {
    char ab[256];
    return fail(f, HAP_EINVAL,
                "steps: the loss '%s' ends up available as %s, expected R or I (a partial "
                "reduction, an all_reduce or a replicated computation)",
                g->tensors[g->loss].name, avail_str(f, g->loss, ab, sizeof ab));
  }
  for (int32_t n = 0; n < g->n_nodes; n++)
    if (f->computed[n] < 0)
      return fail(f, HAP_EINVAL,
                  "steps: node '%s' is never computed, expected a compute step for every node",
                  g->nodes[n].name);
  return HAP_OK;
}

bool hap_sfb_allowed(const hap_train_policy *pol, int32_t replicas) {
  return pol->precision == HAP_PREC_FP32 && pol->micro_batches == 1 && pol->zero == 0 &&
         pol->recompute == HAP_RECOMPUTE_NONE && replicas == 1;
}

bool hap_sfb_shape_ok(const hap_graph *g, int32_t node, const hap_variant *variant) {
  const hap_node *n = &g->nodes[node];
  if (n->op != HAP_OP_LINEAR || n->n_inputs < 2)
    return false;
  int32_t w = n->inputs[1];
  const hap_tensor *wt = &g->tensors[w];
  if (wt->kind != HAP_TENSOR_PARAMETER || !wt->requires_grad || wt->shape.rank != 2)
    return false;
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int i = 0; i < g->nodes[k].n_inputs; i++)
      if (g->nodes[k].inputs[i] == w && (k != node || i != 1))
        return false;
  hap_layout rows = variant->in[0];
  int32_t rank = g->tensors[n->inputs[0]].shape.rank;
  return variant->in[1] == HAP_LAYOUT_IDENTITY && rows >= 0 && rows < rank - 1 &&
         variant->out[0] == rows;
}

int32_t hap_plan_sfb_consumer(const hap_plan *p, const hap_graph *g, int32_t tensor) {
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind == HAP_STEP_COMPUTE && s->node >= 0 && s->node < g->n_nodes &&
        g->nodes[s->node].op == HAP_OP_LINEAR && g->nodes[s->node].n_inputs >= 2 &&
        g->nodes[s->node].inputs[1] == tensor)
      return k;
  }
  return -1;
}

/* Every sfb source: the policy allows it and its consumer has the shape (hap_sfb_shape_ok). */
static hap_status flow_sfb(flow *f) {
  for (int32_t k = 0; k < f->p->n_steps; k++) {
    const hap_step *s = &f->p->steps[k];
    if (s->kind != HAP_STEP_SOURCE || s->storage != HAP_STORE_SFB)
      continue;
    const char *name = f->g->tensors[s->tensor].name;
    if (!hap_sfb_allowed(&f->p->policy, f->p->replicas))
      return fail(f, HAP_EINVAL,
                  "steps[%d]: source '%s': storage sfb under this policy, expected fp32 with one "
                  "micro-batch, ZeRO 0, no recomputation and 1 replica",
                  k, name);
    int32_t c = hap_plan_sfb_consumer(f->p, f->g, s->tensor);
    if (c < 0 || !hap_sfb_shape_ok(f->g, f->p->steps[c].node, &f->p->steps[c].variant))
      return fail(f, HAP_EINVAL,
                  "steps[%d]: source '%s': storage sfb, expected its only consumer to be a linear "
                  "node taking it as the weight (I) with input and output split alike along a "
                  "dim that is not the last",
                  k, name);
  }
  return HAP_OK;
}

static hap_status run_flow(flow *f) {
  for (int32_t k = 0; k < f->p->n_steps; k++)
    HAP_TRY(flow_step(f, k));
  HAP_TRY(flow_end(f));
  return flow_sfb(f);
}

static int32_t *minus_ones(int32_t n) {
  int32_t *a = malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
  for (int32_t i = 0; a != NULL && i < n; i++)
    a[i] = -1;
  return a;
}

hap_status hap_plan_validate(const hap_plan *p, const hap_graph *g, const hap_cluster *c,
                             hap_err *err) {
  HAP_TRY(check_graph(p, g, err));
  HAP_TRY(check_cluster(p, c, err));
  if (p->replicas < 1 || p->n_devices % p->replicas != 0 ||
      p->group_size != p->n_devices / p->replicas)
    return hap_err_set(err, HAP_EINVAL, "replicas: %d, expected a divisor of the %d devices",
                       p->replicas, p->n_devices);
  HAP_TRY(hap_policy_check(&p->policy, err));
  HAP_TRY(check_ratios(p, err));
  HAP_TRY(check_predicted(p, err));
  HAP_TRY(check_memory(p, err));
  hap_graph *split = NULL;
  HAP_TRY(hap_plan_step_graph(p, g, &split, err));
  if (split != NULL)
    g = split;
  flow f = {.p = p, .g = g, .err = err};
  f.head = minus_ones(g->n_tensors);
  f.sourced = minus_ones(g->n_tensors);
  f.computed = minus_ones(g->n_nodes);
  hap_status st = f.head && f.sourced && f.computed
                      ? run_flow(&f)
                      : hap_err_set(err, HAP_ENOMEM, "out of memory validating the plan");
  free(f.head);
  free(f.sourced);
  free(f.computed);
  free(f.ent);
  hap_graph_destroy(split);
  return st;
}
