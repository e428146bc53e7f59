/* test_hash.c — base/hash.h: 64-bit FNV-1a (published test vectors), continuation, the word step,
 * and digest streams. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "base/hash.h"

Test(hash, fnv1a_vectors) {
  cr_assert_eq(hap_fnv1a("", 0), 0xcbf29ce484222325ULL);
  cr_assert_eq(hap_fnv1a("a", 1), 0xaf63dc4c8601ec8cULL);
  cr_assert_eq(hap_fnv1a("foobar", 6), 0x85944171f73967e8ULL);
}

Test(hash, fnv1a_continues) {
  const char *s = "hap-graph digest";
  uint64_t h = hap_fnv1a_more(HAP_FNV1A_OFFSET, s, 4);
  cr_assert_eq(hap_fnv1a_more(h, s + 4, strlen(s) - 4), hap_fnv1a(s, strlen(s)));
}

Test(hash, word_step) {
  cr_assert_eq(hap_fnv1a_word(HAP_KEY_HASH_BASIS, 7), (HAP_KEY_HASH_BASIS ^ 7) * HAP_FNV1A_PRIME);
  cr_assert_eq(HAP_KEY_HASH_BASIS, 1469598103934665603ULL, "the basis stored shape keys use");
}

Test(hash, digest_stream_hashes_what_was_written) {
  hap_digest_stream ds;
  cr_assert(hap_digest_open(&ds));
  fputs("foo", ds.f);
  fprintf(ds.f, "%s", "bar");
  uint64_t d = 0;
  cr_assert(hap_digest_close(&ds, &d));
  cr_assert_eq(d, 0x85944171f73967e8ULL);
  cr_assert(hap_digest_open(&ds));
  cr_assert(hap_digest_close(&ds, NULL), "nothing asked for");
}
