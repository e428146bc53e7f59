/* test_vec.c — base/vec.h: capacities, overflow checks, and arrays that keep their contents. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>

#include "base/vec.h"

Test(vec, next_cap_doubles_from_first) {
  cr_assert_eq(hap_vec_next_cap(0, 1, 16, INT32_MAX), 16);
  cr_assert_eq(hap_vec_next_cap(0, 17, 16, INT32_MAX), 32);
  cr_assert_eq(hap_vec_next_cap(16, 17, 16, INT32_MAX), 32);
  cr_assert_eq(hap_vec_next_cap(24, 100, 16, INT32_MAX), 192);
  cr_assert_eq(hap_vec_next_cap(64, 10, 16, INT32_MAX), 64, "already big enough");
}

Test(vec, next_cap_stops_at_max) {
  cr_assert_eq(hap_vec_next_cap(1 << 30, (1 << 30) + 1, 16, INT32_MAX), INT32_MAX);
  cr_assert_eq(hap_vec_next_cap(INT64_MAX / 2 + 1, INT64_MAX, 16, INT64_MAX), INT64_MAX);
  cr_assert_eq(hap_vec_next_cap(16, 100, 16, 50), -1, "need above max");
  cr_assert_eq(hap_vec_next_cap(0, 1, 0, 50), -1, "no first capacity");
}

Test(vec, realloc_checks_the_byte_size) {
  cr_assert_null(hap_vec_realloc(NULL, 0, 8));
  cr_assert_null(hap_vec_realloc(NULL, -1, 8));
  cr_assert_null(hap_vec_realloc(NULL, INT64_MAX, 16), "n * elem overflows");
  cr_assert_null(hap_vec_realloc(NULL, (int64_t)(SIZE_MAX / 8 + 1), 8));
  void *p = hap_vec_realloc(NULL, 3, 8);
  cr_assert_not_null(p);
  free(p);
}

typedef struct item {
  int32_t a;
  double b;
} item;

Test(vec, reserve_keeps_contents) {
  item *v = NULL;
  int32_t cap = 0;
  for (int32_t i = 0; i < 1000; i++) {
    cr_assert_eq(HAP_VEC_RESERVE(v, cap, (int64_t)i + 1, 8), 0);
    cr_assert_geq(cap, i + 1);
    v[i] = (item){i, i * 0.5};
  }
  cr_assert_eq(cap, 1024, "8 doubled");
  for (int32_t i = 0; i < 1000; i++)
    cr_assert(v[i].a == i && v[i].b == i * 0.5);
  free(v);
}

Test(vec, reserve64_keeps_contents) {
  int64_t *v = NULL, cap = 0;
  for (int64_t i = 0; i < 5000; i++) {
    cr_assert_eq(HAP_VEC_RESERVE64(v, cap, i + 1, 100), 0);
    v[i] = i * i;
  }
  cr_assert_eq(cap, 6400, "100 doubled");
  for (int64_t i = 0; i < 5000; i++)
    cr_assert_eq(v[i], i * i);
  free(v);
}

Test(vec, reserve_failure_leaves_the_array) {
  int32_t *v = NULL, cap = 0;
  cr_assert_eq(HAP_VEC_RESERVE(v, cap, 10, 16), 0);
  int32_t *before = v;
  v[9] = 42;
  cr_assert_eq(HAP_VEC_RESERVE(v, cap, (int64_t)INT32_MAX + 1, 16), -1, "beyond an int32 capacity");
  cr_assert_eq(v, before);
  cr_assert_eq(cap, 16);
  cr_assert_eq(v[9], 42);
  int64_t *w = NULL, wcap = 0;
  cr_assert_eq(HAP_VEC_RESERVE64(w, wcap, INT64_MAX, 16), -1, "bytes beyond size_t");
  cr_assert_null(w);
  cr_assert_eq(wcap, 0);
  cr_assert_eq(HAP_VEC_RESERVE(v, cap, 16, 16), 0, "room already there");
  cr_assert_eq(v, before);
  free(v);
}
