/* hash.c — FNV-1a and digest streams (hash.h). */
#include "base/hash.h"

#include <stdlib.h>

uint64_t hap_fnv1a_more(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= HAP_FNV1A_PRIME;
  }
  return h;
}

uint64_t hap_fnv1a(const void *data, size_t n) { return hap_fnv1a_more(HAP_FNV1A_OFFSET, data, n); }

bool hap_digest_open(hap_digest_stream *s) {
  s->buf = NULL;
  s->len = 0;
  s->f = open_memstream(&s->buf, &s->len);
  return s->f != NULL;
}

bool hap_digest_close(hap_digest_stream *s, uint64_t *out) {
  bool ok = fclose(s->f) == 0;
  if (ok && out != NULL)
    *out = hap_fnv1a(s->buf, s->len);
  free(s->buf);
  s->f = NULL;
  s->buf = NULL;
  s->len = 0;
  return ok;
}
