/* test_graph.c — the graph builder and validator: shape inference through the builder, gradient
 * flow, topological order, segments, and every rejection naming the node or tensor at fault. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "model/graph.h"

#define NARGS_(...) ((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SHAPE(...)  ((hap_shape){.rank = NARGS_(__VA_ARGS__), .dims = {__VA_ARGS__}})
#define SCALAR      ((hap_shape){.rank = 0})
#define IDS(...)    ((const int32_t[]){__VA_ARGS__})
#define NIDS(...)   ((int32_t)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))

static hap_graph *new_graph(void) {
  hap_graph *g = hap_graph_create("test");
  cr_assert_not_null(g);
  cr_assert_str_eq(g->name, "test");
  cr_assert_eq(g->loss, -1);
  cr_assert_eq(g->n_segments, 1);
  return g;
}

static int32_t tensor(hap_graph *g, const char *name, hap_tensor_kind kind, hap_dtype dt,
                      hap_shape s) {
  hap_err err = {0};
  int32_t id = -1;
  cr_assert_eq(hap_graph_add_tensor(g, name, kind, dt, &s, &id, &err), HAP_OK, "%s", err.msg);
  return id;
}

static int32_t f32(hap_graph *g, const char *name, hap_tensor_kind kind, hap_shape s) {
  return tensor(g, name, kind, HAP_F32, s);
}

/* Builder node with one output named after the node; attrs NULL means defaults. */
static int32_t node(hap_graph *g, const char *name, hap_op op, const int32_t *in, int32_t n_in,
                    const hap_attrs *attrs) {
  hap_err err = {0};
  int32_t out = -1;
  cr_assert_eq(hap_graph_add_node(g, name, op, in, n_in, attrs, NULL, &out, &err), HAP_OK, "%s",
               err.msg);
  cr_assert_str_eq(g->tensors[out].name, name);
  return out;
}

/* Reader node: outputs are existing tensors. */
static void link_n(hap_graph *g, const char *name, hap_op op, const int32_t *in, int32_t n_in,
                   const int32_t *out, int32_t n_out, int32_t segment) {
  hap_err err = {0};
  cr_assert_eq(hap_graph_link_node(g, name, op, in, n_in, out, n_out, NULL, segment, &err), HAP_OK,
               "%s", err.msg);
}

static void set_loss(hap_graph *g, int32_t t) {
  hap_err err = {0};
  cr_assert_eq(hap_graph_set_loss(g, t, &err), HAP_OK, "%s", err.msg);
}

static void expect_valid(hap_graph *g) {
  hap_err err = {0};
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
}

/* validate must fail with `st` and a message containing both substrings (s2 may be NULL). */
static void expect_invalid(hap_graph *g, hap_status st, const char *s1, const char *s2) {
  hap_err err = {0};
  hap_status got = hap_graph_validate(g, &err);
  cr_assert_eq(got, st, "status %d, expected %d: %s", (int)got, (int)st, err.msg);
  cr_assert(strstr(err.msg, s1) != NULL, "message '%s' lacks '%s'", err.msg, s1);
  cr_assert(s2 == NULL || strstr(err.msg, s2) != NULL, "message '%s' lacks '%s'", err.msg, s2);
}

static void expect_msg(const hap_err *err, const char *s1, const char *s2) {
  cr_assert(strstr(err->msg, s1) != NULL, "message '%s' lacks '%s'", err->msg, s1);
  cr_assert(s2 == NULL || strstr(err->msg, s2) != NULL, "message '%s' lacks '%s'", err->msg, s2);
}

static int32_t node_id(const hap_graph *g, const char *name) {
  int32_t n = hap_graph_find_node(g, name);
  cr_assert_geq(n, 0, "no node '%s'", name);
  cr_assert_str_eq(g->nodes[n].name, name);
  return n;
}

static bool grad_of(const hap_graph *g, const char *name) {
  int32_t t = hap_graph_find_tensor(g, name);
  cr_assert_geq(t, 0, "no tensor '%s'", name);
  return g->tensors[t].requires_grad;
}

/* x [4,8] -> linear(w1, b1) -> relu | segment | linear(w2) -> cross_entropy(labels) -> loss */
static hap_graph *mlp(void) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t labels = tensor(g, "labels", HAP_TENSOR_INPUT, HAP_I64, SHAPE(4));
  int32_t w1 = f32(g, "w1", HAP_TENSOR_PARAMETER, SHAPE(16, 8));
  int32_t b1 = f32(g, "b1", HAP_TENSOR_PARAMETER, SHAPE(16));
  int32_t fc1 = node(g, "fc1", HAP_OP_LINEAR, IDS(x, w1, b1), 3, NULL);
  int32_t act = node(g, "act", HAP_OP_RELU, &fc1, 1, NULL);
  hap_graph_begin_segment(g);
  int32_t w2 = f32(g, "w2", HAP_TENSOR_PARAMETER, SHAPE(10, 16));
  int32_t fc2 = node(g, "fc2", HAP_OP_LINEAR, IDS(act, w2), 2, NULL);
  int32_t loss = node(g, "loss", HAP_OP_CROSS_ENTROPY, IDS(fc2, labels), 2, NULL);
  set_loss(g, loss);
  return g;
}

/* ---- builder and a valid graph -------------------------------------------------------------- */

Test(graph, mlp_builds_and_validates) {
  hap_graph *g = mlp();
  cr_assert_eq(g->n_segments, 2);
  expect_valid(g);
  cr_assert_eq(g->n_nodes, 4);
  cr_assert_eq(g->n_tensors, 9);
  cr_assert_eq(g->n_segments, 2);
  static const char *const order[] = {"fc1", "act", "fc2", "loss"};
  static const int32_t segment[] = {0, 0, 1, 1};
  for (int i = 0; i < 4; i++) {
    cr_assert_str_eq(g->nodes[i].name, order[i]);
    cr_assert_eq(g->nodes[i].segment, segment[i], "%s", order[i]);
    cr_assert_eq(g->tensors[g->nodes[i].outputs[0]].producer, i);
    cr_assert_eq(g->tensors[g->nodes[i].outputs[0]].kind, HAP_TENSOR_ACTIVATION);
  }
  int32_t fc1 = hap_graph_find_tensor(g, "fc1");
  hap_shape want = SHAPE(4, 16);
  cr_assert(hap_shape_eq(&g->tensors[fc1].shape, &want));
  cr_assert_eq(hap_tensor_numel(&g->tensors[fc1]), 4 * 16);
  cr_assert_eq(hap_tensor_bytes(&g->tensors[fc1]), 4 * 16 * 4);
  cr_assert_eq(g->tensors[hap_graph_find_tensor(g, "x")].producer, -1);
  cr_assert_eq(g->loss, hap_graph_find_tensor(g, "loss"));
  cr_assert_eq(g->tensors[g->loss].shape.rank, 0);
  cr_assert_eq(hap_graph_find_tensor(g, "nope"), -1);
  cr_assert_eq(hap_graph_find_node(g, "nope"), -1);
  hap_graph_destroy(g);
}

Test(graph, requires_grad_propagation) {
  hap_graph *g = mlp();
  expect_valid(g);
  cr_assert_not(grad_of(g, "x"));
  cr_assert_not(grad_of(g, "labels"));
  cr_assert(grad_of(g, "w1"));
  cr_assert(grad_of(g, "b1"));
  cr_assert(grad_of(g, "w2"));
  cr_assert(grad_of(g, "fc1"));
  cr_assert(grad_of(g, "act"));
  cr_assert(grad_of(g, "fc2"));
  cr_assert(grad_of(g, "loss"));
  hap_graph_destroy(g);
}

Test(graph, requires_grad_buffers_inputs_and_int_outputs) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t pe = f32(g, "pe", HAP_TENSOR_BUFFER, SHAPE(4, 8));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4, 8));
  int32_t ids = tensor(g, "ids", HAP_TENSOR_PARAMETER, HAP_I64, SHAPE(4, 2));
  int32_t xp = node(g, "xp", HAP_OP_ADD, IDS(x, pe), 2, NULL); /* input + buffer: no grad */
  int32_t y = node(g, "y", HAP_OP_MUL, IDS(xp, w), 2, NULL);   /* from a parameter: grad */
  hap_attrs a;
  hap_err err = {0};
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", (int64_t[]){8}, 1, &err), HAP_OK);
  node(g, "ids_flat", HAP_OP_RESHAPE, &ids, 1, &a); /* int output: never a gradient */
  int32_t loss = node(g, "loss", HAP_OP_SUM, &y, 1, NULL);
  set_loss(g, loss);
  expect_valid(g);
  cr_assert_not(grad_of(g, "x"));
  cr_assert_not(grad_of(g, "pe"));
  cr_assert_not(grad_of(g, "xp"));
  cr_assert(grad_of(g, "w"));
  cr_assert(grad_of(g, "y"));
  cr_assert(grad_of(g, "loss"));
  cr_assert_eq(g->tensors[hap_graph_find_tensor(g, "ids_flat")].dtype, HAP_I64);
  cr_assert_not(grad_of(g, "ids_flat"));

  hap_op_io io; /* what the cost model sees for y = xp * w */
  hap_graph_node_io(g, node_id(g, "y"), &io);
  cr_assert_eq(io.n_in, 2);
  cr_assert_not(io.in_grad[0]);
  cr_assert(io.in_grad[1]);
  hap_op_cost c;
  hap_graph_node_cost(g, node_id(g, "y"), &c);
  cr_assert_eq(c.fwd_flops, 32.0);
  cr_assert_eq(c.bwd_flops, 32.0); /* only dw = g * xp */
  hap_graph_destroy(g);
}

Test(graph, node_cost_uses_gradient_needs) {
  hap_graph *g = mlp();
  expect_valid(g);
  hap_op_cost c;
  hap_graph_node_cost(g, node_id(g, "fc1"), &c); /* first layer: no dX */
  cr_assert_eq(c.fwd_flops, 2.0 * 4 * 16 * 8 + 4 * 16);
  cr_assert_eq(c.bwd_flops, 2.0 * 4 * 16 * 8 + 4 * 16);
  hap_graph_node_cost(g, node_id(g, "fc2"), &c); /* dX and dW */
  cr_assert_eq(c.fwd_flops, 2.0 * 4 * 10 * 16);
  cr_assert_eq(c.bwd_flops, 2 * (2.0 * 4 * 10 * 16));
  hap_graph_destroy(g);
}

Test(graph, multi_output_names_and_source) {
  hap_graph *g = new_graph();
  cr_assert_eq(hap_graph_set_source(g, "hap-model moe:layers=1"), HAP_OK);
  cr_assert_str_eq(g->source, "hap-model moe:layers=1");
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(2, 3, 4));
  int32_t wg = f32(g, "wg", HAP_TENSOR_PARAMETER, SHAPE(4, 5));
  hap_attrs a;
  hap_err err = {0};
  hap_attrs_init(&a, HAP_OP_TOP2_GATING);
  cr_assert_eq(hap_attrs_set_int(&a, HAP_OP_TOP2_GATING, "capacity", 6, &err), HAP_OK);
  int32_t outs[2];
  cr_assert_eq(
      hap_graph_add_node(g, "gate", HAP_OP_TOP2_GATING, IDS(x, wg), 2, &a, NULL, outs, &err),
      HAP_OK, "%s", err.msg);
  cr_assert_str_eq(g->tensors[outs[0]].name, "gate.dispatch");
  cr_assert_str_eq(g->tensors[outs[1]].name, "gate.combine");
  hap_shape want = SHAPE(2, 3, 5, 6);
  cr_assert(hap_shape_eq(&g->tensors[outs[1]].shape, &want));
  cr_assert_eq(
      hap_graph_add_node(g, "r", HAP_OP_RELU, &x, 1, NULL, (const char *const[]){"rx"}, NULL, &err),
      HAP_OK, "%s", err.msg);
  cr_assert_geq(hap_graph_find_tensor(g, "rx"), 0);
  cr_assert_eq(hap_graph_find_tensor(g, "r"), -1);
  hap_graph_destroy(g);
}

Test(graph, same_tensor_twice) {
  hap_graph *g = new_graph();
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(3));
  int32_t ww = node(g, "ww", HAP_OP_ADD, IDS(w, w), 2, NULL);
  set_loss(g, node(g, "loss", HAP_OP_SUM, &ww, 1, NULL));
  expect_valid(g);
  int32_t n = node_id(g, "ww");
  cr_assert_eq(g->nodes[n].n_inputs, 2);
  cr_assert_eq(g->nodes[n].inputs[0], w);
  cr_assert_eq(g->nodes[n].inputs[1], w);
  hap_graph_destroy(g);
}

Test(graph, kind_names) {
  hap_tensor_kind k;
  cr_assert_str_eq(hap_tensor_kind_name(HAP_TENSOR_BUFFER), "buffer");
  cr_assert_eq(hap_tensor_kind_parse("activation", &k), HAP_OK);
  cr_assert_eq(k, HAP_TENSOR_ACTIVATION);
  cr_assert_eq(hap_tensor_kind_parse("weight", &k), HAP_ENOTFOUND);
}

/* ---- builder rejections -------------------------------------------------------------------- */

Test(graph, duplicate_tensor_name) {
  hap_graph *g = new_graph();
  f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  hap_err err = {0};
  int32_t id;
  cr_assert_eq(hap_graph_add_tensor(g, "x", HAP_TENSOR_PARAMETER, HAP_F32, &SHAPE(4), &id, &err),
               HAP_EINVAL);
  expect_msg(&err, "tensor 'x' is defined twice", NULL);
  cr_assert_eq(g->n_tensors, 1);
  hap_graph_destroy(g);
}

Test(graph, duplicate_node_name) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  node(g, "r", HAP_OP_RELU, &x, 1, NULL);
  hap_err err = {0};
  cr_assert_eq(
      hap_graph_add_node(g, "r", HAP_OP_TANH, &x, 1, NULL, (const char *const[]){"t"}, NULL, &err),
      HAP_EINVAL);
  expect_msg(&err, "node 'r' is defined twice", NULL);
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_link_node(g, "r", HAP_OP_TANH, &x, 1, IDS(0), 0, NULL, 0, &err),
               HAP_EINVAL);
  expect_msg(&err, "node 'r' is defined twice", NULL);
  cr_assert_eq(g->n_nodes, 1);
  hap_graph_destroy(g);
}

Test(graph, builder_reports_inference_errors_with_node_name) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(16, 7));
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_node(g, "fc", HAP_OP_LINEAR, IDS(x, w), 2, NULL, NULL, NULL, &err),
               HAP_EINVAL);
  expect_msg(&err, "node 'fc'", "expected [N, 8]");
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_add_node(g, "bad", HAP_OP_RELU, IDS(x, 7), 2, NULL, NULL, NULL, &err),
               HAP_EINVAL);
  expect_msg(&err, "node 'bad'", "input 1 refers to no tensor");
  cr_assert_eq(g->n_nodes, 0);
  cr_assert_eq(g->n_tensors, 2);
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_set_loss(g, 9, &err), HAP_EINVAL);
  expect_msg(&err, "loss refers to no tensor", NULL);
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_link_node(g, "l", HAP_OP_RELU, &x, 1, IDS(5), 1, NULL, 0, &err),
               HAP_EINVAL);
  expect_msg(&err, "node 'l'", "output 0 refers to no tensor");
  hap_graph_destroy(g);
}

Test(graph, tensor_with_non_positive_dim) {
  hap_graph *g = new_graph();
  hap_err err = {0};
  int32_t id;
  cr_assert_eq(hap_graph_add_tensor(g, "z", HAP_TENSOR_INPUT, HAP_F32, &SHAPE(4, 0), &id, &err),
               HAP_EINVAL);
  expect_msg(&err, "tensor 'z'", "shape[1] is 0, expected a positive size");
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_add_tensor(g, "n", HAP_TENSOR_PARAMETER, HAP_F32, &SHAPE(-2), &id, &err),
               HAP_EINVAL);
  expect_msg(&err, "tensor 'n'", "shape[0] is -2");
  hap_err_clear(&err);
  hap_shape deep = {.rank = HAP_MAX_DIMS + 1};
  cr_assert_eq(hap_graph_add_tensor(g, "d", HAP_TENSOR_INPUT, HAP_F32, &deep, &id, &err),
               HAP_EINVAL);
  expect_msg(&err, "tensor 'd'", "rank 9, expected 0..8");
  cr_assert_eq(g->n_tensors, 0);
  hap_graph_destroy(g);
}

Test(graph, tensor_bytes_overflow) {
  hap_graph *g = new_graph();
  hap_err err = {0};
  int32_t id;
  /* 2^62 elements fit in int64, 2^64 bytes do not */
  cr_assert_eq(hap_graph_add_tensor(g, "huge", HAP_TENSOR_PARAMETER, HAP_F32,
                                    &SHAPE(INT64_C(1) << 62), &id, &err),
               HAP_EOVERFLOW);
  expect_msg(&err, "tensor 'huge'", "more bytes than int64 holds");
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_add_tensor(g, "wide", HAP_TENSOR_INPUT, HAP_BOOL,
                                    &SHAPE(INT64_C(1) << 32, INT64_C(1) << 32), &id, &err),
               HAP_EOVERFLOW);
  expect_msg(&err, "tensor 'wide'", "more bytes than int64 holds");
  cr_assert_eq(g->n_tensors, 0);
  hap_graph_destroy(g);
}

Test(graph, node_output_overflow) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(INT64_C(1) << 40, 1));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(INT64_C(1) << 30, 1));
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_node(g, "fc", HAP_OP_LINEAR, IDS(x, w), 2, NULL, NULL, NULL, &err),
               HAP_EOVERFLOW);
  expect_msg(&err, "node 'fc'", "more bytes than int64 holds");
  hap_graph_destroy(g);
}

/* A failed add must leave no trace: the name stays free and finds nothing. */
Test(graph, failed_add_tensor_leaves_no_name) {
  hap_graph *g = new_graph();
  hap_err err = {0};
  int32_t id;
  cr_assert_eq(hap_graph_add_tensor(g, "huge", HAP_TENSOR_PARAMETER, HAP_F32,
                                    &SHAPE(INT64_C(1) << 62), &id, &err),
               HAP_EOVERFLOW);
  f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  cr_assert_eq(hap_graph_find_tensor(g, "huge"), -1);
  f32(g, "huge", HAP_TENSOR_PARAMETER, SHAPE(4));
  hap_graph_destroy(g);
}

/* A failed add_node must leave no node behind (an output-name clash is detected up front). */
Test(graph, failed_add_node_leaves_no_node) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  hap_err err = {0};
  cr_assert_eq(
      hap_graph_add_node(g, "r", HAP_OP_RELU, &x, 1, NULL, (const char *const[]){"x"}, NULL, &err),
      HAP_EINVAL);
  expect_msg(&err, "node 'r'", "output tensor name 'x'");
  cr_assert_eq(g->n_nodes, 0);
  cr_assert_eq(hap_graph_find_node(g, "r"), -1);
  hap_graph_destroy(g);
}

/* ---- validator rejections ------------------------------------------------------------------ */

Test(graph, output_that_is_a_parameter) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4));
  link_n(g, "r", HAP_OP_RELU, &x, 1, &w, 1, 0);
  expect_invalid(g, HAP_EINVAL, "nodes[0] 'r' (relu)",
                 "output 'w' is a parameter, expected an activation");
  hap_graph_destroy(g);
}

Test(graph, activation_produced_twice) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  int32_t a = f32(g, "a", HAP_TENSOR_ACTIVATION, SHAPE(4));
  link_n(g, "n1", HAP_OP_RELU, &x, 1, &a, 1, 0);
  link_n(g, "n2", HAP_OP_TANH, &x, 1, &a, 1, 0);
  expect_invalid(g, HAP_EINVAL, "nodes[1] 'n2' (tanh)",
                 "output 'a' is already produced by nodes[0] 'n1'");
  hap_graph_destroy(g);
}

Test(graph, output_listed_twice) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(2, 3, 4));
  int32_t w = f32(g, "wg", HAP_TENSOR_PARAMETER, SHAPE(4, 5));
  int32_t m = f32(g, "m", HAP_TENSOR_ACTIVATION, SHAPE(2, 3, 5, 6));
  hap_err err = {0};
  cr_assert_eq(
      hap_graph_link_node(g, "gate", HAP_OP_TOP2_GATING, IDS(x, w), 2, IDS(m, m), 2, NULL, 0, &err),
      HAP_OK);
  expect_invalid(g, HAP_EINVAL, "'gate'", "lists output 'm' twice");
  hap_graph_destroy(g);
}

Test(graph, activation_never_produced) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4));
  f32(g, "orphan", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t y = node(g, "y", HAP_OP_MUL, IDS(x, w), 2, NULL);
  set_loss(g, node(g, "loss", HAP_OP_SUM, &y, 1, NULL));
  expect_invalid(g, HAP_EINVAL, "tensor 'orphan' is an activation that no node produces", NULL);
  hap_graph_destroy(g);
}

Test(graph, two_node_cycle) {
  hap_graph *g = new_graph();
  int32_t a = f32(g, "a", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t b = f32(g, "b", HAP_TENSOR_ACTIVATION, SHAPE(4));
  link_n(g, "n0", HAP_OP_RELU, &a, 1, &b, 1, 0);
  link_n(g, "n1", HAP_OP_TANH, &b, 1, &a, 1, 0);
  hap_err err = {0};
  cr_assert_eq(hap_graph_validate(g, &err), HAP_EINVAL);
  expect_msg(&err, "cycle", NULL);
  cr_assert(strstr(err.msg, "'n0'") != NULL || strstr(err.msg, "'n1'") != NULL, "%s", err.msg);
  hap_graph_destroy(g);
}

/* The first unsorted node only depends on the cycle; the report must name a node on it. */
Test(graph, cycle_reported_on_the_cycle) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  int32_t a = f32(g, "a", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t b = f32(g, "b", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t c = f32(g, "c", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t p = f32(g, "p", HAP_TENSOR_ACTIVATION, SHAPE(4));
  link_n(g, "downstream", HAP_OP_RELU, &a, 1, &c, 1, 0);
  link_n(g, "feed", HAP_OP_RELU, &x, 1, &p, 1, 0);
  link_n(g, "loop_add", HAP_OP_ADD, IDS(p, b), 2, &a, 1, 0);
  link_n(g, "loop_relu", HAP_OP_RELU, &a, 1, &b, 1, 0);
  hap_err err = {0};
  cr_assert_eq(hap_graph_validate(g, &err), HAP_EINVAL);
  expect_msg(&err, "cycle", "'loop_");
  cr_assert_null(strstr(err.msg, "downstream"), "%s", err.msg);
  cr_assert_null(strstr(err.msg, "feed"), "%s", err.msg);
  hap_graph_destroy(g);
}

Test(graph, self_loop) {
  hap_graph *g = new_graph();
  int32_t a = f32(g, "a", HAP_TENSOR_ACTIVATION, SHAPE(4));
  link_n(g, "me", HAP_OP_RELU, &a, 1, &a, 1, 0);
  expect_invalid(g, HAP_EINVAL, "'me'", "cycle");
  hap_graph_destroy(g);
}

/* Nodes listed out of order are sorted: lowest index first among the ready ones. */
Test(graph, unordered_nodes_are_sorted_stably) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(3, 8));
  int32_t h = f32(g, "h", HAP_TENSOR_ACTIVATION, SHAPE(4, 3));
  int32_t y = f32(g, "y", HAP_TENSOR_ACTIVATION, SHAPE(4, 3));
  int32_t f1 = f32(g, "f1", HAP_TENSOR_ACTIVATION, SHAPE(4, 8));
  int32_t f2 = f32(g, "f2", HAP_TENSOR_ACTIVATION, SHAPE(4, 8));
  int32_t loss = f32(g, "loss", HAP_TENSOR_ACTIVATION, SCALAR);
  link_n(g, "late", HAP_OP_TANH, &h, 1, &y, 1, 0);           /* 0: needs 2 */
  link_n(g, "free1", HAP_OP_RELU, &x, 1, &f1, 1, 0);         /* 1: ready */
  link_n(g, "early", HAP_OP_LINEAR, IDS(x, w), 2, &h, 1, 0); /* 2: ready */
  link_n(g, "free2", HAP_OP_RELU, &x, 1, &f2, 1, 0);         /* 3: ready */
  link_n(g, "sum", HAP_OP_SUM, &y, 1, &loss, 1, 0);          /* 4: needs 0 */
  set_loss(g, loss);
  expect_valid(g);
  static const char *const order[] = {"free1", "early", "late", "free2", "sum"};
  for (int i = 0; i < 5; i++) {
    cr_assert_str_eq(g->nodes[i].name, order[i]);
    cr_assert_eq(hap_graph_find_node(g, order[i]), i);
    cr_assert_eq(g->tensors[g->nodes[i].outputs[0]].producer, i);
  }
  cr_assert_eq(g->tensors[h].producer, 1);
  cr_assert(grad_of(g, "y"));
  cr_assert_not(grad_of(g, "f1"));
  hap_graph_destroy(g);
}

Test(graph, declared_shape_differs_from_inferred) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(16, 8));
  int32_t h = f32(g, "h", HAP_TENSOR_ACTIVATION, SHAPE(4, 5));
  link_n(g, "fc", HAP_OP_LINEAR, IDS(x, w), 2, &h, 1, 0);
  expect_invalid(g, HAP_EINVAL, "nodes[0] 'fc' (linear): output 'h'",
                 "declared with shape [4, 5], but the inputs give [4, 16]");
  hap_graph_destroy(g);
}

Test(graph, declared_dtype_differs_from_inferred) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t h = tensor(g, "h", HAP_TENSOR_ACTIVATION, HAP_F16, SHAPE(4, 8));
  link_n(g, "r", HAP_OP_RELU, &x, 1, &h, 1, 0);
  expect_invalid(g, HAP_EINVAL, "'r'", "output 'h' is declared float16, but the op gives float32");
  hap_graph_destroy(g);
}

Test(graph, linked_node_with_bad_arity_or_attrs) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  int32_t h = f32(g, "h", HAP_TENSOR_ACTIVATION, SHAPE(4, 8));
  link_n(g, "r", HAP_OP_RELU, IDS(x, x), 2, &h, 1, 0);
  expect_invalid(g, HAP_EINVAL, "nodes[0] 'r' (relu)", "takes 1 inputs, got 2");
  hap_graph_destroy(g);

  g = new_graph();
  x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  h = f32(g, "h", HAP_TENSOR_ACTIVATION, SHAPE(8, 4));
  link_n(g, "t", HAP_OP_TRANSPOSE, &x, 1, &h, 1, 0); /* attrs NULL: dim0/dim1 missing */
  expect_invalid(g, HAP_EINVAL, "nodes[0] 't' (transpose)", "needs attribute 'dim0'");
  hap_graph_destroy(g);

  g = new_graph();
  x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4, 8));
  h = f32(g, "h", HAP_TENSOR_ACTIVATION, SHAPE(4, 8));
  int32_t h2 = f32(g, "h2", HAP_TENSOR_ACTIVATION, SHAPE(4, 8));
  link_n(g, "r", HAP_OP_RELU, &x, 1, IDS(h, h2), 2, 0);
  expect_invalid(g, HAP_EINVAL, "nodes[0] 'r' (relu)", "has 2 outputs, expected 1");
  hap_graph_destroy(g);
}

Test(graph, missing_loss) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4));
  int32_t y = node(g, "y", HAP_OP_MUL, IDS(x, w), 2, NULL);
  node(g, "s", HAP_OP_SUM, &y, 1, NULL);
  expect_invalid(g, HAP_EINVAL, "no loss tensor", NULL);
  hap_graph_destroy(g);
}

Test(graph, non_scalar_loss) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4));
  set_loss(g, node(g, "y", HAP_OP_MUL, IDS(x, w), 2, NULL));
  expect_invalid(g, HAP_EINVAL, "loss 'y' has rank 1, expected a scalar", NULL);
  hap_graph_destroy(g);
}

Test(graph, loss_must_be_a_float_activation) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SCALAR);
  set_loss(g, x);
  expect_invalid(g, HAP_EINVAL, "loss 'x'", "expected an activation");
  hap_graph_destroy(g);

  g = new_graph();
  int32_t ids = tensor(g, "ids", HAP_TENSOR_PARAMETER, HAP_I64, SHAPE(1));
  hap_attrs a;
  hap_err err = {0};
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", NULL, 0, &err), HAP_OK);
  set_loss(g, node(g, "count", HAP_OP_RESHAPE, &ids, 1, &a)); /* [1] -> [] int64 */
  expect_invalid(g, HAP_EINVAL, "loss 'count' is int64, expected a floating-point type", NULL);
  hap_graph_destroy(g);
}

Test(graph, loss_not_depending_on_parameters) {
  hap_graph *g = new_graph();
  int32_t x = f32(g, "x", HAP_TENSOR_INPUT, SHAPE(4));
  f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4)); /* present but unused */
  int32_t r = node(g, "r", HAP_OP_RELU, &x, 1, NULL);
  set_loss(g, node(g, "s", HAP_OP_SUM, &r, 1, NULL));
  expect_invalid(g, HAP_EINVAL, "loss 's' does not depend on any parameter", NULL);
  hap_graph_destroy(g);
}

Test(graph, segments_from_builder) {
  hap_graph *g = new_graph();
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4));
  int32_t a = node(g, "a", HAP_OP_RELU, &w, 1, NULL);
  hap_graph_begin_segment(g);
  hap_graph_begin_segment(g); /* an empty segment in between is allowed */
  int32_t b = node(g, "b", HAP_OP_TANH, &a, 1, NULL);
  cr_assert_eq(g->n_segments, 3);
  set_loss(g, node(g, "loss", HAP_OP_SUM, &b, 1, NULL));
  expect_valid(g);
  cr_assert_eq(g->nodes[node_id(g, "a")].segment, 0);
  cr_assert_eq(g->nodes[node_id(g, "b")].segment, 2);
  cr_assert_eq(g->nodes[node_id(g, "loss")].segment, 2);
  cr_assert_eq(g->n_segments, 3);
  hap_graph_destroy(g);
}

Test(graph, segments_out_of_order) {
  hap_graph *g = new_graph();
  int32_t w = f32(g, "w", HAP_TENSOR_PARAMETER, SHAPE(4));
  int32_t h = f32(g, "h", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t y = f32(g, "y", HAP_TENSOR_ACTIVATION, SHAPE(4));
  int32_t loss = f32(g, "loss", HAP_TENSOR_ACTIVATION, SCALAR);
  link_n(g, "first", HAP_OP_RELU, &w, 1, &h, 1, 1);
  link_n(g, "second", HAP_OP_TANH, &h, 1, &y, 1, 0);
  link_n(g, "sum", HAP_OP_SUM, &y, 1, &loss, 1, 1);
  set_loss(g, loss);
  expect_invalid(g, HAP_EINVAL, "nodes[1] 'second' (tanh)", "segment 0 comes after segment 1");
  hap_graph_destroy(g);

  g = new_graph();
  hap_err err = {0};
  cr_assert_eq(hap_graph_link_node(g, "neg", HAP_OP_RELU, NULL, 0, NULL, 0, NULL, -1, &err),
               HAP_EINVAL);
  expect_msg(&err, "node 'neg'", "segment -1, expected >= 0");
  hap_graph_destroy(g);
}

/* A reader that bypasses the builder could store bad shapes; validate re-checks every tensor. */
Test(graph, validate_rechecks_tensor_shapes) {
  hap_graph *g = mlp();
  int32_t w1 = hap_graph_find_tensor(g, "w1");
  g->tensors[w1].shape.dims[1] = 0;
  expect_invalid(g, HAP_EINVAL, "tensor 'w1'", "shape[1] is 0, expected a positive size");
  g->tensors[w1].shape = SHAPE(INT64_C(1) << 31, INT64_C(1) << 31);
  expect_invalid(g, HAP_EOVERFLOW, "tensor 'w1'", "more bytes than int64 holds");
  hap_graph_destroy(g);
}

Test(graph, destroy_null_and_empty) {
  hap_graph_destroy(NULL);
  hap_graph *g = new_graph();
  expect_invalid(g, HAP_EINVAL, "no loss tensor", NULL);
  hap_graph_destroy(g);
}
