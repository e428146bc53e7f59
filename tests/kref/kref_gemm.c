/* kref_gemm.c — float64 reference of linear, matmul / bmm, einsum and conv2d: the defining sums,
 * one output element at a time (docs/ops.md). */
#include <string.h>

#include "kref_internal.h"

/* ---- linear: y [m, n] = sum_k x [m, k] W [n, k] + b [n], m = every leading dim of x ---------- */

hap_status kr_linear(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_op_io *io = c->io;
  const hap_shape *xs = &io->in[0];
  const double *x = kr_x(c, 0), *w = kr_x(c, 1), *b = io->n_in > 2 ? kr_x(c, 2) : NULL;
  int64_t k = xs->dims[xs->rank - 1], n = io->in[1].dims[0], m = 1;
  for (int d = 0; d < xs->rank - 1; d++)
    m *= xs->dims[d];
  double *y = c->out[0];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = b != NULL ? b[j] : 0;
      for (int64_t t = 0; t < k; t++)
        s += x[i * k + t] * w[j * k + t];
      y[i * n + j] = s;
    }
  return HAP_OK;
}

/* ---- matmul, bmm: y [batch.., M, N] = a [.., M, K] b [.., K, N], batch dims broadcast -------- */

/* Offset (elements) of operand s's matrix for output batch index bi (rank nb). */
static int64_t matrix_at(const hap_shape *s, const int64_t *bi, int nb) {
  hap_shape batch = *s;
  batch.rank -= 2;
  return kr_bcast_at(&batch, bi, nb) * s->dims[s->rank - 2] * s->dims[s->rank - 1];
}

hap_status kr_matmul(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_op_io *io = c->io;
  const hap_shape *as = &io->in[0], *bs = &io->in[1], *ys = &io->out[0];
  int64_t k = as->dims[as->rank - 1], n = bs->dims[bs->rank - 1]; /* a [.., M, K], b [.., K, N] */
  const double *a = kr_x(c, 0), *b = kr_x(c, 1);
  double *y = c->out[0];
  int64_t idx[HAP_MAX_DIMS];
  for (int64_t f = 0; f < kr_numel(ys); f++) {
    kr_unravel(ys, f, idx);
    int nb = ys->rank - 2;
    int64_t i = idx[nb], j = idx[nb + 1];
    const double *am = a + matrix_at(as, idx, nb), *bm = b + matrix_at(bs, idx, nb);
    double s = 0;
    for (int64_t t = 0; t < k; t++)
      s += am[i * k + t] * bm[t * n + j];
    y[f] = s;
  }
  return HAP_OK;
}

/* ---- einsum: y[out letters] = sum over every other letter of a[a letters] b[b letters] ------- */

typedef struct kr_eq {
  char part[3][HAP_MAX_DIMS + 1]; /* a, b, output letters */
} kr_eq;

static hap_status read_equation(const char *eq, kr_eq *e, hap_err *err) {
  memset(e, 0, sizeof *e);
  int part = 0, n = 0;
  for (const char *p = eq; *p != '\0'; p++) {
    if (*p >= 'a' && *p <= 'z' && n < HAP_MAX_DIMS) {
      e->part[part][n++] = *p;
    } else if (*p == ',' && part == 0) {
      part = 1;
      n = 0;
    } else if (*p == '-' && p[1] == '>' && part == 1) {
      part = 2;
      n = 0;
      p++;
    } else {
      return hap_err_set(err, HAP_EINVAL, "kref einsum: cannot read equation '%s'", eq);
    }
  }
  if (part != 2)
    return hap_err_set(err, HAP_EINVAL, "kref einsum: equation '%s' has no '->'", eq);
  return HAP_OK;
}

/* Flat position in a tensor of shape s with letters `letters`, at the letter values val. */
static int64_t letters_at(const char *letters, const hap_shape *s, const int64_t *val) {
  int64_t f = 0;
  for (int d = 0; letters[d] != '\0'; d++)
    f = f * s->dims[d] + val[letters[d] - 'a'];
  return f;
}

hap_status kr_einsum(const kr_call *c, hap_err *err) {
  const hap_op_io *io = c->io;
  kr_eq e;
  HAP_TRY(read_equation(kr_attr_s(c, "equation"), &e, err));
  const hap_shape *sh[3] = {&io->in[0], &io->in[1], &io->out[0]};
  int64_t ext[26] = {0}, val[26] = {0};
  char used[27] = {0}; /* every distinct letter, in order of first appearance */
  int n_used = 0;
  for (int t = 0; t < 3; t++) {
    if ((int)strlen(e.part[t]) != sh[t]->rank)
      return hap_err_set(err, HAP_EINVAL, "kref einsum: operand %d has %zu letters, rank %d", t,
                         strlen(e.part[t]), sh[t]->rank);
    for (int d = 0; e.part[t][d] != '\0'; d++) {
      int l = e.part[t][d] - 'a';
      if (ext[l] == 0)
        used[n_used++] = e.part[t][d];
      ext[l] = sh[t]->dims[d];
    }
  }
  double *y = c->out[0];
  const double *a = kr_x(c, 0), *b = kr_x(c, 1);
  memset(y, 0, (size_t)kr_numel(sh[2]) * sizeof(double));
  int64_t total = 1;
  for (int u = 0; u < n_used; u++)
    total *= ext[used[u] - 'a'];
  for (int64_t f = 0; f < total; f++) { /* every assignment of every letter */
    int64_t r = f;
    for (int u = n_used - 1; u >= 0; u--) {
      int l = used[u] - 'a';
      val[l] = r % ext[l];
      r /= ext[l];
    }
    y[letters_at(e.part[2], sh[2], val)] +=
        a[letters_at(e.part[0], sh[0], val)] * b[letters_at(e.part[1], sh[1], val)];
  }
  return HAP_OK;
}

/* ---- conv2d: y [n, o, oy, ox] = b[o] + sum x [n, c, oy s + i - p, ox s + j - p] w [o, c, i, j],
 * zero outside x ------------------------------------------------------------------------------ */

hap_status kr_conv2d(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_op_io *io = c->io;
  const hap_shape *xs = &io->in[0], *ws = &io->in[1], *ys = &io->out[0];
  int64_t nb = xs->dims[0], ch = xs->dims[1], h = xs->dims[2], wd = xs->dims[3];
  int64_t no = ws->dims[0], kh = ws->dims[2], kw = ws->dims[3], ho = ys->dims[2], wo = ys->dims[3];
  int64_t stride = kr_attr_i(c, "stride"), pad = kr_attr_i(c, "padding");
  const double *x = kr_x(c, 0), *w = kr_x(c, 1), *b = io->n_in > 2 ? kr_x(c, 2) : NULL;
  double *y = c->out[0];
  for (int64_t n = 0; n < nb; n++)
    for (int64_t o = 0; o < no; o++)
      for (int64_t oy = 0; oy < ho; oy++)
        for (int64_t ox = 0; ox < wo; ox++) {
          double s = b != NULL ? b[o] : 0;
          for (int64_t ci = 0; ci < ch; ci++)
            for (int64_t i = 0; i < kh; i++)
              for (int64_t j = 0; j < kw; j++) {
                int64_t iy = oy * stride + i - pad, jx = ox * stride + j - pad;
                if (iy >= 0 && iy < h && jx >= 0 && jx < wd)
                  s += x[((n * ch + ci) * h + iy) * wd + jx] * w[((o * ch + ci) * kh + i) * kw + j];
              }
          y[((n * no + o) * ho + oy) * wo + ox] = s;
        }
  return HAP_OK;
}
