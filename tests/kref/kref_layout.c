/* kref_layout.c — float64 reference of the layout ops: reshape and flatten (the same elements in
 * the same order), transpose, permute, narrow, cls_append and cls_select (docs/ops.md). */
#include <string.h>

#include "kref_internal.h"

/* The input index that output index oidx reads. */
static void source_index(const kr_call *c, const int64_t *oidx, int64_t *idx) {
  const hap_shape *xs = &c->io->in[0];
  int r = xs->rank;
  switch (c->op) {
  case HAP_OP_TRANSPOSE: {
    int a = kr_dim(kr_attr_i(c, "dim0"), r), b = kr_dim(kr_attr_i(c, "dim1"), r);
    memcpy(idx, oidx, (size_t)r * sizeof(int64_t));
    idx[a] = oidx[b];
    idx[b] = oidx[a];
    break;
  }
  case HAP_OP_PERMUTE: { /* output dim i is input dim dims[i] */
    const hap_attr_value *perm = kr_attr(c, "dims");
    for (int i = 0; i < r; i++)
      idx[kr_dim(perm->u.ints.v[i], r)] = oidx[i];
    break;
  }
  case HAP_OP_NARROW:
    memcpy(idx, oidx, (size_t)r * sizeof(int64_t));
    idx[kr_dim(kr_attr_i(c, "dim"), r)] += kr_attr_i(c, "start");
    break;
  default: /* cls_select: [N, S, H] -> [N, H] at position S - 1 */
    idx[0] = oidx[0];
    idx[1] = xs->dims[1] - 1;
    idx[2] = oidx[1];
    break;
  }
}

hap_status kr_layout(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_shape *xs = &c->io->in[0], *ys = &c->io->out[0];
  const double *x = kr_x(c, 0);
  double *y = c->out[0];
  int64_t n = kr_numel(ys);
  if (c->op == HAP_OP_RESHAPE || c->op == HAP_OP_FLATTEN) {
    for (int64_t f = 0; f < n; f++)
      y[f] = x[f];
    return HAP_OK;
  }
  int64_t oidx[HAP_MAX_DIMS], idx[HAP_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    kr_unravel(ys, f, oidx);
    source_index(c, oidx, idx);
    y[f] = x[kr_ravel(xs, idx)];
  }
  return HAP_OK;
}

/* cls_append: y [N, S + 1, H]: positions 0..S-1 from x [N, S, H], position S the token [1, 1, H].
 */
hap_status kr_cls_append(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_shape *xs = &c->io->in[0];
  int64_t nb = xs->dims[0], s = xs->dims[1], h = xs->dims[2];
  const double *x = kr_x(c, 0), *cls = kr_x(c, 1);
  double *y = c->out[0];
  int64_t first = kr_attr_i(c, "first") != 0; /* the token's row: 0, else s */
  for (int64_t b = 0; b < nb; b++)
    for (int64_t i = 0; i <= s; i++)
      for (int64_t j = 0; j < h; j++)
        y[(b * (s + 1) + i) * h + j] =
            i == (first ? 0 : s) ? cls[j] : x[(b * s + i - first) * h + j];
  return HAP_OK;
}
