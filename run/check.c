/* check.c — the distributed run against the single-device reference (check.h). */
#include "run/check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/optim.h"
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

hap_check_tolerances hap_check_tolerances_for(const hap_train_policy *p) {
  hap_train_policy d = hap_policy_default();
  if (p == NULL)
    p = &d;
  hap_check_tolerances t = {.loss = HAP_CHECK_LOSS_TOL,
                            .grad = HAP_CHECK_GRAD_TOL,
                            .param = HAP_CHECK_PARAM_TOL,
                            .param_ulps = HAP_CHECK_PARAM_ULPS,
                            .floor = HAP_CHECK_FLOOR,
                            .adam_allowance =
                                p->optimizer == HAP_OPT_ADAM || p->optimizer == HAP_OPT_ADAMW};
  if (p->precision == HAP_PREC_BF16 || p->precision == HAP_PREC_FP16) {
    t.loss = p->precision == HAP_PREC_BF16 ? HAP_CHECK_BF16_LOSS_TOL : HAP_CHECK_FP16_LOSS_TOL;
    bool bf16 = p->precision == HAP_PREC_BF16;
    t.grad = t.param = bf16 ? HAP_CHECK_BF16_NORM_TOL : HAP_CHECK_FP16_NORM_TOL;
    t.floor = HAP_CHECK_MIXED_FLOOR;
    t.norm = true;
  }
  return t;
}

double hap_check_adam_ratio_bound(double beta1, double beta2, int64_t t) {
  double c1 = 1 - pow(beta1, (double)t), c2 = 1 - pow(beta2, (double)t), sum = 0;
  for (int64_t k = 1; k <= t; k++) { /* |m^| <= sqrt(sum a_k^2 / b_k) sqrt(v^): Cauchy-Schwarz */
    double a = (1 - beta1) * pow(beta1, (double)(t - k)) / c1;
    double b = (1 - beta2) * pow(beta2, (double)(t - k)) / c2;
    sum += a * a / b;
  }
  return sqrt(sum);
}

struct hap_checker {
  const hap_graph *g; /* borrowed */
  hap_comm *world;    /* borrowed */
  uint64_t seed;
  double lr;
  hap_train_policy policy;
  hap_check_tolerances tol;
  int32_t done;        /* iterations compared */
  hap_reference *ref;  /* rank 0: the reference, trained `done` iterations */
  float **initial;     /* rank 0, [n_tensors]: trainable parameters' initial values */
  float **grad_rel;    /* rank 0, Adam, [n_tensors]: per element, the largest relative gradient
                          difference seen on any copy so far */
  float **allowance;   /* rank 0, Adam, [n_tensors]: per element, the value difference allowed */
  double grad_scale;   /* rank 0: the model's largest |gradient| of the last iteration */
  double update_scale; /* rank 0: the model's largest |value - initial| */
};

void hap_checker_destroy(hap_checker *c) {
  if (c == NULL)
    return;
  for (int32_t t = 0; t < c->g->n_tensors; t++) {
    if (c->initial)
      free(c->initial[t]);
    if (c->grad_rel)
      free(c->grad_rel[t]);
    if (c->allowance)
      free(c->allowance[t]);
  }
  free(c->initial);
  free(c->grad_rel);
  free(c->allowance);
  hap_reference_destroy(c->ref);
  free(c);
}

/* Rank 0, right after the reference's first pass (no update yet): every trainable parameter's
 * initial value, copied from the reference (for the size of its update); for Adam the zeroed
 * per-element gradient differences and allowances. */
static hap_status keep_initial(hap_checker *c, hap_err *err) {
  const hap_graph *g = c->g;
  size_t nt = (size_t)g->n_tensors;
  c->initial = calloc(nt, sizeof *c->initial);
  if (c->initial == NULL)
    return hap_err_set(err, HAP_ENOMEM, "--check: out of memory");
  if (c->tol.adam_allowance) {
    c->grad_rel = calloc(nt, sizeof *c->grad_rel);
    c->allowance = calloc(nt, sizeof *c->allowance);
    if (c->grad_rel == NULL || c->allowance == NULL)
      return hap_err_set(err, HAP_ENOMEM, "--check: out of memory");
  }
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (!trainable(tn))
      continue;
    size_t bytes = (size_t)hap_tensor_numel(tn) * sizeof(float);
    c->initial[t] = malloc(bytes + 1);
    if (c->initial[t] == NULL)
      return hap_err_set(err, HAP_ENOMEM, "--check: out of memory for '%s'", tn->name);
    memcpy(c->initial[t], hap_reference_value(c->ref, t), bytes);
    if (c->tol.adam_allowance) {
      c->grad_rel[t] = calloc((size_t)hap_tensor_numel(tn) + 1, sizeof(float));
      c->allowance[t] = calloc((size_t)hap_tensor_numel(tn) + 1, sizeof(float));
      if (c->grad_rel[t] == NULL || c->allowance[t] == NULL)
        return hap_err_set(err, HAP_ENOMEM, "--check: out of memory for '%s'", tn->name);
    }
  }
  return HAP_OK;
}

static double max2(double a, double b) { return a > b ? a : b; }

/* Rank 0: one more reference iteration (forward, backward, update), and the model's scales. */
static hap_status advance_reference(hap_checker *c, hap_err *err) {
  const hap_graph *g = c->g;
  if (c->ref == NULL) {
    HAP_TRY(hap_reference_run_policy(g, c->seed, &c->policy, &c->ref, err));
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
      if (isfinite(gw[e])) /* a skipped step's gradients hold Inf */
        c->grad_scale = max2(c->grad_scale, fabs((double)gw[e]));
      c->update_scale = max2(c->update_scale, fabs((double)w[e] - w0[e]));
    }
  }
  return HAP_OK;
}

hap_status hap_checker_create(const hap_graph *g, hap_comm *world, uint64_t seed, double lr,
                              const hap_train_policy *policy, hap_checker **out, hap_err *err) {
  *out = NULL;
  hap_train_policy p = policy ? *policy : hap_policy_default();
  if (hap_policy_check(&p, err) != HAP_OK) {
    hap_err_prefix(err, "--check");
    return HAP_EINVAL;
  }
  hap_checker *c = calloc(1, sizeof *c);
  if (c == NULL)
    return hap_err_set(err, HAP_ENOMEM, "--check: out of memory");
  *c = (hap_checker){.g = g,
                     .world = world,
                     .seed = seed,
                     .lr = lr,
                     .policy = p,
                     .tol = hap_check_tolerances_for(&p)};
  *out = c;
  return HAP_OK;
}

hap_check_tolerances hap_checker_tolerances(const hap_checker *c) { return c->tol; }

/* "0" or "0,2,3": the ranks whose copy is copy u's (u and those with same_as u). */
static void rank_list(const hap_run_copies *c, int32_t u, char *buf, size_t size) {
  size_t len = (size_t)snprintf(buf, size, "%d", (int)u);
  for (int32_t r = u + 1; r < c->n_ranks && len < size; r++)
    if (c->same_as[r] == u)
      len += (size_t)snprintf(buf + len, size - len, ",%d", (int)r);
}

/* A tolerance as printed: "1e-04" where that is exact, else "0.25" (two digits). */
static const char *tol_text(double tol, char *buf, size_t size) {
  snprintf(buf, size, "%.0e", tol);
  if (strtod(buf, NULL) != tol)
    snprintf(buf, size, "%.2g", tol);
  return buf;
}

/* How a copy is judged against the reference (one tensor, one quantity). */
typedef struct judge {
  bool grad;
  double denom;           /* the tensor's scale (floored) */
  int32_t ulps;           /* values: float32 ulps of the reference forgiven */
  const float *allowance; /* values under Adam: per whole-tensor element, else NULL */
  hap_dtype exact;        /* gradients under grad_accum=half: every element a value of this */
  bool norm;              /* mixed precision: the copy's relative L2 error (check.h) */
  const float *initial;   /* values: the parameter before the first update (whole tensor) */
  double floor_rms;       /* norm: the floor as a root-mean-square per element */
} judge;

/* What one copy showed: the largest error (relative to denom) at box element worst_e, or the
 * first non-finite element (bad_e >= 0), or the first gradient element that is not a value of
 * j->exact (odd_e >= 0). */
typedef struct copy_verdict {
  double worst;
  int64_t worst_e, bad_e, odd_e;
} copy_verdict;

static copy_verdict copy_error(const judge *j, const hap_box *b, const hap_shape *s,
                               const float *got, const float *want) {
  box_runs br = {b, s, b->rank > 0 ? b->hi[b->rank - 1] - b->lo[b->rank - 1] : 1};
  int64_t m = hap_box_numel(b);
  copy_verdict v = {.worst = 0, .worst_e = -1, .bad_e = -1, .odd_e = -1};
  double sum_d2 = 0, sum_r2 = 0, largest = -1; /* norm */
  for (int64_t k = 0; br.run_len > 0 && k * br.run_len < m; k++) {
    int64_t e0 = k * br.run_len, at0 = run_start(&br, k);
    for (int64_t i = 0; i < br.run_len; i++) {
      float g = got[e0 + i];
      if (!isfinite(g)) {
        v.bad_e = e0 + i;
        return v;
      }
      if (v.odd_e < 0 && j->exact != HAP_F32 && hap_round_to(j->exact, g) != g)
        v.odd_e = e0 + i;
      double ref = want[at0 + i], d = fabs((double)g - ref);
      if (!j->grad) {
        d -= j->ulps * ulp((float)ref);
        if (j->allowance)
          d -= j->allowance[at0 + i];
        d = max2(0, d);
      }
      if (j->norm) {
        double r = j->grad ? ref : ref - j->initial[at0 + i];
        sum_d2 += d * d;
        sum_r2 += r * r;
        if (d > largest) {
          largest = d;
          v.worst_e = e0 + i;
        }
      } else if (v.worst_e < 0 || d / j->denom > v.worst) {
        v.worst = d / j->denom;
        v.worst_e = e0 + i;
      }
    }
  }
  if (j->norm && m > 0)
    v.worst = sqrt(sum_d2) / fmax(fmax(sqrt(sum_r2), j->floor_rms * sqrt((double)m)), 1e-30);
  return v;
}

/* Adam: rel[e] = max(rel[e], |g - ref| / |ref|) over the copy's elements (finite ones). */
static void note_grad_rel(const hap_box *b, const hap_shape *s, const float *got, const float *want,
                          float *rel) {
  box_runs br = {b, s, b->rank > 0 ? b->hi[b->rank - 1] - b->lo[b->rank - 1] : 1};
  int64_t m = hap_box_numel(b);
  for (int64_t k = 0; br.run_len > 0 && k * br.run_len < m; k++) {
    int64_t e0 = k * br.run_len, at0 = run_start(&br, k);
    for (int64_t i = 0; i < br.run_len; i++) {
      double g = got[e0 + i], ref = want[at0 + i];
      double r = g == ref ? 0 : ref == 0 ? INFINITY : fabs(g - ref) / fabs(ref);
      if (r > rel[at0 + i] || isnan(r))
        rel[at0 + i] = isnan(r) ? INFINITY : (float)fmin(r, 1e30);
    }
  }
}

/* Adam, after reference step t: each element's allowance is what the step can differ by with
 * its gradients' relative differences rel over the steps so far (check.h); both runs started the
 * step from the same values. */
static void step_allowance(const hap_checker *c, int32_t t, int64_t step) {
  hap_optim_hyper h = hap_optim_defaults(c->lr);
  double bound = hap_check_adam_ratio_bound(h.beta1, h.beta2, step);
  float *rel = c->grad_rel[t], *allow = c->allowance[t];
  for (int64_t e = 0, n = hap_tensor_numel(&c->g->tensors[t]); e < n; e++) {
    double r = rel[e];
    double factor = r >= 0.5 ? 2 : 2 * r / (1 - r);
    allow[e] = (float)(c->lr * bound * factor);
  }
}

/* Rank 0, after comparing tensor t's values: the reference goes on from the run's own values (the
 * lowest rank's copy of each element; an element no rank holds, or holds as a non-finite value
 * already reported, keeps the reference's), so that each later iteration is compared from the
 * same starting point and differences do not compound (check.h). */
static hap_status follow_run(hap_checker *c, int32_t t, const hap_run_copies *cp, hap_err *err) {
  const hap_tensor *tn = &c->g->tensors[t];
  int64_t n = hap_tensor_numel(tn);
  float *full = malloc((size_t)n * sizeof *full + 1);
  if (full == NULL)
    return hap_err_set(err, HAP_ENOMEM, "--check: out of memory for '%s'", tn->name);
  const float *mine = hap_reference_value(c->ref, t);
  memcpy(full, mine, (size_t)n * sizeof *full);
  for (int32_t u = cp->n_ranks - 1; u >= 0; u--) { /* lower ranks last: theirs stay */
    if (cp->same_as[u] >= 0)
      continue;
    const hap_box *b = &cp->box[u];
    const float *got = cp->data + cp->offset[u];
    box_runs br = {b, &tn->shape, b->rank > 0 ? b->hi[b->rank - 1] - b->lo[b->rank - 1] : 1};
    int64_t m = hap_box_numel(b);
    for (int64_t k = 0; br.run_len > 0 && k * br.run_len < m; k++)
      memcpy(full + run_start(&br, k), got + k * br.run_len, (size_t)br.run_len * sizeof *full);
  }
  for (int64_t e = 0; e < n; e++)
    if (!isfinite(full[e]))
      full[e] = mine[e];
  hap_status st = hap_reference_set_value(c->ref, t, full, err);
  free(full);
  return st;
}

/* The whole-tensor index of box element e. */
static int64_t global_of(const hap_box *b, const hap_shape *s, int64_t e) {
  box_runs br = {b, s, b->rank > 0 ? b->hi[b->rank - 1] - b->lo[b->rank - 1] : 1};
  return br.run_len > 0 ? run_start(&br, e / br.run_len) + e % br.run_len : 0;
}

/* Compare every rank's copy (cp) of tensor t's quantity q with the reference `want`. */
static void compare_copies(const hap_checker *c, int32_t t, hap_run_quantity q, const float *want,
                           const hap_run_copies *cp, hap_check_result *res) {
  const hap_graph *g = c->g;
  const hap_tensor *tn = &g->tensors[t];
  int64_t n = hap_tensor_numel(tn);
  bool grad = q == HAP_RUN_GRADIENT;
  const char *what = grad ? "gradient" : "value";
  const float *initial = c->initial[t];
  double tol = grad ? c->tol.grad : c->tol.param;
  double scale = 0; /* the tensor's largest |gradient| or |update| */
  for (int64_t e = 0; e < n; e++)
    scale = max2(scale, fabs(grad ? (double)want[e] : (double)want[e] - initial[e]));
  double floor_scale = c->tol.floor * (grad ? c->grad_scale : c->update_scale);
  if (grad && scale < floor_scale)
    res->n_floored++;
  hap_dtype dt = hap_policy_compute_dtype(&c->policy);
  judge j = {.grad = grad,
             .denom = fmax(fmax(scale, floor_scale), 1e-30),
             .ulps = c->tol.param_ulps,
             .allowance = grad || c->allowance == NULL ? NULL : c->allowance[t],
             .exact = grad && c->policy.grad_accum == HAP_GRAD_HALF ? dt : HAP_F32,
             .norm = c->tol.norm,
             .initial = initial,
             .floor_rms = floor_scale};
  res->n_copies += grad ? cp->n_ranks : 0;
  for (int32_t u = 0; u < cp->n_ranks; u++) {
    if (cp->same_as[u] >= 0) /* an identical copy: judged with rank same_as[u]'s */
      continue;
    const hap_box *b = &cp->box[u];
    const float *got = cp->data + cp->offset[u];
    copy_verdict v = copy_error(&j, b, &tn->shape, got, want);
    char ranks[128], tb[32];
    rank_list(cp, u, ranks, sizeof ranks);
    const char *plural = strchr(ranks, ',') ? "s" : "";
    if (v.bad_e >= 0) {
      fail(res, INFINITY, "%s of '%s' on rank%s %s: element %lld is %g (not finite)", what,
           tn->name, plural, ranks, (long long)global_of(b, &tn->shape, v.bad_e),
           (double)got[v.bad_e]);
      continue;
    }
    if (grad && c->grad_rel != NULL)
      note_grad_rel(b, &tn->shape, got, want, c->grad_rel[t]);
    if (v.odd_e >= 0)
      fail(res, 1,
           "%s of '%s' on rank%s %s: element %lld is %.9g, not a %s value (grad_accum=%s "
           "stores gradients in %s)",
           what, tn->name, plural, ranks, (long long)global_of(b, &tn->shape, v.odd_e),
           (double)got[v.odd_e], hap_dtype_name(dt), hap_grad_accum_name(c->policy.grad_accum),
           hap_dtype_name(dt));
    if (v.worst_e < 0) /* an empty shard */
      continue;
    double *worst_err = grad ? &res->grad_err : &res->param_err;
    *worst_err = fmax(*worst_err, v.worst);
    int64_t at = global_of(b, &tn->shape, v.worst_e);
    if (!(v.worst <= tol) && !grad && hap_reference_skipped(c->ref))
      fail(res, v.worst,
           "value of '%s' on rank%s %s: element %lld is %.9g, single device %.9g (unchanged: the "
           "single-device step was skipped, its fp16 gradients overflowed at loss scale %g)",
           tn->name, plural, ranks, (long long)at, (double)got[v.worst_e], (double)want[at],
           hap_reference_loss_scale(c->ref));
    else if (!(v.worst <= tol) && j.norm)
      fail(res, v.worst,
           "%s of '%s' on rank%s %s: relative L2 error %.2e over %lld elements, tolerance %s "
           "(largest difference at element %lld: %.9g, single device %.9g)",
           what, tn->name, plural, ranks, v.worst, (long long)hap_box_numel(b),
           tol_text(tol, tb, sizeof tb), (long long)at, (double)got[v.worst_e], (double)want[at]);
    else if (!(v.worst <= tol))
      fail(res, v.worst,
           "%s of '%s' on rank%s %s: element %lld is %.9g, single device %.9g (error %.2e of "
           "%.3g, tolerance %s)",
           what, tn->name, plural, ranks, (long long)at, (double)got[v.worst_e], (double)want[at],
           v.worst, j.denom, tol_text(tol, tb, sizeof tb));
  }
}

/* The loss: every rank's share finite, their sum against the reference. */
static void compare_loss(const double *parts, int32_t n_ranks, double want, double tol,
                         hap_check_result *res) {
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
  char tb[32];
  if (isfinite(loss) && !(rel <= tol))
    fail(res, rel, "loss: %.9g, single device %.9g (relative error %.2e, tolerance %s)", loss, want,
         rel, tol_text(tol, tb, sizeof tb));
}

/* Rank 0 says whether it can go on (st), every rank learns it: the others must not wait in a
 * gather that rank 0 never joins. */
static hap_status agree(hap_comm *world, hap_status st, const char *what, hap_err *err) {
  double mine = st == HAP_OK ? 0 : 1, any = 0;
  hap_err ignored = {0};
  hap_status cst = world->ops->all_reduce(world, &mine, &any, 1, HAP_F64, HAP_REDUCE_MAX,
                                          st == HAP_OK ? err : &ignored);
  if (st != HAP_OK)
    return st;
  if (cst != HAP_OK)
    return cst;
  return any == 0 ? HAP_OK : hap_err_set(err, HAP_EINVAL, "--check: rank 0 could not %s", what);
}

/* What a compare reads from the run under test: an ordinary plan's runner or a pipeline's. */
typedef struct subject {
  hap_run *run;
  hap_pipe_run *pipe;
} subject;

static double loss_part_of(const subject *s) {
  return s->pipe != NULL ? hap_pipe_run_loss_part(s->pipe) : hap_run_loss_part(s->run);
}

static hap_status copies_of(const subject *s, int32_t t, hap_run_quantity q, hap_run_copies *out,
                            hap_err *err) {
  return s->pipe != NULL ? hap_pipe_run_gather_copies(s->pipe, t, q, out, err)
                         : hap_run_gather_copies(s->run, t, q, out, err);
}

static hap_status compare(hap_checker *c, const subject *run, hap_check_result *res, hap_err *err) {
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
  st = agree(world, st, "run the reference", err);
  double part = loss_part_of(run);
  if (st == HAP_OK)
    st = world->ops->all_gather(world, &part, parts, (int64_t)sizeof part, err);
  /* a step the reference skipped (fp16 overflow): its gradients hold Inf and are not compared;
   * the values must not have moved */
  bool skipped = root && st == HAP_OK && hap_reference_skipped(c->ref);
  if (st == HAP_OK && root) {
    compare_loss(parts, world->size, hap_reference_loss(c->ref), c->tol.loss, res);
    res->n_skipped += skipped;
    res->steps = (int32_t)hap_reference_steps(c->ref);
  }
  hap_status followed = HAP_OK; /* rank 0: follow_run's */
  for (int32_t t = 0; t < g->n_tensors && st == HAP_OK; t++) {
    if (!trainable(&g->tensors[t]))
      continue;
    res->n_params += root;
    for (int q = HAP_RUN_GRADIENT; q <= HAP_RUN_VALUE && st == HAP_OK; q++) {
      hap_run_copies copies = {0};
      bool grad = q == HAP_RUN_GRADIENT;
      st = copies_of(run, t, (hap_run_quantity)q, &copies, err);
      if (st == HAP_OK && root && !(grad && skipped)) {
        if (!grad && !skipped && c->allowance != NULL) /* this step's, from the gradients */
          step_allowance(c, t, hap_reference_steps(c->ref));
        const float *want =
            grad ? hap_reference_grad(c->ref, t) : (const float *)hap_reference_value(c->ref, t);
        compare_copies(c, t, (hap_run_quantity)q, want, &copies, res);
        if (!grad && followed == HAP_OK)
          followed = follow_run(c, t, &copies, err);
      }
      hap_run_copies_free(&copies);
    }
  }
  free(parts);
  if (st == HAP_OK) /* the gathers above are collective: rank 0 says only now that it failed */
    st = agree(world, followed, "take the run's values", err);
  /* every rank learns the verdict */
  double bad = res->n_failures > 0, any = 0;
  if (st == HAP_OK)
    st = world->ops->all_reduce(world, &bad, &any, 1, HAP_F64, HAP_REDUCE_MAX, err);
  res->passed = st == HAP_OK && any == 0;
  return st;
}

hap_status hap_checker_compare(hap_checker *c, hap_run *run, hap_check_result *res, hap_err *err) {
  subject s = {run, NULL};
  return compare(c, &s, res, err);
}

hap_status hap_checker_compare_pipeline(hap_checker *c, hap_pipe_run *run, hap_check_result *res,
                                        hap_err *err) {
  subject s = {NULL, run};
  return compare(c, &s, res, err);
}
