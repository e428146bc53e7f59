/* test_zoo.c — the model zoo: parameter counts against HAP's published numbers, structure and
 * names, spec parsing and its errors, gpt granularities and weight tying, determinism, loading. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/graph_io.h"
#include "model/zoo.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static hap_graph *build(const char *spec) {
  hap_graph *g = NULL;
  hap_err err = {0};
  hap_status st = hap_zoo_build(spec, &g, &err);
  cr_assert_eq(st, HAP_OK, "%s: %s", spec, err.msg);
  cr_assert_not_null(g);
  return g;
}

/* Build must fail with `want`; return the message. */
static void build_fails(const char *spec, hap_status want, char *msg, size_t len) {
  hap_graph *g = (hap_graph *)1;
  hap_err err = {0};
  hap_status st = hap_zoo_build(spec, &g, &err);
  cr_assert_eq(st, want, "%s: status %s (%s), expected %s", spec, hap_status_str(st), err.msg,
               hap_status_str(want));
  cr_assert_null(g, "%s: out must be NULL on failure", spec);
  cr_assert_eq(err.status, want);
  snprintf(msg, len, "%s", err.msg);
}

static int64_t param_count(const hap_graph *g) {
  int64_t n = 0;
  for (int32_t t = 0; t < g->n_tensors; t++)
    if (g->tensors[t].kind == HAP_TENSOR_PARAMETER)
      n += hap_tensor_numel(&g->tensors[t]);
  return n;
}

static int64_t params_of(const char *spec) {
  hap_graph *g = build(spec);
  int64_t n = param_count(g);
  hap_graph_destroy(g);
  return n;
}

static int consumers(const hap_graph *g, int32_t t) {
  int n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] == t)
        n++;
  return n;
}

static const hap_tensor *tensor(const hap_graph *g, const char *name) {
  int32_t t = hap_graph_find_tensor(g, name);
  cr_assert_geq(t, 0, "tensor '%s' is missing", name);
  return &g->tensors[t];
}

static void expect_shape(const hap_graph *g, const char *name, int32_t rank, const int64_t *dims) {
  const hap_tensor *t = tensor(g, name);
  cr_assert_eq(t->shape.rank, rank, "%s: rank %d, expected %d", name, t->shape.rank, rank);
  for (int i = 0; i < rank; i++)
    cr_assert_eq(t->shape.dims[i], dims[i], "%s: dim %d is %lld, expected %lld", name, i,
                 (long long)t->shape.dims[i], (long long)dims[i]);
}
#define EXPECT_SHAPE(g, name, ...)                                                                 \
  expect_shape(g, name, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),             \
               (const int64_t[]){__VA_ARGS__})

static void expect_loss_ok(const hap_graph *g, const char *spec) {
  cr_assert_geq(g->loss, 0, "%s: no loss", spec);
  const hap_tensor *l = &g->tensors[g->loss];
  cr_assert_eq(l->shape.rank, 0, "%s: loss has rank %d", spec, l->shape.rank);
  cr_assert_eq(l->dtype, HAP_F32, "%s: loss dtype", spec);
  cr_assert(l->requires_grad, "%s: loss needs a gradient", spec);
}

/* ---- parameter counts ---------------------------------------------------------------------- */

/* convs: 1,792 + 36,928 + 73,856 + 147,584 + 295,168 + 3 * 590,080 + 1,180,160 + 7 * 2,359,808
 *        = 20,024,384 (3x3 weights + biases);
 * FC:    25088*4096+4096 = 102,764,544; 4096*4096+4096 = 16,781,312; 4096*10+10 = 40,970;
 * total  139,611,210 (HAP-SPEC §11: 139.6 M). */
Test(zoo_params, vgg19) {
  int64_t n = params_of("vgg19");
  cr_assert_eq(n, 139611210LL, "vgg19 has %lld params", (long long)n);
  cr_assert_lt(fabs((double)n - 139.6e6) / 139.6e6, 1e-3);
}

/* One encoder layer (768, 3072): in_proj 3*768*768+3*768 = 1,771,776; out_proj 590,592;
 * linear1 2,362,368; linear2 2,360,064; two layer norms 3,072 => 7,087,872 (HAP-SPEC §11).
 * vit: patch conv 3*768*16+768 = 37,632; cls 768; pos 65*768 = 49,920; 12 layers 85,054,464;
 * head 7,690 => 85,150,474. */
Test(zoo_params, vit) {
  int64_t n = params_of("vit");
  cr_assert_eq(n, 85150474LL, "vit has %lld params", (long long)n);
  cr_assert_lt(fabs((double)n - 85.15e6) / 85.15e6, 1e-3);
  cr_assert_eq(params_of("vit:layers=1") + 11 * 7087872LL, 85150474LL);
}

/* embedding 33280*768 = 25,559,040; 12 layers 85,054,464; head 768*33280+33280 = 25,592,320
 * => 136,205,824. */
Test(zoo_params, bert_base) {
  int64_t n = params_of("bert-base");
  cr_assert_eq(n, 136205824LL, "bert-base has %lld params", (long long)n);
  cr_assert_lt(fabs((double)n - 136.2e6) / 136.2e6, 1e-3);
}

/* MoE layer at E experts: attention 2,362,368 + norms 3,072 + gate 768*E + 2*E*768*3072.
 * E=16: 77,875,200; 6 of them + 6 dense layers (42,527,232) + embed and head (51,151,360)
 * => 560,929,792 (HAP: 561 M @ 8 devices). E=32: 153,384,960 => 1,013,988,352 (1014 M @ 16). */
Test(zoo_params, bert_moe) {
  int64_t n = params_of("bert-moe");
  cr_assert_eq(n, 560929792LL, "bert-moe has %lld params", (long long)n);
  cr_assert_lt(fabs((double)n - 561e6) / 561e6, 1e-3);
  int64_t n16 = params_of("bert-moe:devices=16");
  cr_assert_eq(n16, 1013988352LL, "bert-moe @16 has %lld params", (long long)n16);
  cr_assert_lt(fabs((double)n16 - 1014e6) / 1014e6, 1e-3);
}

/* Per block 12 D^2 + 13 D; gpt2: 12 * 7,087,872 + wte 50257*768 + wpe 1024*768 + ln_f 1,536
 * = 124,439,808 (GPT-2 small). */
Test(zoo_params, gpt2) {
  cr_assert_eq(params_of("gpt"), 124439808LL);
  cr_assert_eq(params_of("gpt:granularity=fine"), 124439808LL);
}

/* gpt3-175b: 96 * (12 * 12288^2 + 13 * 12288) = 173,961,510,912; wte 617,558,016; wpe
 * 2048*12288 = 25,165,824; ln_f 24,576 => 174,604,259,328 (0.23 % under 175e9). */
Test(zoo_params, gpt3_175b) {
  int64_t fused = params_of("gpt:preset=gpt3-175b,batch=1");
  int64_t fine = params_of("gpt:preset=gpt3-175b,granularity=fine,batch=1");
  cr_assert_eq(fused, 174604259328LL, "fused: %lld", (long long)fused);
  cr_assert_eq(fine, fused, "fine %lld vs fused %lld", (long long)fine, (long long)fused);
  cr_assert_lt(fabs((double)fused - 175e9) / 175e9, 1e-2);
}

/* ---- every model builds ---------------------------------------------------------------------- */

Test(zoo_build, defaults_and_small) {
  static const char *specs[] = {
      "mlp",
      "mlp:layers=2,batch=4,seq=16,hidden=32",
      "bert-base",
      "bert-base:layers=2,batch=4,seq=16",
      "bert-base:layers=2,batch=4,seq=16,width=64,hidden=128,heads=4,vocab=100",
      "vit",
      "vit:layers=2,batch=4",
      "vit:layers=1,batch=2,width=32,hidden=64,heads=2,image=8,patch=2,classes=3",
      "bert-moe",
      "bert-moe:layers=2,batch=4,seq=16",
      "bert-moe:layers=3,batch=4,seq=16,devices=2,width=64,hidden=128,heads=4,vocab=100",
      "vgg19",
      "vgg19:batch=4,classes=100",
      "gpt",
      "gpt:layers=2,batch=4,seq=16",
      "gpt:layers=2,batch=4,seq=16,granularity=fine",
      "gpt:preset=none,layers=1,batch=1,seq=8,width=16,heads=2,vocab=50,dropout=0",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    hap_graph *g = build(specs[i]);
    expect_loss_ok(g, specs[i]);
    hap_err err = {0};
    cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s: %s", specs[i], err.msg);
    cr_assert_gt(param_count(g), 0);
    hap_graph_destroy(g);
  }
}

Test(zoo_build, registry) {
  cr_assert_eq(hap_zoo_count(), 6);
  static const char *names[] = {"mlp", "bert-base", "vit", "bert-moe", "vgg19", "gpt"};
  for (int i = 0; i < 6; i++) {
    cr_assert_str_eq(hap_zoo_get(i)->name, names[i]);
    cr_assert_eq(hap_zoo_find(names[i]), hap_zoo_get(i));
    cr_assert_leq(hap_zoo_get(i)->n_opts, HAP_MODEL_MAX_OPTS);
  }
  cr_assert_null(hap_zoo_get(6));
  cr_assert_null(hap_zoo_get(-1));
  cr_assert_null(hap_zoo_find("bert"));
}

Test(zoo_build, bert_base_structure) {
  hap_graph *g = build("bert-base");
  cr_assert_str_eq(g->name, "bert-base");
  EXPECT_SHAPE(g, "embed.weight", 33280, 768);
  cr_assert_eq(tensor(g, "embed.weight")->kind, HAP_TENSOR_PARAMETER);
  EXPECT_SHAPE(g, "x", 256, 128);
  cr_assert_eq(tensor(g, "x")->kind, HAP_TENSOR_INPUT);
  cr_assert_eq(tensor(g, "x")->dtype, HAP_I64);
  cr_assert_eq(tensor(g, "y")->dtype, HAP_I64);
  EXPECT_SHAPE(g, "pos_encoder.pe", 1, 128, 768);
  cr_assert_eq(tensor(g, "pos_encoder.pe")->kind, HAP_TENSOR_BUFFER);
  EXPECT_SHAPE(g, "mask", 128, 128);
  cr_assert_eq(tensor(g, "mask")->kind, HAP_TENSOR_BUFFER);
  EXPECT_SHAPE(g, "layers.11.self_attn.in_proj_weight", 3, 768, 768);
  EXPECT_SHAPE(g, "layers.11.self_attn.in_proj_bias", 3, 768);
  EXPECT_SHAPE(g, "layers.11.self_attn.out_proj.weight", 768, 768);
  EXPECT_SHAPE(g, "layers.3.linear1.weight", 3072, 768);
  EXPECT_SHAPE(g, "layers.3.linear2.bias", 768);
  EXPECT_SHAPE(g, "layers.3.norm2.weight", 768);
  EXPECT_SHAPE(g, "layers.3.linear1", 256, 128, 3072);
  EXPECT_SHAPE(g, "head.weight", 33280, 768);
  EXPECT_SHAPE(g, "log_softmax.t", 256, 33280, 128);
  cr_assert_lt(hap_graph_find_tensor(g, "layers.12.linear1.weight"), 0);
  /* every layer's attention takes the causal mask as its 8th input */
  int32_t attn = hap_graph_find_node(g, "layers.5.self_attn");
  cr_assert_geq(attn, 0);
  cr_assert_eq(g->nodes[attn].op, HAP_OP_MULTI_HEAD_ATTENTION);
  cr_assert_eq(g->nodes[attn].n_inputs, 8);
  cr_assert_eq(g->nodes[attn].inputs[7], hap_graph_find_tensor(g, "mask"));
  cr_assert_eq(consumers(g, hap_graph_find_tensor(g, "mask")), 12);
  int32_t loss = hap_graph_find_node(g, "loss");
  cr_assert_eq(g->nodes[loss].op, HAP_OP_NLL_LOSS);
  cr_assert_str_eq(hap_attr_s(&g->nodes[loss].attrs, 0), "sum");
  cr_assert_eq(g->loss, hap_graph_find_tensor(g, "loss"));
  /* 3 (embed, scale, PE) + 12 layers x 11 + head, log_softmax, transpose, loss */
  cr_assert_eq(g->n_nodes, 3 + 12 * 11 + 4);
  cr_assert_str_eq(g->source, "bert-base:batch=256,seq=128,layers=12,width=768,hidden=3072,"
                              "heads=12,vocab=33280,dropout=0.1,segments=0");
  hap_graph_destroy(g);
}

Test(zoo_build, vit_and_vgg_structure) {
  hap_graph *g = build("vit");
  EXPECT_SHAPE(g, "patch_embed", 256, 64, 768);
  EXPECT_SHAPE(g, "cls_token", 1, 1, 768);
  EXPECT_SHAPE(g, "pos_embed", 1, 65, 768);
  EXPECT_SHAPE(g, "cls_select", 256, 768);
  EXPECT_SHAPE(g, "head", 256, 10);
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "layers.0.self_attn")].n_inputs, 7, "no mask");
  hap_graph_destroy(g);

  g = build("vgg19");
  EXPECT_SHAPE(g, "features.0.weight", 64, 3, 3, 3);
  EXPECT_SHAPE(g, "features.34.weight", 512, 512, 3, 3); /* last conv, torchvision index */
  EXPECT_SHAPE(g, "features.36", 256, 512, 1, 1);        /* last pool */
  EXPECT_SHAPE(g, "avgpool", 256, 512, 7, 7);
  EXPECT_SHAPE(g, "flatten", 256, 25088);
  EXPECT_SHAPE(g, "classifier.0.weight", 4096, 25088);
  EXPECT_SHAPE(g, "classifier.6", 256, 10);
  cr_assert_eq(g->n_nodes, 16 * 2 + 5 + 2 + 7 + 2);
  hap_graph_destroy(g);
}

Test(zoo_build, bert_moe_structure) {
  hap_graph *g = build("bert-moe");
  /* odd layers are MoE: capacity ceil(128/16 * 2.5) = 20 */
  cr_assert_lt(hap_graph_find_tensor(g, "layers.0.gate.weight"), 0);
  EXPECT_SHAPE(g, "layers.1.gate.weight", 768, 16);
  EXPECT_SHAPE(g, "layers.1.gate.dispatch", 256, 128, 16, 20);
  EXPECT_SHAPE(g, "layers.1.gate.combine", 256, 128, 16, 20);
  EXPECT_SHAPE(g, "layers.11.experts.w1", 16, 768, 3072);
  EXPECT_SHAPE(g, "layers.11.experts.w2", 16, 3072, 768);
  EXPECT_SHAPE(g, "layers.1.experts.dispatch", 256, 16, 20, 768);
  EXPECT_SHAPE(g, "layers.1.experts.fc1", 256, 16, 20, 3072);
  EXPECT_SHAPE(g, "layers.1.experts.combine", 256, 128, 768);
  cr_assert_str_eq(g->source, "bert-moe:batch=256,seq=128,layers=12,width=768,hidden=3072,"
                              "heads=12,vocab=33280,dropout=0.1,segments=0,devices=8,experts=16,"
                              "capacity=20");
  hap_graph_destroy(g);

  /* derived defaults follow devices and seq; explicit values win */
  g = build("bert-moe:devices=32,layers=2,batch=8");
  EXPECT_SHAPE(g, "layers.1.gate.dispatch", 8, 128, 64, 5); /* ceil(128/64*2.5) = 5 */
  hap_graph_destroy(g);
  g = build("bert-moe:devices=64,layers=2,batch=8");
  EXPECT_SHAPE(g, "layers.1.gate.dispatch", 8, 128, 128, 3); /* ceil(2.5) = 3 */
  hap_graph_destroy(g);
  g = build("bert-moe:experts=4,capacity=7,layers=2,batch=8");
  EXPECT_SHAPE(g, "layers.1.gate.dispatch", 8, 128, 4, 7);
  hap_graph_destroy(g);
}

Test(zoo_build, segments) {
  hap_graph *g = build("bert-base:layers=3,batch=4,seq=16,segments=1");
  cr_assert_eq(g->n_segments, 4);
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "layers.0.norm2")].segment, 0);
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "layers.1.self_attn")].segment, 1);
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "loss")].segment, 3);
  hap_graph_destroy(g);
  g = build("bert-base:layers=3,batch=4,seq=16");
  cr_assert_eq(g->n_segments, 1);
  hap_graph_destroy(g);
  g = build("vgg19:segments=1");
  cr_assert_eq(g->n_segments, 6); /* five pools */
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "features.4")].segment, 0);
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "features.5")].segment, 1);
  hap_graph_destroy(g);
  g = build("mlp:layers=5,segments=1");
  cr_assert_eq(g->n_segments, 6);
  hap_graph_destroy(g);
  g = build("gpt:layers=2,batch=1,seq=8,segments=1,granularity=fine");
  cr_assert_eq(g->n_segments, 3);
  hap_graph_destroy(g);
}

/* ---- gpt ------------------------------------------------------------------------------------- */

Test(zoo_gpt, weight_tying) {
  static const char *specs[] = {"gpt:layers=2,batch=2,seq=16",
                                "gpt:layers=2,batch=2,seq=16,granularity=fine"};
  for (int i = 0; i < 2; i++) {
    hap_graph *g = build(specs[i]);
    int32_t wte = hap_graph_find_tensor(g, "wte.weight");
    cr_assert_geq(wte, 0);
    cr_assert_eq(consumers(g, wte), 2, "%s: wte feeds the embedding and the head", specs[i]);
    EXPECT_SHAPE(g, "wte.weight", 50257, 768);
    EXPECT_SHAPE(g, "logits", 2, 50257, 16); /* [B, V, S]: classes in dim 1 */
    EXPECT_SHAPE(g, "y", 2, 16);
    cr_assert_lt(hap_graph_find_tensor(g, "lm_head.bias"), 0);
    hap_graph_destroy(g);
  }
}

/* Fine: 57 nodes per block (2 layer norms of 9, attention 23, gelu 8, fc1 and fc2 2 each,
 * 2 dropouts, 2 residual adds) + 16 (embedding, wpe add, dropout, ln_f 9, head transpose and
 * matmul, the logits transpose to [B, V, S], loss). Fused: 10 per block + 7. */
Test(zoo_gpt, node_counts) {
  hap_graph *g = build("gpt:preset=gpt3-175b,granularity=fine,batch=1");
  cr_assert_geq(g->n_nodes, 5000);
  cr_assert_eq(g->n_nodes, 57 * 96 + 16);
  cr_assert_str_eq(g->source, "gpt:preset=gpt3-175b,batch=1,seq=2048,layers=96,width=12288,"
                              "heads=96,vocab=50257,dropout=0.1,granularity=fine,segments=0");
  EXPECT_SHAPE(g, "layers.95.attn.scores", 1, 96, 2048, 2048);
  EXPECT_SHAPE(g, "layers.95.attn.q.weight", 12288, 12288);
  EXPECT_SHAPE(g, "layers.0.fc1.weight", 12288, 4 * 12288);
  hap_graph_destroy(g);
  g = build("gpt:preset=gpt3-175b,batch=1");
  cr_assert_eq(g->n_nodes, 10 * 96 + 7);
  EXPECT_SHAPE(g, "layers.0.fc1.weight", 4 * 12288, 12288);
  EXPECT_SHAPE(g, "layers.0.attn.in_proj_weight", 3, 12288, 12288);
  hap_graph_destroy(g);
}

Test(zoo_gpt, fine_ops) {
  hap_graph *g = build("gpt:layers=1,batch=2,seq=8,granularity=fine");
  static const struct {
    const char *name;
    hap_op op;
  } want[] = {
      {"layers.0.ln1.mean", HAP_OP_MEAN},
      {"layers.0.ln1.rstd", HAP_OP_RSQRT},
      {"layers.0.attn.q.matmul", HAP_OP_MATMUL},
      {"layers.0.attn.q.heads", HAP_OP_PERMUTE},
      {"layers.0.attn.k.t", HAP_OP_TRANSPOSE},
      {"layers.0.attn.probs", HAP_OP_SOFTMAX},
      {"layers.0.gelu.cube", HAP_OP_POW},
      {"layers.0.gelu.tanh", HAP_OP_TANH},
      {"lm_head", HAP_OP_MATMUL},
      {"loss", HAP_OP_CROSS_ENTROPY},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int32_t n = hap_graph_find_node(g, want[i].name);
    cr_assert_geq(n, 0, "node %s missing", want[i].name);
    cr_assert_eq(g->nodes[n].op, want[i].op, "node %s is %s", want[i].name,
                 hap_op_name(g->nodes[n].op));
  }
  for (int32_t n = 0; n < g->n_nodes; n++) {
    hap_op op = g->nodes[n].op;
    cr_assert(op != HAP_OP_LINEAR && op != HAP_OP_LAYER_NORM && op != HAP_OP_GELU &&
                  op != HAP_OP_MULTI_HEAD_ATTENTION,
              "fine graph has fused op %s at %s", hap_op_name(op), g->nodes[n].name);
  }
  EXPECT_SHAPE(g, "layers.0.attn.concat", 2, 8, 768);
  EXPECT_SHAPE(g, "layers.0.attn.k.t", 2, 12, 64, 8);
  hap_graph_destroy(g);
}

Test(zoo_gpt, presets) {
  hap_graph *g = build("gpt:preset=gpt2-xl,layers=2,batch=1");
  EXPECT_SHAPE(g, "wpe.weight", 1, 1024, 1600);
  EXPECT_SHAPE(g, "layers.1.fc2.weight", 1600, 6400);
  cr_assert_lt(hap_graph_find_node(g, "layers.2.attn"), 0);
  cr_assert_eq(g->nodes[hap_graph_find_node(g, "layers.1.attn")].attrs.v[0].u.i, 25);
  hap_graph_destroy(g);
  g = build("gpt:preset=gpt3-6.7b,layers=1,seq=128,batch=1");
  EXPECT_SHAPE(g, "wpe.weight", 1, 128, 4096);
  hap_graph_destroy(g);
  g = build("gpt:preset=none,layers=1,batch=1");
  EXPECT_SHAPE(g, "wpe.weight", 1, 1024, 768);
  hap_graph_destroy(g);
}

Test(zoo_gpt, builds_fast) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  hap_graph *g = build("gpt:preset=gpt3-175b,granularity=fine,batch=1");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  cr_assert_lt(s, 5.0, "175B fine graph took %.3f s to build", s); /* ~10 ms; loose for ASan */
  hap_graph_destroy(g);
}

/* ---- spec parsing ---------------------------------------------------------------------------- */

Test(zoo_spec, sets_options) {
  const hap_model_def *def = NULL;
  hap_model_args args;
  hap_err err = {0};
  cr_assert_eq(hap_model_parse_spec("bert-base:layers=24,batch=256,seq=128", &def, &args, &err),
               HAP_OK, "%s", err.msg);
  cr_assert_str_eq(def->name, "bert-base");
  int layers = -1, batch = -1, seq = -1, width = -1;
  for (int i = 0; i < def->n_opts; i++) {
    const char *n = def->opts[i].name;
    if (strcmp(n, "layers") == 0)
      layers = i;
    else if (strcmp(n, "batch") == 0)
      batch = i;
    else if (strcmp(n, "seq") == 0)
      seq = i;
    else if (strcmp(n, "width") == 0)
      width = i;
  }
  cr_assert(layers >= 0 && batch >= 0 && seq >= 0 && width >= 0);
  cr_assert_eq(args.v[layers], 24);
  cr_assert_eq(args.v[batch], 256);
  cr_assert_eq(args.v[seq], 128);
  cr_assert_eq(args.v[width], 768, "defaults fill the rest");
  cr_assert_eq(args.given, (1u << layers) | (1u << batch) | (1u << seq));

  cr_assert_eq(hap_model_parse_spec("gpt", &def, &args, &err), HAP_OK);
  cr_assert_str_eq(def->name, "gpt");
  cr_assert_eq(args.given, 0u);
  cr_assert_eq(hap_model_parse_spec("gpt:granularity=fine,dropout=0.25", &def, &args, &err), HAP_OK,
               "%s", err.msg);
  cr_assert_eq(args.v[8], 1);
  cr_assert_eq(args.v[7], 0.25);

  hap_graph *g = build("bert-base:layers=24,batch=256,seq=128");
  cr_assert_not_null(tensor(g, "layers.23.norm2.weight"));
  cr_assert_str_eq(g->source, "bert-base:batch=256,seq=128,layers=24,width=768,hidden=3072,"
                              "heads=12,vocab=33280,dropout=0.1,segments=0");
  hap_graph_destroy(g);
}

/* The recorded source rebuilds the same graph. */
Test(zoo_spec, source_round_trips) {
  static const char *specs[] = {"mlp:layers=3", "vit:dropout=0.3,layers=2",
                                "bert-moe:devices=4,layers=2", "vgg19:segments=1",
                                "gpt:preset=gpt2-xl,layers=1,batch=1,granularity=fine"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    hap_graph *a = build(specs[i]);
    hap_graph *b = build(a->source);
    cr_assert_str_eq(a->source, b->source);
    cr_assert_eq(a->n_nodes, b->n_nodes);
    cr_assert_eq(param_count(a), param_count(b));
    hap_graph_destroy(a);
    hap_graph_destroy(b);
  }
}

Test(zoo_spec, unknown_model) {
  char msg[1024];
  build_fails("bert-large", HAP_ENOTFOUND, msg, sizeof msg);
  cr_assert(strstr(msg, "bert-large") != NULL, "%s", msg);
  cr_assert(strstr(msg, "bert-base") && strstr(msg, "vgg19") && strstr(msg, "gpt"),
            "lists the zoo: %s", msg);
  build_fails("", HAP_EINVAL, msg, sizeof msg);
  build_fails(":layers=2", HAP_ENOTFOUND, msg, sizeof msg);
  cr_assert_null(hap_zoo_find(""));
}

Test(zoo_spec, unknown_option) {
  char msg[1024];
  build_fails("bert-base:layer=2", HAP_ENOTFOUND, msg, sizeof msg);
  cr_assert(strstr(msg, "bert-base") && strstr(msg, "'layer'"), "%s", msg);
  cr_assert(strstr(msg, "layers") && strstr(msg, "heads") && strstr(msg, "segments"),
            "lists the options: %s", msg);
  build_fails("bert-base:experts=4", HAP_ENOTFOUND, msg, sizeof msg); /* bert-moe only */
  cr_assert(strstr(msg, "'experts'"), "%s", msg);
}

Test(zoo_spec, bad_values) {
  static const char *specs[] = {"bert-base:layers=abc", "bert-base:layers=0",
                                "bert-base:layers=3x",  "bert-base:layers=-2",
                                "bert-base:layers=",    "bert-base:layers= 3",
                                "bert-base:layers=1.5", "bert-base:layers=99999999999"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    char msg[1024];
    build_fails(specs[i], HAP_EINVAL, msg, sizeof msg);
    cr_assert(strstr(msg, "'layers'") && strstr(msg, "positive integer"), "%s: %s", specs[i], msg);
  }
  char msg[1024];
  build_fails("vit:dropout=x", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'dropout'") && strstr(msg, "number"), "%s", msg);
  build_fails("vit:dropout=nan", HAP_EINVAL, msg, sizeof msg);
  build_fails("vit:dropout=0.1.2", HAP_EINVAL, msg, sizeof msg);
  build_fails("vit:dropout=1.5", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'dropout'") && strstr(msg, "probability"), "%s", msg);
  build_fails("gpt:granularity=coarse", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'granularity'") && strstr(msg, "coarse") && strstr(msg, "fused,fine"),
            "%s", msg);
  build_fails("gpt:preset=gpt4", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'preset'") && strstr(msg, "gpt3-175b"), "%s", msg);
  build_fails("mlp:segments=2", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'segments'"), "%s", msg);
}

Test(zoo_spec, malformed) {
  char msg[1024];
  build_fails("bert-base:layers=2,layers=3", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'layers'") && strstr(msg, "twice"), "%s", msg);
  build_fails("bert-base:layers", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "key=value"), "%s", msg);
  build_fails("bert-base:", HAP_EINVAL, msg, sizeof msg);
  build_fails("bert-base:layers=2,", HAP_EINVAL, msg, sizeof msg);
  build_fails("bert-base:,layers=2", HAP_EINVAL, msg, sizeof msg);
  build_fails("bert-base:=2", HAP_EINVAL, msg, sizeof msg);
}

Test(zoo_spec, inconsistent_options) {
  char msg[1024];
  build_fails("bert-base:heads=7", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'heads'") && strstr(msg, "'width'"), "%s", msg);
  build_fails("gpt:preset=gpt2-xl,heads=12", HAP_EINVAL, msg, sizeof msg); /* 1600 % 12 */
  cr_assert(strstr(msg, "'heads'"), "%s", msg);
  build_fails("vit:image=30", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'image'") && strstr(msg, "'patch'"), "%s", msg);
  build_fails("bert-moe:experts=1", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'experts'"), "%s", msg);
  build_fails("mlp:layers=2000000000", HAP_EINVAL, msg, sizeof msg);
  cr_assert(strstr(msg, "'layers'") && strstr(msg, "at most"), "%s", msg);
  /* sizes beyond int64 are refused, not wrapped */
  build_fails("gpt:batch=2147483647,seq=2147483647,layers=1", HAP_EOVERFLOW, msg, sizeof msg);
}

/* ---- determinism and loading ------------------------------------------------------------------
 */

Test(zoo_misc, deterministic) {
  static const char *specs[] = {"bert-moe:layers=4", "gpt:layers=3,granularity=fine", "vgg19",
                                "vit:layers=2"};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    hap_graph *a = build(specs[s]), *b = build(specs[s]);
    cr_assert_eq(a->n_tensors, b->n_tensors);
    cr_assert_eq(a->n_nodes, b->n_nodes);
    for (int32_t t = 0; t < a->n_tensors; t++) {
      cr_assert_str_eq(a->tensors[t].name, b->tensors[t].name);
      cr_assert_eq(a->tensors[t].kind, b->tensors[t].kind);
      cr_assert_eq(a->tensors[t].dtype, b->tensors[t].dtype);
      cr_assert(hap_shape_eq(&a->tensors[t].shape, &b->tensors[t].shape), "%s", a->tensors[t].name);
    }
    for (int32_t n = 0; n < a->n_nodes; n++) {
      cr_assert_str_eq(a->nodes[n].name, b->nodes[n].name);
      cr_assert_eq(a->nodes[n].op, b->nodes[n].op);
      cr_assert(hap_attrs_eq(&a->nodes[n].attrs, &b->nodes[n].attrs, a->nodes[n].op));
      cr_assert_eq(memcmp(a->nodes[n].inputs, b->nodes[n].inputs, sizeof a->nodes[n].inputs), 0);
    }
    hap_graph_destroy(a);
    hap_graph_destroy(b);
  }
}

Test(zoo_misc, load_spec_and_file) {
  hap_graph *g = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_model_load("vit:layers=2,batch=4", &g, &err), HAP_OK, "%s", err.msg);
  int64_t params = param_count(g);
  char dir[] = "/tmp/hap_zoo_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/vit.json", dir);
  cr_assert_eq(hap_graph_write_file(g, path, &err), HAP_OK, "%s", err.msg);
  hap_graph_destroy(g);

  g = NULL;
  cr_assert_eq(hap_model_load(path, &g, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(param_count(g), params);
  cr_assert_str_eq(g->name, "vit");
  hap_graph_destroy(g);

  /* a path without '/' or ".json" that names an existing file is a file too */
  cr_assert_eq(chdir(dir), 0);
  cr_assert_eq(rename("vit.json", "mygraph"), 0);
  g = NULL;
  cr_assert_eq(hap_model_load("mygraph", &g, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(param_count(g), params);
  hap_graph_destroy(g);
  unlink("mygraph");
  cr_assert_eq(chdir("/"), 0);
  rmdir(dir);

  g = (hap_graph *)1;
  hap_err_clear(&err);
  cr_assert_neq(hap_model_load("/nonexistent/model.json", &g, &err), HAP_OK);
  cr_assert_null(g);
  g = (hap_graph *)1;
  hap_err_clear(&err);
  cr_assert_eq(hap_model_load("nosuchmodel", &g, &err), HAP_ENOTFOUND);
  cr_assert_null(g);
}
