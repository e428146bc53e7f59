/* sharding.c — the sharding variants of every op (docs/sharding.md), local shapes, shard lengths.
 * Three generators cover the op table:
 *  - an index signature (a letter per dim of each operand and of the output) for product-like ops
 *    (linear, matmul, bmm, einsum, conv2d, embedding, binary elementwise, cls_append): sharding an
 *    index Gathers every tensor that has it, and an index the output lacks gives Reduce;
 *  - a dim map (where a Gather of each input dim goes) for one-input ops;
 *  - explicit rows for attention, gating and the losses. */
#include "model/sharding.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

/* ---- variant list ---------------------------------------------------------------------------- */

typedef struct vlist {
  hap_variant *v;
  int n, max;
  uint8_t flags;     /* added to every variant */
  hap_variant spill; /* written when the list is full, then dropped */
} vlist;

/* Append a variant with every tensor Identity. */
static hap_variant *push(vlist *l, const char *name, uint8_t flags) {
  hap_variant *v = l->n < l->max ? &l->v[l->n++] : &l->spill;
  memset(v, 0, sizeof *v);
  memset(v->in, HAP_LAYOUT_IDENTITY, sizeof v->in);
  memset(v->out, HAP_LAYOUT_IDENTITY, sizeof v->out);
  v->granule = 1;
  v->flags = (uint8_t)(flags | l->flags);
  v->name = name;
  return v;
}

static void set_once(hap_variant *v, int input) {
  v->once = (uint8_t)(v->once | (1u << input));
  v->flags |= HAP_VARIANT_BIAS_ONCE;
}

static const char PASSTHROUGH[] = "partial-sum passthrough";

/* ---- index signatures ------------------------------------------------------------------------ */

/* Where an index occurs: in both operands (and the output or not), in one operand only. */
enum { ROLE_SHARED, ROLE_A_OUT, ROLE_B_OUT, ROLE_CONTRACT, ROLE_A_SUM, ROLE_B_SUM, ROLE_COUNT };

typedef struct psig {
  int n_in;                     /* operands a, b and an optional addend (indices: output ones) */
  char ix[3][HAP_MAX_DIMS + 1]; /* a letter per dim; '.' never sharded (broadcast, spatial) */
  char out[HAP_MAX_DIMS + 1];
  const char *names[ROLE_COUNT]; /* NULL: the role is not offered */
  uint8_t role_flags[ROLE_COUNT];
  const char *upper_name;          /* name for the uppercase (batch-like) letters */
  const char *const *letter_names; /* names of some lowercase letters (einsum), or NULL */
  int n_pass;
  struct {
    uint8_t reduce, once; /* input bits: Reduce inputs, inputs applied once */
  } pass[3];
} psig;

static int pos_of(const char *ix, char c) {
  const char *p = strchr(ix, c);
  return p ? (int)(p - ix) : -1;
}

static void psig_index(vlist *l, const psig *g, char c) {
  int pa = pos_of(g->ix[0], c), pb = pos_of(g->ix[1], c), po = pos_of(g->out, c);
  if (pa < 0 && pb < 0)
    return;
  int role;
  if (po >= 0)
    role = pa >= 0 && pb >= 0 ? ROLE_SHARED : (pa >= 0 ? ROLE_A_OUT : ROLE_B_OUT);
  else
    role = pa >= 0 && pb >= 0 ? ROLE_CONTRACT : (pa >= 0 ? ROLE_A_SUM : ROLE_B_SUM);
  const char *name = g->names[role];
  if (c >= 'A' && c <= 'Z' && g->upper_name)
    name = g->upper_name;
  if (po >= 0 && c >= 'a' && c <= 'z' && g->letter_names && g->letter_names[c - 'a'])
    name = g->letter_names[c - 'a'];
  if (name == NULL)
    return;
  hap_variant *v = push(l, name, g->role_flags[role]);
  for (int k = 0; k < g->n_in; k++) {
    int p = pos_of(g->ix[k], c);
    if (p >= 0)
      v->in[k] = (hap_layout)p;
  }
  if (po >= 0) {
    v->out[0] = (hap_layout)po;
  } else {
    v->out[0] = HAP_LAYOUT_REDUCE;
    if (g->n_in > 2)
      set_once(v, 2);
  }
}

/* Output indices in output order, then the summed ones, then the passthroughs. */
static void psig_variants(vlist *l, const psig *g) {
  for (int i = 0; g->out[i]; i++)
    if (g->out[i] != '.')
      psig_index(l, g, g->out[i]);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; g->ix[k][i]; i++) {
      char c = g->ix[k][i];
      if (c != '.' && pos_of(g->out, c) < 0 && (k == 0 || pos_of(g->ix[0], c) < 0))
        psig_index(l, g, c);
    }
  }
  for (int p = 0; p < g->n_pass; p++) {
    hap_variant *v = push(l, PASSTHROUGH, 0);
    for (int k = 0; k < g->n_in; k++) {
      if (g->pass[p].reduce & (1u << k))
        v->in[k] = HAP_LAYOUT_REDUCE;
      if (g->pass[p].once & (1u << k))
        set_once(v, k);
    }
    v->out[0] = HAP_LAYOUT_REDUCE;
  }
}

/* Letters for the dims of `s` aligned right against `out` (broadcasting): the output's letter
 * where the extents agree, '.' where s broadcasts. */
static void align_letters(const hap_shape *s, int skip_tail, const hap_shape *out, char *ix) {
  int n = s->rank - skip_tail, on = out->rank - skip_tail;
  for (int d = 0; d < n; d++) {
    int od = d + on - n;
    ix[d] = s->dims[d] == out->dims[od] ? (char)('A' + od) : '.';
  }
}

static void sig_linear(const hap_op_io *io, psig *g) {
  int r = io->in[0].rank;
  for (int d = 0; d < r - 1; d++)
    g->ix[0][d] = g->out[d] = (char)('A' + d);
  g->ix[0][r - 1] = 'k';
  g->out[r - 1] = 'n';
  g->ix[1][0] = 'n';
  g->ix[1][1] = 'k';
  g->ix[2][0] = 'n';
  g->n_in = io->n_in;
  g->upper_name = "data-parallel";
  g->names[ROLE_B_OUT] = "column-parallel";
  g->names[ROLE_CONTRACT] = "row-parallel";
  g->n_pass = 1;
  g->pass[0].reduce = 1u << 0;
  g->pass[0].once = io->n_in > 2 ? 1u << 2 : 0;
}

/* matmul and bmm: a [..., m, k] @ b [..., k, n], batch dims broadcast. */
static void sig_matmul(const hap_op_io *io, psig *g) {
  const hap_shape *o = &io->out[0];
  int rb = o->rank - 2;
  for (int d = 0; d < rb; d++)
    g->out[d] = (char)('A' + d);
  g->out[rb] = 'm';
  g->out[rb + 1] = 'n';
  for (int k = 0; k < 2; k++) {
    const hap_shape *x = &io->in[k];
    align_letters(x, 2, o, g->ix[k]);
    g->ix[k][x->rank - 2] = k == 0 ? 'm' : 'k';
    g->ix[k][x->rank - 1] = k == 0 ? 'k' : 'n';
  }
  g->n_in = 2;
  g->upper_name = "batch-parallel";
  g->names[ROLE_A_OUT] = "m-parallel";
  g->names[ROLE_B_OUT] = "n-parallel";
  g->names[ROLE_CONTRACT] = "k-parallel";
  g->n_pass = 2;
  g->pass[0].reduce = 1u << 0;
  g->pass[1].reduce = 1u << 1;
}

/* The MoE equations use b for the batch and e for the experts. */
static const char *const einsum_letter_names[26] = {['b' - 'a'] = "data-parallel",
                                                    ['e' - 'a'] = "expert-parallel"};

static void sig_einsum(const hap_op_io *io, psig *g) {
  const char *eq = hap_attr_s(io->attrs, hap_op_attr_index(HAP_OP_EINSUM, "equation"));
  char *dst[3] = {g->ix[0], g->ix[1], g->out};
  int part = 0, n = 0;
  for (const char *p = eq; *p && part < 3; p++) {
    if (*p >= 'a' && *p <= 'z') {
      if (n < HAP_MAX_DIMS)
        dst[part][n++] = *p;
    } else if (*p == ',' || *p == '>') {
      part++;
      n = 0;
    }
  }
  g->n_in = 2;
  g->names[ROLE_SHARED] = "batch-parallel";
  g->names[ROLE_A_OUT] = "left-index-parallel";
  g->names[ROLE_B_OUT] = "right-index-parallel";
  g->names[ROLE_CONTRACT] = "contraction-parallel";
  g->names[ROLE_A_SUM] = g->names[ROLE_B_SUM] = "summed-index-parallel";
  g->letter_names = einsum_letter_names;
  g->n_pass = 2;
  g->pass[0].reduce = 1u << 0;
  g->pass[1].reduce = 1u << 1;
}

/* conv2d: spatial dims never shard (a slice would need its neighbours' halo). */
static void sig_conv2d(const hap_op_io *io, psig *g) {
  memcpy(g->ix[0], "nc..", 4);
  memcpy(g->ix[1], "oc..", 4);
  g->ix[2][0] = 'o';
  memcpy(g->out, "no..", 4);
  g->n_in = io->n_in;
  g->names[ROLE_A_OUT] = "data-parallel";
  g->names[ROLE_B_OUT] = "output-channel-parallel";
  g->names[ROLE_CONTRACT] = "input-channel-parallel";
  g->n_pass = 1;
  g->pass[0].reduce = 1u << 0;
  g->pass[0].once = io->n_in > 2 ? 1u << 2 : 0;
}

/* embedding(idx, W [v, d]): a lookup is a product with one-hot(idx) summed over v. */
static void sig_embedding(const hap_op_io *io, psig *g) {
  int r = io->in[0].rank;
  for (int d = 0; d < r; d++)
    g->ix[0][d] = g->out[d] = (char)('A' + d);
  g->out[r] = 'd';
  g->ix[1][0] = 'v';
  g->ix[1][1] = 'd';
  g->n_in = 2;
  g->upper_name = "data-parallel";
  g->names[ROLE_B_OUT] = "embedding-dim-parallel";
  g->names[ROLE_B_SUM] = "vocab-parallel";
  g->role_flags[ROLE_B_SUM] = HAP_VARIANT_LOCAL_ROWS;
}

/* add, sub, mul, div with two inputs: broadcast dims never shard. */
static void sig_binary(hap_op op, const hap_op_io *io, psig *g) {
  const hap_shape *o = &io->out[0];
  for (int d = 0; d < o->rank; d++)
    g->out[d] = (char)('A' + d);
  align_letters(&io->in[0], 0, o, g->ix[0]);
  align_letters(&io->in[1], 0, o, g->ix[1]);
  g->n_in = 2;
  g->upper_name = "dim-parallel";
  switch (op) {
  case HAP_OP_ADD:
  case HAP_OP_SUB: /* linear in both; an Identity addend is applied once */
    g->n_pass = 3;
    g->pass[0].reduce = 3;
    g->pass[1].reduce = 1u << 0;
    g->pass[1].once = 1u << 1;
    g->pass[2].reduce = 1u << 1;
    g->pass[2].once = 1u << 0;
    break;
  case HAP_OP_MUL: /* linear in each */
    g->n_pass = 2;
    g->pass[0].reduce = 1u << 0;
    g->pass[1].reduce = 1u << 1;
    break;
  default: /* div: linear in the dividend */
    g->n_pass = 1;
    g->pass[0].reduce = 1u << 0;
    break;
  }
}

/* cls_append(x [n, s, h], cls [1, 1, h]): the appended position never shards. */
static void sig_cls_append(psig *g) {
  memcpy(g->ix[0], "n.h", 3);
  memcpy(g->ix[1], "..h", 3);
  memcpy(g->out, "n.h", 3);
  g->n_in = 2;
  g->names[ROLE_A_OUT] = "data-parallel";
  g->names[ROLE_SHARED] = "hidden-parallel";
  g->n_pass = 1;
  g->pass[0].reduce = 1u << 0;
  g->pass[0].once = 1u << 1;
}

/* ---- dim maps (one-input ops) ---------------------------------------------------------------- */

enum { DM_NONE = -1, DM_REDUCE = -2 };

typedef struct dmap {
  int8_t to[HAP_MAX_DIMS]; /* per input dim: the output dim its Gather becomes, or DM_* */
  bool linear;             /* Reduce -> Reduce */
  uint8_t reduce_flags;    /* on Gather -> Reduce */
  uint8_t pass_flags;      /* on Reduce -> Reduce */
} dmap;

static void dmap_init(dmap *m, int rank, bool linear) {
  memset(m, 0, sizeof *m);
  for (int d = 0; d < HAP_MAX_DIMS; d++)
    m->to[d] = d < rank ? (int8_t)d : DM_NONE;
  m->linear = linear;
}

static void dmap_variants(vlist *l, const hap_op_io *io, const dmap *m) {
  int r = io->in[0].rank;
  for (int od = 0; od < io->out[0].rank; od++) {
    for (int d = 0; d < r; d++) {
      if (m->to[d] != od)
        continue;
      hap_variant *v = push(l, "dim-parallel", 0);
      v->in[0] = (hap_layout)d;
      v->out[0] = (hap_layout)od;
    }
  }
  for (int d = 0; d < r; d++) {
    if (m->to[d] != DM_REDUCE)
      continue;
    hap_variant *v = push(l, "partial reduction", m->reduce_flags);
    v->in[0] = (hap_layout)d;
    v->out[0] = HAP_LAYOUT_REDUCE;
  }
  if (m->linear && hap_dtype_is_float(io->in_dtype[0])) {
    hap_variant *v = push(l, PASSTHROUGH, m->pass_flags);
    v->in[0] = v->out[0] = HAP_LAYOUT_REDUCE;
  }
}

static int64_t attr_i(hap_op op, const hap_op_io *io, const char *name) {
  return hap_attr_i(io->attrs, hap_op_attr_index(op, name));
}

static int norm_dim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }

/* sum, mean: reduced dims give Reduce, the others move to their output position. */
static void dmap_reduce(hap_op op, const hap_op_io *io, dmap *m) {
  const hap_shape *x = &io->in[0];
  const hap_attr_value *dims = &io->attrs->v[hap_op_attr_index(op, "dims")];
  bool keep = attr_i(op, io, "keepdim") != 0;
  bool reduced[HAP_MAX_DIMS] = {false};
  for (int d = 0; d < x->rank; d++)
    reduced[d] = dims->u.ints.n == 0;
  for (int k = 0; k < dims->u.ints.n; k++)
    reduced[norm_dim(dims->u.ints.v[k], x->rank)] = true;
  dmap_init(m, 0, true);
  int od = 0;
  for (int d = 0; d < x->rank; d++) {
    m->to[d] = reduced[d] ? DM_REDUCE : (int8_t)od;
    if (!reduced[d] || keep)
      od++;
  }
  if (op == HAP_OP_MEAN)
    m->reduce_flags = HAP_VARIANT_GLOBAL_COUNT;
}

/* reshape: input dim d becomes output dim d' when their extents agree and the dims before them
 * have the same product: the flat index splits into the same (outer, d, inner) on both sides, so
 * a slice of d stays a slice of d'. */
static void dmap_reshape(const hap_op_io *io, dmap *m) {
  const hap_shape *x = &io->in[0], *y = &io->out[0];
  dmap_init(m, 0, true);
  int64_t outer_x = 1;
  for (int d = 0; d < x->rank; d++) {
    int64_t outer_y = 1;
    for (int e = 0; e < y->rank && outer_y <= outer_x; e++) {
      if (outer_y == outer_x && y->dims[e] == x->dims[d]) {
        m->to[d] = (int8_t)e;
        break;
      }
      outer_y *= y->dims[e];
    }
    outer_x *= x->dims[d];
  }
}

/* flatten(s, e): dims before s stay, dims after e move down by e - s. */
static void dmap_flatten(const hap_op_io *io, dmap *m) {
  int r = io->in[0].rank, rr = r ? r : 1;
  int s = norm_dim(attr_i(HAP_OP_FLATTEN, io, "start_dim"), rr);
  int e = norm_dim(attr_i(HAP_OP_FLATTEN, io, "end_dim"), rr);
  dmap_init(m, 0, true);
  for (int d = 0; d < r; d++)
    m->to[d] = d < s ? (int8_t)d : d > e ? (int8_t)(d - (e - s)) : DM_NONE;
}

static void dmap_permute(const hap_op_io *io, dmap *m) {
  const hap_attr_value *p = &io->attrs->v[hap_op_attr_index(HAP_OP_PERMUTE, "dims")];
  int r = io->in[0].rank;
  dmap_init(m, 0, true);
  for (int i = 0; i < r; i++)
    m->to[norm_dim(p->u.ints.v[i], r)] = (int8_t)i;
}

/* Ops whose variants the dim map describes; false for the others. */
static bool op_dmap(hap_op op, const hap_op_io *io, dmap *m) {
  int r = io->in[0].rank;
  switch (op) {
  case HAP_OP_RELU:
  case HAP_OP_GELU:
  case HAP_OP_SIGMOID:
  case HAP_OP_TANH:
  case HAP_OP_RSQRT:
  case HAP_OP_POW:
  case HAP_OP_MAX_POOL2D: /* pools: batch and channels only */
  case HAP_OP_ADAPTIVE_AVG_POOL2D:
  case HAP_OP_LAYER_NORM:
    dmap_init(m, r, op == HAP_OP_ADAPTIVE_AVG_POOL2D);
    if (op == HAP_OP_MAX_POOL2D || op == HAP_OP_ADAPTIVE_AVG_POOL2D)
      m->to[2] = m->to[3] = DM_NONE;
    if (op == HAP_OP_LAYER_NORM)
      for (int64_t d = r - attr_i(op, io, "normalized_dims"); d < r; d++)
        m->to[d] = DM_NONE;
    return true;
  case HAP_OP_DROPOUT: /* linear for a fixed mask */
  case HAP_OP_ADD:     /* one input: x op scalar; a scalar addend is applied once */
  case HAP_OP_SUB:
  case HAP_OP_MUL:
  case HAP_OP_DIV:
    dmap_init(m, r, true);
    if (op == HAP_OP_ADD || op == HAP_OP_SUB)
      m->pass_flags = HAP_VARIANT_BIAS_ONCE;
    return true;
  case HAP_OP_SOFTMAX:
  case HAP_OP_LOG_SOFTMAX:
    dmap_init(m, r, false);
    m->to[norm_dim(attr_i(op, io, "dim"), r)] = DM_NONE;
    return true;
  case HAP_OP_NARROW:
    dmap_init(m, r, true);
    m->to[norm_dim(attr_i(op, io, "dim"), r)] = DM_NONE;
    return true;
  case HAP_OP_TRANSPOSE: {
    dmap_init(m, r, true);
    int a = norm_dim(attr_i(op, io, "dim0"), r), b = norm_dim(attr_i(op, io, "dim1"), r);
    m->to[a] = (int8_t)b;
    m->to[b] = (int8_t)a;
    return true;
  }
  case HAP_OP_CLS_SELECT: /* [n, s, h] -> [n, h]: the selected position never shards */
    dmap_init(m, r, true);
    m->to[1] = DM_NONE;
    m->to[2] = 1;
    return true;
  case HAP_OP_SUM:
  case HAP_OP_MEAN: dmap_reduce(op, io, m); return true;
  case HAP_OP_RESHAPE: dmap_reshape(io, m); return true;
  case HAP_OP_FLATTEN: dmap_flatten(io, m); return true;
  case HAP_OP_PERMUTE: dmap_permute(io, m); return true;
  default: return false;
  }
}

/* ---- explicit rows ----------------------------------------------------------------------------
 */

/* multi_head_attention inputs, in the op table's order. */
enum { MHA_Q, MHA_K, MHA_V, MHA_W_IN, MHA_B_IN, MHA_W_OUT, MHA_B_OUT, MHA_MASK };

/* Batch rows and query positions are independent; heads are independent up to the output
 * projection, which sums over them (so head-parallel gives Reduce, its bias applied once). Keys
 * and values never shard along S: the softmax normalises over it. */
static void mha_variants(vlist *l, const hap_op_io *io) {
  hap_variant *v = push(l, "data-parallel", 0);
  v->in[MHA_Q] = v->in[MHA_K] = v->in[MHA_V] = 0;
  v->out[0] = 0;
  v = push(l, "query-sequence-parallel", 0);
  v->in[MHA_Q] = 1;
  if (io->n_in > MHA_MASK)
    v->in[MHA_MASK] = 0;
  v->out[0] = 1;
  v = push(l, "head-parallel", 0);
  v->in[MHA_W_IN] = v->in[MHA_B_IN] = v->in[MHA_W_OUT] = 1;
  set_once(v, MHA_B_OUT);
  v->out[0] = HAP_LAYOUT_REDUCE;
  v->granule = io->in[MHA_W_IN].dims[1] / attr_i(HAP_OP_MULTI_HEAD_ATTENTION, io, "heads");
}

/* top2_gating: batch rows only (expert slots come from a cumulative sum over the sequence). */
static void top2_variants(vlist *l) {
  hap_variant *v = push(l, "data-parallel", 0);
  v->in[0] = 0;
  v->out[0] = v->out[1] = 0;
}

/* nll_loss, cross_entropy: any dim but the class dim 1; the output is a partial sum. */
static void loss_variants(hap_op op, vlist *l, const hap_op_io *io) {
  const char *red = hap_attr_s(io->attrs, hap_op_attr_index(op, "reduction"));
  uint8_t f = strcmp(red, "mean") == 0 ? HAP_VARIANT_GLOBAL_COUNT : 0;
  for (int d = 0; d < io->in[0].rank; d++) {
    if (d == 1)
      continue;
    hap_variant *v = push(l, d == 0 ? "data-parallel" : "position-parallel", f);
    v->in[0] = (hap_layout)d;
    v->in[1] = (hap_layout)(d == 0 ? 0 : d - 1);
    v->out[0] = HAP_LAYOUT_REDUCE;
  }
}

/* ---- variants ---------------------------------------------------------------------------------
 */

/* Ops whose index signature describes their variants; false for the others. */
static bool op_psig(hap_op op, const hap_op_io *io, psig *g) {
  memset(g, 0, sizeof *g);
  switch (op) {
  case HAP_OP_LINEAR: sig_linear(io, g); return true;
  case HAP_OP_MATMUL:
  case HAP_OP_BMM: sig_matmul(io, g); return true;
  case HAP_OP_EINSUM: sig_einsum(io, g); return true;
  case HAP_OP_CONV2D: sig_conv2d(io, g); return true;
  case HAP_OP_EMBEDDING: sig_embedding(io, g); return true;
  case HAP_OP_CLS_APPEND: sig_cls_append(g); return true;
  case HAP_OP_ADD:
  case HAP_OP_SUB:
  case HAP_OP_MUL:
  case HAP_OP_DIV:
    if (io->n_in < 2)
      return false;
    sig_binary(op, io, g);
    return true;
  default: return false;
  }
}

/* Dropout masks (of dropout, and of attention weights) must not depend on the layout. */
static uint8_t base_flags(hap_op op, const hap_op_io *io) {
  const char *p = op == HAP_OP_DROPOUT ? "p" : op == HAP_OP_MULTI_HEAD_ATTENTION ? "dropout" : NULL;
  if (p && hap_attr_f(io->attrs, hap_op_attr_index(op, p)) > 0)
    return HAP_VARIANT_GLOBAL_MASK;
  return 0;
}

int hap_op_variants(hap_op op, const hap_op_io *io, hap_variant *out, int max) {
  if ((unsigned)op >= HAP_OP_COUNT || out == NULL || max <= 0)
    return 0;
  vlist l = {.v = out, .max = max, .flags = base_flags(op, io)};
  push(&l, "replicated", 0);
  psig g;
  dmap m;
  if (op_psig(op, io, &g))
    psig_variants(&l, &g);
  else if (op_dmap(op, io, &m))
    dmap_variants(&l, io, &m);
  else if (op == HAP_OP_MULTI_HEAD_ATTENTION)
    mha_variants(&l, io);
  else if (op == HAP_OP_TOP2_GATING)
    top2_variants(&l);
  else if (op == HAP_OP_NLL_LOSS || op == HAP_OP_CROSS_ENTROPY)
    loss_variants(op, &l, io);
  return l.n;
}

/* ---- local shapes -----------------------------------------------------------------------------
 */

/* Tensor t of an application: inputs first, then outputs. */
static hap_shape *shape_at(hap_op_io *io, int t) {
  return t < io->n_in ? &io->in[t] : &io->out[t - io->n_in];
}
static hap_layout layout_at(const hap_variant *v, int t, int n_in) {
  return t < n_in ? v->in[t] : v->out[t - n_in];
}

int64_t hap_variant_extent(const hap_op_io *io, const hap_variant *v) {
  for (int t = 0; t < io->n_in + io->n_out; t++) {
    hap_layout lay = layout_at(v, t, io->n_in);
    const hap_shape *s = t < io->n_in ? &io->in[t] : &io->out[t - io->n_in];
    if (lay >= 0 && lay < s->rank)
      return s->dims[lay];
  }
  return 0;
}

/* Layouts in range, one extent for every Gather, a granule that divides it. */
static hap_status check_variant(hap_op op, const hap_op_io *io, const hap_variant *v, int64_t *ext,
                                hap_err *err) {
  *ext = 0;
  for (int t = 0; t < io->n_in + io->n_out; t++) {
    hap_layout lay = layout_at(v, t, io->n_in);
    const hap_shape *s = t < io->n_in ? &io->in[t] : &io->out[t - io->n_in];
    if (lay < HAP_LAYOUT_REDUCE || lay >= s->rank)
      return hap_err_set(err, HAP_EINVAL,
                         "%s variant '%s': tensor %d has layout %d, expected -2..%d",
                         hap_op_name(op), v->name, t, lay, s->rank - 1);
    if (lay < 0)
      continue;
    if (*ext != 0 && s->dims[lay] != *ext)
      return hap_err_set(err, HAP_EINVAL,
                         "%s variant '%s': sharded dims have extents %lld and %lld, expected one",
                         hap_op_name(op), v->name, (long long)*ext, (long long)s->dims[lay]);
    *ext = s->dims[lay];
  }
  if (v->granule < 1 || (*ext != 0 && *ext % v->granule != 0))
    return hap_err_set(err, HAP_EINVAL, "%s variant '%s': granule %lld does not divide extent %lld",
                       hap_op_name(op), v->name, (long long)v->granule, (long long)*ext);
  return HAP_OK;
}

/* The full application with every Gather dim set to len and the attributes that follow it. */
static void apply_len(hap_op op, const hap_op_io *full, const hap_variant *v, int64_t len,
                      hap_attrs *attrs, hap_op_io *io) {
  *io = *full;
  *attrs = *full->attrs;
  io->attrs = attrs;
  for (int t = 0; t < io->n_in + io->n_out; t++) {
    hap_layout lay = layout_at(v, t, io->n_in);
    if (lay >= 0)
      shape_at(io, t)->dims[lay] = len;
  }
  if (op == HAP_OP_RESHAPE && v->out[0] >= 0) {
    hap_attr_value *shape = &attrs->v[hap_op_attr_index(op, "shape")];
    if (shape->u.ints.v[v->out[0]] != -1)
      shape->u.ints.v[v->out[0]] = len;
  }
  if (op == HAP_OP_MULTI_HEAD_ATTENTION && v->in[MHA_W_IN] >= 0)
    attrs->v[hap_op_attr_index(op, "heads")].u.i = len / v->granule;
}

hap_status hap_op_local_io(hap_op op, const hap_op_io *full, const hap_variant *v, int64_t len,
                           hap_attrs *local_attrs, hap_op_io *local, hap_err *err) {
  int64_t ext = 0;
  HAP_TRY(check_variant(op, full, v, &ext, err));
  if (ext == 0)
    len = 0;
  else if (len < 0 || len > ext || len % v->granule != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "%s variant '%s': local length %lld, expected a multiple of %lld in 0..%lld",
                       hap_op_name(op), v->name, (long long)len, (long long)v->granule,
                       (long long)ext);
  /* Check with the op's own inference, at the granule for an empty shard. */
  hap_attrs probe_attrs;
  hap_op_io probe, check;
  apply_len(op, full, v, len > 0 ? len : v->granule, &probe_attrs, &probe);
  check = probe;
  hap_err why = {0};
  if (hap_op_infer(op, &check, &why) != HAP_OK)
    return hap_err_set(err, HAP_EINVAL, "%s variant '%s' at local length %lld: %s", hap_op_name(op),
                       v->name, (long long)len, why.msg);
  for (int o = 0; o < probe.n_out; o++) {
    if (!hap_shape_eq(&check.out[o], &probe.out[o]) || check.out_dtype[o] != probe.out_dtype[o]) {
      char a[160], b[160];
      return hap_err_set(err, HAP_EINVAL,
                         "%s variant '%s': local output %d is %s, the layouts give %s",
                         hap_op_name(op), v->name, o, hap_shape_str(&check.out[o], a, sizeof a),
                         hap_shape_str(&probe.out[o], b, sizeof b));
    }
  }
  apply_len(op, full, v, len, local_attrs, local);
  return HAP_OK;
}

/* ---- shard lengths ----------------------------------------------------------------------------
 */

bool hap_ratio_rows_same(const double *ratios, int32_t n_segments, int32_t n, int32_t a,
                         int32_t b) {
  if (a == b)
    return true;
  if (a < 0 || b < 0 || a >= n_segments || b >= n_segments)
    return false;
  return memcmp(ratios + (size_t)a * (size_t)n, ratios + (size_t)b * (size_t)n,
                (size_t)n * sizeof *ratios) == 0;
}

void hap_shard_moved(const int64_t *from, const int64_t *to, int n, int64_t *moved) {
  int64_t a0 = 0, b0 = 0; /* where device i's part starts under from / to */
  for (int i = 0; i < n; i++) {
    int64_t a1 = a0 + from[i], b1 = b0 + to[i];
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    int64_t kept = hi > lo ? hi - lo : 0;
    int64_t sent = from[i] - kept, received = to[i] - kept;
    moved[i] = sent > received ? sent : received;
    a0 = a1;
    b0 = b1;
  }
}

hap_status hap_shard_lengths(int64_t len, int64_t granule, const double *ratios, int n,
                             int64_t *out, hap_err *err) {
  if (n <= 0)
    return hap_err_set(err, HAP_EINVAL, "shard lengths: %d devices, expected at least 1", n);
  if (granule < 1 || len < 0 || len % granule != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "shard lengths: length %lld and granule %lld, expected a granule >= 1 that "
                       "divides the length",
                       (long long)len, (long long)granule);
  double sum = 0;
  for (int i = 0; i < n; i++) {
    if (!isfinite(ratios[i]) || ratios[i] < 0)
      return hap_err_set(err, HAP_EINVAL, "shard lengths: ratio %d is %g, expected >= 0", i,
                         ratios[i]);
    sum += ratios[i];
  }
  if (!(fabs(sum - 1) <= 1e-9))
    return hap_err_set(err, HAP_EINVAL, "shard lengths: ratios sum to %.17g, expected 1", sum);
  /* Normalised ratios keep the floors within n units of the total however large it is. */
  int64_t units = len / granule, given = 0;
  double u = (double)units;
  for (int i = 0; i < n; i++) {
    double f = floor(ratios[i] / sum * u);
    out[i] = f >= u ? units : (int64_t)f;
    given += out[i];
  }
  while (given != units) {
    /* one unit to the largest remainder (or, after rounding up, from the smallest) */
    int best = -1;
    double best_rem = 0;
    for (int i = 0; i < n; i++) {
      double rem = ratios[i] / sum - (double)out[i] / u;
      bool better = given < units ? (best < 0 || rem > best_rem)
                                  : (out[i] > 0 && (best < 0 || rem < best_rem));
      if (better) {
        best = i;
        best_rem = rem;
      }
    }
    out[best] += given < units ? 1 : -1;
    given += given < units ? 1 : -1;
  }
  for (int i = 0; i < n; i++)
    out[i] *= granule;
  return HAP_OK;
}

/* ---- shard-length cache ---------------------------------------------------------------------- */

struct hap_shard_cache_entry {
  int64_t extent, granule;
  int32_t seg;
  int64_t *len; /* [n] */
};

void hap_shard_cache_init(hap_shard_cache *c, const double *ratios, int32_t n_segments, int32_t n) {
  memset(c, 0, sizeof *c);
  c->ratios = ratios;
  c->n_segments = n_segments;
  c->n = n;
}

const int64_t *hap_shard_cache_get(hap_shard_cache *c, int64_t extent, int64_t granule,
                                   int32_t seg) {
  for (int32_t i = 0; i < c->n_entries; i++) {
    const hap_shard_cache_entry *e = &c->entries[i];
    if (e->extent == extent && e->granule == granule && e->seg == seg)
      return e->len;
  }
  if (seg < 0 || seg >= c->n_segments || c->n < 1 ||
      HAP_VEC_RESERVE(c->entries, c->cap_entries, (int64_t)c->n_entries + 1, 16) != 0)
    return NULL;
  int64_t *len = calloc((size_t)c->n, sizeof *len);
  if (len == NULL || hap_shard_lengths(extent, granule, c->ratios + (size_t)seg * (size_t)c->n,
                                       c->n, len, NULL) != HAP_OK) {
    free(len);
    return NULL;
  }
  c->entries[c->n_entries++] = (hap_shard_cache_entry){extent, granule, seg, len};
  return len;
}

void hap_shard_cache_clear(hap_shard_cache *c) {
  for (int32_t i = 0; i < c->n_entries; i++)
    free(c->entries[i].len);
  c->n_entries = 0;
}

void hap_shard_cache_free(hap_shard_cache *c) {
  hap_shard_cache_clear(c);
  free(c->entries);
  c->entries = NULL;
  c->cap_entries = 0;
}
