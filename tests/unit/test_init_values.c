/* test_init_values.c — run/init.h's given values (hap_init_set_values, hap-run --weights): the
 * tensors they name are filled from them box by box, the others keep the seeded rules, and a
 * given array of another shape or dtype fails naming the tensor. */
#include <criterion/criterion.h>
#include <string.h>

#include "model/zoo.h"
#include "run/box.h"
#include "run/init.h"

static hap_graph *load(const char *spec) {
  hap_graph *g = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_model_load(spec, &g, &err), HAP_OK, "%s", err.msg);
  return g;
}

Test(init_values, given_tensors_fill_every_box_others_keep_their_rule) {
  hap_graph *g = load("mlp:layers=1,batch=4,seq=2,hidden=8");
  int32_t w = hap_graph_find_tensor(g, "layers.0.linear.weight");
  int32_t b = hap_graph_find_tensor(g, "layers.0.linear.bias");
  cr_assert(w >= 0 && b >= 0);
  float weight[64], got[64], bias_rule[8], bias_given[8];
  for (int i = 0; i < 64; i++)
    weight[i] = (float)i * 0.5f - 3.0f;
  hap_err err = {0};
  hap_box bb = hap_box_full(&g->tensors[b].shape);
  cr_assert_eq(hap_init_fill(g, b, 7, &bb, bias_rule, &err), HAP_OK, "%s", err.msg);
  hap_init_value v = {"layers.0.linear.weight", HAP_F32, g->tensors[w].shape, weight};
  hap_init_set_values(&v, 1);
  /* rows 2..5, columns 3..7 of the [8, 8] weight */
  hap_box box = {.rank = 2, .lo = {2, 3}, .hi = {6, 8}};
  cr_assert_eq(hap_init_fill(g, w, 7, &box, got, &err), HAP_OK, "%s", err.msg);
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 5; c++)
      cr_assert_eq(got[r * 5 + c], weight[(r + 2) * 8 + c + 3], "(%d, %d)", r, c);
  cr_assert_eq(hap_init_fill(g, b, 7, &bb, bias_given, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(memcmp(bias_rule, bias_given, sizeof bias_rule), 0, "an unnamed tensor's rule");
  hap_init_set_values(NULL, 0);
  hap_box full = hap_box_full(&g->tensors[w].shape);
  cr_assert_eq(hap_init_fill(g, w, 7, &full, got, &err), HAP_OK, "%s", err.msg);
  cr_assert_neq(memcmp(got, weight, sizeof weight), 0, "cleared: the rule again");
  hap_graph_destroy(g);
}

Test(init_values, another_shape_or_dtype_names_the_tensor) {
  hap_graph *g = load("mlp:layers=1,batch=4,seq=2,hidden=8");
  int32_t w = hap_graph_find_tensor(g, "layers.0.linear.weight");
  float data[64] = {0};
  hap_shape wrong = {.rank = 2, .dims = {4, 16}};
  hap_init_value v[2] = {{"layers.0.linear.weight", HAP_F32, wrong, data},
                         {"x", HAP_I64, g->tensors[hap_graph_find_tensor(g, "x")].shape, data}};
  hap_init_set_values(v, 2);
  hap_err err = {0};
  float got[64];
  hap_box full = hap_box_full(&g->tensors[w].shape);
  cr_assert_eq(hap_init_fill(g, w, 1, &full, got, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "'layers.0.linear.weight'") && strstr(err.msg, "shape"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  int32_t x = hap_graph_find_tensor(g, "x");
  hap_box fx = hap_box_full(&g->tensors[x].shape);
  float xs[64];
  hap_err_clear(&err);
  cr_assert_eq(hap_init_fill(g, x, 1, &fx, xs, &err), HAP_EINVAL, "int64 values for a float input");
  cr_assert(strstr(err.msg, "'x'"), "%s", err.msg);
  hap_init_set_values(NULL, 0);
  hap_graph_destroy(g);
}
