#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

static uint64_t hash_str(const char *s) { return hap_fnv1a_more(HAP_KEY_HASH_BASIS, s, strlen(s)); }

void hap_strmap_init(hap_strmap *m) { memset(m, 0, sizeof *m); }

void hap_strmap_free(hap_strmap *m) {
  free((void *)m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

int32_t hap_strmap_get(const hap_strmap *m, const char *key) {
  if (m->cap == 0)
    return -1;
  size_t mask = m->cap - 1;
  for (size_t i = hash_str(key) & mask;; i = (i + 1) & mask) {
    if (m->keys[i] == NULL)
      return -1;
    if (strcmp(m->keys[i], key) == 0)
      return m->vals[i];
  }
}

/* Twice the slots (64 at first), every key re-inserted: a rehash, not an array growing. */
static int rehash(hap_strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  const char **keys = calloc(cap, sizeof *keys);
  int32_t *vals = calloc(cap, sizeof *vals);
  if (keys == NULL || vals == NULL) {
    free((void *)keys);
    free(vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (m->keys[i] == NULL)
      continue;
    size_t j = hash_str(m->keys[i]) & (cap - 1);
    while (keys[j] != NULL)
      j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    vals[j] = m->vals[i];
  }
  free((void *)m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
  return 0;
}

int hap_strmap_put(hap_strmap *m, const char *key, int32_t val) {
  if ((m->len + 1) * 2 > m->cap && rehash(m) != 0)
    return -1;
  size_t mask = m->cap - 1;
  size_t i = hash_str(key) & mask;
  while (m->keys[i] != NULL && strcmp(m->keys[i], key) != 0)
    i = (i + 1) & mask;
  if (m->keys[i] == NULL) {
    m->keys[i] = key;
    m->len++;
  }
  m->vals[i] = val;
  return 0;
}

struct hap_arena_chunk {
  hap_arena_chunk *next;
  size_t used, cap;
  char data[];
};

void hap_arena_init(hap_arena *a) { a->head = NULL; }

void hap_arena_free(hap_arena *a) {
  hap_arena_chunk *c = a->head;
  while (c != NULL) {
    hap_arena_chunk *next = c->next;
    free(c);
    c = next;
  }
  a->head = NULL;
}

const char *hap_arena_strdup(hap_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  hap_arena_chunk *c = a->head;
  if (c == NULL || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = malloc(sizeof *c + cap);
    if (c == NULL)
      return NULL;
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
  }
  char *p = c->data + c->used;
  memcpy(p, s, n);
  c->used += n;
  return p;
}
