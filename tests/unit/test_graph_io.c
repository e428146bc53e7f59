/* test_graph_io.c — hap-graph reader/writer, the JSON writer and atomic file I/O. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/json_write.h"
#include "model/graph.h"
#include "model/graph_io.h"
#include "test_util.h"

#define GOOD_DIR HAP_TEST_DATA "/graphs/good"
#define BAD_DIR  HAP_TEST_DATA "/graphs/bad"

/* ---- helpers -------------------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len) {
  char *data;
  hap_err err = {0};
  cr_assert_eq(hap_read_file(path, &data, len, &err), HAP_OK, "%s", err.msg);
  return data;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

static int32_t tensor(hap_graph *g, const char *name, hap_tensor_kind kind, hap_dtype dtype,
                      int32_t rank, const int64_t *dims) {
  hap_shape s = {.rank = rank};
  memcpy(s.dims, dims, (size_t)rank * sizeof *dims);
  int32_t id;
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_tensor(g, name, kind, dtype, &s, &id, &err), HAP_OK, "%s", err.msg);
  return id;
}

static int32_t node(hap_graph *g, const char *name, hap_op op, const int32_t *in, int32_t n_in,
                    const hap_attrs *attrs) {
  int32_t out[HAP_MAX_OP_OUTPUTS];
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_node(g, name, op, in, n_in, attrs, NULL, out, &err), HAP_OK, "%s",
               err.msg);
  return out[0];
}

/* An MLP over three segments touching every attribute type, all tensor kinds, x + x and a
 * float attribute of -0.0, built with the builder API. */
static hap_graph *build_graph(void) {
  hap_graph *g = hap_graph_create("builder-mlp");
  hap_err err = {0};
  cr_assert_not_null(g);
  cr_assert_eq(hap_graph_set_source(g, "test_graph_io build_graph \"quoted\"\tand tabbed"), HAP_OK);
  int32_t x = tensor(g, "x", HAP_TENSOR_INPUT, HAP_F32, 2, (int64_t[]){8, 16});
  int32_t labels = tensor(g, "labels", HAP_TENSOR_INPUT, HAP_I64, 1, (int64_t[]){8});
  int32_t w0 = tensor(g, "fc0.weight", HAP_TENSOR_PARAMETER, HAP_F32, 2, (int64_t[]){32, 16});
  int32_t b0 = tensor(g, "fc0.bias", HAP_TENSOR_PARAMETER, HAP_F32, 1, (int64_t[]){32});
  int32_t w1 = tensor(g, "fc1.weight", HAP_TENSOR_PARAMETER, HAP_F32, 2, (int64_t[]){10, 32});
  int32_t mask = tensor(g, "mask", HAP_TENSOR_BUFFER, HAP_F32, 2, (int64_t[]){8, 10});

  int32_t fc0 = node(g, "fc0", HAP_OP_LINEAR, (int32_t[]){x, w0, b0}, 3, NULL);
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_ADD);
  cr_assert_eq(hap_attrs_set_float(&a, HAP_OP_ADD, "scalar", -0.0, &err), HAP_OK);
  int32_t dbl = node(g, "double", HAP_OP_ADD, (int32_t[]){fc0, fc0}, 2, &a);
  int32_t act = node(g, "act0", HAP_OP_GELU, &dbl, 1, NULL);

  hap_graph_begin_segment(g);
  int32_t fc1 = node(g, "fc1", HAP_OP_LINEAR, (int32_t[]){act, w1}, 2, NULL);
  hap_attrs_init(&a, HAP_OP_DROPOUT);
  cr_assert_eq(hap_attrs_set_float(&a, HAP_OP_DROPOUT, "p", 0.1 + 0.2, &err), HAP_OK);
  int32_t drop = node(g, "drop", HAP_OP_DROPOUT, &fc1, 1, &a);
  int32_t masked = node(g, "masked", HAP_OP_MUL, (int32_t[]){drop, mask}, 2, NULL);

  hap_graph_begin_segment(g);
  hap_attrs_init(&a, HAP_OP_CROSS_ENTROPY);
  cr_assert_eq(hap_attrs_set_str(&a, HAP_OP_CROSS_ENTROPY, "reduction", "sum", &err), HAP_OK);
  int32_t ce = node(g, "ce", HAP_OP_CROSS_ENTROPY, (int32_t[]){masked, labels}, 2, &a);
  hap_attrs_init(&a, HAP_OP_SUM);
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_SUM, "dims", (int64_t[]){0, -1}, 2, &err), HAP_OK);
  cr_assert_eq(hap_attrs_set_int(&a, HAP_OP_SUM, "keepdim", 0, &err), HAP_OK);
  int32_t reg = node(g, "reg", HAP_OP_SUM, &fc1, 1, &a);
  hap_attrs_init(&a, HAP_OP_MUL);
  cr_assert_eq(hap_attrs_set_float(&a, HAP_OP_MUL, "scalar", 1e-300, &err), HAP_OK);
  int32_t scaled = node(g, "reg.scaled", HAP_OP_MUL, &reg, 1, &a);
  int32_t loss = node(g, "loss", HAP_OP_ADD, (int32_t[]){ce, scaled}, 2, NULL);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(g->n_segments, 3);
  return g;
}

static void assert_graphs_equal(const hap_graph *a, const hap_graph *b) {
  cr_assert_str_eq(a->name, b->name);
  cr_assert_eq(a->source == NULL, b->source == NULL);
  if (a->source)
    cr_assert_str_eq(a->source, b->source);
  cr_assert_eq(a->n_tensors, b->n_tensors);
  for (int32_t t = 0; t < a->n_tensors; t++) {
    const hap_tensor *x = &a->tensors[t], *y = &b->tensors[t];
    cr_assert_str_eq(x->name, y->name, "tensors[%d]", t);
    cr_assert_eq(x->kind, y->kind, "tensors[%d] '%s' kind", t, x->name);
    cr_assert_eq(x->dtype, y->dtype, "tensors[%d] '%s' dtype", t, x->name);
    cr_assert(hap_shape_eq(&x->shape, &y->shape), "tensors[%d] '%s' shape", t, x->name);
    cr_assert_eq(x->producer, y->producer, "tensors[%d] '%s' producer", t, x->name);
    cr_assert_eq(x->requires_grad, y->requires_grad, "tensors[%d] '%s' requires_grad", t, x->name);
  }
  cr_assert_eq(a->n_nodes, b->n_nodes);
  for (int32_t n = 0; n < a->n_nodes; n++) {
    const hap_node *x = &a->nodes[n], *y = &b->nodes[n];
    cr_assert_str_eq(x->name, y->name, "nodes[%d]", n);
    cr_assert_eq(x->op, y->op, "nodes[%d] '%s' op", n, x->name);
    cr_assert_eq(x->segment, y->segment, "nodes[%d] '%s' segment", n, x->name);
    cr_assert_eq(x->n_inputs, y->n_inputs, "nodes[%d] '%s' n_inputs", n, x->name);
    cr_assert_eq(x->n_outputs, y->n_outputs, "nodes[%d] '%s' n_outputs", n, x->name);
    for (int i = 0; i < x->n_inputs; i++)
      cr_assert_eq(x->inputs[i], y->inputs[i], "nodes[%d] '%s' inputs[%d]", n, x->name, i);
    for (int o = 0; o < x->n_outputs; o++)
      cr_assert_eq(x->outputs[o], y->outputs[o], "nodes[%d] '%s' outputs[%d]", n, x->name, o);
    cr_assert(hap_attrs_eq(&x->attrs, &y->attrs, x->op), "nodes[%d] '%s' attrs", n, x->name);
  }
  cr_assert_eq(a->loss, b->loss);
  cr_assert_eq(a->n_segments, b->n_segments);
}

/* ---- round trip ----------------------------------------------------------------------------- */

Test(graph_io, builder_graph_round_trips_exactly) {
  char *dir = tmpdir_make("graph_io");
  char *p1 = path_in(dir, "g1.json"), *p2 = path_in(dir, "g2.json");
  hap_graph *g = build_graph();
  hap_err err = {0};
  cr_assert_eq(hap_graph_write_file(g, p1, &err), HAP_OK, "%s", err.msg);

  hap_graph *back;
  cr_assert_eq(hap_graph_read_file(p1, &back, &err), HAP_OK, "%s", err.msg);
  assert_graphs_equal(g, back);
  int32_t dbl = hap_graph_find_node(back, "double");
  cr_assert(dbl >= 0);
  cr_assert(signbit(back->nodes[dbl].attrs.v[0].u.f), "-0.0 keeps its sign");
  cr_assert_eq(back->nodes[dbl].inputs[0], back->nodes[dbl].inputs[1], "x + x survives");

  cr_assert_eq(hap_graph_write_file(back, p2, &err), HAP_OK, "%s", err.msg);
  size_t n1, n2;
  char *s1 = slurp(p1, &n1), *s2 = slurp(p2, &n2);
  cr_assert_eq(n1, n2);
  cr_assert(memcmp(s1, s2, n1) == 0, "second write differs:\n%s\n---\n%s", s1, s2);
  cr_assert_eq(count_entries(dir), 2, "no temporary files are left behind");

  free(s1);
  free(s2);
  hap_graph_destroy(g);
  hap_graph_destroy(back);
  unlink(p1);
  unlink(p2);
  rmdir(dir);
  free(p1);
  free(p2);
  free(dir);
}

Test(graph_io, output_is_canonical) {
  hap_graph *g = build_graph();
  char *s = graph_json(g);
  const char *head =
      "{\n"
      "  \"format\": \"hap-graph\",\n"
      "  \"version\": \"1.0\",\n"
      "  \"name\": \"builder-mlp\",\n"
      "  \"source\": \"test_graph_io build_graph \\\"quoted\\\"\\u0009and tabbed\",\n"
      "  \"tensors\": [\n"
      "    {\"name\": \"x\", \"kind\": \"input\", \"dtype\": \"float32\", "
      "\"shape\": [8, 16]},\n";
  cr_assert(strncmp(s, head, strlen(head)) == 0, "got:\n%s", s);
  cr_assert_not_null(strstr(s,
                            "\n    {\"name\": \"double\", \"op\": \"add\", \"inputs\": [\"fc0\", "
                            "\"fc0\"], \"outputs\": [\"double\"], \"attrs\": {\"scalar\": -0.0}, "
                            "\"segment\": 0},\n"),
                     "got:\n%s", s);
  cr_assert_not_null(strstr(s, "\"attrs\": {\"p\": 0.30000000000000004}, \"segment\": 1}"));
  cr_assert_not_null(strstr(s, "\"attrs\": {\"dims\": [0, -1], \"keepdim\": false}"));
  cr_assert_not_null(strstr(s, "\"op\": \"linear\", \"inputs\": [\"x\", \"fc0.weight\", "
                               "\"fc0.bias\"], \"outputs\": [\"fc0\"], \"attrs\": {}, "));
  cr_assert_not_null(strstr(s, "\"attrs\": {\"reduction\": \"sum\"}, \"segment\": 2}"));
  const char *tail = "\n  ],\n  \"loss\": \"loss\"\n}\n";
  cr_assert_str_eq(s + strlen(s) - strlen(tail), tail);
  char *again = graph_json(g);
  cr_assert_str_eq(s, again, "writing is deterministic");
  free(s);
  free(again);
  hap_graph_destroy(g);
}

Test(graph_io, defaults_are_written_and_read_back) {
  hap_graph *g = hap_graph_create("defaults");
  hap_err err = {0};
  int32_t x = tensor(g, "x", HAP_TENSOR_INPUT, HAP_F32, 2, (int64_t[]){4, 8});
  int32_t w = tensor(g, "w", HAP_TENSOR_PARAMETER, HAP_F32, 2, (int64_t[]){8, 8});
  int32_t h = node(g, "h", HAP_OP_LINEAR, (int32_t[]){x, w}, 2, NULL);
  int32_t d = node(g, "d", HAP_OP_DROPOUT, &h, 1, NULL);
  int32_t sm = node(g, "sm", HAP_OP_SOFTMAX, &d, 1, NULL);
  int32_t loss = node(g, "loss", HAP_OP_MEAN, &sm, 1, NULL);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
  cr_assert_null(g->source);
  char *s = graph_json(g);
  cr_assert_null(strstr(s, "\"source\""), "no source key when the graph has none");
  cr_assert_not_null(strstr(s, "\"attrs\": {\"p\": 0.5}"), "got:\n%s", s);
  cr_assert_not_null(strstr(s, "\"attrs\": {\"dim\": -1}"));
  hap_graph *back;
  cr_assert_eq(hap_graph_from_json(s, strlen(s), "mem", &back, &err), HAP_OK, "%s", err.msg);
  assert_graphs_equal(g, back);
  char *s2 = graph_json(back);
  cr_assert_str_eq(s, s2);
  free(s);
  free(s2);
  hap_graph_destroy(g);
  hap_graph_destroy(back);
}

Test(graph_io, unvalidated_graph_is_not_written) {
  hap_graph *g = hap_graph_create("noloss");
  tensor(g, "x", HAP_TENSOR_INPUT, HAP_F32, 1, (int64_t[]){4});
  char *dir = tmpdir_make("graph_io");
  char *p = path_in(dir, "g.json");
  hap_err err = {0};
  cr_assert_eq(hap_graph_write_file(g, p, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, p), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "no loss"), "%s", err.msg);
  cr_assert_eq(count_entries(dir), 0);
  rmdir(dir);
  free(p);
  free(dir);
  hap_graph_destroy(g);
}

/* ---- good files ----------------------------------------------------------------------------- */

/* Files written in canonical form: reading and writing them gives the same bytes. */
static const char *const canonical_good[] = {"mlp2.json", "add_self.json", "segments.json",
                                             "attrs.json"};

Test(graph_io, good_files_load_and_canonical_ones_round_trip) {
  int n = 0;
  DIR *d = opendir(GOOD_DIR);
  cr_assert_not_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    char *path = path_in(GOOD_DIR, e->d_name);
    hap_graph *g;
    hap_err err = {0};
    cr_expect_eq(hap_graph_read_file(path, &g, &err), HAP_OK, "%s", err.msg);
    n++;
    if (err.status == HAP_OK) {
      cr_expect_gt(g->n_nodes, 0);
      cr_expect_geq(g->loss, 0);
      hap_graph_destroy(g);
    }
    free(path);
  }
  closedir(d);
  cr_assert_geq(n, 4);

  for (size_t i = 0; i < sizeof canonical_good / sizeof *canonical_good; i++) {
    char *path = path_in(GOOD_DIR, canonical_good[i]);
    size_t len;
    char *text = slurp(path, &len);
    hap_graph *g;
    hap_err err = {0};
    cr_assert_eq(hap_graph_from_json(text, len, path, &g, &err), HAP_OK, "%s", err.msg);
    char *out = graph_json(g);
    cr_expect_str_eq(out, text, "%s is not in canonical form", canonical_good[i]);
    free(out);
    free(text);
    free(path);
    hap_graph_destroy(g);
  }
}

Test(graph_io, good_file_contents) {
  hap_graph *g;
  hap_err err = {0};
  cr_assert_eq(hap_graph_read_file(GOOD_DIR "/mlp2.json", &g, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(g->name, "mlp2");
  cr_assert_eq(g->n_tensors, 10);
  cr_assert_eq(g->n_nodes, 5);
  cr_assert_eq(g->nodes[0].op, HAP_OP_LINEAR);
  cr_assert_eq(g->nodes[1].op, HAP_OP_SIGMOID);
  cr_assert_eq(g->nodes[4].op, HAP_OP_SUM);
  cr_assert_str_eq(g->tensors[g->loss].name, "loss");
  cr_assert_eq(g->tensors[2].kind, HAP_TENSOR_PARAMETER);
  cr_assert(g->tensors[2].requires_grad);
  cr_assert_not(g->tensors[0].requires_grad);
  hap_graph_destroy(g);

  cr_assert_eq(hap_graph_read_file(GOOD_DIR "/segments.json", &g, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(g->n_segments, 3);
  cr_assert_eq(g->nodes[0].segment, 0);
  cr_assert_eq(g->nodes[2].segment, 1);
  cr_assert_eq(g->nodes[5].segment, 2);
  hap_graph_destroy(g);

  /* version 1.1: unknown keys ignored, nodes sorted, attrs and segment defaulted */
  cr_assert_eq(hap_graph_read_file(GOOD_DIR "/unordered_v1_1.json", &g, &err), HAP_OK, "%s",
               err.msg);
  cr_assert_str_eq(g->nodes[0].name, "h");
  cr_assert_str_eq(g->nodes[1].name, "d");
  cr_assert_str_eq(g->nodes[2].name, "loss");
  cr_assert_eq(g->nodes[1].inputs[0], g->nodes[1].inputs[1]);
  cr_assert_eq(g->nodes[2].attrs.v[0].u.ints.n, 0, "sum over all dims by default");
  cr_assert_eq(g->nodes[2].segment, 0);
  hap_graph_destroy(g);
}

/* ---- bad files ------------------------------------------------------------------------------ */

typedef struct bad_case {
  const char *file;
  const char *expect; /* substring of the message after the file name */
} bad_case;

static const bad_case bad_cases[] = {
    {"truncated.json", "line "},
    {"empty.json", "the file is empty"},
    {"root_array.json", "root: expected a hap-graph object"},
    {"root_scalar.json", "line 1, column"},
    {"wrong_format.json", "format: is \"hap-plan\", expected \"hap-graph\""},
    {"missing_format.json", "format: missing"},
    {"newer_major.json", "version: the file was written by a newer hap (format version 2.0); "
                         "this build reads 1.x"},
    {"version_number.json", "version: expected a version string"},
    {"version_malformed.json", "version: is \"1\""},
    {"missing_tensors.json", "tensors: missing"},
    {"tensors_not_array.json", "tensors: expected an array"},
    {"unknown_dtype.json", "tensors[1].dtype: unknown dtype 'float8'"},
    {"unknown_kind.json", "tensors[1].kind: unknown kind 'weight'"},
    {"negative_dim.json", "tensors[0].shape[1]: is -8, expected a positive integer"},
    {"zero_dim.json", "tensors[0].shape[0]: is 0, expected a positive integer"},
    {"real_dim.json", "tensors[0].shape[0]: expected a positive integer, got a real number"},
    {"shape_not_array.json", "tensors[0].shape: expected an array"},
    {"numel_overflow.json", "tensors[0].shape: [1048576, 1048576, 1048576, 1048576] of float32 "
                            "has more bytes than int64 holds"},
    {"bytes_overflow.json", "tensors[0].shape: [3037000499, 3037000499] of float32"},
    {"nine_dims.json", "tensors[0].shape: has 9 dims, expected at most 8"},
    {"huge_integer.json", "too big integer"},
    {"duplicate_tensor.json", "tensors[6].name: tensor 'w' is already defined by tensors[1]"},
    {"name_control_char.json", "tensors[0].name: 'x\\x0ay' contains a control character"},
    {"empty_name.json", "tensors[0].name: is empty"},
    {"unknown_key.json", "tensors[0].shpae: unknown key"},
    {"grad_on_parameter.json", "tensors[1].grad: only a floating-point input can want a gradient"},
    {"grad_not_bool.json", "tensors[0].grad: expected true or false, got an integer"},
    {"unknown_op.json", "nodes[0].op: unknown op 'linaer'"},
    {"dangling_input.json", "nodes[1].inputs[0]: unknown tensor 'fc9', expected the name of a "
                            "tensor in \"tensors\""},
    {"output_parameter.json", "nodes[0].outputs[0]: 'w' is a parameter, expected an activation"},
    {"produced_twice.json", "nodes[1].outputs[0]: activation 'h' is already produced by nodes[0]"},
    {"never_produced.json", "tensors[6]: activation 'orphan' is produced by no node"},
    {"cycle.json", "nodes[0] 'fc' (linear): is part of a cycle"},
    {"shape_mismatch.json", "output 'h' is declared with shape [4, 9], but the inputs give [4, 8]"},
    {"dtype_mismatch.json", "output 'h' is declared float16, but the op gives float32"},
    {"attr_wrong_type.json", "nodes[2].attrs.dims: expected an array of integers"},
    {"attr_bool_as_int.json", "nodes[2].attrs.keepdim: expected true or false"},
    {"attr_unknown.json", "nodes[1].attrs.alpha: op 'sigmoid' takes no attributes"},
    {"attr_missing_required.json", "nodes[1].attrs: missing required attribute 'dim1'"},
    {"attr_string_too_long.json", "nodes[1].attrs.equation: attribute 'equation' is longer"},
    {"attr_huge_real.json", "real number overflow"},
    {"missing_loss.json", "loss: missing"},
    {"loss_unknown.json", "loss: unknown tensor 'los'"},
    {"loss_not_scalar.json", "loss 'y' has rank 2, expected a scalar"},
    {"loss_parameter.json", "loss 'w' is a parameter, expected an activation"},
    {"segments_out_of_order.json", "nodes[1] 'act' (sigmoid): segment 0 comes after segment 1"},
    {"segment_negative.json", "nodes[0].segment: is -1"},
    {"segment_huge.json", "nodes[0].segment: is 2147483647"},
    {"too_many_inputs.json", "nodes[1].inputs: has 2 entries, expected 1"},
    {"nine_inputs.json", "nodes[0].inputs: has 9 entries, expected 2 to 3"},
    {"wrong_output_count.json", "nodes[0].outputs: has 2 entries, expected 1"},
    {"duplicate_node.json", "nodes[1].name: node 'fc' is already defined by nodes[0]"},
    {"node_not_object.json", "nodes[1]: expected a node object"},
    {"duplicate_key.json", "duplicate object key"},
    {"nul_byte.json", "line 4, column"},
    {"invalid_utf8.json", "line 4, column"},
    {"deep_nesting.json", "maximum parsing depth"},
};
#define N_BAD (sizeof bad_cases / sizeof *bad_cases)

static const bad_case *find_case(const char *file) {
  for (size_t i = 0; i < N_BAD; i++)
    if (strcmp(bad_cases[i].file, file) == 0)
      return &bad_cases[i];
  return NULL;
}

Test(graph_io, bad_files_fail_with_one_line_naming_file_and_field) {
  for (size_t i = 0; i < N_BAD; i++) {
    char *path = path_in(BAD_DIR, bad_cases[i].file);
    static hap_graph sentinel;
    hap_graph *g = &sentinel; /* must be reset to NULL */
    hap_err err = {0};
    hap_status st = hap_graph_read_file(path, &g, &err);
    cr_expect_neq(st, HAP_OK, "%s was accepted", bad_cases[i].file);
    cr_expect_eq(err.status, st, "%s", bad_cases[i].file);
    cr_expect_null(g, "%s: out is NULL on failure", bad_cases[i].file);
    cr_expect_eq(strncmp(err.msg, path, strlen(path)), 0,
                 "message does not start with the path: %s", err.msg);
    cr_expect_not_null(strstr(err.msg, bad_cases[i].expect), "%s: expected '%s' in: %s",
                       bad_cases[i].file, bad_cases[i].expect, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "message is one line: %s", err.msg);
    if (g != NULL && g != &sentinel)
      hap_graph_destroy(g);
    free(path);
  }
}

Test(graph_io, bad_corpus_is_complete_and_large) {
  DIR *d = opendir(BAD_DIR);
  cr_assert_not_null(d);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    /* the malformed files; expected-errors.txt is tests/check_bad_files.sh's table */
    if (e->d_name[0] == '.' || len < 5 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    cr_expect_not_null(find_case(e->d_name), "%s has no entry in bad_cases", e->d_name);
    n++;
  }
  closedir(d);
  cr_assert_eq(n, N_BAD, "every bad_cases entry has a file");
  cr_assert_geq(n, 20);
}

Test(graph_io, status_codes) {
  hap_graph *g;
  hap_err err = {0};
  cr_assert_eq(hap_graph_read_file(BAD_DIR "/newer_major.json", &g, &err), HAP_EVERSION);
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_read_file(BAD_DIR "/numel_overflow.json", &g, &err), HAP_EOVERFLOW);
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_read_file(BAD_DIR "/truncated.json", &g, &err), HAP_EPARSE);
  hap_err_clear(&err);
  cr_assert_eq(hap_graph_read_file(BAD_DIR "/no_such_file.json", &g, &err), HAP_EIO);
  cr_assert_not_null(strstr(err.msg, BAD_DIR "/no_such_file.json: "), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "No such file or directory"), "%s", err.msg);
}

Test(graph_io, embedded_nul_and_label) {
  static const char text[] = "{\"format\": \"hap-graph\"\0, \"version\": \"1.0\"}";
  hap_graph *g;
  hap_err err = {0};
  cr_assert_neq(hap_graph_from_json(text, sizeof text - 1, "inline", &g, &err), HAP_OK);
  cr_assert_eq(strncmp(err.msg, "inline: line 1, column", 22), 0, "%s", err.msg);
}

/* ---- json_write ----------------------------------------------------------------------------- */

static void assert_double_round_trips(double v) {
  char buf[64];
  hap_format_double(v, buf, sizeof buf);
  double back = strtod(buf, NULL);
  cr_assert(memcmp(&back, &v, sizeof v) == 0, "%.17g written as %s reads back as %.17g", v, buf,
            back);
}

Test(json_write, doubles_round_trip_in_shortest_form) {
  const double vals[] = {0.1,       1e300,   -0.0,     5e-324,   123456789.0,        0.1 + 0.2,
                         1.0 / 3.0, DBL_MAX, -DBL_MIN, 2.5e-308, 9007199254740993.0, 1e-5};
  for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
    assert_double_round_trips(vals[i]);
  char buf[64];
  cr_assert_str_eq(hap_format_double(0.1, buf, sizeof buf), "0.1");
  cr_assert_str_eq(hap_format_double(1e300, buf, sizeof buf), "1e+300");
  cr_assert_str_eq(hap_format_double(123456789.0, buf, sizeof buf), "123456789");
  cr_assert_str_eq(hap_format_double(5e-324, buf, sizeof buf), "4.94065645841247e-324");
  cr_assert_str_eq(hap_format_double(0.1 + 0.2, buf, sizeof buf), "0.30000000000000004");
  cr_assert_str_eq(hap_format_double(-0.0, buf, sizeof buf), "-0");
}

static char *render(void (*body)(hap_jw *), int indent) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  hap_jw w;
  hap_jw_init(&w, f, indent);
  body(&w);
  cr_assert(hap_jw_finish(&w));
  cr_assert_not(hap_jw_failed(&w));
  fclose(f);
  return buf;
}

static void doubles_body(hap_jw *w) {
  hap_jw_begin_array_inline(w);
  hap_jw_double(w, 0.1);
  hap_jw_double(w, 1e300);
  hap_jw_double(w, -0.0);
  hap_jw_double(w, 5e-324);
  hap_jw_double(w, 123456789.0);
  hap_jw_double(w, INFINITY);
  hap_jw_end_array(w);
}

Test(json_write, doubles_stay_reals) {
  char *s = render(doubles_body, 2);
  cr_assert_str_eq(s, "[0.1, 1e+300, -0.0, 4.94065645841247e-324, 123456789.0, null]\n");
  free(s);
}

static void strings_body(hap_jw *w) {
  hap_jw_begin_array_inline(w);
  hap_jw_str(w, "say \"hi\"\\ now");
  hap_jw_str(w, "line1\nline2\ttab\r\x01\x1f end");
  hap_jw_str(w, "caf\xc3\xa9 \xe2\x82\xac");
  hap_jw_str(w, NULL);
  hap_jw_end_array(w);
}

Test(json_write, strings_are_escaped) {
  char *s = render(strings_body, 0);
  cr_assert_str_eq(s, "[\"say \\\"hi\\\"\\\\ now\","
                      "\"line1\\u000aline2\\u0009tab\\u000d\\u0001\\u001f end\","
                      "\"caf\xc3\xa9 \xe2\x82\xac\",null]\n");
  free(s);
}

static void layout_body(hap_jw *w) {
  hap_jw_begin_object(w);
  hap_jw_key(w, "a");
  hap_jw_int(w, -9223372036854775807LL - 1);
  hap_jw_key(w, "empty");
  hap_jw_begin_array(w);
  hap_jw_end_array(w);
  hap_jw_key(w, "rows");
  hap_jw_begin_array(w);
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "shape");
  hap_jw_begin_array(w); /* nested in an inline container: inline too */
  hap_jw_int(w, 2);
  hap_jw_int(w, 3);
  hap_jw_end_array(w);
  hap_jw_key(w, "ok");
  hap_jw_bool(w, true);
  hap_jw_key(w, "o");
  hap_jw_begin_object(w);
  hap_jw_end_object(w);
  hap_jw_end_object(w);
  hap_jw_null(w);
  hap_jw_end_array(w);
  hap_jw_end_object(w);
}

Test(json_write, indentation_and_inline_containers) {
  char *s = render(layout_body, 2);
  cr_assert_str_eq(s, "{\n"
                      "  \"a\": -9223372036854775808,\n"
                      "  \"empty\": [],\n"
                      "  \"rows\": [\n"
                      "    {\"shape\": [2, 3], \"ok\": true, \"o\": {}},\n"
                      "    null\n"
                      "  ]\n"
                      "}\n");
  free(s);
  s = render(layout_body, 0);
  cr_assert_str_eq(s, "{\"a\":-9223372036854775808,\"empty\":[],\"rows\":[{\"shape\":[2,3],"
                      "\"ok\":true,\"o\":{}},null]}\n");
  free(s);
}

Test(json_write, misuse_and_write_errors_are_sticky) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  hap_jw w;
  hap_jw_init(&w, f, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "k");
  hap_jw_end_object(&w); /* key without value */
  cr_assert(hap_jw_failed(&w));
  cr_assert_not(hap_jw_finish(&w));
  fclose(f);
  free(buf);

  f = open_memstream(&buf, &len);
  hap_jw_init(&w, f, 0);
  hap_jw_begin_array(&w); /* never closed */
  cr_assert_not(hap_jw_finish(&w));
  fclose(f);
  free(buf);

  f = open_memstream(&buf, &len);
  hap_jw_init(&w, f, 0);
  for (int i = 0; i < HAP_JW_MAX_DEPTH + 1; i++)
    hap_jw_begin_array(&w);
  cr_assert(hap_jw_failed(&w), "nesting deeper than HAP_JW_MAX_DEPTH fails");
  fclose(f);
  free(buf);

  f = fopen("/dev/full", "w");
  if (f != NULL) {
    hap_jw_init(&w, f, 2);
    hap_jw_begin_array(&w);
    for (int i = 0; i < 100000; i++)
      hap_jw_int(&w, i);
    hap_jw_end_array(&w);
    cr_assert_not(hap_jw_finish(&w), "writing to a full device fails");
    fclose(f);
  }
}

/* ---- fileio --------------------------------------------------------------------------------- */

Test(fileio, write_into_missing_directory_fails_cleanly) {
  char *dir = tmpdir_make("graph_io");
  char *sub = path_in(dir, "missing");
  char *p = path_in(sub, "g.json");
  hap_graph *g = build_graph();
  hap_err err = {0};
  cr_assert_eq(hap_graph_write_file(g, p, &err), HAP_EIO);
  cr_assert_not_null(strstr(err.msg, p), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "No such file or directory"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  cr_assert_eq(count_entries(dir), 0, "no temporary file left");

  hap_atomic_file af;
  hap_err_clear(&err);
  cr_assert_eq(hap_atomic_open(&af, p, &err), HAP_EIO);
  cr_assert_not_null(strstr(err.msg, p), "%s", err.msg);
  hap_atomic_abort(&af); /* harmless after a failed open */
  cr_assert_eq(count_entries(dir), 0);
  /* the probe says the same before any work, and leaves nothing behind either way */
  hap_err_clear(&err);
  cr_assert_eq(hap_atomic_probe(p, &err), HAP_EIO);
  cr_assert_not_null(strstr(err.msg, p), "%s", err.msg);
  char *ok = path_in(dir, "ok.json");
  hap_err_clear(&err);
  cr_assert_eq(hap_atomic_probe(ok, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(count_entries(dir), 0, "the probe's temporary is gone");
  free(ok);
  hap_graph_destroy(g);
  rmdir(dir);
  free(p);
  free(sub);
  free(dir);
}

Test(fileio, failed_write_keeps_the_old_file) {
  char *dir = tmpdir_make("graph_io");
  char *p = path_in(dir, "g.json");
  write_text(p, "old contents\n");
  chmod(p, 0640);

  /* a graph that cannot be written (no loss): the old file stays */
  hap_graph *bad = hap_graph_create("bad");
  hap_err err = {0};
  cr_assert_neq(hap_graph_write_file(bad, p, &err), HAP_OK);
  size_t len;
  char *s = slurp(p, &len);
  cr_assert_str_eq(s, "old contents\n");
  free(s);
  cr_assert_eq(count_entries(dir), 1, "no temporary file left");

  /* an aborted write: the old file stays */
  hap_atomic_file af;
  cr_assert_eq(hap_atomic_open(&af, p, &err), HAP_OK, "%s", err.msg);
  fputs("half a fi", af.f);
  cr_assert_eq(count_entries(dir), 2, "the temporary sits next to the target");
  cr_assert_not_null(strstr(af.tmp, ".tmp."));
  hap_atomic_abort(&af);
  hap_atomic_abort(&af); /* idempotent */
  s = slurp(p, &len);
  cr_assert_str_eq(s, "old contents\n");
  free(s);
  cr_assert_eq(count_entries(dir), 1);

  /* a successful write replaces it atomically and keeps its permission bits */
  hap_graph *g = build_graph();
  cr_assert_eq(hap_graph_write_file(g, p, &err), HAP_OK, "%s", err.msg);
  s = slurp(p, &len);
  cr_assert_eq(strncmp(s, "{\n  \"format\": \"hap-graph\"", 25), 0);
  free(s);
  struct stat st;
  cr_assert_eq(stat(p, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0640);
  cr_assert_eq(count_entries(dir), 1);

  hap_graph_destroy(g);
  hap_graph_destroy(bad);
  unlink(p);
  rmdir(dir);
  free(p);
  free(dir);
}

Test(fileio, read_errors_name_the_path) {
  char *data = (char *)1;
  size_t len = 7;
  hap_err err = {0};
  cr_assert_eq(hap_read_file("/nonexistent/dir/x.json", &data, &len, &err), HAP_EIO);
  cr_assert_null(data);
  cr_assert_str_eq(err.msg, "/nonexistent/dir/x.json: cannot open: No such file or directory");
  hap_err_clear(&err);
  cr_assert_eq(hap_read_file("/tmp", &data, &len, &err), HAP_EIO);
  cr_assert_not_null(strstr(err.msg, "/tmp: "), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "Is a directory"), "%s", err.msg);
}

Test(fileio, read_whole_file) {
  char *dir = tmpdir_make("graph_io");
  char *p = path_in(dir, "big.txt");
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 50000; i++) /* 500 kB: more than one buffer growth */
    fprintf(f, "line %04d\n", i % 10000);
  fclose(f);
  char *data;
  size_t len;
  hap_err err = {0};
  cr_assert_eq(hap_read_file(p, &data, &len, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(len, 500000);
  cr_assert_eq(data[len], '\0');
  cr_assert_eq(strncmp(data + len - 10, "line 9999\n", 10), 0);
  free(data);
  unlink(p);
  rmdir(dir);
  free(p);
  free(dir);
}
