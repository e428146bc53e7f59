/* pipeline_io.c — hap-plan files of format 2.0 (pipelined plans) and the 1.x files they extend
 * (pipeline_io.h). The stage plans are read and written by plan_io.c's object functions. */
#include "plan/pipeline_io.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json_read.h"
#include "base/json_write.h"
#include "plan_io_internal.h"

/* ---- reading -------------------------------------------------------------------------------- */

typedef struct reader {
  hap_jr jr;
  const hap_graph *g;
  const hap_cluster *c;
  hap_pipeline *pl;
} reader;

static hap_status read_header(reader *r, const json_t *root) {
  static const char *const keys[] = {"format",   "version", "strategy",  "graph", "cluster",
                                     "pipeline", "stages",  "predicted", NULL};
  return hap_jr_read_header(&r->jr, root, HAP_PLAN_FORMAT, HAP_PIPELINE_VERSION_MAJOR,
                            HAP_PIPELINE_VERSION_MINOR, keys,
                            "format, version, strategy, graph, cluster, pipeline, stages, "
                            "predicted");
}

/* "pipeline.groups": the sizes into *sizes (caller frees), the array into *arr. */
static hap_status read_group_sizes(reader *r, const json_t *pipe, json_t **arr, int32_t **sizes,
                                   int32_t *n) {
  const char *want = "an array of device groups such as [[0, 1], [2, 3]]";
  HAP_TRY(hap_jr_member(&r->jr, pipe, "pipeline", "groups", true, want, arr));
  HAP_TRY(hap_jr_want_array(&r->jr, *arr, "pipeline.groups", want, (size_t)r->c->n_devices));
  *n = (int32_t)json_array_size(*arr);
  if (*n < 1)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "pipeline.groups", "is empty, expected %s", want);
  *sizes = calloc((size_t)*n, sizeof **sizes);
  if (*sizes == NULL)
    return hap_jr_oom(&r->jr);
  for (int32_t g = 0; g < *n; g++) {
    hap_jpath p;
    json_t *grp = json_array_get(*arr, (size_t)g);
    HAP_TRY(hap_jr_want_array(&r->jr, grp, hap_jpath_index(p, "pipeline.groups", (size_t)g),
                              "an array of device ids", (size_t)r->c->n_devices));
    if (json_array_size(grp) == 0)
      return hap_jr_fail(&r->jr, HAP_EPARSE, p, "is empty, expected at least one device id");
    (*sizes)[g] = (int32_t)json_array_size(grp);
  }
  return HAP_OK;
}

/* "pipeline": schedule, chunks, groups; then the pipeline is created. */
static hap_status read_pipeline(reader *r, const json_t *root, const hap_plan_refs *refs,
                                size_t n_stages_given) {
  static const char *const keys[] = {"schedule", "chunks", "groups", NULL};
  json_t *pipe, *m, *groups = NULL;
  const char *want = "{\"schedule\", \"chunks\", \"groups\"}";
  HAP_TRY(hap_jr_member(&r->jr, root, "", "pipeline", true, want, &pipe));
  HAP_TRY(hap_jr_want_type(&r->jr, pipe, JSON_OBJECT, "pipeline", want));
  HAP_TRY(hap_jr_check_keys(&r->jr, pipe, "pipeline", keys, "schedule, chunks, groups"));
  const char *name;
  hap_pipe_schedule schedule;
  hap_jquote b;
  HAP_TRY(hap_jr_member(&r->jr, pipe, "pipeline", "schedule", true,
                        "one of " HAP_PIPE_SCHEDULE_CHOICES, &m));
  HAP_TRY(
      hap_jr_want_str(&r->jr, m, "pipeline.schedule", "one of " HAP_PIPE_SCHEDULE_CHOICES, &name));
  if (hap_pipe_schedule_parse(name, &schedule) != HAP_OK)
    return hap_jr_fail(&r->jr, HAP_EPARSE, "pipeline.schedule",
                       "is \"%s\", expected one of " HAP_PIPE_SCHEDULE_CHOICES,
                       hap_json_quote(name, b));
  int64_t chunks;
  HAP_TRY(hap_jr_member(&r->jr, pipe, "pipeline", "chunks", true,
                        "the model chunks per group (an integer >= 1)", &m));
  HAP_TRY(hap_jr_want_int(&r->jr, m, "pipeline.chunks", 1, 1 << 16,
                          "the model chunks per group (an integer >= 1)", &chunks));
  int32_t *sizes = NULL, n_groups = 0;
  hap_status st = read_group_sizes(r, pipe, &groups, &sizes, &n_groups);
  if (st == HAP_OK && (size_t)n_groups * (size_t)chunks != n_stages_given)
    st = hap_jr_fail(&r->jr, HAP_EPARSE, "stages",
                     "has %zu entries, expected %lld (%d groups x %lld chunks)", n_stages_given,
                     (long long)n_groups * chunks, n_groups, (long long)chunks);
  int64_t total = 0;
  for (int32_t g = 0; st == HAP_OK && sizes != NULL && g < n_groups; g++)
    total += sizes[g];
  if (st == HAP_OK && total != r->c->n_devices)
    st = hap_jr_fail(&r->jr, HAP_EPARSE, "pipeline.groups",
                     "hold %lld devices, expected every one of cluster '%s''s %d", (long long)total,
                     r->c->name, r->c->n_devices);
  if (st == HAP_OK) {
    r->pl = hap_pipeline_create(refs->strategy, refs->graph_name, refs->graph_digest,
                                refs->cluster_name, refs->cluster_digest, r->c->n_devices, schedule,
                                (int32_t)chunks, n_groups, sizes);
    if (r->pl == NULL ||
        hap_plan_specs_set(&r->pl->specs, refs->model_spec, refs->cluster_spec) != HAP_OK)
      st = hap_jr_oom(&r->jr);
  }
  free(sizes);
  for (int32_t g = 0; st == HAP_OK && r->pl != NULL && g < n_groups; g++) {
    json_t *grp = json_array_get(groups, (size_t)g);
    for (size_t i = 0; i < json_array_size(grp) && st == HAP_OK; i++) {
      hap_jpath p, q;
      int64_t d = 0;
      st = hap_jr_want_int(&r->jr, json_array_get(grp, i),
                           hap_jpath_index(q, hap_jpath_index(p, "pipeline.groups", (size_t)g), i),
                           0, r->c->n_devices - 1, "a device id of the cluster", &d);
      r->pl->group_devices[r->pl->group_first[g] + (int32_t)i] = (int32_t)d;
    }
  }
  return st;
}

/* stages[k]'s "nodes" and "group". */
static hap_status read_stage_layout(reader *r, const json_t *v, size_t k) {
  static const char *const keys[] = {"nodes", "group", "plan", NULL};
  hap_jpath path, p, q;
  json_t *m;
  hap_jpath_index(path, "stages", k);
  const char *want = "{\"nodes\": [first, end], \"group\", \"plan\"}";
  HAP_TRY(hap_jr_want_type(&r->jr, v, JSON_OBJECT, path, want));
  HAP_TRY(hap_jr_check_keys(&r->jr, v, path, keys, "nodes, group, plan"));
  HAP_TRY(hap_jr_member(&r->jr, v, path, "nodes", true, "[first, end] node indices", &m));
  HAP_TRY(hap_jr_want_array(&r->jr, m, hap_jpath_key(p, path, "nodes"), "[first, end] node indices",
                            16));
  if (json_array_size(m) != 2)
    return hap_jr_fail(&r->jr, HAP_EPARSE, p, "has %zu entries, expected [first, end]",
                       json_array_size(m));
  int64_t first, end, group;
  int64_t n = r->g->n_nodes;
  HAP_TRY(hap_jr_want_int(&r->jr, json_array_get(m, 0), hap_jpath_index(q, p, 0), 0, n,
                          "a node index of the graph", &first));
  HAP_TRY(hap_jr_want_int(&r->jr, json_array_get(m, 1), hap_jpath_index(q, p, 1), 0, n,
                          "a node index of the graph", &end));
  HAP_TRY(hap_jr_member(&r->jr, v, path, "group", true, "the index of its device group", &m));
  HAP_TRY(hap_jr_want_int(&r->jr, m, hap_jpath_key(p, path, "group"), 0, r->pl->n_groups - 1,
                          "the index of its device group", &group));
  hap_pipeline_stage *s = &r->pl->stages[k];
  s->first = (int32_t)first;
  s->end = (int32_t)end;
  s->group = (int32_t)group;
  return HAP_OK;
}

/* stages[k].plan, read for the stage's graph and cluster. */
static hap_status read_stage_plan(reader *r, const json_t *v, int32_t k) {
  hap_jpath path;
  json_t *m;
  hap_jpath_index(path, "stages", (size_t)k);
  HAP_TRY(hap_jr_member(&r->jr, v, path, "plan", true, "the stage's hap-plan object", &m));
  hap_stage_graph *sg;
  hap_cluster *gc;
  hap_err e = {0};
  hap_status st = hap_pipeline_stage_context(r->pl, k, r->g, r->c, &sg, &gc, &e);
  if (st != HAP_OK)
    return hap_err_set(r->jr.err, st, "%s: %s", r->jr.label, e.msg);
  char label[512];
  snprintf(label, sizeof label, "%s: stages[%d].plan", r->jr.label, k);
  st = hap_plan_from_object(m, label, sg ? sg->graph : r->g, gc ? gc : r->c, &r->pl->stages[k].plan,
                            r->jr.err);
  hap_cluster_destroy(gc);
  hap_stage_graph_destroy(sg);
  return st;
}

static hap_status read_predicted(reader *r, const json_t *root) {
  static const char *const keys[] = {"iteration_s", NULL};
  json_t *obj, *m;
  HAP_TRY(hap_jr_member(&r->jr, root, "", "predicted", true, "{\"iteration_s\"}", &obj));
  HAP_TRY(hap_jr_want_type(&r->jr, obj, JSON_OBJECT, "predicted", "{\"iteration_s\"}"));
  HAP_TRY(hap_jr_check_keys(&r->jr, obj, "predicted", keys, "iteration_s"));
  HAP_TRY(hap_jr_member(&r->jr, obj, "predicted", "iteration_s", true,
                        "the simulated iteration in seconds", &m));
  return hap_jr_want_amount(&r->jr, m, "predicted.iteration_s", HAP_JR_NON_NEGATIVE,
                            "an iteration time in seconds", &r->pl->predicted_iteration_s);
}

/* A checker's message with the file's label in front. */
static hap_status labelled(reader *r, hap_status st, const hap_err *e) {
  return hap_err_set(r->jr.err, st, "%s: %s", r->jr.label, e->msg);
}

static hap_status read_pipelined(reader *r, const json_t *root) {
  HAP_TRY(read_header(r, root));
  hap_plan_refs refs;
  HAP_TRY(hap_plan_read_refs(&r->jr, root, r->g, r->c, &refs));
  json_t *stages;
  const char *want = "the stages in model order, [{\"nodes\", \"group\", \"plan\"}, ...]";
  HAP_TRY(hap_jr_member(&r->jr, root, "", "stages", true, want, &stages));
  HAP_TRY(hap_jr_want_array(&r->jr, stages, "stages", want, (size_t)INT32_MAX));
  HAP_TRY(read_pipeline(r, root, &refs, json_array_size(stages)));
  for (size_t k = 0; k < json_array_size(stages); k++)
    HAP_TRY(read_stage_layout(r, json_array_get(stages, k), k));
  hap_err e = {0};
  hap_status st = hap_pipeline_validate_layout(r->pl, r->g, r->c, &e);
  if (st != HAP_OK)
    return labelled(r, st, &e);
  for (int32_t k = 0; k < r->pl->n_stages; k++)
    HAP_TRY(read_stage_plan(r, json_array_get(stages, (size_t)k), k));
  r->pl->policy = r->pl->stages[0].plan->policy;
  HAP_TRY(read_predicted(r, root));
  st = hap_pipeline_check_schedule(r->pl, &e);
  for (int32_t k = 1; k < r->pl->n_stages && st == HAP_OK; k++)
    if (!hap_policy_equal(&r->pl->stages[k].plan->policy, &r->pl->policy))
      st = hap_err_set(&e, HAP_EINVAL,
                       "stages[%d].plan.policy: differs from stages[0]'s, expected every stage "
                       "to train with one policy",
                       k);
  return st == HAP_OK ? HAP_OK : labelled(r, st, &e);
}

hap_status hap_pipeline_from_json(const char *json, size_t len, const char *label,
                                  const hap_graph *g, const hap_cluster *c, hap_pipeline **out,
                                  hap_err *err) {
  *out = NULL;
  reader r = {
      .jr = {.label = label ? label : "<json>", .err = err, .strict = true}, .g = g, .c = c};
  json_t *root;
  HAP_TRY(hap_jr_load(&r.jr, json, len, HAP_PLAN_FORMAT, &root));
  hap_status st;
  if (hap_plan_version_major(root) != HAP_PIPELINE_VERSION_MAJOR) {
    hap_plan *plan;
    st = hap_plan_from_object(root, r.jr.label, g, c, &plan, err);
    if (st == HAP_OK)
      st = hap_pipeline_of_plan(plan, g, &r.pl, err);
  } else {
    st = read_pipelined(&r, root);
  }
  json_decref(root);
  if (st != HAP_OK) {
    hap_pipeline_destroy(r.pl);
    hap_jr_one_line(err);
    return st;
  }
  *out = r.pl;
  return HAP_OK;
}

hap_status hap_pipeline_read_file(const char *path, const hap_graph *g, const hap_cluster *c,
                                  hap_pipeline **out, hap_err *err) {
  char *data;
  size_t len;
  *out = NULL;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_status st = hap_pipeline_from_json(data, len, path, g, c, out, err);
  free(data);
  return st;
}

/* ---- writing -------------------------------------------------------------------------------- */

static hap_status write_stage(hap_jw *w, const hap_pipeline *pl, int32_t k, const hap_graph *g,
                              const hap_cluster *c, hap_err *err) {
  const hap_pipeline_stage *s = &pl->stages[k];
  hap_stage_graph *sg;
  hap_cluster *gc;
  HAP_TRY(hap_pipeline_stage_context(pl, k, g, c, &sg, &gc, err));
  hap_jw_begin_object(w);
  hap_jw_key(w, "nodes");
  hap_jw_begin_array_inline(w);
  hap_jw_int(w, s->first);
  hap_jw_int(w, s->end);
  hap_jw_end_array(w);
  hap_jw_key(w, "group");
  hap_jw_int(w, s->group);
  hap_jw_key(w, "plan");
  hap_status st = hap_plan_write_object(w, s->plan, sg ? sg->graph : g, gc ? gc : c, err);
  if (st != HAP_OK)
    hap_err_prefix(err, "stages[%d].plan", k);
  hap_jw_end_object(w);
  hap_cluster_destroy(gc);
  hap_stage_graph_destroy(sg);
  return st;
}

hap_status hap_pipeline_write(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                              FILE *f, hap_err *err) {
  HAP_TRY(hap_pipeline_validate(pl, g, c, err));
  if (hap_pipeline_is_flat(pl))
    return hap_plan_write(pl->stages[0].plan, g, c, f, err);
  hap_jw w;
  hap_jw_init(&w, f, 2);
  hap_jw_begin_object(&w);
  hap_plan_write_refs(&w, HAP_PIPELINE_VERSION_MAJOR, HAP_PIPELINE_VERSION_MINOR, pl->strategy,
                      pl->graph_digest, pl->cluster_digest, &pl->specs, g, c);
  hap_jw_key(&w, "pipeline");
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "schedule");
  hap_jw_str(&w, hap_pipe_schedule_name(pl->schedule));
  hap_jw_key(&w, "chunks");
  hap_jw_int(&w, pl->chunks);
  hap_jw_key(&w, "groups");
  hap_jw_begin_array(&w);
  for (int32_t gi = 0; gi < pl->n_groups; gi++) {
    int32_t n;
    const int32_t *dev = hap_pipeline_group(pl, gi, &n);
    hap_jw_begin_array_inline(&w);
    for (int32_t i = 0; i < n; i++)
      hap_jw_int(&w, dev[i]);
    hap_jw_end_array(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_end_object(&w);
  hap_jw_key(&w, "stages");
  hap_jw_begin_array(&w);
  for (int32_t k = 0; k < pl->n_stages; k++)
    HAP_TRY(write_stage(&w, pl, k, g, c, err));
  hap_jw_end_array(&w);
  hap_jw_key(&w, "predicted");
  hap_jw_begin_object_inline(&w);
  hap_jw_key(&w, "iteration_s");
  hap_jw_double(&w, pl->predicted_iteration_s);
  hap_jw_end_object(&w);
  hap_jw_end_object(&w);
  if (!hap_jw_finish(&w))
    return hap_err_set(err, HAP_EIO, "cannot write the pipelined plan for graph '%s': write failed",
                       g->name);
  return HAP_OK;
}

hap_status hap_pipeline_write_file(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                                   const char *path, hap_err *err) {
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  hap_err e = {0};
  hap_status st = hap_pipeline_write(pl, g, c, af.f, &e);
  if (st != HAP_OK) {
    hap_atomic_abort(&af);
    return hap_err_set(err, st, "%s: %s", path, e.msg);
  }
  return hap_atomic_commit(&af, err);
}
