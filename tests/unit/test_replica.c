/* 2-D device groups and the megatron-tp baseline (plan/replica.h, synth/megatron.c, lowering and
 * simulation of plans with replicas): the per-replica graph, one host's cluster, NIC sharing, the
 * megatron-tp plan of a 2-host x 2-device MLP (tensor parallel inside a host, one gradient
 * all-reduce across hosts per parameter shard), its JSON round trip and malformed variants, the
 * simulator pricing in-group collectives on the intra-host link and cross-host ones on the shared
 * NICs, and folding that stays exact when sub-groups differ. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cost.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/replica.h"
#include "simulate/plan_sim.h"
#include "synth/synth.h"
#include "test_util.h"

static const char *const mlp = "mlp:layers=2,batch=24,seq=8,hidden=32";

/* `hosts` hosts of two devices; speed[d] scales device d's FLOP/s (1 = 1e12); intra-host links
 * 100 GB/s, NICs 1 GB/s, 1 us latency each. */
static hap_cluster *two_per_host(int hosts, const double *speed) {
  hap_cluster *c = hap_cluster_create("pairs");
  hap_link intra = {1e-6, 100e9}, nic = {1e-6, 1e9};
  for (int h = 0; h < hosts; h++) {
    char hn[16];
    snprintf(hn, sizeof hn, "h%d", h);
    cr_assert_eq(hap_cluster_add_host(c, hn, intra, nic, NULL, NULL), HAP_OK);
    for (int i = 0; i < 2; i++) {
      int d = 2 * h + i;
      hap_device dev = {0};
      dev.model = speed[d] == 1 ? "fast" : "slow";
      dev.sustained_flops[HAP_F32] = dev.peak_flops[HAP_F32] = speed[d] * 1e12;
      dev.memory_bytes = 16e9;
      dev.memory_bw_Bps = 900e9;
      dev.launch_s = 5e-6;
      char dn[16];
      snprintf(dn, sizeof dn, "h%d:%d", h, i);
      cr_assert_eq(hap_cluster_add_device(c, dn, &dev, NULL, NULL), HAP_OK);
    }
  }
  cr_assert_eq(hap_cluster_validate(c, NULL), HAP_OK);
  return c;
}

static hap_plan *megatron(const hap_graph *g, const hap_cluster *c) {
  hap_synth_options o = {.strategy = HAP_STRATEGY_MEGATRON_TP};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  return p;
}

static hap_lowered *lower(const hap_plan *p, const hap_graph *g) {
  hap_lowered *lw = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_lower(p, g, &lw, &err), HAP_OK, "%s", err.msg);
  return lw;
}

Test(replica, split_batch_divides_the_batch_dims_only) {
  hap_graph *g = model(mlp);
  hap_graph *r = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_graph_split_batch(g, 3, &r, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(r->n_tensors, g->n_tensors);
  cr_assert_eq(r->n_nodes, g->n_nodes);
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *a = &g->tensors[t], *b = &r->tensors[t];
    cr_assert_str_eq(a->name, b->name);
    cr_assert_eq(a->shape.rank, b->shape.rank);
    bool batched = a->kind == HAP_TENSOR_INPUT || a->kind == HAP_TENSOR_ACTIVATION;
    for (int d = 0; d < a->shape.rank; d++) {
      int64_t want = batched && d == 0 ? a->shape.dims[0] / 3 : a->shape.dims[d];
      cr_expect_eq(b->shape.dims[d], want, "%s dim %d", a->name, d);
    }
  }
  hap_graph_destroy(r);
  /* 24 is not a multiple of 5: one error naming a node */
  cr_assert_eq(hap_graph_split_batch(g, 5, &r, &err), HAP_EUNSUPPORTED);
  cr_assert_null(r);
  cr_expect(strstr(err.msg, "not a multiple of 5 replicas") != NULL, "%s", err.msg);
  cr_assert_eq(hap_graph_split_batch(g, 0, &r, &err), HAP_EINVAL);
  hap_graph_destroy(g);
}

Test(replica, split_batch_every_zoo_model) {
  static const char *const specs[] = {
      "mlp:layers=2,batch=8,seq=4,hidden=16",
      "bert-base:layers=1,batch=4,seq=8,width=32,heads=2,hidden=64,vocab=64",
      "vit:layers=1,batch=4,image=8,patch=4,width=32,heads=2,hidden=64,classes=10",
      "bert-moe:layers=2,batch=4,seq=8,width=32,heads=2,hidden=64,vocab=64,experts=4",
      "vgg19:batch=4",
      "gpt:layers=1,batch=4,seq=8,width=32,heads=2,vocab=64",
      "gpt:layers=1,batch=4,seq=8,width=32,heads=2,vocab=64,granularity=fine",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    hap_graph *g = model(specs[i]);
    hap_graph *r = NULL;
    hap_err err = {0};
    cr_assert_eq(hap_graph_split_batch(g, 2, &r, &err), HAP_OK, "%s: %s", specs[i], err.msg);
    /* the loss stays a scalar; the first input loses half its batch */
    cr_expect_eq(r->tensors[r->loss].shape.rank, 0, "%s", specs[i]);
    for (int32_t t = 0; t < g->n_tensors; t++)
      if (g->tensors[t].kind == HAP_TENSOR_INPUT) {
        cr_expect_eq(2 * r->tensors[t].shape.dims[0], g->tensors[t].shape.dims[0], "%s %s",
                     specs[i], g->tensors[t].name);
        break;
      }
    hap_graph_destroy(r);
    hap_graph_destroy(g);
  }
}

Test(replica, cluster_of_one_host) {
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=4");
  hap_cluster *h = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_of_host(c, 3, &h, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(h->n_hosts, 1);
  cr_assert_eq(h->n_devices, 4);
  for (int32_t i = 0; i < 4; i++) {
    const hap_device *a = &c->devices[c->hosts[3].first_device + i], *b = &h->devices[i];
    cr_expect_str_eq(a->name, b->name);
    cr_expect_eq(a->sustained_flops[HAP_F32], b->sustained_flops[HAP_F32]);
  }
  hap_link want = hap_cluster_link(c, c->hosts[3].first_device, c->hosts[3].first_device + 1);
  hap_link got = hap_cluster_link(h, 0, 1);
  cr_expect_eq(got.bandwidth_Bps, want.bandwidth_Bps);
  cr_expect_eq(got.latency_s, want.latency_s);
  hap_cluster_destroy(h);
  cr_assert_eq(hap_cluster_of_host(c, 8, &h, &err), HAP_EINVAL);
  hap_cluster_destroy(c);
}

Test(replica, shared_nics_slow_the_cross_host_group) {
  static const double speed[4] = {1, 1, 1, 1};
  hap_cluster *c = two_per_host(2, speed);
  hap_group cross, host;
  cr_assert_eq(hap_group_init(c, (int32_t[]){0, 2}, 2, &cross, NULL), HAP_OK);
  cr_assert_eq(hap_group_init(c, (int32_t[]){0, 1}, 2, &host, NULL), HAP_OK);
  hap_coll_bytes b = hap_coll_bytes_uniform(1e8, 2);
  double alone = hap_coll_time(&cross, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, b);
  hap_group_share_nics(&cross, 2);
  double shared = hap_coll_time(&cross, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, b);
  /* ring all-reduce of S over 2 ranks: 2 a + S / B; B halves */
  cr_expect_float_eq(alone, 2 * 2e-6 + 1e8 / 1e9, 1e-12);
  cr_expect_float_eq(shared, 2 * 2e-6 + 1e8 / 0.5e9, 1e-12);
  double before = hap_coll_time(&host, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, b);
  hap_group_share_nics(&host, 2); /* one host: no NIC on its paths */
  cr_expect_eq(hap_coll_time(&host, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, b), before);
  hap_cluster_destroy(c);
}

Test(replica, megatron_mlp_two_hosts_task_list) {
  static const double speed[4] = {1, 1, 1, 1};
  hap_graph *g = model(mlp);
  hap_cluster *c = two_per_host(2, speed);
  hap_plan *p = megatron(g, c);
  hap_err err = {0};
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(p->strategy, "megatron-tp");
  cr_assert_eq(p->replicas, 2);
  cr_assert_eq(p->group_size, 2);
  cr_expect_float_eq(p->ratios[0], 0.5, 1e-12); /* even inside a host */
  /* tensor parallel inside the host: the weights are sharded, no activation along its batch */
  int sharded = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind == HAP_STEP_SOURCE && g->tensors[s->tensor].kind == HAP_TENSOR_PARAMETER)
      sharded += s->to >= 0;
    if (s->kind == HAP_STEP_COMPUTE)
      for (int o = 0; o < g->nodes[s->node].n_outputs; o++)
        cr_expect_neq(s->variant.out[o], 0, "%s splits its batch", g->nodes[s->node].name);
  }
  cr_expect_eq(sharded, 4, "both layers' weights and biases sharded");
  hap_lowered *lw = lower(p, g);
  cr_assert_eq(lw->local_graph->tensors[0].shape.dims[0], 12); /* half the batch per host */
  /* one all-reduce across the hosts per trainable parameter, of the shard a device holds, after
   * the backward that produced it, before its update */
  int n_rep = 0;
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    const hap_task *k = &lw->tasks[t];
    if (k->kind != HAP_TASK_COLLECTIVE || k->span != HAP_SPAN_REPLICAS)
      continue;
    n_rep++;
    char want[128];
    snprintf(want, sizeof want, "%s.grad.replica_all_reduce", g->tensors[k->tensor].name);
    cr_expect_str_eq(k->name, want);
    cr_expect_eq(k->coll, HAP_COLL_ALL_REDUCE);
    cr_expect_eq(k->n_deps, 1);
    cr_expect_eq(lw->tasks[lw->deps[k->dep0]].kind, HAP_TASK_COMPUTE);
    double bytes[4];
    cr_assert_eq(hap_lowered_coll_bytes(lw, t, bytes, &err), HAP_OK, "%s", err.msg);
    double full = (double)hap_tensor_bytes(&g->tensors[k->tensor]);
    for (int d = 0; d < 4; d++)
      cr_expect_float_eq(bytes[d], full / 2, 1e-9, "%s on %d", k->name, d);
  }
  cr_expect_eq(n_rep, 4);
  hap_lowered_destroy(lw);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* The group program is searched on host 0 but priced on every host's own devices: with host 1 at
 * a tenth of the speed its devices' compute time is about ten times host 0's, and the iteration is
 * the slow host's (it was host 0's for every host before: 1.27 s predicted for a plan simulated at
 * 1.97 s on paper-hetero). */
Test(replica, megatron_prices_every_host_on_its_own_devices) {
  hap_graph *g = model("mlp:layers=2,batch=64,seq=32,hidden=512");
  static const double even[4] = {1, 1, 1, 1}, slow_second[4] = {1, 1, 0.1, 0.1};
  hap_cluster *fast = two_per_host(2, even), *mixed = two_per_host(2, slow_second);
  hap_plan *pf = megatron(g, fast), *pm = megatron(g, mixed);
  cr_assert_eq(pm->replicas, 2);
  for (int d = 0; d < 2; d++) {
    cr_expect_float_eq(pm->device_compute_s[d], pf->device_compute_s[d],
                       1e-9 * pf->device_compute_s[d], "host 0 device %d", d);
    double ratio = pm->device_compute_s[d + 2] / pm->device_compute_s[d];
    cr_expect(ratio > 5 && ratio <= 10 + 1e-9, "host 1 device %d: %.3fx host 0's compute", d,
              ratio);
  }
  cr_expect_gt(pm->predicted_iteration_s, 3 * pf->predicted_iteration_s,
               "mixed %.6g s vs all fast %.6g s", pm->predicted_iteration_s,
               pf->predicted_iteration_s);
  double slowest = 0;
  for (int d = 0; d < 4; d++)
    slowest = fmax(slowest, pm->device_compute_s[d] + pm->device_comm_s[d]);
  cr_expect_geq(pm->predicted_iteration_s, slowest * (1 - 1e-9));
  hap_plan_destroy(pf);
  hap_plan_destroy(pm);
  hap_cluster_destroy(fast);
  hap_cluster_destroy(mixed);
  hap_graph_destroy(g);
}

Test(replica, megatron_on_one_host_is_a_plain_plan) {
  hap_graph *g = model(mlp);
  hap_cluster *c = bundled("cpu-2");
  hap_plan *p = megatron(g, c);
  cr_expect_eq(p->replicas, 1);
  cr_expect_eq(p->group_size, 2);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(replica, megatron_refuses_unequal_hosts) {
  hap_graph *g = model(mlp);
  hap_cluster *c = hap_cluster_create("uneven");
  hap_link l = {1e-6, 1e9};
  hap_device d = {0};
  d.model = "x";
  d.sustained_flops[HAP_F32] = d.peak_flops[HAP_F32] = 1e12;
  d.memory_bytes = 1e10;
  d.memory_bw_Bps = 1e11;
  cr_assert_eq(hap_cluster_add_host(c, "a", l, l, NULL, NULL), HAP_OK);
  cr_assert_eq(hap_cluster_add_device(c, "a:0", &d, NULL, NULL), HAP_OK);
  cr_assert_eq(hap_cluster_add_device(c, "a:1", &d, NULL, NULL), HAP_OK);
  cr_assert_eq(hap_cluster_add_host(c, "b", l, l, NULL, NULL), HAP_OK);
  cr_assert_eq(hap_cluster_add_device(c, "b:0", &d, NULL, NULL), HAP_OK);
  hap_synth_options o = {.strategy = HAP_STRATEGY_MEGATRON_TP};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_EUNSUPPORTED);
  cr_expect(strstr(err.msg, "same number of devices") != NULL, "%s", err.msg);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* The plan as JSON (caller frees). */
static char *to_json(const hap_plan *p, const hap_graph *g, const hap_cluster *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  hap_err err = {0};
  cr_assert_eq(hap_plan_write(p, g, c, f, &err), HAP_OK, "%s", err.msg);
  fclose(f);
  return buf;
}

/* Read `json` with `from` replaced by `to`; returns the status, the message in err. */
static hap_status read_mutated(const char *json, const char *from, const char *to,
                               const hap_graph *g, const hap_cluster *c, hap_err *err) {
  const char *at = strstr(json, from);
  cr_assert_not_null(at, "'%s' not in the plan", from);
  size_t n = strlen(json) + strlen(to) + 1;
  char *m = malloc(n);
  snprintf(m, n, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
  hap_plan *p = NULL;
  *err = (hap_err){0};
  hap_status st = hap_plan_from_json(m, strlen(m), "m.json", g, c, &p, err);
  hap_plan_destroy(p);
  free(m);
  return st;
}

Test(replica, plan_json_round_trip_and_malformed_replicas) {
  static const double speed[4] = {1, 1, 1, 1};
  hap_graph *g = model(mlp);
  hap_cluster *c = two_per_host(2, speed);
  hap_plan *p = megatron(g, c);
  char *json = to_json(p, g, c);
  cr_expect(strstr(json, "\"replicas\": 2") != NULL, "%s", json);
  hap_plan *q = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_plan_from_json(json, strlen(json), "p.json", g, c, &q, &err), HAP_OK, "%s",
               err.msg);
  cr_expect_eq(q->replicas, 2);
  cr_expect_eq(q->group_size, 2);
  char *again = to_json(q, g, c);
  cr_expect_str_eq(again, json, "the round trip is byte-identical");
  free(again);
  hap_plan_destroy(q);
  cr_expect_eq(read_mutated(json, "\"replicas\": 2", "\"replicas\": 3", g, c, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "m.json: replicas") != NULL, "%s", err.msg);
  cr_expect_eq(read_mutated(json, "\"replicas\": 2", "\"replicas\": 0", g, c, &err), HAP_EPARSE);
  cr_expect(strstr(err.msg, "replicas") != NULL, "%s", err.msg);
  cr_expect_eq(read_mutated(json, "\"replicas\": 2", "\"replicas\": \"2\"", g, c, &err),
               HAP_EPARSE);
  /* without "replicas" the ratios have half the entries they need */
  cr_expect_eq(read_mutated(json, "\"replicas\": 2,", "", g, c, &err), HAP_EPARSE);
  cr_expect(strstr(err.msg, "segments[0].ratios") != NULL, "%s", err.msg);
  free(json);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

static double sim_time(const hap_plan_sim *ps, const char *task, int32_t dev) {
  for (int32_t t = 0; t < ps->n_tasks; t++)
    if (strcmp(ps->lw->tasks[t].name, task) == 0)
      return hap_plan_sim_duration(ps, t, dev);
  cr_assert_fail("no task %s", task);
  return 0;
}

Test(replica, simulator_prices_groups_on_their_links) {
  static const double speed[4] = {1, 1, 1, 1};
  hap_graph *g = model(mlp);
  hap_cluster *c = two_per_host(2, speed);
  hap_plan *p = megatron(g, c);
  hap_lowered *lw = lower(p, g);
  hap_plan_sim *ps = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_plan_sim_run(lw, c, NULL, &ps, &err), HAP_OK, "%s", err.msg);
  hap_group host, cross;
  cr_assert_eq(hap_group_init(c, (int32_t[]){2, 3}, 2, &host, NULL), HAP_OK);
  cr_assert_eq(hap_group_init(c, (int32_t[]){1, 3}, 2, &cross, NULL), HAP_OK);
  hap_group_share_nics(&cross, 2);
  for (int32_t t = 0; t < lw->n_tasks; t++) {
    const hap_task *k = &lw->tasks[t];
    if (k->kind != HAP_TASK_COLLECTIVE)
      continue;
    double bytes[4];
    cr_assert_eq(hap_lowered_coll_bytes(lw, t, bytes, &err), HAP_OK);
    const hap_group *grp = k->span == HAP_SPAN_GROUP ? &host : &cross;
    double want = hap_coll_time(
        grp, k->coll, k->impl,
        hap_coll_bytes_of(k->span == HAP_SPAN_GROUP ? bytes + 2 : (double[]){bytes[1], bytes[3]},
                          2));
    cr_expect_float_eq(sim_time(ps, k->name, 3), want, 1e-15, "%s", k->name);
  }
  hap_plan_sim_destroy(ps);
  hap_lowered_destroy(lw);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(replica, folding_stays_exact_when_sub_groups_differ) {
  /* host 1 has one slow device: devices 0, 1 and 2 price alike, but 2 waits for 3 in its host's
   * collectives, so folding 0, 1 and 2 together would be wrong */
  static const double speed[4] = {1, 1, 1, 0.25};
  hap_graph *g = model("mlp:layers=4,batch=32,seq=16,hidden=256");
  hap_cluster *c = two_per_host(2, speed);
  hap_plan *p = megatron(g, c);
  hap_lowered *lw = lower(p, g);
  hap_plan_sim *folded = NULL, *each = NULL;
  hap_err err = {0};
  hap_plan_sim_options no_fold = {.no_fold = true};
  cr_assert_eq(hap_plan_sim_run(lw, c, NULL, &folded, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_sim_run(lw, c, &no_fold, &each, &err), HAP_OK, "%s", err.msg);
  cr_expect_float_eq(folded->iteration_s, each->iteration_s, 1e-15);
  int32_t nt = lw->n_tasks, later = 0;
  for (int32_t d = 0; d < 4; d++)
    for (int32_t t = 0; t < nt; t++) {
      double f = folded->start_s[(size_t)folded->group[d] * (size_t)nt + (size_t)t];
      double e = each->start_s[(size_t)d * (size_t)nt + (size_t)t];
      cr_expect_float_eq(f, e, 1e-15, "%s on device %d", lw->tasks[t].name, d);
    }
  for (int32_t t = 0; t < nt; t++)
    later += each->start_s[2 * (size_t)nt + (size_t)t] > each->start_s[(size_t)t];
  cr_expect_gt(later, 0, "device 2 waits for its slow neighbour, device 0 does not");
  hap_plan_sim_destroy(folded);
  hap_plan_sim_destroy(each);
  /* all alike: folded into one simulated device */
  static const double same[4] = {1, 1, 1, 1};
  hap_cluster *c2 = two_per_host(2, same);
  hap_plan *p2 = megatron(g, c2);
  hap_lowered *lw2 = lower(p2, g);
  hap_plan_sim *ps2 = NULL;
  cr_assert_eq(hap_plan_sim_run(lw2, c2, NULL, &ps2, &err), HAP_OK, "%s", err.msg);
  cr_expect_eq(ps2->n_groups, 1);
  hap_plan_sim_destroy(ps2);
  hap_lowered_destroy(lw2);
  hap_plan_destroy(p2);
  hap_cluster_destroy(c2);
  hap_lowered_destroy(lw);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(replica, megatron_every_zoo_model_lowers_and_simulates) {
  static const char *const specs[] = {
      "bert-base:layers=2,batch=8,seq=16,width=64,heads=4,hidden=128,vocab=128",
      "vit:layers=2,batch=8,image=16,patch=4,width=64,heads=4,hidden=128,classes=10",
      "bert-moe:layers=2,batch=8,seq=16,width=64,heads=4,hidden=128,vocab=128,experts=4",
      "vgg19:batch=8",
      "gpt:layers=2,batch=8,seq=16,width=64,heads=4,vocab=128",
  };
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=2");
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    hap_graph *g = model(specs[i]);
    hap_plan *p = megatron(g, c);
    hap_lowered *lw = lower(p, g);
    int n_params = 0, n_rep = 0;
    for (int32_t t = 0; t < g->n_tensors; t++)
      n_params += g->tensors[t].kind == HAP_TENSOR_PARAMETER && g->tensors[t].requires_grad;
    for (int32_t t = 0; t < lw->n_tasks; t++)
      n_rep += lw->tasks[t].span == HAP_SPAN_REPLICAS && lw->tasks[t].kind == HAP_TASK_COLLECTIVE;
    cr_expect_eq(n_rep, n_params, "%s", specs[i]);
    hap_plan_sim *ps = NULL;
    hap_err err = {0};
    cr_assert_eq(hap_plan_sim_run(lw, c, NULL, &ps, &err), HAP_OK, "%s: %s", specs[i], err.msg);
    cr_expect(ps->iteration_s > 0 && isfinite(ps->iteration_s), "%s", specs[i]);
    hap_plan_sim_destroy(ps);
    hap_lowered_destroy(lw);
    hap_plan_destroy(p);
    hap_graph_destroy(g);
  }
  hap_cluster_destroy(c);
}
