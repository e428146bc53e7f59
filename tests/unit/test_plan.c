/* test_plan.c — the plan data model, hap-plan files, digests and the property-flow validation.
 * Plans are built by hand for the zoo's mlp (2 layers, batch 8, seq 4, hidden 16) on cpu-2:
 * data parallel, column parallel with an all_gather, and three segments joined by all_to_alls. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "model/zoo.h"
#include "plan/plan.h"
#include "plan/plan_io.h"

#define MLP     "mlp:layers=2,batch=8,seq=4,hidden=16"
#define MLP_SEG "mlp:layers=2,batch=8,seq=4,hidden=16,segments=1"
#define BAD_DIR HAP_TEST_DATA "/plans/bad"

/* ---- building blocks ------------------------------------------------------------------------ */

static hap_graph *graph(const char *spec) {
  hap_graph *g;
  hap_err err = {0};
  cr_assert_eq(hap_zoo_build(spec, &g, &err), HAP_OK, "%s: %s", spec, err.msg);
  return g;
}

static hap_cluster *cluster(const char *spec) {
  hap_cluster *c;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_load(spec, &c, &err), HAP_OK, "%s: %s", spec, err.msg);
  return c;
}

static hap_layout layout(const char *s) {
  hap_layout l;
  cr_assert_eq(hap_layout_parse(s, &l), HAP_OK, "layout %s", s);
  return l;
}

static int32_t tensor_id(const hap_graph *g, const char *name) {
  int32_t t = hap_graph_find_tensor(g, name);
  cr_assert(t >= 0, "no tensor %s", name);
  return t;
}

/* The offered variant of `node` whose first input and first output have these layouts. */
static hap_variant pick(const hap_graph *g, int32_t node, const char *in0, const char *out0) {
  hap_op_io io;
  hap_graph_node_io(g, node, &io);
  hap_variant v[HAP_MAX_VARIANTS];
  int n = hap_op_variants(g->nodes[node].op, &io, v, HAP_MAX_VARIANTS);
  for (int i = 0; i < n; i++)
    if (v[i].in[0] == layout(in0) && v[i].out[0] == layout(out0))
      return v[i];
  cr_assert_fail("node %s offers no variant %s -> %s", g->nodes[node].name, in0, out0);
  return v[0];
}

/* An empty plan for g on c with the given ratios ([n_segments][n_devices]). */
static hap_plan *new_plan(const hap_graph *g, const hap_cluster *c, const double *ratios) {
  uint64_t gd, cd;
  hap_err err = {0};
  cr_assert_eq(hap_graph_digest(g, &gd, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_cluster_digest(c, &cd, &err), HAP_OK, "%s", err.msg);
  hap_plan *p = hap_plan_create("hap", g->name, gd, c->name, cd, c->n_devices, g->n_segments);
  cr_assert_not_null(p);
  memcpy(p->ratios, ratios, (size_t)g->n_segments * (size_t)c->n_devices * sizeof *ratios);
  p->predicted_iteration_s = 0.125;
  for (int32_t i = 0; i < c->n_devices; i++) {
    p->device_compute_s[i] = 0.0625 * (i + 1);
    p->device_comm_s[i] = 1e-3 / (i + 1);
    p->device_memory_bytes[i] = 65536.0 + i;
  }
  return p;
}

static void add(hap_plan *p, const hap_step *s) {
  hap_err err = {0};
  cr_assert_eq(hap_plan_add_step(p, s, &err), HAP_OK, "%s", err.msg);
}

static void source(hap_plan *p, const hap_graph *g, const char *t, hap_storage storage,
                   const char *to, int32_t segment) {
  hap_step s = {.kind = HAP_STEP_SOURCE,
                .tensor = tensor_id(g, t),
                .node = -1,
                .storage = storage,
                .to = layout(to),
                .segment = segment,
                .from_segment = segment,
                .granule = 1,
                .predicted_s = storage == HAP_STORE_REPLICATED ? 1.2e-3 : 0};
  add(p, &s);
}

static void compute(hap_plan *p, const hap_graph *g, const char *node, const char *in0,
                    const char *out0) {
  int32_t n = hap_graph_find_node(g, node);
  cr_assert(n >= 0, "no node %s", node);
  hap_step s = {.kind = HAP_STEP_COMPUTE,
                .node = n,
                .tensor = -1,
                .variant = pick(g, n, in0, out0),
                .segment = g->nodes[n].segment,
                .from_segment = g->nodes[n].segment,
                .predicted_s = 4.1e-3};
  add(p, &s);
}

static void comm(hap_plan *p, const hap_graph *g, const char *t, hap_comm_op op, const char *from,
                 const char *to, int32_t from_segment, int32_t segment, hap_coll_impl impl) {
  hap_step s = {.kind = HAP_STEP_COMM,
                .tensor = tensor_id(g, t),
                .node = -1,
                .comm = op,
                .from = layout(from),
                .to = layout(to),
                .impl = impl,
                .segment = segment,
                .from_segment = from_segment,
                .granule = 1,
                .predicted_s = 2e-4};
  add(p, &s);
}

/* x as G0, parameters replicated, every node data parallel, the loss as R:
 *   0 x  1 w0  2 b0  3 linear0  4 sigmoid0  5 w1  6 b1  7 linear1  8 sigmoid1  9 loss */
static hap_plan *dp_plan(const hap_graph *g, const hap_cluster *c) {
  hap_plan *p = new_plan(g, c, (double[]){0.625, 0.375});
  source(p, g, "x", HAP_STORE_INPUT, "G0", 0);
  for (int l = 0; l < 2; l++) {
    char w[64], b[64], lin[64], sig[64];
    snprintf(w, sizeof w, "layers.%d.linear.weight", l);
    snprintf(b, sizeof b, "layers.%d.linear.bias", l);
    snprintf(lin, sizeof lin, "layers.%d.linear", l);
    snprintf(sig, sizeof sig, "layers.%d.sigmoid", l);
    source(p, g, w, HAP_STORE_REPLICATED, "I", 0);
    source(p, g, b, HAP_STORE_REPLICATED, "I", 0);
    compute(p, g, lin, "G0", "G0");
    compute(p, g, sig, "G0", "G0");
  }
  compute(p, g, "loss", "G0", "R");
  return p;
}

/* Layer 0 column parallel, its output all-gathered, layer 1 replicated, then sliced for a
 * partial-sum loss that is all-reduced:
 *   0 x  1 w0  2 b0  3 linear0  4 sigmoid0  5 all_gather  6 w1  7 b1  8 linear1  9 sigmoid1
 *   10 slice  11 loss  12 all_reduce */
static hap_plan *cp_plan(const hap_graph *g, const hap_cluster *c) {
  hap_plan *p = new_plan(g, c, (double[]){0.75, 0.25});
  p->strategy[0] = 'H'; /* any printable strategy name */
  source(p, g, "x", HAP_STORE_INPUT, "I", 0);
  source(p, g, "layers.0.linear.weight", HAP_STORE_SHARDED, "G0", 0);
  source(p, g, "layers.0.linear.bias", HAP_STORE_SHARDED, "G0", 0);
  compute(p, g, "layers.0.linear", "I", "G2");
  compute(p, g, "layers.0.sigmoid", "G2", "G2");
  comm(p, g, "layers.0.sigmoid", HAP_COMM_ALL_GATHER, "G2", "I", 0, 0, HAP_IMPL_GROUPED);
  source(p, g, "layers.1.linear.weight", HAP_STORE_ZERO, "I", 0);
  source(p, g, "layers.1.linear.bias", HAP_STORE_REPLICATED, "I", 0);
  compute(p, g, "layers.1.linear", "I", "I");
  compute(p, g, "layers.1.sigmoid", "I", "I");
  comm(p, g, "layers.1.sigmoid", HAP_COMM_SLICE, "I", "G1", 0, 0, HAP_IMPL_AUTO);
  compute(p, g, "loss", "G1", "R");
  comm(p, g, "loss", HAP_COMM_ALL_REDUCE, "R", "I", 0, 0, HAP_IMPL_RING);
  return p;
}

/* Three segments (layer 0, layer 1, loss) with their own ratios, re-sharded by all_to_alls:
 *   0 x  1 w0  2 b0  3 linear0  4 sigmoid0  5 all_to_all seg 0 -> 1  6 w1  7 b1  8 linear1
 *   9 sigmoid1  10 all_to_all G0 seg 1 -> G1 seg 2  11 loss */
static hap_plan *seg_plan(const hap_graph *g, const hap_cluster *c) {
  cr_assert_eq(g->n_segments, 3);
  hap_plan *p = new_plan(g, c, (double[]){0.75, 0.25, 0.5, 0.5, 0.25, 0.75});
  source(p, g, "x", HAP_STORE_INPUT, "G0", 0);
  source(p, g, "layers.0.linear.weight", HAP_STORE_REPLICATED, "I", 0);
  source(p, g, "layers.0.linear.bias", HAP_STORE_REPLICATED, "I", 0);
  compute(p, g, "layers.0.linear", "G0", "G0");
  compute(p, g, "layers.0.sigmoid", "G0", "G0");
  comm(p, g, "layers.0.sigmoid", HAP_COMM_ALL_TO_ALL, "G0", "G0", 0, 1, HAP_IMPL_PAIRWISE);
  source(p, g, "layers.1.linear.weight", HAP_STORE_REPLICATED, "I", 1);
  source(p, g, "layers.1.linear.bias", HAP_STORE_REPLICATED, "I", 1);
  compute(p, g, "layers.1.linear", "G0", "G0");
  compute(p, g, "layers.1.sigmoid", "G0", "G0");
  comm(p, g, "layers.1.sigmoid", HAP_COMM_ALL_TO_ALL, "G0", "G1", 1, 2, HAP_IMPL_PAIRWISE);
  compute(p, g, "loss", "G1", "R");
  return p;
}

typedef struct fixture {
  hap_graph *g;
  hap_cluster *c;
  hap_plan *p;
} fixture;

static fixture make(const char *spec, hap_plan *(*build)(const hap_graph *, const hap_cluster *)) {
  fixture f = {.g = graph(spec), .c = cluster("cpu-2")};
  f.p = build(f.g, f.c);
  return f;
}

static void done(fixture *f) {
  hap_plan_destroy(f->p);
  hap_cluster_destroy(f->c);
  hap_graph_destroy(f->g);
}

static char *to_json(const fixture *f) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cr_assert_not_null(out);
  hap_err err = {0};
  cr_assert_eq(hap_plan_write(f->p, f->g, f->c, out, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(fclose(out), 0);
  return buf;
}

/* `text` with the first `from` replaced by `to` (which must occur). */
static char *replace(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  cr_assert_not_null(at, "'%s' not in the plan text", from);
  size_t head = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  cr_assert_not_null(out);
  snprintf(out, n, "%.*s%s%s", (int)head, text, to, at + strlen(from));
  return out;
}

/* hap_plan_validate fails with `st` and a message containing each of the NULL-ended texts. */
static void expect_invalid(const fixture *f, hap_status st, const char *const *texts) {
  hap_err err = {0};
  cr_assert_eq(hap_plan_validate(f->p, f->g, f->c, &err), st, "status %d: %s", err.status, err.msg);
  cr_assert_eq(strchr(err.msg, '\n'), NULL, "one line: %s", err.msg);
  for (int i = 0; texts[i]; i++)
    cr_assert_not_null(strstr(err.msg, texts[i]), "'%s' not in: %s", texts[i], err.msg);
}

/* Reading `text` as plan.json fails with `st` and a one-line message containing the texts. */
static void expect_unreadable(const fixture *f, const char *text, hap_status st,
                              const char *const *texts) {
  hap_plan *p = (hap_plan *)1;
  hap_err err = {0};
  cr_assert_eq(hap_plan_from_json(text, strlen(text), "plan.json", f->g, f->c, &p, &err), st,
               "status %d: %s", err.status, err.msg);
  cr_assert_null(p);
  cr_assert_eq(strncmp(err.msg, "plan.json: ", 11), 0, "names the file: %s", err.msg);
  cr_assert_eq(strchr(err.msg, '\n'), NULL, "one line: %s", err.msg);
  for (int i = 0; texts[i]; i++)
    cr_assert_not_null(strstr(err.msg, texts[i]), "'%s' not in: %s", texts[i], err.msg);
}

/* Write the fixture's plan, apply one textual mutation and expect the reader to refuse it. */
static void mutate_unreadable(const fixture *f, const char *from, const char *to, hap_status st,
                              const char *const *texts) {
  char *good = to_json(f);
  char *bad = replace(good, from, to);
  expect_unreadable(f, bad, st, texts);
  free(bad);
  free(good);
}

#define TEXTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void assert_plans_equal(const hap_plan *a, const hap_plan *b, const hap_graph *g) {
  cr_assert_str_eq(a->strategy, b->strategy);
  cr_assert_str_eq(a->graph_name, b->graph_name);
  cr_assert_str_eq(a->cluster_name, b->cluster_name);
  cr_assert_eq(a->graph_digest, b->graph_digest);
  cr_assert_eq(a->cluster_digest, b->cluster_digest);
  cr_assert_eq(a->n_devices, b->n_devices);
  cr_assert_eq(a->n_segments, b->n_segments);
  for (int32_t i = 0; i < a->n_devices * a->n_segments; i++)
    cr_assert_eq(a->ratios[i], b->ratios[i], "ratio %d", i);
  cr_assert_eq(a->predicted_iteration_s, b->predicted_iteration_s);
  cr_assert(hap_policy_equal(&a->policy, &b->policy));
  cr_assert_eq(a->memory_recorded, b->memory_recorded);
  for (int32_t i = 0; i < a->n_devices && a->memory_recorded; i++)
    for (int k = 0; k < HAP_MEMORY_PARTS; k++)
      cr_assert_eq(hap_memory_part_get(&a->device_memory[i], k),
                   hap_memory_part_get(&b->device_memory[i], k), "device %d %s", i,
                   hap_memory_part_name(k));
  for (int32_t i = 0; i < a->n_devices && a->memory_recorded; i++)
    cr_assert_eq(a->device_memory[i].recompute_working, b->device_memory[i].recompute_working,
                 "device %d recompute_working", i);
  for (int32_t i = 0; i < a->n_devices; i++) {
    cr_assert_eq(a->device_compute_s[i], b->device_compute_s[i]);
    cr_assert_eq(a->device_comm_s[i], b->device_comm_s[i]);
    cr_assert_eq(a->device_memory_bytes[i], b->device_memory_bytes[i]);
  }
  cr_assert_eq(a->n_steps, b->n_steps);
  for (int32_t k = 0; k < a->n_steps; k++) {
    const hap_step *x = &a->steps[k], *y = &b->steps[k];
    cr_assert_eq(x->kind, y->kind, "steps[%d]", k);
    cr_assert_eq(x->segment, y->segment, "steps[%d]", k);
    cr_assert_eq(x->predicted_s, y->predicted_s, "steps[%d]", k);
    if (x->kind == HAP_STEP_COMPUTE) {
      const hap_node *n = &g->nodes[x->node];
      cr_assert_eq(x->node, y->node, "steps[%d]", k);
      for (int i = 0; i < n->n_inputs; i++)
        cr_assert_eq(x->variant.in[i], y->variant.in[i], "steps[%d] in %d", k, i);
      for (int o = 0; o < n->n_outputs; o++)
        cr_assert_eq(x->variant.out[o], y->variant.out[o], "steps[%d] out %d", k, o);
      cr_assert_eq(x->variant.granule, y->variant.granule);
      cr_assert_eq(x->variant.flags, y->variant.flags);
      cr_assert_eq(x->variant.once, y->variant.once);
      cr_assert_str_eq(x->variant.name, y->variant.name);
    } else {
      cr_assert_eq(x->tensor, y->tensor, "steps[%d]", k);
      cr_assert_eq(x->to, y->to, "steps[%d]", k);
      cr_assert_eq(x->granule, y->granule, "steps[%d]", k);
    }
    if (x->kind == HAP_STEP_SOURCE)
      cr_assert_eq(x->storage, y->storage, "steps[%d]", k);
    if (x->kind == HAP_STEP_COMM) {
      cr_assert_eq(x->comm, y->comm, "steps[%d]", k);
      cr_assert_eq(x->from, y->from, "steps[%d]", k);
      cr_assert_eq(x->impl, y->impl, "steps[%d]", k);
      cr_assert_eq(x->from_segment, y->from_segment, "steps[%d]", k);
    }
  }
}

/* write -> read -> equal field by field -> write again, byte-identical. */
static void round_trip(const char *spec,
                       hap_plan *(*build)(const hap_graph *, const hap_cluster *)) {
  fixture f = make(spec, build);
  hap_err err = {0};
  cr_assert_eq(hap_plan_validate(f.p, f.g, f.c, &err), HAP_OK, "%s", err.msg);
  char *first = to_json(&f);
  hap_plan *back;
  cr_assert_eq(hap_plan_from_json(first, strlen(first), "plan.json", f.g, f.c, &back, &err), HAP_OK,
               "%s\n%s", err.msg, first);
  assert_plans_equal(f.p, back, f.g);
  fixture f2 = {.g = f.g, .c = f.c, .p = back};
  char *second = to_json(&f2);
  cr_assert_str_eq(first, second);
  free(first);
  free(second);
  hap_plan_destroy(back);
  done(&f);
}

/* ---- names ---------------------------------------------------------------------------------- */

Test(plan, layout_names) {
  char b[4];
  static const char *const names[] = {"I", "R", "G0", "G3", "G7"};
  for (int i = 0; i < 5; i++) {
    hap_layout l;
    cr_assert_eq(hap_layout_parse(names[i], &l), HAP_OK);
    cr_assert_str_eq(hap_layout_name(l, b), names[i]);
  }
  static const char *const bad[] = {"", "G", "G8", "G10", "g0", "I0", "Gx", "RR", "-1"};
  for (int i = 0; i < 9; i++) {
    hap_layout l = 5;
    cr_assert_eq(hap_layout_parse(bad[i], &l), HAP_ENOTFOUND, "%s", bad[i]);
    cr_assert_eq(l, 5);
  }
  cr_assert_str_eq(hap_layout_name(8, b), "?");
  cr_assert_str_eq(hap_layout_name(-3, b), "?");
}

Test(plan, enum_names_round_trip) {
  for (int k = 0; k < HAP_STEP_KIND_COUNT; k++) {
    hap_step_kind x;
    cr_assert_eq(hap_step_kind_parse(hap_step_kind_name((hap_step_kind)k), &x), HAP_OK);
    cr_assert_eq((int)x, k);
  }
  for (int k = 0; k < HAP_COMM_OP_COUNT; k++) {
    hap_comm_op x;
    cr_assert_eq(hap_comm_op_parse(hap_comm_op_name((hap_comm_op)k), &x), HAP_OK);
    cr_assert_eq((int)x, k);
  }
  for (int k = 0; k < HAP_STORAGE_COUNT; k++) {
    hap_storage x;
    cr_assert_eq(hap_storage_parse(hap_storage_name((hap_storage)k), &x), HAP_OK);
    cr_assert_eq((int)x, k);
  }
  cr_assert_str_eq(hap_comm_op_name(HAP_COMM_KEEP_ONCE), "keep_once");
  cr_assert_str_eq(hap_storage_name(HAP_STORE_ZERO), "zero");
  cr_assert_str_eq(hap_step_kind_name(HAP_STEP_KIND_COUNT), "?");
  hap_comm_op op;
  cr_assert_eq(hap_comm_op_parse("allgather", &op), HAP_ENOTFOUND);
  hap_storage st;
  cr_assert_eq(hap_storage_parse("", &st), HAP_ENOTFOUND);
}

Test(plan, create_defaults) {
  hap_plan *p = hap_plan_create(NULL, "g", 1, "c", 2, 4, 2);
  cr_assert_not_null(p);
  cr_assert_str_eq(p->strategy, "");
  for (int i = 0; i < 8; i++)
    cr_assert_eq(p->ratios[i], 0.25);
  cr_assert_eq(p->device_memory_bytes[3], 0);
  cr_assert_eq(p->n_steps, 0);
  hap_step s = {.kind = HAP_STEP_SOURCE};
  hap_err err = {0};
  for (int k = 0; k < 200; k++) {
    s.tensor = k;
    cr_assert_eq(hap_plan_add_step(p, &s, &err), HAP_OK);
  }
  cr_assert_eq(p->n_steps, 200);
  cr_assert_eq(p->steps[199].tensor, 199);
  hap_plan_destroy(p);
  cr_assert_null(hap_plan_create("hap", "g", 1, "c", 2, 0, 1));
  cr_assert_null(hap_plan_create("hap", "g", 1, "c", 2, 2, 0));
  hap_plan_destroy(NULL);
}

/* ---- digests -------------------------------------------------------------------------------- */

static uint64_t gdigest(const hap_graph *g) {
  uint64_t d;
  hap_err err = {0};
  cr_assert_eq(hap_graph_digest(g, &d, &err), HAP_OK, "%s", err.msg);
  return d;
}

static uint64_t cdigest(const hap_cluster *c) {
  uint64_t d;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_digest(c, &d, &err), HAP_OK, "%s", err.msg);
  return d;
}

/* x [4, 8] * w -> dropout(p) -> sum: a graph whose one float attribute the tests vary. */
static hap_graph *dropout_graph(double p) {
  hap_graph *g = hap_graph_create("drop");
  hap_err err = {0};
  hap_shape s = {.rank = 2, .dims = {4, 8}};
  int32_t x, w, y, z, loss;
  cr_assert_eq(hap_graph_add_tensor(g, "x", HAP_TENSOR_INPUT, HAP_F32, &s, &x, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(g, "w", HAP_TENSOR_PARAMETER, HAP_F32, &s, &w, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "mul", HAP_OP_MUL, (int32_t[]){x, w}, 2, NULL, NULL, &y, &err),
               HAP_OK, "%s", err.msg);
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_DROPOUT);
  cr_assert_eq(hap_attrs_set_float(&a, HAP_OP_DROPOUT, "p", p, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "drop", HAP_OP_DROPOUT, &y, 1, &a, NULL, &z, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "loss", HAP_OP_SUM, &z, 1, NULL, NULL, &loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
  return g;
}

Test(plan, graph_digest_stable_and_sensitive) {
  hap_graph *a = graph(MLP), *b = graph(MLP),
            *wider = graph("mlp:layers=2,batch=8,seq=4,hidden=17");
  hap_graph *d1 = dropout_graph(0.1), *d1b = dropout_graph(0.1), *d2 = dropout_graph(0.2);
  /* two graphs built apart: the digest depends on the content alone */
  cr_assert_eq(gdigest(a), gdigest(b));
  cr_assert_neq(gdigest(a), gdigest(wider));
  cr_assert_eq(gdigest(d1), gdigest(d1b));
  cr_assert_neq(gdigest(d1), gdigest(d2));
  /* how the graph was made is not part of it */
  uint64_t before = gdigest(a);
  cr_assert_eq(hap_graph_set_source(a, "somewhere else"), HAP_OK);
  cr_assert_eq(gdigest(a), before);
  /* a graph read back from its file is the same graph */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  hap_err err = {0};
  cr_assert_eq(hap_graph_write(b, f, &err), HAP_OK);
  cr_assert_eq(fclose(f), 0);
  hap_graph *back;
  cr_assert_eq(hap_graph_from_json(buf, len, "g.json", &back, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(gdigest(back), before);
  free(buf);
  hap_graph_destroy(back);
  hap_graph_destroy(a);
  hap_graph_destroy(b);
  hap_graph_destroy(wider);
  hap_graph_destroy(d1);
  hap_graph_destroy(d1b);
  hap_graph_destroy(d2);
}

Test(plan, cluster_digest_stable_and_sensitive) {
  hap_cluster *a = cluster("cpu-2"), *b = cluster("cpu-2");
  hap_cluster *file = cluster(HAP_TEST_DATA "/../../datasets/clusters/cpu-2.json");
  hap_cluster *faster = cluster("cpu-2:intra_gbps=80");
  cr_assert_eq(cdigest(a), cdigest(b));
  cr_assert_eq(cdigest(a), cdigest(file), "the spec and the file are one cluster");
  cr_assert_neq(cdigest(a), cdigest(faster));
  hap_cluster_destroy(a);
  hap_cluster_destroy(b);
  hap_cluster_destroy(file);
  hap_cluster_destroy(faster);
}

/* ---- valid plans ---------------------------------------------------------------------------- */

Test(plan, valid_plans_validate) {
  hap_plan *(*builds[3])(const hap_graph *, const hap_cluster *) = {dp_plan, cp_plan, seg_plan};
  const char *specs[3] = {MLP, MLP, MLP_SEG};
  for (int i = 0; i < 3; i++) {
    fixture f = make(specs[i], builds[i]);
    hap_err err = {0};
    cr_assert_eq(hap_plan_validate(f.p, f.g, f.c, &err), HAP_OK, "plan %d: %s", i, err.msg);
    done(&f);
  }
}

/* dp_plan trained with bf16 mixed precision, Adam, ZeRO-1 and selective recomputation, its memory
 * broken down (parts adding up to memory_bytes). */
static hap_plan *policy_plan(const hap_graph *g, const hap_cluster *c) {
  hap_plan *p = dp_plan(g, c);
  p->policy.precision = HAP_PREC_BF16;
  p->policy.optimizer = HAP_OPT_ADAM;
  p->policy.zero = 1;
  p->policy.recompute = HAP_RECOMPUTE_SELECTIVE;
  p->memory_recorded = true;
  for (int32_t i = 0; i < p->n_devices; i++) {
    double b = p->device_memory_bytes[i];
    p->device_memory[i] = (hap_memory_breakdown){b / 8, b / 8, b / 4, b / 2, 0, 0};
  }
  return p;
}

/* policy_plan with full recomputation: a quarter of each device's activations is the working
 * set of the layer recomputed at once. */
static hap_plan *recompute_plan(const hap_graph *g, const hap_cluster *c) {
  hap_plan *p = policy_plan(g, c);
  p->policy.recompute = HAP_RECOMPUTE_FULL;
  for (int32_t i = 0; i < p->n_devices; i++)
    p->device_memory[i].recompute_working = p->device_memory[i].activations / 4;
  return p;
}

/* dp_plan over 2 micro-batches: the steps run on batch 4, and the lengths are of that extent. */
static hap_plan *micro_plan(const hap_graph *g, const hap_cluster *c) {
  hap_plan *p = dp_plan(g, c);
  p->policy.micro_batches = 2;
  return p;
}

Test(plan, round_trip_data_parallel) { round_trip(MLP, dp_plan); }
Test(plan, round_trip_policy_and_memory) { round_trip(MLP, policy_plan); }
Test(plan, round_trip_micro_batches) { round_trip(MLP, micro_plan); }
Test(plan, round_trip_recompute_working_set) { round_trip(MLP, recompute_plan); }

Test(plan, read_recompute_working_errors) {
  fixture f = make(MLP, recompute_plan);
  char *text = to_json(&f);
  cr_assert_not_null(strstr(text, "\"workspace\": 0.0, \"recompute_working\": 8192.0}"), "%s",
                     text);
  free(text);
  mutate_unreadable(&f, "\"recompute_working\": 8192.0", "\"recompute_working\": 99999.0",
                    HAP_EPARSE,
                    TEXTS("plan.json: predicted.devices[0].memory.recompute_working: 99999, "
                          "expected a byte count >= 0 and at most activations (32768)"));
  mutate_unreadable(
      &f, "\"recompute_working\": 8192.0", "\"recompute_working\": -1.0", HAP_EPARSE,
      TEXTS("plan.json: predicted.devices[0].memory.recompute_working: -1, expected"));
  mutate_unreadable(&f, "\"recompute_working\": 8192.0", "\"recompute_working\": \"8K\"",
                    HAP_EPARSE,
                    TEXTS("plan.json: predicted.devices[0].memory.recompute_working: expected a "
                          "byte count, got a string"));
  done(&f);
}

Test(plan, policy_written_only_when_not_the_default) {
  fixture f = make(MLP, dp_plan);
  f.p->memory_recorded = true; /* a default plan keeps the bytes it always had */
  for (int32_t i = 0; i < f.p->n_devices; i++)
    f.p->device_memory[i].activations = f.p->device_memory_bytes[i];
  char *text = to_json(&f);
  cr_assert_null(strstr(text, "policy"), "%s", text);
  cr_assert_null(strstr(text, "\"memory\""), "%s", text);
  free(text);
  done(&f);
  f = make(MLP, policy_plan);
  text = to_json(&f);
  cr_assert_not_null(strstr(text,
                            "\"policy\": {\"precision\": \"bf16\", \"optimizer\": \"adam\", "
                            "\"zero\": 1, \"recompute\": \"selective\", \"micro_batches\": 1, "
                            "\"grad_accum\": \"half\"}"),
                     "%s", text);
  cr_assert_not_null(strstr(text, "\"memory\": {\"parameters\": 8192.0, \"gradients\": 8192.0, "
                                  "\"optimizer\": 16384.0, \"activations\": 32768.0, "
                                  "\"comm_buffers\": 0.0, \"workspace\": 0.0}"),
                     "%s", text);
  free(text);
  done(&f);
  f = make(MLP, micro_plan);
  text = to_json(&f);
  cr_assert_not_null(strstr(text, "\"lengths\": {\"4\": [3, 1]}"), "one micro-batch's extent: %s",
                     text);
  free(text);
  done(&f);
}

Test(plan, read_policy_errors) {
  fixture f = make(MLP, policy_plan);
  mutate_unreadable(&f, "\"precision\": \"bf16\"", "\"precision\": \"fp8\"", HAP_EPARSE,
                    TEXTS("plan.json: policy.precision: unknown precision 'fp8', expected fp32, "
                          "fp16 or bf16"));
  mutate_unreadable(&f, "\"optimizer\": \"adam\"", "\"optimizer\": \"lamb\"", HAP_EPARSE,
                    TEXTS("plan.json: policy.optimizer: unknown optimizer 'lamb', expected sgd, "
                          "momentum, adam or adamw"));
  mutate_unreadable(&f, "\"recompute\": \"selective\"", "\"recompute\": \"half\"", HAP_EPARSE,
                    TEXTS("plan.json: policy.recompute: unknown recompute 'half', expected none, "
                          "selective or full"));
  mutate_unreadable(&f, "\"zero\": 1", "\"zero\": 4", HAP_EPARSE,
                    TEXTS("plan.json: policy.zero: zero=4, expected a ZeRO stage 0, 1, 2 or 3"));
  mutate_unreadable(&f, "\"zero\": 1", "\"zero\": \"1\"", HAP_EPARSE,
                    TEXTS("plan.json: policy.zero: expected an integer, got a string"));
  mutate_unreadable(&f, "\"micro_batches\": 1", "\"micro_batches\": 0", HAP_EPARSE,
                    TEXTS("plan.json: policy.micro_batches: micro_batches=0, expected an integer "
                          "1..4096"));
  mutate_unreadable(
      &f, "\"micro_batches\": 1", "\"micro_batches\": 3", HAP_EINVAL,
      TEXTS("plan.json: policy: micro_batches=3 (x 1 replicas)", "not a multiple of 3"));
  mutate_unreadable(&f, "\"grad_accum\": \"half\"", "\"grad_accum\": \"half\", \"lr\": 1",
                    HAP_EPARSE, TEXTS("plan.json: policy.lr: unknown key"));
  mutate_unreadable(&f, "\"zero\": 1, ", "", HAP_EPARSE, TEXTS("plan.json: policy.zero: missing"));
  mutate_unreadable(&f, "\"policy\": {", "\"policy\": [{", HAP_EPARSE, TEXTS("plan.json: line "));
  char *good = to_json(&f);
  const char *start = strstr(good, "{\"precision\"");
  const char *end = strstr(start, "}");
  char *obj = strndup(start, (size_t)(end - start + 1));
  mutate_unreadable(&f, obj, "\"bf16\"", HAP_EPARSE,
                    TEXTS("plan.json: policy: expected a training policy {\"precision\""));
  free(obj);
  free(good);
  done(&f);
}

Test(plan, read_memory_errors) {
  fixture f = make(MLP, policy_plan);
  mutate_unreadable(&f, "\"workspace\": 0.0}}", "\"workspace\": 0.0, \"nccl\": 1}}", HAP_EPARSE,
                    TEXTS("plan.json: predicted.devices[0].memory.nccl: unknown key"));
  mutate_unreadable(&f, "\"parameters\": 8192.0", "\"parameters\": \"8K\"", HAP_EPARSE,
                    TEXTS("plan.json: predicted.devices[0].memory.parameters: expected a byte "
                          "count, got a string"));
  mutate_unreadable(
      &f, "\"parameters\": 8192.0", "\"parameters\": 8193.0", HAP_EINVAL,
      TEXTS("plan.json: predicted.devices[0].memory: the parts add up to 65537 bytes, "
            "expected memory_bytes 65536"));
  mutate_unreadable(&f, "\"comm_buffers\": 0.0", "\"comm_buffers\": -1.0", HAP_EINVAL,
                    TEXTS("plan.json: predicted.devices[0].memory.comm_buffers: -1, expected a "
                          "finite byte count >= 0"));
  /* on every device or none */
  char *good = to_json(&f);
  const char *second = strstr(strstr(good, "\"memory\": {") + 1, ", \"memory\": {");
  cr_assert_not_null(second);
  const char *close = strstr(second, "}");
  char *obj = strndup(second, (size_t)(close - second + 1));
  mutate_unreadable(&f, obj, "", HAP_EPARSE,
                    TEXTS("plan.json: predicted.devices[1].memory: missing"));
  free(obj);
  const char *first = strstr(good, ", \"memory\": {");
  close = strstr(first, "}");
  obj = strndup(first, (size_t)(close - first + 1));
  mutate_unreadable(&f, obj, "", HAP_EPARSE,
                    TEXTS("plan.json: predicted.devices[1].memory: present, but "
                          "predicted.devices[0] has none"));
  free(obj);
  free(good);
  done(&f);
}

Test(plan, validate_policy_and_memory) {
  fixture f = make(MLP, policy_plan);
  f.p->policy.zero = 5;
  expect_invalid(&f, HAP_EINVAL, TEXTS("policy: zero: 5, expected 0, 1, 2 or 3"));
  f.p->policy.zero = 1;
  f.p->device_memory[1].workspace = 1;
  expect_invalid(&f, HAP_EINVAL, TEXTS("predicted.devices[1].memory: the parts add up to"));
  f.p->device_memory[1].workspace = 0;
  f.p->policy.micro_batches = 16; /* batch 8 */
  expect_invalid(&f, HAP_EINVAL, TEXTS("policy: micro_batches=16 (x 1 replicas)"));
  done(&f);
}
Test(plan, round_trip_column_parallel) { round_trip(MLP, cp_plan); }
Test(plan, round_trip_segments) { round_trip(MLP_SEG, seg_plan); }

Test(plan, written_form) {
  fixture f = make(MLP, dp_plan);
  char *text = to_json(&f);
  char want[256];
  snprintf(want, sizeof want, "\"graph\": {\"name\": \"mlp\", \"digest\": \"%016llx\"}",
           (unsigned long long)f.p->graph_digest);
  cr_assert_not_null(strstr(text, want), "%s", text);
  cr_assert_not_null(strstr(text, "\"devices\": [\"local:0\", \"local:1\"]"), "%s", text);
  cr_assert_not_null(
      strstr(text, "\n    {\"ratios\": [0.625, 0.375], \"lengths\": {\"8\": [5, 3]}}\n"), "%s",
      text);
  cr_assert_not_null(strstr(text, "\n    {\"kind\": \"source\", \"tensor\": \"x\", \"storage\": "
                                  "\"input\", \"to\": \"G0\", \"segment\": 0, \"predicted_s\": "
                                  "0.0},\n"),
                     "%s", text);
  cr_assert_not_null(strstr(text, "{\"kind\": \"compute\", \"node\": \"layers.0.linear\", "
                                  "\"variant\": \"data-parallel\", \"inputs\": [\"G0\", \"I\", "
                                  "\"I\"], \"outputs\": [\"G0\"], \"granule\": 1, \"flags\": [], "
                                  "\"segment\": 0, \"predicted_s\": 0.0041}"),
                     "%s", text);
  cr_assert_not_null(strstr(text, "\"iteration_s\": 0.125"), "%s", text);
  /* one step per line */
  int lines = 0;
  for (const char *s = text; (s = strstr(s, "{\"kind\"")) != NULL; s++)
    lines++;
  cr_assert_eq(lines, f.p->n_steps);
  free(text);
  done(&f);
}

Test(plan, written_form_comm_and_segments) {
  fixture f = make(MLP_SEG, seg_plan);
  char *text = to_json(&f);
  cr_assert_not_null(strstr(text, "{\"kind\": \"comm\", \"tensor\": \"layers.0.sigmoid\", \"op\": "
                                  "\"all_to_all\", \"from\": \"G0\", \"to\": \"G0\", \"impl\": "
                                  "\"pairwise\", \"from_segment\": 0, \"segment\": 1, "
                                  "\"predicted_s\": 0.0002}"),
                     "%s", text);
  /* segment 2 shards the batch (all_to_all from) in segment 1 and seq (4) in segment 2 */
  cr_assert_not_null(strstr(text, "{\"ratios\": [0.5, 0.5], \"lengths\": {\"8\": [4, 4]}}"), "%s",
                     text);
  cr_assert_not_null(strstr(text, "{\"ratios\": [0.25, 0.75], \"lengths\": {\"4\": [1, 3]}}"), "%s",
                     text);
  free(text);
  done(&f);
}

Test(plan, write_file_and_read_file) {
  fixture f = make(MLP, cp_plan);
  char dir[] = "/tmp/hap_test_plan.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  hap_err err = {0};
  cr_assert_eq(hap_plan_write_file(f.p, f.g, f.c, path, &err), HAP_OK, "%s", err.msg);
  hap_plan *back;
  cr_assert_eq(hap_plan_read_file(path, f.g, f.c, &back, &err), HAP_OK, "%s", err.msg);
  assert_plans_equal(f.p, back, f.g);
  hap_plan_destroy(back);
  /* a plan that does not validate is not written, and nothing is left behind */
  f.p->ratios[0] = 2;
  char bad[128];
  snprintf(bad, sizeof bad, "%s/bad.json", dir);
  hap_err e2 = {0};
  cr_assert_eq(hap_plan_write_file(f.p, f.g, f.c, bad, &e2), HAP_EINVAL);
  cr_assert_not_null(strstr(e2.msg, "bad.json: segments[0].ratios"), "%s", e2.msg);
  cr_assert_neq(access(bad, F_OK), 0);
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  cr_assert_eq(n, 1, "only plan.json");
  unlink(path);
  rmdir(dir);
  done(&f);
}

/* What the graph and cluster were loaded from travels with the plan ("spec"), is read back without
 * the rest (hap_plan_file_specs), and is optional; a spec that is not a non-empty string fails. */
Test(plan, specs_round_trip) {
  fixture f = make(MLP, dp_plan);
  char dir[] = "/tmp/hap_test_specs.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  hap_err err = {0};
  hap_plan_specs specs = {0};
  cr_assert_eq(hap_plan_write_file(f.p, f.g, f.c, path, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_file_specs(path, &specs, &err), HAP_OK, "%s", err.msg);
  cr_assert(specs.model == NULL && specs.cluster == NULL, "no specs recorded: none read");
  const char *none = NULL, *given = "cpu-2";
  cr_assert_eq(hap_plan_default_specs(path, &none, &given, "MODEL", "--cluster", &specs, &err),
               HAP_EINVAL);
  cr_assert(strstr(err.msg, "the plan does not record its model (made by an older hap-synth, or "
                            "edited): give MODEL") != NULL,
            "%s", err.msg);
  cr_assert(none == NULL && specs.model == NULL && specs.cluster == NULL);
  err = (hap_err){0};
  cr_assert_eq(hap_plan_specs_set(&f.p->specs, MLP, "cpu-2"), HAP_OK);
  cr_assert_eq(hap_plan_write_file(f.p, f.g, f.c, path, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_file_specs(path, &specs, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(specs.model, MLP);
  cr_assert_str_eq(specs.cluster, "cpu-2");
  hap_plan_specs_free(&specs);
  /* a tool's defaults: only what it was not given comes from the plan */
  const char *model = NULL, *cluster = "mine";
  cr_assert_eq(hap_plan_default_specs(path, &model, &cluster, "--model", "--cluster", &specs, &err),
               HAP_OK, "%s", err.msg);
  cr_assert_str_eq(model, MLP);
  cr_assert_str_eq(cluster, "mine");
  hap_plan_specs_free(&specs);
  cr_assert_eq(hap_plan_default_specs("/nonexistent/plan.json", &model, &cluster, "--model",
                                      "--cluster", &specs, &err),
               HAP_OK, "both given: the plan is not read");
  hap_plan *back = NULL;
  cr_assert_eq(hap_plan_read_file(path, f.g, f.c, &back, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(back->specs.model, MLP);
  cr_assert_str_eq(back->specs.cluster, "cpu-2");
  hap_plan *copy = hap_plan_copy(back);
  cr_assert_not_null(copy);
  cr_assert_str_eq(copy->specs.cluster, "cpu-2");
  hap_plan_destroy(copy);
  hap_plan_destroy(back);
  /* malformed: the reader and hap_plan_file_specs say the path */
  char *good = to_json(&f);
  char *bad = replace(good, "\"spec\": \"cpu-2\"", "\"spec\": 3");
  expect_unreadable(&f, bad, HAP_EPARSE, TEXTS("plan.json: cluster.spec: "));
  FILE *out = fopen(path, "w");
  cr_assert_not_null(out);
  fputs(bad, out);
  fclose(out);
  cr_assert_neq(hap_plan_file_specs(path, &specs, &err), HAP_OK);
  cr_assert_not_null(strstr(err.msg, "cluster.spec"), "%s", err.msg);
  cr_assert_eq(strncmp(err.msg, path, strlen(path)), 0, "names the file: %s", err.msg);
  cr_assert(specs.model == NULL && specs.cluster == NULL);
  free(bad);
  bad = replace(good, "\"spec\": \"cpu-2\"", "\"spec\": \"\"");
  expect_unreadable(&f, bad, HAP_EPARSE, TEXTS("plan.json: cluster.spec: "));
  free(bad);
  free(good);
  hap_err missing = {0};
  cr_assert_neq(hap_plan_file_specs("/nonexistent/plan.json", &specs, &missing), HAP_OK);
  cr_assert_not_null(strstr(missing.msg, "/nonexistent/plan.json"), "%s", missing.msg);
  unlink(path);
  rmdir(dir);
  done(&f);
}

Test(plan, newer_minor_version_ignores_unknown_keys) {
  fixture f = make(MLP, dp_plan);
  char *good = to_json(&f);
  char *v11 = replace(good, "\"version\": \"1.0\"", "\"version\": \"1.7\", \"future\": [1, 2]");
  char *v11b = replace(v11, "\"predicted_s\": 0.0}", "\"predicted_s\": 0.0, \"note\": \"x\"}");
  hap_plan *p;
  hap_err err = {0};
  cr_assert_eq(hap_plan_from_json(v11b, strlen(v11b), "plan.json", f.g, f.c, &p, &err), HAP_OK,
               "%s", err.msg);
  assert_plans_equal(f.p, p, f.g);
  hap_plan_destroy(p);
  char *v10 = replace(good, "\"version\": \"1.0\"", "\"version\": \"1.0\", \"future\": 1");
  expect_unreadable(&f, v10, HAP_EPARSE, TEXTS("plan.json: future: unknown key"));
  free(good);
  free(v11);
  free(v11b);
  free(v10);
  done(&f);
}

Test(plan, lengths_are_optional) {
  fixture f = make(MLP, dp_plan);
  char *good = to_json(&f);
  char *bare = replace(good, ", \"lengths\": {\"8\": [5, 3]}", "");
  hap_plan *p;
  hap_err err = {0};
  cr_assert_eq(hap_plan_from_json(bare, strlen(bare), "plan.json", f.g, f.c, &p, &err), HAP_OK,
               "%s", err.msg);
  hap_plan_destroy(p);
  free(good);
  free(bare);
  done(&f);
}

/* ---- the property flow, in memory ----------------------------------------------------------- */

Test(plan, property_nothing_produced) {
  fixture f = make(MLP, dp_plan);
  f.p->steps[4].variant = pick(f.g, f.p->steps[4].node, "G1", "G1"); /* sigmoid0 wants G1 */
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[4]: compute 'layers.0.sigmoid' needs input 0 'layers.0.linear' as "
                       "G1 (segment 0)",
                       "no earlier step", "available: G0 (segment 0)"));
  done(&f);
}

Test(plan, comm_from_unavailable_layout) {
  fixture f = make(MLP, cp_plan);
  f.p->steps[5].from = 1; /* all_gather from G1, but sigmoid0 is G2 */
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[5]: comm all_gather of 'layers.0.sigmoid' needs tensor "
                       "'layers.0.sigmoid' as G1 (segment 0)",
                       "available: G2 (segment 0)"));
  done(&f);
}

Test(plan, comm_layouts_must_suit_the_op) {
  fixture f = make(MLP, cp_plan);
  f.p->steps[5].to = HAP_LAYOUT_REDUCE; /* all_gather G2 -> R */
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[5]: comm all_gather of 'layers.0.sigmoid': goes G2 (segment 0) -> R",
                       "expected G(d) -> I"));
  f.p->steps[5].to = HAP_LAYOUT_IDENTITY;
  f.p->steps[12].from = HAP_LAYOUT_IDENTITY; /* all_reduce I -> I */
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[12]: comm all_reduce of 'loss'", "expected R -> I"));
  done(&f);
}

Test(plan, all_to_all_must_change_something) {
  fixture f = make(MLP_SEG, seg_plan);
  f.p->steps[5].from_segment = 1; /* G0 seg 1 -> G0 seg 1 */
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[5]: comm all_to_all", "from_segment != segment"));
  done(&f);
}

Test(plan, gather_across_segments_needs_all_to_all) {
  fixture f = make(MLP_SEG, seg_plan);
  hap_step *s = f.p->steps; /* drop the all_to_all (steps[5]) */
  memmove(&s[5], &s[6], (size_t)(f.p->n_steps - 6) * sizeof *s);
  f.p->n_steps--;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[7]: compute 'layers.1.linear' needs input 0 'layers.0.sigmoid' as "
                       "G0 (segment 1)",
                       "available: G0 (segment 0)"));
  done(&f);
}

Test(plan, node_computed_twice) {
  fixture f = make(MLP, dp_plan);
  hap_err err = {0};
  hap_step again = f.p->steps[3];
  cr_assert_eq(hap_plan_add_step(f.p, &again, &err), HAP_OK);
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[10]: compute 'layers.0.linear': the node is already computed by "
                       "steps[3]",
                       "exactly once"));
  done(&f);
}

/* x -> mul(w) -> y -> sum -> loss, and y -> relu -> side (used by nothing). */
static hap_graph *side_branch_graph(void) {
  hap_graph *g = hap_graph_create("side");
  hap_err err = {0};
  hap_shape s = {.rank = 2, .dims = {4, 8}};
  int32_t x, w, y, side, loss;
  cr_assert_eq(hap_graph_add_tensor(g, "x", HAP_TENSOR_INPUT, HAP_F32, &s, &x, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(g, "w", HAP_TENSOR_PARAMETER, HAP_F32, &s, &w, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "mul", HAP_OP_MUL, (int32_t[]){x, w}, 2, NULL, NULL, &y, &err),
               HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "side", HAP_OP_RELU, &y, 1, NULL, NULL, &side, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "loss", HAP_OP_SUM, &y, 1, NULL, NULL, &loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
  return g;
}

Test(plan, node_never_computed) {
  fixture f = {.g = side_branch_graph(), .c = cluster("cpu-2")};
  f.p = new_plan(f.g, f.c, (double[]){0.5, 0.5});
  source(f.p, f.g, "x", HAP_STORE_INPUT, "G0", 0);
  source(f.p, f.g, "w", HAP_STORE_SHARDED, "G0", 0);
  compute(f.p, f.g, "mul", "G0", "G0");
  compute(f.p, f.g, "loss", "G0", "R");
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps: node 'side' is never computed", "a compute step for every node"));
  compute(f.p, f.g, "side", "G0", "G0");
  hap_err err = {0};
  cr_assert_eq(hap_plan_validate(f.p, f.g, f.c, &err), HAP_OK, "%s", err.msg);
  done(&f);
}

Test(plan, loss_not_available_at_the_end) {
  fixture f = make(MLP, dp_plan);
  f.p->n_steps--; /* the loss is never computed */
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps: the loss 'loss' ends up available as nothing", "expected R or I"));
  done(&f);
}

Test(plan, variant_not_offered) {
  fixture f = make(MLP, dp_plan);
  f.p->steps[3].variant.in[1] = 0; /* linear with a sharded weight and a sharded batch */
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[3]: compute 'layers.0.linear': op linear offers no variant "
                       "G0,G0,I->G0",
                       "expected one of: replicated I,I,I->I; data-parallel G0,I,I->G0"));
  f.p->steps[3].variant = pick(f.g, f.p->steps[3].node, "G0", "G0");
  f.p->steps[3].variant.flags = HAP_VARIANT_GLOBAL_MASK; /* flags are part of the variant */
  expect_invalid(&f, HAP_EINVAL, TEXTS("offers no variant G0,I,I->G0 (granule 1, flags 0x4"));
  done(&f);
}

Test(plan, compute_in_another_segment) {
  fixture f = make(MLP_SEG, seg_plan);
  f.p->steps[8].segment = 0;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[8]: compute 'layers.1.linear': segment 0, expected the node's "
                       "segment 1"));
  done(&f);
}

Test(plan, wrong_graph_digest) {
  fixture f = make(MLP, dp_plan);
  f.p->graph_digest ^= 0x10;
  char want[160];
  snprintf(want, sizeof want, "graph: made for graph 'mlp' digest %016llx, this graph 'mlp' has",
           (unsigned long long)f.p->graph_digest);
  expect_invalid(&f, HAP_EINVAL, TEXTS(want, "; re-run hap-synth"));
  done(&f);
}

Test(plan, wrong_cluster_digest) {
  fixture f = make(MLP, dp_plan);
  f.p->cluster_digest += 1;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("cluster: made for cluster 'cpu-2' digest",
                       "this cluster 'cpu-2' has digest", "re-run hap-synth"));
  done(&f);
}

Test(plan, ratios_not_summing_to_one) {
  fixture f = make(MLP, dp_plan);
  f.p->ratios[1] = 0.4;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("segments[0].ratios: sum to 1.0249999999999999, expected 1 (within 1e-9)"));
  f.p->ratios[1] = 0.375 + 1e-12; /* within the tolerance */
  hap_err err = {0};
  cr_assert_eq(hap_plan_validate(f.p, f.g, f.c, &err), HAP_OK, "%s", err.msg);
  done(&f);
}

Test(plan, negative_ratio) {
  fixture f = make(MLP, dp_plan);
  f.p->ratios[0] = 1.25;
  f.p->ratios[1] = -0.25;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("segments[0].ratios[1]: -0.25, expected a finite ratio >= 0"));
  done(&f);
}

Test(plan, sources_checked) {
  fixture f = make(MLP, dp_plan);
  hap_step *s = &f.p->steps[1]; /* layers.0.linear.weight, replicated I */
  s->to = 0;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[1]: source 'layers.0.linear.weight': storage "
                       "replicated as G0, expected I"));
  s->to = HAP_LAYOUT_IDENTITY;
  s->storage = HAP_STORE_SHARDED;
  expect_invalid(&f, HAP_EINVAL, TEXTS("storage sharded as I, expected a Gather"));
  s->storage = HAP_STORE_INPUT;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("storage input for a parameter, expected replicated, sharded, zero or sfb"));
  s->storage = HAP_STORE_REPLICATED;
  f.p->steps[0].storage = HAP_STORE_ZERO;
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[0]: source 'x': storage zero for an input"));
  f.p->steps[0].storage = HAP_STORE_INPUT;
  f.p->steps[0].to = HAP_LAYOUT_REDUCE;
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[0]: source 'x': an input fed as R"));
  f.p->steps[0].to = 3;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[0]: source 'x': to layout G3, expected I, R or G0..G2"));
  f.p->steps[0].to = 0;
  f.p->steps[2].tensor = f.p->steps[1].tensor; /* weight sourced twice */
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[2]: source 'layers.0.linear.weight': already sourced by steps[1]"));
  f.p->steps[2].tensor = hap_graph_find_tensor(f.g, "layers.0.linear");
  expect_invalid(&f, HAP_EINVAL, TEXTS("'layers.0.linear' is an activation"));
  f.p->steps[2].tensor = 1000;
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[2]: source: tensor id 1000, expected 0..9"));
  done(&f);
}

Test(plan, steps_checked) {
  fixture f = make(MLP, dp_plan);
  f.p->steps[9].segment = 1;
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[9]: segment 1, expected 0..0"));
  f.p->steps[9].segment = 0;
  f.p->steps[9].kind = HAP_STEP_KIND_COUNT;
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[9]: kind 3, expected source, compute or comm"));
  f.p->steps[9].kind = HAP_STEP_COMPUTE;
  f.p->steps[9].predicted_s = -1;
  expect_invalid(&f, HAP_EINVAL, TEXTS("steps[9].predicted_s: -1, expected a finite time >= 0"));
  f.p->steps[9].predicted_s = 0;
  f.p->device_memory_bytes[1] = -2;
  expect_invalid(&f, HAP_EINVAL, TEXTS("predicted.devices[1].memory_bytes: -2"));
  done(&f);
}

/* A granule is part of a Gather: a source with granule 2 does not feed a granule-1 variant. */
Test(plan, granule_is_part_of_a_gather) {
  fixture f = make(MLP, dp_plan);
  f.p->steps[0].granule = 2;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[3]: compute 'layers.0.linear' needs input 0 'x' as G0 (segment 0)",
                       "available: G0 (segment 0, granule 2)"));
  f.p->steps[0].granule = 3;
  expect_invalid(&f, HAP_EINVAL,
                 TEXTS("steps[0]: source 'x': dim 0 of 'x' has 8 elements, expected a multiple "
                       "of the granule 3"));
  done(&f);
}

/* ---- files: mutations the reader refuses ---------------------------------------------------- */

Test(plan, read_wrong_graph) {
  fixture f = make(MLP, dp_plan);
  char *text = to_json(&f);
  fixture other = {.g = graph("mlp:layers=2,batch=8,seq=4,hidden=32"), .c = f.c};
  char want[160];
  snprintf(want, sizeof want, "plan.json: graph: made for graph 'mlp' digest %016llx, this graph",
           (unsigned long long)f.p->graph_digest);
  expect_unreadable(&other, text, HAP_EINVAL, TEXTS(want, "; re-run hap-synth"));
  hap_graph_destroy(other.g);
  free(text);
  done(&f);
}

Test(plan, read_wrong_digests) {
  fixture f = make(MLP, dp_plan);
  char have[24], bare[48];
  snprintf(have, sizeof have, "\"%016llx\"", (unsigned long long)f.p->graph_digest);
  snprintf(bare, sizeof bare, "%016llx; re-run hap-synth", (unsigned long long)f.p->graph_digest);
  mutate_unreadable(&f, have, "\"0123456789abcdef\"", HAP_EINVAL,
                    TEXTS("plan.json: graph: made for graph 'mlp' digest 0123456789abcdef, this "
                          "graph 'mlp' has digest ",
                          bare));
  snprintf(have, sizeof have, "\"%016llx\"", (unsigned long long)f.p->cluster_digest);
  mutate_unreadable(&f, have, "\"0000000000000000\"", HAP_EINVAL,
                    TEXTS("plan.json: cluster: made for cluster 'cpu-2' digest 0000000000000000"));
  mutate_unreadable(&f, have, "\"00000000000000\"", HAP_EPARSE,
                    TEXTS("plan.json: cluster.digest: is \"00000000000000\", expected 16 hex"));
  done(&f);
}

Test(plan, read_ratios_and_lengths) {
  fixture f = make(MLP, dp_plan);
  mutate_unreadable(&f, "[0.625, 0.375]", "[0.625, 0.4]", HAP_EINVAL,
                    TEXTS("plan.json: segments[0].ratios: sum to 1.02"));
  mutate_unreadable(&f, "[0.625, 0.375]", "[1.25, -0.25]", HAP_EINVAL,
                    TEXTS("plan.json: segments[0].ratios[1]: -0.25, expected a finite ratio >= 0"));
  mutate_unreadable(&f, "[0.625, 0.375]", "[0.625]", HAP_EPARSE,
                    TEXTS("plan.json: segments[0].ratios: has 1 entries, expected 2"));
  mutate_unreadable(&f, "\"8\": [5, 3]", "\"8\": [4, 4]", HAP_EINVAL,
                    TEXTS("plan.json: segments[0].lengths.8: [4, 4] does not match the ratios, "
                          "expected [5, 3]"));
  mutate_unreadable(&f, "\"8\": [5, 3]", "\"8\": [5, 3], \"16\": [8, 8]", HAP_EINVAL,
                    TEXTS("plan.json: segments[0].lengths.16: no step shards this extent in "
                          "segment 0, expected only the keys: 8"));
  mutate_unreadable(&f, "\"8\": [5, 3]", "\"08\": [5, 3]", HAP_EINVAL,
                    TEXTS("plan.json: segments[0].lengths: has no \"8\""));
  mutate_unreadable(&f, "\"8\": [5, 3]", "\"8\": [5, 3], \"x\": []", HAP_EINVAL,
                    TEXTS("segments[0].lengths.x: no step shards such a key"));
  mutate_unreadable(&f, "\"8\": [5, 3]", "\"8\": [5, -3]", HAP_EPARSE,
                    TEXTS("segments[0].lengths.8[1]: is -3, expected a length >= 0"));
  done(&f);
}

Test(plan, read_lengths_with_segments) {
  fixture f = make(MLP_SEG, seg_plan);
  mutate_unreadable(&f, "\"4\": [1, 3]", "\"4\": [2, 2]", HAP_EINVAL,
                    TEXTS("segments[2].lengths.4: [2, 2] does not match the ratios, expected "
                          "[1, 3]"));
  /* an all_to_all that re-shards to the same segment is no all_to_all */
  mutate_unreadable(&f, "\"from_segment\": 0, ", "", HAP_EINVAL,
                    TEXTS("plan.json: steps[5]: comm all_to_all of 'layers.0.sigmoid'",
                          "from_segment != segment"));
  mutate_unreadable(&f, "\"from_segment\": 0", "\"from_segment\": 3", HAP_EPARSE,
                    TEXTS("plan.json: steps[5].from_segment: is 3, expected a segment 0..2"));
  done(&f);
}

Test(plan, read_unknown_names) {
  fixture f = make(MLP, cp_plan);
  mutate_unreadable(&f, "\"node\": \"layers.1.linear\"", "\"node\": \"layers.9.linear\"",
                    HAP_EPARSE,
                    TEXTS("plan.json: steps[8].node: unknown node 'layers.9.linear', expected a "
                          "node of graph 'mlp'"));
  mutate_unreadable(&f, "\"tensor\": \"x\"", "\"tensor\": \"y\"", HAP_EPARSE,
                    TEXTS("plan.json: steps[0].tensor: unknown tensor 'y', expected a tensor of "
                          "graph 'mlp'"));
  mutate_unreadable(&f, "\"op\": \"all_gather\"", "\"op\": \"allgather\"", HAP_EPARSE,
                    TEXTS("plan.json: steps[5].op: unknown op 'allgather', expected all_gather"));
  mutate_unreadable(&f, "\"to\": \"I\"", "\"to\": \"G9\"", HAP_EPARSE,
                    TEXTS("plan.json: steps[0].to: unknown layout 'G9', expected I, R or G0..G7"));
  mutate_unreadable(&f, "\"inputs\": [\"I\", \"G0\", \"G0\"]", "\"inputs\": [\"I\", \"Q\", \"G0\"]",
                    HAP_EPARSE, TEXTS("plan.json: steps[3].inputs[1]: unknown layout 'Q'"));
  mutate_unreadable(&f, "\"storage\": \"input\"", "\"storage\": \"inputs\"", HAP_EPARSE,
                    TEXTS("plan.json: steps[0].storage: unknown storage 'inputs', expected input, "
                          "replicated, sharded, zero or sfb"));
  mutate_unreadable(&f, "\"impl\": \"grouped\"", "\"impl\": \"magic\"", HAP_EPARSE,
                    TEXTS("plan.json: steps[5].impl: unknown impl 'magic'"));
  mutate_unreadable(&f, "\"kind\": \"comm\"", "\"kind\": \"send\"", HAP_EPARSE,
                    TEXTS("plan.json: steps[5].kind: unknown kind 'send', expected source, compute "
                          "or comm"));
  mutate_unreadable(&f, "\"flags\": []", "\"flags\": [\"fast\"]", HAP_EPARSE,
                    TEXTS("plan.json: steps[3].flags[0]: unknown flag 'fast', expected bias_once"));
  mutate_unreadable(&f, "\"local:1\"", "\"local:7\"", HAP_EPARSE,
                    TEXTS("plan.json: cluster.devices[1]: is 'local:7', expected 'local:1'"));
  done(&f);
}

Test(plan, read_variants_matched_by_layouts) {
  fixture f = make(MLP, dp_plan);
  /* the name alone is not trusted */
  mutate_unreadable(&f, "\"variant\": \"data-parallel\"", "\"variant\": \"column-parallel\"",
                    HAP_EPARSE,
                    TEXTS("plan.json: steps[3].variant: is 'column-parallel', but these layouts "
                          "are op linear's variant 'data-parallel'"));
  /* layouts no variant offers */
  mutate_unreadable(&f, "\"inputs\": [\"G0\", \"I\", \"I\"]", "\"inputs\": [\"G0\", \"G1\", \"I\"]",
                    HAP_EINVAL,
                    TEXTS("plan.json: steps[3]: compute 'layers.0.linear': op linear offers no "
                          "variant G0,G1,I->G0"));
  mutate_unreadable(&f, "\"granule\": 1, \"flags\": []", "\"granule\": 2, \"flags\": []",
                    HAP_EINVAL,
                    TEXTS("plan.json: steps[3]: compute 'layers.0.linear'",
                          "offers no variant G0,I,I->G0 (granule 2"));
  mutate_unreadable(&f, "\"flags\": []", "\"flags\": [], \"once\": [2]", HAP_EINVAL,
                    TEXTS("offers no variant G0,I,I->G0 (granule 1, flags 0x0, once 0x4)"));
  mutate_unreadable(&f, "\"flags\": []", "\"flags\": [], \"once\": [3]", HAP_EPARSE,
                    TEXTS("plan.json: steps[3].once[0]: is 3, expected an input index 0..2"));
  mutate_unreadable(&f, "\"inputs\": [\"G0\", \"I\", \"I\"]", "\"inputs\": [\"G0\", \"I\"]",
                    HAP_EPARSE,
                    TEXTS("plan.json: steps[3].inputs: has 2 entries, expected 3 (the inputs of "
                          "node 'layers.0.linear')"));
  done(&f);
}

Test(plan, read_flow_errors_name_the_step) {
  fixture f = make(MLP, dp_plan);
  /* sigmoid0 asks for G1: nothing produced it */
  mutate_unreadable(&f,
                    "\"node\": \"layers.0.sigmoid\", \"variant\": \"dim-parallel\", \"inputs\": "
                    "[\"G0\"], \"outputs\": [\"G0\"]",
                    "\"node\": \"layers.0.sigmoid\", \"variant\": \"dim-parallel\", \"inputs\": "
                    "[\"G1\"], \"outputs\": [\"G1\"]",
                    HAP_EINVAL,
                    TEXTS("plan.json: steps[4]: compute 'layers.0.sigmoid' needs input 0 "
                          "'layers.0.linear' as G1 (segment 0)"));
  /* the loss summed nowhere */
  char *good = to_json(&f);
  char *cut = strstr(good, ",\n    {\"kind\": \"compute\", \"node\": \"loss\"");
  cr_assert_not_null(cut);
  char *end = strstr(cut, "}\n  ],");
  cr_assert_not_null(end);
  memmove(cut, end + 1, strlen(end + 1) + 1);
  expect_unreadable(&f, good, HAP_EINVAL,
                    TEXTS("plan.json: steps: the loss 'loss' ends up available as nothing"));
  free(good);
  done(&f);
}

Test(plan, read_header_errors) {
  fixture f = make(MLP, dp_plan);
  mutate_unreadable(&f, "\"version\": \"1.0\"", "\"version\": \"3.0\"", HAP_EVERSION,
                    TEXTS("plan.json: version: the file was written by a newer hap (format version "
                          "3.0); this build reads 1.x"));
  mutate_unreadable(
      &f, "\"version\": \"1.0\"", "\"version\": \"2.0\"", HAP_EINVAL,
      TEXTS("plan.json: version: a pipelined plan (format 2.x: \"stages\"), expected a "
            "one-stage plan (format 1.x) here"));
  mutate_unreadable(&f, "\"version\": \"1.0\"", "\"version\": \"0.9\"", HAP_EPARSE,
                    TEXTS("plan.json: version: format version 0.9 does not exist"));
  mutate_unreadable(&f, "\"format\": \"hap-plan\"", "\"format\": \"hap-graph\"", HAP_EPARSE,
                    TEXTS("plan.json: format: is \"hap-graph\", expected \"hap-plan\""));
  mutate_unreadable(&f, "\"strategy\": \"hap\"", "\"strategy\": \"\"", HAP_EPARSE,
                    TEXTS("plan.json: strategy: is empty"));
  mutate_unreadable(&f, "\"iteration_s\": 0.125", "\"iteration_s\": \"fast\"", HAP_EPARSE,
                    TEXTS("plan.json: predicted.iteration_s: expected a time in seconds, got a "
                          "string"));
  mutate_unreadable(&f, "\"segment\": 0, \"predicted_s\": 0.0}", "\"predicted_s\": 0.0}",
                    HAP_EPARSE, TEXTS("plan.json: steps[0].segment: missing"));
  mutate_unreadable(&f, "\"predicted_s\": 0.0}", "\"predicted_s\": -1.0}", HAP_EINVAL,
                    TEXTS("plan.json: steps[0].predicted_s: -1, expected a finite time >= 0"));
  done(&f);
}

Test(plan, read_truncated_and_empty) {
  fixture f = make(MLP, dp_plan);
  char *text = to_json(&f);
  for (size_t cut = 1; cut < strlen(text); cut += strlen(text) / 7) {
    char *head = strndup(text, cut);
    expect_unreadable(&f, head, HAP_EPARSE, TEXTS("plan.json: "));
    free(head);
  }
  text[strlen(text) / 2] = '\0';
  expect_unreadable(&f, text, HAP_EPARSE, TEXTS("plan.json: line "));
  expect_unreadable(&f, " \n", HAP_EPARSE, TEXTS("plan.json: the file is empty"));
  expect_unreadable(&f, "[]", HAP_EPARSE, TEXTS("plan.json: root: expected a hap-plan object"));
  free(text);
  done(&f);
}

/* Every file in tests/data/plans/bad is refused with one line naming it. */
Test(plan, bad_files) {
  fixture f = {.g = graph(MLP), .c = cluster("cpu-2")};
  DIR *d = opendir(BAD_DIR);
  cr_assert_not_null(d, "cannot open %s", BAD_DIR);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", BAD_DIR, e->d_name);
    hap_plan *p;
    hap_err err = {0};
    cr_assert_neq(hap_plan_read_file(path, f.g, f.c, &p, &err), HAP_OK, "%s was accepted", path);
    cr_assert_null(p);
    cr_assert_eq(strncmp(err.msg, path, strlen(path)), 0, "%s: %s", path, err.msg);
    cr_assert_eq(strchr(err.msg, '\n'), NULL, "%s", err.msg);
    n++;
  }
  closedir(d);
  cr_assert_geq(n, 5);
  hap_graph_destroy(f.g);
  hap_cluster_destroy(f.c);
}
