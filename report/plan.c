/* plan.c — the report of a hap-plan: each device's share of the batch per segment, its predicted
 * memory by component and busy time, and the program step by step with each step's predicted
 * time. A pipelined plan (2.x) gets its stages in a table, then those sections per stage (each
 * stage's plan is a whole 1.x plan object; its messages say "stages[k].plan"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

enum { MAX_DRAWN_SEGMENTS = 8, MAX_TABLE_STEPS = 5000, MEM_PARTS = 6 };

static const char *const mem_parts[MEM_PARTS] = {"parameters",  "gradients",    "optimizer",
                                                 "activations", "comm_buffers", "workspace"};

typedef struct pstep {
  const char *kind, *subject, *detail;
  char layouts[160];
  int64_t segment;
  double predicted_s;
} pstep;

typedef struct pdev {
  double compute_s, comm_s, memory_b;
  double mem[MEM_PARTS];
  bool has_mem;
} pdev;

typedef struct plan plan;

/* A stage of a pipelined plan. */
typedef struct pstage {
  int64_t first, end, group; /* the graph's nodes [first, end), its device group */
  plan *plan;
} pstage;

struct plan {
  const char *strategy, *graph, *graph_spec, *cluster, *cluster_spec;
  char policy[256];
  int64_t replicas;
  int n_devices, n_ratios, n_segments, n_steps;
  const char **names; /* device names */
  double *ratios;     /* n_segments x n_ratios */
  pstep *steps;
  pdev *devs;
  double iteration_s;
  /* pipelined plans (2.x): the stages (n_stages > 0; then no steps of its own) */
  const char *schedule;
  int64_t chunks;
  int n_stages, n_groups;
  pstage *stages;
};

static void plan_free(void *data) {
  plan *p = data;
  if (p == NULL)
    return;
  for (int k = 0; k < p->n_stages; k++)
    plan_free(p->stages[k].plan);
  free(p->stages);
  free(p->names);
  free(p->ratios);
  free(p->steps);
  free(p->devs);
  free(p);
}

/* A JSON array of strings joined by ", " into buf (its end at cap). */
static hap_status join_layouts(const hap_jr *r, const json_t *a, const char *path, char *buf,
                               size_t cap) {
  HAP_TRY(hap_jr_want_array(r, a, path, "an array of layouts", 64));
  size_t o = strlen(buf);
  for (size_t i = 0; i < json_array_size(a); i++) {
    hap_jpath p;
    const char *s;
    HAP_TRY(hap_jr_want_text(r, json_array_get(a, i), hap_jpath_index(p, path, i),
                             "a layout such as \"G0\" or \"I\"", &s));
    int w = snprintf(buf + o, cap - o, "%s%s", i > 0 ? ", " : "", s);
    o = w < 0 || (size_t)w >= cap - o ? cap - 1 : o + (size_t)w;
  }
  return HAP_OK;
}

static hap_status read_step(const hap_jr *r, const json_t *o, const char *path, pstep *s) {
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "a step object {\"kind\", ...}"));
  s->subject = s->detail = "";
  s->layouts[0] = '\0';
  HAP_TRY(rep_get_text(r, o, path, "kind", true, &s->kind));
  HAP_TRY(
      rep_get_int(r, o, path, "segment", true, 0, INT32_MAX, "a segment index >= 0", &s->segment));
  HAP_TRY(rep_get_amount(r, o, path, "predicted_s", true, HAP_JR_NON_NEGATIVE,
                         "a predicted time in s", &s->predicted_s));
  const char *from = NULL, *to = NULL;
  if (strcmp(s->kind, "source") == 0) {
    HAP_TRY(rep_get_text(r, o, path, "tensor", true, &s->subject));
    HAP_TRY(rep_get_text(r, o, path, "storage", true, &s->detail));
    HAP_TRY(rep_get_text(r, o, path, "to", true, &to));
    snprintf(s->layouts, sizeof s->layouts, "-> %s", to);
  } else if (strcmp(s->kind, "compute") == 0) {
    HAP_TRY(rep_get_text(r, o, path, "node", true, &s->subject));
    HAP_TRY(rep_get_text(r, o, path, "variant", true, &s->detail));
    const json_t *in, *out;
    hap_jpath p;
    HAP_TRY(rep_get_array(r, o, path, "inputs", true, "an array of layouts", 64, &in));
    HAP_TRY(rep_get_array(r, o, path, "outputs", true, "an array of layouts", 64, &out));
    HAP_TRY(join_layouts(r, in, hap_jpath_key(p, path, "inputs"), s->layouts, sizeof s->layouts));
    strncat(s->layouts, " -> ", sizeof s->layouts - strlen(s->layouts) - 1);
    HAP_TRY(join_layouts(r, out, hap_jpath_key(p, path, "outputs"), s->layouts, sizeof s->layouts));
  } else if (strcmp(s->kind, "comm") == 0) {
    const char *impl = NULL;
    HAP_TRY(rep_get_text(r, o, path, "tensor", true, &s->subject));
    HAP_TRY(rep_get_text(r, o, path, "op", true, &s->detail));
    HAP_TRY(rep_get_text(r, o, path, "from", true, &from));
    HAP_TRY(rep_get_text(r, o, path, "to", true, &to));
    HAP_TRY(rep_get_text(r, o, path, "impl", false, &impl));
    snprintf(s->layouts, sizeof s->layouts, "%s -> %s%s%s", from, to, impl ? ", " : "",
             impl ? impl : "");
  } else {
    hap_jpath p;
    hap_jquote q;
    return hap_jr_fail(r, HAP_EPARSE, hap_jpath_key(p, path, "kind"),
                       "is \"%s\", expected source, compute or comm", hap_json_quote(s->kind, q));
  }
  return HAP_OK;
}

static hap_status read_device(const hap_jr *r, const json_t *o, const char *path, pdev *d) {
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path,
                           "a device object {\"compute_s\", \"comm_s\", \"memory_bytes\"}"));
  HAP_TRY(rep_get_amount(r, o, path, "compute_s", true, HAP_JR_NON_NEGATIVE, "a time in s",
                         &d->compute_s));
  HAP_TRY(
      rep_get_amount(r, o, path, "comm_s", true, HAP_JR_NON_NEGATIVE, "a time in s", &d->comm_s));
  HAP_TRY(rep_get_amount(r, o, path, "memory_bytes", true, HAP_JR_NON_NEGATIVE,
                         "a memory size in bytes", &d->memory_b));
  const json_t *mem;
  hap_jpath p;
  HAP_TRY(rep_get_object(r, o, path, "memory", false, "memory by component (an object)", &mem));
  d->has_mem = mem != NULL;
  for (int k = 0; k < MEM_PARTS && mem != NULL; k++)
    HAP_TRY(rep_get_amount(r, mem, hap_jpath_key(p, path, "memory"), mem_parts[k], true,
                           HAP_JR_NON_NEGATIVE, "a memory size in bytes", &d->mem[k]));
  return HAP_OK;
}

/* The policy object as "precision=bf16, optimizer=adam, ..." (scalars only). */
static void policy_text(const json_t *pol, char *buf, size_t cap) {
  buf[0] = '\0';
  const char *key;
  json_t *v;
  size_t o = 0;
  json_object_foreach((json_t *)pol, key, v) {
    char val[64];
    if (json_is_string(v))
      snprintf(val, sizeof val, "%s", json_string_value(v));
    else if (json_is_integer(v))
      snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
    else
      snprintf(val, sizeof val, "%s", hap_json_kind(v));
    int w = snprintf(buf + o, cap - o, "%s%s=%s", o > 0 ? ", " : "", key, val);
    if (w < 0 || (size_t)w >= cap - o)
      return;
    o += (size_t)w;
  }
}

/* "format" and "version": *pipelined for 2.x; 1.x and 2.x are read, other versions refused. */
static hap_status read_version(const hap_jr *r, const json_t *root, bool *pipelined) {
  const char *format, *version;
  hap_jquote q;
  HAP_TRY(rep_get_text(r, root, "", "format", true, &format));
  if (strcmp(format, "hap-plan") != 0)
    return hap_jr_fail(r, HAP_EPARSE, "format", "is \"%s\", expected \"hap-plan\"",
                       hap_json_quote(format, q));
  HAP_TRY(rep_get_text(r, root, "", "version", true, &version));
  *pipelined = strncmp(version, "2.", 2) == 0;
  if (strncmp(version, "1.", 2) != 0 && !*pipelined)
    return hap_jr_fail(r, HAP_EVERSION, "version",
                       "is \"%s\", expected 1.x (a plan) or 2.x (a pipelined plan)",
                       hap_json_quote(version, q));
  return HAP_OK;
}

static hap_status read_header(const hap_jr *r, const json_t *root, plan *p) {
  const json_t *g, *c, *pol;
  HAP_TRY(rep_get_text(r, root, "", "strategy", true, &p->strategy));
  HAP_TRY(rep_get_object(r, root, "", "graph", true, "an object {\"name\", \"digest\"}", &g));
  HAP_TRY(rep_get_text(r, g, "graph", "name", true, &p->graph));
  HAP_TRY(rep_get_text(r, g, "graph", "spec", false, &p->graph_spec));
  HAP_TRY(rep_get_object(r, root, "", "cluster", true, "an object {\"name\", \"devices\"}", &c));
  HAP_TRY(rep_get_text(r, c, "cluster", "name", true, &p->cluster));
  HAP_TRY(rep_get_text(r, c, "cluster", "spec", false, &p->cluster_spec));
  p->replicas = 1;
  HAP_TRY(rep_get_int(r, root, "", "replicas", false, 1, 1 << 20, "a replica count >= 1",
                      &p->replicas));
  HAP_TRY(rep_get_object(r, root, "", "policy", false, "a policy object", &pol));
  if (pol != NULL)
    policy_text(pol, p->policy, sizeof p->policy);
  else
    snprintf(p->policy, sizeof p->policy, "default (fp32, sgd, no ZeRO, no recomputation)");
  const json_t *names;
  HAP_TRY(rep_get_array(r, c, "cluster", "devices", true, "an array of device names", REP_MAX_ITEMS,
                        &names));
  p->n_devices = (int)json_array_size(names);
  if (p->n_devices == 0)
    return hap_jr_fail(r, HAP_EPARSE, "cluster.devices", "is empty, expected device names");
  if (p->replicas < 1 || p->n_devices % p->replicas != 0)
    return hap_jr_fail(r, HAP_EPARSE, "replicas", "is %lld, expected a divisor of the %d devices",
                       (long long)p->replicas, p->n_devices);
  p->names = calloc((size_t)p->n_devices, sizeof *p->names);
  if (p->names == NULL)
    return hap_jr_oom(r);
  for (int i = 0; i < p->n_devices; i++) {
    hap_jpath path;
    HAP_TRY(hap_jr_want_text(r, json_array_get(names, (size_t)i),
                             hap_jpath_index(path, "cluster.devices", (size_t)i), "a device name",
                             &p->names[i]));
  }
  return HAP_OK;
}

static hap_status read_segments(const hap_jr *r, const json_t *root, plan *p) {
  const json_t *segs;
  HAP_TRY(
      rep_get_array(r, root, "", "segments", true, "an array of segments", REP_MAX_ITEMS, &segs));
  p->n_segments = (int)json_array_size(segs);
  p->n_ratios = p->replicas > 0 ? p->n_devices / (int)p->replicas : p->n_devices;
  if (p->n_segments == 0)
    return hap_jr_fail(r, HAP_EPARSE, "segments", "is empty, expected one segment or more");
  p->ratios = calloc((size_t)p->n_segments * (size_t)p->n_ratios + 1, sizeof *p->ratios);
  if (p->ratios == NULL)
    return hap_jr_oom(r);
  for (int s = 0; s < p->n_segments; s++) {
    hap_jpath path, rp;
    const json_t *ratios, *seg = json_array_get(segs, (size_t)s);
    hap_jpath_index(path, "segments", (size_t)s);
    HAP_TRY(hap_jr_want_type(r, seg, JSON_OBJECT, path, "a segment object {\"ratios\"}"));
    HAP_TRY(
        rep_get_array(r, seg, path, "ratios", true, "an array of ratios", REP_MAX_ITEMS, &ratios));
    hap_jpath_key(rp, path, "ratios");
    if ((int)json_array_size(ratios) != p->n_ratios)
      return hap_jr_fail(r, HAP_EPARSE, rp, "has %zu ratios, expected %d (one per device%s)",
                         json_array_size(ratios), p->n_ratios,
                         p->replicas > 1 ? " of a replica" : "");
    for (int i = 0; i < p->n_ratios; i++) {
      hap_jpath ip;
      HAP_TRY(hap_jr_want_amount(r, json_array_get(ratios, (size_t)i),
                                 hap_jpath_index(ip, rp, (size_t)i), HAP_JR_NON_NEGATIVE, "a ratio",
                                 &p->ratios[(size_t)s * (size_t)p->n_ratios + (size_t)i]));
    }
  }
  return HAP_OK;
}

static hap_status read_rest(const hap_jr *r, const json_t *root, plan *p) {
  const json_t *steps, *pred, *devs;
  HAP_TRY(rep_get_array(r, root, "", "steps", true, "an array of steps", REP_MAX_ITEMS, &steps));
  p->n_steps = (int)json_array_size(steps);
  p->steps = calloc((size_t)p->n_steps + 1, sizeof *p->steps);
  if (p->steps == NULL)
    return hap_jr_oom(r);
  for (int i = 0; i < p->n_steps; i++) {
    hap_jpath path;
    HAP_TRY(read_step(r, json_array_get(steps, (size_t)i),
                      hap_jpath_index(path, "steps", (size_t)i), &p->steps[i]));
  }
  HAP_TRY(rep_get_object(r, root, "", "predicted", true, "an object {\"iteration_s\", \"devices\"}",
                         &pred));
  HAP_TRY(rep_get_amount(r, pred, "predicted", "iteration_s", true, HAP_JR_NON_NEGATIVE,
                         "an iteration time in s", &p->iteration_s));
  HAP_TRY(rep_get_array(r, pred, "predicted", "devices", true, "an array of devices", REP_MAX_ITEMS,
                        &devs));
  if ((int)json_array_size(devs) != p->n_devices)
    return hap_jr_fail(r, HAP_EPARSE, "predicted.devices",
                       "has %zu entries, expected %d (one per device of cluster.devices)",
                       json_array_size(devs), p->n_devices);
  p->devs = calloc((size_t)p->n_devices, sizeof *p->devs);
  if (p->devs == NULL)
    return hap_jr_oom(r);
  for (int i = 0; i < p->n_devices; i++) {
    hap_jpath path;
    HAP_TRY(read_device(r, json_array_get(devs, (size_t)i),
                        hap_jpath_index(path, "predicted.devices", (size_t)i), &p->devs[i]));
  }
  return HAP_OK;
}

/* A one-stage plan (1.x, or a stage's plan object). */
static hap_status read_flat(const hap_jr *r, const json_t *root, plan *p) {
  HAP_TRY(read_header(r, root, p));
  HAP_TRY(read_segments(r, root, p));
  return read_rest(r, root, p);
}

/* One stage of a pipelined plan: its range, group and plan (read with the label
 * "<file>: stages[k].plan", so its messages name the stage). */
static hap_status read_stage(const hap_jr *r, const json_t *o, const char *path, int n_groups,
                             pstage *s) {
  const json_t *nodes, *sub;
  hap_jpath np;
  HAP_TRY(hap_jr_want_type(r, o, JSON_OBJECT, path, "a stage {\"nodes\", \"group\", \"plan\"}"));
  HAP_TRY(rep_get_array(r, o, path, "nodes", true, "[first, end) of the graph's nodes", 2, &nodes));
  hap_jpath_key(np, path, "nodes");
  if (json_array_size(nodes) != 2)
    return hap_jr_fail(r, HAP_EPARSE, np, "has %zu entries, expected [first, end)",
                       json_array_size(nodes));
  hap_jpath ip;
  HAP_TRY(hap_jr_want_int(r, json_array_get(nodes, 0), hap_jpath_index(ip, np, 0), 0, INT32_MAX,
                          "a node index >= 0", &s->first));
  HAP_TRY(hap_jr_want_int(r, json_array_get(nodes, 1), hap_jpath_index(ip, np, 1), s->first + 1,
                          INT32_MAX, "a node index after the first", &s->end));
  HAP_TRY(rep_get_int(r, o, path, "group", true, 0, n_groups - 1, "a device group of the pipeline",
                      &s->group));
  HAP_TRY(rep_get_object(r, o, path, "plan", true, "a hap-plan 1.x object", &sub));
  char label[512];
  snprintf(label, sizeof label, "%s: %s.plan", r->label, path);
  hap_jr sr = {.label = label, .err = r->err, .strict = false};
  bool pipelined = false;
  HAP_TRY(read_version(&sr, sub, &pipelined));
  if (pipelined)
    return hap_jr_fail(&sr, HAP_EPARSE, "version", "is 2.x, expected a one-stage plan (1.x)");
  s->plan = calloc(1, sizeof *s->plan);
  if (s->plan == NULL)
    return hap_jr_oom(r);
  return read_flat(&sr, sub, s->plan);
}

static hap_status read_pipelined(const hap_jr *r, const json_t *root, plan *p) {
  const json_t *g, *c, *pipe, *groups, *stages, *pred;
  HAP_TRY(rep_get_text(r, root, "", "strategy", true, &p->strategy));
  HAP_TRY(rep_get_object(r, root, "", "graph", true, "an object {\"name\", \"digest\"}", &g));
  HAP_TRY(rep_get_text(r, g, "graph", "name", true, &p->graph));
  HAP_TRY(rep_get_text(r, g, "graph", "spec", false, &p->graph_spec));
  HAP_TRY(rep_get_object(r, root, "", "cluster", true, "an object {\"name\", \"devices\"}", &c));
  HAP_TRY(rep_get_text(r, c, "cluster", "name", true, &p->cluster));
  HAP_TRY(rep_get_text(r, c, "cluster", "spec", false, &p->cluster_spec));
  HAP_TRY(rep_get_object(r, root, "", "pipeline", true,
                         "an object {\"schedule\", \"chunks\", \"groups\"}", &pipe));
  HAP_TRY(rep_get_text(r, pipe, "pipeline", "schedule", true, &p->schedule));
  HAP_TRY(rep_get_int(r, pipe, "pipeline", "chunks", true, 1, 1 << 16,
                      "a count of virtual stages per group >= 1", &p->chunks));
  HAP_TRY(rep_get_array(r, pipe, "pipeline", "groups", true, "an array of device groups", 1 << 16,
                        &groups));
  p->n_groups = (int)json_array_size(groups);
  if (p->n_groups == 0)
    return hap_jr_fail(r, HAP_EPARSE, "pipeline.groups", "is empty, expected device groups");
  HAP_TRY(rep_get_array(r, root, "", "stages", true, "an array of stages", 1 << 16, &stages));
  p->n_stages = (int)json_array_size(stages);
  if (p->n_stages == 0)
    return hap_jr_fail(r, HAP_EPARSE, "stages", "is empty, expected one stage or more");
  p->stages = calloc((size_t)p->n_stages, sizeof *p->stages);
  if (p->stages == NULL)
    return hap_jr_oom(r);
  for (int k = 0; k < p->n_stages; k++) {
    hap_jpath path;
    HAP_TRY(read_stage(r, json_array_get(stages, (size_t)k),
                       hap_jpath_index(path, "stages", (size_t)k), p->n_groups, &p->stages[k]));
  }
  HAP_TRY(rep_get_object(r, root, "", "predicted", true, "an object {\"iteration_s\"}", &pred));
  return rep_get_amount(r, pred, "predicted", "iteration_s", true, HAP_JR_NON_NEGATIVE,
                        "an iteration time in s", &p->iteration_s);
}

static hap_status plan_read(const hap_jr *r, const json_t *root, void **data) {
  bool pipelined = false;
  HAP_TRY(read_version(r, root, &pipelined));
  plan *p = calloc(1, sizeof *p);
  if (p == NULL)
    return hap_jr_oom(r);
  hap_status st = pipelined ? read_pipelined(r, root, p) : read_flat(r, root, p);
  if (st != HAP_OK) {
    plan_free(p);
    return st;
  }
  *data = p;
  return HAP_OK;
}

static void plan_title(const void *data, char *buf, size_t len) {
  const plan *p = data;
  snprintf(buf, len, "hap %splan: %s, %s on %s", p->n_stages > 0 ? "pipelined " : "", p->strategy,
           p->graph_spec ? p->graph_spec : p->graph,
           p->cluster_spec ? p->cluster_spec : p->cluster);
}

static double chart_width(int n) { return fmin(1180, fmax(640, 240 + 26.0 * n)); }

static void ratio_chart(FILE *f, const plan *p) {
  int ns = p->n_segments < MAX_DRAWN_SEGMENTS ? p->n_segments : MAX_DRAWN_SEGMENTS;
  rep_plot pl = {.x = rep_axis_cats("device", p->names, p->n_ratios),
                 .y = rep_axis_make(REP_LINEAR, "share of the batch", NULL)};
  pl.y.zero = true;
  for (size_t i = 0; i < (size_t)ns * (size_t)p->n_ratios; i++)
    rep_axis_add(&pl.y, p->ratios[i]);
  rep_plot_begin(&pl, f, "chart", "sharding ratio per device", chart_width(p->n_ratios), 380, 70,
                 ns > 1 ? 150 : 0);
  double w = 0.8 / ns;
  for (int s = 0; s < ns; s++) {
    for (int i = 0; i < p->n_ratios; i++) {
      char tip[160];
      double v = p->ratios[(size_t)s * (size_t)p->n_ratios + (size_t)i];
      snprintf(tip, sizeof tip, "%s, segment %d: ratio %.5f", p->names[i], s, v);
      double x = i - 0.4 + s * w;
      rep_plot_rect(&pl, x, x + w, 0, v, s, "bar ratio", tip);
    }
    if (ns > 1) {
      char name[32];
      snprintf(name, sizeof name, "segment %d", s);
      rep_plot_legend(&pl, name, s, false, false);
    }
  }
  rep_plot_end(&pl);
}

static void memory_chart(FILE *f, const plan *p) {
  bool parts = p->devs[0].has_mem;
  for (int i = 0; i < p->n_devices; i++)
    parts = parts && p->devs[i].has_mem;
  double max_b = 0;
  for (int i = 0; i < p->n_devices; i++)
    max_b = fmax(max_b, p->devs[i].memory_b);
  const char *unit;
  double k = rep_bytes_unit(max_b, &unit);
  char ylabel[64];
  snprintf(ylabel, sizeof ylabel, "predicted peak memory (%s)", unit);
  rep_plot pl = {.x = rep_axis_cats("device", p->names, p->n_devices),
                 .y = rep_axis_make(REP_LINEAR, ylabel, NULL)};
  pl.y.zero = true;
  rep_axis_add(&pl.y, max_b / k);
  rep_plot_begin(&pl, f, "chart", parts ? "memory per device by component" : "memory per device",
                 chart_width(p->n_devices), 380, 70, parts ? 150 : 0);
  for (int i = 0; i < p->n_devices; i++) {
    char tip[200], b[32];
    if (!parts) {
      snprintf(tip, sizeof tip, "%s: %s", p->names[i], rep_bytes(p->devs[i].memory_b, b, sizeof b));
      rep_plot_rect(&pl, i - 0.35, i + 0.35, 0, p->devs[i].memory_b / k, 0, "bar memory", tip);
      continue;
    }
    double base = 0;
    for (int c = 0; c < MEM_PARTS; c++) {
      double v = p->devs[i].mem[c];
      if (v <= 0)
        continue;
      snprintf(tip, sizeof tip, "%s: %s %s", p->names[i], mem_parts[c], rep_bytes(v, b, sizeof b));
      rep_plot_rect(&pl, i - 0.35, i + 0.35, base / k, (base + v) / k, c, "bar memory", tip);
      base += v;
    }
  }
  for (int c = 0; c < MEM_PARTS && parts; c++)
    rep_plot_legend(&pl, mem_parts[c], c, false, false);
  rep_plot_end(&pl);
}

static void busy_chart(FILE *f, const plan *p) {
  double max_s = 0;
  for (int i = 0; i < p->n_devices; i++)
    max_s = fmax(max_s, fmax(p->devs[i].compute_s, p->devs[i].comm_s));
  const char *unit;
  double k = rep_time_unit(max_s, &unit);
  char ylabel[64];
  snprintf(ylabel, sizeof ylabel, "busy per iteration (%s)", unit);
  rep_plot pl = {.x = rep_axis_cats("device", p->names, p->n_devices),
                 .y = rep_axis_make(REP_LINEAR, ylabel, NULL)};
  pl.y.zero = true;
  rep_axis_add(&pl.y, max_s / k);
  rep_plot_begin(&pl, f, "chart", "predicted compute and communication per device",
                 chart_width(p->n_devices), 380, 70, 150);
  for (int i = 0; i < p->n_devices; i++) {
    char tip[160], b[32];
    snprintf(tip, sizeof tip, "%s: compute %s", p->names[i],
             rep_dur(p->devs[i].compute_s, b, sizeof b));
    rep_plot_rect(&pl, i - 0.4, i, 0, p->devs[i].compute_s / k, 0, "bar compute", tip);
    snprintf(tip, sizeof tip, "%s: communication %s", p->names[i],
             rep_dur(p->devs[i].comm_s, b, sizeof b));
    rep_plot_rect(&pl, i, i + 0.4, 0, p->devs[i].comm_s / k, 1, "bar comm", tip);
  }
  rep_plot_legend(&pl, "compute", 0, false, false);
  rep_plot_legend(&pl, "communication", 1, false, false);
  rep_plot_end(&pl);
}

static void steps_table(FILE *f, const plan *p) {
  double max_s = 0;
  for (int i = 0; i < p->n_steps; i++)
    max_s = fmax(max_s, p->steps[i].predicted_s);
  fputs("<table class=\"steps\">\n<tr><th>#</th><th class=\"l\">kind</th><th class=\"l\">tensor "
        "or node</th><th class=\"l\">storage, variant or op</th><th class=\"l\">layouts</th>"
        "<th>segment</th><th>predicted (ms)</th><th class=\"l\">share</th></tr>\n",
        f);
  for (int i = 0; i < p->n_steps && i < MAX_TABLE_STEPS; i++) {
    const pstep *s = &p->steps[i];
    fprintf(f, "<tr><td>%d</td><td class=\"l\">", i);
    rep_esc(f, s->kind);
    fputs("</td><td class=\"l\">", f);
    rep_esc(f, s->subject);
    fputs("</td><td class=\"l\">", f);
    rep_esc(f, s->detail);
    fputs("</td><td class=\"l\">", f);
    rep_esc(f, s->layouts);
    fprintf(f,
            "</td><td>%lld</td><td>%.4f</td><td class=\"bar\"><div class=\"bar\" "
            "style=\"width:%.1f%%\"></div></td></tr>\n",
            (long long)s->segment, s->predicted_s * 1e3,
            max_s > 0 ? 100 * s->predicted_s / max_s : 0.0);
  }
  fputs("</table>\n", f);
  if (p->n_steps > MAX_TABLE_STEPS)
    fprintf(f, "<p class=\"note\">(the first %d of %d steps)</p>\n", MAX_TABLE_STEPS, p->n_steps);
}

/* The sections of one flat plan; `id` prefixes the section ids, `what` the headings. */
static void flat_sections(FILE *f, const plan *p, const char *id, const char *what) {
  char note[600], b[32], sid[64], head[128];
  snprintf(note, sizeof note,
           "%d devices%s, %d segment%s, %d steps; predicted iteration %s; policy %s.", p->n_devices,
           p->replicas > 1 ? " in replicas" : "", p->n_segments, p->n_segments > 1 ? "s" : "",
           p->n_steps, rep_dur(p->iteration_s, b, sizeof b), p->policy);
  snprintf(sid, sizeof sid, "%sratios", id);
  snprintf(head, sizeof head, "%sSharding ratios", what);
  rep_section(f, sid, head,
              "Each device's share of every sharded dimension (per segment; with replicas, of "
              "one replica's devices).");
  rep_para(f, "note", note);
  ratio_chart(f, p);
  snprintf(sid, sizeof sid, "%smemory", id);
  snprintf(head, sizeof head, "%sMemory", what);
  rep_section(f, sid, head,
              "Predicted peak memory per device; by component when the plan records it "
              "(docs/memory.md).");
  memory_chart(f, p);
  snprintf(sid, sizeof sid, "%sbusy", id);
  snprintf(head, sizeof head, "%sBusy time", what);
  rep_section(f, sid, head, "Predicted compute and communication busy per iteration.");
  busy_chart(f, p);
  snprintf(sid, sizeof sid, "%sprogram", id);
  snprintf(head, sizeof head, "%sThe program", what);
  rep_section(f, sid, head,
              "Every step in forward order; predicted: forward + backward + gradient "
              "synchronisation of the step.");
  steps_table(f, p);
}

static void stages_table(FILE *f, const plan *p) {
  fputs("<table class=\"stages\">\n<tr><th>stage</th><th>group</th><th class=\"l\">devices</th>"
        "<th>nodes</th><th>steps</th><th>predicted (one micro-batch)</th><th>peak memory</th>"
        "</tr>\n",
        f);
  for (int k = 0; k < p->n_stages; k++) {
    const pstage *s = &p->stages[k];
    const plan *q = s->plan;
    double mem = 0;
    for (int i = 0; i < q->n_devices; i++)
      mem = fmax(mem, q->devs[i].memory_b);
    fprintf(f, "<tr><td>%d</td><td>%lld</td><td class=\"l\">", k, (long long)s->group);
    for (int i = 0; i < q->n_devices && i < 8; i++) {
      rep_esc(f, q->names[i]);
      fputs(i + 1 < q->n_devices ? ", " : "", f);
    }
    char b1[32], b2[32];
    fprintf(f, "%s</td><td>%lld..%lld</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
            q->n_devices > 8 ? "..." : "", (long long)s->first, (long long)s->end - 1, q->n_steps,
            rep_dur(q->iteration_s, b1, sizeof b1), rep_bytes(mem, b2, sizeof b2));
  }
  fputs("</table>\n", f);
}

static void plan_render(FILE *f, const void *data) {
  const plan *p = data;
  if (p->n_stages == 0) {
    flat_sections(f, p, "", "");
    return;
  }
  char note[400], b[32];
  snprintf(note, sizeof note,
           "%d stages on %d device groups, schedule %s, %lld virtual stage%s per group; "
           "predicted iteration %s (the schedule simulated over the stages).",
           p->n_stages, p->n_groups, p->schedule, (long long)p->chunks, p->chunks > 1 ? "s" : "",
           rep_dur(p->iteration_s, b, sizeof b));
  rep_section(f, "pipeline", "Pipeline", note);
  stages_table(f, p);
  for (int k = 0; k < p->n_stages; k++) {
    char id[32], what[64];
    snprintf(id, sizeof id, "stage%d-", k);
    snprintf(what, sizeof what, "Stage %d (group %lld): ", k, (long long)p->stages[k].group);
    flat_sections(f, p->stages[k].plan, id, what);
  }
}

const rep_kind rep_plan_kind = {
    .read = plan_read, .render = plan_render, .title = plan_title, .destroy = plan_free};
