/* policy.h — the training policy every tool reads (planner, simulator, later the executor): the
 * precision (fp32, or fp16/bf16 mixed precision), the optimizer and its state, the ZeRO stage, the
 * activation recomputation and the micro-batches, with the memory accounting and the byte counts
 * that follow from them (docs/memory.md). The default policy (fp32, sgd, zero 0, recompute none,
 * 1 micro-batch) is how hap trained before policies existed, and reproduces its numbers exactly.
 *
 * Units: bytes per parameter element ("B/elem") unless a name says otherwise.
 * Ownership: a hap_train_policy is a plain value. hap_recompute_map owns its arrays (free it with
 * hap_recompute_map_free); graphs returned through `out` belong to the caller. */
#ifndef HAP_POLICY_H
#define HAP_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/graph.h"

typedef enum hap_precision {
  HAP_PREC_FP32 = 0, /* everything in float32 */
  HAP_PREC_FP16,     /* mixed: float16 compute copies, activations and gradients, float32 master
                        weights, dynamic loss scaling */
  HAP_PREC_BF16,     /* mixed: as fp16 with bfloat16, no loss scaling */
  HAP_PREC_COUNT
} hap_precision;

typedef enum hap_optimizer {
  HAP_OPT_SGD = 0,  /* w -= lr g: no state */
  HAP_OPT_MOMENTUM, /* SGD with momentum: one float32 buffer */
  HAP_OPT_ADAM,     /* two float32 moments */
  HAP_OPT_ADAMW,    /* Adam with decoupled weight decay: the same state */
  HAP_OPT_COUNT
} hap_optimizer;

typedef enum hap_recompute {
  HAP_RECOMPUTE_NONE = 0,  /* keep every activation for the backward pass */
  HAP_RECOMPUTE_SELECTIVE, /* drop the attention core's tensors, recompute them */
  HAP_RECOMPUTE_FULL,      /* keep each layer's input, recompute the layer in the backward */
  HAP_RECOMPUTE_COUNT
} hap_recompute;

typedef enum hap_grad_accum {
  HAP_GRAD_HALF = 0, /* gradients in the compute precision (ZeRO's 16 B/param accounting) */
  HAP_GRAD_FP32,     /* gradients accumulated in float32 (Megatron-LM's 18 B/param) */
  HAP_GRAD_COUNT
} hap_grad_accum;

typedef struct hap_train_policy {
  hap_precision precision;
  hap_optimizer optimizer;
  int32_t zero; /* ZeRO stage 0..3: 1 shards optimizer state, 2 also gradients, 3 also weights */
  hap_recompute recompute;
  int32_t micro_batches; /* >= 1: the batch runs as this many equal parts, gradients reduced once */
  hap_grad_accum grad_accum; /* fp16/bf16 only; fp32 gradients are 4 B either way */
} hap_train_policy;

#define HAP_POLICY_MAX_MICRO_BATCHES 4096

/* Bits of hap_policy_parse's `given`: which fields the text set. */
enum {
  HAP_POLICY_PRECISION = 1u << 0,
  HAP_POLICY_OPTIMIZER = 1u << 1,
  HAP_POLICY_ZERO = 1u << 2,
  HAP_POLICY_RECOMPUTE = 1u << 3,
  HAP_POLICY_MICRO_BATCHES = 1u << 4,
  HAP_POLICY_GRAD_ACCUM = 1u << 5,
};

/* fp32, sgd, zero 0, recompute none, 1 micro-batch, grad_accum half. */
hap_train_policy hap_policy_default(void);
bool hap_policy_is_default(const hap_train_policy *p);
bool hap_policy_equal(const hap_train_policy *a, const hap_train_policy *b);
/* The fields are in range (the enums known, 0 <= zero <= 3, 1 <= micro_batches <= 4096). On
 * failure "policy: <field>: <value>, expected <choices>" in err (HAP_EINVAL). */
hap_status hap_policy_check(const hap_train_policy *p, hap_err *err);

/* Names: "fp32" "fp16" "bf16"; "sgd" "momentum" "adam" "adamw"; "none" "selective" "full";
 * "half" "fp32". The parsers return HAP_ENOTFOUND for anything else. */
const char *hap_precision_name(hap_precision p);
const char *hap_optimizer_name(hap_optimizer o);
const char *hap_recompute_name(hap_recompute r);
const char *hap_grad_accum_name(hap_grad_accum g);
hap_status hap_precision_parse(const char *s, hap_precision *out);
hap_status hap_optimizer_parse(const char *s, hap_optimizer *out);
hap_status hap_recompute_parse(const char *s, hap_recompute *out);
hap_status hap_grad_accum_parse(const char *s, hap_grad_accum *out);

/* Set one field from its text, as the spec and the plan files name them ("precision", "bf16").
 * HAP_EINVAL with one line naming the field and the choices ("policy: unknown precision 'fp8',
 * expected fp32, fp16 or bf16"); an unknown key names every field. */
hap_status hap_policy_set(hap_train_policy *p, const char *key, const char *value, hap_err *err);

/* Parse "key=value[,key=value...]" (base/spec.h's grammar, the part after a NAME:) over *out,
 * which keeps the fields the text does not set; `given` (may be NULL) gets HAP_POLICY_* bits of
 * the fields set. A field given twice, an empty item or an item without '=' is an error. */
hap_status hap_policy_parse(const char *text, hap_train_policy *out, uint32_t *given, hap_err *err);
/* "precision=fp32,optimizer=sgd,zero=0,recompute=none,micro_batches=1,grad_accum=half": every
 * field, in that order; HAP_EINVAL when it does not fit in len bytes. */
hap_status hap_policy_format(const hap_train_policy *p, char *buf, size_t len, hap_err *err);
/* The fields that differ from the default, "precision=bf16,zero=1" ("default" when none). */
const char *hap_policy_brief(const hap_train_policy *p, char *buf, size_t len);

/* ---- memory per parameter element ------------------------------------------------------- */

/* What one element of a trainable parameter occupies, B/elem, before ZeRO divides anything. */
typedef struct hap_param_bytes {
  double weights;   /* the copy the kernels read: 4 (fp32) or 2 (fp16/bf16) */
  double grads;     /* 4 (fp32, or grad_accum=fp32) or 2 */
  double optimizer; /* float32 master copy in mixed precision (4) + momentum (4) or Adam's two
                       moments (8) */
} hap_param_bytes;

hap_param_bytes hap_policy_param_bytes(const hap_train_policy *p);
/* The same on one device when `n_d` devices hold copies of the element (its data-parallel
 * degree): ZeRO stage >= 1 divides optimizer, >= 2 gradients, 3 weights by n_d (>= 1). */
hap_param_bytes hap_policy_param_bytes_zero(const hap_train_policy *p, double n_d);
double hap_param_bytes_total(const hap_param_bytes *b);

/* The optimizer update as a memory-bound pass: bytes read + written per parameter element, B/elem
 * (fp32 SGD: read w and g, write w = 12; momentum +8, Adam +16; mixed precision reads and writes
 * the float32 master, reads the gradient, writes the half copy; fp16 reads the gradients once more
 * for the overflow check of dynamic loss scaling). */
double hap_policy_update_bytes(const hap_train_policy *p);
/* FLOPs per element of the update (2 for SGD, 4 momentum, 10 Adam, 12 AdamW): for traces. */
double hap_policy_update_flops(const hap_train_policy *p);
/* Bytes per element a gradient reduction (all-reduce, reduce-scatter) moves: the gradient's
 * precision (4 fp32; 2 half; 4 with grad_accum=fp32). */
double hap_policy_grad_comm_bytes(const hap_train_policy *p);
/* The dtype the kernels, activations and activation collectives use: F32, F16 or BF16. */
hap_dtype hap_policy_compute_dtype(const hap_train_policy *p);

/* ---- memory per device, broken down ----------------------------------------------------- */

/* Bytes a device holds, by what they are (docs/memory.md). */
typedef struct hap_memory_breakdown {
  double parameters;   /* trainable parameters' stored copies (and gathered copies in use) and
                          the model's buffers (masks, position tables) */
  double gradients;    /* their gradients */
  double optimizer;    /* optimizer state, the float32 master copy in mixed precision included */
  double activations;  /* inputs, activations and their communicated copies kept for the backward
                          pass, and the largest layer recomputed at once */
  double comm_buffers; /* communication scratch: not modelled yet (0) */
  double workspace;    /* kernel scratch: not modelled yet (0) */
  /* Not a part: how much of `activations` is the recompute working set (the dropped activations
   * of the layer that weighs most, recomputed one layer at a time), bytes. A pipeline stage holds
   * the rest of `activations` once per micro-batch in flight and this once. */
  double recompute_working;
} hap_memory_breakdown;

#define HAP_MEMORY_PARTS 6
/* "parameters", "gradients", "optimizer", "activations", "comm_buffers", "workspace" and the
 * fields in that order (index < HAP_MEMORY_PARTS). */
const char *hap_memory_part_name(int i);
double *hap_memory_part(hap_memory_breakdown *m, int i);
double hap_memory_part_get(const hap_memory_breakdown *m, int i);
double hap_memory_total(const hap_memory_breakdown *m);
/* `m` (one micro-batch's) as held with `copies` >= 1 micro-batches in flight: the kept
 * activations (activations - recompute_working) times copies, the working set once. */
hap_memory_breakdown hap_memory_in_flight(const hap_memory_breakdown *m, double copies);

/* ---- the graph the kernels run ---------------------------------------------------------- */

/* A copy of validated `g` with every float32 tensor in `to` (same ids, names, shapes, segments):
 * what mixed precision's kernels see. *out is NULL when `to` is HAP_F32 (nothing changes). */
hap_status hap_graph_cast_float(const hap_graph *g, hap_dtype to, hap_graph **out, hap_err *err);

/* ---- recomputation ---------------------------------------------------------------------- */

/* Which tensors a recompute policy drops after the forward pass and which nodes run their forward
 * again in the backward. A layer is a run of consecutive nodes (graph order) whose names start
 * with the same "<word>.<integer>." ("layers.7.attn"): the zoo's layer scopes. full: a layer's
 * activations used only inside the layer are dropped (its input, produced before it, and every
 * output used after it are kept). selective: the attention core's tensors, activations inside a
 * layer whose last two dims are equal and of rank >= 3 (the [batch, heads, seq, seq] scores,
 * probabilities and their dropout, as the fine-grained gpt builds them; a fused
 * multi_head_attention keeps them inside the op, where no policy counts them). A node is
 * recomputed when one of its outputs is dropped. */
typedef struct hap_recompute_map {
  int32_t n_layers;
  int32_t *layer;   /* [n_nodes]: the node's layer 0.., or -1 outside every layer */
  bool *dropped;    /* [n_tensors] */
  bool *recomputed; /* [n_nodes] */
  int32_t n_dropped;
} hap_recompute_map;

hap_status hap_recompute_map_build(const hap_graph *g, hap_recompute r, hap_recompute_map *out,
                                   hap_err *err);
void hap_recompute_map_free(hap_recompute_map *m);

#endif
