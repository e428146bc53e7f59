/* vec.c — growable arrays (vec.h). */
#include "base/vec.h"

#include <stdlib.h>

int64_t hap_vec_next_cap(int64_t cap, int64_t need, int64_t first, int64_t max) {
  if (cap >= need)
    return cap;
  if (need > max || first < 1)
    return -1;
  int64_t c = cap > 0 ? cap : first;
  while (c < need)
    c = c > max / 2 ? max : 2 * c;
  return c > max ? max : c;
}

void *hap_vec_realloc(void *p, int64_t n, size_t elem) {
  if (n < 1 || elem == 0 || (uint64_t)n > SIZE_MAX / elem)
    return NULL;
  return realloc(p, (size_t)n * elem);
}

int hap_vec_reserve64(void **arr, int64_t *cap, int64_t need, int64_t first, size_t elem) {
  if (need <= *cap)
    return 0;
  int64_t c = hap_vec_next_cap(*cap, need, first, INT64_MAX);
  void *p = c < 0 ? NULL : hap_vec_realloc(*arr, c, elem);
  if (p == NULL)
    return -1;
  *arr = p;
  *cap = c;
  return 0;
}

int hap_vec_reserve(void **arr, int32_t *cap, int64_t need, int32_t first, size_t elem) {
  if (need <= *cap)
    return 0;
  int64_t c = hap_vec_next_cap(*cap, need, first, INT32_MAX);
  void *p = c < 0 ? NULL : hap_vec_realloc(*arr, c, elem);
  if (p == NULL)
    return -1;
  *arr = p;
  *cap = (int32_t)c;
  return 0;
}
