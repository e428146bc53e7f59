/* Pipeline stage graphs (model/stage.h): boundaries, the stage loss, tied parameters, the file
 * form of an input whose gradient is wanted, and every refusal. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/graph_io.h"
#include "model/stage.h"
#include "test_util.h"

static hap_stage_graph *cut(const hap_graph *g, int32_t first, int32_t end) {
  hap_stage_graph *s = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_stage_graph_build(g, first, end, &s, &err), HAP_OK, "[%d, %d): %s", first, end,
               err.msg);
  cr_assert_not_null(s);
  return s;
}

static const hap_tensor *stage_tensor(const hap_stage_graph *s, const char *name) {
  int32_t t = hap_graph_find_tensor(s->graph, name);
  cr_assert_geq(t, 0, "stage has no tensor '%s'", name);
  return &s->graph->tensors[t];
}

Test(stage, two_stages_of_an_mlp_meet_at_one_boundary) {
  hap_graph *g = model("mlp:layers=4,batch=8,seq=4,hidden=16");
  int32_t mid = g->n_nodes / 2;
  hap_stage_graph *a = cut(g, 0, mid), *b = cut(g, mid, g->n_nodes);
  /* what a sends is what b receives */
  cr_assert_eq(a->n_out, 1);
  cr_assert_eq(b->n_in, 1);
  cr_expect_eq(a->boundary_out[0], b->boundary_in[0]);
  cr_expect_eq(a->n_in, 0);
  cr_expect_eq(b->n_out, 0);
  const hap_tensor *y = &g->tensors[a->boundary_out[0]];
  cr_expect_eq(y->producer, mid - 1);
  /* a: a stage loss over y@grad; b: the graph's loss, its received input wants a gradient */
  cr_expect(!a->has_loss);
  cr_expect(b->has_loss);
  char name[256];
  snprintf(name, sizeof name, "%s@grad", y->name);
  const hap_tensor *gy = stage_tensor(a, name);
  cr_expect_eq(gy->kind, HAP_TENSOR_INPUT);
  cr_expect(!gy->requires_grad);
  cr_expect_eq(gy->shape.rank, y->shape.rank);
  cr_expect_eq(a->grad_in[0], hap_graph_find_tensor(a->graph, name));
  cr_expect_eq(a->whole_of[a->grad_in[0]], -1);
  const hap_tensor *loss_a = &a->graph->tensors[a->graph->loss];
  cr_expect_eq(loss_a->shape.rank, 0);
  cr_expect(loss_a->requires_grad);
  const hap_tensor *in_b = stage_tensor(b, y->name);
  cr_expect_eq(in_b->kind, HAP_TENSOR_INPUT);
  cr_expect(in_b->grad_wanted);
  cr_expect(in_b->requires_grad);
  cr_expect_str_eq(b->graph->tensors[b->graph->loss].name, g->tensors[g->loss].name);
  /* b is the graph's tail unchanged: the same nodes, no stage loss */
  cr_expect_eq(b->graph->n_nodes, g->n_nodes - mid);
  cr_expect_eq(a->graph->n_nodes, mid + 3); /* y * y@grad, summed per sample, then over the batch */
  hap_stage_graph_destroy(a);
  hap_stage_graph_destroy(b);
  hap_graph_destroy(g);
}

/* Three stages of every zoo model: every node in exactly one stage, every parameter in one at
 * least, maps that agree both ways, and each boundary received where it is sent. */
Test(stage, three_stages_cover_every_zoo_model) {
  const char *specs[] = {
      "mlp:layers=3,batch=8,seq=4,hidden=16",
      "bert-base:layers=2,batch=4,seq=8,width=16,heads=2,vocab=32",
      "vit:layers=2,batch=4,image=8,patch=4,width=16,heads=2,classes=10",
      "bert-moe:layers=2,batch=4,seq=8,width=16,heads=2,vocab=32,experts=4",
      "gpt:layers=2,batch=4,seq=8,width=16,heads=2,vocab=32",
      "vgg19:batch=2,width=8,hidden=32",
  };
  for (size_t m = 0; m < sizeof specs / sizeof *specs; m++) {
    hap_graph *g = model(specs[m]);
    int32_t cuts[4] = {0, g->n_nodes / 3, 2 * g->n_nodes / 3, g->n_nodes};
    int32_t *seen = calloc((size_t)g->n_tensors, sizeof(int32_t));
    int32_t nodes = 0;
    for (int k = 0; k < 3; k++) {
      hap_stage_graph *s = cut(g, cuts[k], cuts[k + 1]);
      cr_expect_eq(s->has_loss, k == 2, "%s stage %d", specs[m], k);
      for (int32_t n = 0; n < s->graph->n_nodes; n++)
        nodes += hap_graph_find_node(g, s->graph->nodes[n].name) >= 0;
      for (int32_t t = 0; t < g->n_tensors; t++) {
        int32_t st = s->stage_of[t];
        if (st < 0)
          continue;
        cr_expect_eq(s->whole_of[st], t);
        cr_expect_str_eq(s->graph->tensors[st].name, g->tensors[t].name);
        seen[t]++;
      }
      for (int32_t i = 0; i < s->n_in; i++) { /* made upstream, before the range */
        const hap_tensor *t = &g->tensors[s->boundary_in[i]];
        cr_expect_eq(t->kind, HAP_TENSOR_ACTIVATION);
        cr_expect_lt(t->producer, cuts[k], "%s: '%s'", specs[m], t->name);
        cr_expect_eq(s->graph->tensors[s->stage_of[s->boundary_in[i]]].requires_grad,
                     t->requires_grad);
      }
      for (int32_t i = 0; i < s->n_out; i++) {
        const hap_tensor *t = &g->tensors[s->boundary_out[i]];
        cr_expect_geq(t->producer, cuts[k]);
        cr_expect_lt(t->producer, cuts[k + 1]);
        cr_expect_eq(s->grad_in[i] >= 0, t->requires_grad, "%s: '%s'", specs[m], t->name);
      }
      hap_stage_graph_destroy(s);
    }
    cr_expect_eq(nodes, g->n_nodes, "%s: every node in exactly one stage", specs[m]);
    for (int32_t t = 0; t < g->n_tensors; t++)
      if (g->tensors[t].kind == HAP_TENSOR_PARAMETER)
        cr_expect_geq(seen[t], 1, "%s: parameter '%s' in no stage", specs[m], g->tensors[t].name);
    free(seen);
    hap_graph_destroy(g);
  }
}

/* GPT ties wte: the embedding in the first stage and the language-model head in the last both
 * hold it (their gradients are summed across stages). */
Test(stage, a_tied_parameter_is_in_both_stages) {
  hap_graph *g = model("gpt:layers=2,batch=4,seq=8,width=16,heads=2,vocab=32");
  int32_t wte = hap_graph_find_tensor(g, "wte.weight");
  cr_assert_geq(wte, 0);
  hap_stage_graph *a = cut(g, 0, g->n_nodes / 2), *b = cut(g, g->n_nodes / 2, g->n_nodes);
  cr_expect_geq(a->stage_of[wte], 0);
  cr_expect_geq(b->stage_of[wte], 0);
  cr_expect_eq(b->graph->tensors[b->stage_of[wte]].kind, HAP_TENSOR_PARAMETER);
  hap_stage_graph_destroy(a);
  hap_stage_graph_destroy(b);
  hap_graph_destroy(g);
}

Test(stage, a_stage_graph_round_trips_through_its_file_form) {
  hap_graph *g = model("bert-base:layers=2,batch=4,seq=8,width=16,heads=2,vocab=32");
  hap_stage_graph *s = cut(g, g->n_nodes / 2, g->n_nodes);
  char *text = graph_json(s->graph);
  cr_expect_not_null(strstr(text, "\"grad\": true"), "the boundary input's flag is written");
  hap_graph *back = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_graph_from_json(text, strlen(text), "stage.json", &back, &err), HAP_OK, "%s",
               err.msg);
  char *again = graph_json(back);
  cr_expect_str_eq(again, text);
  uint64_t d1 = 0, d2 = 1;
  cr_expect_eq(hap_graph_digest(back, &d1, &err), HAP_OK);
  cr_expect_eq(hap_graph_digest(s->graph, &d2, &err), HAP_OK);
  cr_expect_eq(d1, d2);
  for (int32_t t = 0; t < back->n_tensors; t++)
    cr_expect_eq(back->tensors[t].requires_grad, s->graph->tensors[t].requires_grad);
  /* the whole graph writes no "grad" key: files made before stages are unchanged */
  char *whole = graph_json(g);
  cr_expect_null(strstr(whole, "\"grad\""));
  free(whole);
  free(again);
  free(text);
  hap_graph_destroy(back);
  hap_stage_graph_destroy(s);
  hap_graph_destroy(g);
}

static void expect_refused(const hap_graph *g, int32_t first, int32_t end, const char *want) {
  hap_stage_graph *s = (hap_stage_graph *)1;
  hap_err err = {0};
  hap_status st = hap_stage_graph_build(g, first, end, &s, &err);
  cr_expect_neq(st, HAP_OK, "[%d, %d) was accepted", first, end);
  cr_expect_null(s);
  cr_expect_not_null(strstr(err.msg, want), "expected '%s' in: %s", want, err.msg);
  cr_expect_null(strchr(err.msg, '\n'));
}

Test(stage, bad_ranges_and_names_are_refused_with_one_line) {
  hap_graph *g = model("mlp:layers=2,batch=8,seq=4,hidden=16");
  expect_refused(g, 2, 2, "expected a non-empty range");
  expect_refused(g, -1, 2, "expected a non-empty range");
  expect_refused(g, 0, g->n_nodes + 1, "expected a non-empty range");
  hap_graph_destroy(g);

  /* h's gradient input would be "h@grad", a name the graph already uses */
  hap_graph *c = hap_graph_create("clash");
  hap_shape s2 = {.rank = 2, .dims = {4, 8}}, w2 = {.rank = 2, .dims = {8, 8}};
  int32_t x, w, clash, h, y, loss;
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_tensor(c, "x", HAP_TENSOR_INPUT, HAP_F32, &s2, &x, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(c, "w", HAP_TENSOR_PARAMETER, HAP_F32, &w2, &w, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(c, "h@grad", HAP_TENSOR_PARAMETER, HAP_F32, &w2, &clash, &err),
               HAP_OK);
  const char *hn[1] = {"h"}, *yn[1] = {"y"}, *ln[1] = {"loss"};
  int32_t in1[2] = {x, w};
  cr_assert_eq(hap_graph_add_node(c, "h", HAP_OP_MATMUL, in1, 2, NULL, hn, &h, &err), HAP_OK, "%s",
               err.msg);
  int32_t in2[2] = {h, clash};
  cr_assert_eq(hap_graph_add_node(c, "y", HAP_OP_MATMUL, in2, 2, NULL, yn, &y, &err), HAP_OK, "%s",
               err.msg);
  cr_assert_eq(hap_graph_add_node(c, "loss", HAP_OP_SUM, &y, 1, NULL, ln, &loss, &err), HAP_OK,
               "%s", err.msg);
  cr_assert_eq(hap_graph_set_loss(c, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(c, &err), HAP_OK, "%s", err.msg);
  expect_refused(c, 0, 1, "the stage loss needs the name 'h@grad'");
  hap_graph_destroy(c);
}

/* A range that sends on only what needs no gradient and holds no loss has nothing to train. */
Test(stage, a_stage_without_gradient_is_refused) {
  hap_graph *c = hap_graph_create("nograd");
  hap_shape s2 = {.rank = 2, .dims = {4, 8}};
  int32_t x, w, a, h, loss;
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_tensor(c, "x", HAP_TENSOR_INPUT, HAP_F32, &s2, &x, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(c, "w", HAP_TENSOR_PARAMETER, HAP_F32, &s2, &w, &err), HAP_OK);
  const char *an[1] = {"a"}, *hn[1] = {"h"}, *ln[1] = {"loss"};
  cr_assert_eq(hap_graph_add_node(c, "a", HAP_OP_RELU, &x, 1, NULL, an, &a, &err), HAP_OK);
  int32_t in[2] = {a, w};
  cr_assert_eq(hap_graph_add_node(c, "h", HAP_OP_MUL, in, 2, NULL, hn, &h, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(c, "loss", HAP_OP_SUM, &h, 1, NULL, ln, &loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_set_loss(c, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(c, &err), HAP_OK, "%s", err.msg);
  expect_refused(c, 0, 1, "hold no loss and send on nothing that needs a gradient");
  /* the rest is a fine stage: its received input needs no gradient */
  hap_stage_graph *s = cut(c, 1, 3);
  cr_expect_eq(s->n_in, 1);
  cr_expect(!stage_tensor(s, "a")->grad_wanted);
  hap_stage_graph_destroy(s);
  hap_graph_destroy(c);
}

Test(stage, only_a_float_input_can_want_a_gradient) {
  hap_graph *c = hap_graph_create("want");
  hap_shape s2 = {.rank = 2, .dims = {4, 8}};
  int32_t x, w, i;
  hap_err err = {0};
  cr_assert_eq(hap_graph_add_tensor(c, "x", HAP_TENSOR_INPUT, HAP_F32, &s2, &x, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(c, "w", HAP_TENSOR_PARAMETER, HAP_F32, &s2, &w, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(c, "i", HAP_TENSOR_INPUT, HAP_I64, &s2, &i, &err), HAP_OK);
  cr_expect_eq(hap_graph_want_grad(c, x, &err), HAP_OK);
  cr_expect_eq(hap_graph_want_grad(c, w, &err), HAP_EINVAL);
  cr_expect_not_null(strstr(err.msg, "only a floating-point input can want a gradient"), "%s",
                     err.msg);
  cr_expect_eq(hap_graph_want_grad(c, i, &err), HAP_EINVAL);
  cr_expect_eq(hap_graph_want_grad(c, 99, &err), HAP_EINVAL);
  hap_graph_destroy(c);
}

/* The smallest largest-range FLOPs of `stages` contiguous ranges, by exhaustive dynamic
 * programming (the reference the bisection is held to). */
static double best_max(const hap_graph *g, int32_t stages) {
  int32_t n = g->n_nodes;
  double *pre = calloc((size_t)n + 1, sizeof *pre);
  double *f = malloc((size_t)(n + 1) * (size_t)(stages + 1) * sizeof *f);
  for (int32_t i = 0; i < n; i++)
    pre[i + 1] = pre[i] + hap_node_train_flops(g, i);
  for (int32_t k = 0; k <= stages; k++)
    for (int32_t j = 0; j <= n; j++) {
      double *cell = &f[(size_t)k * (size_t)(n + 1) + (size_t)j];
      *cell = k == 0 ? (j == 0 ? 0 : INFINITY) : INFINITY;
      for (int32_t i = k - 1; k > 0 && i < j; i++) {
        double prev = f[(size_t)(k - 1) * (size_t)(n + 1) + (size_t)i];
        double here = prev > pre[j] - pre[i] ? prev : pre[j] - pre[i];
        *cell = here < *cell ? here : *cell;
      }
    }
  double r = f[(size_t)stages * (size_t)(n + 1) + (size_t)n];
  free(pre);
  free(f);
  return r;
}

Test(stage, balanced_cuts_are_optimal_and_exactly_as_many_as_asked) {
  hap_graph *m = model("mlp:layers=8,batch=8,seq=4,hidden=16");
  int32_t cuts[32];
  hap_err err = {0};
  cr_assert_eq(hap_stage_cuts_balanced(m, 4, cuts, &err), HAP_OK, "%s", err.msg);
  const int32_t two_layers_each[5] = {0, 4, 8, 12, 17}; /* linear + sigmoid per layer, loss last */
  for (int k = 0; k <= 4; k++)
    cr_expect_eq(cuts[k], two_layers_each[k], "cuts[%d]", k);
  hap_graph_destroy(m);

  const char *specs[] = {"bert-base:layers=2,batch=4,seq=8,width=16,heads=2,vocab=32",
                         "gpt:layers=3,batch=4,seq=8,width=16,heads=2,vocab=32",
                         "vgg19:batch=2,width=8,hidden=32"};
  for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
    hap_graph *g = model(specs[s]);
    int32_t counts[] = {1, 2, 3, 5, 8, g->n_nodes};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
      int32_t p = counts[c];
      int32_t *cut = malloc(((size_t)p + 1) * sizeof *cut);
      cr_assert_eq(hap_stage_cuts_balanced(g, p, cut, &err), HAP_OK, "%s", err.msg);
      cr_expect_eq(cut[0], 0);
      cr_expect_eq(cut[p], g->n_nodes);
      double worst = 0;
      for (int32_t k = 0; k < p; k++) {
        cr_expect_lt(cut[k], cut[k + 1], "%s, %d stages: stage %d is empty", specs[s], p, k);
        double sum = 0;
        for (int32_t i = cut[k]; i < cut[k + 1]; i++)
          sum += hap_node_train_flops(g, i);
        worst = sum > worst ? sum : worst;
      }
      double best = best_max(g, p);
      cr_expect_leq(worst, best * (1 + 1e-8), "%s, %d stages: %g FLOP, the best is %g", specs[s], p,
                    worst, best);
      free(cut);
    }
    hap_graph_destroy(g);
  }
}

Test(stage, a_stage_count_beyond_the_nodes_is_refused) {
  hap_graph *g = model("mlp:layers=2,batch=8,seq=4,hidden=16");
  int32_t cuts[16];
  hap_err err = {0};
  cr_expect_eq(hap_stage_cuts_balanced(g, 0, cuts, &err), HAP_EINVAL);
  cr_expect_not_null(strstr(err.msg, "0 stages of 'mlp': expected 1 to 5"), "%s", err.msg);
  cr_expect_eq(hap_stage_cuts_balanced(g, 6, cuts, &err), HAP_EINVAL);
  cr_expect_eq(hap_stage_cuts_balanced(g, 5, cuts, &err), HAP_OK);
  for (int k = 0; k <= 5; k++)
    cr_expect_eq(cuts[k], k);
  hap_graph_destroy(g);
}

Test(stage, crossing_bytes_are_what_a_cut_sends_on) {
  hap_graph *g = model("mlp:layers=2,batch=8,seq=4,hidden=16");
  double cross[8];
  hap_err err = {0};
  cr_assert_eq(hap_stage_crossing_bytes(g, cross, &err), HAP_OK, "%s", err.msg);
  double one = 8.0 * 4 * 16 * 4; /* one [8, 4, 16] float32 activation */
  cr_expect_eq(cross[0], 0);
  for (int32_t i = 1; i < g->n_nodes; i++) /* a chain: one activation between two nodes */
    cr_expect_eq(cross[i], one, "before node %d: %g bytes", i, cross[i]);
  cr_expect_eq(cross[g->n_nodes], 0);
  hap_graph_destroy(g);
}

/* The largest range cost of `cuts` as hap_stage_cuts_costed counts it. */
static double worst_cost(const hap_graph *g, const int32_t *cuts, int32_t p, double rate,
                         double bw) {
  double *cross = malloc(((size_t)g->n_nodes + 1) * sizeof *cross), worst = 0;
  hap_err err = {0};
  cr_assert_eq(hap_stage_crossing_bytes(g, cross, &err), HAP_OK);
  for (int32_t k = 0; k < p; k++) {
    double compute = 0;
    for (int32_t i = cuts[k]; i < cuts[k + 1]; i++)
      compute += hap_node_train_flops(g, i) / rate;
    double send = 2 * cross[cuts[k + 1]] / bw, c = compute > send ? compute : send;
    worst = c > worst ? c : worst;
  }
  free(cross);
  return worst;
}

Test(stage, costed_cuts_avoid_a_large_boundary_on_a_slow_link) {
  hap_graph *g = model("gpt:layers=4,batch=8,seq=64,width=64,heads=4,vocab=4096");
  int32_t logits = hap_graph_find_tensor(g, "logits");
  cr_assert_geq(logits, 0);
  double big = (double)hap_tensor_bytes(&g->tensors[logits]);
  double *cross = malloc(((size_t)g->n_nodes + 1) * sizeof *cross);
  hap_err err = {0};
  cr_assert_eq(hap_stage_crossing_bytes(g, cross, &err), HAP_OK);
  int32_t cuts[5], even[5];
  const double rate = 1e12, slow = 1e9;
  cr_assert_eq(hap_stage_cuts_costed(g, 4, rate, slow, cuts, &err), HAP_OK, "%s", err.msg);
  for (int k = 1; k < 4; k++)
    cr_expect_lt(cross[cuts[k]], big, "cut %d before node %d sends %g bytes (the logits: %g)", k,
                 cuts[k], cross[cuts[k]], big);
  /* no other cut has a smaller largest cost (exhaustive over 3 cut positions) */
  double best = worst_cost(g, cuts, 4, rate, slow);
  int32_t n = g->n_nodes, trial[5] = {0, 0, 0, 0, n};
  for (trial[1] = 1; trial[1] < n; trial[1]++)
    for (trial[2] = trial[1] + 1; trial[2] < n; trial[2]++)
      for (trial[3] = trial[2] + 1; trial[3] < n; trial[3]++)
        cr_assert_geq(worst_cost(g, trial, 4, rate, slow), best * (1 - 1e-9), "%d %d %d", trial[1],
                      trial[2], trial[3]);
  /* a link fast enough to be free: the compute is as even as the FLOP-balanced cuts' */
  cr_assert_eq(hap_stage_cuts_costed(g, 4, rate, 1e30, cuts, &err), HAP_OK);
  cr_assert_eq(hap_stage_cuts_balanced(g, 4, even, &err), HAP_OK);
  double a = worst_cost(g, cuts, 4, rate, 1e30), b = worst_cost(g, even, 4, rate, 1e30);
  cr_expect_lt(fabs(a - b), 1e-9 * b, "costed %g s, balanced %g s", a, b);
  free(cross);
  hap_graph_destroy(g);
}

Test(stage, costed_cuts_refuse_bad_rates) {
  hap_graph *g = model("mlp:layers=2,batch=8,seq=4,hidden=16");
  int32_t cuts[4];
  hap_err err = {0};
  cr_expect_eq(hap_stage_cuts_costed(g, 2, 0, 1e9, cuts, &err), HAP_EINVAL);
  cr_expect_not_null(strstr(err.msg, "stage 0 at 0 FLOP/s, expected a finite rate > 0"), "%s",
                     err.msg);
  hap_err e2 = {0};
  cr_expect_eq(hap_stage_cuts_costed(g, 2, 1e12, INFINITY, cuts, &e2), HAP_EINVAL);
  hap_err e3 = {0};
  cr_expect_eq(hap_stage_cuts_costed(g, 9, 1e12, 1e9, cuts, &e3), HAP_EINVAL);
  cr_expect_not_null(strstr(e3.msg, "9 stages of 'mlp'"), "%s", e3.msg);
  hap_graph_destroy(g);
}

/* Unequal groups: a range at half the rate gets about a third of the FLOPs, the fast one two
 * thirds, and each range's compute time is close to the other's. */
Test(stage, rated_cuts_give_a_slow_range_less) {
  hap_graph *g = model("mlp:layers=12,batch=8,seq=4,hidden=64");
  int32_t even[3], rated[3];
  double rates[2] = {2e12, 1e12};
  hap_err err = {0};
  cr_assert_eq(hap_stage_cuts_costed(g, 2, 1e12, 1e30, even, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_stage_cuts_rated(g, 2, rates, 1e30, rated, &err), HAP_OK, "%s", err.msg);
  double f[2] = {0, 0};
  for (int32_t k = 0; k < 2; k++)
    for (int32_t i = rated[k]; i < rated[k + 1]; i++)
      f[k] += hap_node_train_flops(g, i);
  cr_expect_gt(rated[1], even[1], "the fast first range takes more nodes (%d vs %d)", rated[1],
               even[1]);
  double t0 = f[0] / rates[0], t1 = f[1] / rates[1];
  cr_expect_lt(fabs(t0 / t1 - 1), 0.25, "compute times %g s and %g s", t0, t1);
  cr_expect_gt(f[0], 1.5 * f[1], "FLOPs %g and %g", f[0], f[1]);
  double bad[2] = {1e12, NAN};
  cr_expect_eq(hap_stage_cuts_rated(g, 2, bad, 1e9, rated, &err), HAP_EINVAL);
  cr_expect_not_null(strstr(err.msg, "stage 1 at nan FLOP/s"), "%s", err.msg);
  hap_graph_destroy(g);
}
