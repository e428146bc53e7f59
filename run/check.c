/* check.c — the distributed run against the single-device reference (check.h). */
#include "run/check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/reference.h"

static bool trainable(const hap_tensor *t) {
  return t->kind == HAP_TENSOR_PARAMETER && t->requires_grad;
}

/* Record a failure of relative size `size` (INFINITY: not finite); the reported ones are the
 * largest, in decreasing order (ties in the order found). */
static void fail(hap_check_result *res, double size, const char *fmt, ...) {
  int kept = res->n_failures < HAP_CHECK_MAX_REPORTED ? res->n_failures : HAP_CHECK_MAX_REPORTED;
  int at = kept;
  while (at > 0 && res->failure_size[at - 1] < size)
    at--;
  res->n_failures++;
  if (at >= HAP_CHECK_MAX_REPORTED)
    return;
  int last = kept < HAP_CHECK_MAX_REPORTED ? kept : HAP_CHECK_MAX_REPORTED - 1;
  for (int i = last; i > at; i--) {
    memcpy(res->failures[i], res->failures[i - 1], HAP_CHECK_LINE);
    res->failure_size[i] = res->failure_size[i - 1];
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->failures[at], HAP_CHECK_LINE, fmt, ap);
  va_end(ap);
  res->failure_size[at] = size;
}

/* The float32 spacing at |x| (s). */
static double ulp(float x) {
  float a = fabsf(x);
  return isfinite(a) ? (double)nextafterf(a, INFINITY) - a : 0;
}

/* The box's elements in row-major order, as runs along the last dim: run k (k = 0 ..
 * numel / run_len) starts at element k * run_len of the box and at run_start(k) of the whole
 * tensor. */
typedef struct box_runs {
  const hap_box *b;
  const hap_shape *s;
  int64_t run_len; /* elements per run: the box's extent along the last dim (all of it: 1 run) */
} box_runs;

static int64_t run_start(const box_runs *br, int64_t k) {
  const hap_box *b = br->b;
  int last = b->rank - 1;
  if (last < 0)
    return 0;
  int64_t idx = b->lo[last], stride = br->s->dims[last];
  for (int d = last - 1; d >= 0; d--) {
    int64_t ext = b->hi[d] - b->lo[d];
    idx += (b->lo[d] + k % ext) * stride;
    k /= ext;
    stride *= br->s->dims[d];
  }
  return idx;
}

struct hap_checker {
  const hap_graph *g; /* borrowed */
  hap_comm *world;    /* borrowed */
  uint64_t seed;
  double lr;
  int32_t done;        /* iterations compared */
  hap_reference *ref;  /* rank 0: the reference, trained `done` iterations */
  float **initial;     /* rank 0, [n_tensors]: trainable parameters' initial values */
  double grad_scale;   /* rank 0: the model's largest |gradient| of the last iteration */
  double update_scale; /* rank 0: the model's largest |value - initial| */
};

void hap_checker_destroy(hap_checker *c) {
  if (c == NULL)
    return;
  if (c->initial)
    for (int32_t t = 0; t < c->g->n_tensors; t++)
      free(c->initial[t]);
  free(c->initial);
  hap_reference_destroy(c->ref);
  free(c);
}

/* Rank 0, right after the reference's first pass (no update yet): every trainable parameter's
 * initial value, copied from the reference (for the size of its update). */
static hap_status keep_initial(hap_checker *c, hap_err *err) {
  const hap_graph *g = c->g;
  c->initial = calloc((size_t)g->n_tensors, sizeof *c->initial);
  if (c->initial == NULL)
    return hap_err_set(err, HAP_ENOMEM, "--check: out of memory");
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (!trainable(tn))
      continue;
    size_t bytes = (size_t)hap_tensor_numel(tn) * sizeof(float);
    c->initial[t] = malloc(bytes + 1);
    if (c->initial[t] == NULL)
      return hap_err_set(err, HAP_ENOMEM, "--check: out of memory for '%s'", tn->name);
    memcpy(c->initial[t], hap_reference_value(c->ref, t), bytes);
  }
  return HAP_OK;
}

static double max2(double a, double b) { return a > b ? a : b; }

/* Rank 0: one more reference iteration (forward, backward, update), and the model's scales. */
static hap_status advance_reference(hap_checker *c, hap_err *err) {
  const hap_graph *g = c->g;
  if (c->ref == NULL) {
    HAP_TRY(hap_reference_run(g, c->seed, &c->ref, err));
    HAP_TRY(keep_initial(c, err));
  } else
    HAP_TRY(hap_reference_iterate(c->ref, err));
  hap_reference_update(c->ref, c->lr);
  c->grad_scale = c->update_scale = 0;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    if (!trainable(&g->tensors[t]))
      continue;
    const float *gw = hap_reference_grad(c->ref, t);
    const float *w = hap_reference_value(c->ref, t), *w0 = c->initial[t];
    if (gw == NULL || w == NULL || w0 == NULL) /* trainable: never */
      continue;
    for (int64_t e = 0, n = hap_tensor_numel(&g->tensors[t]); e < n; e++) {
      c->grad_scale = max2(c->grad_scale, fabs((double)gw[e]));
      c->update_scale = max2(c->update_scale, fabs((double)w[e] - w0[e]));
    }
  }
  return HAP_OK;
}

hap_status hap_checker_create(const hap_graph *g, hap_comm *world, uint64_t seed, double lr,
                              hap_checker **out, hap_err *err) {
  *out = NULL;
  hap_checker *c = calloc(1, sizeof *c);
  if (c == NULL)
    return hap_err_set(err, HAP_ENOMEM, "--check: out of memory");
  *c = (hap_checker){.g = g, .world = world, .seed = seed, .lr = lr};
  *out = c;
  return HAP_OK;
}

/* "0" or "0,2,3": the ranks whose copy is copy u's (u and those with same_as u). */
static void rank_list(const hap_run_copies *c, int32_t u, char *buf, size_t size) {
  size_t len = (size_t)snprintf(buf, size, "%d", (int)u);
  for (int32_t r = u + 1; r < c->n_ranks && len < size; r++)
    if (c->same_as[r] == u)
      len += (size_t)snprintf(buf + len, size - len, ",%d", (int)r);
}

/* The largest error of one copy (box b, values got) against the reference: *worst (relative to
 * denom) at whole-tensor element *worst_at (and box element *worst_e); or the first non-finite
 * element (*bad_e >= 0). */
static void copy_error(const hap_box *b, const hap_shape *s, const float *got, const float *want,
                       bool grad, double denom, double *worst, int64_t *worst_e, int64_t *bad_e) {
  box_runs br = {b, s, b->rank > 0 ? b->hi[b->rank - 1] - b->lo[b->rank - 1] : 1};
  int64_t m = hap_box_numel(b);
  *worst = 0;
  *worst_e = *bad_e = -1;
  for (int64_t k = 0; br.run_len > 0 && k * br.run_len < m; k++) {
    int64_t e0 = k * br.run_len, at0 = run_start(&br, k);
    for (int64_t j = 0; j < br.run_len; j++) {
      float g = got[e0 + j];
      if (!isfinite(g)) {
        *bad_e = e0 + j;
        return;
      }
      double ref = want[at0 + j], d = fabs((double)g - ref);
      if (!grad)
        d = max2(0, d - HAP_CHECK_PARAM_ULPS * ulp((float)ref));
      if (*worst_e < 0 || d / denom > *worst) {
        *worst = d / denom;
        *worst_e = e0 + j;
      }
    }
  }
}

/* The whole-tensor index of box element e. */
static int64_t global_of(const hap_box *b, const hap_shape *s, int64_t e) {
  box_runs br = {b, s, b->rank > 0 ? b->hi[b->rank - 1] - b->lo[b->rank - 1] : 1};
  return br.run_len > 0 ? run_start(&br, e / br.run_len) + e % br.run_len : 0;
}

/* Compare every rank's copy (c) of tensor t's quantity q with the reference `want`. */
static void compare_copies(const hap_graph *g, int32_t t, hap_run_quantity q, const float *want,
                           const float *initial, double model_scale, const hap_run_copies *c,
                           hap_check_result *res) {
  const hap_tensor *tn = &g->tensors[t];
  int64_t n = hap_tensor_numel(tn);
  bool grad = q == HAP_RUN_GRADIENT;
  const char *what = grad ? "gradient" : "value";
  static const double tolerance[] = {
      [HAP_RUN_GRADIENT] = HAP_CHECK_GRAD_TOL, [HAP_RUN_VALUE] = HAP_CHECK_PARAM_TOL};
  double tol = tolerance[q];
  double scale = 0; /* the tensor's largest |gradient| or |update| */
  for (int64_t e = 0; e < n; e++)
    scale = max2(scale, fabs(grad ? (double)want[e] : (double)want[e] - initial[e]));
  double floor_scale = HAP_CHECK_FLOOR * model_scale;
  if (grad && scale < floor_scale)
    res->n_floored++;
  double denom = fmax(fmax(scale, floor_scale), 1e-30);
  res->n_copies += grad ? c->n_ranks : 0;
  for (int32_t u = 0; u < c->n_ranks; u++) {
    if (c->same_as[u] >= 0) /* an identical copy: judged with rank same_as[u]'s */
      continue;
    const hap_box *b = &c->box[u];
    const float *got = c->data + c->offset[u];
    double worst;
    int64_t worst_e, bad_e;
    copy_error(b, &tn->shape, got, want, grad, denom, &worst, &worst_e, &bad_e);
    char ranks[128];
    rank_list(c, u, ranks, sizeof ranks);
    const char *plural = strchr(ranks, ',') ? "s" : "";
    if (bad_e >= 0) {
      fail(res, INFINITY, "%s of '%s' on rank%s %s: element %lld is %g (not finite)", what,
           tn->name, plural, ranks, (long long)global_of(b, &tn->shape, bad_e), (double)got[bad_e]);
      continue;
    }
    if (worst_e < 0) /* an empty shard */
      continue;
    double *worst_err = grad ? &res->grad_err : &res->param_err;
    *worst_err = fmax(*worst_err, worst);
    int64_t at = global_of(b, &tn->shape, worst_e);
    if (!(worst <= tol))
      fail(res, worst,
           "%s of '%s' on rank%s %s: element %lld is %.9g, single device %.9g (error %.2e of "
           "%.3g, tolerance %.0e)",
           what, tn->name, plural, ranks, (long long)at, (double)got[worst_e], (double)want[at],
           worst, denom, tol);
  }
}

/* The loss: every rank's share finite, their sum against the reference. */
static void compare_loss(const double *parts, int32_t n_ranks, double want, hap_check_result *res) {
  double loss = 0;
  for (int32_t r = 0; r < n_ranks; r++) {
    loss += parts[r];
    if (!isfinite(parts[r]))
      fail(res, INFINITY, "loss on rank %d: its share is %g (not finite)", (int)r, parts[r]);
  }
  res->loss = loss;
  res->ref_loss = want;
  if (!isfinite(want)) {
    fail(res, INFINITY, "loss of the single-device run is %g (not finite): the model diverges",
         want);
    return;
  }
  double rel = fabs(loss - want) / fmax(fabs(want), 1e-30);
  res->loss_err = fmax(res->loss_err, rel);
  if (isfinite(loss) && !(rel <= HAP_CHECK_LOSS_TOL))
    fail(res, rel, "loss: %.9g, single device %.9g (relative error %.2e, tolerance %.0e)", loss,
         want, rel, HAP_CHECK_LOSS_TOL);
}

/* Rank 0 says whether it can go on (st), every rank learns it: the others must not wait in a
 * gather that rank 0 never joins. */
static hap_status agree(hap_comm *world, hap_status st, hap_err *err) {
  double mine = st == HAP_OK ? 0 : 1, any = 0;
  hap_err ignored = {0};
  hap_status cst = world->ops->all_reduce(world, &mine, &any, 1, HAP_F64, HAP_REDUCE_MAX,
                                          st == HAP_OK ? err : &ignored);
  if (st != HAP_OK)
    return st;
  if (cst != HAP_OK)
    return cst;
  return any == 0 ? HAP_OK
                  : hap_err_set(err, HAP_EINVAL, "--check: rank 0 could not run the reference");
}

hap_status hap_checker_compare(hap_checker *c, hap_run *run, hap_check_result *res, hap_err *err) {
  const hap_graph *g = c->g;
  hap_comm *world = c->world;
  bool root = world->rank == 0;
  /* what the earlier iterations found stays (largest errors); failures are this iteration's */
  res->n_failures = 0;
  res->n_params = res->n_copies = res->n_floored = 0;
  res->iterations = ++c->done;
  hap_status st = root ? advance_reference(c, err) : HAP_OK;
  double *parts = calloc((size_t)world->size, sizeof *parts);
  if (st == HAP_OK && parts == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "--check: out of memory");
  st = agree(world, st, err);
  double part = hap_run_loss_part(run);
  if (st == HAP_OK)
    st = world->ops->all_gather(world, &part, parts, (int64_t)sizeof part, err);
  if (st == HAP_OK && root)
    compare_loss(parts, world->size, hap_reference_loss(c->ref), res);
  for (int32_t t = 0; t < g->n_tensors && st == HAP_OK; t++) {
    if (!trainable(&g->tensors[t]))
      continue;
    res->n_params += root;
    for (int q = HAP_RUN_GRADIENT; q <= HAP_RUN_VALUE && st == HAP_OK; q++) {
      hap_run_copies copies = {0};
      st = hap_run_gather_copies(run, t, (hap_run_quantity)q, &copies, err);
      if (st == HAP_OK && root) {
        bool grad = q == HAP_RUN_GRADIENT;
        const float *want =
            grad ? hap_reference_grad(c->ref, t) : (const float *)hap_reference_value(c->ref, t);
        compare_copies(g, t, (hap_run_quantity)q, want, c->initial[t],
                       grad ? c->grad_scale : c->update_scale, &copies, res);
      }
      hap_run_copies_free(&copies);
    }
  }
  free(parts);
  /* every rank learns the verdict */
  double bad = res->n_failures > 0, any = 0;
  if (st == HAP_OK)
    st = world->ops->all_reduce(world, &bad, &any, 1, HAP_F64, HAP_REDUCE_MAX, err);
  res->passed = st == HAP_OK && any == 0;
  return st;
}
