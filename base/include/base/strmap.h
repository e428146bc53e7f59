/* strmap.h — string → int32 map (open addressing) and a string arena, for name lookups in graphs,
 * plans and clusters. Ownership: the map borrows its keys (they must outlive it, e.g. live in an
 * hap_arena); hap_arena owns every string it returns until hap_arena_free. */
#ifndef HAP_STRMAP_H
#define HAP_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hap_strmap {
  const char **keys; /* NULL = empty slot */
  int32_t *vals;
  size_t cap; /* power of two */
  size_t len;
} hap_strmap;

void hap_strmap_init(hap_strmap *m);
void hap_strmap_free(hap_strmap *m);
/* Value of `key`, or -1. */
int32_t hap_strmap_get(const hap_strmap *m, const char *key);
/* Insert or overwrite; returns 0, or -1 on allocation failure. */
int hap_strmap_put(hap_strmap *m, const char *key, int32_t val);

typedef struct hap_arena_chunk hap_arena_chunk;
typedef struct hap_arena {
  hap_arena_chunk *head;
} hap_arena;

void hap_arena_init(hap_arena *a);
void hap_arena_free(hap_arena *a);
/* Copy of s owned by the arena; NULL on allocation failure. */
const char *hap_arena_strdup(hap_arena *a, const char *s);

#endif
