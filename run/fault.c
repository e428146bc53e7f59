/* fault.c — HAP_FAULT parsing and the injections (fault.h). */
#include "fault.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"none",       "nan-loss",       "nan-grad",
                                         "grad-error", "drift",          "skip-all-reduce",
                                         "bad-update", "skip-recompute", "skip-tied-sum"};

const char *hap_fault_kind_name(hap_fault_kind k) {
  return k >= 0 && k < HAP_FAULT_KIND_COUNT ? kind_names[k] : "?";
}

static hap_status bad(hap_err *err, const char *text, const char *what) {
  return hap_err_set(err, HAP_EINVAL, "HAP_FAULT='%s': %s", text, what);
}

hap_status hap_fault_parse(const char *text, const hap_graph *g, int32_t world, hap_fault *out,
                           hap_err *err) {
  *out = (hap_fault){HAP_FAULT_NONE, 0, -1};
  if (text == NULL || *text == '\0')
    return HAP_OK;
  char buf[256];
  size_t len = strlen(text);
  if (len >= sizeof buf)
    return bad(err, "(long)", "longer than 255 characters");
  memcpy(buf, text, len + 1);
  char *save = NULL;
  char *part = strtok_r(buf, ",", &save);
  for (int k = HAP_FAULT_NAN_LOSS; part != NULL && k < HAP_FAULT_KIND_COUNT; k++)
    if (strcmp(part, kind_names[k]) == 0)
      out->kind = (hap_fault_kind)k;
  if (out->kind == HAP_FAULT_NONE)
    return bad(err, text,
               "unknown kind (expected nan-loss, nan-grad, grad-error, drift, skip-all-reduce, "
               "bad-update, skip-recompute or skip-tied-sum, then optional ,rank=R "
               ",tensor=NAME)");
  if (out->kind == HAP_FAULT_SKIP_ALL_REDUCE || out->kind == HAP_FAULT_BAD_UPDATE ||
      out->kind == HAP_FAULT_SKIP_RECOMPUTE || out->kind == HAP_FAULT_SKIP_TIED_SUM)
    out->rank = -1;
  while ((part = strtok_r(NULL, ",", &save)) != NULL) {
    if (strncmp(part, "rank=", 5) == 0) {
      char *end = NULL;
      long r = strtol(part + 5, &end, 10);
      if (end == part + 5 || *end != '\0' || r < 0 || r >= world)
        return hap_err_set(err, HAP_EINVAL, "HAP_FAULT='%s': rank '%s' is not in 0..%d", text,
                           part + 5, (int)world - 1);
      out->rank = (int32_t)r;
    } else if (strncmp(part, "tensor=", 7) == 0) {
      int32_t t = hap_graph_find_tensor(g, part + 7);
      if (t < 0 || g->tensors[t].kind != HAP_TENSOR_PARAMETER || !g->tensors[t].requires_grad)
        return hap_err_set(err, HAP_EINVAL,
                           "HAP_FAULT='%s': '%s' is not a trainable parameter of the model", text,
                           part + 7);
      out->tensor = t;
    } else {
      return bad(err, text, "expected rank=R or tensor=NAME after the kind");
    }
  }
  return HAP_OK;
}

bool hap_fault_hits(const hap_fault *f, int32_t rank, int32_t t) {
  return f->kind != HAP_FAULT_NONE && (f->rank < 0 || f->rank == rank) && (t < 0 || f->tensor == t);
}

void hap_fault_loss(const hap_fault *f, int32_t rank, float *loss) {
  if (f->kind == HAP_FAULT_NAN_LOSS && hap_fault_hits(f, rank, -1))
    *loss = NAN;
}

void hap_fault_gradient(const hap_fault *f, int32_t rank, int32_t t, float *grad, int64_t n) {
  if (n <= 0 || !hap_fault_hits(f, rank, t))
    return;
  if (f->kind == HAP_FAULT_NAN_GRAD)
    grad[0] = NAN;
  else if (f->kind == HAP_FAULT_GRAD_ERROR)
    for (int64_t e = 0; e < n; e++)
      grad[e] *= 1.001f;
}

void hap_fault_value(const hap_fault *f, int32_t rank, int32_t t, float *value, int64_t n) {
  if (f->kind != HAP_FAULT_DRIFT || !hap_fault_hits(f, rank, t))
    return;
  for (int64_t e = 0; e < n; e++)
    value[e] = value[e] * 1.001f + 1e-6f;
}

double hap_fault_lr(const hap_fault *f, int32_t rank, int32_t t, double lr) {
  return f->kind == HAP_FAULT_BAD_UPDATE && hap_fault_hits(f, rank, t) ? 2 * lr : lr;
}
