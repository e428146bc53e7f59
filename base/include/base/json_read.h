/* json_read.h — helpers every JSON reader (hap-graph, hap-cluster, hap-plan) shares to walk a
 * jansson document and report one-line errors "<file>: <JSON path>: <what, what was expected>".
 * Ownership: paths and quotes are caller-owned buffers; nothing here allocates. */
#ifndef HAP_JSON_READ_H
#define HAP_JSON_READ_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef char hap_jpath[192]; /* a JSON path like nodes[17].attrs.dims[3] */
typedef char hap_jquote[80]; /* a user string shortened and escaped for a message */

/* "base[i]" and "base.key" ("key" when base is empty); paths longer than a buffer are cut. */
const char *hap_jpath_index(hap_jpath b, const char *base, size_t i);
const char *hap_jpath_key(hap_jpath b, const char *base, const char *key);
/* `s` for a message: control characters as \xNN, cut to about 60 bytes at a UTF-8 boundary. */
const char *hap_json_quote(const char *s, hap_jquote b);
/* "an object", "an integer", ... */
const char *hap_json_kind(const json_t *v);

/* Record "<label>: <path>: <message>" in err and return st. */
hap_status hap_json_vfail(const char *label, hap_err *err, hap_status st, const char *path,
                          const char *fmt, va_list ap);
/* Member `key` of `obj` (at `path`) into *out; NULL when absent and optional, HAP_EPARSE
 * "missing, expected <expected>" when required. */
hap_status hap_json_member(const char *label, hap_err *err, const json_t *obj, const char *path,
                           const char *key, bool required, const char *expected, json_t **out);
/* HAP_EPARSE "expected <expected>, got <kind>" unless v has the type. */
hap_status hap_json_want_type(const char *label, hap_err *err, const json_t *v, json_type type,
                              const char *path, const char *expected);
/* A string without NUL bytes. */
hap_status hap_json_want_str(const char *label, hap_err *err, const json_t *v, const char *path,
                             const char *expected, const char **out);

/* The header every hap JSON file starts with: "format" equal to `format` and "version"
 * "MAJOR.MINOR". A newer major is HAP_EVERSION ("written by a newer hap"); *strict is set when the
 * minor is one this build knows (then unknown keys are errors). */
hap_status hap_json_read_header(const char *label, hap_err *err, const json_t *root,
                                const char *format, int major_known, int minor_known, bool *strict);

#endif
