/* zoo_text.c — sequence models of the zoo: mlp (HAP's TMLP), bert-base (Rtransformer), bert-moe
 * (Rmoe) and gpt (decoder-only, fused or fine-grained). Shapes in comments: B batch, S sequence,
 * D width, F hidden (feed-forward), H heads, V vocabulary, E experts, C expert capacity. */
#include <math.h>
#include <stdio.h>

#include "zoo_internal.h"

#define SEGMENTS_OPT                                                                               \
  { "segments", HAP_MOPT_CHOICE, 0, "0,1", "1: a new segment after every layer" }

/* ---- mlp ----------------------------------------------------------------------------------- */

enum { MLP_BATCH, MLP_SEQ, MLP_HIDDEN, MLP_LAYERS, MLP_SEGMENTS };

static const hap_model_opt mlp_opts[] = {
    {"batch", HAP_MOPT_INT, 256, NULL, "global batch size"},
    {"seq", HAP_MOPT_INT, 128, NULL, "positions per sample"},
    {"hidden", HAP_MOPT_INT, 768, NULL, "width of every layer"},
    {"layers", HAP_MOPT_INT, 12, NULL, "linear + sigmoid layers"},
    SEGMENTS_OPT,
};

/* x [B,S,D] -> layers x (linear D->D, sigmoid) -> sum of everything. */
static hap_status build_mlp(hap_graph *g, const hap_model_args *args, hap_err *err) {
  const double *v = args->v;
  int64_t batch = (int64_t)v[MLP_BATCH], seq = (int64_t)v[MLP_SEQ];
  int64_t hidden = (int64_t)v[MLP_HIDDEN], layers = (int64_t)v[MLP_LAYERS];
  bool segments = v[MLP_SEGMENTS] != 0;
  zb b;
  zb_init(&b, g, err);
  zb_require_layers(&b, layers);
  int32_t h = zb_input(&b, "x", HAP_F32, SHAPE(batch, seq, hidden));
  for (int64_t i = 0; i < layers && b.st == HAP_OK; i++) {
    zb_scope(&b, "layers.%lld", (long long)i);
    h = zb_linear(&b, "linear", h, hidden, hidden, true);
    h = zb_unary(&b, "sigmoid", HAP_OP_SIGMOID, h);
    zb_segment(&b, segments);
  }
  zb_top(&b);
  int32_t loss = zb_reduce(&b, "loss", HAP_OP_SUM, h, NULL, 0, false);
  return zb_finish(&b, &hap_zoo_mlp, args, loss);
}

const hap_model_def hap_zoo_mlp = {
    .name = "mlp",
    .summary = "HAP's TMLP: linear + sigmoid layers on [batch, seq, hidden], sum loss",
    .n_opts = (int)(sizeof mlp_opts / sizeof mlp_opts[0]),
    .opts = mlp_opts,
    .build = build_mlp,
};

/* ---- bert-base and bert-moe ---------------------------------------------------------------- */

enum {
  TXT_BATCH,
  TXT_SEQ,
  TXT_LAYERS,
  TXT_WIDTH,
  TXT_HIDDEN,
  TXT_HEADS,
  TXT_VOCAB,
  TXT_DROPOUT,
  TXT_SEGMENTS,
  TXT_N_DENSE, /* bert-base stops here; bert-moe adds: */
  TXT_DEVICES = TXT_N_DENSE,
  TXT_EXPERTS,
  TXT_CAPACITY,
  TXT_N_MOE
};

/* Shared by bert-base (the first TXT_N_DENSE) and bert-moe (all). */
static const hap_model_opt text_opts[] = {
    {"batch", HAP_MOPT_INT, 256, NULL, "global batch size (32 per device, 8 devices)"},
    {"seq", HAP_MOPT_INT, 128, NULL, "sequence length"},
    {"layers", HAP_MOPT_INT, 12, NULL, "encoder layers"},
    {"width", HAP_MOPT_INT, 768, NULL, "model width (embedding size)"},
    {"hidden", HAP_MOPT_INT, 3072, NULL, "feed-forward width"},
    {"heads", HAP_MOPT_INT, 12, NULL, "attention heads (divide width)"},
    {"vocab", HAP_MOPT_INT, 33280, NULL, "vocabulary (WikiText-2 rounded up: 8*(33278//8+1))"},
    {"dropout", HAP_MOPT_FLOAT, 0.1, NULL, "dropout probability"},
    SEGMENTS_OPT,
    {"devices", HAP_MOPT_INT, 8, NULL, "devices the experts are sized for"},
    {"experts", HAP_MOPT_INT, 16, NULL, "experts per MoE layer (default 2*devices)"},
    {"capacity", HAP_MOPT_INT, 20, NULL,
     "token slots per expert (default ceil(seq/experts*2.5): capacity factor 1.25, doubled)"},
};

typedef struct text_cfg {
  int64_t batch, seq, layers, width, hidden, heads, vocab;
  double dropout;
  bool segments;
  int64_t experts, capacity; /* bert-moe only */
} text_cfg;

static text_cfg text_config(const hap_model_args *args) {
  const double *v = args->v;
  return (text_cfg){.batch = (int64_t)v[TXT_BATCH],
                    .seq = (int64_t)v[TXT_SEQ],
                    .layers = (int64_t)v[TXT_LAYERS],
                    .width = (int64_t)v[TXT_WIDTH],
                    .hidden = (int64_t)v[TXT_HIDDEN],
                    .heads = (int64_t)v[TXT_HEADS],
                    .vocab = (int64_t)v[TXT_VOCAB],
                    .dropout = v[TXT_DROPOUT],
                    .segments = v[TXT_SEGMENTS] != 0,
                    .experts = (int64_t)v[TXT_EXPERTS],
                    .capacity = (int64_t)v[TXT_CAPACITY]};
}

/* Top-2 MoE feed-forward block (HAP's Top2TransformerEncoderLayer after its attention block):
 * gate [D,E] routes h [B,S,D] into E experts of C slots; W1 [E,D,F], W2 [E,F,D], no biases. */
static int32_t moe_block(zb *b, int32_t h, const text_cfg *c) {
  int32_t gate = zb_param(b, "gate.weight", SHAPE(c->width, c->experts));
  int32_t masks[2]; /* dispatch, combine [B,S,E,C] */
  zb_top2_gating(b, "gate", h, gate, c->capacity, masks);
  int32_t x = zb_einsum(b, "experts.dispatch", "bsd,bsec->becd", h, masks[0]);
  int32_t w1 = zb_param(b, "experts.w1", SHAPE(c->experts, c->width, c->hidden));
  x = zb_einsum(b, "experts.fc1", "edh,becd->bech", w1, x); /* [B,E,C,F] */
  x = zb_unary(b, "experts.relu", HAP_OP_RELU, x);
  int32_t w2 = zb_param(b, "experts.w2", SHAPE(c->experts, c->hidden, c->width));
  x = zb_einsum(b, "experts.fc2", "ehd,bech->becd", w2, x);              /* [B,E,C,D] */
  return zb_einsum(b, "experts.combine", "becd,bsec->bsd", x, masks[1]); /* [B,S,D] */
}

static int32_t moe_layer(zb *b, int32_t x, int32_t mask, const text_cfg *c) {
  int32_t h = zb_encoder_attention(b, x, mask, c->width, c->heads, c->dropout);
  int32_t f = moe_block(b, h, c);
  f = zb_dropout(b, "dropout2", f, c->dropout);
  int32_t y = zb_binary(b, "add2", HAP_OP_ADD, h, f);
  return zb_layer_norm(b, "norm2", y, c->width);
}

static void check_text(zb *b, const text_cfg *c) {
  zb_require_divides(b, "heads", c->heads, "width", c->width);
  zb_require_prob(b, "dropout", c->dropout);
  zb_require_layers(b, c->layers);
}

/* tokens x [B,S] -> embed * sqrt(D) + PE -> encoder layers (causal mask) -> head D->V ->
 * log_softmax -> transpose(1,2) -> nll_loss(sum) with targets y [B,S]. With `moe`, odd layers
 * are top-2 MoE layers. */
static hap_status build_text(hap_graph *g, const hap_model_def *def, const hap_model_args *args,
                             bool moe, hap_err *err) {
  text_cfg c = text_config(args);
  zb b;
  zb_init(&b, g, err);
  check_text(&b, &c);
  int32_t x = zb_input(&b, "x", HAP_I64, SHAPE(c.batch, c.seq));
  int32_t y = zb_input(&b, "y", HAP_I64, SHAPE(c.batch, c.seq));
  int32_t h = zb_embedding(&b, "embed", x, zb_param(&b, "embed.weight", SHAPE(c.vocab, c.width)));
  h = zb_scalar(&b, "embed.scale", HAP_OP_MUL, h, sqrt((double)c.width));
  int32_t pe = zb_buffer(&b, "pos_encoder.pe", SHAPE(1, c.seq, c.width)); /* sinusoidal */
  h = zb_binary(&b, "pos_encoder", HAP_OP_ADD, h, pe);
  int32_t mask = zb_buffer(&b, "mask", SHAPE(c.seq, c.seq)); /* -inf above the diagonal */
  for (int64_t i = 0; i < c.layers && b.st == HAP_OK; i++) {
    zb_scope(&b, "layers.%lld", (long long)i);
    if (moe && i % 2 == 1)
      h = moe_layer(&b, h, mask, &c);
    else
      h = zb_encoder_layer(&b, h, mask, c.width, c.hidden, c.heads, c.dropout);
    zb_segment(&b, c.segments);
  }
  zb_top(&b);
  h = zb_linear(&b, "head", h, c.width, c.vocab, true); /* [B,S,V] */
  h = zb_softmax(&b, "log_softmax", HAP_OP_LOG_SOFTMAX, h, -1);
  h = zb_transpose(&b, "log_softmax.t", h, 1, 2); /* [B,V,S] */
  int32_t loss = zb_loss(&b, "loss", HAP_OP_NLL_LOSS, h, y, "sum");
  return zb_finish(&b, def, args, loss);
}

static hap_status build_bert_base(hap_graph *g, const hap_model_args *args, hap_err *err) {
  return build_text(g, &hap_zoo_bert_base, args, false, err);
}

/* experts = 2*devices and capacity = ceil(seq/experts * 2.5) unless given. */
static hap_status build_bert_moe(hap_graph *g, const hap_model_args *args, hap_err *err) {
  hap_model_args a = *args;
  if (!(a.given & (1u << TXT_EXPERTS)))
    a.v[TXT_EXPERTS] = 2 * a.v[TXT_DEVICES];
  if (!(a.given & (1u << TXT_CAPACITY))) {
    int64_t seq = (int64_t)a.v[TXT_SEQ], experts = (int64_t)a.v[TXT_EXPERTS];
    int64_t capacity = (5 * seq + 2 * experts - 1) / (2 * experts); /* ceil(seq*2.5/experts) */
    a.v[TXT_CAPACITY] = (double)capacity;
  }
  if (a.v[TXT_EXPERTS] < 2)
    return hap_err_set(err, HAP_EINVAL,
                       "option 'experts' is %g, expected at least 2 (top-2 gating)",
                       a.v[TXT_EXPERTS]);
  return build_text(g, &hap_zoo_bert_moe, &a, true, err);
}

const hap_model_def hap_zoo_bert_base = {
    .name = "bert-base",
    .summary =
        "HAP's Rtransformer: 12-layer post-norm encoder LM with a causal mask, 136.2 M params",
    .n_opts = TXT_N_DENSE,
    .opts = text_opts,
    .build = build_bert_base,
};

const hap_model_def hap_zoo_bert_moe = {
    .name = "bert-moe",
    .summary =
        "HAP's Rmoe: bert-base whose odd layers are top-2 MoE layers, 561 M params @ 8 devices",
    .n_opts = TXT_N_MOE,
    .opts = text_opts,
    .build = build_bert_moe,
};

/* ---- gpt ----------------------------------------------------------------------------------- */

enum {
  GPT_PRESET,
  GPT_BATCH,
  GPT_SEQ,
  GPT_LAYERS,
  GPT_WIDTH,
  GPT_HEADS,
  GPT_VOCAB,
  GPT_DROPOUT,
  GPT_GRANULARITY,
  GPT_SEGMENTS
};

static const hap_model_opt gpt_opts[] = {
    {"preset", HAP_MOPT_CHOICE, 1, "none,gpt2,gpt2-xl,gpt3-6.7b,gpt3-175b",
     "sets the defaults of seq, layers, width and heads"},
    {"batch", HAP_MOPT_INT, 8, NULL, "global batch size"},
    {"seq", HAP_MOPT_INT, 1024, NULL, "context length"},
    {"layers", HAP_MOPT_INT, 12, NULL, "decoder blocks"},
    {"width", HAP_MOPT_INT, 768, NULL, "model width"},
    {"heads", HAP_MOPT_INT, 12, NULL, "attention heads (divide width)"},
    {"vocab", HAP_MOPT_INT, 50257, NULL, "vocabulary (GPT-2 BPE)"},
    {"dropout", HAP_MOPT_FLOAT, 0.1, NULL, "dropout probability"},
    {"granularity", HAP_MOPT_CHOICE, 0, "fused,fine",
     "fused ops, or the primitive ops a torch.fx trace of a from-scratch GPT gives"},
    SEGMENTS_OPT,
};

/* seq, layers, width, heads of each preset, in the order of the choice list ("none" first). */
static const int64_t gpt_presets[][4] = {
    {0, 0, 0, 0},         {1024, 12, 768, 12},   {1024, 48, 1600, 25},
    {2048, 32, 4096, 32}, {2048, 96, 12288, 96},
};

typedef struct gpt_cfg {
  int64_t batch, seq, layers, width, heads, vocab;
  double dropout;
  bool fine, segments;
} gpt_cfg;

/* A name "<name>.<suffix>" for the sub-steps of a fine-grained module. */
static const char *sub(zb *b, char buf[ZB_NAME_MAX], const char *name, const char *suffix) {
  if (snprintf(buf, ZB_NAME_MAX, "%s.%s", name, suffix) >= ZB_NAME_MAX)
    zb_fail(b, HAP_EINVAL, "name '%s.%s' is too long", name, suffix);
  return buf;
}

/* y = x @ W + b with W [in, out] (a from-scratch linear: matmul, then the bias add). */
static int32_t fine_linear(zb *b, const char *name, int32_t x, int64_t in, int64_t out) {
  char n[ZB_NAME_MAX];
  int32_t w = zb_param(b, sub(b, n, name, "weight"), SHAPE(in, out));
  int32_t bias = zb_param(b, sub(b, n, name, "bias"), SHAPE(out));
  x = zb_matmul(b, sub(b, n, name, "matmul"), x, w);
  return zb_binary(b, name, HAP_OP_ADD, x, bias);
}

/* layer_norm over the last dim from primitives: (x - mean) * rsqrt(var + eps) * w + b. */
static int32_t fine_layer_norm(zb *b, const char *name, int32_t x, int64_t width) {
  char n[ZB_NAME_MAX];
  const int64_t last = -1;
  int32_t w = zb_param(b, sub(b, n, name, "weight"), SHAPE(width));
  int32_t bias = zb_param(b, sub(b, n, name, "bias"), SHAPE(width));
  int32_t mu = zb_reduce(b, sub(b, n, name, "mean"), HAP_OP_MEAN, x, &last, 1, true);
  int32_t xc = zb_binary(b, sub(b, n, name, "center"), HAP_OP_SUB, x, mu);
  int32_t var = zb_binary(b, sub(b, n, name, "square"), HAP_OP_MUL, xc, xc);
  var = zb_reduce(b, sub(b, n, name, "var"), HAP_OP_MEAN, var, &last, 1, true);
  var = zb_scalar(b, sub(b, n, name, "var_eps"), HAP_OP_ADD, var, 1e-5);
  int32_t rstd = zb_unary(b, sub(b, n, name, "rstd"), HAP_OP_RSQRT, var);
  x = zb_binary(b, sub(b, n, name, "normed"), HAP_OP_MUL, xc, rstd);
  x = zb_binary(b, sub(b, n, name, "scaled"), HAP_OP_MUL, x, w);
  return zb_binary(b, name, HAP_OP_ADD, x, bias);
}

/* gelu, tanh form: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))). */
static int32_t fine_gelu(zb *b, int32_t x) {
  const double sqrt_2_over_pi = 0.7978845608028654;
  int32_t t = zb_pow(b, "gelu.cube", x, 3);
  t = zb_scalar(b, "gelu.cube_scaled", HAP_OP_MUL, t, 0.044715);
  t = zb_binary(b, "gelu.inner", HAP_OP_ADD, x, t);
  t = zb_scalar(b, "gelu.inner_scaled", HAP_OP_MUL, t, sqrt_2_over_pi);
  t = zb_unary(b, "gelu.tanh", HAP_OP_TANH, t);
  t = zb_scalar(b, "gelu.one_plus", HAP_OP_ADD, t, 1);
  t = zb_binary(b, "gelu.x_mul", HAP_OP_MUL, x, t);
  return zb_scalar(b, "gelu", HAP_OP_MUL, t, 0.5);
}

/* One of q, k, v: linear D->D, then [B,S,D] -> [B,S,H,D/H] -> [B,H,S,D/H]. */
static int32_t fine_heads(zb *b, const char *name, int32_t x, const gpt_cfg *c) {
  char n[ZB_NAME_MAX];
  int64_t hd = c->width / c->heads;
  x = fine_linear(b, name, x, c->width, c->width);
  x = zb_reshape(b, sub(b, n, name, "split"), x, SHAPE(c->batch, c->seq, c->heads, hd));
  return zb_permute(b, sub(b, n, name, "heads"), x, SHAPE(0, 2, 1, 3));
}

/* Causal self-attention from primitives; mask [S,S] is added to the scaled scores. */
static int32_t fine_attention(zb *b, int32_t x, int32_t mask, const gpt_cfg *c) {
  int64_t hd = c->width / c->heads;
  int32_t q = fine_heads(b, "attn.q", x, c);
  int32_t k = fine_heads(b, "attn.k", x, c);
  int32_t v = fine_heads(b, "attn.v", x, c);
  k = zb_transpose(b, "attn.k.t", k, -2, -1);    /* [B,H,D/H,S] */
  int32_t s = zb_matmul(b, "attn.scores", q, k); /* [B,H,S,S] */
  s = zb_scalar(b, "attn.scaled", HAP_OP_MUL, s, 1 / sqrt((double)hd));
  s = zb_binary(b, "attn.masked", HAP_OP_ADD, s, mask);
  s = zb_softmax(b, "attn.probs", HAP_OP_SOFTMAX, s, -1);
  s = zb_dropout(b, "attn.probs_drop", s, c->dropout);
  int32_t o = zb_matmul(b, "attn.context", s, v);        /* [B,H,S,D/H] */
  o = zb_permute(b, "attn.merge", o, SHAPE(0, 2, 1, 3)); /* [B,S,H,D/H] */
  o = zb_reshape(b, "attn.concat", o, SHAPE(c->batch, c->seq, c->width));
  return fine_linear(b, "attn.proj", o, c->width, c->width);
}

/* Pre-norm block: x + drop(attn(ln1(x))), then x + drop(fc2(gelu(fc1(ln2(x))))). */
static int32_t gpt_block(zb *b, int32_t x, int32_t mask, const gpt_cfg *c) {
  int64_t d = c->width;
  int32_t h = c->fine ? fine_layer_norm(b, "ln1", x, d) : zb_layer_norm(b, "ln1", x, d);
  h = c->fine ? fine_attention(b, h, mask, c)
              : zb_self_attention(b, "attn", h, mask, d, c->heads, c->dropout);
  h = zb_dropout(b, "drop1", h, c->dropout);
  x = zb_binary(b, "res1", HAP_OP_ADD, x, h);
  h = c->fine ? fine_layer_norm(b, "ln2", x, d) : zb_layer_norm(b, "ln2", x, d);
  h = c->fine ? fine_linear(b, "fc1", h, d, 4 * d) : zb_linear(b, "fc1", h, d, 4 * d, true);
  h = c->fine ? fine_gelu(b, h) : zb_unary(b, "gelu", HAP_OP_GELU, h);
  h = c->fine ? fine_linear(b, "fc2", h, 4 * d, d) : zb_linear(b, "fc2", h, 4 * d, d, true);
  h = zb_dropout(b, "drop2", h, c->dropout);
  return zb_binary(b, "res2", HAP_OP_ADD, x, h);
}

/* Apply the preset to the options not given explicitly. */
static gpt_cfg gpt_config(hap_model_args *a) {
  const int64_t *p = gpt_presets[(int)a->v[GPT_PRESET]];
  const int slots[4] = {GPT_SEQ, GPT_LAYERS, GPT_WIDTH, GPT_HEADS};
  for (int i = 0; i < 4; i++)
    if (p[i] > 0 && !(a->given & (1u << slots[i])))
      a->v[slots[i]] = (double)p[i];
  const double *v = a->v;
  return (gpt_cfg){.batch = (int64_t)v[GPT_BATCH],
                   .seq = (int64_t)v[GPT_SEQ],
                   .layers = (int64_t)v[GPT_LAYERS],
                   .width = (int64_t)v[GPT_WIDTH],
                   .heads = (int64_t)v[GPT_HEADS],
                   .vocab = (int64_t)v[GPT_VOCAB],
                   .dropout = v[GPT_DROPOUT],
                   .fine = v[GPT_GRANULARITY] != 0,
                   .segments = v[GPT_SEGMENTS] != 0};
}

/* tokens x [B,S] -> wte + wpe -> dropout -> blocks -> ln_f -> logits with the tied wte (no bias)
 * -> transpose to [B,V,S] -> cross_entropy(sum) against targets y [B,S] (classes in dim 1, as
 * PyTorch wants; unlike a [B*S, V] reshape this keeps the batch dim, so data parallelism applies).
 */
static hap_status build_gpt(hap_graph *g, const hap_model_args *args, hap_err *err) {
  hap_model_args a = *args;
  gpt_cfg c = gpt_config(&a);
  zb b;
  zb_init(&b, g, err);
  zb_require_divides(&b, "heads", c.heads, "width", c.width);
  zb_require_prob(&b, "dropout", c.dropout);
  zb_require_layers(&b, c.layers);
  int32_t x = zb_input(&b, "x", HAP_I64, SHAPE(c.batch, c.seq));
  int32_t y = zb_input(&b, "y", HAP_I64, SHAPE(c.batch, c.seq));
  int32_t wte = zb_param(&b, "wte.weight", SHAPE(c.vocab, c.width));
  int32_t h = zb_embedding(&b, "wte", x, wte);
  int32_t wpe = zb_param(&b, "wpe.weight", SHAPE(1, c.seq, c.width)); /* learned positions */
  h = zb_binary(&b, "embed", HAP_OP_ADD, h, wpe);
  h = zb_dropout(&b, "embed.drop", h, c.dropout);
  int32_t mask = zb_buffer(&b, "mask", SHAPE(c.seq, c.seq)); /* -inf above the diagonal */
  for (int64_t i = 0; i < c.layers && b.st == HAP_OK; i++) {
    zb_scope(&b, "layers.%lld", (long long)i);
    h = gpt_block(&b, h, mask, &c);
    zb_segment(&b, c.segments);
  }
  zb_top(&b);
  h = c.fine ? fine_layer_norm(&b, "ln_f", h, c.width) : zb_layer_norm(&b, "ln_f", h, c.width);
  if (c.fine) /* x @ wte^T */
    h = zb_matmul(&b, "lm_head", h, zb_transpose(&b, "lm_head.weight_t", wte, 0, 1));
  else
    h = zb_linear_with(&b, "lm_head", h, wte, -1);
  h = zb_transpose(&b, "logits", h, 1, 2); /* [B, V, S] */
  int32_t loss = zb_loss(&b, "loss", HAP_OP_CROSS_ENTROPY, h, y, "sum");
  return zb_finish(&b, &hap_zoo_gpt, &a, loss);
}

const hap_model_def hap_zoo_gpt = {
    .name = "gpt",
    .summary = "decoder-only pre-norm GELU transformer with tied embeddings, GPT-2 to GPT-3 175B",
    .n_opts = (int)(sizeof gpt_opts / sizeof gpt_opts[0]),
    .opts = gpt_opts,
    .build = build_gpt,
};
