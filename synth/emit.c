/* emit.c — replay a program (one variant per node) under the installed ratios: its exact cost, the
 * plan steps (sources and communications in front of the computation that needs them), and
 * per-device compute, communication and memory. The replay makes the same choices as the search,
 * so a program's replayed cost is the cost the search found for it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "synth_internal.h"

static int prop_qcmp(const void *pa, const void *pb) {
  const syn_prop *a = pa, *b = pb;
  if (a->tensor != b->tensor)
    return a->tensor < b->tensor ? -1 : 1;
  if (a->layout != b->layout)
    return a->layout < b->layout ? -1 : 1;
  if (a->segment != b->segment)
    return a->segment < b->segment ? -1 : 1;
  return (a->granule > b->granule) - (a->granule < b->granule);
}

/* The plan's memory as the program's properties are made: kept bytes straight into the plan
 * (total and parts), a dropped tensor's into the current layer's working set (cur), whose
 * largest (top) the plan holds on top at the end (recomputation runs one layer at a time). */
typedef struct mem_tally {
  hap_plan *plan;
  double *cur, *top; /* [n] or NULL without recomputation */
} mem_tally;

static void tally(syn_ctx *x, mem_tally *m, const syn_prop *p, hap_storage storage) {
  if (m->plan == NULL)
    return;
  if (m->cur != NULL && x->rmap.dropped[p->tensor])
    syn_prop_memory_parts(x, p, storage, NULL, m->cur);
  else
    syn_prop_memory_parts(x, p, storage, m->plan->device_memory, m->plan->device_memory_bytes);
}

static void tally_node_done(syn_ctx *x, mem_tally *m) {
  for (int32_t d = 0; m->cur != NULL && d < x->n; d++)
    m->top[d] = fmax(m->top[d], m->cur[d]);
}

static void tally_finish(syn_ctx *x, mem_tally *m) {
  if (m->plan == NULL)
    return;
  for (int32_t d = 0; m->top != NULL && d < x->n; d++) {
    m->plan->device_memory_bytes[d] += m->top[d];
    m->plan->device_memory[d].activations += m->top[d];
    m->plan->device_memory[d].recompute_working = m->top[d];
  }
  m->plan->memory_recorded = true;
}

hap_status syn_replay(syn_ctx *x, const int8_t *variants, hap_plan *plan, double *cost_s,
                      hap_err *err) {
  const hap_graph *g = x->g;
  int32_t cap = 64, n = 0;
  syn_prop *have = malloc((size_t)cap * sizeof *have);
  double *per_dev = malloc((size_t)x->n * sizeof *per_dev);
  mem_tally mt = {plan, NULL, NULL};
  if (plan != NULL && x->n_mem > 1) {
    mt.cur = calloc((size_t)x->n, sizeof *mt.cur);
    mt.top = calloc((size_t)x->n, sizeof *mt.top);
  }
  hap_status st = HAP_OK;
  double total = 0;
  if (!have || !per_dev || (plan != NULL && x->n_mem > 1 && (!mt.cur || !mt.top))) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory replaying a program");
    goto out;
  }
  for (int32_t k = 0; k < g->n_nodes; k++) {
    const hap_node *node = &g->nodes[k];
    const syn_node *sn = &x->nodes[k];
    int v = variants[k];
    const hap_variant *var = &sn->variants[v];
    if (mt.cur != NULL && x->scope_start[k])
      memset(mt.cur, 0, (size_t)x->n * sizeof *mt.cur);
    if (HAP_VEC_RESERVE(have, cap, (int64_t)n + node->n_inputs + node->n_outputs, 64) != 0) {
      st = hap_err_set(err, HAP_ENOMEM, "out of memory replaying a program");
      goto out;
    }
    for (int i = 0; i < node->n_inputs; i++) {
      syn_prop want = {node->inputs[i], var->in[i], 0, 1};
      if (var->in[i] >= 0) {
        want.segment = sn->segment;
        want.granule = var->granule;
      }
      syn_choice c = syn_choose_input(x, have, n, &want, k, v, i);
      if (!isfinite(c.seconds)) {
        st = hap_err_set(err, HAP_EINVAL, "node '%s': input '%s' cannot be made %d", node->name,
                         g->tensors[node->inputs[i]].name, var->in[i]);
        goto out;
      }
      if (c.present)
        continue;
      total += c.seconds;
      have[n++] = want;
      if (plan != NULL) {
        hap_step step = {0};
        step.segment = want.layout >= 0 ? want.segment : sn->segment;
        step.tensor = want.tensor;
        step.to = want.layout;
        step.granule = want.layout >= 0 ? want.granule : 1;
        step.predicted_s = c.seconds;
        step.node = -1;
        if (c.source) {
          step.kind = HAP_STEP_SOURCE;
          step.storage = c.storage;
          tally(x, &mt, &want, c.storage);
        } else {
          step.kind = HAP_STEP_COMM;
          step.from = c.from.layout;
          step.comm = c.op;
          step.impl = c.impl;
          step.from_segment = c.from.layout >= 0 ? c.from.segment : step.segment;
          tally(x, &mt, &want, HAP_STORE_INPUT);
        }
        for (int32_t d = 0; d < x->n; d++)
          plan->device_comm_s[d] += c.seconds;
        if ((st = hap_plan_add_step(plan, &step, err)) != HAP_OK)
          goto out;
      }
    }
    double t = syn_node_time(x, k, v, plan ? per_dev : NULL);
    total += t;
    for (int o = 0; o < node->n_outputs; o++) {
      syn_prop out = {node->outputs[o], var->out[o], 0, 1};
      if (var->out[o] >= 0) {
        out.segment = sn->segment;
        out.granule = var->granule;
      }
      have[n++] = out;
      tally(x, &mt, &out, HAP_STORE_INPUT);
    }
    tally_node_done(x, &mt);
    if (plan != NULL) {
      hap_step step = {0};
      step.kind = HAP_STEP_COMPUTE;
      step.node = k;
      step.tensor = -1;
      step.variant = *var;
      step.segment = sn->segment;
      step.predicted_s = t;
      for (int32_t d = 0; d < x->n; d++)
        plan->device_compute_s[d] += per_dev[d];
      if ((st = hap_plan_add_step(plan, &step, err)) != HAP_OK)
        goto out;
    }
    /* drop dead properties and duplicates, as the search does */
    int32_t keep = 0;
    for (int32_t i = 0; i < n; i++)
      if (x->last_use[have[i].tensor] > k)
        have[keep++] = have[i];
    qsort(have, (size_t)keep, sizeof *have, prop_qcmp);
    n = 0;
    for (int32_t i = 0; i < keep; i++)
      if (n == 0 || prop_qcmp(&have[n - 1], &have[i]) != 0)
        have[n++] = have[i];
  }
  *cost_s = total;
  if (plan != NULL)
    plan->predicted_iteration_s = total;
  tally_finish(x, &mt);
out:
  free(have);
  free(per_dev);
  free(mt.cur);
  free(mt.top);
  return st;
}
