/* sharding.h — the sharding rules of every op: which layouts of its inputs produce which layouts of
 * its outputs (HAP's computation triples), the local shapes of one device's application, and shard
 * lengths from ratios. The rules are docs/sharding.md; each variant is sound for any shard lengths
 * (uneven, zero allowed): running the op on every device's local inputs and combining the outputs
 * by their layouts gives exactly the op's output on the full inputs. Ownership: variants are
 * caller-owned values; names point to static strings. */
#ifndef HAP_SHARDING_H
#define HAP_SHARDING_H

#include <stdint.h>

#include "base/status.h"
#include "model/ops.h"

/* How a tensor lives on the devices (HAP's properties). >= 0: Gather(d), device i holds the i-th
 * contiguous slice of dim d (slices in rank order concatenate to the tensor). */
enum {
  HAP_LAYOUT_IDENTITY = -1, /* every device holds the full tensor */
  HAP_LAYOUT_REDUCE = -2    /* every device holds a full-shaped partial sum; they sum to it */
};
typedef int8_t hap_layout;

/* Conditions a variant places on the local kernel (beyond running the plain op on local inputs). */
enum {
  /* An additive term is applied by device 0 only, the others use zero, so that a Reduce output
   * sums correctly: the inputs in `once` (a bias, the Identity addend of add/sub, the class token
   * of cls_append) or, for add/sub with one input, the scalar. */
  HAP_VARIANT_BIAS_ONCE = 1u << 0,
  /* A mean (the mean op over a sharded dim, a loss with reduction "mean") divides by the element
   * count of the full tensor, not the local one. */
  HAP_VARIANT_GLOBAL_COUNT = 1u << 1,
  /* Dropout masks are a function of the global element position (a counter-based generator),
   * so every device draws the mask the replicated op would; set when the probability is > 0. */
  HAP_VARIANT_GLOBAL_MASK = 1u << 2,
  /* embedding, vocab-parallel: the device holds weight rows [off, off + len); it looks up index
   * i as local row i - off when that is in range and writes a zero row otherwise. */
  HAP_VARIANT_LOCAL_ROWS = 1u << 3
};

/* Enough for every op at every rank (the largest is a two-operand einsum with 16 indices). */
#define HAP_MAX_VARIANTS 24

typedef struct hap_variant {
  hap_layout in[HAP_MAX_OP_INPUTS];
  hap_layout out[HAP_MAX_OP_OUTPUTS];
  /* Every Gather of a variant shards the same index: the sharded dims have one full extent
   * (hap_variant_extent) and one local length per device, a multiple of `granule` (attention
   * heads: E / heads; 1 otherwise). */
  int64_t granule;
  uint8_t flags;    /* HAP_VARIANT_* */
  uint8_t once;     /* bit i: input i is applied by device 0 only (HAP_VARIANT_BIAS_ONCE) */
  const char *name; /* "replicated", "data-parallel", "row-parallel", "head-parallel", ... */
} hap_variant;

/* All valid variants of `op` at the full shapes in io (io has passed hap_op_infer), at most `max`
 * (HAP_MAX_VARIANTS always suffices), in a fixed order: variant 0 is replicated (every input and
 * output Identity), then Gather outputs by output dim, then Gather -> Reduce, then partial-sum
 * passthroughs. Returns the number written. */
int hap_op_variants(hap_op op, const hap_op_io *io, hap_variant *out, int max);

/* Full extent of the index v shards (the size of every Gather dim), 0 when v has no Gather. */
int64_t hap_variant_extent(const hap_op_io *io, const hap_variant *v);

/* The application on one device holding `len` of the sharded index (0 <= len <= extent, a
 * multiple of v->granule; ignored when v has no Gather): `local` gets the full io with every
 * Gather dim replaced by len, and `local_attrs` (which local->attrs points to) the full attributes
 * with the ones that follow the shard adjusted (reshape's target shape, attention's head count).
 * The local application is checked with hap_op_infer (at a positive stand-in length when len is 0,
 * since inference rejects empty dims). HAP_EINVAL for a malformed variant or length. */
hap_status hap_op_local_io(hap_op op, const hap_op_io *full, const hap_variant *v, int64_t len,
                           hap_attrs *local_attrs, hap_op_io *local, hap_err *err);

/* Split `len` (a multiple of granule >= 1) into n parts, multiples of granule, by largest-remainder
 * rounding of the ratios (finite, >= 0, summing to 1 within 1e-9): with U = len / granule units,
 * part i gets floor(r_i U) units, then the units left go one by one to the largest r_i - units_i /
 * U, ties to the lower rank. Parts may be zero; they always sum to len. HAP_EINVAL otherwise. */
hap_status hap_shard_lengths(int64_t len, int64_t granule, const double *ratios, int n,
                             int64_t *out, hap_err *err);

/* Re-sharding one dim between two contiguous splits of the same extent (from[] and to[]: n part
 * lengths in device order, each list summing to the extent): moved[i] = the larger of what part i
 * sends to other devices and what it receives from them, in the dim's units (what it keeps of its
 * own part stays put). All zero when the splits are equal. */
void hap_shard_moved(const int64_t *from, const int64_t *to, int n, int64_t *moved);

/* Whether segments a and b of `ratios` ([n_segments][n]) split alike: a == b, or both are
 * segments whose rows are identical bit for bit (so every dim gets the same lengths). */
bool hap_ratio_rows_same(const double *ratios, int32_t n_segments, int32_t n, int32_t a, int32_t b);

/* hap_shard_lengths under fixed ratios, computed once per (extent, granule, segment) and kept:
 * the lowering and the synthesizer ask for the same few lengths again and again.
 * Ownership: the cache borrows `ratios` ([n_segments][n]); its caller keeps them alive and calls
 * hap_shard_cache_clear when they change. The lengths it returns live until the next clear. */
typedef struct hap_shard_cache_entry hap_shard_cache_entry;
typedef struct hap_shard_cache {
  const double *ratios;
  int32_t n_segments, n;
  hap_shard_cache_entry *entries;
  int32_t n_entries, cap_entries;
} hap_shard_cache;

void hap_shard_cache_init(hap_shard_cache *c, const double *ratios, int32_t n_segments, int32_t n);
/* The n lengths of a dim of `extent` split in `granule` units by segment `seg`'s ratios; NULL when
 * seg is not a segment, hap_shard_lengths refuses the split, or memory runs out. */
const int64_t *hap_shard_cache_get(hap_shard_cache *c, int64_t extent, int64_t granule,
                                   int32_t seg);
/* Forget every length (the ratios changed). */
void hap_shard_cache_clear(hap_shard_cache *c);
void hap_shard_cache_free(hap_shard_cache *c);

#endif
