/* kernel_model.c — the built-in kernel grid and the fallback model (kernel_model.h). */
#include "cluster/kernel_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

void hap_kgrid_case_fix(hap_kgrid_case *kc) { kc->io.attrs = &kc->attrs; }

/* ---- the grid -------------------------------------------------------------------------------- */

/* A case: inputs (dims lists ending at a 0), float32 except int64 where `index_mask` has the bit;
 * attributes as "T:name=value" items separated by ';' (T: i int, f float, s string, I ints
 * "a,b"). */
typedef struct gspec {
  hap_op op;
  int32_t n_in;
  int64_t dims[HAP_MAX_OP_INPUTS][5]; /* each 0-terminated */
  uint32_t index_mask;
  const char *attrs; /* NULL or items */
} gspec;

#define D(...)                                                                                     \
  { __VA_ARGS__, 0 }

/* Two small shapes per op (one for flatten and the einsum forms), quick. */
static const gspec quick_grid[] = {
    {HAP_OP_LINEAR, 3, {D(64, 128), D(128, 128), D(128)}, 0, NULL},
    {HAP_OP_LINEAR, 3, {D(256, 256), D(512, 256), D(512)}, 0, NULL},
    {HAP_OP_MATMUL, 2, {D(64, 64), D(64, 64)}, 0, NULL},
    {HAP_OP_MATMUL, 2, {D(256, 256), D(256, 256)}, 0, NULL},
    {HAP_OP_BMM, 2, {D(4, 32, 32), D(4, 32, 32)}, 0, NULL},
    {HAP_OP_BMM, 2, {D(16, 64, 64), D(16, 64, 64)}, 0, NULL},
    {HAP_OP_CONV2D, 3, {D(2, 8, 16, 16), D(8, 8, 3, 3), D(8)}, 0, "i:padding=1"},
    {HAP_OP_CONV2D, 3, {D(2, 32, 16, 16), D(64, 32, 3, 3), D(64)}, 0, "i:padding=1"},
    {HAP_OP_CONV2D, 3, {D(2, 64, 32, 32), D(64, 64, 3, 3), D(64)}, 0, "i:padding=1"},
    {HAP_OP_LAYER_NORM, 3, {D(64, 128), D(128), D(128)}, 0, NULL},
    {HAP_OP_LAYER_NORM, 3, {D(512, 256), D(256), D(256)}, 0, NULL},
    {HAP_OP_SOFTMAX, 1, {D(2, 2, 32, 32)}, 0, NULL},
    {HAP_OP_SOFTMAX, 1, {D(16, 4, 32, 32)}, 0, NULL},
    {HAP_OP_GELU, 1, {D(64, 128)}, 0, NULL},
    {HAP_OP_GELU, 1, {D(256, 512)}, 0, NULL},
    {HAP_OP_RELU, 1, {D(64, 128)}, 0, NULL},
    {HAP_OP_RELU, 1, {D(256, 512)}, 0, NULL},
    {HAP_OP_MULTI_HEAD_ATTENTION,
     7,
     {D(2, 16, 32), D(2, 16, 32), D(2, 16, 32), D(3, 32, 32), D(3, 32), D(32, 32), D(32)},
     0,
     "i:heads=4"},
    {HAP_OP_MULTI_HEAD_ATTENTION,
     7,
     {D(8, 32, 128), D(8, 32, 128), D(8, 32, 128), D(3, 128, 128), D(3, 128), D(128, 128), D(128)},
     0,
     "i:heads=4"},
    {HAP_OP_EMBEDDING, 2, {D(4, 16), D(1000, 64)}, 1u, NULL},
    {HAP_OP_EMBEDDING, 2, {D(16, 32), D(4096, 128)}, 1u, NULL},
    {HAP_OP_EINSUM, 2, {D(2, 16, 32), D(2, 16, 4, 8)}, 0, "s:equation=bsd,bsec->becd"},
    {HAP_OP_EINSUM, 2, {D(4, 32, 64), D(2, 4, 8, 32)}, 0, "s:equation=edh,becd->bech"},
    {HAP_OP_EINSUM, 2, {D(4, 64, 32), D(2, 4, 8, 64)}, 0, "s:equation=ehd,bech->becd"},
    {HAP_OP_EINSUM, 2, {D(2, 4, 8, 32), D(2, 16, 4, 8)}, 0, "s:equation=becd,bsec->bsd"},
    {HAP_OP_SIGMOID, 1, {D(64, 128)}, 0, NULL},
    {HAP_OP_SIGMOID, 1, {D(256, 512)}, 0, NULL},
    {HAP_OP_SUM, 1, {D(64, 128)}, 0, NULL},
    {HAP_OP_SUM, 1, {D(256, 512)}, 0, NULL},
    {HAP_OP_DROPOUT, 1, {D(64, 128)}, 0, "f:p=0.1"},
    {HAP_OP_DROPOUT, 1, {D(256, 512)}, 0, "f:p=0.1"},
    {HAP_OP_ADD, 2, {D(64, 128), D(64, 128)}, 0, NULL},
    {HAP_OP_ADD, 2, {D(256, 512), D(256, 512)}, 0, NULL},
    {HAP_OP_MUL, 2, {D(64, 128), D(64, 128)}, 0, NULL},
    {HAP_OP_MUL, 1, {D(256, 512)}, 0, "f:scalar=2"},
    {HAP_OP_LOG_SOFTMAX, 1, {D(64, 128)}, 0, NULL},
    {HAP_OP_LOG_SOFTMAX, 1, {D(256, 512)}, 0, NULL},
    {HAP_OP_TRANSPOSE, 1, {D(4, 32, 64)}, 0, "i:dim0=1;i:dim1=2"},
    {HAP_OP_TRANSPOSE, 1, {D(16, 64, 128)}, 0, "i:dim0=1;i:dim1=2"},
    {HAP_OP_FLATTEN, 1, {D(4, 8, 8, 8)}, 0, "i:start_dim=1"},
    {HAP_OP_FLATTEN, 1, {D(4, 64, 8, 8)}, 0, "i:start_dim=1"},
    {HAP_OP_MAX_POOL2D, 1, {D(2, 8, 16, 16)}, 0, "i:kernel=2;i:stride=2"},
    {HAP_OP_MAX_POOL2D, 1, {D(2, 32, 32, 32)}, 0, "i:kernel=2;i:stride=2"},
    {HAP_OP_ADAPTIVE_AVG_POOL2D, 1, {D(2, 8, 4, 4)}, 0, "I:output_size=7,7"},
    {HAP_OP_ADAPTIVE_AVG_POOL2D, 1, {D(2, 64, 2, 2)}, 0, "I:output_size=7,7"},
    {HAP_OP_CLS_APPEND, 2, {D(4, 16, 64), D(1, 1, 64)}, 0, NULL},
    {HAP_OP_CLS_APPEND, 2, {D(16, 64, 128), D(1, 1, 128)}, 0, NULL},
    {HAP_OP_CLS_SELECT, 1, {D(4, 17, 64)}, 0, NULL},
    {HAP_OP_CLS_SELECT, 1, {D(16, 65, 128)}, 0, NULL},
    {HAP_OP_TOP2_GATING, 2, {D(2, 16, 32), D(32, 4)}, 0, "i:capacity=8"},
    {HAP_OP_TOP2_GATING, 2, {D(4, 32, 128), D(128, 8)}, 0, "i:capacity=16"},
    {HAP_OP_NLL_LOSS, 2, {D(64, 128), D(64)}, 2u, NULL},
    {HAP_OP_NLL_LOSS, 2, {D(512, 512), D(512)}, 2u, NULL},
    {HAP_OP_CROSS_ENTROPY, 2, {D(64, 128), D(64)}, 2u, NULL},
    {HAP_OP_CROSS_ENTROPY, 2, {D(512, 512), D(512)}, 2u, NULL},
};

/* A few model-like shapes per op (default plan). */
static const gspec default_grid[] = {
    {HAP_OP_LINEAR, 3, {D(256, 512), D(512, 512), D(512)}, 0, NULL},
    {HAP_OP_LINEAR, 3, {D(1024, 768), D(768, 768), D(768)}, 0, NULL},
    {HAP_OP_LINEAR, 3, {D(1024, 768), D(3072, 768), D(3072)}, 0, NULL},
    {HAP_OP_MATMUL, 2, {D(256, 256), D(256, 256)}, 0, NULL},
    {HAP_OP_MATMUL, 2, {D(8, 128, 64), D(8, 64, 128)}, 0, NULL},
    {HAP_OP_BMM, 2, {D(16, 128, 64), D(16, 64, 128)}, 0, NULL},
    {HAP_OP_BMM, 2, {D(48, 128, 128), D(48, 128, 64)}, 0, NULL},
    {HAP_OP_CONV2D, 3, {D(8, 32, 32, 32), D(32, 32, 3, 3), D(32)}, 0, "i:padding=1"},
    {HAP_OP_CONV2D, 3, {D(8, 64, 16, 16), D(128, 64, 3, 3), D(128)}, 0, "i:padding=1"},
    {HAP_OP_LAYER_NORM, 3, {D(1024, 768), D(768), D(768)}, 0, NULL},
    {HAP_OP_LAYER_NORM, 3, {D(4096, 1024), D(1024), D(1024)}, 0, NULL},
    {HAP_OP_SOFTMAX, 1, {D(8, 12, 128, 128)}, 0, NULL},
    {HAP_OP_SOFTMAX, 1, {D(1024, 4096)}, 0, NULL},
    {HAP_OP_GELU, 1, {D(1024, 3072)}, 0, NULL},
    {HAP_OP_GELU, 1, {D(4096, 4096)}, 0, NULL},
    {HAP_OP_RELU, 1, {D(1024, 3072)}, 0, NULL},
    {HAP_OP_RELU, 1, {D(4096, 4096)}, 0, NULL},
    {HAP_OP_MULTI_HEAD_ATTENTION,
     7,
     {D(8, 128, 256), D(8, 128, 256), D(8, 128, 256), D(3, 256, 256), D(3, 256), D(256, 256),
      D(256)},
     0,
     "i:heads=4"},
    {HAP_OP_MULTI_HEAD_ATTENTION,
     7,
     {D(4, 128, 768), D(4, 128, 768), D(4, 128, 768), D(3, 768, 768), D(3, 768), D(768, 768),
      D(768)},
     0,
     "i:heads=12"},
    {HAP_OP_EMBEDDING, 2, {D(32, 128), D(8192, 512)}, 1u, NULL},
    {HAP_OP_EMBEDDING, 2, {D(8, 128), D(30522, 768)}, 1u, NULL},
    {HAP_OP_EINSUM, 2, {D(4, 128, 256), D(4, 128, 8, 32)}, 0, "s:equation=bsd,bsec->becd"},
    {HAP_OP_EINSUM, 2, {D(8, 256, 1024), D(4, 8, 32, 256)}, 0, "s:equation=edh,becd->bech"},
    {HAP_OP_EINSUM, 2, {D(8, 1024, 256), D(4, 8, 32, 1024)}, 0, "s:equation=ehd,bech->becd"},
    {HAP_OP_EINSUM, 2, {D(4, 8, 32, 256), D(4, 128, 8, 32)}, 0, "s:equation=becd,bsec->bsd"},
    {HAP_OP_SIGMOID, 1, {D(1024, 768)}, 0, NULL},
    {HAP_OP_SIGMOID, 1, {D(4096, 1024)}, 0, NULL},
    {HAP_OP_SUM, 1, {D(1024, 768)}, 0, NULL},
    {HAP_OP_SUM, 1, {D(4096, 1024)}, 0, NULL},
    {HAP_OP_DROPOUT, 1, {D(1024, 768)}, 0, "f:p=0.1"},
    {HAP_OP_DROPOUT, 1, {D(4096, 1024)}, 0, "f:p=0.1"},
    {HAP_OP_ADD, 2, {D(1024, 768), D(1024, 768)}, 0, NULL},
    {HAP_OP_ADD, 2, {D(4096, 1024), D(4096, 1024)}, 0, NULL},
    {HAP_OP_MUL, 2, {D(1024, 768), D(1024, 768)}, 0, NULL},
    {HAP_OP_MUL, 1, {D(4096, 1024)}, 0, "f:scalar=2"},
    {HAP_OP_LOG_SOFTMAX, 1, {D(1024, 512)}, 0, NULL},
    {HAP_OP_LOG_SOFTMAX, 1, {D(1024, 8192)}, 0, NULL},
    {HAP_OP_TRANSPOSE, 1, {D(32, 128, 256)}, 0, "i:dim0=0;i:dim1=1"},
    {HAP_OP_TRANSPOSE, 1, {D(64, 256, 256)}, 0, "i:dim0=1;i:dim1=2"},
    {HAP_OP_FLATTEN, 1, {D(32, 512, 2, 2)}, 0, "i:start_dim=1"},
    {HAP_OP_MAX_POOL2D, 1, {D(8, 64, 32, 32)}, 0, "i:kernel=2;i:stride=2"},
    {HAP_OP_MAX_POOL2D, 1, {D(8, 256, 16, 16)}, 0, "i:kernel=2;i:stride=2"},
    {HAP_OP_ADAPTIVE_AVG_POOL2D, 1, {D(32, 512, 1, 1)}, 0, "I:output_size=7,7"},
    {HAP_OP_ADAPTIVE_AVG_POOL2D, 1, {D(8, 512, 14, 14)}, 0, "I:output_size=7,7"},
    {HAP_OP_CLS_APPEND, 2, {D(32, 64, 768), D(1, 1, 768)}, 0, NULL},
    {HAP_OP_CLS_SELECT, 1, {D(32, 65, 768)}, 0, NULL},
    {HAP_OP_TOP2_GATING, 2, {D(4, 128, 256), D(256, 8)}, 0, "i:capacity=64"},
    {HAP_OP_NLL_LOSS, 2, {D(1024, 512), D(1024)}, 2u, NULL},
    {HAP_OP_NLL_LOSS, 2, {D(4096, 8192), D(4096)}, 2u, NULL},
    {HAP_OP_CROSS_ENTROPY, 2, {D(1024, 512), D(1024)}, 2u, NULL},
    {HAP_OP_CROSS_ENTROPY, 2, {D(1024, 8192), D(1024)}, 2u, NULL},
};

#undef D

#define N_QUICK   ((int32_t)(sizeof quick_grid / sizeof quick_grid[0]))
#define N_DEFAULT ((int32_t)(sizeof default_grid / sizeof default_grid[0]))

int32_t hap_kernel_grid_count(bool quick) { return quick ? N_QUICK : N_DEFAULT; }

/* Apply one "T:name=value" item (len bytes) to a. */
static hap_status set_attr(hap_attrs *a, hap_op op, const char *item, size_t len, hap_err *err) {
  char buf[96];
  if (len < 4 || len >= sizeof buf || item[1] != ':')
    return hap_err_set(err, HAP_EINVAL, "kernel grid: %s: bad attribute item '%.*s'",
                       hap_op_name(op), (int)len, item);
  memcpy(buf, item, len);
  buf[len] = '\0';
  char *eq = strchr(buf + 2, '=');
  if (eq == NULL)
    return hap_err_set(err, HAP_EINVAL, "kernel grid: %s: attribute item '%s' has no '='",
                       hap_op_name(op), buf);
  *eq = '\0';
  const char *name = buf + 2, *val = eq + 1;
  switch (buf[0]) {
  case 'i': return hap_attrs_set_int(a, op, name, strtoll(val, NULL, 10), err);
  case 'f': return hap_attrs_set_float(a, op, name, strtod(val, NULL), err);
  case 's': return hap_attrs_set_str(a, op, name, val, err);
  case 'I': {
    int64_t v[2] = {0, 0};
    char *end = NULL;
    v[0] = strtoll(val, &end, 10);
    v[1] = *end == ',' ? strtoll(end + 1, NULL, 10) : v[0];
    return hap_attrs_set_ints(a, op, name, v, 2, err);
  }
  default:
    return hap_err_set(err, HAP_EINVAL, "kernel grid: %s: attribute type '%c', expected i f s I",
                       hap_op_name(op), buf[0]);
  }
}

static hap_status build_case(const gspec *g, hap_kgrid_case *kc, hap_err *err) {
  memset(kc, 0, sizeof *kc);
  kc->op = g->op;
  hap_attrs_init(&kc->attrs, g->op);
  for (const char *p = g->attrs; p != NULL && *p != '\0';) {
    const char *semi = strchr(p, ';');
    size_t len = semi != NULL ? (size_t)(semi - p) : strlen(p);
    HAP_TRY(set_attr(&kc->attrs, g->op, p, len, err));
    p = semi != NULL ? semi + 1 : p + len;
  }
  hap_kgrid_case_fix(kc);
  kc->io.n_in = g->n_in;
  for (int32_t i = 0; i < g->n_in; i++) {
    hap_shape *s = &kc->io.in[i];
    for (s->rank = 0; s->rank < 5 && g->dims[i][s->rank] > 0; s->rank++)
      s->dims[s->rank] = g->dims[i][s->rank];
    bool index = (g->index_mask >> i) & 1u;
    kc->io.in_dtype[i] = index ? HAP_I64 : HAP_F32;
    kc->io.in_grad[i] = !index;
  }
  return hap_op_infer(g->op, &kc->io, err);
}

hap_status hap_kernel_grid_case(bool quick, int32_t i, hap_kgrid_case *out, hap_err *err) {
  int32_t n = hap_kernel_grid_count(quick);
  if (i < 0 || i >= n)
    return hap_err_set(err, HAP_EINVAL, "kernel grid: case %d, expected 0..%d", i, n - 1);
  return build_case(quick ? &quick_grid[i] : &default_grid[i], out, err);
}

/* ---- the per-process table of grid cases ------------------------------------------------------
 */

typedef struct grid_entry {
  hap_op op;
  uint64_t key[2]; /* hap_kernel_key, [backward] */
  bool gemm;       /* m, n, k valid */
  double m, n, k;  /* GEMM dims */
  double flops[2]; /* FLOP, [backward] */
  double bytes[2]; /* bytes read + written, [backward] */
} grid_entry;

enum { MAX_ENTRIES = N_QUICK + N_DEFAULT };

static grid_entry table[MAX_ENTRIES];
static int32_t op_first[HAP_OP_COUNT + 1]; /* table[op_first[op] .. op_first[op + 1]) */
static once_flag table_once = ONCE_FLAG_INIT;

static int cmp_entry(const void *a, const void *b) {
  const grid_entry *x = a, *y = b;
  if (x->op != y->op)
    return x->op < y->op ? -1 : 1;
  return (x->key[0] > y->key[0]) - (x->key[0] < y->key[0]);
}

static void build_table(void) {
  int32_t n = 0;
  for (int q = 0; q < 2; q++) {
    for (int32_t i = 0; i < hap_kernel_grid_count(q == 0); i++) {
      hap_kgrid_case kc;
      if (hap_kernel_grid_case(q == 0, i, &kc, NULL) != HAP_OK)
        continue; /* cannot happen for the static grids (unit_kernel_model builds every case) */
      grid_entry e = {.op = kc.op,
                      .key = {hap_kernel_key(&kc.io, false), hap_kernel_key(&kc.io, true)}};
      bool dup = false;
      for (int32_t j = 0; j < n && !dup; j++)
        dup = table[j].op == e.op && table[j].key[0] == e.key[0] && table[j].key[1] == e.key[1];
      if (dup)
        continue;
      e.gemm = hap_op_gemm_dims(kc.op, &kc.io, &e.m, &e.n, &e.k);
      hap_op_cost c;
      hap_op_cost_of(kc.op, &kc.io, &c);
      e.flops[0] = c.fwd_flops;
      e.flops[1] = c.bwd_flops;
      e.bytes[0] = c.fwd_bytes_read + c.fwd_bytes_written;
      e.bytes[1] = c.bwd_bytes_read + c.bwd_bytes_written;
      table[n++] = e;
    }
  }
  qsort(table, (size_t)n, sizeof table[0], cmp_entry);
  int32_t at = 0;
  for (int op = 0; op <= HAP_OP_COUNT; op++) {
    while (at < n && (int)table[at].op < op)
      at++;
    op_first[op] = at;
  }
}

/* ---- the model --------------------------------------------------------------------------------
 */

/* Roofline work, s. */
static double roofline(const hap_device *d, hap_dtype dtype, double flops, double bytes, bool gemm,
                       double m, double n, double k) {
  double rate = gemm ? hap_gemm_rate(d, dtype, m, n, k) : hap_device_flops(d, dtype);
  return fmax(flops / rate, bytes / d->memory_bw_Bps);
}

double hap_kernel_work_s(const hap_device *d, hap_op op, const hap_op_io *io, bool backward,
                         hap_dtype dtype) {
  hap_op_cost c;
  hap_op_cost_of(op, io, &c);
  double flops = backward ? c.bwd_flops : c.fwd_flops;
  double bytes =
      backward ? c.bwd_bytes_read + c.bwd_bytes_written : c.fwd_bytes_read + c.fwd_bytes_written;
  double m = 0, n = 0, k = 0;
  bool gemm = hap_op_gemm_dims(op, io, &m, &n, &k);
  return roofline(d, dtype, flops, bytes, gemm, m, n, k);
}

enum { MAX_POINTS = 8 };

double hap_kernel_model_time(const hap_device *d, hap_op op, bool backward, hap_dtype dtype,
                             double work_s) {
  if (d->n_kernels == 0 || dtype != HAP_F32 || !(work_s > 0) || (int)op < 0 ||
      (int)op >= HAP_OP_COUNT)
    return -1;
  call_once(&table_once, build_table);
  double w[MAX_POINTS] = {0}, t[MAX_POINTS] = {0}; /* s */
  int32_t np = 0;
  int dir = backward ? 1 : 0;
  for (int32_t i = op_first[op]; i < op_first[op + 1] && np < MAX_POINTS; i++) {
    const grid_entry *e = &table[i];
    const hap_kernel_sample *s = hap_device_kernel(d, op, backward, e->key[dir]);
    if (s == NULL || !(s->seconds > 0))
      continue;
    double wi = roofline(d, HAP_F32, e->flops[dir], e->bytes[dir], e->gemm, e->m, e->n, e->k);
    if (!(wi > 0))
      continue;
    int32_t j = np++; /* insertion by work */
    while (j > 0 && w[j - 1] > wi) {
      w[j] = w[j - 1];
      t[j] = t[j - 1];
      j--;
    }
    w[j] = wi;
    t[j] = s->seconds;
  }
  if (np == 0)
    return -1;
  if (work_s >= w[np - 1])
    return t[np - 1] * work_s / w[np - 1]; /* constant efficiency above the grid */
  if (work_s <= w[0]) {
    double p = 1;
    if (np > 1 && w[1] > w[0])
      p = fmin(1, fmax(0, log(t[1] / t[0]) / log(w[1] / w[0])));
    return t[0] * pow(work_s / w[0], p);
  }
  int32_t j = 1;
  while (j < np - 1 && w[j] < work_s)
    j++;
  if (!(w[j] > w[j - 1]))
    return t[j];
  double f = log(work_s / w[j - 1]) / log(w[j] / w[j - 1]);
  return exp(log(t[j - 1]) + f * log(t[j] / t[j - 1]));
}
