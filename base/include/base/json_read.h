/* json_read.h — what every JSON reader (hap-graph, hap-cluster, hap-plan) shares to parse a file
 * with jansson, walk the document and report one-line errors
 *   "<label>: <JSON path>: <what is wrong, what was expected>"   schema errors
 *   "<label>: line L, column C: <parser message>"                 JSON syntax errors
 * A reader embeds a hap_jr (label, error record, strictness) and passes it to the typed getters
 * below; each getter checks one value at one JSON path and fails with the file's conventions.
 * Ownership: paths and quotes are caller-owned buffers; the getters allocate nothing and return
 * strings that the jansson document owns. */
#ifndef HAP_JSON_READ_H
#define HAP_JSON_READ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* A reader's context. */
typedef struct hap_jr {
  const char *label; /* the file name for messages */
  hap_err *err;      /* where the first error goes (may be NULL) */
  bool strict;       /* unknown keys are errors (a file version this build knows) */
} hap_jr;

/* Parse `json` (len bytes) into *root, a JSON object: "the file is empty, expected a <format>
 * JSON object", a syntax error, or "root: expected a <format> object {"format": "<format>", ...},
 * got ..." otherwise (HAP_EPARSE). Duplicate keys are errors. The caller json_decref's *root. */
hap_status hap_jr_load(const hap_jr *r, const char *json, size_t len, const char *format,
                       json_t **root);
/* Replace control characters in err's message by spaces: jansson quotes the input in its texts,
 * and a message stays one line whatever the input held. */
void hap_jr_one_line(hap_err *err);

/* Record "<label>: <path>: <message>" and return st. */
hap_status hap_jr_fail(const hap_jr *r, hap_status st, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "<label>: out of memory" (HAP_ENOMEM). */
hap_status hap_jr_oom(const hap_jr *r);

/* The header every hap JSON file starts with: "format" equal to `format` and "version"
 * "MAJOR.MINOR". A newer major is HAP_EVERSION ("written by a newer hap"); r->strict is set when
 * the minor is one this build knows. Then the root's keys are checked (hap_jr_check_keys). */
hap_status hap_jr_read_header(hap_jr *r, const json_t *root, const char *format, int major_known,
                              int minor_known, const char *const *keys, const char *list);
/* In strict mode, "unknown key, expected one of <list>" for a key of `obj` (at `path`) that is
 * not in the NULL-terminated `allowed`. */
hap_status hap_jr_check_keys(const hap_jr *r, const json_t *obj, const char *path,
                             const char *const *allowed, const char *list);

/* Member `key` of `obj` (at `path`) into *out; NULL when absent and optional, "missing, expected
 * <expected>" when required. */
hap_status hap_jr_member(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                         bool required, const char *expected, json_t **out);

/* The typed getters: v at `path` is checked, then stored into *out. Failures are HAP_EPARSE. */
/* "expected <expected>, got <kind>" unless v has the type. */
hap_status hap_jr_want_type(const hap_jr *r, const json_t *v, json_type type, const char *path,
                            const char *expected);
/* A string without NUL bytes. */
hap_status hap_jr_want_str(const hap_jr *r, const json_t *v, const char *path, const char *expected,
                           const char **out);
/* A string without NUL bytes or control characters (messages stay one line). */
hap_status hap_jr_want_text(const hap_jr *r, const json_t *v, const char *path,
                            const char *expected, const char **out);
/* A name: non-empty text. */
hap_status hap_jr_want_name(const hap_jr *r, const json_t *v, const char *path, const char **out);
/* An integer in [lo, hi]: "is N, expected <expected>" outside. */
hap_status hap_jr_want_int(const hap_jr *r, const json_t *v, const char *path, int64_t lo,
                           int64_t hi, const char *expected, int64_t *out);
/* Any JSON number, integer or real (jansson holds finite ones only). */
hap_status hap_jr_want_num(const hap_jr *r, const json_t *v, const char *path, const char *expected,
                           double *out);
/* A number > 0 (HAP_JR_POSITIVE) or >= 0 (HAP_JR_NON_NEGATIVE); `what` names the quantity with
 * its unit ("a bandwidth in bytes/s"): "expected <what> > 0 (a number), got ...", "is X, expected
 * <what> > 0". */
typedef enum hap_jr_range { HAP_JR_POSITIVE, HAP_JR_NON_NEGATIVE } hap_jr_range;
hap_status hap_jr_want_amount(const hap_jr *r, const json_t *v, const char *path,
                              hap_jr_range range, const char *what, double *out);
/* true or false. */
hap_status hap_jr_want_bool(const hap_jr *r, const json_t *v, const char *path, bool *out);
/* An array of at most `max` entries. */
hap_status hap_jr_want_array(const hap_jr *r, const json_t *v, const char *path,
                             const char *expected, size_t max);

#endif
