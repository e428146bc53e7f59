/* vec.h — growable arrays: the one place that doubles a capacity and reallocates, with the
 * element count and the byte size checked for overflow. An array is a pointer and a capacity the
 * caller keeps (int32_t or int64_t, as its counts are); the count of used elements stays the
 * caller's. Ownership: the arrays are malloc'ed; the caller frees them. */
#ifndef HAP_VEC_H
#define HAP_VEC_H

#include <stddef.h>
#include <stdint.h>

/* The capacity an array of capacity `cap` grows to so that it holds `need` elements: `cap`
 * (`first` when cap <= 0) doubled until it is >= need, at most `max`. `cap` itself when it is
 * already >= need; -1 when need > max or first < 1. */
int64_t hap_vec_next_cap(int64_t cap, int64_t need, int64_t first, int64_t max);

/* realloc(p, n * elem) with the product checked: NULL (p untouched) when n < 1, the product
 * overflows size_t, or memory runs out. */
void *hap_vec_realloc(void *p, int64_t n, size_t elem);

/* Room for `need` elements in *arr (capacity *cap), doubling from `first`: 0, or -1 when the
 * capacity would pass INT32_MAX (INT64_MAX for hap_vec_reserve64) or memory runs out — then *arr
 * and *cap are unchanged. */
int hap_vec_reserve(void **arr, int32_t *cap, int64_t need, int32_t first, size_t elem);
int hap_vec_reserve64(void **arr, int64_t *cap, int64_t need, int64_t first, size_t elem);

/* The same for an array variable `arr` of any element type: HAP_VEC_RESERVE(g->nodes, g->cap,
 * g->n + 1, 16) != 0 means out of memory. */
#define HAP_VEC_RESERVE(arr, cap, need, first)                                                     \
  hap_vec_reserve((void **)&(arr), &(cap), (need), (first), sizeof *(arr))
#define HAP_VEC_RESERVE64(arr, cap, need, first)                                                   \
  hap_vec_reserve64((void **)&(arr), &(cap), (need), (first), sizeof *(arr))

#endif
