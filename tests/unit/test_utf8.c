/* test_utf8.c — base/utf8.h: well-formed UTF-8 per Unicode's table 3-7, every scalar value
 * accepted in its one encoding and the malformed forms refused. */
#include <criterion/criterion.h>

#include <stdint.h>

#include "base/utf8.h"

/* The UTF-8 encoding of cp (no checks), NUL-terminated; its length. */
static size_t encode(uint32_t cp, unsigned char *b) {
  size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  if (n == 1)
    b[0] = (unsigned char)cp;
  else {
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
      b[i] = (unsigned char)(0x80 | (cp & 0x3F));
    b[0] = (unsigned char)((0xF00u >> n) | cp);
  }
  b[n] = 0;
  return n;
}

Test(utf8, every_scalar_value_in_its_encoding) {
  unsigned char b[8];
  for (uint32_t cp = 1; cp <= 0x10FFFF; cp++) {
    size_t n = encode(cp, b);
    bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    cr_assert_eq(hap_utf8_seq(b), surrogate ? 0 : n, "U+%04X", cp);
    cr_assert_eq(hap_utf8_valid((const char *)b), !surrogate, "U+%04X", cp);
  }
}

Test(utf8, malformed_forms) {
  static const char *const bad[] = {
      "\x80",             /* stray continuation byte */
      "\xC0\x80",         /* overlong NUL */
      "\xC1\xBF",         /* overlong 2-byte */
      "\xE0\x80\x80",     /* overlong 3-byte */
      "\xE0\x9F\xBF",     /* overlong 3-byte, highest */
      "\xED\xA0\x80",     /* surrogate U+D800 */
      "\xF0\x80\x80\x80", /* overlong 4-byte */
      "\xF4\x90\x80\x80", /* above U+10FFFF */
      "\xF5\x80\x80\x80", /* lead byte above F4 */
      "\xFF",
      "\xE2\x82",       /* truncated by the NUL */
      "\xC3",           /* truncated */
      "a\xC3(b",        /* continuation byte missing */
      "ok\xF0\x9F\x98", /* truncated 4-byte at the end */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert(!hap_utf8_valid(bad[i]), "case %zu", i);
  cr_assert_eq(hap_utf8_seq((const unsigned char *)"\xE2\x82"), 0);
}

Test(utf8, well_formed_strings) {
  cr_assert(hap_utf8_valid(""));
  cr_assert(hap_utf8_valid("plain ASCII, with \x7f"));
  cr_assert(hap_utf8_valid("gr\xC3\xBC\xC3\x9F"));               /* ü ß */
  cr_assert(hap_utf8_valid("\xE2\x82\xAC 5"));                   /* € */
  cr_assert(hap_utf8_valid("\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF")); /* U+1F600 U+10FFFF */
  cr_assert_eq(hap_utf8_seq((const unsigned char *)"\xF0\x9F\x98\x80"), 4);
  cr_assert_eq(hap_utf8_seq((const unsigned char *)""), 1, "the NUL is one byte");
}
