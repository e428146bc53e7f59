/* zoo_internal.h — private to the model zoo (zoo.c, zoo_text.c, zoo_vision.c): the model
 * definitions and a small graph builder with a sticky error, so model code reads like PyTorch:
 *
 *     zb_scope(b, "layers.%d", i);
 *     h = zb_linear(b, "linear1", x, 768, 3072, true);   // node "layers.3.linear1",
 *     h = zb_unary(b, "relu", HAP_OP_RELU, h);            // params "layers.3.linear1.weight", ...
 *
 * Every helper returns the id of the tensor it creates, or -1 once any helper has failed; later
 * helpers are then no-ops and zb_finish returns the first error.
 * Ownership: a zb borrows its graph and error record. */
#ifndef HAP_ZOO_INTERNAL_H
#define HAP_ZOO_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/graph.h"
#include "model/zoo.h"

/* ---- the registered models (one definition each, in zoo_text.c / zoo_vision.c) ------------ */

extern const hap_model_def hap_zoo_mlp;
extern const hap_model_def hap_zoo_bert_base;
extern const hap_model_def hap_zoo_vit;
extern const hap_model_def hap_zoo_bert_moe;
extern const hap_model_def hap_zoo_vgg19;
extern const hap_model_def hap_zoo_gpt;

/* ---- builder ------------------------------------------------------------------------------- */

#define ZB_NAME_MAX 256

typedef struct zb {
  hap_graph *g;
  hap_err *err;
  hap_status st;           /* first error; every helper is a no-op once set */
  char scope[ZB_NAME_MAX]; /* prefix of every name, e.g. "layers.3"; "" at top level */
} zb;

/* A shape from its dims: SHAPE(b, s, d) is [b, s, d] (rank >= 1). */
#define SHAPE(...)                                                                                 \
  zb_shape_of((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                       \
              (const int64_t[]){__VA_ARGS__})
hap_shape zb_shape_of(int32_t rank, const int64_t *dims);

void zb_init(zb *b, hap_graph *g, hap_err *err);
/* Set the name prefix (printf-style; "" for the top level). */
void zb_scope(zb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Back to the top level (no prefix). */
void zb_top(zb *b);
/* Record an error (the first one wins) and return it. */
hap_status zb_fail(zb *b, hap_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fail with HAP_EINVAL and the message unless `ok`. */
void zb_require(zb *b, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Option checks with messages that name the option. */
void zb_require_prob(zb *b, const char *option, double p);
void zb_require_divides(zb *b, const char *divisor, int64_t d, const char *option, int64_t v);
/* Layer counts are capped so graphs stay far below int32 node ids. */
#define ZB_MAX_LAYERS 100000
void zb_require_layers(zb *b, int64_t layers);
/* Start a new segment when `on` (HAP's new_segment after a layer or a pool). */
void zb_segment(zb *b, bool on);
/* Shape of tensor t (a static empty shape after an error). */
const hap_shape *zb_shape(const zb *b, int32_t t);

/* Leaf tensors: data (`input`), trainable weights (`parameter`), constants (`buffer`). */
int32_t zb_input(zb *b, const char *name, hap_dtype dtype, hap_shape shape);
int32_t zb_param(zb *b, const char *name, hap_shape shape);
int32_t zb_buffer(zb *b, const char *name, hap_shape shape);

/* Generic node with one output named like the node; `attrs` NULL means defaults. */
int32_t zb_node(zb *b, const char *name, hap_op op, const int32_t *in, int32_t n_in,
                const hap_attrs *attrs);

/* Modules that create their parameters ("<name>.weight" [out, in], "<name>.bias" [out]). */
int32_t zb_linear(zb *b, const char *name, int32_t x, int64_t in, int64_t out, bool bias);
int32_t zb_conv2d(zb *b, const char *name, int32_t x, int64_t cin, int64_t cout, int64_t kernel,
                  int64_t stride, int64_t padding);
int32_t zb_layer_norm(zb *b, const char *name, int32_t x, int64_t width);
/* Batch-first attention over x with params "<name>.in_proj_weight" [3,E,E] (q, k, v blocks),
 * "<name>.in_proj_bias" [3,E], "<name>.out_proj.weight" [E,E], "<name>.out_proj.bias"; mask -1 for
 * none. */
int32_t zb_self_attention(zb *b, const char *name, int32_t x, int32_t mask, int64_t width,
                          int64_t heads, double dropout);

/* Ops on existing tensors. */
int32_t zb_linear_with(zb *b, const char *name, int32_t x, int32_t weight, int32_t bias);
int32_t zb_embedding(zb *b, const char *name, int32_t idx, int32_t weight);
int32_t zb_unary(zb *b, const char *name, hap_op op, int32_t x);
int32_t zb_pow(zb *b, const char *name, int32_t x, double exponent);
int32_t zb_dropout(zb *b, const char *name, int32_t x, double p);
int32_t zb_binary(zb *b, const char *name, hap_op op, int32_t x, int32_t y);
int32_t zb_scalar(zb *b, const char *name, hap_op op, int32_t x, double scalar);
int32_t zb_softmax(zb *b, const char *name, hap_op op, int32_t x, int64_t dim);
/* sum/mean over `dims` (n 0: all dims). */
int32_t zb_reduce(zb *b, const char *name, hap_op op, int32_t x, const int64_t *dims, int32_t n,
                  bool keepdim);
int32_t zb_matmul(zb *b, const char *name, int32_t x, int32_t y);
int32_t zb_einsum(zb *b, const char *name, const char *equation, int32_t x, int32_t y);
int32_t zb_reshape(zb *b, const char *name, int32_t x, hap_shape shape);
int32_t zb_flatten(zb *b, const char *name, int32_t x, int64_t start_dim);
int32_t zb_transpose(zb *b, const char *name, int32_t x, int64_t dim0, int64_t dim1);
int32_t zb_permute(zb *b, const char *name, int32_t x, hap_shape perm);
int32_t zb_max_pool2d(zb *b, const char *name, int32_t x, int64_t kernel, int64_t stride);
int32_t zb_adaptive_avg_pool2d(zb *b, const char *name, int32_t x, int64_t oh, int64_t ow);
int32_t zb_cls_append(zb *b, const char *name, int32_t x, int32_t cls);
int32_t zb_cls_select(zb *b, const char *name, int32_t x);
/* top2_gating: out[0] = dispatch, out[1] = combine, both [B,S,E,capacity]. */
void zb_top2_gating(zb *b, const char *name, int32_t x, int32_t gate_weight, int64_t capacity,
                    int32_t out[2]);
/* nll_loss / cross_entropy with the given reduction ("sum" or "mean"). */
int32_t zb_loss(zb *b, const char *name, hap_op op, int32_t x, int32_t target,
                const char *reduction);

/* Set the loss, record the canonical spec of `def` with `args` as the graph source, and validate.
 * Returns the first error of the whole build. */
hap_status zb_finish(zb *b, const hap_model_def *def, const hap_model_args *args, int32_t loss);

/* Shared blocks. Post-norm encoder attention: layer_norm(x + dropout(attn(x))), named
 * "self_attn", "dropout1", "add1", "norm1" in the current scope. */
int32_t zb_encoder_attention(zb *b, int32_t x, int32_t mask, int64_t width, int64_t heads,
                             double dropout);
/* Full post-norm ReLU encoder layer (nn.TransformerEncoderLayer, batch-first) in the current
 * scope: the attention block, then layer_norm(h + dropout(linear2(dropout(relu(linear1(h)))))). */
int32_t zb_encoder_layer(zb *b, int32_t x, int32_t mask, int64_t width, int64_t hidden,
                         int64_t heads, double dropout);

/* Canonical spec "name:k=v,..." with every option of `def` (choices by name, numbers in their
 * shortest round-trip form). HAP_EINVAL if it does not fit in len. */
hap_status hap_model_format_spec(const hap_model_def *def, const hap_model_args *args, char *buf,
                                 size_t len);

#endif
