/* kernel_times.c — per-op kernel timings (kernel_times.h). */
#include "profile/kernel_times.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "cluster/cluster.h"
#include "cluster/kernel_model.h"
#include "exec/clock.h"
#include "exec/emulate.h"
#include "kernels/kernels.h"
#include "plan/lower.h"
#include "store/fit.h"

void hap_kcase_fix(hap_kcase *kc) { kc->io.attrs = &kc->attrs; }

/* ---- case lists ------------------------------------------------------------------------------ */

typedef struct klist {
  hap_kcase *v;
  int32_t n, cap;
} klist;

static bool same_shapes(const hap_kcase *a, const hap_kcase *b) {
  return a->op == b->op && hap_kernel_shape_key(&a->io) == hap_kernel_shape_key(&b->io);
}

/* Append kc, merging its directions into an existing case of the same op and shapes whose
 * backward (if both have one) keys alike (hap_kernel_key: the same gradients left out). A case
 * added for another backward of the same shapes leaves the forward to the first. */
static hap_status klist_add(klist *l, const hap_kcase *kc, hap_err *err) {
  bool fwd_listed = false; /* the forward of these shapes is timed already */
  for (int32_t i = 0; i < l->n; i++)
    fwd_listed = fwd_listed || (same_shapes(&l->v[i], kc) && l->v[i].fwd);
  for (int32_t i = 0; i < l->n; i++) {
    if (!same_shapes(&l->v[i], kc))
      continue;
    if (!kc->bwd || !l->v[i].bwd ||
        hap_kernel_key(&l->v[i].io, true) == hap_kernel_key(&kc->io, true)) {
      hap_kcase *x = &l->v[i];
      x->fwd = x->fwd || (kc->fwd && !fwd_listed);
      if (kc->bwd && !x->bwd) {
        x->bwd = true;
        memcpy(x->io.in_grad, kc->io.in_grad, sizeof x->io.in_grad);
      }
      return HAP_OK;
    }
  }
  if (l->n == l->cap) {
    if (HAP_VEC_RESERVE(l->v, l->cap, (int64_t)l->n + 1, 32) != 0)
      return hap_err_set(err, HAP_ENOMEM, "kernel timings: out of memory listing cases");
    for (int32_t i = 0; i < l->n; i++)
      hap_kcase_fix(&l->v[i]);
  }
  l->v[l->n] = *kc;
  hap_kcase_fix(&l->v[l->n]);
  l->v[l->n].fwd = kc->fwd && !fwd_listed;
  l->n++;
  return HAP_OK;
}

hap_status hap_kcases_default(bool quick, hap_kcase **out, int32_t *n, hap_err *err) {
  *out = NULL;
  *n = 0;
  klist l = {0};
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < hap_kernel_grid_count(quick) && st == HAP_OK; i++) {
    hap_kgrid_case g;
    st = hap_kernel_grid_case(quick, i, &g, err);
    if (st != HAP_OK)
      break;
    hap_kcase kc;
    memset(&kc, 0, sizeof kc);
    kc.op = g.op;
    kc.attrs = g.attrs;
    kc.io = g.io;
    hap_kcase_fix(&kc);
    kc.fwd = true;
    kc.bwd = true;
    st = klist_add(&l, &kc, err);
  }
  if (st != HAP_OK) {
    free(l.v);
    return st;
  }
  *out = l.v;
  *n = l.n;
  return HAP_OK;
}

hap_status hap_kcase_of_task(hap_lowered *lw, int32_t t, int32_t dev, hap_kcase *kc, hap_err *err) {
  memset(kc, 0, sizeof *kc);
  hap_task_work *w = malloc(sizeof *w);
  if (w == NULL)
    return hap_err_set(err, HAP_ENOMEM, "kernel timings: out of memory");
  hap_status st = hap_lowered_work(lw, t, dev, w, err);
  if (st == HAP_OK) {
    kc->op = w->op;
    kc->attrs = w->attrs;
    kc->io = w->io;
    hap_kcase_fix(kc);
    kc->fwd = !w->backward;
    kc->bwd = w->backward;
    if (!w->backward)
      memset(kc->io.in_grad, 0, sizeof kc->io.in_grad);
  }
  free(w);
  return st;
}

hap_status hap_kcases_from_plan(const hap_plan *p, const hap_graph *g, int32_t dev, hap_kcase **out,
                                int32_t *n, hap_err *err) {
  *out = NULL;
  *n = 0;
  hap_lowered *lw = NULL;
  HAP_TRY(hap_lower(p, g, &lw, err));
  if (dev < 0 || dev >= lw->n_devices) {
    int32_t nd = lw->n_devices;
    hap_lowered_destroy(lw);
    return hap_err_set(err, HAP_EINVAL, "kernel timings: device %d, the plan has %d devices", dev,
                       nd);
  }
  klist l = {0};
  hap_status st = HAP_OK;
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK; t++) {
    if (lw->tasks[t].kind != HAP_TASK_COMPUTE)
      continue;
    hap_kcase kc;
    st = hap_kcase_of_task(lw, t, dev, &kc, err);
    if (st == HAP_OK)
      st = klist_add(&l, &kc, err);
  }
  hap_lowered_destroy(lw);
  if (st != HAP_OK) {
    free(l.v);
    return st;
  }
  *out = l.v;
  *n = l.n;
  return HAP_OK;
}

/* ---- timing ---------------------------------------------------------------------------------- */

/* Deterministic floats in [-1, 1) (a 64-bit LCG, top bits). */
static void fill_floats(float *x, int64_t n, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((double)(s >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
  }
}

/* The exclusive upper bound of index input i: embedding rows, loss classes; else 1. */
static int64_t index_bound(const hap_kcase *kc, int32_t i) {
  const hap_op_io *io = &kc->io;
  if (kc->op == HAP_OP_EMBEDDING && i == 0 && io->n_in > 1 && io->in[1].rank >= 1)
    return io->in[1].dims[0];
  if ((kc->op == HAP_OP_NLL_LOSS || kc->op == HAP_OP_CROSS_ENTROPY) && i == 1 &&
      io->in[0].rank >= 2)
    return io->in[0].dims[1];
  return 1;
}

static int64_t numel_of(const hap_shape *s) {
  int64_t n = 1;
  for (int32_t d = 0; d < s->rank; d++)
    n *= s->dims[d];
  return n;
}

typedef struct kbufs {
  void *in[HAP_MAX_OP_INPUTS], *out[HAP_MAX_OP_OUTPUTS];
  float *dout[HAP_MAX_OP_OUTPUTS], *din[HAP_MAX_OP_INPUTS];
  size_t din_bytes[HAP_MAX_OP_INPUTS];
} kbufs;

static void kbufs_free(kbufs *b) {
  for (int i = 0; i < HAP_MAX_OP_INPUTS; i++) {
    free(b->in[i]);
    free(b->din[i]);
  }
  for (int i = 0; i < HAP_MAX_OP_OUTPUTS; i++) {
    free(b->out[i]);
    free(b->dout[i]);
  }
}

static void *alloc_bytes(int64_t n, int sz) { return calloc((size_t)(n > 0 ? n : 1), (size_t)sz); }

static hap_status kbufs_make(const hap_kcase *kc, kbufs *b, hap_err *err) {
  memset(b, 0, sizeof *b);
  const hap_op_io *io = &kc->io;
  bool ok = true;
  for (int32_t i = 0; i < io->n_in && ok; i++) {
    int64_t n = numel_of(&io->in[i]);
    hap_dtype dt = io->in_dtype[i];
    b->in[i] = alloc_bytes(n, hap_dtype_size(dt));
    ok = b->in[i] != NULL;
    if (ok && dt == HAP_F32)
      fill_floats(b->in[i], n, (uint64_t)i + 1);
    if (ok && (dt == HAP_I64 || dt == HAP_I32)) {
      int64_t hi = index_bound(kc, i);
      for (int64_t e = 0; e < n; e++) {
        int64_t v = (e * 7919) % hi;
        if (dt == HAP_I64)
          ((int64_t *)b->in[i])[e] = v;
        else
          ((int32_t *)b->in[i])[e] = (int32_t)v;
      }
    }
    if (ok && kc->bwd && io->in_grad[i]) {
      b->din_bytes[i] = (size_t)(n > 0 ? n : 1) * sizeof(float);
      b->din[i] = alloc_bytes(n, (int)sizeof(float));
      ok = b->din[i] != NULL;
    }
  }
  for (int32_t o = 0; o < io->n_out && ok; o++) {
    int64_t n = numel_of(&io->out[o]);
    b->out[o] = alloc_bytes(n, hap_dtype_size(io->out_dtype[o]));
    ok = b->out[o] != NULL;
    if (ok && kc->bwd && io->out_dtype[o] == HAP_F32) {
      b->dout[o] = alloc_bytes(n, (int)sizeof(float));
      ok = b->dout[o] != NULL;
      if (ok)
        fill_floats(b->dout[o], n, 100 + (uint64_t)o);
    }
  }
  if (!ok) {
    kbufs_free(b);
    return hap_err_set(err, HAP_ENOMEM, "kernel timings: %s: out of memory for the buffers",
                       hap_op_name(kc->op));
  }
  return HAP_OK;
}

hap_status hap_kcase_row(const hap_kcase *kc, bool backward, const double *t, int32_t reps,
                         hap_profile_kernel *row, hap_err *err) {
  memset(row, 0, sizeof *row);
  row->op = kc->op;
  row->backward = backward;
  row->shape_key = hap_kernel_key(&kc->io, backward);
  row->reps = reps;
  size_t at = 0;
  for (int32_t i = 0; i < kc->io.n_in && at < sizeof row->shape; i++) {
    char s[96];
    int w = snprintf(row->shape + at, sizeof row->shape - at, "%s%s", i > 0 ? " x " : "",
                     hap_shape_str(&kc->io.in[i], s, sizeof s));
    if (w < 0)
      break;
    at += (size_t)w;
  }
  hap_dtype format = hap_io_compute_dtype(&kc->io);
  if ((format == HAP_F16 || format == HAP_BF16) && at < sizeof row->shape)
    snprintf(row->shape + at, sizeof row->shape - at, " in %s", hap_dtype_name(format));
  if (hap_p50_p95(t, reps, &row->p50_s, &row->p95_s) != HAP_OK)
    return hap_err_set(err, HAP_ENOMEM, "kernel timings: out of memory for percentiles");
  return HAP_OK;
}

hap_status hap_kcase_time(const hap_kcase *kc, int32_t reps, int32_t warmup, double speed,
                          hap_profile_kernel rows[2], int32_t *n_rows, hap_err *err) {
  *n_rows = 0;
  if (reps < 1 || warmup < 0 || !(speed > 0 && speed <= 1))
    return hap_err_set(err, HAP_EINVAL,
                       "kernel timings: reps %d, warmup %d, speed %g: expected >= 1, >= 0, (0, 1]",
                       reps, warmup, speed);
  bool any_grad = false;
  for (int32_t i = 0; i < kc->io.n_in; i++)
    any_grad |= kc->io.in_grad[i];
  kbufs b;
  HAP_TRY(kbufs_make(kc, &b, err));
  double *t = malloc((size_t)reps * sizeof *t);
  hap_status st = t ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "kernel timings: out of memory");
  hap_kernel_state state = {0};
  hap_kernel_call call = {.op = kc->op,
                          .io = &kc->io,
                          .shard = NULL,
                          .seed = 1,
                          .in = (const void *const *)b.in,
                          .out = (const void *const *)b.out};
  /* Forward: always run (backward needs its outputs and state); timed when asked. */
  for (int32_t k = 0; k < warmup + reps && st == HAP_OK; k++) {
    double t0 = hap_clock_s();
    st = hap_kernel_forward(&call, b.out, &state, err);
    double dt = hap_clock_s() - t0;
    if (k >= warmup)
      t[k - warmup] = dt + hap_emulate_pad_s(dt, speed);
    if (!kc->fwd && k >= warmup)
      break; /* one run for backward's inputs is enough */
  }
  if (st == HAP_OK && kc->fwd)
    st = hap_kcase_row(kc, false, t, reps, &rows[(*n_rows)++], err);
  if (kc->bwd && any_grad) {
    for (int32_t k = 0; k < warmup + reps && st == HAP_OK; k++) {
      /* every input gradient fresh, as the executor passes a gradient buffer to its first
       * writer in an iteration (hap_kernel_call.fresh_din): the kernel stores into it, or, for
       * an op that only adds, hap_kernel_backward zeroes it first, inside the timing */
      call.fresh_din = 0;
      for (int32_t i = 0; i < kc->io.n_in; i++)
        call.fresh_din |= b.din[i] != NULL ? 1u << i : 0u;
      double t0 = hap_clock_s();
      st = hap_kernel_backward(&call, (const float *const *)b.dout, b.din, &state, err);
      double dt = hap_clock_s() - t0;
      if (k >= warmup)
        t[k - warmup] = dt + hap_emulate_pad_s(dt, speed);
    }
    if (st == HAP_OK)
      st = hap_kcase_row(kc, true, t, reps, &rows[(*n_rows)++], err);
  }
  hap_kernel_state_free(&state);
  free(t);
  kbufs_free(&b);
  if (st != HAP_OK)
    *n_rows = 0;
  return st;
}
