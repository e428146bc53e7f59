/* test_policy.c — the training policy (model/policy.h): names, the spec parser and its errors,
 * bytes per parameter against the published figures (../shared/reference/TRAINING.md: ZeRO's 16
 * B/param for mixed-precision Adam, Megatron-LM's 18 B with fp32 gradients, ZeRO stages dividing
 * by the data-parallel degree), the update pass, the cast graph and the recomputation map. */
#include <criterion/criterion.h>
#include <string.h>

#include "model/policy.h"
#include "test_util.h"

static hap_train_policy parse_ok(const char *text, uint32_t *given) {
  hap_train_policy p = hap_policy_default();
  hap_err err = {0};
  cr_assert_eq(hap_policy_parse(text, &p, given, &err), HAP_OK, "%s: %s", text, err.msg);
  return p;
}

/* The text is refused with one line containing `want`, and the policy is left as it was. */
static void parse_bad(const char *text, const char *want) {
  hap_train_policy p = hap_policy_default();
  hap_err err = {0};
  cr_assert_neq(hap_policy_parse(text, &p, NULL, &err), HAP_OK, "%s was accepted", text);
  cr_assert(strstr(err.msg, want) != NULL, "%s: '%s' lacks '%s'", text, err.msg, want);
  cr_assert_null(strchr(err.msg, '\n'), "%s", err.msg);
  cr_assert(hap_policy_is_default(&p), "%s changed the policy", text);
}

static hap_train_policy policy(hap_precision pr, hap_optimizer opt, int zero, hap_grad_accum ga) {
  hap_train_policy p = hap_policy_default();
  p.precision = pr;
  p.optimizer = opt;
  p.zero = zero;
  p.grad_accum = ga;
  return p;
}

static double total(const hap_train_policy *p, double n_d) {
  hap_param_bytes b = hap_policy_param_bytes_zero(p, n_d);
  return hap_param_bytes_total(&b);
}

/* ---- the value and its text ----------------------------------------------------------------- */

Test(policy, default_is_todays_training) {
  hap_train_policy p = hap_policy_default();
  cr_assert_eq(p.precision, HAP_PREC_FP32);
  cr_assert_eq(p.optimizer, HAP_OPT_SGD);
  cr_assert_eq(p.zero, 0);
  cr_assert_eq(p.recompute, HAP_RECOMPUTE_NONE);
  cr_assert_eq(p.micro_batches, 1);
  cr_assert(hap_policy_is_default(&p));
  hap_err err = {0};
  cr_assert_eq(hap_policy_check(&p, &err), HAP_OK, "%s", err.msg);
  char buf[160];
  cr_assert_str_eq(hap_policy_brief(&p, buf, sizeof buf), "default");
}

Test(policy, parse_every_field) {
  uint32_t given = 0;
  hap_train_policy p = parse_ok(
      "precision=bf16,optimizer=adam,zero=1,recompute=selective,micro_batches=4,grad_accum=fp32",
      &given);
  cr_assert_eq(p.precision, HAP_PREC_BF16);
  cr_assert_eq(p.optimizer, HAP_OPT_ADAM);
  cr_assert_eq(p.zero, 1);
  cr_assert_eq(p.recompute, HAP_RECOMPUTE_SELECTIVE);
  cr_assert_eq(p.micro_batches, 4);
  cr_assert_eq(p.grad_accum, HAP_GRAD_FP32);
  cr_assert_eq(given, 0x3fu);
  char buf[160];
  hap_err err = {0};
  cr_assert_eq(hap_policy_format(&p, buf, sizeof buf, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(buf, "precision=bf16,optimizer=adam,zero=1,recompute=selective,"
                        "micro_batches=4,grad_accum=fp32");
  /* the formatted text parses back to the same policy */
  hap_train_policy q = parse_ok(buf, NULL);
  cr_assert(hap_policy_equal(&p, &q));
  cr_assert_str_eq(hap_policy_brief(&p, buf, sizeof buf),
                   "precision=bf16,optimizer=adam,zero=1,recompute=selective,micro_batches=4,"
                   "grad_accum=fp32");
  cr_assert_eq(hap_policy_format(&p, buf, 20, &err), HAP_EINVAL);
}

Test(policy, parse_keeps_fields_not_given) {
  hap_train_policy p = hap_policy_default();
  p.optimizer = HAP_OPT_MOMENTUM;
  uint32_t given = 0;
  hap_err err = {0};
  cr_assert_eq(hap_policy_parse("zero=3", &p, &given, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(p.zero, 3);
  cr_assert_eq(p.optimizer, HAP_OPT_MOMENTUM);
  cr_assert_eq(given, (uint32_t)HAP_POLICY_ZERO);
  char buf[64];
  cr_assert_str_eq(hap_policy_brief(&p, buf, sizeof buf), "optimizer=momentum,zero=3");
}

Test(policy, bad_text_one_line_naming_the_choices) {
  parse_bad("precision=fp8", "unknown precision 'fp8', expected fp32, fp16 or bf16");
  parse_bad("optimizer=lamb", "unknown optimizer 'lamb', expected sgd, momentum, adam or adamw");
  parse_bad("recompute=some", "unknown recompute 'some', expected none, selective or full");
  parse_bad("grad_accum=fp16", "unknown grad_accum 'fp16', expected half or fp32");
  parse_bad("zero=4", "zero=4, expected a ZeRO stage 0, 1, 2 or 3");
  parse_bad("zero=-1", "zero=-1, expected");
  parse_bad("zero=1.0", "zero=1.0, expected");
  parse_bad("zero=", "zero=, expected");
  parse_bad("micro_batches=0", "micro_batches=0, expected an integer 1..4096");
  parse_bad("micro_batches=4097", "micro_batches=4097");
  parse_bad("micro_batches=2x", "micro_batches=2x");
  parse_bad("precision=bf16,precision=fp16", "field 'precision' given twice");
  parse_bad("optimiser=adam", "unknown field 'optimiser', expected precision, optimizer, zero, "
                              "recompute, micro_batches or grad_accum");
  parse_bad("precision=bf16,,zero=1", "empty item");
  parse_bad("", "empty item");
  parse_bad("bf16", "'bf16' is not of the form key=value");
  parse_bad("zero=1,adam", "'adam' is not of the form key=value");
}

Test(policy, check_ranges) {
  hap_err err = {0};
  hap_train_policy p = hap_policy_default();
  p.zero = 4;
  cr_assert_eq(hap_policy_check(&p, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "zero") != NULL, "%s", err.msg);
  p = hap_policy_default();
  p.micro_batches = 0;
  hap_err_clear(&err);
  cr_assert_eq(hap_policy_check(&p, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "micro_batches") != NULL, "%s", err.msg);
}

Test(policy, names_round_trip) {
  for (int i = 0; i < HAP_PREC_COUNT; i++) {
    hap_precision x;
    cr_assert_eq(hap_precision_parse(hap_precision_name((hap_precision)i), &x), HAP_OK);
    cr_assert_eq((int)x, i);
  }
  for (int i = 0; i < HAP_OPT_COUNT; i++) {
    hap_optimizer x;
    cr_assert_eq(hap_optimizer_parse(hap_optimizer_name((hap_optimizer)i), &x), HAP_OK);
    cr_assert_eq((int)x, i);
  }
  for (int i = 0; i < HAP_RECOMPUTE_COUNT; i++) {
    hap_recompute x;
    cr_assert_eq(hap_recompute_parse(hap_recompute_name((hap_recompute)i), &x), HAP_OK);
    cr_assert_eq((int)x, i);
  }
  hap_precision x;
  cr_assert_eq(hap_precision_parse("FP16", &x), HAP_ENOTFOUND);
  cr_assert_str_eq(hap_precision_name((hap_precision)7), "?");
}

/* ---- bytes per parameter (TRAINING.md) ------------------------------------------------------ */

Test(policy, sgd_fp32_is_todays_two_copies) {
  hap_train_policy p = hap_policy_default();
  hap_param_bytes b = hap_policy_param_bytes(&p);
  cr_assert_eq(b.weights, 4);
  cr_assert_eq(b.grads, 4);
  cr_assert_eq(b.optimizer, 0);
  cr_assert_eq(total(&p, 1), 8); /* value + gradient: synth's x2 */
  cr_assert_eq(total(&p, 64), 8, "ZeRO 0 divides nothing");
}

Test(policy, momentum_adds_four_bytes) {
  hap_train_policy p = policy(HAP_PREC_FP32, HAP_OPT_MOMENTUM, 0, HAP_GRAD_HALF);
  cr_assert_eq(total(&p, 1), 12);
}

Test(policy, adam_fp32_is_sixteen_bytes) {
  hap_train_policy p = policy(HAP_PREC_FP32, HAP_OPT_ADAM, 0, HAP_GRAD_HALF);
  hap_param_bytes b = hap_policy_param_bytes(&p);
  cr_assert_eq(b.weights, 4);
  cr_assert_eq(b.grads, 4);
  cr_assert_eq(b.optimizer, 8); /* two moments */
  cr_assert_eq(total(&p, 1), 16);
  p.grad_accum = HAP_GRAD_FP32; /* fp32 gradients are 4 B either way */
  cr_assert_eq(total(&p, 1), 16);
}

Test(policy, mixed_adam_zero_accounting_is_sixteen_bytes) {
  for (int pr = HAP_PREC_FP16; pr <= HAP_PREC_BF16; pr++) {
    hap_train_policy p = policy((hap_precision)pr, HAP_OPT_ADAM, 0, HAP_GRAD_HALF);
    hap_param_bytes b = hap_policy_param_bytes(&p);
    cr_assert_eq(b.weights, 2);
    cr_assert_eq(b.grads, 2);
    cr_assert_eq(b.optimizer, 12); /* master 4 + momentum 4 + variance 4 */
    cr_assert_eq(total(&p, 1), 16);
    p.optimizer = HAP_OPT_ADAMW;
    cr_assert_eq(total(&p, 1), 16);
  }
}

Test(policy, mixed_adam_megatron_accounting_is_eighteen_bytes) {
  hap_train_policy p = policy(HAP_PREC_BF16, HAP_OPT_ADAM, 0, HAP_GRAD_FP32);
  hap_param_bytes b = hap_policy_param_bytes(&p);
  cr_assert_eq(b.grads, 4);
  cr_assert_eq(total(&p, 1), 18); /* 2 + 4 + 4 + 8 */
}

Test(policy, zero_stages_divide_by_the_data_parallel_degree) {
  const double n = 64;
  hap_train_policy p = policy(HAP_PREC_FP16, HAP_OPT_ADAM, 1, HAP_GRAD_HALF);
  cr_assert_float_eq(total(&p, n), 2 + 2 + 12 / n, 1e-12); /* optimizer state */
  p.zero = 2;
  cr_assert_float_eq(total(&p, n), 2 + (2 + 12) / n, 1e-12); /* and gradients */
  p.zero = 3;
  cr_assert_float_eq(total(&p, n), 16 / n, 1e-12); /* and weights */
  hap_param_bytes b = hap_policy_param_bytes_zero(&p, n);
  cr_assert_float_eq(b.weights, 2 / n, 1e-15);
  cr_assert_float_eq(b.grads, 2 / n, 1e-15);
  cr_assert_float_eq(b.optimizer, 12 / n, 1e-15);
  cr_assert_eq(total(&p, 1), 16, "one copy: nothing to divide");
  /* Megatron's accounting under ZeRO-1: 2 + 4 + 12 / N_d */
  p = policy(HAP_PREC_BF16, HAP_OPT_ADAM, 1, HAP_GRAD_FP32);
  cr_assert_float_eq(total(&p, 8), 2 + 4 + 1.5, 1e-12);
}

Test(policy, update_pass_bytes) {
  hap_train_policy p = hap_policy_default();
  cr_assert_eq(hap_policy_update_bytes(&p), 12); /* hap_kernel_sgd: 3 x 4 B per element */
  cr_assert_eq(hap_policy_update_flops(&p), 2);
  p.optimizer = HAP_OPT_MOMENTUM;
  cr_assert_eq(hap_policy_update_bytes(&p), 20);
  p.optimizer = HAP_OPT_ADAM;
  cr_assert_eq(hap_policy_update_bytes(&p), 28);
  p = policy(HAP_PREC_BF16, HAP_OPT_ADAM, 0, HAP_GRAD_HALF);
  /* read master 4 + grad 2 + moments 8, write master 4 + moments 8 + bf16 copy 2 */
  cr_assert_eq(hap_policy_update_bytes(&p), 28);
  p.precision = HAP_PREC_FP16; /* + the overflow check reads the gradients again */
  cr_assert_eq(hap_policy_update_bytes(&p), 30);
}

Test(policy, gradient_collectives_by_precision) {
  hap_train_policy p = hap_policy_default();
  cr_assert_eq(hap_policy_grad_comm_bytes(&p), 4);
  cr_assert_eq(hap_policy_compute_dtype(&p), HAP_F32);
  p.precision = HAP_PREC_BF16;
  cr_assert_eq(hap_policy_grad_comm_bytes(&p), 2, "half the bytes");
  cr_assert_eq(hap_policy_compute_dtype(&p), HAP_BF16);
  p.grad_accum = HAP_GRAD_FP32;
  cr_assert_eq(hap_policy_grad_comm_bytes(&p), 4);
  p.precision = HAP_PREC_FP16;
  cr_assert_eq(hap_policy_compute_dtype(&p), HAP_F16);
}

Test(policy, memory_breakdown_parts) {
  hap_memory_breakdown m = {1, 2, 3, 4, 5, 6};
  cr_assert_eq(hap_memory_total(&m), 21);
  for (int i = 0; i < HAP_MEMORY_PARTS; i++)
    cr_assert_eq(hap_memory_part_get(&m, i), i + 1, "%s", hap_memory_part_name(i));
  cr_assert_str_eq(hap_memory_part_name(0), "parameters");
  cr_assert_str_eq(hap_memory_part_name(5), "workspace");
  cr_assert_null(hap_memory_part(&m, 6));
}

/* ---- the graph the kernels run -------------------------------------------------------------- */

Test(policy, cast_graph_to_half) {
  hap_graph *g = model("gpt:layers=1,batch=2,seq=8,width=32,heads=2,vocab=64");
  hap_graph *h = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_graph_cast_float(g, HAP_F32, &h, &err), HAP_OK);
  cr_assert_null(h, "fp32: nothing to cast");
  cr_assert_eq(hap_graph_cast_float(g, HAP_BF16, &h, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(h->n_tensors, g->n_tensors);
  cr_assert_eq(h->n_nodes, g->n_nodes);
  for (int32_t t = 0; t < g->n_tensors; t++) {
    cr_assert_str_eq(h->tensors[t].name, g->tensors[t].name);
    hap_dtype want = g->tensors[t].dtype == HAP_F32 ? HAP_BF16 : g->tensors[t].dtype;
    cr_assert_eq(h->tensors[t].dtype, want, "%s", g->tensors[t].name);
    cr_assert_eq(hap_tensor_bytes(&h->tensors[t]) * (want == HAP_BF16 ? 2 : 1),
                 hap_tensor_bytes(&g->tensors[t]));
  }
  cr_assert_eq(h->tensors[hap_graph_find_tensor(h, "x")].dtype, HAP_I64, "token ids stay");
  hap_graph_destroy(h);
  hap_graph_destroy(g);
}

/* ---- recomputation -------------------------------------------------------------------------- */

static int32_t tensor(const hap_graph *g, const char *name) {
  int32_t t = hap_graph_find_tensor(g, name);
  cr_assert_geq(t, 0, "no tensor %s", name);
  return t;
}

Test(policy, recompute_layers_follow_the_zoo_scopes) {
  hap_graph *g = model("gpt:layers=3,batch=2,seq=8,width=32,heads=2,vocab=64");
  hap_recompute_map m;
  hap_err err = {0};
  cr_assert_eq(hap_recompute_map_build(g, HAP_RECOMPUTE_NONE, &m, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(m.n_layers, 3);
  cr_assert_eq(m.n_dropped, 0);
  cr_assert_eq(m.layer[hap_graph_find_node(g, "wte")], -1);
  cr_assert_eq(m.layer[hap_graph_find_node(g, "layers.1.attn")], 1);
  cr_assert_eq(m.layer[hap_graph_find_node(g, "loss")], -1);
  hap_recompute_map_free(&m);
  hap_graph_destroy(g);
}

Test(policy, recompute_full_keeps_each_layers_input) {
  hap_graph *g = model("gpt:layers=2,batch=2,seq=8,width=32,heads=2,vocab=64");
  hap_recompute_map m;
  hap_err err = {0};
  cr_assert_eq(hap_recompute_map_build(g, HAP_RECOMPUTE_FULL, &m, &err), HAP_OK, "%s", err.msg);
  /* inside a layer: dropped and recomputed */
  cr_assert(m.dropped[tensor(g, "layers.0.ln1")]);
  cr_assert(m.dropped[tensor(g, "layers.0.attn")]);
  cr_assert(m.dropped[tensor(g, "layers.1.fc1")]);
  cr_assert(m.recomputed[hap_graph_find_node(g, "layers.0.fc1")]);
  /* each layer's output is the next one's input: kept, and its producer not recomputed */
  cr_assert_not(m.dropped[tensor(g, "layers.0.res2")]);
  cr_assert_not(m.recomputed[hap_graph_find_node(g, "layers.0.res2")]);
  cr_assert_not(m.dropped[tensor(g, "layers.1.res2")]);
  /* the layer input is read by the residual add inside the layer, but made before it */
  cr_assert_not(m.dropped[tensor(g, "embed.drop")]);
  /* outside the layers nothing is dropped */
  cr_assert_not(m.dropped[tensor(g, "ln_f")]);
  cr_assert_not(m.dropped[tensor(g, "loss")]);
  hap_recompute_map_free(&m);
  hap_graph_destroy(g);
}

Test(policy, recompute_selective_drops_the_attention_core) {
  /* head dim 16 != seq 8: only the [B, H, S, S] tensors are square */
  hap_graph *g =
      model("gpt:layers=2,batch=2,seq=8,width=32,heads=2,vocab=64,granularity=fine,dropout=0.1");
  hap_recompute_map m;
  hap_err err = {0};
  cr_assert_eq(hap_recompute_map_build(g, HAP_RECOMPUTE_SELECTIVE, &m, &err), HAP_OK, "%s",
               err.msg);
  const char *core[] = {"scores", "scaled", "masked", "probs", "probs_drop"};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < 5; i++) {
      char name[64];
      snprintf(name, sizeof name, "layers.%d.attn.%s", l, core[i]);
      cr_assert(m.dropped[tensor(g, name)], "%s", name);
      cr_assert(m.recomputed[hap_graph_find_node(g, name)], "%s", name);
    }
  cr_assert_eq(m.n_dropped, 10);
  cr_assert_not(m.dropped[tensor(g, "layers.0.attn.context")]);
  cr_assert_not(m.dropped[tensor(g, "layers.0.attn.q.heads")]);
  hap_recompute_map_free(&m);
  hap_graph_destroy(g);
  /* fused attention keeps its core inside the op: nothing to drop */
  g = model("gpt:layers=2,batch=2,seq=8,width=32,heads=2,vocab=64");
  cr_assert_eq(hap_recompute_map_build(g, HAP_RECOMPUTE_SELECTIVE, &m, &err), HAP_OK);
  cr_assert_eq(m.n_dropped, 0);
  hap_recompute_map_free(&m);
  hap_graph_destroy(g);
}
