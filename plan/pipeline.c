/* pipeline.c — the pipelined plan (pipeline.h): construction, each stage's graph and cluster, and
 * validation. */
#include "plan/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_io.h"
#include "model/graph_io.h"

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

hap_pipeline *hap_pipeline_create(const char *strategy, const char *graph_name,
                                  uint64_t graph_digest, const char *cluster_name,
                                  uint64_t cluster_digest, int32_t n_devices,
                                  hap_pipe_schedule schedule, int32_t chunks, int32_t n_groups,
                                  const int32_t *group_size) {
  if (n_devices < 1 || chunks < 1 || n_groups < 1 || n_groups > n_devices ||
      chunks > INT32_MAX / n_groups || group_size == NULL)
    return NULL;
  int64_t total = 0;
  for (int32_t g = 0; g < n_groups; g++) {
    if (group_size[g] < 1)
      return NULL;
    total += group_size[g];
  }
  if (total != n_devices)
    return NULL;
  hap_pipeline *pl = calloc(1, sizeof *pl);
  if (pl == NULL)
    return NULL;
  pl->strategy = dup_or_empty(strategy);
  pl->graph_name = dup_or_empty(graph_name);
  pl->cluster_name = dup_or_empty(cluster_name);
  pl->graph_digest = graph_digest;
  pl->cluster_digest = cluster_digest;
  pl->n_devices = n_devices;
  pl->schedule = schedule;
  pl->chunks = chunks;
  pl->n_groups = n_groups;
  pl->n_stages = n_groups * chunks;
  pl->group_first = malloc(((size_t)n_groups + 1) * sizeof *pl->group_first);
  pl->group_devices = malloc((size_t)n_devices * sizeof *pl->group_devices);
  pl->stages = calloc((size_t)pl->n_stages, sizeof *pl->stages);
  pl->policy = hap_policy_default();
  if (!pl->strategy || !pl->graph_name || !pl->cluster_name || !pl->group_first ||
      !pl->group_devices || !pl->stages) {
    hap_pipeline_destroy(pl);
    return NULL;
  }
  pl->group_first[0] = 0;
  for (int32_t g = 0; g < n_groups; g++)
    pl->group_first[g + 1] = pl->group_first[g] + group_size[g];
  for (int32_t d = 0; d < n_devices; d++)
    pl->group_devices[d] = d;
  for (int32_t k = 0; k < pl->n_stages; k++)
    pl->stages[k].group = k % n_groups;
  return pl;
}

hap_status hap_pipeline_set_specs(hap_pipeline *pl, const char *model, const char *cluster) {
  HAP_TRY(hap_plan_specs_set(&pl->specs, model, cluster));
  if (hap_pipeline_is_flat(pl) && pl->stages[0].plan != NULL)
    HAP_TRY(hap_plan_specs_set(&pl->stages[0].plan->specs, model, cluster));
  return HAP_OK;
}

void hap_pipeline_destroy(hap_pipeline *pl) {
  if (pl == NULL)
    return;
  for (int32_t k = 0; k < pl->n_stages && pl->stages != NULL; k++)
    hap_plan_destroy(pl->stages[k].plan);
  free(pl->stages);
  free(pl->group_first);
  free(pl->group_devices);
  free(pl->strategy);
  free(pl->graph_name);
  free(pl->cluster_name);
  hap_plan_specs_free(&pl->specs);
  free(pl);
}

hap_status hap_pipeline_of_plan(hap_plan *plan, const hap_graph *g, hap_pipeline **out,
                                hap_err *err) {
  *out = NULL;
  int32_t n = plan->n_devices;
  hap_pipeline *pl =
      hap_pipeline_create(plan->strategy, plan->graph_name, plan->graph_digest, plan->cluster_name,
                          plan->cluster_digest, n, HAP_PIPE_GPIPE, 1, 1, &n);
  if (pl == NULL) {
    hap_plan_destroy(plan);
    return hap_err_set(err, HAP_ENOMEM, "out of memory making a one-stage pipeline");
  }
  if (hap_plan_specs_set(&pl->specs, plan->specs.model, plan->specs.cluster) != HAP_OK) {
    hap_pipeline_destroy(pl);
    hap_plan_destroy(plan);
    return hap_err_set(err, HAP_ENOMEM, "out of memory making a one-stage pipeline");
  }
  pl->policy = plan->policy;
  pl->predicted_iteration_s = plan->predicted_iteration_s;
  pl->stages[0].first = 0;
  pl->stages[0].end = g->n_nodes;
  pl->stages[0].plan = plan;
  *out = pl;
  return HAP_OK;
}

bool hap_pipeline_is_flat(const hap_pipeline *pl) {
  if (pl->n_stages != 1 || pl->n_groups != 1)
    return false;
  for (int32_t d = 0; d < pl->n_devices; d++)
    if (pl->group_devices[d] != d)
      return false;
  return true;
}

/* Does group g hold every device of the cluster, in order? */
static bool group_is_everything(const hap_pipeline *pl, int32_t g) {
  int32_t n;
  const int32_t *dev = hap_pipeline_group(pl, g, &n);
  if (n != pl->n_devices)
    return false;
  for (int32_t i = 0; i < n; i++)
    if (dev[i] != i)
      return false;
  return true;
}

hap_status hap_pipeline_stage_context(const hap_pipeline *pl, int32_t k, const hap_graph *g,
                                      const hap_cluster *c, hap_stage_graph **sg, hap_cluster **gc,
                                      hap_err *err) {
  *sg = NULL;
  *gc = NULL;
  const hap_pipeline_stage *s = &pl->stages[k];
  if (!(s->first == 0 && s->end == g->n_nodes)) {
    hap_status st = hap_stage_graph_build(g, s->first, s->end, sg, err);
    if (st != HAP_OK) {
      hap_err_prefix(err, "stages[%d]", k);
      return st;
    }
  }
  if (!group_is_everything(pl, s->group)) {
    int32_t n;
    const int32_t *dev = hap_pipeline_group(pl, s->group, &n);
    char name[512];
    snprintf(name, sizeof name, "%s[group %d]", c->name, s->group);
    hap_status st = hap_cluster_of_devices(c, dev, n, name, gc, err);
    if (st != HAP_OK) {
      hap_stage_graph_destroy(*sg);
      *sg = NULL;
      hap_err_prefix(err, "stages[%d]", k);
      return st;
    }
  }
  return HAP_OK;
}

/* ---- validation ----------------------------------------------------------------------------- */

static hap_status check_header(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                               hap_err *err) {
  uint64_t gd, cd;
  HAP_TRY(hap_graph_digest(g, &gd, err));
  HAP_TRY(hap_cluster_digest(c, &cd, err));
  if (strcmp(pl->graph_name, g->name) != 0 || pl->graph_digest != gd)
    return hap_err_set(
        err, HAP_EINVAL, "graph: made for '%s' digest %016llx, this graph '%s' has digest %016llx",
        pl->graph_name, (unsigned long long)pl->graph_digest, g->name, (unsigned long long)gd);
  if (pl->cluster_digest != cd) /* not the name: a profile's is its path (hap_cluster_digest) */
    return hap_err_set(
        err, HAP_EINVAL,
        "cluster: made for '%s' digest %016llx, this cluster '%s' has digest %016llx",
        pl->cluster_name, (unsigned long long)pl->cluster_digest, c->name, (unsigned long long)cd);
  if (pl->n_devices != c->n_devices)
    return hap_err_set(err, HAP_EINVAL, "cluster: %d devices, this cluster has %d", pl->n_devices,
                       c->n_devices);
  return HAP_OK;
}

/* hap_pipe_order_build's rules, checked without building the order. */
hap_status hap_pipeline_check_schedule(const hap_pipeline *pl, hap_err *err) {
  int32_t p = pl->n_groups, v = pl->chunks, m = pl->policy.micro_batches;
  HAP_TRY(hap_policy_check(&pl->policy, err));
  switch (pl->schedule) {
  case HAP_PIPE_GPIPE:
  case HAP_PIPE_1F1B:
    if (v != 1)
      return hap_err_set(err, HAP_EINVAL,
                         "chunks: %d with schedule %s, expected 1 (interleaved "
                         "takes two or more)",
                         v, hap_pipe_schedule_name(pl->schedule));
    return HAP_OK;
  case HAP_PIPE_INTERLEAVED:
    if (v < 2)
      return hap_err_set(err, HAP_EINVAL,
                         "chunks: %d with schedule interleaved, expected 2 or more", v);
    if (m % p != 0)
      return hap_err_set(err, HAP_EINVAL,
                         "micro_batches: %d with schedule interleaved over %d groups, expected a "
                         "multiple of %d",
                         m, p, p);
    return HAP_OK;
  default:
    return hap_err_set(err, HAP_EINVAL, "schedule: %d, expected one of " HAP_PIPE_SCHEDULE_CHOICES,
                       (int)pl->schedule);
  }
}

static hap_status check_groups(const hap_pipeline *pl, hap_err *err) {
  if (pl->n_groups < 1 || pl->n_groups > pl->n_devices)
    return hap_err_set(err, HAP_EINVAL, "groups: %d, expected 1 to %d (the devices)", pl->n_groups,
                       pl->n_devices);
  uint8_t *seen = calloc((size_t)pl->n_devices, 1);
  if (seen == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory");
  hap_status st = HAP_OK;
  for (int32_t g = 0; g < pl->n_groups && st == HAP_OK; g++) {
    int32_t n;
    const int32_t *dev = hap_pipeline_group(pl, g, &n);
    if (n < 1)
      st = hap_err_set(err, HAP_EINVAL, "groups[%d]: empty, expected at least one device", g);
    for (int32_t i = 0; i < n && st == HAP_OK; i++) {
      if (dev[i] < 0 || dev[i] >= pl->n_devices)
        st = hap_err_set(err, HAP_EINVAL, "groups[%d][%d]: device %d, expected 0 to %d", g, i,
                         dev[i], pl->n_devices - 1);
      else if (i > 0 && dev[i] <= dev[i - 1])
        st = hap_err_set(err, HAP_EINVAL,
                         "groups[%d][%d]: device %d after %d, expected increasing device ids", g, i,
                         dev[i], dev[i - 1]);
      else if (seen[dev[i]]++)
        st = hap_err_set(err, HAP_EINVAL,
                         "groups[%d][%d]: device %d is in an earlier group, expected each device "
                         "in one group",
                         g, i, dev[i]);
    }
  }
  if (st == HAP_OK && pl->group_first[pl->n_groups] != pl->n_devices)
    st = hap_err_set(err, HAP_EINVAL,
                     "groups: hold %d devices, expected every one of the cluster's %d",
                     pl->group_first[pl->n_groups], pl->n_devices);
  free(seen);
  return st;
}

static hap_status check_ranges(const hap_pipeline *pl, const hap_graph *g, hap_err *err) {
  if (pl->n_stages != pl->n_groups * pl->chunks)
    return hap_err_set(err, HAP_EINVAL, "stages: %d, expected %d (groups x chunks)", pl->n_stages,
                       pl->n_groups * pl->chunks);
  int32_t next = 0;
  for (int32_t k = 0; k < pl->n_stages; k++) {
    const hap_pipeline_stage *s = &pl->stages[k];
    if (s->group != k % pl->n_groups)
      return hap_err_set(err, HAP_EINVAL,
                         "stages[%d].group: %d, expected %d (stage k runs on "
                         "group k mod %d)",
                         k, s->group, k % pl->n_groups, pl->n_groups);
    if (s->first != next || s->end <= s->first || s->end > g->n_nodes)
      return hap_err_set(
          err, HAP_EINVAL,
          "stages[%d].nodes: [%d, %d), expected a non-empty range starting at %d and "
          "ending by %d (the graph's nodes)",
          k, s->first, s->end, next, g->n_nodes);
    next = s->end;
  }
  if (next != g->n_nodes)
    return hap_err_set(err, HAP_EINVAL,
                       "stages[%d].nodes: ends at %d, expected %d (the stages cover every node)",
                       pl->n_stages - 1, next, g->n_nodes);
  return HAP_OK;
}

static hap_status check_stage(const hap_pipeline *pl, int32_t k, const hap_graph *g,
                              const hap_cluster *c, hap_err *err) {
  const hap_plan *p = pl->stages[k].plan;
  if (p == NULL)
    return hap_err_set(err, HAP_EINVAL, "stages[%d].plan: missing, expected the stage's program",
                       k);
  if (!hap_policy_equal(&p->policy, &pl->policy))
    return hap_err_set(err, HAP_EINVAL,
                       "stages[%d].plan.policy: differs from the pipeline's, expected every stage "
                       "to train with one policy",
                       k);
  hap_stage_graph *sg;
  hap_cluster *gc;
  HAP_TRY(hap_pipeline_stage_context(pl, k, g, c, &sg, &gc, err));
  hap_status st = hap_plan_validate(p, sg ? sg->graph : g, gc ? gc : c, err);
  if (st != HAP_OK)
    hap_err_prefix(err, "stages[%d].plan", k);
  hap_cluster_destroy(gc);
  hap_stage_graph_destroy(sg);
  return st;
}

hap_status hap_pipeline_validate_layout(const hap_pipeline *pl, const hap_graph *g,
                                        const hap_cluster *c, hap_err *err) {
  HAP_TRY(check_header(pl, g, c, err));
  HAP_TRY(check_groups(pl, err));
  return check_ranges(pl, g, err);
}

hap_status hap_pipeline_validate(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                                 hap_err *err) {
  HAP_TRY(hap_pipeline_validate_layout(pl, g, c, err));
  HAP_TRY(hap_pipeline_check_schedule(pl, err));
  for (int32_t k = 0; k < pl->n_stages; k++)
    HAP_TRY(check_stage(pl, k, g, c, err));
  return HAP_OK;
}
