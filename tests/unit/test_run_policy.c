/* test_run_policy.c — training policies in the single-device reference (run/reference.h: the
 * default unchanged bit for bit, the optimizers wired with their state, bf16 / fp16 emulated
 * storage with float32 masters, fp16 loss scaling with skipped steps) and in --check
 * (run/check.h: the tolerances per policy, Adam's per-element allowance against the optimizer
 * itself, and a one-rank fp32 SGD runner failing the check of any other policy). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/optim.h"
#include "loopback_comm.h"
#include "model/zoo.h"
#include "plan/lower.h"
#include "run/check.h"
#include "run/reference.h"
#include "run/run.h"
#include "store/cluster_open.h"
#include "synth/synth.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static hap_graph *build(const char *spec) {
  hap_graph *g = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_zoo_build(spec, &g, &err), HAP_OK, "%s: %s", spec, err.msg);
  return g;
}

static hap_train_policy policy(const char *text) {
  hap_train_policy p = hap_policy_default();
  hap_err err = {0};
  cr_assert_eq(hap_policy_parse(text, &p, NULL, &err), HAP_OK, "%s: %s", text, err.msg);
  return p;
}

static hap_reference *run_policy(const hap_graph *g, uint64_t seed, const char *text) {
  hap_train_policy p = policy(text);
  hap_reference *ref = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_reference_run_policy(g, seed, &p, &ref, &err), HAP_OK, "%s: %s", text, err.msg);
  return ref;
}

static void iterate(hap_reference *ref) {
  hap_err err = {0};
  cr_assert_eq(hap_reference_iterate(ref, &err), HAP_OK, "%s", err.msg);
}

static bool trainable(const hap_tensor *t) {
  return t->kind == HAP_TENSOR_PARAMETER && t->requires_grad;
}

static float *copy_of(const void *src, int64_t n) {
  float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  cr_assert_not_null(d);
  memcpy(d, src, (size_t)n * sizeof *d);
  return d;
}

/* Every finite element of v is a value of dtype dt; returns the count of elements that are not. */
static int64_t not_representable(hap_dtype dt, const float *v, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += isfinite(v[i]) && hap_round_to(dt, v[i]) != v[i];
  return bad;
}

/* ---- the default policy ------------------------------------------------------------------------
 */

/* hap_reference_run, hap_reference_run_policy(NULL) and (&default) train identically, bit for bit,
 * with the SGD step hap_kernel_sgd's w -= lr g; no masters, scale 1, nothing skipped. */
Test(reference_policy, default_is_unchanged) {
  const char *specs[] = {"mlp:layers=2,batch=8,seq=4,hidden=16",
                         "gpt:layers=1,batch=4,seq=8,width=16,heads=2,vocab=32,granularity=fine"};
  for (size_t s = 0; s < 2; s++) {
    hap_graph *g = build(specs[s]);
    hap_train_policy d = hap_policy_default();
    hap_reference *r[3] = {0};
    hap_err err = {0};
    cr_assert_eq(hap_reference_run(g, 7, &r[0], &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(hap_reference_run_policy(g, 7, NULL, &r[1], &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(hap_reference_run_policy(g, 7, &d, &r[2], &err), HAP_OK, "%s", err.msg);
    for (int it = 0; it < 3; it++) {
      for (int k = 0; k < 3; k++) {
        cr_assert(hap_reference_loss_scale(r[k]) == 1.0);
        if (it > 0)
          cr_assert_not(hap_reference_skipped(r[k]));
      }
      for (int k = 1; k < 3; k++) {
        cr_assert(hap_reference_loss(r[k]) == hap_reference_loss(r[0]), "%s it %d", specs[s], it);
        for (int32_t t = 0; t < g->n_tensors; t++) {
          const hap_tensor *tn = &g->tensors[t];
          cr_assert(memcmp(hap_reference_value(r[k], t), hap_reference_value(r[0], t),
                           (size_t)hap_tensor_bytes(tn)) == 0,
                    "%s: '%s' differs", specs[s], tn->name);
          cr_assert_eq(hap_reference_compute_value(r[k], t), hap_reference_value(r[k], t),
                       "fp32: the kernels read the value itself");
          if (trainable(tn))
            cr_assert(memcmp(hap_reference_grad(r[k], t), hap_reference_grad(r[0], t),
                             (size_t)hap_tensor_bytes(tn)) == 0);
        }
      }
      /* the SGD step is hap_kernel_sgd's */
      int32_t w = -1;
      for (int32_t t = 0; t < g->n_tensors && w < 0; t++)
        w = trainable(&g->tensors[t]) ? t : -1;
      int64_t n = hap_tensor_numel(&g->tensors[w]);
      float *before = copy_of(hap_reference_value(r[1], w), n);
      const float *grad = hap_reference_grad(r[1], w);
      for (int k = 0; k < 3; k++)
        hap_reference_update(r[k], 1e-3);
      const float *after = hap_reference_value(r[1], w);
      for (int64_t e = 0; e < n; e++)
        cr_assert(after[e] == before[e] - 1e-3f * grad[e], "element %lld", (long long)e);
      free(before);
      for (int k = 0; k < 3; k++)
        iterate(r[k]);
    }
    cr_assert_eq(hap_reference_steps(r[1]), 3);
    for (int k = 0; k < 3; k++)
      hap_reference_destroy(r[k]);
    hap_graph_destroy(g);
  }
}

Test(reference_policy, invalid_policy_is_refused) {
  hap_graph *g = build("mlp:layers=1,batch=2,seq=2,hidden=4");
  hap_train_policy p = hap_policy_default();
  p.zero = 7;
  hap_reference *ref = (hap_reference *)1;
  hap_err err = {0};
  cr_assert_eq(hap_reference_run_policy(g, 1, &p, &ref, &err), HAP_EINVAL);
  cr_assert_null(ref);
  cr_assert(strstr(err.msg, "reference run") && strstr(err.msg, "zero"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  hap_checker *c = (hap_checker *)1;
  hap_err_clear(&err);
  cr_assert_eq(hap_checker_create(g, NULL, 1, 1e-3, &p, &c, &err), HAP_EINVAL);
  cr_assert_null(c);
  cr_assert(strstr(err.msg, "--check") && strstr(err.msg, "zero"), "%s", err.msg);
  hap_graph_destroy(g);
}

/* ---- optimizers in float32 ------------------------------------------------------------------ */

/* Momentum, Adam and AdamW: each update is hap_optim_step on the parameter with its own state and
 * the step count, bit for bit (a shadow copy trained beside the reference), and differs from
 * SGD's. */
Test(reference_policy, fp32_optimizers_keep_their_state) {
  const char *spec = "gpt:layers=1,batch=4,seq=8,width=16,heads=2,vocab=32,dropout=0";
  hap_graph *g = build(spec);
  const hap_optimizer opts[] = {HAP_OPT_MOMENTUM, HAP_OPT_ADAM, HAP_OPT_ADAMW};
  const double lr = 2e-3;
  int32_t nt = g->n_tensors;
  for (size_t o = 0; o < 3; o++) {
    char text[64];
    snprintf(text, sizeof text, "optimizer=%s", hap_optimizer_name(opts[o]));
    hap_reference *ref = run_policy(g, 5, text), *sgd = run_policy(g, 5, "optimizer=sgd");
    float **w = calloc((size_t)nt, sizeof *w), **m = calloc((size_t)nt, sizeof *m),
          **v = calloc((size_t)nt, sizeof *v);
    cr_assert(w && m && v);
    for (int32_t t = 0; t < nt; t++)
      if (trainable(&g->tensors[t])) {
        int64_t n = hap_tensor_numel(&g->tensors[t]);
        w[t] = copy_of(hap_reference_value(ref, t), n);
        m[t] = calloc((size_t)n, sizeof(float));
        v[t] = calloc((size_t)n, sizeof(float));
      }
    hap_optim_hyper h = hap_optim_defaults(lr);
    for (int step = 1; step <= 3; step++) {
      for (int32_t t = 0; t < nt; t++)
        if (w[t])
          hap_optim_step(opts[o], &h, step, w[t], hap_reference_grad(ref, t), 1.0, m[t], v[t],
                         hap_tensor_numel(&g->tensors[t]));
      hap_reference_update(ref, lr);
      hap_reference_update(sgd, lr);
      cr_assert_eq(hap_reference_steps(ref), step);
      int64_t moved_unlike_sgd = 0, total = 0;
      for (int32_t t = 0; t < nt; t++) {
        if (!w[t])
          continue;
        int64_t n = hap_tensor_numel(&g->tensors[t]);
        const float *got = hap_reference_value(ref, t), *s = hap_reference_value(sgd, t);
        cr_assert(memcmp(got, w[t], (size_t)n * sizeof(float)) == 0, "%s step %d: '%s'", text, step,
                  g->tensors[t].name);
        for (int64_t e = 0; e < n; e++)
          moved_unlike_sgd += got[e] != s[e];
        total += n;
      }
      if (step > 1) /* momentum's first step is SGD's (in double) */
        cr_assert_gt(moved_unlike_sgd, total / 2, "%s: %lld of %lld elements differ from SGD's",
                     text, (long long)moved_unlike_sgd, (long long)total);
      iterate(ref);
      iterate(sgd);
    }
    for (int32_t t = 0; t < nt; t++) {
      free(w[t]);
      free(m[t]);
      free(v[t]);
    }
    free(w);
    free(m);
    free(v);
    hap_reference_destroy(ref);
    hap_reference_destroy(sgd);
  }
  hap_graph_destroy(g);
}

/* Adam (and AdamW under bf16, and Adam under fp16 once its loss scale stops overflowing) trains a
 * small gpt: the loss falls to under a quarter in 20 steps. */
Test(reference_policy, adam_reduces_the_loss) {
  hap_graph *g = build("gpt:layers=1,batch=4,seq=8,width=16,heads=2,vocab=32,dropout=0");
  const char *policies[] = {"optimizer=adam", "precision=bf16,optimizer=adamw",
                            "precision=fp16,optimizer=adam"};
  for (size_t p = 0; p < 3; p++) {
    hap_reference *ref = run_policy(g, 3, policies[p]);
    double first = hap_reference_loss(ref);
    for (int i = 0; i < 20; i++) {
      hap_reference_update(ref, 1e-2);
      iterate(ref);
    }
    double last = hap_reference_loss(ref);
    cr_assert(isfinite(last) && last < first / 4, "%s: loss %.6g -> %.6g after 20 steps",
              policies[p], first, last);
    cr_assert_geq(hap_reference_steps(ref), 10, "%s", policies[p]);
    hap_reference_destroy(ref);
  }
  hap_graph_destroy(g);
}

/* ---- mixed precision --------------------------------------------------------------------------
 */

/* bf16: every float tensor the kernels read or write holds bfloat16 values (the loss excepted),
 * trainable parameters keep float32 masters (at first the fp32 run's initial values) whose compute
 * copy is their rounding, gradients are bfloat16 values, and an SGD step updates the master with
 * hap_kernel_sgd's expression, then rounds the compute copy again. */
Test(reference_policy, bf16_emulated_storage_and_masters) {
  hap_graph *g = build("gpt:layers=1,batch=4,seq=8,width=16,heads=2,vocab=32,granularity=fine");
  hap_reference *ref = run_policy(g, 11, "precision=bf16");
  hap_reference *fp32 = run_policy(g, 11, "precision=fp32");
  const double lr = 1e-3;
  for (int it = 0; it < 2; it++) {
    int64_t masters_off_grid = 0, master_elems = 0;
    for (int32_t t = 0; t < g->n_tensors; t++) {
      const hap_tensor *tn = &g->tensors[t];
      if (tn->dtype != HAP_F32)
        continue;
      int64_t n = hap_tensor_numel(tn);
      const float *cv = hap_reference_compute_value(ref, t);
      if (t != g->loss)
        cr_assert_eq(not_representable(HAP_BF16, cv, n), 0, "'%s' holds non-bf16 values", tn->name);
      if (!trainable(tn))
        continue;
      const float *master = hap_reference_value(ref, t);
      cr_assert_neq(master, cv, "'%s': the master is a separate copy", tn->name);
      for (int64_t e = 0; e < n; e++)
        cr_assert(cv[e] == hap_round_to(HAP_BF16, master[e]), "'%s'[%lld]", tn->name, (long long)e);
      if (it == 0)
        cr_assert(memcmp(master, hap_reference_value(fp32, t), (size_t)n * sizeof(float)) == 0,
                  "'%s': the initial master is the float32 initial value", tn->name);
      masters_off_grid += not_representable(HAP_BF16, master, n);
      master_elems += n;
      cr_assert_eq(not_representable(HAP_BF16, hap_reference_grad(ref, t), n), 0,
                   "'%s': gradients are stored in bf16", tn->name);
    }
    cr_assert_gt(masters_off_grid, master_elems / 2, "masters stay float32: %lld of %lld",
                 (long long)masters_off_grid, (long long)master_elems);
    float loss = (float)hap_reference_loss(ref);
    cr_assert(hap_round_to(HAP_BF16, loss) != loss, "the loss stays float32: %.9g", (double)loss);
    double rel =
        fabs(hap_reference_loss(ref) - hap_reference_loss(fp32)) / fabs(hap_reference_loss(fp32));
    cr_assert_lt(rel, 4e-3, "bf16 loss %.9g, fp32 %.9g", hap_reference_loss(ref),
                 hap_reference_loss(fp32));
    /* the update: master -= lr * g in float32, compute copy = round(master) */
    int32_t w = hap_graph_find_tensor(g, "layers.0.fc1.weight");
    cr_assert_geq(w, 0);
    int64_t n = hap_tensor_numel(&g->tensors[w]);
    float *before = copy_of(hap_reference_value(ref, w), n);
    float *grad = copy_of(hap_reference_grad(ref, w), n);
    hap_reference_update(ref, lr);
    hap_reference_update(fp32, lr);
    const float *after = hap_reference_value(ref, w), *cv = hap_reference_compute_value(ref, w);
    for (int64_t e = 0; e < n; e++) {
      cr_assert(after[e] == before[e] - (float)lr * grad[e], "element %lld", (long long)e);
      cr_assert(cv[e] == hap_round_to(HAP_BF16, after[e]));
    }
    free(before);
    free(grad);
    iterate(ref);
    iterate(fp32);
  }
  hap_reference_destroy(ref);
  hap_reference_destroy(fp32);
  hap_graph_destroy(g);
}

/* hap_reference_set_value: a reference given another's trained values (masters) goes on exactly as
 * that one does (compute copies rounded from them); only trainable parameters can be set. */
Test(reference_policy, set_value_continues_from_the_given_values) {
  hap_graph *g = build("gpt:layers=1,batch=4,seq=8,width=16,heads=2,vocab=32,granularity=fine");
  hap_reference *trained = run_policy(g, 5, "precision=bf16");
  hap_reference *fresh = run_policy(g, 5, "precision=bf16");
  hap_reference_update(trained, 1e-2);
  iterate(trained);
  hap_err err = {0};
  int32_t set = 0;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    if (!trainable(&g->tensors[t]))
      continue;
    cr_assert_eq(hap_reference_set_value(fresh, t, hap_reference_value(trained, t), &err), HAP_OK,
                 "%s", err.msg);
    set++;
  }
  cr_assert_gt(set, 0);
  iterate(fresh);
  cr_assert(hap_reference_loss(fresh) == hap_reference_loss(trained), "%.9g vs %.9g",
            hap_reference_loss(fresh), hap_reference_loss(trained));
  for (int32_t t = 0; t < g->n_tensors; t++) {
    if (!trainable(&g->tensors[t]))
      continue;
    size_t bytes = (size_t)hap_tensor_numel(&g->tensors[t]) * sizeof(float);
    cr_assert(memcmp(hap_reference_compute_value(fresh, t), hap_reference_compute_value(trained, t),
                     bytes) == 0,
              "'%s': compute copy", g->tensors[t].name);
    cr_assert(memcmp(hap_reference_grad(fresh, t), hap_reference_grad(trained, t), bytes) == 0,
              "'%s': gradient", g->tensors[t].name);
  }
  int32_t input = -1;
  for (int32_t t = 0; t < g->n_tensors && input < 0; t++)
    if (g->tensors[t].kind == HAP_TENSOR_INPUT)
      input = t;
  cr_assert_geq(input, 0);
  float zero[1] = {0};
  cr_assert_eq(hap_reference_set_value(fresh, input, zero, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "not a trainable parameter"), "%s", err.msg);
  hap_reference_destroy(trained);
  hap_reference_destroy(fresh);
  hap_graph_destroy(g);
}

/* grad_accum=fp32: the parameters' gradients stay float32, every other stored tensor is bf16. */
Test(reference_policy, bf16_fp32_gradient_accumulation) {
  hap_graph *g = build("mlp:layers=2,batch=8,seq=4,hidden=16");
  hap_reference *ref = run_policy(g, 2, "precision=bf16,grad_accum=fp32");
  hap_reference *half = run_policy(g, 2, "precision=bf16");
  int64_t off_grid = 0;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    int64_t n = hap_tensor_numel(tn);
    if (t != g->loss)
      cr_assert_eq(not_representable(HAP_BF16, hap_reference_compute_value(ref, t), n), 0, "%s",
                   tn->name);
    if (trainable(tn)) {
      off_grid += not_representable(HAP_BF16, hap_reference_grad(ref, t), n);
      /* rule 5 rounds the half run's gradient once more: the fp32 one rounds to it */
      const float *g32 = hap_reference_grad(ref, t), *g16 = hap_reference_grad(half, t);
      for (int64_t e = 0; e < n; e++)
        cr_assert(hap_round_to(HAP_BF16, g32[e]) == g16[e], "%s[%lld]", tn->name, (long long)e);
    }
  }
  cr_assert_gt(off_grid, 0, "float32 gradients are not all bf16 values");
  hap_reference_destroy(ref);
  hap_reference_destroy(half);
  hap_graph_destroy(g);
}

/* fp16: the loss gradient is seeded with S = 2^16. The mlp's loss sums its outputs, so S itself
 * overflows float16 at the first backward: the step is skipped (masters and step count unchanged)
 * and S halves, until a step goes through; that step updates the masters with the gradients
 * divided by S. A huge learning rate then makes the compute copies overflow: the next step is
 * skipped again and S halves once more. */
Test(reference_policy, fp16_loss_scaling_skips_and_halves) {
  hap_graph *g = build("mlp:layers=2,batch=8,seq=4,hidden=16");
  hap_reference *ref = run_policy(g, 4, "precision=fp16");
  const double lr = 1e-3;
  int32_t w = hap_graph_find_tensor(g, "layers.0.linear.weight");
  cr_assert_geq(w, 0);
  int64_t n = hap_tensor_numel(&g->tensors[w]);
  float *initial = copy_of(hap_reference_value(ref, w), n);
  cr_assert(hap_reference_loss_scale(ref) == 65536.0);
  double scale = 65536.0;
  int skips = 0;
  for (;;) {
    cr_assert(hap_reference_loss_scale(ref) == scale);
    bool overflow = !hap_all_finite(hap_reference_grad(ref, w), n);
    float *before = copy_of(hap_reference_value(ref, w), n);
    float *grad = copy_of(hap_reference_grad(ref, w), n);
    hap_reference_update(ref, lr);
    const float *after = hap_reference_value(ref, w);
    if (hap_reference_skipped(ref)) {
      skips++;
      cr_assert(memcmp(after, initial, (size_t)n * sizeof(float)) == 0, "a skipped step moved");
      cr_assert_eq(hap_reference_steps(ref), 0);
      cr_assert(hap_reference_next_loss_scale(ref) == scale / 2);
      scale /= 2;
      free(before);
      free(grad);
      iterate(ref);
      cr_assert_lt(skips, 16, "still overflowing at S = %g", scale);
      continue;
    }
    cr_assert_not(overflow, "this tensor's gradient was finite, or the step would be skipped");
    cr_assert_eq(hap_reference_steps(ref), 1);
    cr_assert(hap_reference_next_loss_scale(ref) == scale, "one good step does not double S");
    for (int64_t e = 0; e < n; e++) {
      float unscaled = (float)((double)grad[e] * (1.0 / scale));
      cr_assert(after[e] == before[e] - (float)lr * unscaled, "element %lld", (long long)e);
      cr_assert(hap_reference_compute_value(ref, w) != NULL &&
                ((const float *)hap_reference_compute_value(ref, w))[e] ==
                    hap_round_to(HAP_F16, after[e]));
    }
    free(before);
    free(grad);
    break;
  }
  cr_assert_geq(skips, 1, "S = 2^16 overflows the summed loss's gradient");
  /* overflow forced by a huge step */
  iterate(ref);
  hap_reference_update(ref, 1e9);
  cr_assert_not(hap_reference_skipped(ref));
  cr_assert_eq(hap_reference_steps(ref), 2);
  float *huge = copy_of(hap_reference_value(ref, w), n);
  iterate(ref);
  hap_reference_update(ref, lr);
  cr_assert(hap_reference_skipped(ref), "compute copies beyond 65504 overflow the next pass");
  cr_assert_eq(hap_reference_steps(ref), 2);
  cr_assert(hap_reference_next_loss_scale(ref) == scale / 2);
  cr_assert(memcmp(hap_reference_value(ref, w), huge, (size_t)n * sizeof(float)) == 0);
  free(huge);
  free(initial);
  hap_reference_destroy(ref);
  hap_graph_destroy(g);
}

/* fp16 gradients are in units of S: once S stops overflowing (no step taken before it, so the
 * parameters are the initial ones), gradient / S is the fp32 run's gradient to float16 accuracy. */
Test(reference_policy, fp16_gradients_are_scaled_by_s) {
  hap_graph *g = build("gpt:layers=1,batch=4,seq=8,width=16,heads=2,vocab=32,dropout=0");
  hap_reference *ref = run_policy(g, 9, "precision=fp16");
  hap_reference *fp32 = run_policy(g, 9, "precision=fp32");
  int passes = 1;
  for (;;) {
    bool finite = true;
    for (int32_t t = 0; t < g->n_tensors && finite; t++)
      if (trainable(&g->tensors[t]))
        finite = hap_all_finite(hap_reference_grad(ref, t), hap_tensor_numel(&g->tensors[t]));
    if (finite)
      break;
    hap_reference_update(ref, 1e-3);
    cr_assert(hap_reference_skipped(ref));
    iterate(ref);
    cr_assert_lt(++passes, 17);
  }
  double s = hap_reference_loss_scale(ref);
  cr_assert(s < 65536.0 && s >= 1, "S = %g", s);
  double rel =
      fabs(hap_reference_loss(ref) - hap_reference_loss(fp32)) / fabs(hap_reference_loss(fp32));
  cr_assert_lt(rel, 1e-3, "loss %.9g vs fp32 %.9g", hap_reference_loss(ref),
               hap_reference_loss(fp32));
  double gmax = 0, emax = 0;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    if (!trainable(&g->tensors[t]))
      continue;
    const float *a = hap_reference_grad(ref, t), *b = hap_reference_grad(fp32, t);
    for (int64_t e = 0, n = hap_tensor_numel(&g->tensors[t]); e < n; e++) {
      gmax = fmax(gmax, fabs((double)b[e]));
      emax = fmax(emax, fabs((double)a[e] / s - b[e]));
    }
  }
  cr_assert_lt(emax, 2e-2 * gmax, "|g/S - g_fp32| up to %.3g of the largest gradient %.3g", emax,
               gmax);
  hap_reference_destroy(ref);
  hap_reference_destroy(fp32);
  hap_graph_destroy(g);
}

/* ---- check: tolerances and Adam's allowance ----------------------------------------------------
 */

static bool same_tolerances(const hap_check_tolerances *a, const hap_check_tolerances *b) {
  return a->loss == b->loss && a->grad == b->grad && a->param == b->param &&
         a->param_ulps == b->param_ulps && a->floor == b->floor &&
         a->adam_allowance == b->adam_allowance;
}

Test(check_policy, tolerances_per_policy) {
  hap_check_tolerances d = hap_check_tolerances_for(NULL);
  cr_assert(d.loss == HAP_CHECK_LOSS_TOL && d.grad == HAP_CHECK_GRAD_TOL &&
            d.param == HAP_CHECK_PARAM_TOL && d.param_ulps == HAP_CHECK_PARAM_ULPS &&
            d.floor == HAP_CHECK_FLOOR && !d.adam_allowance);
  cr_assert(d.loss == 1e-4 && d.grad == 1e-4 && d.param == 1e-4 && d.floor == 1e-3);
  hap_train_policy p = policy("optimizer=momentum,zero=1,micro_batches=2");
  hap_check_tolerances m = hap_check_tolerances_for(&p);
  cr_assert(same_tolerances(&m, &d), "fp32 momentum: the default's");
  p = policy("optimizer=adamw");
  hap_check_tolerances a = hap_check_tolerances_for(&p);
  cr_assert(a.adam_allowance && a.grad == d.grad && a.param == d.param && a.floor == d.floor);
  p = policy("precision=bf16");
  hap_check_tolerances b = hap_check_tolerances_for(&p);
  cr_assert(b.loss == HAP_CHECK_BF16_LOSS_TOL && b.grad == HAP_CHECK_BF16_NORM_TOL &&
            b.param == HAP_CHECK_BF16_NORM_TOL && b.floor == HAP_CHECK_MIXED_FLOOR && b.norm &&
            b.param_ulps == HAP_CHECK_PARAM_ULPS && !b.adam_allowance);
  p = policy("precision=fp16,optimizer=adam");
  hap_check_tolerances f = hap_check_tolerances_for(&p);
  cr_assert(f.loss == HAP_CHECK_FP16_LOSS_TOL && f.adam_allowance);
  /* the loss tolerances are about one unit roundoff of the format */
  cr_assert(HAP_CHECK_BF16_LOSS_TOL >= 0x1p-8 && HAP_CHECK_BF16_LOSS_TOL < 0x1p-5);
  cr_assert(HAP_CHECK_FP16_LOSS_TOL >= 0x1p-11 && HAP_CHECK_FP16_LOSS_TOL < 0x1p-9);
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double uniform(double lo, double hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) * 0x1p-53;
}

/* B_t bounds |m^ / sqrt(v^)| over random gradient histories and is attained by g_k ~ a_k / b_k;
 * hap_optim_step (eps 0) fed that history moves the element by lr B_t at step t. */
Test(check_policy, adam_ratio_bound) {
  const double b1 = 0.9, b2 = 0.999;
  cr_assert_float_eq(hap_check_adam_ratio_bound(b1, b2, 1), 1.0, 1e-15);
  for (int t = 2; t <= 12; t++) {
    double bound = hap_check_adam_ratio_bound(b1, b2, t);
    double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    for (int trial = 0; trial < 2000; trial++) {
      double m = 0, v = 0;
      for (int k = 1; k <= t; k++) {
        double g = uniform(-1, 1) * pow(10, uniform(-2, 2));
        m += (1 - b1) * pow(b1, t - k) / c1 * g;
        v += (1 - b2) * pow(b2, t - k) / c2 * g * g;
      }
      cr_assert_leq(fabs(m) / sqrt(v), bound * (1 + 1e-12), "t %d", t);
    }
    /* the extremal history, through the optimizer itself */
    hap_optim_hyper h = hap_optim_defaults(1e-3);
    h.eps = 0;
    float w = 0, mm = 0, vv = 0, before = 0;
    for (int k = 1; k <= t; k++) {
      double a = (1 - b1) * pow(b1, t - k) / c1, b = (1 - b2) * pow(b2, t - k) / c2;
      float g = (float)(a / b / 1000);
      before = w;
      hap_optim_step(HAP_OPT_ADAM, &h, k, &w, &g, 1.0, &mm, &vv, 1);
    }
    cr_assert_float_eq((double)before - w, 1e-3 * bound, 1e-3 * bound * 1e-5, "t %d: %.9g vs %.9g",
                       t, (double)before - w, 1e-3 * bound);
  }
}

/* The allowance --check gives an Adam element (check.h): with every gradient of the history up to
 * step t off by at most a relative e_t, T steps move the element differently by at most
 * lr sum_t B_t min(2, 2 e_t / (1 - e_t)) (plus float32 rounding). Checked on the optimizer itself
 * over random histories, including sign flips (e >= 1). */
Test(check_policy, adam_allowance_bounds_the_optimizer) {
  const double es[] = {1e-6, 1e-3, 0.05, 0.3, 0.6, 2.5};
  const double lr = 1e-2;
  hap_optim_hyper h = hap_optim_defaults(lr);
  for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) {
    double e = es[i], worst = 0;
    for (int trial = 0; trial < 3000; trial++) {
      float w[2] = {0.5f, 0.5f}, m[2] = {0}, v[2] = {0};
      double allow = 0,
             r_max = 0; /* r_max: the largest relative error so far, as the check keeps */
      int T = 1 + trial % 8;
      for (int t = 1; t <= T; t++) {
        float g = (float)(uniform(-1, 1) * pow(10, uniform(-2, 1)));
        float gp = (float)(g * (1 + uniform(-e, e)));
        hap_optim_step(HAP_OPT_ADAM, &h, t, &w[0], &g, 1.0, &m[0], &v[0], 1);
        hap_optim_step(HAP_OPT_ADAM, &h, t, &w[1], &gp, 1.0, &m[1], &v[1], 1);
        r_max = fmax(r_max, fabs((double)gp - g) / fabs((double)g));
        allow += lr * hap_check_adam_ratio_bound(h.beta1, h.beta2, t) *
                 (r_max >= 0.5 ? 2 : 2 * r_max / (1 - r_max));
      }
      double diff = fabs((double)w[0] - w[1]), slack = 2 * T * 0x1p-24;
      cr_assert_leq(diff, allow + slack, "e %g trial %d: differ by %.3g, allowance %.3g", e, trial,
                    diff, allow);
      worst = fmax(worst, diff / (allow + slack));
    }
    if (e >= 1e-3) /* below, float32 rounding is all the difference */
      cr_assert_gt(worst, 0.05, "e %g: the allowance is not uselessly loose (worst use %.3f)", e,
                   worst);
  }
}

/* ---- check: a one-rank fp32 SGD runner against the reference of each policy ------------------ */

typedef struct runner {
  hap_graph *g;
  hap_cluster *c;
  hap_plan *plan;
  hap_lowered *lw;
  hap_comm comm;
  hap_run *run;
} runner;

static void runner_start(runner *r, const char *model, double lr) {
  memset(r, 0, sizeof *r);
  hap_err e = {0};
  cr_assert_eq(hap_model_load(model, &r->g, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_cluster_open("paper-homo:gpus_per_host=1,hosts=1", &r->c, &e), HAP_OK, "%s",
               e.msg);
  hap_synth_options so = {0};
  hap_synth_stats stats;
  cr_assert_eq(hap_synthesize(r->g, r->c, &so, &r->plan, &stats, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_lower(r->plan, r->g, &r->lw, &e), HAP_OK, "%s", e.msg);
  r->comm = hap_loopback_comm();
  hap_run_options o = {.seed = 1, .lr = lr, .speed = 1};
  cr_assert_eq(hap_run_create(r->lw, r->g, &r->comm, &o, &r->run, &e), HAP_OK, "%s", e.msg);
}

static void runner_stop(runner *r) {
  hap_run_destroy(r->run);
  hap_lowered_destroy(r->lw);
  hap_plan_destroy(r->plan);
  hap_cluster_destroy(r->c);
  hap_graph_destroy(r->g);
}

/* Two iterations of the fp32 SGD runner checked against policy `text`; the result. */
static hap_check_result check_against(const char *model, const char *text) {
  const double lr = 1e-3;
  runner r;
  runner_start(&r, model, lr);
  hap_train_policy p = policy(text);
  hap_checker *ck = NULL;
  hap_err e = {0};
  cr_assert_eq(hap_checker_create(r.g, &r.comm, 1, lr, &p, &ck, &e), HAP_OK, "%s", e.msg);
  hap_check_tolerances tol = hap_checker_tolerances(ck), want = hap_check_tolerances_for(&p);
  hap_check_result res;
  memset(&res, 0, sizeof res);
  cr_assert(same_tolerances(&tol, &want));
  bool passed = true;
  for (int it = 0; it < HAP_CHECK_MIN_ITERATIONS && passed; it++) {
    cr_assert_eq(hap_run_iteration(r.run, NULL, NULL, &e), HAP_OK, "%s", e.msg);
    cr_assert_eq(hap_checker_compare(ck, r.run, &res, &e), HAP_OK, "%s", e.msg);
    passed = res.passed;
  }
  if (getenv("HAP_TEST_VERBOSE"))
    fprintf(stderr,
            "%s vs %s: %s after %d: loss %.2e grad %.2e param %.2e, %d failures, first: %s\n",
            model, text, res.passed ? "passed" : "failed", res.iterations, res.loss_err,
            res.grad_err, res.param_err, res.n_failures, res.n_failures ? res.failures[0] : "-");
  hap_checker_destroy(ck);
  runner_stop(&r);
  return res;
}

static bool any_failure(const hap_check_result *res, const char *needle) {
  int shown = res->n_failures < HAP_CHECK_MAX_REPORTED ? res->n_failures : HAP_CHECK_MAX_REPORTED;
  for (int i = 0; i < shown; i++)
    if (strstr(res->failures[i], needle))
      return true;
  return false;
}

#define MLP "mlp:layers=2,batch=8,seq=4,hidden=16"

Test(check_policy, the_default_runner_passes_the_default_check) {
  hap_check_result res = check_against(MLP, "precision=fp32");
  cr_assert(res.passed, "%d failures: %s", res.n_failures, res.failures[0]);
  cr_assert_eq(res.iterations, 2);
  cr_assert_eq(res.steps, 2);
  cr_assert_eq(res.n_skipped, 0);
  cr_assert(res.loss_err <= HAP_CHECK_LOSS_TOL && res.grad_err <= HAP_CHECK_GRAD_TOL &&
            res.param_err <= HAP_CHECK_PARAM_TOL);
}

Test(check_policy, an_sgd_runner_fails_the_adam_check) {
  hap_check_result res = check_against(MLP, "optimizer=adam");
  cr_assert_not(res.passed);
  cr_assert_eq(res.iterations, 1, "the first update already differs");
  cr_assert(any_failure(&res, "value of '"), "%s", res.failures[0]);
}

/* Momentum's first step is SGD's (its buffer starts as the gradient), its second is not: the
 * reference follows the run's values after iteration 1 (check.h), yet iteration 2's update from
 * them still differs and fails. */
Test(check_policy, an_sgd_runner_fails_the_momentum_check_at_step_2) {
  hap_check_result res = check_against(MLP, "optimizer=momentum");
  cr_assert_not(res.passed);
  cr_assert_eq(res.iterations, 2, "step 1 is SGD's: %s", res.failures[0]);
  cr_assert(any_failure(&res, "value of '"), "%s", res.failures[0]);
  cr_assert_not(any_failure(&res, "gradient of '"), "gradients from the same values: %s",
                res.failures[0]);
}

/* The loss and the gradients of an fp32 run are within bf16's tolerances of the bf16 reference:
 * the gradients' storage is what tells them apart. */
Test(check_policy, an_fp32_runner_fails_the_bf16_check) {
  hap_check_result res = check_against(MLP, "precision=bf16");
  cr_assert_not(res.passed);
  cr_assert(any_failure(&res, "not a bfloat16 value (grad_accum=half"), "%s", res.failures[0]);
  cr_assert_leq(res.loss_err, HAP_CHECK_BF16_LOSS_TOL);
}

/* fp16: the reference skips its first step (S = 2^16 overflows the summed loss's gradient), so
 * its gradients are not compared, but the runner's moved values are. */
Test(check_policy, an_fp32_runner_fails_the_fp16_check_on_the_skipped_step) {
  hap_check_result res = check_against(MLP, "precision=fp16");
  cr_assert_not(res.passed);
  cr_assert_eq(res.iterations, 1);
  cr_assert_eq(res.n_skipped, 1);
  cr_assert_eq(res.steps, 0);
  cr_assert(any_failure(&res, "value of '"), "%s", res.failures[0]);
  cr_assert_not(any_failure(&res, "gradient of '"), "gradients of a skipped step: %s",
                res.failures[0]);
}
