/* hash.h — 64-bit FNV-1a, the one hash behind the graph and cluster digests (over bytes) and the
 * lookup keys and tables that hash machine words (hap_fnv1a_word: one step per 64-bit value, not
 * per byte; some mix further with h ^= h >> 29).
 * Values are part of hap's files (plan digests, kernel shape keys): they never change.
 * Ownership: hap_digest_stream owns its buffer from open to close. */
#ifndef HAP_HASH_H
#define HAP_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HAP_FNV1A_OFFSET 0xcbf29ce484222325ULL /* 14695981039346656037 */
#define HAP_FNV1A_PRIME  0x100000001b3ULL      /* 1099511628211 */
/* The basis hap's lookup keys and in-memory tables start from: 1469598103934665603, FNV's offset
 * basis short of its last digit. Kernel shape keys (hap_kernel_shape_key) are stored in files,
 * so it stays as it is. */
#define HAP_KEY_HASH_BASIS 1469598103934665603ULL

/* FNV-1a of n bytes, continuing from `h` (HAP_FNV1A_OFFSET to start). */
uint64_t hap_fnv1a_more(uint64_t h, const void *data, size_t n);
/* FNV-1a of n bytes. */
uint64_t hap_fnv1a(const void *data, size_t n);
/* One FNV-1a step with a whole 64-bit word: (h ^ v) * prime. */
static inline uint64_t hap_fnv1a_word(uint64_t h, uint64_t v) { return (h ^ v) * HAP_FNV1A_PRIME; }

/* A memory stream whose contents are hashed when it closes: a digest of what a writer writes. */
typedef struct hap_digest_stream {
  FILE *f; /* write here between open and close */
  char *buf;
  size_t len;
} hap_digest_stream;

/* false when out of memory. */
bool hap_digest_open(hap_digest_stream *s);
/* Close, hash what was written into *out (when out is non-NULL) and free; false (nothing hashed)
 * when the stream failed (out of memory). */
bool hap_digest_close(hap_digest_stream *s, uint64_t *out);

#endif
