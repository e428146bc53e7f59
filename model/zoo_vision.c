/* zoo_vision.c — image models of the zoo: vit (HAP's Vtransformer) and vgg19 (HAP's Vvgg), both on
 * CIFAR-10-sized images. Shapes in comments: B batch, D width, P patches. */
#include <stdio.h>

#include "zoo_internal.h"

#define SEGMENTS_OPT                                                                               \
  { "segments", HAP_MOPT_CHOICE, 0, "0,1", "1: a new segment after every layer" }

/* ---- vit ----------------------------------------------------------------------------------- */

enum {
  VIT_BATCH,
  VIT_LAYERS,
  VIT_WIDTH,
  VIT_HIDDEN,
  VIT_HEADS,
  VIT_CLASSES,
  VIT_IMAGE,
  VIT_PATCH,
  VIT_DROPOUT,
  VIT_SEGMENTS
};

static const hap_model_opt vit_opts[] = {
    {"batch", HAP_MOPT_INT, 256, NULL, "global batch size (32 per device, 8 devices)"},
    {"layers", HAP_MOPT_INT, 12, NULL, "encoder layers"},
    {"width", HAP_MOPT_INT, 768, NULL, "model width"},
    {"hidden", HAP_MOPT_INT, 3072, NULL, "feed-forward width"},
    {"heads", HAP_MOPT_INT, 12, NULL, "attention heads (divide width)"},
    {"classes", HAP_MOPT_INT, 10, NULL, "output classes"},
    {"image", HAP_MOPT_INT, 32, NULL, "image height and width in pixels"},
    {"patch", HAP_MOPT_INT, 4, NULL, "patch size in pixels (divides image)"},
    {"dropout", HAP_MOPT_FLOAT, 0.1, NULL, "dropout probability"},
    SEGMENTS_OPT,
};

/* images x [B,3,I,I] -> patch conv (k = stride = patch) -> [B,P,D] -> append cls -> + pos_embed
 * -> post-norm encoder layers -> cls token -> head D->classes -> log_softmax -> nll_loss(sum). */
static hap_status build_vit(hap_graph *g, const hap_model_args *args, hap_err *err) {
  const double *v = args->v;
  int64_t batch = (int64_t)v[VIT_BATCH], layers = (int64_t)v[VIT_LAYERS];
  int64_t width = (int64_t)v[VIT_WIDTH], hidden = (int64_t)v[VIT_HIDDEN];
  int64_t heads = (int64_t)v[VIT_HEADS], classes = (int64_t)v[VIT_CLASSES];
  int64_t image = (int64_t)v[VIT_IMAGE], patch = (int64_t)v[VIT_PATCH];
  double dropout = v[VIT_DROPOUT];
  bool segments = v[VIT_SEGMENTS] != 0;
  zb b;
  zb_init(&b, g, err);
  zb_require_divides(&b, "patch", patch, "image", image);
  zb_require_divides(&b, "heads", heads, "width", width);
  zb_require_prob(&b, "dropout", dropout);
  zb_require_layers(&b, layers);
  int64_t patches = (image / patch) * (image / patch);
  int32_t x = zb_input(&b, "x", HAP_F32, SHAPE(batch, 3, image, image));
  int32_t y = zb_input(&b, "y", HAP_I64, SHAPE(batch));
  int32_t h = zb_conv2d(&b, "patch_embed.proj", x, 3, width, patch, patch, 0); /* [B,D,I/p,I/p] */
  h = zb_flatten(&b, "patch_embed.flatten", h, 2);                             /* [B,D,P] */
  h = zb_transpose(&b, "patch_embed", h, 1, 2);                                /* [B,P,D] */
  h = zb_cls_append(&b, "cls_append", h, zb_param(&b, "cls_token", SHAPE(1, 1, width)));
  h = zb_binary(&b, "pos_add", HAP_OP_ADD, h,
                zb_param(&b, "pos_embed", SHAPE(1, patches + 1, width))); /* [B,P+1,D] */
  for (int64_t i = 0; i < layers && b.st == HAP_OK; i++) {
    zb_scope(&b, "layers.%lld", (long long)i);
    h = zb_encoder_layer(&b, h, -1, width, hidden, heads, dropout);
    zb_segment(&b, segments);
  }
  zb_top(&b);
  h = zb_cls_select(&b, "cls_select", h); /* [B,D] */
  h = zb_linear(&b, "head", h, width, classes, true);
  h = zb_softmax(&b, "log_softmax", HAP_OP_LOG_SOFTMAX, h, -1);
  int32_t loss = zb_loss(&b, "loss", HAP_OP_NLL_LOSS, h, y, "sum");
  return zb_finish(&b, &hap_zoo_vit, args, loss);
}

const hap_model_def hap_zoo_vit = {
    .name = "vit",
    .summary = "HAP's Vtransformer: ViT with 4x4 patches on 32x32 images, 85.15 M params",
    .n_opts = (int)(sizeof vit_opts / sizeof vit_opts[0]),
    .opts = vit_opts,
    .build = build_vit,
};

/* ---- vgg19 --------------------------------------------------------------------------------- */

enum { VGG_BATCH, VGG_CLASSES, VGG_DROPOUT, VGG_SEGMENTS, VGG_WIDTH, VGG_HIDDEN };

static const hap_model_opt vgg_opts[] = {
    {"batch", HAP_MOPT_INT, 256, NULL, "global batch size (32 per device, 8 devices)"},
    {"classes", HAP_MOPT_INT, 10, NULL, "output classes"},
    {"dropout", HAP_MOPT_FLOAT, 0.1, NULL, "dropout probability in the classifier"},
    {"segments", HAP_MOPT_CHOICE, 0, "0,1", "1: a new segment after every max-pool"},
    {"width", HAP_MOPT_INT, 64, NULL,
     "channels of the first block (the blocks after have 2, 4, 8 and 8 times as many)"},
    {"hidden", HAP_MOPT_INT, 4096, NULL, "width of the two hidden classifier layers"},
};

/* torchvision's configuration "E": output channels of each 3x3 conv at width 64, 0 = 2x2
 * max-pool. */
static const int16_t vgg19_cfg[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                    512, 512, 512, 512, 0,   512, 512, 512, 512, 0};

/* Convolutions named like torchvision's `features` (conv i, relu i+1, pool), channels scaled by
 * width / 64, one segment per pool when asked. [B,3,32,32] -> [B,8*width,1,1]. */
static int32_t vgg_features(zb *b, int32_t x, int64_t width, bool segments) {
  int64_t channels = 3;
  int idx = 0;
  char name[16];
  zb_scope(b, "features");
  for (size_t i = 0; i < sizeof vgg19_cfg / sizeof vgg19_cfg[0]; i++) {
    snprintf(name, sizeof name, "%d", idx++);
    if (vgg19_cfg[i] == 0) {
      x = zb_max_pool2d(b, name, x, 2, 2);
      zb_segment(b, segments);
      continue;
    }
    int64_t out = vgg19_cfg[i] / 64 * width;
    x = zb_conv2d(b, name, x, channels, out, 3, 1, 1);
    snprintf(name, sizeof name, "%d", idx++);
    x = zb_unary(b, name, HAP_OP_RELU, x);
    channels = out;
  }
  return x;
}

/* features -> adaptive_avg_pool2d to 7x7 (upsamples the 1x1 map, as HAP's model does) ->
 * classifier 25088->4096->4096->classes (at the default width and hidden) -> log_softmax ->
 * nll_loss(sum). */
static hap_status build_vgg19(hap_graph *g, const hap_model_args *args, hap_err *err) {
  const double *v = args->v;
  int64_t batch = (int64_t)v[VGG_BATCH], classes = (int64_t)v[VGG_CLASSES];
  int64_t width = (int64_t)v[VGG_WIDTH], hidden = (int64_t)v[VGG_HIDDEN];
  double dropout = v[VGG_DROPOUT];
  zb b;
  zb_init(&b, g, err);
  zb_require_prob(&b, "dropout", dropout);
  int32_t x = zb_input(&b, "x", HAP_F32, SHAPE(batch, 3, 32, 32));
  int32_t y = zb_input(&b, "y", HAP_I64, SHAPE(batch));
  int32_t h = vgg_features(&b, x, width, v[VGG_SEGMENTS] != 0);
  zb_top(&b);
  h = zb_adaptive_avg_pool2d(&b, "avgpool", h, 7, 7); /* [B,8*width,7,7] */
  h = zb_flatten(&b, "flatten", h, 1);                /* [B,8*width*49] */
  zb_scope(&b, "classifier");
  h = zb_linear(&b, "0", h, 8 * width * 7 * 7, hidden, true);
  h = zb_unary(&b, "1", HAP_OP_RELU, h);
  h = zb_dropout(&b, "2", h, dropout);
  h = zb_linear(&b, "3", h, hidden, hidden, true);
  h = zb_unary(&b, "4", HAP_OP_RELU, h);
  h = zb_dropout(&b, "5", h, dropout);
  h = zb_linear(&b, "6", h, hidden, classes, true);
  zb_top(&b);
  h = zb_softmax(&b, "log_softmax", HAP_OP_LOG_SOFTMAX, h, -1);
  int32_t loss = zb_loss(&b, "loss", HAP_OP_NLL_LOSS, h, y, "sum");
  return zb_finish(&b, &hap_zoo_vgg19, args, loss);
}

const hap_model_def hap_zoo_vgg19 = {
    .name = "vgg19",
    .summary = "HAP's Vvgg: VGG19 for CIFAR-10 (3x3 convs, 7x7 avgpool, 3 FC), 139.6 M params",
    .n_opts = (int)(sizeof vgg_opts / sizeof vgg_opts[0]),
    .opts = vgg_opts,
    .build = build_vgg19,
};
