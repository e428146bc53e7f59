/* test_sharding.c — sharding variants. The core is a numerical soundness check: a reference
 * evaluator (plain loops, double precision) runs every op on every device's local inputs for every
 * variant and several uneven ratio vectors (zero shares included), and the outputs combined by
 * their layouts must equal the op on the full inputs. Also: local shapes, shard lengths, variant
 * counts, and every node of the zoo. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/graph.h"
#include "model/sharding.h"
#include "model/zoo.h"

#define NARGS_(...) ((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SHAPE(...)  ((hap_shape){.rank = NARGS_(__VA_ARGS__), .dims = {__VA_ARGS__}})
#define SCALAR      ((hap_shape){.rank = 0})
#define LI          HAP_LAYOUT_IDENTITY
#define LR          HAP_LAYOUT_REDUCE

/* ---- dense tensors and multi-indices --------------------------------------------------------- */

typedef struct tens {
  hap_shape s;
  int64_t n;
  double *v;
} tens;

static int64_t numel(const hap_shape *s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++)
    n *= s->dims[d];
  return n;
}

static void t_alloc(tens *t, const hap_shape *s) {
  t->s = *s;
  t->n = numel(s);
  t->v = calloc((size_t)(t->n ? t->n : 1), sizeof(double));
  if (t->v == NULL)
    abort();
}

static void t_free(tens *t) {
  free(t->v);
  t->v = NULL;
}

static void unravel(const hap_shape *s, int64_t flat, int64_t *idx) {
  for (int d = s->rank - 1; d >= 0; d--) {
    idx[d] = flat % s->dims[d];
    flat /= s->dims[d];
  }
}

static int64_t ravel(const hap_shape *s, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < s->rank; d++)
    f = f * s->dims[d] + idx[d];
  return f;
}

/* Index of x (broadcast against out, aligned right) for an output multi-index. */
static int64_t bcast_at(const hap_shape *x, const hap_shape *out, const int64_t *oidx) {
  int64_t idx[HAP_MAX_DIMS] = {0};
  for (int d = 0; d < x->rank; d++) {
    int od = d + out->rank - x->rank;
    idx[d] = x->dims[d] == 1 ? 0 : oidx[od];
  }
  return ravel(x, idx);
}

/* ---- random numbers ----------------------------------------------------------------------------
 */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_u64(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717ULL;
}

static double uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(next_u64() >> 11) / 9007199254740992.0;
}

/* ---- the reference evaluator --------------------------------------------------------------------
 */

/* Who runs the op: the full op (rank -1), or device `rank` holding [off, off + len) of the index
 * variant v shards. */
typedef struct dev {
  int rank;
  int64_t off, len;
  const hap_variant *v;
  const hap_op_io *full;
} dev;

static bool flag(const dev *c, unsigned f) { return c->rank >= 0 && (c->v->flags & f); }

static int64_t ai(const hap_op_io *io, hap_op op, const char *name) {
  return hap_attr_i(io->attrs, hap_op_attr_index(op, name));
}
static double af(const hap_op_io *io, hap_op op, const char *name) {
  return hap_attr_f(io->attrs, hap_op_attr_index(op, name));
}
static const hap_attr_value *av(const hap_op_io *io, hap_op op, const char *name) {
  return &io->attrs->v[hap_op_attr_index(op, name)];
}
static int ndim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }

static void ev_linear(const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *x = &io->in[0];
  int64_t k = x->dims[x->rank - 1], n = io->in[1].dims[0], m = 1;
  for (int d = 0; d < x->rank - 1; d++)
    m *= x->dims[d];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = io->n_in > 2 ? in[2].v[j] : 0;
      for (int64_t q = 0; q < k; q++)
        s += in[0].v[i * k + q] * in[1].v[j * k + q];
      out->v[i * n + j] = s;
    }
}

static void ev_matmul(const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *a = &io->in[0], *b = &io->in[1], *o = &io->out[0];
  int64_t k = a->dims[a->rank - 1];
  hap_shape ab = *a, bb = *b, ob = *o;
  ab.rank -= 2;
  bb.rank -= 2;
  ob.rank -= 2;
  for (int64_t f = 0; f < out->n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0};
    unravel(o, f, idx);
    int64_t m = idx[o->rank - 2], n = idx[o->rank - 1];
    int64_t ba = bcast_at(&ab, &ob, idx), bbi = bcast_at(&bb, &ob, idx);
    int64_t mm = a->dims[a->rank - 2], nn = b->dims[b->rank - 1];
    double s = 0;
    for (int64_t q = 0; q < k; q++)
      s += in[0].v[(ba * mm + m) * k + q] * in[1].v[(bbi * k + q) * nn + n];
    out->v[f] = s;
  }
}

static void ev_einsum(const hap_op_io *io, const tens *in, tens *out) {
  const char *eq = hap_attr_s(io->attrs, hap_op_attr_index(HAP_OP_EINSUM, "equation"));
  char ix[3][HAP_MAX_DIMS + 1] = {{0}};
  int part = 0, n = 0;
  for (const char *p = eq; *p; p++) {
    if (*p >= 'a' && *p <= 'z')
      ix[part][n++] = *p;
    else if (*p == ',' || *p == '>') {
      part++;
      n = 0;
    }
  }
  int64_t ext[26] = {0};
  bool used[26] = {false};
  for (int k = 0; k < 2; k++)
    for (int d = 0; ix[k][d]; d++) {
      ext[ix[k][d] - 'a'] = io->in[k].dims[d];
      used[ix[k][d] - 'a'] = true;
    }
  char letters[26];
  int nl = 0;
  for (int c = 0; c < 26; c++)
    if (used[c])
      letters[nl++] = (char)('a' + c);
  int64_t total = 1;
  for (int i = 0; i < nl; i++)
    total *= ext[letters[i] - 'a'];
  for (int64_t f = 0; f < total; f++) {
    int64_t val[26] = {0}, rest = f;
    for (int i = nl - 1; i >= 0; i--) {
      int64_t e = ext[letters[i] - 'a'];
      val[letters[i] - 'a'] = rest % e;
      rest /= e;
    }
    int64_t pos[3];
    const hap_shape *shapes[3] = {&io->in[0], &io->in[1], &io->out[0]};
    for (int k = 0; k < 3; k++) {
      int64_t idx[HAP_MAX_DIMS] = {0};
      for (int d = 0; ix[k][d]; d++)
        idx[d] = val[ix[k][d] - 'a'];
      pos[k] = ravel(shapes[k], idx);
    }
    out->v[pos[2]] += in[0].v[pos[0]] * in[1].v[pos[1]];
  }
}

static void ev_conv2d(const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *x = &io->in[0], *w = &io->in[1], *o = &io->out[0];
  int64_t st = ai(io, HAP_OP_CONV2D, "stride"), pad = ai(io, HAP_OP_CONV2D, "padding");
  for (int64_t f = 0; f < out->n; f++) {
    int64_t y[4] = {0};
    unravel(o, f, y);
    double s = io->n_in > 2 ? in[2].v[y[1]] : 0;
    for (int64_t c = 0; c < x->dims[1]; c++)
      for (int64_t ki = 0; ki < w->dims[2]; ki++)
        for (int64_t kj = 0; kj < w->dims[3]; kj++) {
          int64_t hi = y[2] * st + ki - pad, wj = y[3] * st + kj - pad;
          if (hi < 0 || hi >= x->dims[2] || wj < 0 || wj >= x->dims[3])
            continue;
          s += in[0].v[ravel(x, (int64_t[]){y[0], c, hi, wj})] *
               in[1].v[ravel(w, (int64_t[]){y[1], c, ki, kj})];
        }
    out->v[f] = s;
  }
}

static void ev_max_pool2d(const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *x = &io->in[0], *o = &io->out[0];
  int64_t k = ai(io, HAP_OP_MAX_POOL2D, "kernel"), st = ai(io, HAP_OP_MAX_POOL2D, "stride");
  int64_t pad = ai(io, HAP_OP_MAX_POOL2D, "padding");
  if (st == 0)
    st = k;
  for (int64_t f = 0; f < out->n; f++) {
    int64_t y[4] = {0};
    unravel(o, f, y);
    double m = -INFINITY;
    for (int64_t ki = 0; ki < k; ki++)
      for (int64_t kj = 0; kj < k; kj++) {
        int64_t hi = y[2] * st + ki - pad, wj = y[3] * st + kj - pad;
        if (hi >= 0 && hi < x->dims[2] && wj >= 0 && wj < x->dims[3])
          m = fmax(m, in[0].v[ravel(x, (int64_t[]){y[0], y[1], hi, wj})]);
      }
    out->v[f] = m;
  }
}

static void ev_adaptive_avg_pool2d(const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *x = &io->in[0], *o = &io->out[0];
  for (int64_t f = 0; f < out->n; f++) {
    int64_t y[4] = {0};
    unravel(o, f, y);
    int64_t h0 = y[2] * x->dims[2] / o->dims[2];
    int64_t h1 = ((y[2] + 1) * x->dims[2] + o->dims[2] - 1) / o->dims[2];
    int64_t w0 = y[3] * x->dims[3] / o->dims[3];
    int64_t w1 = ((y[3] + 1) * x->dims[3] + o->dims[3] - 1) / o->dims[3];
    double s = 0;
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++)
        s += in[0].v[ravel(x, (int64_t[]){y[0], y[1], h, w})];
    out->v[f] = s / (double)((h1 - h0) * (w1 - w0));
  }
}

static void ev_embedding(const hap_op_io *io, const tens *in, tens *out, const dev *c) {
  int64_t v = io->in[1].dims[0], d = io->in[1].dims[1];
  for (int64_t i = 0; i < in[0].n; i++) {
    int64_t row = (int64_t)in[0].v[i];
    if (flag(c, HAP_VARIANT_LOCAL_ROWS))
      row -= c->off;
    for (int64_t j = 0; j < d; j++)
      out->v[i * d + j] = row >= 0 && row < v ? in[1].v[row * d + j] : 0;
  }
}

static void ev_layer_norm(const hap_op_io *io, const tens *in, tens *out) {
  int64_t nd = ai(io, HAP_OP_LAYER_NORM, "normalized_dims");
  double eps = af(io, HAP_OP_LAYER_NORM, "eps");
  int64_t inner = 1;
  for (int d = io->in[0].rank - (int)nd; d < io->in[0].rank; d++)
    inner *= io->in[0].dims[d];
  for (int64_t r = 0; r < in[0].n / inner; r++) {
    const double *x = in[0].v + r * inner;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < inner; j++)
      mean += x[j] / (double)inner;
    for (int64_t j = 0; j < inner; j++)
      var += (x[j] - mean) * (x[j] - mean) / (double)inner;
    for (int64_t j = 0; j < inner; j++) {
      double y = (x[j] - mean) / sqrt(var + eps);
      if (io->n_in > 1)
        y *= in[1].v[j];
      if (io->n_in > 2)
        y += in[2].v[j];
      out->v[r * inner + j] = y;
    }
  }
}

/* q [N,L,E], k and v [N,S,E], in_proj_weight [3,P,E], in_proj_bias [3,P], out_proj_weight [E,P],
 * out_proj_bias [E], mask [L,S]; heads from the attributes (P / heads per head). */
static void ev_mha(const hap_op_io *io, const tens *in, tens *out) {
  cr_assert_eq(af(io, HAP_OP_MULTI_HEAD_ATTENTION, "dropout"), 0.0);
  int64_t n = io->in[0].dims[0], l = io->in[0].dims[1], e = io->in[0].dims[2];
  int64_t s = io->in[1].dims[1], p = io->in[3].dims[1];
  int64_t heads = ai(io, HAP_OP_MULTI_HEAD_ATTENTION, "heads"), hd = heads ? p / heads : 0;
  double *proj[3];
  int64_t len[3] = {l, s, s};
  for (int b = 0; b < 3; b++) {
    proj[b] = calloc((size_t)(n * len[b] * p + 1), sizeof(double));
    for (int64_t i = 0; i < n * len[b]; i++)
      for (int64_t j = 0; j < p; j++) {
        double acc = in[4].v[b * p + j];
        for (int64_t q = 0; q < e; q++)
          acc += in[b].v[i * e + q] * in[3].v[(b * p + j) * e + q];
        proj[b][i * p + j] = acc;
      }
  }
  double *ctx = calloc((size_t)(n * l * p + 1), sizeof(double));
  double *w = calloc((size_t)s, sizeof(double));
  for (int64_t b = 0; b < n; b++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < l; i++) {
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < s; j++) {
          double acc = 0;
          for (int64_t q = 0; q < hd; q++)
            acc += proj[0][(b * l + i) * p + h * hd + q] * proj[1][(b * s + j) * p + h * hd + q];
          w[j] = acc / sqrt((double)hd) + (io->n_in > 7 ? in[7].v[i * s + j] : 0);
          mx = fmax(mx, w[j]);
        }
        for (int64_t j = 0; j < s; j++)
          z += (w[j] = exp(w[j] - mx));
        for (int64_t j = 0; j < s; j++)
          for (int64_t q = 0; q < hd; q++)
            ctx[(b * l + i) * p + h * hd + q] += w[j] / z * proj[2][(b * s + j) * p + h * hd + q];
      }
  for (int64_t i = 0; i < n * l; i++)
    for (int64_t j = 0; j < e; j++) {
      double acc = in[6].v[j];
      for (int64_t q = 0; q < p; q++)
        acc += ctx[i * p + q] * in[5].v[j * p + q];
      out->v[i * e + j] = acc;
    }
  free(w);
  free(ctx);
  for (int b = 0; b < 3; b++)
    free(proj[b]);
}

/* Dropout keeps an element by a hash of its global position. */
static bool keep(int64_t global, double p) {
  uint64_t h = (uint64_t)global * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 29;
  return (double)(h % 1000) >= p * 1000;
}

static int64_t global_index(const hap_op_io *io, int64_t f, const dev *c) {
  if (c->rank < 0)
    return f;
  int64_t idx[HAP_MAX_DIMS] = {0};
  unravel(&io->in[0], f, idx);
  if (c->v->in[0] >= 0)
    idx[c->v->in[0]] += c->off;
  return ravel(&c->full->in[0], idx);
}

static void ev_unary(hap_op op, const hap_op_io *io, const tens *in, tens *out, const dev *c) {
  for (int64_t f = 0; f < out->n; f++) {
    double x = in[0].v[f], y = 0;
    switch (op) {
    case HAP_OP_RELU: y = x > 0 ? x : 0; break;
    case HAP_OP_GELU: y = 0.5 * x * (1 + erf(x / sqrt(2.0))); break;
    case HAP_OP_SIGMOID: y = 1 / (1 + exp(-x)); break;
    case HAP_OP_TANH: y = tanh(x); break;
    case HAP_OP_RSQRT: y = 1 / sqrt(x); break;
    case HAP_OP_POW: y = pow(x, af(io, op, "exponent")); break;
    default: { /* dropout */
      double p = af(io, op, "p");
      cr_assert(c->rank < 0 || p == 0 || (c->v->flags & HAP_VARIANT_GLOBAL_MASK));
      y = keep(global_index(io, f, c), p) ? x / (1 - p) : 0;
    }
    }
    out->v[f] = y;
  }
}

static void ev_binary(hap_op op, const hap_op_io *io, const tens *in, tens *out, const dev *c) {
  const hap_shape *o = &io->out[0];
  double scalar = af(io, op, "scalar");
  if (io->n_in == 1 && (op == HAP_OP_ADD || op == HAP_OP_SUB) && flag(c, HAP_VARIANT_BIAS_ONCE) &&
      c->rank != 0)
    scalar = 0;
  for (int64_t f = 0; f < out->n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0};
    unravel(o, f, idx);
    double a = in[0].v[bcast_at(&io->in[0], o, idx)];
    double b = io->n_in > 1 ? in[1].v[bcast_at(&io->in[1], o, idx)] : scalar;
    out->v[f] = op == HAP_OP_ADD   ? a + b
                : op == HAP_OP_SUB ? a - b
                : op == HAP_OP_MUL ? a * b
                                   : a / b;
  }
}

static void ev_softmax(hap_op op, const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *x = &io->in[0];
  int d = ndim(ai(io, op, "dim"), x->rank);
  int64_t len = x->dims[d], inner = 1;
  for (int k = d + 1; k < x->rank; k++)
    inner *= x->dims[k];
  for (int64_t f = 0; f < in[0].n; f++) {
    if ((f / inner) % len != 0)
      continue; /* f is the first element of its row */
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < len; j++)
      mx = fmax(mx, in[0].v[f + j * inner]);
    for (int64_t j = 0; j < len; j++)
      z += exp(in[0].v[f + j * inner] - mx);
    for (int64_t j = 0; j < len; j++) {
      double t = in[0].v[f + j * inner] - mx;
      out->v[f + j * inner] = op == HAP_OP_SOFTMAX ? exp(t) / z : t - log(z);
    }
  }
}

static void ev_reduce(hap_op op, const hap_op_io *io, const tens *in, tens *out, const dev *c) {
  const hap_shape *x = &io->in[0];
  const hap_attr_value *dims = av(io, op, "dims");
  bool keepdim = ai(io, op, "keepdim") != 0, red[HAP_MAX_DIMS] = {false};
  for (int d = 0; d < x->rank; d++)
    red[d] = dims->u.ints.n == 0;
  for (int k = 0; k < dims->u.ints.n; k++)
    red[ndim(dims->u.ints.v[k], x->rank)] = true;
  for (int64_t f = 0; f < in[0].n; f++) {
    int64_t idx[HAP_MAX_DIMS], oidx[HAP_MAX_DIMS];
    unravel(x, f, idx);
    int r = 0;
    for (int d = 0; d < x->rank; d++)
      if (!red[d] || keepdim)
        oidx[r++] = red[d] ? 0 : idx[d];
    out->v[ravel(&io->out[0], oidx)] += in[0].v[f];
  }
  if (op == HAP_OP_MEAN) {
    const hap_shape *cx = flag(c, HAP_VARIANT_GLOBAL_COUNT) ? &c->full->in[0] : x;
    double count = 1;
    for (int d = 0; d < x->rank; d++)
      if (red[d])
        count *= (double)cx->dims[d];
    for (int64_t f = 0; f < out->n; f++)
      out->v[f] /= count;
  }
}

/* Copies: output element f reads input element src(f). */
static void ev_copy(hap_op op, const hap_op_io *io, const tens *in, tens *out) {
  const hap_shape *x = &io->in[0], *o = &io->out[0];
  for (int64_t f = 0; f < out->n; f++) {
    int64_t idx[HAP_MAX_DIMS], src[HAP_MAX_DIMS];
    unravel(o, f, idx);
    memcpy(src, idx, sizeof src);
    if (op == HAP_OP_TRANSPOSE) {
      int a = ndim(ai(io, op, "dim0"), x->rank), b = ndim(ai(io, op, "dim1"), x->rank);
      src[a] = idx[b];
      src[b] = idx[a];
    } else if (op == HAP_OP_PERMUTE) {
      const hap_attr_value *p = av(io, op, "dims");
      for (int i = 0; i < x->rank; i++)
        src[ndim(p->u.ints.v[i], x->rank)] = idx[i];
    } else if (op == HAP_OP_NARROW) {
      src[ndim(ai(io, op, "dim"), x->rank)] += ai(io, op, "start");
    } else if (op == HAP_OP_CLS_SELECT) {
      src[2] = idx[1];
      src[1] = x->dims[1] - 1;
    } else if (op == HAP_OP_CLS_APPEND) {
      bool cls = idx[1] == x->dims[1];
      out->v[f] = cls ? in[1].v[idx[2]] : in[0].v[ravel(x, idx)];
      continue;
    } else { /* reshape, flatten: same flat order */
      out->v[f] = in[0].v[f];
      continue;
    }
    out->v[f] = in[0].v[ravel(x, src)];
  }
}

/* Top-2 gating per batch row: softmax over experts, first and second choices, slots by a
 * cumulative count over the sequence (second choices after all first choices), dropped beyond
 * the capacity; combine weights renormalised over the two choices. */
static void ev_top2(const hap_op_io *io, const tens *in, tens *out) {
  int64_t b = io->in[0].dims[0], s = io->in[0].dims[1], d = io->in[0].dims[2];
  int64_t e = io->in[1].dims[1], cap = ai(io, HAP_OP_TOP2_GATING, "capacity");
  for (int64_t bi = 0; bi < b; bi++) {
    int64_t count[16] = {0};
    int64_t choice[2][16];
    double gate[2][16];
    cr_assert(e <= 16 && s <= 16);
    for (int64_t si = 0; si < s; si++) {
      double g[16] = {0}, mx = -INFINITY;
      for (int64_t ei = 0; ei < e; ei++) {
        g[ei] = 0;
        for (int64_t q = 0; q < d; q++)
          g[ei] += in[0].v[(bi * s + si) * d + q] * in[1].v[q * e + ei];
        mx = fmax(mx, g[ei]);
      }
      for (int64_t ei = 0; ei < e; ei++)
        g[ei] = exp(g[ei] - mx); /* the normaliser cancels in the two-choice weights */
      int64_t t1 = 0, t2 = -1;
      for (int64_t ei = 1; ei < e; ei++)
        if (g[ei] > g[t1])
          t1 = ei;
      for (int64_t ei = 0; ei < e; ei++)
        if (ei != t1 && (t2 < 0 || g[ei] > g[t2]))
          t2 = ei;
      choice[0][si] = t1;
      choice[1][si] = t2;
      gate[0][si] = g[t1] / (g[t1] + g[t2]);
      gate[1][si] = g[t2] / (g[t1] + g[t2]);
    }
    for (int k = 0; k < 2; k++)
      for (int64_t si = 0; si < s; si++) {
        int64_t ex = choice[k][si], slot = count[ex]++;
        if (slot >= cap)
          continue;
        int64_t at = ((bi * s + si) * e + ex) * cap + slot;
        out[0].v[at] = 1;
        out[1].v[at] = gate[k][si];
      }
  }
}

static void ev_loss(hap_op op, const hap_op_io *io, const tens *in, tens *out, const dev *c) {
  const hap_shape *x = &io->in[0], *t = &io->in[1];
  int64_t cls = x->dims[1];
  double total = 0;
  for (int64_t f = 0; f < in[1].n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0}, xi[HAP_MAX_DIMS] = {0};
    unravel(t, f, idx);
    xi[0] = idx[0];
    for (int d = 1; d < t->rank; d++)
      xi[d + 1] = idx[d];
    double lse = 0;
    if (op == HAP_OP_CROSS_ENTROPY) {
      double mx = -INFINITY;
      for (xi[1] = 0; xi[1] < cls; xi[1]++)
        mx = fmax(mx, in[0].v[ravel(x, xi)]);
      for (xi[1] = 0; xi[1] < cls; xi[1]++)
        lse += exp(in[0].v[ravel(x, xi)] - mx);
      lse = mx + log(lse);
    }
    xi[1] = (int64_t)in[1].v[f];
    total += lse - in[0].v[ravel(x, xi)];
  }
  if (strcmp(hap_attr_s(io->attrs, hap_op_attr_index(op, "reduction")), "mean") == 0)
    total /= (double)numel(flag(c, HAP_VARIANT_GLOBAL_COUNT) ? &c->full->in[1] : t);
  out->v[0] = total;
}

static void eval_op(hap_op op, const hap_op_io *io, const tens *in, tens *out, const dev *c) {
  switch (op) {
  case HAP_OP_LINEAR: ev_linear(io, in, out); break;
  case HAP_OP_MATMUL:
  case HAP_OP_BMM: ev_matmul(io, in, out); break;
  case HAP_OP_EINSUM: ev_einsum(io, in, out); break;
  case HAP_OP_CONV2D: ev_conv2d(io, in, out); break;
  case HAP_OP_MAX_POOL2D: ev_max_pool2d(io, in, out); break;
  case HAP_OP_ADAPTIVE_AVG_POOL2D: ev_adaptive_avg_pool2d(io, in, out); break;
  case HAP_OP_EMBEDDING: ev_embedding(io, in, out, c); break;
  case HAP_OP_LAYER_NORM: ev_layer_norm(io, in, out); break;
  case HAP_OP_MULTI_HEAD_ATTENTION: ev_mha(io, in, out); break;
  case HAP_OP_RELU:
  case HAP_OP_GELU:
  case HAP_OP_SIGMOID:
  case HAP_OP_TANH:
  case HAP_OP_RSQRT:
  case HAP_OP_POW:
  case HAP_OP_DROPOUT: ev_unary(op, io, in, out, c); break;
  case HAP_OP_ADD:
  case HAP_OP_SUB:
  case HAP_OP_MUL:
  case HAP_OP_DIV: ev_binary(op, io, in, out, c); break;
  case HAP_OP_SOFTMAX:
  case HAP_OP_LOG_SOFTMAX: ev_softmax(op, io, in, out); break;
  case HAP_OP_SUM:
  case HAP_OP_MEAN: ev_reduce(op, io, in, out, c); break;
  case HAP_OP_TOP2_GATING: ev_top2(io, in, out); break;
  case HAP_OP_NLL_LOSS:
  case HAP_OP_CROSS_ENTROPY: ev_loss(op, io, in, out, c); break;
  default: ev_copy(op, io, in, out); break;
  }
}

/* ---- cases -------------------------------------------------------------------------------------
 */

/* One application of an op with its data rules. Not copyable (io.attrs points into it). */
typedef struct ocase {
  hap_op op;
  hap_attrs attrs;
  hap_op_io io;
  int64_t int_hi[HAP_MAX_OP_INPUTS]; /* > 0: integer input drawn from 0..int_hi-1 */
  bool positive[HAP_MAX_OP_INPUTS];  /* float input drawn from [0.5, 1.5] */
  int alias[HAP_MAX_OP_INPUTS];      /* >= 0: the same tensor as that earlier input */
  hap_err err;
} ocase;

static void begin(ocase *c, hap_op op) {
  memset(c, 0, sizeof *c);
  c->op = op;
  hap_attrs_init(&c->attrs, op);
  c->io.attrs = &c->attrs;
  for (int i = 0; i < HAP_MAX_OP_INPUTS; i++)
    c->alias[i] = -1;
}

static void in(ocase *c, hap_shape s) {
  int i = c->io.n_in++;
  c->io.in[i] = s;
  c->io.in_dtype[i] = HAP_F64;
  c->io.in_grad[i] = true;
}

static void in_int(ocase *c, hap_shape s, int64_t hi) {
  int i = c->io.n_in;
  in(c, s);
  c->io.in_dtype[i] = HAP_I64;
  c->io.in_grad[i] = false;
  c->int_hi[i] = hi;
}

static void set_i(ocase *c, const char *name, int64_t v) {
  cr_assert_eq(hap_attrs_set_int(&c->attrs, c->op, name, v, &c->err), HAP_OK, "%s", c->err.msg);
}
static void set_f(ocase *c, const char *name, double v) {
  cr_assert_eq(hap_attrs_set_float(&c->attrs, c->op, name, v, &c->err), HAP_OK, "%s", c->err.msg);
}
static void set_s(ocase *c, const char *name, const char *v) {
  cr_assert_eq(hap_attrs_set_str(&c->attrs, c->op, name, v, &c->err), HAP_OK, "%s", c->err.msg);
}
static void set_ints(ocase *c, const char *name, hap_shape v) {
  cr_assert_eq(hap_attrs_set_ints(&c->attrs, c->op, name, v.dims, v.rank, &c->err), HAP_OK, "%s",
               c->err.msg);
}

static void infer(ocase *c) {
  cr_assert_eq(hap_op_infer(c->op, &c->io, &c->err), HAP_OK, "%s: %s", hap_op_name(c->op),
               c->err.msg);
}

/* ---- the soundness check -----------------------------------------------------------------------
 */

static const struct {
  int n;
  double r[4];
} RATIOS[] = {
    {3, {0.5, 0, 0.5}},      /* a zero share in the middle */
    {3, {0.2, 0.3, 0.5}},    /* uneven */
    {2, {2.0 / 3, 1.0 / 3}}, /* HAP's example */
    {4, {0, 0.1, 0.6, 0.3}}, /* device 0 empty */
    {1, {1}},                /* one device holds everything */
    {3, {1.0 / 3, 1.0 / 3, 1.0 / 3}},
};
enum { N_RATIOS = (int)(sizeof RATIOS / sizeof RATIOS[0]), MAX_DEV = 4 };

static void slice(const tens *full, int d, int64_t off, const hap_shape *local, tens *out) {
  t_alloc(out, local);
  for (int64_t f = 0; f < out->n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0};
    unravel(local, f, idx);
    idx[d] += off;
    out->v[f] = full->v[ravel(&full->s, idx)];
  }
}

static void place(tens *full, int d, int64_t off, const tens *part) {
  for (int64_t f = 0; f < part->n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0};
    unravel(&part->s, f, idx);
    idx[d] += off;
    full->v[ravel(&full->s, idx)] = part->v[f];
  }
}

static double max_abs(const tens *t) {
  double m = 0;
  for (int64_t f = 0; f < t->n; f++)
    m = fmax(m, fabs(t->v[f]));
  return m;
}

static void expect_close(const tens *got, const tens *want, const char *what) {
  double tol = 1e-9 * (1 + max_abs(want));
  for (int64_t f = 0; f < want->n; f++)
    cr_assert(fabs(got->v[f] - want->v[f]) <= tol, "%s: element %lld is %.17g, expected %.17g",
              what, (long long)f, got->v[f], want->v[f]);
}

static bool aliases_differ(const ocase *c, const hap_variant *v) {
  for (int k = 0; k < c->io.n_in; k++)
    if (c->alias[k] >= 0 && v->in[k] != v->in[c->alias[k]])
      return true;
  return false;
}

/* Run variant v on the devices of one ratio vector and compare with the full outputs. */
static void check_split(const ocase *c, const tens *x, const tens *y, const hap_variant *v,
                        int ratio) {
  const hap_op_io *io = &c->io;
  int n = RATIOS[ratio].n;
  int64_t lens[MAX_DEV] = {0}, ext = hap_variant_extent(io, v);
  hap_err err = {0};
  if (ext > 0)
    cr_assert_eq(hap_shard_lengths(ext, v->granule, RATIOS[ratio].r, n, lens, &err), HAP_OK, "%s",
                 err.msg);
  char what[200];
  snprintf(what, sizeof what, "%s '%s', ratios #%d (lengths %lld %lld %lld %lld)",
           hap_op_name(c->op), v->name, ratio, (long long)lens[0], (long long)lens[1],
           (long long)lens[2], (long long)lens[3]);
  /* partial sums of Reduce inputs: random parts, the last one completing the sum */
  tens parts[HAP_MAX_OP_INPUTS][MAX_DEV];
  memset(parts, 0, sizeof parts);
  for (int k = 0; k < io->n_in; k++) {
    if (v->in[k] != LR || c->alias[k] >= 0)
      continue;
    cr_assert(c->int_hi[k] == 0, "%s: an index input is Reduce", what);
    for (int i = 0; i < n; i++) {
      t_alloc(&parts[k][i], &io->in[k]);
      for (int64_t f = 0; f < x[k].n; f++) {
        double sofar = 0;
        for (int j = 0; j < i; j++)
          sofar += parts[k][j].v[f];
        parts[k][i].v[f] = i < n - 1 ? uniform(-1, 1) : x[k].v[f] - sofar;
      }
    }
  }
  tens acc[HAP_MAX_OP_OUTPUTS] = {{{0}}};
  for (int o = 0; o < io->n_out; o++)
    t_alloc(&acc[o], &io->out[o]);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    hap_attrs la;
    hap_op_io lio;
    cr_assert_eq(hap_op_local_io(c->op, io, v, lens[i], &la, &lio, &err), HAP_OK, "%s: %s", what,
                 err.msg);
    tens lin[HAP_MAX_OP_INPUTS] = {{{0}}}, lout[HAP_MAX_OP_OUTPUTS] = {{{0}}};
    for (int k = 0; k < io->n_in; k++) {
      int src = c->alias[k] >= 0 ? c->alias[k] : k;
      if (v->in[k] >= 0) {
        slice(&x[k], v->in[k], off, &lio.in[k], &lin[k]);
      } else if (v->in[k] == LR) {
        t_alloc(&lin[k], &lio.in[k]);
        memcpy(lin[k].v, parts[src][i].v, (size_t)lin[k].n * sizeof(double));
      } else {
        cr_assert(hap_shape_eq(&lio.in[k], &io->in[k]), "%s: Identity input %d is not full", what,
                  k);
        t_alloc(&lin[k], &lio.in[k]);
        if (!(v->once & (1u << k)) || i == 0)
          memcpy(lin[k].v, x[k].v, (size_t)lin[k].n * sizeof(double));
      }
    }
    for (int o = 0; o < io->n_out; o++)
      t_alloc(&lout[o], &lio.out[o]);
    dev d = {.rank = i, .off = off, .len = lens[i], .v = v, .full = io};
    eval_op(c->op, &lio, lin, lout, &d);
    for (int o = 0; o < io->n_out; o++) {
      if (v->out[o] >= 0) {
        place(&acc[o], v->out[o], off, &lout[o]);
      } else if (v->out[o] == LR) {
        for (int64_t f = 0; f < acc[o].n; f++)
          acc[o].v[f] += lout[o].v[f];
      } else {
        expect_close(&lout[o], &y[o], what);
      }
      t_free(&lout[o]);
    }
    for (int k = 0; k < io->n_in; k++)
      t_free(&lin[k]);
    off += lens[i];
  }
  for (int o = 0; o < io->n_out; o++) {
    if (v->out[o] != LI)
      expect_close(&acc[o], &y[o], what);
    t_free(&acc[o]);
  }
  for (int k = 0; k < io->n_in; k++)
    for (int i = 0; i < n; i++)
      t_free(&parts[k][i]);
}

/* Every variant of the case, every ratio vector. Returns the number of variants. */
static int check_sound(ocase *c) {
  infer(c);
  const hap_op_io *io = &c->io;
  tens x[HAP_MAX_OP_INPUTS] = {{{0}}}, y[HAP_MAX_OP_OUTPUTS] = {{{0}}};
  for (int k = 0; k < io->n_in; k++) {
    t_alloc(&x[k], &io->in[k]);
    for (int64_t f = 0; f < x[k].n; f++) {
      if (c->alias[k] >= 0)
        x[k].v[f] = x[c->alias[k]].v[f];
      else if (c->int_hi[k] > 0)
        x[k].v[f] = (double)(next_u64() % (uint64_t)c->int_hi[k]);
      else
        x[k].v[f] = c->positive[k] ? uniform(0.5, 1.5) : uniform(-1, 1);
    }
  }
  dev full = {.rank = -1};
  for (int o = 0; o < io->n_out; o++)
    t_alloc(&y[o], &io->out[o]);
  eval_op(c->op, io, x, y, &full);
  hap_variant vs[HAP_MAX_VARIANTS];
  int nv = hap_op_variants(c->op, io, vs, HAP_MAX_VARIANTS);
  cr_assert_geq(nv, 1, "%s has no variant", hap_op_name(c->op));
  for (int i = 0; i < nv; i++) {
    if (aliases_differ(c, &vs[i]))
      continue;
    for (int r = 0; r < N_RATIOS; r++)
      check_split(c, x, y, &vs[i], r);
  }
  for (int k = 0; k < io->n_in; k++)
    t_free(&x[k]);
  for (int o = 0; o < io->n_out; o++)
    t_free(&y[o]);
  return nv;
}

/* ---- soundness tests, per op family ------------------------------------------------------------
 */

Test(sharding_sound, linear) {
  ocase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 3, 4));
  in(&c, SHAPE(5, 4));
  in(&c, SHAPE(5));
  cr_assert_eq(check_sound(&c), 6);
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(3, 4));
  in(&c, SHAPE(5, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(4));
  in(&c, SHAPE(3, 4));
  in(&c, SHAPE(3));
  cr_assert_eq(check_sound(&c), 4);
}

Test(sharding_sound, matmul_bmm) {
  ocase c;
  begin(&c, HAP_OP_MATMUL); /* batch [2, 1] with [3]: out [2, 3, 3, 2] */
  in(&c, SHAPE(2, 1, 3, 4));
  in(&c, SHAPE(3, 4, 2));
  check_sound(&c);
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(2, 3, 3, 4));
  in(&c, SHAPE(2, 3, 4, 2));
  cr_assert_eq(check_sound(&c), 8);
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(3, 4));
  in(&c, SHAPE(4, 5));
  cr_assert_eq(check_sound(&c), 6);
  begin(&c, HAP_OP_BMM);
  in(&c, SHAPE(2, 3, 4));
  in(&c, SHAPE(2, 4, 5));
  cr_assert_eq(check_sound(&c), 7);
}

static void einsum_case(ocase *c, const char *eq, hap_shape a, hap_shape b) {
  begin(c, HAP_OP_EINSUM);
  set_s(c, "equation", eq);
  in(c, a);
  in(c, b);
}

Test(sharding_sound, einsum) {
  ocase c;
  einsum_case(&c, "bsd,bsec->becd", SHAPE(2, 3, 2), SHAPE(2, 3, 3, 2));
  cr_assert_eq(check_sound(&c), 8);
  einsum_case(&c, "ij,jk->ik", SHAPE(3, 4), SHAPE(4, 2));
  cr_assert_eq(check_sound(&c), 6);
  einsum_case(&c, "edh,becd->bech", SHAPE(3, 2, 4), SHAPE(2, 3, 2, 2));
  check_sound(&c);
  einsum_case(&c, "ehd,bech->becd", SHAPE(3, 4, 2), SHAPE(2, 3, 2, 4));
  check_sound(&c);
  einsum_case(&c, "becd,bsec->bsd", SHAPE(2, 3, 2, 2), SHAPE(2, 3, 3, 2));
  check_sound(&c);
  einsum_case(&c, "ij,k->i", SHAPE(3, 4), SHAPE(5)); /* indices summed within one operand */
  cr_assert_eq(check_sound(&c), 6);
}

Test(sharding_sound, conv_and_pools) {
  ocase c;
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "padding", 1);
  in(&c, SHAPE(2, 3, 4, 4));
  in(&c, SHAPE(4, 3, 3, 3));
  in(&c, SHAPE(4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "stride", 2);
  in(&c, SHAPE(2, 3, 5, 5));
  in(&c, SHAPE(2, 3, 2, 2));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_MAX_POOL2D);
  set_i(&c, "kernel", 3);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in(&c, SHAPE(2, 3, 5, 5));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  set_ints(&c, "output_size", SHAPE(2, 3));
  in(&c, SHAPE(2, 3, 5, 4));
  cr_assert_eq(check_sound(&c), 4);
}

Test(sharding_sound, embedding_layer_norm) {
  ocase c;
  begin(&c, HAP_OP_EMBEDDING);
  in_int(&c, SHAPE(2, 3), 5);
  in(&c, SHAPE(5, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_EMBEDDING);
  in_int(&c, SCALAR, 6);
  in(&c, SHAPE(6, 3));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_LAYER_NORM);
  in(&c, SHAPE(2, 3, 4));
  in(&c, SHAPE(4));
  in(&c, SHAPE(4));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_LAYER_NORM);
  set_i(&c, "normalized_dims", 2);
  in(&c, SHAPE(2, 3, 4));
  in(&c, SHAPE(3, 4));
  cr_assert_eq(check_sound(&c), 2);
}

static void mha_case(ocase *c, int64_t n, int64_t l, int64_t s, int64_t e, int64_t heads,
                     bool mask) {
  begin(c, HAP_OP_MULTI_HEAD_ATTENTION);
  set_i(c, "heads", heads);
  in(c, SHAPE(n, l, e));
  in(c, SHAPE(n, s, e));
  in(c, SHAPE(n, s, e));
  in(c, SHAPE(3, e, e));
  in(c, SHAPE(3, e));
  in(c, SHAPE(e, e));
  in(c, SHAPE(e));
  if (mask)
    in(c, SHAPE(l, s));
}

Test(sharding_sound, attention) {
  ocase c;
  mha_case(&c, 2, 3, 3, 4, 2, true);
  cr_assert_eq(check_sound(&c), 4);
  mha_case(&c, 2, 2, 3, 6, 3, false); /* cross attention, 3 heads of 2 */
  cr_assert_eq(check_sound(&c), 4);
  mha_case(&c, 2, 3, 3, 4, 2, false); /* self attention: q = k = v */
  c.alias[1] = c.alias[2] = 0;
  check_sound(&c);
}

Test(sharding_sound, elementwise) {
  static const hap_op unary[] = {HAP_OP_RELU,  HAP_OP_GELU, HAP_OP_SIGMOID, HAP_OP_TANH,
                                 HAP_OP_RSQRT, HAP_OP_POW,  HAP_OP_DROPOUT};
  ocase c;
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    begin(&c, unary[i]);
    if (unary[i] == HAP_OP_POW)
      set_f(&c, "exponent", 3);
    if (unary[i] == HAP_OP_DROPOUT)
      set_f(&c, "p", 0.3);
    in(&c, SHAPE(3, 4));
    c.positive[0] = unary[i] == HAP_OP_RSQRT;
    cr_assert_eq(check_sound(&c), unary[i] == HAP_OP_DROPOUT ? 4 : 3, "%s", hap_op_name(unary[i]));
  }
  static const hap_op binary[] = {HAP_OP_ADD, HAP_OP_SUB, HAP_OP_MUL, HAP_OP_DIV};
  static const int n_variants[] = {7, 7, 6, 5}; /* replicated, 3 dims, passthroughs */
  for (int i = 0; i < 4; i++) {
    begin(&c, binary[i]); /* [2, 1, 3] with [4, 3]: out [2, 4, 3] */
    in(&c, SHAPE(2, 1, 3));
    in(&c, SHAPE(4, 3));
    c.positive[1] = true;
    cr_assert_eq(check_sound(&c), n_variants[i], "%s", hap_op_name(binary[i]));
    begin(&c, binary[i]);
    in(&c, SHAPE(2, 3, 2));
    in(&c, SHAPE(2, 3, 2));
    c.positive[1] = true;
    cr_assert_eq(check_sound(&c), n_variants[i], "%s", hap_op_name(binary[i]));
    begin(&c, binary[i]);
    set_f(&c, "scalar", 1.5);
    in(&c, SHAPE(2, 3));
    cr_assert_eq(check_sound(&c), 4, "%s", hap_op_name(binary[i]));
    begin(&c, binary[i]); /* x op x */
    in(&c, SHAPE(2, 3));
    in(&c, SHAPE(2, 3));
    c.alias[1] = 0;
    c.positive[0] = true;
    check_sound(&c);
  }
}

Test(sharding_sound, softmax_and_reductions) {
  ocase c;
  begin(&c, HAP_OP_SOFTMAX);
  set_i(&c, "dim", 1);
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_LOG_SOFTMAX);
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(1));
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5); /* replicated, G0, G2, G1 -> LR, LR -> LR */
  begin(&c, HAP_OP_SUM);
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(0, -1));
  set_i(&c, "keepdim", 1);
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_MEAN);
  set_ints(&c, "dims", SHAPE(1));
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_MEAN);
  set_i(&c, "keepdim", 1);
  in(&c, SHAPE(3, 4));
  cr_assert_eq(check_sound(&c), 4);
}

Test(sharding_sound, layout_ops) {
  ocase c;
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(2, 3, 2, 2));
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 4);
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(2, -1));
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(2, 3, -1, 2));
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 4);
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(6, 4)); /* [2, 3 | 4] -> [6 | 4]: the trailing dim keeps */
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(2, 1, 3, 4, 1)); /* unit dims inserted */
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(4, 6)); /* [2, 3, 4] -> [4, 6]: no dim keeps its slices */
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 2);
  begin(&c, HAP_OP_FLATTEN);
  set_i(&c, "start_dim", 1);
  set_i(&c, "end_dim", 2);
  in(&c, SHAPE(2, 3, 2, 3));
  cr_assert_eq(check_sound(&c), 4);
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", 0);
  set_i(&c, "dim1", -1);
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_PERMUTE);
  set_ints(&c, "dims", SHAPE(2, 0, 1));
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 5);
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 1);
  set_i(&c, "start", 1);
  set_i(&c, "length", 3);
  in(&c, SHAPE(3, 5));
  cr_assert_eq(check_sound(&c), 3);
  begin(&c, HAP_OP_CLS_APPEND);
  in(&c, SHAPE(2, 3, 4));
  in(&c, SHAPE(1, 1, 4));
  cr_assert_eq(check_sound(&c), 4);
  begin(&c, HAP_OP_CLS_SELECT);
  in(&c, SHAPE(2, 3, 4));
  cr_assert_eq(check_sound(&c), 4);
}

Test(sharding_sound, gating_and_losses) {
  ocase c;
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 2);
  in(&c, SHAPE(3, 4, 2));
  in(&c, SHAPE(2, 3));
  cr_assert_eq(check_sound(&c), 2);
  static const hap_op losses[] = {HAP_OP_NLL_LOSS, HAP_OP_CROSS_ENTROPY};
  for (int i = 0; i < 2; i++) {
    for (int mean = 0; mean < 2; mean++) {
      begin(&c, losses[i]);
      set_s(&c, "reduction", mean ? "mean" : "sum");
      in(&c, SHAPE(3, 4));
      in_int(&c, SHAPE(3), 4);
      cr_assert_eq(check_sound(&c), 2);
      begin(&c, losses[i]);
      set_s(&c, "reduction", mean ? "mean" : "sum");
      in(&c, SHAPE(2, 3, 4, 2));
      in_int(&c, SHAPE(2, 4, 2), 3);
      cr_assert_eq(check_sound(&c), 4);
    }
  }
}

/* ---- variant lists -----------------------------------------------------------------------------
 */

static int variants_of(ocase *c, hap_variant *vs) {
  infer(c);
  return hap_op_variants(c->op, &c->io, vs, HAP_MAX_VARIANTS);
}

static const hap_variant *find(const hap_variant *vs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(vs[i].name, name) == 0)
      return &vs[i];
  cr_assert_fail("no variant '%s'", name);
  return NULL;
}

static void expect_layouts(const hap_variant *v, int n_in, const hap_layout *want_in,
                           hap_layout want_out) {
  for (int i = 0; i < n_in; i++)
    cr_assert_eq(v->in[i], want_in[i], "'%s': input %d has layout %d, expected %d", v->name, i,
                 v->in[i], want_in[i]);
  cr_assert_eq(v->out[0], want_out, "'%s': output has layout %d, expected %d", v->name, v->out[0],
               want_out);
}

Test(sharding_variants, linear_megatron) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(8, 16, 32));
  in(&c, SHAPE(64, 32));
  in(&c, SHAPE(64));
  cr_assert_eq(variants_of(&c, vs), 6);
  static const char *const order[] = {"replicated",    "data-parallel",
                                      "data-parallel", "column-parallel",
                                      "row-parallel",  "partial-sum passthrough"};
  for (int i = 0; i < 6; i++)
    cr_assert_str_eq(vs[i].name, order[i]);
  expect_layouts(&vs[0], 3, (hap_layout[]){LI, LI, LI}, LI);
  expect_layouts(&vs[1], 3, (hap_layout[]){0, LI, LI}, 0);
  expect_layouts(&vs[2], 3, (hap_layout[]){1, LI, LI}, 1);
  expect_layouts(&vs[3], 3, (hap_layout[]){LI, 0, 0}, 2);
  expect_layouts(&vs[4], 3, (hap_layout[]){2, 1, LI}, LR);
  expect_layouts(&vs[5], 3, (hap_layout[]){LR, LI, LI}, LR);
  cr_assert_eq(vs[4].flags, HAP_VARIANT_BIAS_ONCE);
  cr_assert_eq(vs[4].once, 1u << 2);
  cr_assert_eq(vs[5].once, 1u << 2);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(vs[i].flags, 0);
  /* without a bias nothing is applied once */
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(8, 16, 32));
  in(&c, SHAPE(64, 32));
  cr_assert_eq(variants_of(&c, vs), 6);
  for (int i = 0; i < 6; i++)
    cr_assert(vs[i].flags == 0 && vs[i].once == 0, "'%s'", vs[i].name);
}

Test(sharding_variants, attention_head_parallel) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  mha_case(&c, 8, 128, 128, 768, 12, true);
  set_f(&c, "dropout", 0.1);
  cr_assert_eq(variants_of(&c, vs), 4);
  const hap_variant *h = find(vs, 4, "head-parallel");
  expect_layouts(h, 8, (hap_layout[]){LI, LI, LI, 1, 1, 1, LI, LI}, LR);
  cr_assert_eq(h->granule, 64);
  cr_assert_eq(h->once, 1u << 6);
  cr_assert_eq(h->flags, HAP_VARIANT_BIAS_ONCE | HAP_VARIANT_GLOBAL_MASK);
  expect_layouts(find(vs, 4, "data-parallel"), 8, (hap_layout[]){0, 0, 0, LI, LI, LI, LI, LI}, 0);
  expect_layouts(find(vs, 4, "query-sequence-parallel"), 8,
                 (hap_layout[]){1, LI, LI, LI, LI, LI, LI, 0}, 1);
  for (int i = 0; i < 4; i++)
    cr_assert(vs[i].flags & HAP_VARIANT_GLOBAL_MASK, "'%s'", vs[i].name);
  /* 12 heads of 64 on (2/3, 1/3): 8 and 4 heads */
  int64_t lens[2];
  cr_assert_eq(hap_shard_lengths(768, h->granule, (double[]){2.0 / 3, 1.0 / 3}, 2, lens, NULL),
               HAP_OK);
  cr_assert(lens[0] == 512 && lens[1] == 256);
}

Test(sharding_variants, moe_einsums_are_expert_parallel) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  einsum_case(&c, "bsd,bsec->becd", SHAPE(4, 8, 16), SHAPE(4, 8, 6, 3));
  cr_assert_eq(variants_of(&c, vs), 8);
  expect_layouts(find(vs, 8, "expert-parallel"), 2, (hap_layout[]){LI, 2}, 1);
  expect_layouts(find(vs, 8, "data-parallel"), 2, (hap_layout[]){0, 0}, 0);
  expect_layouts(find(vs, 8, "contraction-parallel"), 2, (hap_layout[]){1, 1}, LR);
  einsum_case(&c, "edh,becd->bech", SHAPE(6, 16, 32), SHAPE(4, 6, 3, 16));
  cr_assert_eq(variants_of(&c, vs), 8);
  expect_layouts(find(vs, 8, "expert-parallel"), 2, (hap_layout[]){0, 1}, 1);
  expect_layouts(find(vs, 8, "data-parallel"), 2, (hap_layout[]){LI, 0}, 0);
  /* a large einsum stays within HAP_MAX_VARIANTS */
  einsum_case(&c, "abcdefgh,ijklmnop->aip", SHAPE(2, 2, 2, 2, 2, 2, 2, 2),
              SHAPE(2, 2, 2, 2, 2, 2, 2, 2));
  cr_assert_eq(variants_of(&c, vs), 1 + 16 + 2);
}

Test(sharding_variants, excluded_dims) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  /* conv2d: never spatial */
  begin(&c, HAP_OP_CONV2D);
  in(&c, SHAPE(2, 3, 8, 8));
  in(&c, SHAPE(4, 3, 3, 3));
  int n = variants_of(&c, vs);
  for (int i = 0; i < n; i++)
    cr_assert(vs[i].in[0] < 2 && vs[i].out[0] < 2, "'%s' shards a spatial dim", vs[i].name);
  /* top-2 gating: batch only */
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 4);
  in(&c, SHAPE(2, 8, 16));
  in(&c, SHAPE(16, 4));
  cr_assert_eq(variants_of(&c, vs), 2);
  cr_assert(vs[1].in[0] == 0 && vs[1].in[1] == LI && vs[1].out[0] == 0 && vs[1].out[1] == 0);
  /* cross_entropy: never the class dim; mean needs the global count */
  begin(&c, HAP_OP_CROSS_ENTROPY);
  in(&c, SHAPE(8, 10));
  in_int(&c, SHAPE(8), 10);
  cr_assert_eq(variants_of(&c, vs), 2);
  cr_assert(vs[1].in[0] == 0 && vs[1].in[1] == 0 && vs[1].out[0] == LR);
  cr_assert_eq(vs[1].flags, HAP_VARIANT_GLOBAL_COUNT);
  /* softmax: never its own dim; nonlinear ops take no Reduce */
  begin(&c, HAP_OP_SOFTMAX);
  in(&c, SHAPE(2, 3));
  cr_assert_eq(variants_of(&c, vs), 2);
  cr_assert(vs[1].in[0] == 0 && vs[1].out[0] == 0);
  /* mean over a sharded dim divides by the global count */
  begin(&c, HAP_OP_MEAN);
  in(&c, SHAPE(2, 3));
  cr_assert_eq(variants_of(&c, vs), 4);
  cr_assert(vs[1].flags == HAP_VARIANT_GLOBAL_COUNT && vs[3].flags == 0);
  /* embedding: vocab-parallel offsets the indices */
  begin(&c, HAP_OP_EMBEDDING);
  in_int(&c, SHAPE(4, 8), 100);
  in(&c, SHAPE(100, 16));
  cr_assert_eq(variants_of(&c, vs), 5);
  const hap_variant *v = find(vs, 5, "vocab-parallel");
  expect_layouts(v, 2, (hap_layout[]){LI, 0}, LR);
  cr_assert_eq(v->flags, HAP_VARIANT_LOCAL_ROWS);
  /* add: a broadcast dim stays Identity */
  begin(&c, HAP_OP_ADD);
  in(&c, SHAPE(4, 1, 8));
  in(&c, SHAPE(4, 5, 8));
  cr_assert_eq(variants_of(&c, vs), 7);
  cr_assert(vs[2].in[0] == LI && vs[2].in[1] == 1 && vs[2].out[0] == 1);
}

Test(sharding_variants, max_is_respected) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(8, 16, 32));
  in(&c, SHAPE(64, 32));
  infer(&c);
  memset(vs, 0x5a, sizeof vs);
  cr_assert_eq(hap_op_variants(c.op, &c.io, vs, 2), 2);
  cr_assert_str_eq(vs[1].name, "data-parallel");
  cr_assert_eq(vs[2].granule, 0x5a5a5a5a5a5a5a5aLL, "wrote past max");
  cr_assert_eq(hap_op_variants(c.op, &c.io, vs, 0), 0);
  cr_assert_eq(hap_op_variants(HAP_OP_COUNT, &c.io, vs, HAP_MAX_VARIANTS), 0);
}

/* ---- local shapes ------------------------------------------------------------------------------
 */

static void expect_shape(const hap_shape *got, hap_shape want, const char *what) {
  char a[160], b[160];
  cr_assert(hap_shape_eq(got, &want), "%s is %s, expected %s", what,
            hap_shape_str(got, a, sizeof a), hap_shape_str(&want, b, sizeof b));
}

Test(sharding_local, uneven_lengths) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  hap_attrs la;
  hap_op_io lio;
  hap_err err = {0};
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(8, 16, 32));
  in(&c, SHAPE(64, 32));
  in(&c, SHAPE(64));
  variants_of(&c, vs);
  const hap_variant *row = find(vs, 6, "row-parallel");
  cr_assert_eq(hap_variant_extent(&c.io, row), 32);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, row, 11, &la, &lio, &err), HAP_OK, "%s", err.msg);
  expect_shape(&lio.in[0], SHAPE(8, 16, 11), "x");
  expect_shape(&lio.in[1], SHAPE(64, 11), "W");
  expect_shape(&lio.in[2], SHAPE(64), "b");
  expect_shape(&lio.out[0], SHAPE(8, 16, 64), "y");
  cr_assert_eq(lio.attrs, &la);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, row, 0, &la, &lio, &err), HAP_OK, "%s", err.msg);
  expect_shape(&lio.in[0], SHAPE(8, 16, 0), "x");
  const hap_variant *col = find(vs, 6, "column-parallel");
  cr_assert_eq(hap_op_local_io(c.op, &c.io, col, 5, &la, &lio, &err), HAP_OK, "%s", err.msg);
  expect_shape(&lio.in[1], SHAPE(5, 32), "W");
  expect_shape(&lio.in[2], SHAPE(5), "b");
  expect_shape(&lio.out[0], SHAPE(8, 16, 5), "y");
  /* the local cost is the cost of the local shapes; a whole shard costs the full op */
  hap_op_cost full, part;
  hap_op_cost_of(c.op, &c.io, &full);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, col, 64, &la, &lio, &err), HAP_OK);
  hap_op_cost_of(c.op, &lio, &part);
  cr_assert_eq(part.fwd_flops, full.fwd_flops);
  /* a replicated variant ignores the length */
  cr_assert_eq(hap_op_local_io(c.op, &c.io, &vs[0], 7, &la, &lio, &err), HAP_OK);
  expect_shape(&lio.in[0], SHAPE(8, 16, 32), "x");
  /* lengths outside 0..extent are refused */
  cr_assert_eq(hap_op_local_io(c.op, &c.io, row, 33, &la, &lio, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "local length 33, expected a multiple of 1 in 0..32"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, row, -1, &la, &lio, &err), HAP_EINVAL);
}

Test(sharding_local, attention_heads_and_reshape_attrs) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  hap_attrs la;
  hap_op_io lio;
  hap_err err = {0};
  mha_case(&c, 2, 5, 5, 8, 4, true);
  variants_of(&c, vs);
  const hap_variant *h = find(vs, 4, "head-parallel");
  cr_assert_eq(h->granule, 2);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, h, 6, &la, &lio, &err), HAP_OK, "%s", err.msg);
  expect_shape(&lio.in[3], SHAPE(3, 6, 8), "in_proj_weight");
  expect_shape(&lio.in[4], SHAPE(3, 6), "in_proj_bias");
  expect_shape(&lio.in[5], SHAPE(8, 6), "out_proj_weight");
  expect_shape(&lio.in[6], SHAPE(8), "out_proj_bias");
  expect_shape(&lio.out[0], SHAPE(2, 5, 8), "output");
  cr_assert_eq(hap_attr_i(&la, hap_op_attr_index(c.op, "heads")), 3);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, h, 0, &la, &lio, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_attr_i(&la, hap_op_attr_index(c.op, "heads")), 0);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, h, 3, &la, &lio, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "expected a multiple of 2"), "%s", err.msg);
  const hap_variant *q = find(vs, 4, "query-sequence-parallel");
  cr_assert_eq(hap_op_local_io(c.op, &c.io, q, 2, &la, &lio, &err), HAP_OK, "%s", err.msg);
  expect_shape(&lio.in[7], SHAPE(2, 5), "mask");
  expect_shape(&lio.out[0], SHAPE(2, 2, 8), "output");
  /* reshape: the target shape follows the shard; a -1 keeps inferring */
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(4, 6, -1, 2));
  in(&c, SHAPE(4, 6, 8));
  cr_assert_eq(variants_of(&c, vs), 4);
  cr_assert_eq(hap_op_local_io(c.op, &c.io, &vs[2], 5, &la, &lio, &err), HAP_OK, "%s", err.msg);
  expect_shape(&lio.out[0], SHAPE(4, 5, 4, 2), "reshape output");
  const hap_attr_value *s = &la.v[hap_op_attr_index(c.op, "shape")];
  cr_assert(s->u.ints.v[0] == 4 && s->u.ints.v[1] == 5 && s->u.ints.v[2] == -1);
}

Test(sharding_local, malformed_variants) {
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  hap_attrs la;
  hap_op_io lio;
  hap_err err = {0};
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(8, 16));
  in(&c, SHAPE(4, 16));
  variants_of(&c, vs);
  hap_variant bad = vs[1]; /* x Gather(0) -> y Gather(0) */
  bad.out[0] = 1;          /* extents 8 and 4 */
  cr_assert_eq(hap_op_local_io(c.op, &c.io, &bad, 2, &la, &lio, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "extents 8 and 4"), "%s", err.msg);
  hap_err_clear(&err);
  bad = vs[1];
  bad.in[0] = LI; /* W Gather(0) alone: W [2, 16] gives y [8, 2], not the Identity [8, 4] */
  bad.out[0] = LI;
  bad.in[1] = 0;
  cr_assert_eq(hap_op_local_io(c.op, &c.io, &bad, 2, &la, &lio, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "local output 0 is [8, 2]"), "%s", err.msg);
  hap_err_clear(&err);
  bad = vs[1];
  bad.in[0] = 5;
  cr_assert_eq(hap_op_local_io(c.op, &c.io, &bad, 2, &la, &lio, &err), HAP_EINVAL);
  hap_err_clear(&err);
  bad = vs[1];
  bad.granule = 3;
  cr_assert_eq(hap_op_local_io(c.op, &c.io, &bad, 3, &la, &lio, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "granule 3 does not divide extent 8"), "%s", err.msg);
}

/* ---- shard lengths -----------------------------------------------------------------------------
 */

static void expect_lengths(int64_t len, int64_t granule, int n, const double *r,
                           const int64_t *want) {
  int64_t got[16];
  hap_err err = {0};
  cr_assert_eq(hap_shard_lengths(len, granule, r, n, got, &err), HAP_OK, "%s", err.msg);
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    cr_assert_eq(got[i], want[i], "L=%lld part %d is %lld, expected %lld", (long long)len, i,
                 (long long)got[i], (long long)want[i]);
    sum += got[i];
  }
  cr_assert_eq(sum, len);
}

Test(sharding_lengths, hap_examples) {
  expect_lengths(10, 1, 2, (double[]){2.0 / 3, 1.0 / 3}, (int64_t[]){7, 3});
  expect_lengths(1, 1, 3, (double[]){1.0 / 3, 1.0 / 3, 1.0 / 3}, (int64_t[]){1, 0, 0});
  expect_lengths(1, 1, 3, (double[]){0.2, 0.5, 0.3}, (int64_t[]){0, 1, 0});
  expect_lengths(768, 64, 3, (double[]){0.5, 0.25, 0.25}, (int64_t[]){384, 192, 192});
  expect_lengths(768, 64, 5, (double[]){0.2, 0.2, 0.2, 0.2, 0.2},
                 (int64_t[]){192, 192, 128, 128, 128});
  expect_lengths(5, 1, 3, (double[]){0.5, 0, 0.5}, (int64_t[]){3, 0, 2});
  expect_lengths(7, 1, 3, (double[]){0, 1, 0}, (int64_t[]){0, 7, 0});
  expect_lengths(0, 1, 2, (double[]){0.5, 0.5}, (int64_t[]){0, 0});
  expect_lengths(256, 1, 1, (double[]){1}, (int64_t[]){256});
  /* within the 1e-9 tolerance the lengths still sum to L, even for a huge L */
  expect_lengths(1000000000000LL, 1, 2, (double[]){0.5 + 4e-10, 0.5 + 4e-10},
                 (int64_t[]){500000000000LL, 500000000000LL});
}

Test(sharding_lengths, always_sum_to_len) {
  for (int t = 0; t < 2000; t++) {
    int n = 1 + (int)(next_u64() % 9);
    double r[9], s = 0;
    for (int i = 0; i < n; i++)
      s += (r[i] = next_u64() % 4 == 0 ? 0 : uniform(0, 1));
    if (s == 0)
      r[0] = s = 1;
    for (int i = 0; i < n; i++)
      r[i] /= s;
    int64_t granule = 1 + (int64_t)(next_u64() % 4), len = granule * (int64_t)(next_u64() % 50);
    int64_t out[9], sum = 0;
    hap_err err = {0};
    cr_assert_eq(hap_shard_lengths(len, granule, r, n, out, &err), HAP_OK, "%s", err.msg);
    for (int i = 0; i < n; i++) {
      cr_assert(out[i] >= 0 && out[i] % granule == 0);
      /* largest remainder: every part within one granule of its exact share */
      cr_assert(fabs((double)out[i] - r[i] * (double)len) < (double)granule + 1e-9);
      sum += out[i];
    }
    cr_assert_eq(sum, len);
  }
}

Test(sharding_lengths, errors) {
  int64_t out[3];
  hap_err err = {0};
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){1.5, -0.5}, 2, out, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "ratio 1 is -0.5, expected >= 0"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){0.5, 0.4}, 2, out, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "sum to 0.9"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){0.5, 0.5 + 2e-9}, 2, out, &err), HAP_EINVAL);
  hap_err_clear(&err);
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){1}, 0, out, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "0 devices"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){1}, -2, out, NULL), HAP_EINVAL);
  cr_assert_eq(hap_shard_lengths(10, 4, (double[]){1}, 1, out, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "granule 4"), "%s", err.msg);
  cr_assert_eq(hap_shard_lengths(10, 0, (double[]){1}, 1, out, NULL), HAP_EINVAL);
  cr_assert_eq(hap_shard_lengths(-1, 1, (double[]){1}, 1, out, NULL), HAP_EINVAL);
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){NAN, 1}, 2, out, NULL), HAP_EINVAL);
  cr_assert_eq(hap_shard_lengths(10, 1, (double[]){INFINITY, 1}, 2, out, NULL), HAP_EINVAL);
}

/* ---- the zoo -----------------------------------------------------------------------------------
 */

static bool same_variant(const hap_variant *a, const hap_variant *b) {
  return memcmp(a->in, b->in, sizeof a->in) == 0 && memcmp(a->out, b->out, sizeof a->out) == 0 &&
         a->granule == b->granule && a->flags == b->flags && a->once == b->once &&
         strcmp(a->name, b->name) == 0;
}

/* Structure every variant must have: replicated first, layouts in range, one sharded extent
 * divisible by the granule, `once` only on Identity inputs, Reduce only on float tensors, no
 * duplicates, and local shapes at a few lengths. */
static void check_structure(hap_op op, const hap_op_io *io, const hap_variant *vs, int n,
                            const char *where) {
  for (int t = 0; t < io->n_in; t++)
    cr_assert_eq(vs[0].in[t], LI, "%s: variant 0 is not replicated", where);
  cr_assert_str_eq(vs[0].name, "replicated");
  for (int i = 0; i < n; i++) {
    const hap_variant *v = &vs[i];
    cr_assert(v->name && v->name[0], "%s: variant %d has no name", where);
    int64_t ext = 0;
    for (int t = 0; t < io->n_in + io->n_out; t++) {
      hap_layout lay = t < io->n_in ? v->in[t] : v->out[t - io->n_in];
      const hap_shape *s = t < io->n_in ? &io->in[t] : &io->out[t - io->n_in];
      hap_dtype dt = t < io->n_in ? io->in_dtype[t] : io->out_dtype[t - io->n_in];
      cr_assert(lay >= LR && lay < s->rank, "%s '%s': tensor %d layout %d", where, v->name, t, lay);
      if (lay == LR)
        cr_assert(hap_dtype_is_float(dt), "%s '%s': Reduce on %s", where, v->name,
                  hap_dtype_name(dt));
      if (lay >= 0) {
        cr_assert(ext == 0 || ext == s->dims[lay], "%s '%s': two extents", where, v->name);
        ext = s->dims[lay];
      }
    }
    for (int t = 0; t < io->n_in; t++)
      if (v->once & (1u << t))
        cr_assert(v->in[t] == LI && (v->flags & HAP_VARIANT_BIAS_ONCE), "%s '%s'", where, v->name);
    cr_assert(v->granule >= 1 && (ext == 0 || ext % v->granule == 0), "%s '%s'", where, v->name);
    cr_assert_eq(ext, hap_variant_extent(io, v));
    for (int j = 0; j < i; j++)
      cr_assert(!(memcmp(v->in, vs[j].in, sizeof v->in) == 0 &&
                  memcmp(v->out, vs[j].out, sizeof v->out) == 0),
                "%s: variants %d and %d have the same layouts", where, j, i);
    int64_t lens[3] = {0, v->granule, ext};
    for (int k = 0; k < (ext ? 3 : 1); k++) {
      hap_attrs la;
      hap_op_io lio;
      hap_err err = {0};
      cr_assert_eq(hap_op_local_io(op, io, v, lens[k], &la, &lio, &err), HAP_OK, "%s '%s': %s",
                   where, v->name, err.msg);
      if (lens[k] == ext) { /* the whole index on one device: the full application */
        for (int t = 0; t < io->n_in; t++)
          cr_assert(hap_shape_eq(&lio.in[t], &io->in[t]));
        hap_op_cost a, b;
        hap_op_cost_of(op, io, &a);
        hap_op_cost_of(op, &lio, &b);
        cr_assert_eq(a.fwd_flops, b.fwd_flops, "%s '%s'", where, v->name);
      }
    }
  }
}

Test(sharding_zoo, every_node_has_sound_structure) {
  static const char *const specs[] = {
      "mlp:layers=2",
      "bert-base:layers=1",
      "bert-moe:layers=2",
      "vit:layers=1",
      "vgg19",
      "gpt:layers=1",
      "gpt:layers=1,granularity=fine",
  };
  bool seen[HAP_OP_COUNT] = {false};
  for (size_t m = 0; m < sizeof specs / sizeof specs[0]; m++) {
    hap_graph *g = NULL;
    hap_err err = {0};
    cr_assert_eq(hap_zoo_build(specs[m], &g, &err), HAP_OK, "%s: %s", specs[m], err.msg);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      hap_op_io io;
      hap_graph_node_io(g, i, &io);
      hap_variant a[HAP_MAX_VARIANTS], b[HAP_MAX_VARIANTS];
      int na = hap_op_variants(g->nodes[i].op, &io, a, HAP_MAX_VARIANTS);
      int nb = hap_op_variants(g->nodes[i].op, &io, b, HAP_MAX_VARIANTS);
      char where[160];
      snprintf(where, sizeof where, "%s node %s (%s)", specs[m], g->nodes[i].name,
               hap_op_name(g->nodes[i].op));
      cr_assert(na >= 1 && na < HAP_MAX_VARIANTS, "%s: %d variants", where, na);
      cr_assert_eq(na, nb, "%s: the count is not stable", where);
      for (int k = 0; k < na; k++)
        cr_assert(same_variant(&a[k], &b[k]), "%s: variant %d differs between calls", where, k);
      check_structure(g->nodes[i].op, &io, a, na, where);
      seen[g->nodes[i].op] = true;
    }
    hap_graph_destroy(g);
  }
  /* ops no zoo model uses, at typical shapes */
  ocase c;
  hap_variant vs[HAP_MAX_VARIANTS];
  begin(&c, HAP_OP_BMM);
  in(&c, SHAPE(96, 128, 64));
  in(&c, SHAPE(96, 64, 128));
  check_structure(c.op, &c.io, vs, variants_of(&c, vs), "bmm");
  seen[c.op] = true;
  begin(&c, HAP_OP_DIV);
  in(&c, SHAPE(8, 128, 768));
  in(&c, SHAPE(8, 128, 1));
  check_structure(c.op, &c.io, vs, variants_of(&c, vs), "div");
  seen[c.op] = true;
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 1);
  set_i(&c, "start", 0);
  set_i(&c, "length", 64);
  in(&c, SHAPE(8, 128, 768));
  check_structure(c.op, &c.io, vs, variants_of(&c, vs), "narrow");
  seen[c.op] = true;
  for (int op = 0; op < HAP_OP_COUNT; op++)
    cr_assert(seen[op], "op %s is not covered", hap_op_name((hap_op)op));
}

/* ---- re-sharding between two splits ------------------------------------------------------------
 */

/* hap_shard_moved against a count unit by unit: a unit whose owner differs between the two splits
 * leaves its old owner and reaches its new one. */
Test(sharding_lengths, moved_is_the_difference_of_the_splits) {
  int64_t from[3] = {4, 4, 4}, to[3] = {6, 3, 3}, moved[3];
  hap_shard_moved(from, to, 3, moved); /* units 4,5 go 1 -> 0, 8 goes 2 -> 1 */
  cr_assert(moved[0] == 2 && moved[1] == 2 && moved[2] == 1, "%lld %lld %lld", (long long)moved[0],
            (long long)moved[1], (long long)moved[2]);
  hap_shard_moved(from, from, 3, moved);
  cr_assert(moved[0] == 0 && moved[1] == 0 && moved[2] == 0);
  for (int t = 0; t < 500; t++) {
    int n = 1 + (int)(next_u64() % 8);
    int64_t a[8], b[8], got[8], sent[8] = {0}, received[8] = {0}, ext = 0, ext_b = 0;
    for (int i = 0; i < n; i++)
      ext += a[i] = (int64_t)(next_u64() % 7);
    for (int i = 0; i + 1 < n; i++) /* b: another split of the same extent */
      ext_b += b[i] = ext - ext_b > 0 ? (int64_t)(next_u64() % (uint64_t)(ext - ext_b + 1)) : 0;
    b[n - 1] = ext - ext_b;
    hap_shard_moved(a, b, n, got);
    for (int64_t u = 0; u < ext; u++) {
      int oa = 0, ob = 0;
      for (int64_t end = a[0]; u >= end; end += a[++oa]) {
      }
      for (int64_t end = b[0]; u >= end; end += b[++ob]) {
      }
      if (oa != ob) {
        sent[oa]++;
        received[ob]++;
      }
    }
    for (int i = 0; i < n; i++)
      cr_assert_eq(got[i], sent[i] > received[i] ? sent[i] : received[i], "case %d part %d", t, i);
  }
}
