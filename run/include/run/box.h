/* box.h — a box of a tensor in global coordinates: dims [lo[k], hi[k]) of a tensor of rank n. A
 * device's share of a tensor under a layout is a box (Identity and Reduce: the whole tensor;
 * Gather(d): the whole tensor but [offset, offset + length) along d), and its local buffer holds
 * the box's elements row-major. Moving data between layouts is copying box intersections.
 * Ownership: plain values. */
#ifndef HAP_RUN_BOX_H
#define HAP_RUN_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/ops.h"

typedef struct hap_box {
  int32_t rank; /* tensor rank, 0 .. HAP_MAX_DIMS */
  int64_t lo[HAP_MAX_DIMS], hi[HAP_MAX_DIMS];
} hap_box;

/* The whole tensor of shape s. */
hap_box hap_box_full(const hap_shape *s);
/* The whole tensor with dim d restricted to [offset, offset + length). */
hap_box hap_box_slice(const hap_shape *s, int d, int64_t offset, int64_t length);
/* Elements in the box (0 if any extent is empty). */
int64_t hap_box_numel(const hap_box *b);
/* The box's extents as a shape (hi - lo per dim). */
hap_shape hap_box_shape(const hap_box *b);
/* a ∩ b; false when empty. */
bool hap_box_intersect(const hap_box *a, const hap_box *b, hap_box *out);
/* Copy the elements of `region` (inside both boxes) from src (laid out as src_box, row-major,
 * elem bytes each) to dst (laid out as dst_box). */
void hap_box_copy(const hap_box *region, const void *src, const hap_box *src_box, void *dst,
                  const hap_box *dst_box, size_t elem);
/* Pack `region` of src (laid out as src_box) contiguously into dst, and the reverse. */
void hap_box_pack(const hap_box *region, const void *src, const hap_box *src_box, void *dst,
                  size_t elem);
void hap_box_unpack(const hap_box *region, const void *src, void *dst, const hap_box *dst_box,
                    size_t elem);

#endif
