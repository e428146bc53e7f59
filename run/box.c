/* box.c — boxes of tensors and copies between their row-major buffers (box.h). */
#include "run/box.h"

#include <string.h>

hap_box hap_box_full(const hap_shape *s) {
  hap_box b;
  memset(&b, 0, sizeof b);
  b.rank = s->rank;
  for (int k = 0; k < s->rank; k++)
    b.hi[k] = s->dims[k];
  return b;
}

hap_box hap_box_slice(const hap_shape *s, int d, int64_t offset, int64_t length) {
  hap_box b = hap_box_full(s);
  b.lo[d] = offset;
  b.hi[d] = offset + length;
  return b;
}

int64_t hap_box_numel(const hap_box *b) {
  int64_t n = 1;
  for (int k = 0; k < b->rank; k++)
    n *= b->hi[k] > b->lo[k] ? b->hi[k] - b->lo[k] : 0;
  return n;
}

hap_shape hap_box_shape(const hap_box *b) {
  hap_shape s;
  memset(&s, 0, sizeof s);
  s.rank = b->rank;
  for (int k = 0; k < b->rank; k++)
    s.dims[k] = b->hi[k] > b->lo[k] ? b->hi[k] - b->lo[k] : 0;
  return s;
}

bool hap_box_intersect(const hap_box *a, const hap_box *b, hap_box *out) {
  hap_box r;
  memset(&r, 0, sizeof r);
  r.rank = a->rank;
  bool nonempty = true;
  for (int k = 0; k < a->rank; k++) {
    r.lo[k] = a->lo[k] > b->lo[k] ? a->lo[k] : b->lo[k];
    r.hi[k] = a->hi[k] < b->hi[k] ? a->hi[k] : b->hi[k];
    nonempty = nonempty && r.hi[k] > r.lo[k];
  }
  *out = r;
  return nonempty;
}

/* Row-major strides (elements) of the first n dims of a buffer laid out as box (n: the region's
 * rank, which every box of one copy shares). */
static void strides_of(const hap_box *box, int n, int64_t *stride) {
  int64_t s = 1;
  for (int k = n - 1; k >= 0; k--) {
    stride[k] = s;
    s *= box->hi[k] - box->lo[k];
  }
}

/* Copy the region row by row (the last dim is contiguous in every layout). A NULL box means
 * "packed": laid out as the region itself. */
static void walk(const hap_box *region, const char *src, const hap_box *src_box, char *dst,
                 const hap_box *dst_box, size_t elem) {
  int n = region->rank;
  if (hap_box_numel(region) == 0)
    return;
  if (n == 0) {
    memcpy(dst, src, elem);
    return;
  }
  int64_t ss[HAP_MAX_DIMS], ds[HAP_MAX_DIMS];
  hap_box packed = *region;
  strides_of(src_box ? src_box : &packed, n, ss);
  strides_of(dst_box ? dst_box : &packed, n, ds);
  const hap_box *sb = src_box ? src_box : &packed, *db = dst_box ? dst_box : &packed;
  int64_t idx[HAP_MAX_DIMS];
  for (int k = 0; k < n; k++)
    idx[k] = region->lo[k];
  size_t row = (size_t)(region->hi[n - 1] - region->lo[n - 1]) * elem;
  for (;;) {
    int64_t so = 0, dof = 0;
    for (int k = 0; k < n; k++) {
      so += (idx[k] - sb->lo[k]) * ss[k];
      dof += (idx[k] - db->lo[k]) * ds[k];
    }
    memcpy(dst + (size_t)dof * elem, src + (size_t)so * elem, row);
    int k = n - 2;
    while (k >= 0) {
      if (++idx[k] < region->hi[k])
        break;
      idx[k] = region->lo[k];
      k--;
    }
    if (k < 0)
      return;
  }
}

void hap_box_copy(const hap_box *region, const void *src, const hap_box *src_box, void *dst,
                  const hap_box *dst_box, size_t elem) {
  walk(region, src, src_box, dst, dst_box, elem);
}

void hap_box_pack(const hap_box *region, const void *src, const hap_box *src_box, void *dst,
                  size_t elem) {
  walk(region, src, src_box, dst, NULL, elem);
}

void hap_box_unpack(const hap_box *region, const void *src, void *dst, const hap_box *dst_box,
                    size_t elem) {
  walk(region, src, NULL, dst, dst_box, elem);
}
