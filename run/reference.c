/* reference.c — the single-device reference run of a whole graph (reference.h). */
#include "run/reference.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/optim.h"
#include "run/box.h"
#include "run/init.h"

struct hap_reference {
  const hap_graph *g; /* borrowed */
  uint64_t seed;
  hap_train_policy pol;
  hap_dtype dt; /* the compute dtype: F32, or F16 / BF16 emulated in float32 storage */
  double loss;
  void **value;   /* [n_tensors] forward values, the tensor's dtype (float: rounded to dt) */
  float **grad;   /* [n_tensors] gradients; after the run only trainable parameters keep theirs */
  float **master; /* [n_tensors] mixed precision: trainable parameters' float32 masters */
  float **m, **v; /* [n_tensors] optimizer state of trainable parameters (NULL: not used) */
  void **scratch; /* [n_tensors] activations of perturbed forwards (lazily allocated) */
  bool *dirty;    /* [n_tensors] downstream of the perturbed element in the current forward */
  hap_loss_scaler scaler; /* the scale the next pass seeds */
  double pass_scale;      /* S the last pass seeded: its gradients are scaled by it */
  int64_t steps;          /* optimizer steps taken (skipped ones not counted) */
  bool skipped;           /* the last update was skipped (fp16 overflow) */
};

static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t hap_run_node_seed(uint64_t seed, const char *node_name) {
  uint64_t h = 0xCBF29CE484222325ULL; /* FNV-1a of the name */
  for (const char *p = node_name; *p; p++) {
    h ^= (uint8_t)*p;
    h *= 0x100000001B3ULL;
  }
  return mix64(mix64(seed ^ 0xD1B54A32D192ED03ULL) ^ mix64(h));
}

static bool trainable(const hap_tensor *t) {
  return t->kind == HAP_TENSOR_PARAMETER && t->requires_grad;
}

static size_t tensor_bytes(const hap_tensor *t) { return (size_t)hap_tensor_bytes(t); }

void hap_reference_destroy(hap_reference *ref) {
  if (!ref)
    return;
  int32_t n = ref->g->n_tensors;
  for (int32_t t = 0; t < n; t++) {
    if (ref->value)
      free(ref->value[t]);
    if (ref->grad)
      free(ref->grad[t]);
    if (ref->scratch)
      free(ref->scratch[t]);
    if (ref->master)
      free(ref->master[t]);
    if (ref->m)
      free(ref->m[t]);
    if (ref->v)
      free(ref->v[t]);
  }
  free(ref->value);
  free(ref->grad);
  free(ref->master);
  free(ref->m);
  free(ref->v);
  free(ref->scratch);
  free(ref->dirty);
  free(ref);
}

double hap_reference_loss(const hap_reference *ref) { return ref->loss; }

const float *hap_reference_grad(const hap_reference *ref, int32_t t) {
  if (t < 0 || t >= ref->g->n_tensors || !trainable(&ref->g->tensors[t]))
    return NULL;
  return ref->grad[t];
}

const void *hap_reference_value(const hap_reference *ref, int32_t t) {
  if (t < 0 || t >= ref->g->n_tensors)
    return NULL;
  return ref->master[t] ? ref->master[t] : ref->value[t];
}

const void *hap_reference_compute_value(const hap_reference *ref, int32_t t) {
  if (t < 0 || t >= ref->g->n_tensors)
    return NULL;
  return ref->value[t];
}

const hap_train_policy *hap_reference_policy(const hap_reference *ref) { return &ref->pol; }
double hap_reference_loss_scale(const hap_reference *ref) { return ref->pass_scale; }
double hap_reference_next_loss_scale(const hap_reference *ref) { return ref->scaler.scale; }
bool hap_reference_skipped(const hap_reference *ref) { return ref->skipped; }
int64_t hap_reference_steps(const hap_reference *ref) { return ref->steps; }

/* Emulated storage in the compute dtype: round a float32 buffer of tensor t (nothing in fp32). */
static void store_rounded(const hap_reference *ref, int32_t t, float *buf) {
  if (ref->dt != HAP_F32 && ref->g->tensors[t].dtype == HAP_F32)
    (void)hap_round_array(ref->dt, buf, hap_tensor_numel(&ref->g->tensors[t]));
}

/* Only float32 tensors, and int64 / int32 inputs and the activations layout ops make of them. */
static hap_status check_dtypes(const hap_graph *g, hap_err *err) {
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    bool is_int = tn->dtype == HAP_I64 || tn->dtype == HAP_I32;
    bool ok = tn->dtype == HAP_F32 ||
              (is_int && (tn->kind == HAP_TENSOR_INPUT || tn->kind == HAP_TENSOR_ACTIVATION));
    if (!ok)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "reference run: %s '%s' is %s, expected float32 (or an int64 / int32 "
                         "index input)",
                         hap_tensor_kind_name(tn->kind), tn->name, hap_dtype_name(tn->dtype));
  }
  return HAP_OK;
}

/* Forward of node n reading in_of(tensor) and writing out buffers; state may be NULL. */
static hap_status forward_node(const hap_reference *ref, int32_t n, void *const *ptr,
                               hap_kernel_state *state, hap_err *err) {
  const hap_graph *g = ref->g;
  const hap_node *node = &g->nodes[n];
  hap_op_io io;
  hap_graph_node_io(g, n, &io);
  const void *in[HAP_MAX_OP_INPUTS];
  void *out[HAP_MAX_OP_OUTPUTS];
  for (int i = 0; i < node->n_inputs; i++)
    in[i] = ptr[node->inputs[i]];
  for (int o = 0; o < node->n_outputs; o++)
    out[o] = ptr[node->outputs[o]];
  hap_kernel_call c = {.op = node->op,
                       .io = &io,
                       .shard = NULL,
                       .seed = hap_run_node_seed(ref->seed, node->name),
                       .in = in,
                       .out = NULL};
  hap_status st = hap_kernel_forward(&c, out, state, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "reference run: forward of node '%s'", node->name);
    return st;
  }
  for (int o = 0; o < node->n_outputs; o++) /* the loss stays float32 (autocast) */
    if (node->outputs[o] != g->loss)
      store_rounded(ref, node->outputs[o], out[o]);
  return HAP_OK;
}

static hap_status backward_node(const hap_reference *ref, int32_t n, const hap_kernel_state *state,
                                hap_err *err) {
  const hap_graph *g = ref->g;
  const hap_node *node = &g->nodes[n];
  hap_op_io io;
  hap_graph_node_io(g, n, &io);
  bool any_in = false, any_out = false;
  const void *in[HAP_MAX_OP_INPUTS];
  float *din[HAP_MAX_OP_INPUTS];
  const void *out[HAP_MAX_OP_OUTPUTS];
  const float *dout[HAP_MAX_OP_OUTPUTS];
  for (int i = 0; i < node->n_inputs; i++) {
    in[i] = ref->value[node->inputs[i]];
    din[i] = io.in_grad[i] ? ref->grad[node->inputs[i]] : NULL;
    any_in = any_in || io.in_grad[i];
  }
  for (int o = 0; o < node->n_outputs; o++) {
    out[o] = ref->value[node->outputs[o]];
    dout[o] = ref->grad[node->outputs[o]];
    any_out = any_out || dout[o] != NULL;
  }
  if (!any_in || !any_out)
    return HAP_OK;
  hap_kernel_call c = {.op = node->op,
                       .io = &io,
                       .shard = NULL,
                       .seed = hap_run_node_seed(ref->seed, node->name),
                       .in = in,
                       .out = out};
  hap_status st = hap_kernel_backward(&c, dout, din, state, err);
  if (st != HAP_OK) {
    hap_err_prefix(err, "reference run: backward of node '%s'", node->name);
    return st;
  }
  bool fp32_param_grads = ref->pol.grad_accum == HAP_GRAD_FP32;
  for (int i = 0; i < node->n_inputs; i++) {
    int32_t t = node->inputs[i];
    if (din[i] && !(fp32_param_grads && trainable(&g->tensors[t])))
      store_rounded(ref, t, din[i]);
  }
  return HAP_OK;
}

/* Every tensor's buffer; leaves (parameters, buffers, inputs) get init.h's values. */
static hap_status init_values(hap_reference *ref, hap_err *err) {
  const hap_graph *g = ref->g;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    ref->value[t] = calloc((size_t)hap_tensor_numel(tn), (size_t)hap_dtype_size(tn->dtype));
    if (!ref->value[t])
      return hap_err_set(err, HAP_ENOMEM, "reference run: out of memory for tensor '%s'", tn->name);
    if (tn->kind == HAP_TENSOR_ACTIVATION)
      continue;
    hap_box b = hap_box_full(&tn->shape);
    HAP_TRY(hap_init_fill(g, t, ref->seed, &b, ref->value[t], err));
    size_t bytes = tensor_bytes(tn);
    if (ref->dt != HAP_F32 && trainable(tn)) { /* the master keeps the float32 value */
      ref->master[t] = malloc(bytes > 0 ? bytes : 1);
      if (!ref->master[t])
        return hap_err_set(err, HAP_ENOMEM, "reference run: out of memory for the master of '%s'",
                           tn->name);
      memcpy(ref->master[t], ref->value[t], bytes);
    }
    store_rounded(ref, t, ref->value[t]);
    int nb = trainable(tn) ? hap_optim_state_buffers(ref->pol.optimizer) : 0;
    float **state[2] = {ref->m, ref->v};
    for (int k = 0; k < nb && k < 2; k++) {
      state[k][t] = calloc((size_t)hap_tensor_numel(tn) + 1, sizeof(float));
      if (!state[k][t])
        return hap_err_set(err, HAP_ENOMEM,
                           "reference run: out of memory for the optimizer state of '%s'",
                           tn->name);
    }
  }
  return HAP_OK;
}

/* One forward and backward from the current values; afterwards only the trainable parameters
 * hold gradients (this pass's, not accumulated over passes). */
static hap_status pass(hap_reference *ref, hap_kernel_state *states, hap_err *err) {
  const hap_graph *g = ref->g;
  int32_t nt = g->n_tensors;
  for (int32_t n = 0; n < g->n_nodes; n++)
    HAP_TRY(forward_node(ref, n, ref->value, &states[n], err));
  ref->loss = (double)*(const float *)ref->value[g->loss];

  /* gradients: zeroed buffers for every tensor that needs one; dL/dloss = S */
  for (int32_t t = 0; t < nt; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (!tn->requires_grad)
      continue;
    size_t n = (size_t)hap_tensor_numel(tn);
    if (!ref->grad[t])
      ref->grad[t] = calloc(n, sizeof(float));
    else
      memset(ref->grad[t], 0, n * sizeof(float));
    if (!ref->grad[t])
      return hap_err_set(err, HAP_ENOMEM, "reference run: out of memory for the gradient of '%s'",
                         tn->name);
  }
  if (!ref->grad[g->loss]) /* validation guarantees it */
    return hap_err_set(err, HAP_EINVAL, "reference run: loss '%s' depends on no parameter",
                       g->tensors[g->loss].name);
  ref->pass_scale = ref->scaler.scale;
  ref->grad[g->loss][0] = (float)ref->pass_scale;
  for (int32_t n = g->n_nodes - 1; n >= 0; n--) {
    HAP_TRY(backward_node(ref, n, &states[n], err));
    hap_kernel_state_free(&states[n]);
    /* an activation's gradient is complete once its producer has run backward */
    const hap_node *node = &g->nodes[n];
    for (int o = 0; o < node->n_outputs; o++) {
      free(ref->grad[node->outputs[o]]);
      ref->grad[node->outputs[o]] = NULL;
    }
  }
  return HAP_OK;
}

/* pass() with its per-node saved state. */
static hap_status run_pass(hap_reference *ref, hap_err *err) {
  const hap_graph *g = ref->g;
  hap_kernel_state *states = calloc(g->n_nodes > 0 ? (size_t)g->n_nodes : 1, sizeof *states);
  if (!states)
    return hap_err_set(err, HAP_ENOMEM, "reference run: out of memory");
  hap_status st = pass(ref, states, err);
  for (int32_t n = 0; n < g->n_nodes; n++)
    hap_kernel_state_free(&states[n]);
  free(states);
  return st;
}

hap_status hap_reference_run(const hap_graph *g, uint64_t seed, hap_reference **out, hap_err *err) {
  return hap_reference_run_policy(g, seed, NULL, out, err);
}

hap_status hap_reference_run_policy(const hap_graph *g, uint64_t seed, const hap_train_policy *pol,
                                    hap_reference **out, hap_err *err) {
  *out = NULL;
  if (!g || g->loss < 0 || g->loss >= g->n_tensors)
    return hap_err_set(err, HAP_EINVAL, "reference run: the graph has no loss (not validated?)");
  hap_train_policy p = pol ? *pol : hap_policy_default();
  if (hap_policy_check(&p, err) != HAP_OK) {
    hap_err_prefix(err, "reference run");
    return HAP_EINVAL;
  }
  HAP_TRY(check_dtypes(g, err));
  hap_reference *ref = calloc(1, sizeof *ref);
  if (!ref)
    return hap_err_set(err, HAP_ENOMEM, "reference run: out of memory");
  ref->g = g;
  ref->seed = seed;
  ref->pol = p;
  ref->dt = hap_policy_compute_dtype(&p);
  ref->scaler = hap_loss_scaler_start(p.precision);
  size_t nt = (size_t)g->n_tensors;
  ref->value = calloc(nt, sizeof *ref->value);
  ref->grad = calloc(nt, sizeof *ref->grad);
  ref->master = calloc(nt, sizeof *ref->master);
  ref->m = calloc(nt, sizeof *ref->m);
  ref->v = calloc(nt, sizeof *ref->v);
  hap_status st = HAP_OK;
  if (!ref->value || !ref->grad || !ref->master || !ref->m || !ref->v)
    st = hap_err_set(err, HAP_ENOMEM, "reference run: out of memory");
  if (st == HAP_OK)
    st = init_values(ref, err);
  if (st == HAP_OK)
    st = run_pass(ref, err);
  if (st != HAP_OK) {
    hap_reference_destroy(ref);
    return st;
  }
  *out = ref;
  return HAP_OK;
}

void hap_reference_update(hap_reference *ref, double lr) {
  const hap_graph *g = ref->g;
  ref->skipped = false;
  if (ref->scaler.dynamic) { /* fp16: a non-finite gradient skips the step */
    bool finite = true;
    for (int32_t t = 0; t < g->n_tensors && finite; t++)
      if (trainable(&g->tensors[t]))
        finite = hap_all_finite(ref->grad[t], hap_tensor_numel(&g->tensors[t]));
    if (!finite) {
      ref->skipped = true;
      hap_loss_scaler_after(&ref->scaler, true);
      return;
    }
  }
  ref->steps++;
  hap_optim_hyper h = hap_optim_defaults(lr);
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (!trainable(tn))
      continue;
    int64_t n = hap_tensor_numel(tn);
    float *w = ref->master[t] ? ref->master[t] : ref->value[t];
    hap_optim_step(ref->pol.optimizer, &h, ref->steps, w, ref->grad[t], 1.0 / ref->pass_scale,
                   ref->m[t], ref->v[t], n);
    if (ref->master[t]) { /* the compute copy */
      memcpy(ref->value[t], w, (size_t)n * sizeof(float));
      store_rounded(ref, t, ref->value[t]);
    }
  }
  hap_loss_scaler_after(&ref->scaler, false);
}

hap_status hap_reference_iterate(hap_reference *ref, hap_err *err) { return run_pass(ref, err); }

hap_status hap_reference_set_value(hap_reference *ref, int32_t t, const float *v, hap_err *err) {
  const hap_graph *g = ref->g;
  if (t < 0 || t >= g->n_tensors || !trainable(&g->tensors[t]))
    return hap_err_set(err, HAP_EINVAL, "reference run: tensor id %d is not a trainable parameter",
                       (int)t);
  size_t bytes = tensor_bytes(&g->tensors[t]);
  memcpy(ref->master[t] ? ref->master[t] : ref->value[t], v, bytes);
  if (ref->master[t]) { /* the compute copy */
    memcpy(ref->value[t], v, bytes);
    store_rounded(ref, t, ref->value[t]);
  }
  return HAP_OK;
}

hap_status hap_reference_perturbed_loss(hap_reference *ref, int32_t t, int64_t index, double delta,
                                        double *loss, double *applied, hap_err *err) {
  const hap_graph *g = ref->g;
  if (t < 0 || t >= g->n_tensors)
    return hap_err_set(err, HAP_EINVAL, "perturbed loss: tensor id %d out of range", (int)t);
  const hap_tensor *tn = &g->tensors[t];
  if (tn->kind == HAP_TENSOR_ACTIVATION || tn->dtype != HAP_F32)
    return hap_err_set(err, HAP_EINVAL,
                       "perturbed loss: tensor '%s' is a %s %s, expected a float32 parameter, "
                       "buffer or input",
                       tn->name, hap_dtype_name(tn->dtype), hap_tensor_kind_name(tn->kind));
  if (index < 0 || index >= hap_tensor_numel(tn))
    return hap_err_set(err, HAP_EINVAL, "perturbed loss: index %lld out of range for '%s'",
                       (long long)index, tn->name);
  size_t nt = (size_t)g->n_tensors;
  if (!ref->scratch)
    ref->scratch = calloc(nt, sizeof *ref->scratch);
  if (!ref->dirty)
    ref->dirty = calloc(nt, sizeof *ref->dirty);
  void **ptr = calloc(nt, sizeof *ptr); /* where each tensor's current value lives */
  if (!ref->scratch || !ref->dirty || !ptr) {
    free(ptr);
    return hap_err_set(err, HAP_ENOMEM, "perturbed loss: out of memory");
  }
  memset(ref->dirty, 0, nt * sizeof *ref->dirty);
  memcpy(ptr, ref->value, nt * sizeof *ptr);

  float *x = ref->value[t];
  float old = x[index];
  x[index] = (float)((double)old + delta);
  if (applied)
    *applied = (double)x[index] - (double)old;
  ref->dirty[t] = true;

  hap_status st = HAP_OK;
  for (int32_t n = 0; n < g->n_nodes && st == HAP_OK; n++) {
    const hap_node *node = &g->nodes[n];
    bool touched = false;
    for (int i = 0; i < node->n_inputs; i++)
      touched = touched || ref->dirty[node->inputs[i]];
    if (!touched)
      continue;
    for (int o = 0; o < node->n_outputs && st == HAP_OK; o++) {
      int32_t ot = node->outputs[o];
      if (!ref->scratch[ot])
        ref->scratch[ot] = malloc(tensor_bytes(&g->tensors[ot]));
      if (!ref->scratch[ot])
        st = hap_err_set(err, HAP_ENOMEM, "perturbed loss: out of memory for '%s'",
                         g->tensors[ot].name);
      ptr[ot] = ref->scratch[ot];
      ref->dirty[ot] = true;
    }
    if (st == HAP_OK)
      st = forward_node(ref, n, ptr, NULL, err);
  }
  if (st == HAP_OK)
    *loss = (double)*(const float *)ptr[g->loss];
  x[index] = old;
  free(ptr);
  return st;
}
