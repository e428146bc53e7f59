/* Chakra execution traces (chakra/): a trace written and read back keeps every field hap uses;
 * every strict prefix of a written file is refused (truncated) and damaged bytes never crash; a
 * hand-made two-rank trace (compute, a send and its receive, an all-reduce) replays to the
 * iteration computed from the cost queries; compute scales by the recorded device's rate; a
 * plan's export replays to its simulated iteration; traces that do not fit together are refused
 * with the file and node named. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/fileio.h"
#include "chakra/et.h"
#include "chakra/export.h"
#include "chakra/replay.h"
#include "cluster/cost.h"
#include "simulate/plan_sim.h"
#include "synth/synth.h"
#include "test_util.h"

/* n devices of FLOP/s speed[i] * 1e12 on one host, links of link_Bps bytes/s and no latency. */
static hap_cluster *devices(int n, const double *speed, double link_Bps) {
  hap_cluster *c = hap_cluster_create("hand");
  hap_link link = {0, link_Bps};
  cr_assert_eq(hap_cluster_add_host(c, "h", link, link, NULL, NULL), HAP_OK);
  for (int i = 0; i < n; i++) {
    hap_device d = {0};
    d.model = speed[i] == speed[0] ? "fast" : "slow";
    d.sustained_flops[HAP_F32] = d.peak_flops[HAP_F32] = speed[i] * 1e12;
    d.memory_bytes = 1e12;
    d.memory_bw_Bps = 1e12;
    char name[8];
    snprintf(name, sizeof name, "h:%d", i);
    cr_assert_eq(hap_cluster_add_device(c, name, &d, NULL, NULL), HAP_OK);
  }
  cr_assert_eq(hap_cluster_validate(c, NULL), HAP_OK);
  return c;
}

static hap_et_node *node(hap_et_rank *r, int type, const char *name) {
  hap_et_node *n = hap_et_add_node(r);
  cr_assert_not_null(n);
  n->type = type;
  cr_assert_eq(hap_et_set_str(&n->name, name, NULL), HAP_OK);
  return n;
}

static void dep(hap_et_node *n, uint64_t on) {
  n->data_deps = realloc(n->data_deps, (size_t)(n->n_data_deps + 1) * sizeof *n->data_deps);
  cr_assert_not_null(n->data_deps);
  n->data_deps[n->n_data_deps++] = on;
}

/* Write ranks[0..n) to dir as hap.<rank>.et and load them back. */
static hap_chakra_set *save_load(const char *dir, hap_et_rank **ranks, int n, hap_err *err) {
  for (int r = 0; r < n; r++) {
    char path[512];
    cr_assert(hap_chakra_path(dir, "hap", r, path, sizeof path));
    cr_assert_eq(hap_et_write(path, ranks[r], NULL), HAP_OK);
  }
  hap_chakra_set *s = NULL;
  cr_assert_eq(hap_chakra_load(dir, "hap", &s, err), HAP_OK, "%s", err->msg);
  return s;
}

static void destroy_all(hap_et_rank **ranks, int n) {
  for (int r = 0; r < n; r++)
    hap_et_rank_destroy(ranks[r]);
}

Test(chakra, write_read_keeps_every_field) {
  char *dir = tmpdir_make("chakra_rw");
  hap_et_rank *r = hap_et_rank_create();
  r->rank = 0;
  r->world_size = 1;
  r->flops_per_s = 1.5e13;
  r->memory_Bps = 9e11;
  r->iteration_s = 0.25;
  cr_assert_eq(hap_et_set_str(&r->device, "v100-0:0", NULL), HAP_OK);
  cr_assert_eq(hap_et_set_str(&r->dtype, "float16", NULL), HAP_OK);
  hap_et_node *a = node(r, HAP_ET_COMP, "fc.fwd");
  a->duration_us = 12;
  a->exact_us = 12.25;
  a->num_ops = 1e9;
  a->tensor_size = 4096;
  hap_et_node *b = node(r, HAP_ET_COLL, "w.grad.all_reduce");
  dep(b, 0);
  b->ctrl_deps = malloc(sizeof *b->ctrl_deps);
  b->ctrl_deps[0] = 0;
  b->n_ctrl_deps = 1;
  b->comm_type = HAP_ET_ALL_REDUCE;
  b->comm_size = 1 << 20;
  b->pg_ranks = malloc(sizeof *b->pg_ranks);
  b->pg_ranks[0] = 0;
  b->n_pg_ranks = 1;
  b->repeats = 2;
  b->recompute_of = 0;
  cr_assert_eq(hap_et_set_str(&b->pg_name, "g", NULL), HAP_OK);
  cr_assert_eq(hap_et_set_str(&b->coll_impl, "ring", NULL), HAP_OK);
  hap_et_node *c = node(r, HAP_ET_SEND, "x.send");
  c->comm_dst = 3;
  c->comm_tag = 9;
  char *path = path_in(dir, "t.et");
  hap_err err = {0};
  cr_assert_eq(hap_et_write(path, r, &err), HAP_OK, "%s", err.msg);
  hap_et_rank *q = NULL;
  cr_assert_eq(hap_et_read(path, &q, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(q->version, HAP_ET_VERSION);
  cr_assert_eq(q->rank, 0);
  cr_assert_eq(q->world_size, 1);
  cr_assert_eq(q->node_count, 3);
  cr_assert_eq(q->flops_per_s, 1.5e13);
  cr_assert_eq(q->memory_Bps, 9e11);
  cr_assert_eq(q->iteration_s, 0.25);
  cr_assert_str_eq(q->device, "v100-0:0");
  cr_assert_str_eq(q->dtype, "float16");
  cr_assert_eq(q->n_nodes, 3);
  cr_assert_str_eq(q->nodes[0].name, "fc.fwd");
  cr_assert_eq(q->nodes[0].type, HAP_ET_COMP);
  cr_assert_eq(q->nodes[0].duration_us, 12);
  cr_assert_eq(q->nodes[0].exact_us, 12.25);
  cr_assert_eq(q->nodes[0].num_ops, 1e9);
  cr_assert_eq(q->nodes[0].tensor_size, 4096);
  const hap_et_node *qb = &q->nodes[1];
  cr_assert_eq(qb->id, 1);
  cr_assert_eq(qb->type, HAP_ET_COLL);
  cr_assert_eq(qb->n_data_deps, 1);
  cr_assert_eq(qb->data_deps[0], 0);
  cr_assert_eq(qb->n_ctrl_deps, 1);
  cr_assert_eq(qb->comm_type, HAP_ET_ALL_REDUCE);
  cr_assert_eq(qb->comm_size, 1 << 20);
  cr_assert_eq(qb->n_pg_ranks, 1);
  cr_assert_eq(qb->repeats, 2);
  cr_assert_eq(qb->recompute_of, 0);
  cr_assert_str_eq(qb->pg_name, "g");
  cr_assert_str_eq(qb->coll_impl, "ring");
  cr_assert_eq(q->nodes[2].comm_dst, 3);
  cr_assert_eq(q->nodes[2].comm_tag, 9);
  cr_assert_eq(q->nodes[2].comm_src, -1);

  /* every strict prefix is refused; damaged bytes are refused or read, never a crash */
  char *data = NULL;
  size_t len = 0;
  cr_assert_eq(hap_read_file(path, &data, &len, NULL), HAP_OK);
  for (size_t k = 0; k < len; k++) {
    hap_et_rank *t = NULL;
    hap_err e = {0};
    cr_assert_neq(hap_et_parse("p.et", (const uint8_t *)data, k, &t, &e), HAP_OK, "prefix %zu", k);
    cr_assert_null(t);
    cr_assert(strncmp(e.msg, "p.et: ", 6) == 0, "%s", e.msg);
  }
  for (size_t k = 0; k < len; k++) {
    char saved = data[k];
    data[k] = (char)(data[k] ^ 0x5a);
    hap_et_rank *t = NULL;
    if (hap_et_parse("p.et", (const uint8_t *)data, len, &t, NULL) == HAP_OK)
      hap_et_rank_destroy(t);
    data[k] = saved;
  }
  free(data);
  free(path);
  hap_et_rank_destroy(q);
  hap_et_rank_destroy(r);
  rm_tree(dir);
}

/* rank 0: compute (1e12 FLOP), then sends 1e9 bytes to rank 1; rank 1: receives, then computes
 * (1e12 FLOP); then both all-reduce 1e6 bytes. */
static void two_ranks(hap_et_rank **ranks) {
  for (int r = 0; r < 2; r++) {
    ranks[r] = hap_et_rank_create();
    ranks[r]->rank = r;
    ranks[r]->world_size = 2;
  }
  hap_et_node *n = node(ranks[0], HAP_ET_COMP, "a");
  n->num_ops = 1e12;
  n->duration_us = 777; /* no recorded rate: FLOPs / the device's rate decide */
  n = node(ranks[0], HAP_ET_SEND, "send");
  n->comm_dst = 1;
  n->comm_tag = 7;
  n->comm_size = 1e9;
  dep(n, 0);
  n = node(ranks[1], HAP_ET_RECV, "recv");
  n->comm_src = 0;
  n->comm_tag = 7;
  n = node(ranks[1], HAP_ET_COMP, "b");
  n->num_ops = 1e12;
  dep(n, 0);
  for (int r = 0; r < 2; r++) {
    n = node(ranks[r], HAP_ET_COLL, "ar");
    n->comm_type = HAP_ET_ALL_REDUCE;
    n->comm_size = 1e6;
    dep(n, 1);
  }
}

Test(chakra, hand_replay_matches_the_cost_queries) {
  char *dir = tmpdir_make("chakra_hand");
  double speed[2] = {1, 2};
  hap_cluster *c = devices(2, speed, 1e9);
  hap_et_rank *ranks[2];
  two_ranks(ranks);
  hap_err err = {0};
  hap_chakra_set *s = save_load(dir, ranks, 2, &err);
  hap_chakra_replay_result res;
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_OK, "%s", err.msg);
  int32_t both[2] = {0, 1};
  hap_group g;
  cr_assert_eq(hap_group_init(c, both, 2, &g, NULL), HAP_OK);
  double ar = hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, hap_coll_bytes_uniform(1e6, 2));
  double p2p = hap_p2p_time(c, 0, 1, 1e9);
  double want = 1.0 + p2p + 0.5 + ar; /* 1e12 FLOP at 1e12 FLOP/s, then at 2e12 */
  cr_assert(fabs(res.iteration_s - want) <= 1e-12 * want, "%.12g vs %.12g", res.iteration_s, want);
  cr_assert_eq(res.collectives, 1);
  cr_assert_eq(res.messages, 1);
  cr_assert_eq(res.nodes, 6);
  free(res.ranks);
  hap_chakra_set_destroy(s);

  /* the receive that never comes: refused naming the sender's file and node */
  ranks[1]->nodes[0].comm_tag = 8;
  s = save_load(dir, ranks, 2, &err);
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "hap.0.et: node id 1 ('send')") != NULL, "%s", err.msg);
  cr_assert(strstr(err.msg, "never receives") != NULL, "%s", err.msg);
  hap_chakra_set_destroy(s);
  ranks[1]->nodes[0].comm_tag = 7;

  /* different collectives at the same place */
  ranks[1]->nodes[2].comm_type = HAP_ET_ALL_GATHER;
  err = (hap_err){0};
  s = save_load(dir, ranks, 2, &err);
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "hap.1.et: node id 2 ('ar'): ALL_GATHER") != NULL, "%s", err.msg);
  hap_chakra_set_destroy(s);
  ranks[1]->nodes[2].comm_type = HAP_ET_ALL_REDUCE;

  /* a dependency on a node the trace does not have */
  dep(&ranks[1]->nodes[1], 42);
  err = (hap_err){0};
  s = save_load(dir, ranks, 2, &err);
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_EPARSE);
  cr_assert(strstr(err.msg, "hap.1.et: node id 1 ('b'): data_deps names node 42") != NULL, "%s",
            err.msg);
  hap_chakra_set_destroy(s);
  ranks[1]->nodes[1].n_data_deps--;

  /* two nodes with one id */
  ranks[0]->nodes[1].id = 0;
  err = (hap_err){0};
  s = save_load(dir, ranks, 2, &err);
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_EPARSE);
  cr_assert(strstr(err.msg, "hap.0.et: node id 0") != NULL, "%s", err.msg);
  cr_assert(strstr(err.msg, "a second node with this id") != NULL, "%s", err.msg);
  hap_chakra_set_destroy(s);
  ranks[0]->nodes[1].id = 1;

  /* a collective only one member issues */
  hap_et_node *extra = node(ranks[0], HAP_ET_COLL, "ar2");
  extra->comm_type = HAP_ET_ALL_REDUCE;
  extra->comm_size = 8;
  err = (hap_err){0};
  s = save_load(dir, ranks, 2, &err);
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "hap.1.et: 1 collectives of process group ''") != NULL, "%s", err.msg);
  hap_chakra_set_destroy(s);

  /* more ranks than devices */
  destroy_all(ranks, 2);
  two_ranks(ranks);
  hap_cluster *one = devices(1, speed, 1e9);
  err = (hap_err){0};
  s = save_load(dir, ranks, 2, &err);
  cr_assert_eq(hap_chakra_replay(s, one, &res, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "the traces have 2 ranks") != NULL, "%s", err.msg);
  hap_chakra_set_destroy(s);
  hap_cluster_destroy(one);

  destroy_all(ranks, 2);
  hap_cluster_destroy(c);
  rm_tree(dir);
}

Test(chakra, compute_scales_by_the_recorded_rate) {
  char *dir = tmpdir_make("chakra_scale");
  double speed[1] = {1};
  hap_cluster *c = devices(1, speed, 1e9);
  hap_et_rank *r = hap_et_rank_create();
  r->flops_per_s = 4e12; /* recorded on a device 4x as fast */
  r->memory_Bps = 2e12;  /* with twice the memory bandwidth */
  hap_et_node *a = node(r, HAP_ET_COMP, "gemm");
  a->num_ops = 1; /* FLOPs given: the rates' ratio */
  a->duration_us = 1000;
  hap_et_node *b = node(r, HAP_ET_COMP, "copy");
  b->exact_us = 500; /* no FLOPs: the memory bandwidths' ratio */
  b->duration_us = 499;
  dep(b, 0);
  hap_err err = {0};
  hap_chakra_set *s = save_load(dir, &r, 1, &err);
  hap_chakra_replay_result res;
  cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_OK, "%s", err.msg);
  cr_assert_float_eq(res.iteration_s, 4e-3 + 1e-3, 1e-15);
  free(res.ranks);
  hap_chakra_set_destroy(s);
  hap_et_rank_destroy(r);
  hap_cluster_destroy(c);
  rm_tree(dir);
}

Test(chakra, plan_export_replays_to_its_iteration) {
  char *dir = tmpdir_make("chakra_plan");
  hap_graph *g = model("mlp:layers=3,batch=32,seq=8,hidden=64");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=2");
  for (int st = 0; st < HAP_STRATEGY_COUNT; st++) {
    hap_synth_options o = {.strategy = (hap_strategy)st};
    hap_plan *p = NULL;
    hap_lowered *lw = NULL;
    hap_plan_sim *ps = NULL;
    hap_err err = {0};
    cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(hap_lower(p, g, &lw, &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(hap_plan_sim_run(lw, c, NULL, &ps, &err), HAP_OK, "%s", err.msg);
    int64_t nodes = 0;
    cr_assert_eq(hap_chakra_export(ps, dir, "hap", &nodes, &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(nodes, (int64_t)lw->n_tasks * c->n_devices);
    hap_chakra_set *s = NULL;
    cr_assert_eq(hap_chakra_load(dir, "hap", &s, &err), HAP_OK, "%s", err.msg);
    hap_chakra_replay_result res;
    cr_assert_eq(hap_chakra_replay(s, c, &res, &err), HAP_OK, "%s", err.msg);
    cr_assert(fabs(res.iteration_s - ps->iteration_s) <= 1e-9 * ps->iteration_s,
              "%s: %.12g replayed, %.12g simulated", hap_strategy_name((hap_strategy)st),
              res.iteration_s, ps->iteration_s);
    free(res.ranks);
    hap_chakra_set_destroy(s);
    hap_plan_sim_destroy(ps);
    hap_lowered_destroy(lw);
    hap_plan_destroy(p);
  }
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  rm_tree(dir);
}
