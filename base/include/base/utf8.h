/* utf8.h — UTF-8 well-formedness (Unicode's table 3-7: no stray continuation bytes, overlong
 * forms, surrogates or code points above U+10FFFF), what every JSON reader requires: the file
 * writers refuse text that would not read back, and the trace writer replaces what is not. */
#ifndef HAP_UTF8_H
#define HAP_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes (1-4) of the well-formed sequence starting at p, or 0 when p starts none (a NUL inside
 * the sequence ends it: truncated). p[0] is a byte of a NUL-terminated string; 1 for the NUL. */
size_t hap_utf8_seq(const unsigned char *p);

/* The NUL-terminated string `s` is well-formed UTF-8. */
bool hap_utf8_valid(const char *s);

#endif
