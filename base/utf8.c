/* utf8.c — UTF-8 well-formedness (utf8.h). */
#include "base/utf8.h"

size_t hap_utf8_seq(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80)
    return 1;
  if (c < 0xC2)
    return 0;
  if (c < 0xE0)
    return (p[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c < 0xF0) {
    unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
  }
  if (c < 0xF5) {
    unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
  }
  return 0;
}

bool hap_utf8_valid(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = hap_utf8_seq(p);
    if (n == 0)
      return false;
    p += n;
  }
  return true;
}
