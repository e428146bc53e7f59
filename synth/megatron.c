/* megatron.c — the megatron-tp baseline (synth.h): Megatron-LM's default layout on a cluster of
 * equal hosts. Inside a host, tensor parallelism: the search restricted to variants that never
 * split an activation along its batch (column-, row-, head-, vocab-parallel; the rest whole),
 * even ratios, searched on host 0's devices with one replica's share of the batch and then priced
 * on every group's own devices (the slowest group sets the iteration). Across hosts,
 * data parallelism: one replica per host, the batch split evenly, each gradient shard all-reduced
 * over the devices with the same index in their hosts (priced into the search, so it shards the
 * big weights as Megatron does). The result is a 2-D plan
 * (hap_plan.replicas = hosts); docs/design-megatron-tp.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "plan/replica.h"
#include "synth_internal.h"

/* Devices per tensor-parallel group: o->tensor_parallel, or a host's (then hosts must be alike in
 * size: the group of a replica is one host). */
static hap_status tp_degree(const hap_cluster *c, const hap_synth_options *o, int32_t *tp,
                            hap_err *err) {
  *tp = o != NULL ? o->tensor_parallel : 0;
  if (*tp > 0) {
    if (c->n_devices % *tp != 0)
      return hap_err_set(err, HAP_EINVAL,
                         "megatron-tp: tensor_parallel %d does not divide the %d devices", *tp,
                         c->n_devices);
    return HAP_OK;
  }
  for (int32_t h = 1; h < c->n_hosts; h++)
    if (c->hosts[h].n_devices != c->hosts[0].n_devices)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "megatron-tp needs hosts with the same number of devices: host '%s' has "
                         "%d, host '%s' has %d",
                         c->hosts[0].name, c->hosts[0].n_devices, c->hosts[h].name,
                         c->hosts[h].n_devices);
  *tp = c->hosts[0].n_devices;
  return HAP_OK;
}

/* The group across replicas of each index in a tensor-parallel group: the devices with that
 * index in every group, sharing each NIC with the other indices' groups that cross it (they all
 * run at once). */
static hap_status replica_groups(const hap_cluster *c, int32_t tp, hap_group *out, hap_err *err) {
  int32_t R = c->n_devices / tp;
  int32_t *ranks = malloc((size_t)R * sizeof *ranks);
  int32_t *crossing = calloc((size_t)c->n_hosts, sizeof *crossing);
  if (ranks == NULL || crossing == NULL) {
    free(ranks);
    free(crossing);
    return hap_err_set(err, HAP_ENOMEM, "out of memory pricing megatron-tp");
  }
  for (int32_t i = 0; i < tp; i++) /* the groups leaving each host */
    for (int32_t h = 0; h < c->n_hosts; h++) {
      bool in = false, out_of = false;
      for (int32_t r = 0; r < R; r++) {
        bool here = c->devices[r * tp + i].host == h;
        in = in || here;
        out_of = out_of || !here;
      }
      crossing[h] += in && out_of;
    }
  int32_t sharers = 1;
  for (int32_t h = 0; h < c->n_hosts; h++)
    sharers = crossing[h] > sharers ? crossing[h] : sharers;
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < tp && st == HAP_OK; i++) {
    for (int32_t r = 0; r < R; r++)
      ranks[r] = r * tp + i;
    st = hap_group_init(c, ranks, R, &out[i], err);
    hap_group_share_nics(&out[i], sharers);
  }
  free(ranks);
  free(crossing);
  return st;
}

/* The cluster of tensor-parallel group r's devices (r = 0: the one the search runs on). */
static hap_status group_cluster(const hap_cluster *c, int32_t tp, int32_t r, hap_cluster **out,
                                hap_err *err) {
  if (r == 0 && tp == c->hosts[0].n_devices && c->devices[0].host == 0)
    return hap_cluster_of_host(c, 0, out, err);
  int32_t *dev = malloc((size_t)tp * sizeof *dev);
  if (dev == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory pricing megatron-tp");
  for (int32_t i = 0; i < tp; i++)
    dev[i] = r * tp + i;
  hap_status st = hap_cluster_of_devices(c, dev, tp, c->name, out, err);
  free(dev);
  return st;
}

/* Whether groups a and b hold the same device models, index by index. */
static bool same_models(const hap_cluster *c, int32_t tp, int32_t a, int32_t b) {
  for (int32_t i = 0; i < tp; i++)
    if (strcmp(c->devices[a * tp + i].model, c->devices[b * tp + i].model) != 0)
      return false;
  return true;
}

/* The program `in` (variants) priced on every group: priced[r] is group r's plan (owned; groups
 * of the same device models share the first one's, and priced[0] is `in` itself). */
static hap_status price_groups(const hap_graph *rg, const hap_cluster *c, int32_t tp,
                               const hap_synth_options *io, const hap_group *cross,
                               const int8_t *variants, hap_plan *in, hap_plan **priced,
                               hap_err *err) {
  int32_t R = c->n_devices / tp;
  priced[0] = in;
  for (int32_t r = 1; r < R; r++) {
    for (int32_t q = 0; q < r && priced[r] == NULL; q++)
      if (same_models(c, tp, q, r))
        priced[r] = priced[q];
    if (priced[r] != NULL)
      continue;
    hap_cluster *gc = NULL;
    HAP_TRY(group_cluster(c, tp, r, &gc, err));
    hap_status st = syn_price_replica(rg, gc, io, cross, variants, in->ratios, &priced[r], err);
    hap_cluster_destroy(gc);
    HAP_TRY(st);
  }
  return HAP_OK;
}

/* The 2-D plan over every device from the group program priced on each group (priced[r]). */
static hap_status assemble(hap_plan *const *priced, const hap_graph *g, const hap_cluster *c,
                           const hap_synth_options *o, hap_plan **out, hap_err *err) {
  const hap_plan *in = priced[0];
  uint64_t gd, cd;
  HAP_TRY(hap_graph_digest(g, &gd, err));
  HAP_TRY(hap_cluster_digest(c, &cd, err));
  hap_plan *p = hap_plan_create(hap_strategy_name(HAP_STRATEGY_MEGATRON_TP), g->name, gd, c->name,
                                cd, c->n_devices, in->n_segments);
  if (p == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory emitting the plan");
  hap_status st = hap_plan_set_replicas(p, c->n_devices / in->n_devices, err);
  if (st == HAP_OK)
    memcpy(p->ratios, in->ratios,
           (size_t)in->n_segments * (size_t)in->n_devices * sizeof *p->ratios);
  for (int32_t k = 0; k < in->n_steps && st == HAP_OK; k++)
    st = hap_plan_add_step(p, &in->steps[k], err);
  int32_t G = in->n_devices;
  p->policy = in->policy;
  p->memory_recorded = in->memory_recorded;
  p->predicted_iteration_s = 0; /* the slowest group's; each prices the replica sync */
  for (int32_t d = 0; d < c->n_devices && st == HAP_OK; d++) {
    const hap_plan *mine = priced[d / G];
    if (mine->predicted_iteration_s > p->predicted_iteration_s)
      p->predicted_iteration_s = mine->predicted_iteration_s;
    p->device_memory_bytes[d] = mine->device_memory_bytes[d % G];
    p->device_memory[d] = mine->device_memory[d % G];
    p->device_compute_s[d] = mine->device_compute_s[d % G];
    p->device_comm_s[d] = mine->device_comm_s[d % G];
    double limit =
        o && o->memory_limit_bytes > 0 ? o->memory_limit_bytes : c->devices[d].memory_bytes;
    double copies = o && o->activation_copies > 1 ? o->activation_copies : 1;
    hap_memory_breakdown need = hap_memory_in_flight(&p->device_memory[d], copies);
    if (hap_memory_total(&need) > limit) {
      char have[32], held[32];
      st =
          hap_err_set(err, HAP_EINVAL,
                      "megatron-tp: device '%s' holds %s, it has %s: the program chosen on the "
                      "devices of '%s' does not fit this device",
                      c->devices[d].name, hap_fmt_bytes(hap_memory_total(&need), held, sizeof held),
                      hap_fmt_bytes(limit, have, sizeof have), c->hosts[0].name);
    }
  }
  if (st != HAP_OK) {
    hap_plan_destroy(p);
    return st;
  }
  *out = p;
  return HAP_OK;
}

hap_status syn_megatron(const hap_graph *g, const hap_cluster *c, const hap_synth_options *o,
                        hap_plan **out, hap_synth_stats *stats, hap_err *err) {
  *out = NULL;
  int32_t tp;
  HAP_TRY(tp_degree(c, o, &tp, err));
  hap_synth_options io = {0};
  if (o != NULL)
    io = *o;
  io.strategy = HAP_STRATEGY_MEGATRON_TP;
  if (tp == c->n_devices)
    return syn_synthesize_flat(g, c, &io, out, stats, err);
  io.rescore = NULL; /* the hook prices whole plans; this one is one replica's */
  int32_t R = c->n_devices / tp;
  hap_graph *rg = NULL;
  hap_cluster *group = NULL;
  hap_plan *in = NULL;
  hap_group *cross = calloc((size_t)tp, sizeof *cross);
  hap_plan **priced = calloc((size_t)R, sizeof(hap_plan *));
  int8_t *variants = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1));
  hap_status st = HAP_OK;
  if (cross == NULL || priced == NULL || variants == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "out of memory synthesising megatron-tp");
  if (st == HAP_OK)
    st = hap_graph_split_batch(g, R, &rg, err);
  if (st == HAP_OK)
    st = group_cluster(c, tp, 0, &group, err);
  if (st == HAP_OK)
    st = replica_groups(c, tp, cross, err);
  if (st == HAP_OK)
    st = syn_synthesize_replica_program(rg, group, &io, cross, &in, variants, stats, err);
  if (st == HAP_OK && in == NULL)
    st = hap_err_set(err, HAP_EUNSUPPORTED, "megatron-tp: no plan was found");
  if (st == HAP_OK)
    st = price_groups(rg, c, tp, &io, cross, variants, in, priced, err);
  if (st == HAP_OK)
    st = assemble(priced, g, c, o, out, err);
  for (int32_t r = 1; priced != NULL && r < R; r++) { /* shared ones once; [0] is `in` */
    bool first = priced[r] != in;
    for (int32_t q = 1; q < r && first; q++)
      first = priced[q] != priced[r];
    if (first)
      hap_plan_destroy(priced[r]);
  }
  free(priced);
  free(variants);
  free(cross);
  hap_plan_destroy(in);
  hap_cluster_destroy(group);
  hap_graph_destroy(rg);
  return st;
}
