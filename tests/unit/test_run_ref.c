/* test_run_ref.c — libhap_run_ref: boxes (copy, pack, unpack, intersect on hand cases), init
 * (a pure function of seed, name and index; the per-op rules; integer inputs in range for every
 * zoo model) and the reference run (gradients against central finite differences of the loss
 * for every zoo model at small sizes; dropout masks reproducible from the seed). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/zoo.h"
#include "run/box.h"
#include "run/init.h"
#include "run/reference.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static hap_graph *build(const char *spec) {
  hap_graph *g = NULL;
  hap_err err = {0};
  hap_status st = hap_zoo_build(spec, &g, &err);
  cr_assert_eq(st, HAP_OK, "%s: %s", spec, err.msg);
  return g;
}

static hap_shape shape_of(int32_t rank, const int64_t *dims) {
  hap_shape s;
  memset(&s, 0, sizeof s);
  s.rank = rank;
  for (int k = 0; k < rank; k++)
    s.dims[k] = dims[k];
  return s;
}

static hap_box box_of(int32_t rank, const int64_t *lo, const int64_t *hi) {
  hap_box b;
  memset(&b, 0, sizeof b);
  b.rank = rank;
  for (int k = 0; k < rank; k++) {
    b.lo[k] = lo[k];
    b.hi[k] = hi[k];
  }
  return b;
}

/* Value of a global coordinate, so any element's origin is recognisable: 1000*i + 100*j + k. */
static int32_t tag(const int64_t *idx, int rank) {
  int32_t v = 0;
  for (int k = 0; k < rank; k++)
    v = v * 10 + (int32_t)idx[k];
  return v + 1;
}

/* Fill buf (laid out as box b) with tag(global coordinate). */
static void fill_tags(const hap_box *b, int32_t *buf) {
  int64_t n = hap_box_numel(b);
  int64_t idx[HAP_MAX_DIMS];
  for (int64_t e = 0; e < n; e++) {
    int64_t r = e;
    for (int k = b->rank - 1; k >= 0; k--) {
      int64_t ext = b->hi[k] - b->lo[k];
      idx[k] = b->lo[k] + r % ext;
      r /= ext;
    }
    buf[e] = tag(idx, b->rank);
  }
}

/* Element of buf (laid out as box b) at global coordinate idx. */
static int32_t at(const hap_box *b, const int32_t *buf, const int64_t *idx) {
  int64_t off = 0;
  for (int k = 0; k < b->rank; k++)
    off = off * (b->hi[k] - b->lo[k]) + (idx[k] - b->lo[k]);
  return buf[off];
}

/* ---- boxes ---------------------------------------------------------------------------------- */

Test(box, full_slice_numel_shape) {
  hap_shape s = shape_of(3, (int64_t[]){4, 5, 6});
  hap_box f = hap_box_full(&s);
  cr_assert_eq(f.rank, 3);
  cr_assert_eq(hap_box_numel(&f), 120);
  hap_box sl = hap_box_slice(&s, 1, 2, 3);
  cr_assert_eq(sl.lo[1], 2);
  cr_assert_eq(sl.hi[1], 5);
  cr_assert_eq(sl.lo[0], 0);
  cr_assert_eq(sl.hi[2], 6);
  cr_assert_eq(hap_box_numel(&sl), 72);
  hap_shape bs = hap_box_shape(&sl);
  cr_assert_eq(bs.rank, 3);
  cr_assert_eq(bs.dims[0], 4);
  cr_assert_eq(bs.dims[1], 3);
  cr_assert_eq(bs.dims[2], 6);
  hap_box empty = hap_box_slice(&s, 2, 3, 0);
  cr_assert_eq(hap_box_numel(&empty), 0);
  cr_assert_eq(hap_box_shape(&empty).dims[2], 0);
  hap_shape scalar = shape_of(0, NULL);
  hap_box sc = hap_box_full(&scalar);
  cr_assert_eq(sc.rank, 0);
  cr_assert_eq(hap_box_numel(&sc), 1);
}

Test(box, intersect) {
  hap_box a = box_of(2, (int64_t[]){0, 2}, (int64_t[]){4, 6});
  hap_box b = box_of(2, (int64_t[]){1, 5}, (int64_t[]){3, 9});
  hap_box r;
  cr_assert(hap_box_intersect(&a, &b, &r));
  cr_assert_eq(r.rank, 2);
  cr_assert_eq(r.lo[0], 1);
  cr_assert_eq(r.hi[0], 3);
  cr_assert_eq(r.lo[1], 5);
  cr_assert_eq(r.hi[1], 6);
  cr_assert(hap_box_intersect(&b, &a, &r), "symmetric");
  cr_assert_eq(hap_box_numel(&r), 2);
  /* touching boxes do not intersect */
  hap_box c = box_of(2, (int64_t[]){0, 6}, (int64_t[]){4, 8});
  cr_assert_not(hap_box_intersect(&a, &c, &r));
  cr_assert_eq(hap_box_numel(&r), 0);
  /* disjoint in one dim only */
  hap_box d = box_of(2, (int64_t[]){5, 0}, (int64_t[]){7, 9});
  cr_assert_not(hap_box_intersect(&a, &d, &r));
  /* an empty box intersects nothing, even itself */
  hap_box e = box_of(2, (int64_t[]){2, 3}, (int64_t[]){2, 5});
  cr_assert_not(hap_box_intersect(&e, &e, &r));
  cr_assert_not(hap_box_intersect(&a, &e, &r));
  /* rank 0: the scalar's one element */
  hap_box s = box_of(0, NULL, NULL);
  cr_assert(hap_box_intersect(&s, &s, &r));
  cr_assert_eq(hap_box_numel(&r), 1);
  /* containment */
  hap_box in = box_of(2, (int64_t[]){1, 3}, (int64_t[]){2, 4});
  cr_assert(hap_box_intersect(&a, &in, &r));
  for (int k = 0; k < 2; k++)
    cr_assert(r.lo[k] == in.lo[k] && r.hi[k] == in.hi[k],
              "a box inside another is the intersection");
}

/* Copy every region of a partition of a [4, 5, 3] tensor from one slice layout to another and
 * check each element lands at its global coordinate. */
Test(box, copy_between_layouts) {
  hap_shape s = shape_of(3, (int64_t[]){4, 5, 3});
  hap_box src_boxes[2] = {hap_box_slice(&s, 1, 0, 2), hap_box_slice(&s, 1, 2, 3)};
  hap_box dst_boxes[3] = {hap_box_slice(&s, 0, 0, 1), hap_box_slice(&s, 0, 1, 2),
                          hap_box_slice(&s, 0, 3, 1)};
  int32_t *src[2], *dst[3];
  for (int i = 0; i < 2; i++) {
    src[i] = calloc((size_t)hap_box_numel(&src_boxes[i]), sizeof(int32_t));
    fill_tags(&src_boxes[i], src[i]);
  }
  for (int j = 0; j < 3; j++)
    dst[j] = calloc((size_t)hap_box_numel(&dst_boxes[j]), sizeof(int32_t));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      hap_box r;
      if (hap_box_intersect(&src_boxes[i], &dst_boxes[j], &r))
        hap_box_copy(&r, src[i], &src_boxes[i], dst[j], &dst_boxes[j], sizeof(int32_t));
    }
  for (int j = 0; j < 3; j++) {
    int32_t *want = calloc((size_t)hap_box_numel(&dst_boxes[j]), sizeof(int32_t));
    fill_tags(&dst_boxes[j], want);
    for (int64_t e = 0; e < hap_box_numel(&dst_boxes[j]); e++)
      cr_assert_eq(dst[j][e], want[e], "dst %d element %lld: %d, expected %d", j, (long long)e,
                   dst[j][e], want[e]);
    free(want);
    free(dst[j]);
  }
  for (int i = 0; i < 2; i++)
    free(src[i]);
}

/* A region strictly inside both boxes (every dim offset), elements of 8 bytes. */
Test(box, copy_interior_region_wide_elements) {
  hap_box sb = box_of(3, (int64_t[]){1, 0, 2}, (int64_t[]){4, 4, 7});
  hap_box db = box_of(3, (int64_t[]){2, 1, 0}, (int64_t[]){5, 3, 6});
  hap_box r = box_of(3, (int64_t[]){2, 1, 3}, (int64_t[]){4, 3, 6});
  int64_t *src = calloc((size_t)hap_box_numel(&sb), sizeof(int64_t));
  int64_t *dst = calloc((size_t)hap_box_numel(&db), sizeof(int64_t));
  int32_t *tags = calloc((size_t)hap_box_numel(&sb), sizeof(int32_t));
  fill_tags(&sb, tags);
  for (int64_t e = 0; e < hap_box_numel(&sb); e++)
    src[e] = tags[e];
  hap_box_copy(&r, src, &sb, dst, &db, sizeof(int64_t));
  int64_t idx[3];
  int64_t off = 0, written = 0;
  for (idx[0] = db.lo[0]; idx[0] < db.hi[0]; idx[0]++)
    for (idx[1] = db.lo[1]; idx[1] < db.hi[1]; idx[1]++)
      for (idx[2] = db.lo[2]; idx[2] < db.hi[2]; idx[2]++, off++) {
        bool inside = true;
        for (int k = 0; k < 3; k++)
          inside = inside && idx[k] >= r.lo[k] && idx[k] < r.hi[k];
        int64_t want = inside ? tag(idx, 3) : 0;
        cr_assert_eq(dst[off], want, "(%lld,%lld,%lld): %lld, expected %lld", (long long)idx[0],
                     (long long)idx[1], (long long)idx[2], (long long)dst[off], (long long)want);
        written += inside;
      }
  cr_assert_eq(written, hap_box_numel(&r));
  free(src);
  free(dst);
  free(tags);
}

Test(box, pack_unpack_round_trip) {
  hap_box sb = box_of(2, (int64_t[]){0, 0}, (int64_t[]){5, 6});
  hap_box r = box_of(2, (int64_t[]){1, 2}, (int64_t[]){4, 5});
  int32_t src[30], packed[9], back[30];
  fill_tags(&sb, src);
  hap_box_pack(&r, src, &sb, packed, sizeof(int32_t));
  int32_t want[9];
  fill_tags(&r, want);
  for (int e = 0; e < 9; e++)
    cr_assert_eq(packed[e], want[e], "packed %d: %d, expected %d", e, packed[e], want[e]);
  memset(back, 0, sizeof back);
  hap_box_unpack(&r, packed, back, &sb, sizeof(int32_t));
  int64_t idx[2];
  for (idx[0] = 0; idx[0] < 5; idx[0]++)
    for (idx[1] = 0; idx[1] < 6; idx[1]++) {
      bool inside = idx[0] >= 1 && idx[0] < 4 && idx[1] >= 2 && idx[1] < 5;
      cr_assert_eq(at(&sb, back, idx), inside ? tag(idx, 2) : 0);
    }
}

Test(box, rank_one_rank_zero_and_empty) {
  /* rank 1 */
  hap_box sb = box_of(1, (int64_t[]){3}, (int64_t[]){10});
  hap_box r = box_of(1, (int64_t[]){5}, (int64_t[]){8});
  float src[7] = {3, 4, 5, 6, 7, 8, 9}, packed[3] = {0};
  hap_box_pack(&r, src, &sb, packed, sizeof(float));
  cr_assert(packed[0] == 5 && packed[1] == 6 && packed[2] == 7);
  /* rank 0: one element */
  hap_box s0 = box_of(0, NULL, NULL);
  double x = 2.5, y = 0;
  hap_box_copy(&s0, &x, &s0, &y, &s0, sizeof(double));
  cr_assert(y == 2.5);
  /* empty region: nothing written */
  hap_box e = box_of(2, (int64_t[]){1, 1}, (int64_t[]){1, 3});
  hap_box b2 = box_of(2, (int64_t[]){0, 0}, (int64_t[]){2, 3});
  int32_t a[6] = {1, 2, 3, 4, 5, 6}, d[6] = {0};
  hap_box_copy(&e, a, &b2, d, &b2, sizeof(int32_t));
  for (int i = 0; i < 6; i++)
    cr_assert_eq(d[i], 0);
  /* a size-1 trailing dim: rows of one element */
  hap_box c = box_of(3, (int64_t[]){0, 0, 0}, (int64_t[]){2, 3, 1});
  hap_box cr = box_of(3, (int64_t[]){1, 1, 0}, (int64_t[]){2, 3, 1});
  int32_t cs[6], cp[2];
  fill_tags(&c, cs);
  hap_box_pack(&cr, cs, &c, cp, sizeof(int32_t));
  cr_assert_eq(cp[0], tag((int64_t[]){1, 1, 0}, 3));
  cr_assert_eq(cp[1], tag((int64_t[]){1, 2, 0}, 3));
}

/* Every split of an 8-dim tensor along every dim: slices reassemble the whole tensor. */
Test(box, rank_eight_slices_reassemble) {
  int64_t dims[8] = {2, 1, 3, 2, 1, 2, 3, 2};
  hap_shape s = shape_of(8, dims);
  hap_box full = hap_box_full(&s);
  int64_t n = hap_box_numel(&full);
  int32_t *whole = calloc((size_t)n, sizeof(int32_t));
  int32_t *again = calloc((size_t)n, sizeof(int32_t));
  int32_t *part = calloc((size_t)n, sizeof(int32_t));
  fill_tags(&full, whole);
  for (int d = 0; d < 8; d++) {
    memset(again, 0, (size_t)n * sizeof(int32_t));
    for (int64_t off = 0; off < dims[d]; off++) {
      hap_box sl = hap_box_slice(&s, d, off, 1);
      hap_box_pack(&sl, whole, &full, part, sizeof(int32_t));
      hap_box_unpack(&sl, part, again, &full, sizeof(int32_t));
    }
    cr_assert(memcmp(whole, again, (size_t)n * sizeof(int32_t)) == 0, "dim %d", d);
  }
  free(whole);
  free(again);
  free(part);
}

/* ---- init ----------------------------------------------------------------------------------- */

static void *fill_full(const hap_graph *g, int32_t t, uint64_t seed) {
  const hap_tensor *tn = &g->tensors[t];
  void *buf = malloc((size_t)hap_tensor_bytes(tn));
  hap_box b = hap_box_full(&tn->shape);
  hap_err err = {0};
  cr_assert_eq(hap_init_fill(g, t, seed, &b, buf, &err), HAP_OK, "%s: %s", tn->name, err.msg);
  return buf;
}

static int32_t find(const hap_graph *g, const char *name) {
  int32_t t = hap_graph_find_tensor(g, name);
  cr_assert(t >= 0, "tensor '%s' not found", name);
  return t;
}

/* Every leaf of the model: boxes (slices along each dim, and an interior box) filled alone equal
 * the same region of the full tensor. */
static void check_boxes_pure(const char *spec) {
  hap_graph *g = build(spec);
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (tn->kind == HAP_TENSOR_ACTIVATION)
      continue;
    size_t el = (size_t)hap_dtype_size(tn->dtype);
    void *full = fill_full(g, t, 42);
    void *again = fill_full(g, t, 42);
    cr_assert(memcmp(full, again, (size_t)hap_tensor_bytes(tn)) == 0, "%s: not deterministic",
              tn->name);
    hap_box whole = hap_box_full(&tn->shape);
    char *part = malloc((size_t)hap_tensor_bytes(tn));
    char *want = malloc((size_t)hap_tensor_bytes(tn));
    for (int d = -1; d < tn->shape.rank; d++) {
      hap_box b = whole; /* d == -1: interior box (every dim trimmed where possible) */
      if (d >= 0) {
        int64_t len = tn->shape.dims[d];
        b = hap_box_slice(&tn->shape, d, len / 3, len - len / 3 - len / 4);
      } else {
        for (int k = 0; k < tn->shape.rank; k++) {
          b.lo[k] = tn->shape.dims[k] > 2 ? 1 : 0;
          b.hi[k] = tn->shape.dims[k] > 2 ? tn->shape.dims[k] - 1 : tn->shape.dims[k];
        }
      }
      hap_err err = {0};
      cr_assert_eq(hap_init_fill(g, t, 42, &b, part, &err), HAP_OK, "%s: %s", tn->name, err.msg);
      hap_box_pack(&b, full, &whole, want, el);
      cr_assert(memcmp(part, want, (size_t)hap_box_numel(&b) * el) == 0,
                "%s: box along dim %d differs from the full tensor", tn->name, d);
    }
    free(part);
    free(want);
    free(full);
    free(again);
  }
  hap_graph_destroy(g);
}

Test(init, boxes_equal_the_full_tensor) {
  check_boxes_pure("mlp:batch=2,seq=3,hidden=8,layers=2");
  check_boxes_pure("bert-base:layers=1,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4");
  check_boxes_pure("gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=32");
  check_boxes_pure("vit:batch=2,layers=1,width=16,hidden=32,heads=2,image=8,patch=4");
}

Test(init, seeds_and_names_differ) {
  hap_graph *g = build("bert-base:layers=2,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4");
  int32_t w0 = find(g, "layers.0.linear1.weight"), w1 = find(g, "layers.1.linear1.weight");
  int64_t n = hap_tensor_numel(&g->tensors[w0]);
  float *a = fill_full(g, w0, 1), *b = fill_full(g, w0, 2), *c = fill_full(g, w1, 1);
  int64_t same_seed = 0, same_name = 0;
  for (int64_t i = 0; i < n; i++) {
    same_seed += a[i] == b[i];
    same_name += a[i] == c[i];
  }
  cr_assert_lt(same_seed, 2, "seeds 1 and 2 agree on %lld of %lld", (long long)same_seed,
               (long long)n);
  cr_assert_lt(same_name, 2, "two tensors of the same shape agree on %lld", (long long)same_name);
  int32_t x = find(g, "x");
  int64_t *xa = fill_full(g, x, 1), *xb = fill_full(g, x, 2);
  int64_t nx = hap_tensor_numel(&g->tensors[x]), same = 0;
  for (int64_t i = 0; i < nx; i++)
    same += xa[i] == xb[i];
  cr_assert_lt(same, nx / 4, "token ids of two seeds agree on %lld of %lld", (long long)same,
               (long long)nx);
  free(a);
  free(b);
  free(c);
  free(xa);
  free(xb);
  hap_graph_destroy(g);
}

/* |values| <= bound, and the values are spread (not all tiny: max above half the bound). */
static void check_uniform(const hap_graph *g, const char *name, double bound) {
  int32_t t = find(g, name);
  float *v = fill_full(g, t, 7);
  double mx = 0, sum = 0;
  int64_t n = hap_tensor_numel(&g->tensors[t]);
  for (int64_t i = 0; i < n; i++) {
    cr_assert_leq(fabs((double)v[i]), bound * (1 + 1e-6), "%s[%lld] = %g outside +-%g", name,
                  (long long)i, v[i], bound);
    mx = fmax(mx, fabs((double)v[i]));
    sum += v[i];
  }
  cr_assert_gt(mx, bound / 2, "%s: largest |value| %g, bound %g", name, mx, bound);
  cr_assert_lt(fabs(sum / (double)n), bound / 2, "%s: mean %g", name, sum / (double)n);
  free(v);
}

static void check_const(const hap_graph *g, const char *name, float c) {
  int32_t t = find(g, name);
  float *v = fill_full(g, t, 7);
  for (int64_t i = 0; i < hap_tensor_numel(&g->tensors[t]); i++)
    cr_assert(v[i] == c, "%s[%lld] = %g, expected %g", name, (long long)i, v[i], c);
  free(v);
}

Test(init, parameter_rules) {
  hap_graph *g = build("bert-moe:layers=2,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4,"
                       "devices=2");
  check_uniform(g, "layers.0.linear1.weight", 1 / sqrt(16.0)); /* [32, 16]: K = 16 */
  check_uniform(g, "layers.0.linear1.bias", 1 / sqrt(16.0));
  check_uniform(g, "layers.0.linear2.weight", 1 / sqrt(32.0));
  check_uniform(g, "layers.0.self_attn.in_proj_weight", 1 / sqrt(16.0));
  check_uniform(g, "layers.0.self_attn.in_proj_bias", 1 / sqrt(16.0));
  check_uniform(g, "layers.0.self_attn.out_proj.weight", 1 / sqrt(16.0));
  check_uniform(g, "layers.1.gate.weight", 1 / sqrt(16.0));
  check_uniform(g, "layers.1.experts.w1", 1 / sqrt(16.0)); /* [E, D, F]: D */
  check_uniform(g, "layers.1.experts.w2", 1 / sqrt(32.0)); /* [E, F, D]: F */
  check_uniform(g, "embed.weight", 1.0);
  check_uniform(g, "head.weight", 1 / sqrt(16.0));
  check_const(g, "layers.0.norm1.weight", 1.0f);
  check_const(g, "layers.0.norm1.bias", 0.0f);
  hap_graph_destroy(g);

  g = build("vit:batch=2,layers=1,width=16,hidden=32,heads=2,image=8,patch=4");
  check_uniform(g, "patch_embed.proj.weight", 1 / sqrt(3.0 * 4 * 4));
  check_uniform(g, "patch_embed.proj.bias", 1 / sqrt(3.0 * 4 * 4));
  check_uniform(g, "cls_token", 0.02);
  check_uniform(g, "pos_embed", 0.02);
  check_uniform(g, "x", 1.0);
  hap_graph_destroy(g);

  g = build("gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=32,granularity=fine");
  check_uniform(g, "layers.0.fc1.weight", 1 / sqrt(16.0)); /* [in, out] used by matmul */
  check_uniform(g, "layers.0.fc1.bias", 1 / sqrt(16.0));
  check_uniform(g, "layers.0.fc2.weight", 1 / sqrt(64.0));
  check_uniform(g, "layers.0.fc2.bias", 1 / sqrt(64.0));
  check_const(g, "layers.0.ln1.weight", 1.0f);
  check_const(g, "layers.0.ln1.bias", 0.0f);
  check_uniform(g, "wte.weight", 1.0);
  check_uniform(g, "wpe.weight", 0.02);
  hap_graph_destroy(g);
}

Test(init, buffer_rules) {
  hap_graph *g = build("bert-base:layers=1,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4");
  int32_t m = find(g, "mask");
  float *mask = fill_full(g, m, 3);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) {
      float v = mask[i * 8 + j];
      if (j > i)
        cr_assert(isinf(v) && v < 0, "mask[%d,%d] = %g, expected -inf", i, j, v);
      else
        cr_assert(v == 0.0f, "mask[%d,%d] = %g, expected 0", i, j, v);
    }
  int32_t p = find(g, "pos_encoder.pe");
  float *pe = fill_full(g, p, 3), *pe2 = fill_full(g, p, 4);
  for (int i = 0; i < 8 * 16; i++)
    cr_assert(pe[i] == pe2[i], "the encoding does not depend on the seed");
  for (int pos = 0; pos < 8; pos++)
    for (int j = 0; j < 16; j++) {
      double w = pow(10000.0, -(double)(j - j % 2) / 16.0);
      double want = j % 2 == 0 ? sin(pos * w) : cos(pos * w);
      cr_assert_float_eq(pe[pos * 16 + j], want, 1e-6, "pe[%d,%d] = %g, expected %g", pos, j,
                         pe[pos * 16 + j], want);
    }
  free(mask);
  free(pe);
  free(pe2);
  hap_graph_destroy(g);
}

/* Integer inputs of every zoo model lie in [0, range) and use most of it. */
Test(init, integer_inputs_in_range_for_every_model) {
  struct {
    const char *spec, *name;
    int64_t range;
  } cases[] = {
      {"bert-base:layers=1,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4", "x", 32},
      {"bert-base:layers=1,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4", "y", 32},
      {"bert-moe:layers=2,width=16,hidden=32,heads=2,seq=8,vocab=24,batch=4,devices=2", "x", 24},
      {"bert-moe:layers=2,width=16,hidden=32,heads=2,seq=8,vocab=24,batch=4,devices=2", "y", 24},
      {"gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=40", "x", 40},
      {"gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=40", "y", 40},
      {"gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=40,granularity=fine", "y",
       40},
      {"vit:batch=64,layers=1,width=16,hidden=32,heads=2,image=8,patch=4,classes=7", "y", 7},
      {"vgg19:batch=64,classes=5", "y", 5},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    hap_graph *g = build(cases[c].spec);
    int32_t t = find(g, cases[c].name);
    int64_t *v = fill_full(g, t, 11);
    int64_t n = hap_tensor_numel(&g->tensors[t]), mx = -1, mn = cases[c].range;
    for (int64_t i = 0; i < n; i++) {
      cr_assert(v[i] >= 0 && v[i] < cases[c].range, "%s: %s[%lld] = %lld outside [0, %lld)",
                cases[c].spec, cases[c].name, (long long)i, (long long)v[i],
                (long long)cases[c].range);
      mx = v[i] > mx ? v[i] : mx;
      mn = v[i] < mn ? v[i] : mn;
    }
    cr_assert(mx >= cases[c].range / 2 && mn < cases[c].range / 2, "%s: %s spans [%lld, %lld]",
              cases[c].spec, cases[c].name, (long long)mn, (long long)mx);
    free(v);
    hap_graph_destroy(g);
  }
}

/* A small hand-built graph: int32 ids through a reshape into an embedding. */
Test(init, int32_ids_through_layout_ops) {
  hap_graph *g = hap_graph_create("ids");
  hap_err err = {0};
  int32_t ids, w, r, e, loss;
  hap_shape s = shape_of(2, (int64_t[]){3, 4});
  cr_assert_eq(hap_graph_add_tensor(g, "ids", HAP_TENSOR_INPUT, HAP_I32, &s, &ids, &err), HAP_OK);
  hap_shape ws = shape_of(2, (int64_t[]){5, 2});
  cr_assert_eq(hap_graph_add_tensor(g, "w", HAP_TENSOR_PARAMETER, HAP_F32, &ws, &w, &err), HAP_OK);
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", (int64_t[]){12}, 1, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "flat", HAP_OP_RESHAPE, &ids, 1, &a, NULL, &r, &err), HAP_OK,
               "%s", err.msg);
  cr_assert_eq(
      hap_graph_add_node(g, "emb", HAP_OP_EMBEDDING, (int32_t[]){r, w}, 2, NULL, NULL, &e, &err),
      HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_graph_add_node(g, "loss", HAP_OP_SUM, &e, 1, NULL, NULL, &loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
  int32_t *v = fill_full(g, ids, 5);
  for (int i = 0; i < 12; i++)
    cr_assert(v[i] >= 0 && v[i] < 5, "ids[%d] = %d", i, v[i]);
  free(v);
  /* the whole graph runs: loss = sum of the gathered rows */
  hap_reference *ref = NULL;
  cr_assert_eq(hap_reference_run(g, 5, &ref, &err), HAP_OK, "%s", err.msg);
  const int32_t *idv = hap_reference_value(ref, ids);
  const float *wv = hap_reference_value(ref, w);
  double want = 0;
  for (int i = 0; i < 12; i++)
    want += (double)wv[(size_t)idv[i] * 2] + (double)wv[(size_t)idv[i] * 2 + 1];
  cr_assert_float_eq(hap_reference_loss(ref), want, 1e-5);
  const float *gw = hap_reference_grad(ref, w);
  for (int row = 0; row < 5; row++) {
    int count = 0;
    for (int i = 0; i < 12; i++)
      count += idv[i] == row;
    cr_assert(gw[(size_t)row * 2] == (float)count && gw[(size_t)row * 2 + 1] == (float)count,
              "row %d", row);
  }
  cr_assert_null(hap_reference_grad(ref, ids));
  cr_assert_null(hap_reference_grad(ref, e), "activations keep no gradient");
  hap_reference_destroy(ref);
  hap_graph_destroy(g);
}

Test(init, errors_name_the_tensor) {
  hap_graph *g = hap_graph_create("bad");
  hap_err err = {0};
  int32_t ids, x, h, loss, w;
  hap_shape s = shape_of(1, (int64_t[]){4});
  cr_assert_eq(hap_graph_add_tensor(g, "orphan_ids", HAP_TENSOR_INPUT, HAP_I64, &s, &ids, &err),
               HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(g, "half", HAP_TENSOR_INPUT, HAP_F16, &s, &h, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_tensor(g, "w", HAP_TENSOR_PARAMETER, HAP_F32, &s, &w, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "id", HAP_OP_RESHAPE, &ids, 1, NULL, NULL, &x, &err),
               HAP_EINVAL, "reshape needs its shape");
  hap_err_clear(&err);
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", (int64_t[]){2, 2}, 2, &err), HAP_OK);
  cr_assert_eq(hap_graph_add_node(g, "id", HAP_OP_RESHAPE, &ids, 1, &a, NULL, &x, &err), HAP_OK,
               "%s", err.msg);
  cr_assert_eq(hap_graph_add_node(g, "loss", HAP_OP_SUM, &w, 1, NULL, NULL, &loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);
  int64_t buf[4];
  hap_box b = hap_box_full(&s);
  hap_err_clear(&err);
  cr_assert_eq(hap_init_fill(g, ids, 1, &b, buf, &err), HAP_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "'orphan_ids'"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
  hap_err_clear(&err);
  cr_assert_eq(hap_init_fill(g, h, 1, &b, buf, &err), HAP_EUNSUPPORTED);
  cr_assert(strstr(err.msg, "'half'") && strstr(err.msg, "float16"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_init_fill(g, x, 1, &b, buf, &err), HAP_EINVAL, "an activation");
  cr_assert(strstr(err.msg, "'id'"), "%s", err.msg);
  hap_err_clear(&err);
  hap_box too_big = box_of(1, (int64_t[]){2}, (int64_t[]){5});
  cr_assert_eq(hap_init_fill(g, w, 1, &too_big, buf, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "'w'"), "%s", err.msg);
  hap_err_clear(&err);
  hap_reference *ref = (hap_reference *)1;
  cr_assert_eq(hap_reference_run(g, 1, &ref, &err), HAP_EUNSUPPORTED);
  cr_assert_null(ref);
  cr_assert(strstr(err.msg, "'half'"), "%s", err.msg);
  hap_graph_destroy(g);
}

/* ---- reference run: gradients against finite differences ----------------------------------- */

/* Central differences of the loss at a few elements of every trainable parameter. A mismatch at
 * one step is retried at a quarter of it (a step across a ReLU kink, a max-pool tie or a top-2
 * routing change makes the difference meaningless; a smaller step rarely crosses it). */
static void check_gradients(const char *spec, int per_param, double rtol) {
  hap_graph *g = build(spec);
  hap_reference *ref = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_reference_run(g, 1234, &ref, &err), HAP_OK, "%s: %s", spec, err.msg);
  double loss = hap_reference_loss(ref);
  cr_assert(isfinite(loss), "%s: loss %g", spec, loss);
  bool verbose = getenv("HAP_TEST_VERBOSE") != NULL;
  int checked = 0;
  double worst = 0;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (tn->kind != HAP_TENSOR_PARAMETER)
      continue;
    const float *grad = hap_reference_grad(ref, t);
    cr_assert_not_null(grad, "%s: no gradient for '%s'", spec, tn->name);
    int64_t n = hap_tensor_numel(tn);
    double gmax = 0;
    for (int64_t i = 0; i < n; i++) {
      cr_assert(isfinite(grad[i]), "%s: %s grad[%lld] = %g", spec, tn->name, (long long)i, grad[i]);
      gmax = fmax(gmax, fabs((double)grad[i]));
    }
    for (int k = 0; k < per_param; k++) {
      /* the element with the largest gradient first, then spread over the tensor */
      int64_t i = 0;
      if (k == 0) {
        for (int64_t j = 0; j < n; j++)
          if (fabs((double)grad[j]) == gmax) {
            i = j;
            break;
          }
      } else {
        i = (int64_t)((uint64_t)(k * 2654435761u + (uint32_t)t * 40503u) % (uint64_t)n);
      }
      const float *v = hap_reference_value(ref, t);
      double step = 1e-2 * fmax(1.0, fabs((double)v[i]));
      bool ok = false;
      double fd = 0, excess = 0;
      for (int attempt = 0; attempt < 3 && !ok; attempt++, step /= 4) {
        double lp, lm, hp, hm;
        cr_assert_eq(hap_reference_perturbed_loss(ref, t, i, step, &lp, &hp, &err), HAP_OK, "%s",
                     err.msg);
        cr_assert_eq(hap_reference_perturbed_loss(ref, t, i, -step, &lm, &hm, &err), HAP_OK, "%s",
                     err.msg);
        fd = (lp - lm) / (hp - hm);
        /* float32 loss: its rounding over the step, plus a relative slack */
        double noise = 16 * 6e-8 * fmax(1.0, fabs(loss)) / (hp - hm);
        double tol = rtol * fmax(fabs((double)grad[i]), 1e-2 * gmax) + noise;
        excess = fabs(fd - grad[i]) / tol;
        ok = excess <= 1;
      }
      worst = fmax(worst, excess);
      if (verbose)
        fprintf(stderr, "%s %s[%lld]: grad %.6g fd %.6g (%.2f of tolerance)\n", spec, tn->name,
                (long long)i, grad[i], fd, excess);
      cr_expect(ok, "%s: %s[%lld]: gradient %.7g, finite difference %.7g", spec, tn->name,
                (long long)i, grad[i], fd);
      checked++;
    }
  }
  if (verbose)
    fprintf(stderr, "%s: loss %.7g, %d elements, worst %.2f of tolerance\n", spec, loss, checked,
            worst);
  cr_assert_gt(checked, 0);
  hap_reference_destroy(ref);
  hap_graph_destroy(g);
}

Test(reference, mlp_matches_finite_differences) {
  check_gradients("mlp:batch=2,seq=3,hidden=8,layers=2", 4, 2e-2);
}

Test(reference, bert_base_matches_finite_differences) {
  check_gradients("bert-base:layers=1,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4,"
                  "dropout=0",
                  3, 2e-2);
}

Test(reference, bert_moe_matches_finite_differences) {
  /* capacity = seq: no token is ever dropped */
  check_gradients("bert-moe:layers=2,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4,"
                  "devices=2,capacity=8,dropout=0",
                  3, 2e-2);
}

Test(reference, vit_matches_finite_differences) {
  check_gradients("vit:batch=2,layers=1,width=16,hidden=32,heads=2,image=8,patch=4,dropout=0", 3,
                  2e-2);
}

Test(reference, gpt_fused_matches_finite_differences) {
  check_gradients("gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=32,dropout=0", 3,
                  2e-2);
}

Test(reference, gpt_fine_matches_finite_differences) {
  check_gradients("gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=32,dropout=0,"
                  "granularity=fine",
                  3, 2e-2);
}

/* vgg19 has no size options: the full 139.6 M-parameter model at batch 1, one element each. */
Test(reference, vgg19_matches_finite_differences) {
  check_gradients("vgg19:batch=1,dropout=0", 1, 2e-2);
}

/* Dropout masks come from the node seeds: fixed masks, so finite differences still hold. */
Test(reference, gpt_with_dropout_matches_finite_differences) {
  check_gradients("gpt:preset=none,batch=2,seq=8,layers=1,width=16,heads=2,vocab=32,dropout=0.2", 2,
                  2e-2);
}

Test(reference, dropout_is_reproducible_from_the_seed) {
  const char *spec = "bert-base:layers=1,width=16,hidden=32,heads=2,seq=8,vocab=32,batch=4,"
                     "dropout=0.3";
  hap_graph *g = build(spec);
  hap_err err = {0};
  hap_reference *a = NULL, *b = NULL, *c = NULL;
  cr_assert_eq(hap_reference_run(g, 99, &a, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_reference_run(g, 99, &b, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_reference_run(g, 100, &c, &err), HAP_OK, "%s", err.msg);
  cr_assert(hap_reference_loss(a) == hap_reference_loss(b), "same seed: %.9g vs %.9g",
            hap_reference_loss(a), hap_reference_loss(b));
  cr_assert(hap_reference_loss(a) != hap_reference_loss(c), "another seed gives another loss");
  int32_t w = find(g, "layers.0.linear1.weight");
  cr_assert(memcmp(hap_reference_grad(a, w), hap_reference_grad(b, w),
                   (size_t)hap_tensor_bytes(&g->tensors[w])) == 0);
  /* the masks really drop: some dropout output elements are zero where their input is not */
  int32_t d = find(g, "layers.0.dropout1");
  int32_t in = g->nodes[g->tensors[d].producer].inputs[0];
  const float *dv = hap_reference_value(a, d), *iv = hap_reference_value(a, in);
  int64_t dropped = 0, n = hap_tensor_numel(&g->tensors[d]);
  for (int64_t i = 0; i < n; i++)
    dropped += dv[i] == 0.0f && iv[i] != 0.0f;
  cr_assert(dropped > n / 10 && dropped < n / 2, "%lld of %lld dropped at p = 0.3",
            (long long)dropped, (long long)n);
  cr_assert_neq(hap_run_node_seed(99, "layers.0.dropout1"),
                hap_run_node_seed(99, "layers.0.dropout2"));
  cr_assert_neq(hap_run_node_seed(99, "a"), hap_run_node_seed(100, "a"));
  hap_reference_destroy(a);
  hap_reference_destroy(b);
  hap_reference_destroy(c);
  hap_graph_destroy(g);
}

/* Hand-checkable: mlp with one layer, loss = sum(sigmoid(x W^T + b)). */
Test(reference, loss_and_values_by_hand) {
  hap_graph *g = build("mlp:batch=1,seq=2,hidden=3,layers=1");
  hap_err err = {0};
  hap_reference *ref = NULL;
  cr_assert_eq(hap_reference_run(g, 5, &ref, &err), HAP_OK, "%s", err.msg);
  const float *x = hap_reference_value(ref, find(g, "x"));
  const float *w = hap_reference_value(ref, find(g, "layers.0.linear.weight"));
  const float *bias = hap_reference_value(ref, find(g, "layers.0.linear.bias"));
  const float *gw = hap_reference_grad(ref, find(g, "layers.0.linear.weight"));
  const float *gb = hap_reference_grad(ref, find(g, "layers.0.linear.bias"));
  double loss = 0, want_gw[9] = {0}, want_gb[3] = {0};
  for (int r = 0; r < 2; r++)
    for (int n = 0; n < 3; n++) {
      double z = bias[n];
      for (int k = 0; k < 3; k++)
        z += (double)x[r * 3 + k] * w[n * 3 + k];
      double s = 1 / (1 + exp(-z));
      loss += s;
      want_gb[n] += s * (1 - s);
      for (int k = 0; k < 3; k++)
        want_gw[n * 3 + k] += s * (1 - s) * x[r * 3 + k];
    }
  cr_assert_float_eq(hap_reference_loss(ref), loss, 1e-5);
  for (int i = 0; i < 9; i++)
    cr_assert_float_eq(gw[i], want_gw[i], 1e-5, "dW[%d]", i);
  for (int i = 0; i < 3; i++)
    cr_assert_float_eq(gb[i], want_gb[i], 1e-5, "db[%d]", i);
  cr_assert_null(hap_reference_grad(ref, find(g, "x")), "inputs get no gradient");
  cr_assert_null(hap_reference_value(ref, -1));
  hap_reference_destroy(ref);
  hap_graph_destroy(g);
}

/* Training: an update moves each trainable parameter by exactly -lr * its gradient (float32), the
 * next pass starts from the moved values (the loss falls for a small step), and a run trained
 * twice from scratch gives the same numbers bit for bit. */
Test(reference, update_and_iterate_train) {
  hap_graph *g = build("mlp:layers=2,batch=8,seq=4,hidden=16");
  hap_err err = {0};
  hap_reference *a = NULL, *b = NULL;
  cr_assert_eq(hap_reference_run(g, 7, &a, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_reference_run(g, 7, &b, &err), HAP_OK, "%s", err.msg);
  int32_t w = find(g, "layers.0.linear.weight");
  int64_t n = hap_tensor_numel(&g->tensors[w]);
  float *before = malloc((size_t)n * sizeof *before), *grad = malloc((size_t)n * sizeof *grad);
  cr_assert(before && grad);
  memcpy(before, hap_reference_value(a, w), (size_t)n * sizeof *before);
  memcpy(grad, hap_reference_grad(a, w), (size_t)n * sizeof *grad);
  double loss1 = hap_reference_loss(a);
  const float lr = 1e-4f;
  hap_reference_update(a, lr);
  const float *after = hap_reference_value(a, w);
  int64_t moved = 0;
  for (int64_t e = 0; e < n; e++) {
    cr_assert_eq(after[e], before[e] - lr * grad[e], "element %lld", (long long)e);
    moved += after[e] != before[e];
  }
  cr_assert(moved > n / 2, "only %lld of %lld elements moved", (long long)moved, (long long)n);
  cr_assert_eq(hap_reference_iterate(a, &err), HAP_OK, "%s", err.msg);
  double loss2 = hap_reference_loss(a);
  cr_assert(loss2 < loss1, "an SGD step of %g did not lower the loss: %.9g -> %.9g", (double)lr,
            loss1, loss2);
  cr_assert(memcmp(hap_reference_grad(a, w), grad, (size_t)n * sizeof *grad) != 0,
            "the second pass's gradient is the first's: not recomputed");
  hap_reference_update(b, lr);
  cr_assert_eq(hap_reference_iterate(b, &err), HAP_OK, "%s", err.msg);
  cr_assert(hap_reference_loss(b) == loss2);
  cr_assert(memcmp(hap_reference_grad(a, w), hap_reference_grad(b, w), (size_t)n * sizeof *grad) ==
            0);
  free(before);
  free(grad);
  hap_reference_destroy(a);
  hap_reference_destroy(b);
  hap_graph_destroy(g);
}
