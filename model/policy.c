/* policy.c — the training policy: names, parsing, the bytes it implies, the graph the kernels
 * run and the recomputation map (policy.h, docs/memory.md). */
#include "model/policy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spec.h"

/* ---- names ---------------------------------------------------------------------------------- */

static const char *const precision_names[HAP_PREC_COUNT] = {"fp32", "fp16", "bf16"};
static const char *const optimizer_names[HAP_OPT_COUNT] = {"sgd", "momentum", "adam", "adamw"};
static const char *const recompute_names[HAP_RECOMPUTE_COUNT] = {"none", "selective", "full"};
static const char *const grad_accum_names[HAP_GRAD_COUNT] = {"half", "fp32"};

static const char *name_of(const char *const *names, int n, int i) {
  return i >= 0 && i < n ? names[i] : "?";
}

static hap_status parse_name(const char *const *names, int n, const char *s, int *out) {
  for (int i = 0; s != NULL && i < n; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return HAP_OK;
    }
  return HAP_ENOTFOUND;
}

const char *hap_precision_name(hap_precision p) {
  return name_of(precision_names, HAP_PREC_COUNT, (int)p);
}
const char *hap_optimizer_name(hap_optimizer o) {
  return name_of(optimizer_names, HAP_OPT_COUNT, (int)o);
}
const char *hap_recompute_name(hap_recompute r) {
  return name_of(recompute_names, HAP_RECOMPUTE_COUNT, (int)r);
}
const char *hap_grad_accum_name(hap_grad_accum g) {
  return name_of(grad_accum_names, HAP_GRAD_COUNT, (int)g);
}

hap_status hap_precision_parse(const char *s, hap_precision *out) {
  int i;
  HAP_TRY(parse_name(precision_names, HAP_PREC_COUNT, s, &i));
  *out = (hap_precision)i;
  return HAP_OK;
}
hap_status hap_optimizer_parse(const char *s, hap_optimizer *out) {
  int i;
  HAP_TRY(parse_name(optimizer_names, HAP_OPT_COUNT, s, &i));
  *out = (hap_optimizer)i;
  return HAP_OK;
}
hap_status hap_recompute_parse(const char *s, hap_recompute *out) {
  int i;
  HAP_TRY(parse_name(recompute_names, HAP_RECOMPUTE_COUNT, s, &i));
  *out = (hap_recompute)i;
  return HAP_OK;
}
hap_status hap_grad_accum_parse(const char *s, hap_grad_accum *out) {
  int i;
  HAP_TRY(parse_name(grad_accum_names, HAP_GRAD_COUNT, s, &i));
  *out = (hap_grad_accum)i;
  return HAP_OK;
}

/* ---- the policy as a value ------------------------------------------------------------------ */

hap_train_policy hap_policy_default(void) {
  return (hap_train_policy){.precision = HAP_PREC_FP32,
                            .optimizer = HAP_OPT_SGD,
                            .zero = 0,
                            .recompute = HAP_RECOMPUTE_NONE,
                            .micro_batches = 1,
                            .grad_accum = HAP_GRAD_HALF};
}

bool hap_policy_equal(const hap_train_policy *a, const hap_train_policy *b) {
  return a->precision == b->precision && a->optimizer == b->optimizer && a->zero == b->zero &&
         a->recompute == b->recompute && a->micro_batches == b->micro_batches &&
         a->grad_accum == b->grad_accum;
}

bool hap_policy_is_default(const hap_train_policy *p) {
  hap_train_policy d = hap_policy_default();
  return hap_policy_equal(p, &d);
}

hap_status hap_policy_check(const hap_train_policy *p, hap_err *err) {
  if ((unsigned)p->precision >= HAP_PREC_COUNT)
    return hap_err_set(err, HAP_EINVAL, "policy: precision: %d, expected fp32, fp16 or bf16",
                       (int)p->precision);
  if ((unsigned)p->optimizer >= HAP_OPT_COUNT)
    return hap_err_set(err, HAP_EINVAL,
                       "policy: optimizer: %d, expected sgd, momentum, adam or adamw",
                       (int)p->optimizer);
  if (p->zero < 0 || p->zero > 3)
    return hap_err_set(err, HAP_EINVAL, "policy: zero: %d, expected 0, 1, 2 or 3", p->zero);
  if ((unsigned)p->recompute >= HAP_RECOMPUTE_COUNT)
    return hap_err_set(err, HAP_EINVAL, "policy: recompute: %d, expected none, selective or full",
                       (int)p->recompute);
  if (p->micro_batches < 1 || p->micro_batches > HAP_POLICY_MAX_MICRO_BATCHES)
    return hap_err_set(err, HAP_EINVAL, "policy: micro_batches: %d, expected an integer 1..%d",
                       p->micro_batches, HAP_POLICY_MAX_MICRO_BATCHES);
  if ((unsigned)p->grad_accum >= HAP_GRAD_COUNT)
    return hap_err_set(err, HAP_EINVAL, "policy: grad_accum: %d, expected half or fp32",
                       (int)p->grad_accum);
  return HAP_OK;
}

/* ---- parsing -------------------------------------------------------------------------------- */

#define POLICY_KEYS "precision, optimizer, zero, recompute, micro_batches or grad_accum"

/* A decimal integer in [lo, hi] filling all of s (no sign, no spaces). */
static bool small_int(const char *s, long lo, long hi, long *out) {
  if (s[0] == '\0' || strlen(s) > 9)
    return false;
  long v = 0;
  for (const char *c = s; *c; c++) {
    if (!isdigit((unsigned char)*c))
      return false;
    v = v * 10 + (*c - '0');
  }
  if (v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

/* The field `key` names (one HAP_POLICY_* bit), or 0. */
static uint32_t field_bit(const char *key) {
  static const char *const keys[] = {"precision", "optimizer",     "zero",
                                     "recompute", "micro_batches", "grad_accum"};
  for (int i = 0; i < 6; i++)
    if (strcmp(key, keys[i]) == 0)
      return 1u << i;
  return 0;
}

hap_status hap_policy_set(hap_train_policy *p, const char *key, const char *value, hap_err *err) {
  long v;
  switch (field_bit(key)) {
  case HAP_POLICY_PRECISION:
    if (hap_precision_parse(value, &p->precision) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL,
                         "policy: unknown precision '%s', expected fp32, fp16 or bf16", value);
    return HAP_OK;
  case HAP_POLICY_OPTIMIZER:
    if (hap_optimizer_parse(value, &p->optimizer) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL,
                         "policy: unknown optimizer '%s', expected sgd, momentum, adam or adamw",
                         value);
    return HAP_OK;
  case HAP_POLICY_ZERO:
    if (!small_int(value, 0, 3, &v))
      return hap_err_set(err, HAP_EINVAL, "policy: zero=%s, expected a ZeRO stage 0, 1, 2 or 3",
                         value);
    p->zero = (int32_t)v;
    return HAP_OK;
  case HAP_POLICY_RECOMPUTE:
    if (hap_recompute_parse(value, &p->recompute) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL,
                         "policy: unknown recompute '%s', expected none, selective or full", value);
    return HAP_OK;
  case HAP_POLICY_MICRO_BATCHES:
    if (!small_int(value, 1, HAP_POLICY_MAX_MICRO_BATCHES, &v))
      return hap_err_set(err, HAP_EINVAL, "policy: micro_batches=%s, expected an integer 1..%d",
                         value, HAP_POLICY_MAX_MICRO_BATCHES);
    p->micro_batches = (int32_t)v;
    return HAP_OK;
  case HAP_POLICY_GRAD_ACCUM:
    if (hap_grad_accum_parse(value, &p->grad_accum) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL, "policy: unknown grad_accum '%s', expected half or fp32",
                         value);
    return HAP_OK;
  default:
    return hap_err_set(err, HAP_EINVAL, "policy: unknown field '%s', expected " POLICY_KEYS, key);
  }
}

hap_status hap_policy_parse(const char *text, hap_train_policy *out, uint32_t *given,
                            hap_err *err) {
  hap_spec sp;
  hap_err quiet = {0};
  hap_status st = hap_spec_parse_params(text ? text : "", &sp, &quiet);
  if (st == HAP_ENOMEM) {
    hap_spec_free(&sp);
    return hap_err_set(err, HAP_ENOMEM, "policy: out of memory");
  }
  hap_train_policy p = *out;
  uint32_t seen = 0;
  st = HAP_OK;
  for (int i = 0; i < sp.n && st == HAP_OK; i++) {
    uint32_t bit = field_bit(sp.items[i].key);
    if (bit != 0 && (seen & bit))
      st = hap_err_set(err, HAP_EINVAL, "policy: field '%s' given twice", sp.items[i].key);
    else
      st = hap_policy_set(&p, sp.items[i].key, sp.items[i].value, err);
    seen |= bit;
  }
  if (st == HAP_OK && sp.fault == HAP_SPEC_EMPTY_ITEM)
    st =
        hap_err_set(err, HAP_EINVAL,
                    "policy: empty item, expected key=value[,key=value...] with keys " POLICY_KEYS);
  else if (st == HAP_OK && sp.fault == HAP_SPEC_NOT_KEY_VALUE)
    st = hap_err_set(err, HAP_EINVAL,
                     "policy: '%s' is not of the form key=value (keys " POLICY_KEYS ")", sp.bad);
  hap_spec_free(&sp);
  if (st != HAP_OK)
    return st;
  *out = p;
  if (given != NULL)
    *given = seen;
  return HAP_OK;
}

hap_status hap_policy_format(const hap_train_policy *p, char *buf, size_t len, hap_err *err) {
  int n = snprintf(
      buf, len, "precision=%s,optimizer=%s,zero=%d,recompute=%s,micro_batches=%d,grad_accum=%s",
      hap_precision_name(p->precision), hap_optimizer_name(p->optimizer), p->zero,
      hap_recompute_name(p->recompute), p->micro_batches, hap_grad_accum_name(p->grad_accum));
  if (n < 0 || (size_t)n >= len)
    return hap_err_set(err, HAP_EINVAL, "policy: %d bytes do not fit in %zu", n, len);
  return HAP_OK;
}

const char *hap_policy_brief(const hap_train_policy *p, char *buf, size_t len) {
  hap_train_policy d = hap_policy_default();
  size_t o = 0;
  buf[0] = '\0';
#define ADD(...)                                                                                   \
  do {                                                                                             \
    if (o < len)                                                                                   \
      o += (size_t)snprintf(buf + o, len - o, "%s", o ? "," : "");                                 \
    if (o < len)                                                                                   \
      o += (size_t)snprintf(buf + o, len - o, __VA_ARGS__);                                        \
  } while (0)
  if (p->precision != d.precision)
    ADD("precision=%s", hap_precision_name(p->precision));
  if (p->optimizer != d.optimizer)
    ADD("optimizer=%s", hap_optimizer_name(p->optimizer));
  if (p->zero != d.zero)
    ADD("zero=%d", p->zero);
  if (p->recompute != d.recompute)
    ADD("recompute=%s", hap_recompute_name(p->recompute));
  if (p->micro_batches != d.micro_batches)
    ADD("micro_batches=%d", p->micro_batches);
  if (p->grad_accum != d.grad_accum)
    ADD("grad_accum=%s", hap_grad_accum_name(p->grad_accum));
#undef ADD
  if (o == 0)
    snprintf(buf, len, "default");
  return buf;
}

/* ---- bytes ---------------------------------------------------------------------------------- */

static bool mixed(const hap_train_policy *p) { return p->precision != HAP_PREC_FP32; }

/* Optimizer state proper (momenta), B/elem: float32 buffers. */
static double state_bytes(const hap_train_policy *p) {
  switch (p->optimizer) {
  case HAP_OPT_MOMENTUM: return 4;
  case HAP_OPT_ADAM:
  case HAP_OPT_ADAMW: return 8;
  default: return 0;
  }
}

double hap_policy_grad_comm_bytes(const hap_train_policy *p) {
  return mixed(p) && p->grad_accum == HAP_GRAD_HALF ? 2 : 4;
}

hap_param_bytes hap_policy_param_bytes(const hap_train_policy *p) {
  hap_param_bytes b;
  b.weights = mixed(p) ? 2 : 4;
  b.grads = hap_policy_grad_comm_bytes(p);
  b.optimizer = (mixed(p) ? 4 : 0) + state_bytes(p); /* the float32 master copy + momenta */
  return b;
}

hap_param_bytes hap_policy_param_bytes_zero(const hap_train_policy *p, double n_d) {
  hap_param_bytes b = hap_policy_param_bytes(p);
  if (n_d > 1) {
    if (p->zero >= 1)
      b.optimizer /= n_d;
    if (p->zero >= 2)
      b.grads /= n_d;
    if (p->zero >= 3)
      b.weights /= n_d;
  }
  return b;
}

double hap_param_bytes_total(const hap_param_bytes *b) {
  return b->weights + b->grads + b->optimizer;
}

double hap_policy_update_bytes(const hap_train_policy *p) {
  double g = hap_policy_grad_comm_bytes(p), s = state_bytes(p);
  if (!mixed(p))
    return 4 + g + s + 4 + s; /* read w, g, state; write w, state */
  /* read the float32 master, g and state; write the master, state and the half copy */
  double bytes = 4 + g + s + 4 + s + 2;
  if (p->precision == HAP_PREC_FP16)
    bytes += g; /* dynamic loss scaling: every gradient checked for inf/NaN */
  return bytes;
}

double hap_policy_update_flops(const hap_train_policy *p) {
  static const double flops[HAP_OPT_COUNT] = {2, 4, 10, 12};
  return (unsigned)p->optimizer < HAP_OPT_COUNT ? flops[p->optimizer] : 2;
}

hap_dtype hap_policy_compute_dtype(const hap_train_policy *p) {
  return p->precision == HAP_PREC_FP16   ? HAP_F16
         : p->precision == HAP_PREC_BF16 ? HAP_BF16
                                         : HAP_F32;
}

/* ---- the breakdown -------------------------------------------------------------------------- */

static const char *const part_names[HAP_MEMORY_PARTS] = {
    "parameters", "gradients", "optimizer", "activations", "comm_buffers", "workspace"};

const char *hap_memory_part_name(int i) {
  return i >= 0 && i < HAP_MEMORY_PARTS ? part_names[i] : "?";
}

double *hap_memory_part(hap_memory_breakdown *m, int i) {
  double *f[HAP_MEMORY_PARTS] = {&m->parameters,  &m->gradients,    &m->optimizer,
                                 &m->activations, &m->comm_buffers, &m->workspace};
  return i >= 0 && i < HAP_MEMORY_PARTS ? f[i] : NULL;
}

double hap_memory_part_get(const hap_memory_breakdown *m, int i) {
  return *hap_memory_part((hap_memory_breakdown *)m, i);
}

double hap_memory_total(const hap_memory_breakdown *m) {
  return m->parameters + m->gradients + m->optimizer + m->activations + m->comm_buffers +
         m->workspace;
}

hap_memory_breakdown hap_memory_in_flight(const hap_memory_breakdown *m, double copies) {
  hap_memory_breakdown r = *m;
  r.activations = (m->activations - m->recompute_working) * copies + m->recompute_working;
  return r;
}

/* ---- the graph the kernels run -------------------------------------------------------------- */

hap_status hap_graph_cast_float(const hap_graph *g, hap_dtype to, hap_graph **out, hap_err *err) {
  *out = NULL;
  if (to == HAP_F32)
    return HAP_OK;
  hap_graph *r = hap_graph_create(g->name);
  if (r == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory casting graph '%s'", g->name);
  hap_status st = g->source ? hap_graph_set_source(r, g->source) : HAP_OK;
  if (st != HAP_OK)
    hap_err_set(err, st, "out of memory casting graph '%s'", g->name);
  for (int32_t t = 0; t < g->n_tensors && st == HAP_OK; t++) {
    const hap_tensor *ten = &g->tensors[t];
    int32_t id;
    hap_dtype dt = ten->dtype == HAP_F32 ? to : ten->dtype;
    st = hap_graph_add_tensor(r, ten->name, ten->kind, dt, &ten->shape, &id, err);
    if (st == HAP_OK && ten->grad_wanted)
      st = hap_graph_want_grad(r, id, err);
  }
  for (int32_t k = 0; k < g->n_nodes && st == HAP_OK; k++) {
    const hap_node *n = &g->nodes[k];
    st = hap_graph_link_node(r, n->name, n->op, n->inputs, n->n_inputs, n->outputs, n->n_outputs,
                             &n->attrs, n->segment, err);
  }
  if (st == HAP_OK)
    st = hap_graph_set_loss(r, g->loss, err);
  if (st == HAP_OK)
    st = hap_graph_validate(r, err);
  for (int32_t k = 0; k < g->n_nodes && st == HAP_OK; k++)
    if (strcmp(r->nodes[k].name, g->nodes[k].name) != 0)
      st = hap_err_set(err, HAP_EINVAL, "casting graph '%s' to %s reordered node '%s'", g->name,
                       hap_dtype_name(to), g->nodes[k].name);
  if (st != HAP_OK) {
    hap_graph_destroy(r);
    return st;
  }
  *out = r;
  return HAP_OK;
}

/* ---- recomputation -------------------------------------------------------------------------- */

/* Length of the "<word>.<integer>." prefix of a node name, or 0. */
static size_t layer_prefix(const char *name) {
  size_t i = 0;
  if (!(isalpha((unsigned char)name[0]) || name[0] == '_'))
    return 0;
  while (isalnum((unsigned char)name[i]) || name[i] == '_')
    i++;
  if (name[i++] != '.' || !isdigit((unsigned char)name[i]))
    return 0;
  while (isdigit((unsigned char)name[i]))
    i++;
  return name[i] == '.' ? i + 1 : 0;
}

void hap_recompute_map_free(hap_recompute_map *m) {
  free(m->layer);
  free(m->dropped);
  free(m->recomputed);
  memset(m, 0, sizeof *m);
}

enum { NO_USE = -2, MANY_LAYERS = -3 };

/* use[t]: the one layer (or -1: outside every layer) all of t's consumers are in, NO_USE when no
 * node reads t, MANY_LAYERS when consumers are in different places. */
static void consumer_layers(const hap_graph *g, const int32_t *layer, int32_t *use) {
  for (int32_t t = 0; t < g->n_tensors; t++)
    use[t] = NO_USE;
  for (int32_t k = 0; k < g->n_nodes; k++)
    for (int i = 0; i < g->nodes[k].n_inputs; i++) {
      int32_t t = g->nodes[k].inputs[i];
      use[t] = use[t] == NO_USE || use[t] == layer[k] ? layer[k] : MANY_LAYERS;
    }
}

hap_status hap_recompute_map_build(const hap_graph *g, hap_recompute r, hap_recompute_map *out,
                                   hap_err *err) {
  memset(out, 0, sizeof *out);
  out->layer = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *out->layer);
  out->dropped = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *out->dropped);
  out->recomputed = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *out->recomputed);
  int32_t *use = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *use);
  if (!out->layer || !out->dropped || !out->recomputed || !use) {
    free(use);
    hap_recompute_map_free(out);
    return hap_err_set(err, HAP_ENOMEM, "out of memory mapping recomputation");
  }
  const char *prev = NULL;
  size_t prev_len = 0;
  for (int32_t k = 0; k < g->n_nodes; k++) {
    const char *name = g->nodes[k].name;
    size_t len = layer_prefix(name);
    if (len == 0) {
      out->layer[k] = -1;
      prev = NULL;
      continue;
    }
    if (prev == NULL || prev_len != len || strncmp(prev, name, len) != 0)
      out->n_layers++;
    out->layer[k] = out->n_layers - 1;
    prev = name;
    prev_len = len;
  }
  if (r == HAP_RECOMPUTE_NONE) {
    free(use);
    return HAP_OK;
  }
  consumer_layers(g, out->layer, use);
  for (int32_t k = 0; k < g->n_nodes; k++) {
    int32_t L = out->layer[k];
    if (L < 0)
      continue;
    for (int o = 0; o < g->nodes[k].n_outputs; o++) {
      int32_t t = g->nodes[k].outputs[o];
      const hap_tensor *ten = &g->tensors[t];
      bool core = ten->shape.rank >= 3 &&
                  ten->shape.dims[ten->shape.rank - 1] == ten->shape.dims[ten->shape.rank - 2];
      bool inside = t != g->loss && (use[t] == L || use[t] == NO_USE);
      if ((r == HAP_RECOMPUTE_FULL || core) && inside) {
        out->dropped[t] = true;
        out->recomputed[k] = true;
        out->n_dropped++;
      }
    }
  }
  free(use);
  return HAP_OK;
}
