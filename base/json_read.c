/* json_read.c — the JSON readers' shared scaffolding (json_read.h). */
#include "base/json_read.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *hap_jpath_index(hap_jpath b, const char *base, size_t i) {
  if (snprintf(b, sizeof(hap_jpath), "%s[%zu]", base, i) >= (int)sizeof(hap_jpath))
    b[sizeof(hap_jpath) - 1] = '\0';
  return b;
}

const char *hap_jpath_key(hap_jpath b, const char *base, const char *key) {
  if (snprintf(b, sizeof(hap_jpath), "%s%s%s", base, base[0] ? "." : "", key) >=
      (int)sizeof(hap_jpath))
    b[sizeof(hap_jpath) - 1] = '\0';
  return b;
}

const char *hap_json_quote(const char *s, hap_jquote b) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (o >= 60 && (*p & 0xC0) != 0x80) {
      memcpy(b + o, "...", 4);
      return b;
    }
    if (*p < 0x20 || *p == 0x7F)
      o += (size_t)snprintf(b + o, sizeof(hap_jquote) - o, "\\x%02x", *p);
    else
      b[o++] = (char)*p;
  }
  b[o] = '\0';
  return b;
}

const char *hap_json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE: return "true";
  case JSON_FALSE: return "false";
  case JSON_NULL: return "null";
  }
  return "?";
}

/* ---- errors --------------------------------------------------------------------------------- */

hap_status hap_jr_fail(const hap_jr *r, hap_status st, const char *path, const char *fmt, ...) {
  char what[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return hap_err_set(r->err, st, "%s: %s: %s", r->label, path, what);
}

hap_status hap_jr_oom(const hap_jr *r) {
  return hap_err_set(r->err, HAP_ENOMEM, "%s: out of memory", r->label);
}

void hap_jr_one_line(hap_err *err) {
  if (err == NULL)
    return;
  for (char *p = err->msg; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7F)
      *p = ' ';
}

/* ---- the document --------------------------------------------------------------------------- */

hap_status hap_jr_load(const hap_jr *r, const char *json, size_t len, const char *format,
                       json_t **root) {
  *root = NULL;
  size_t skip = 0;
  while (skip < len &&
         (json[skip] == ' ' || json[skip] == '\n' || json[skip] == '\r' || json[skip] == '\t'))
    skip++;
  if (skip == len)
    return hap_err_set(r->err, HAP_EPARSE, "%s: the file is empty, expected a %s JSON object",
                       r->label, format);
  json_error_t je;
  json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (doc == NULL) {
    hap_err_set(r->err, HAP_EPARSE, "%s: line %d, column %d: %s", r->label, je.line, je.column,
                je.text);
    hap_jr_one_line(r->err);
    return HAP_EPARSE;
  }
  if (!json_is_object(doc)) {
    hap_jr_fail(r, HAP_EPARSE, "root", "expected a %s object {\"format\": \"%s\", ...}, got %s",
                format, format, hap_json_kind(doc));
    json_decref(doc);
    hap_jr_one_line(r->err);
    return HAP_EPARSE;
  }
  *root = doc;
  return HAP_OK;
}

/* "MAJOR.MINOR", both plain decimal numbers of at most 6 digits. */
static bool parse_version(const char *s, int *major, int *minor) {
  int *part[2] = {major, minor};
  for (int k = 0; k < 2; k++) {
    int n = 0, v = 0;
    for (; s[n] >= '0' && s[n] <= '9' && n < 7; n++)
      v = v * 10 + (s[n] - '0');
    if (n == 0 || n > 6)
      return false;
    *part[k] = v;
    s += n;
    if (k == 0 && *s++ != '.')
      return false;
  }
  return *s == '\0';
}

hap_status hap_jr_read_header(hap_jr *r, const json_t *root, const char *format, int major_known,
                              int minor_known, const char *const *keys, const char *list) {
  json_t *v;
  const char *s;
  hap_jquote b;
  char expected[64];
  snprintf(expected, sizeof expected, "\"%s\"", format);
  HAP_TRY(hap_jr_member(r, root, "", "format", true, expected, &v));
  HAP_TRY(hap_jr_want_str(r, v, "format", expected, &s));
  if (strcmp(s, format) != 0)
    return hap_jr_fail(r, HAP_EPARSE, "format", "is \"%s\", expected %s", hap_json_quote(s, b),
                       expected);
  HAP_TRY(hap_jr_member(r, root, "", "version", true, "a version string such as \"1.0\"", &v));
  HAP_TRY(hap_jr_want_str(r, v, "version", "a version string \"MAJOR.MINOR\" such as \"1.0\"", &s));
  int major = 0, minor = 0;
  if (!parse_version(s, &major, &minor))
    return hap_jr_fail(r, HAP_EPARSE, "version",
                       "is \"%s\", expected \"MAJOR.MINOR\" such as \"1.0\"", hap_json_quote(s, b));
  if (major > major_known)
    return hap_jr_fail(r, HAP_EVERSION, "version",
                       "the file was written by a newer hap (format version %d.%d); this build "
                       "reads %d.x",
                       major, minor, major_known);
  if (major < major_known)
    return hap_jr_fail(r, HAP_EPARSE, "version",
                       "format version %d.%d does not exist, expected %d.x", major, minor,
                       major_known);
  r->strict = minor <= minor_known;
  return hap_jr_check_keys(r, root, "", keys, list);
}

hap_status hap_jr_check_keys(const hap_jr *r, const json_t *obj, const char *path,
                             const char *const *allowed, const char *list) {
  if (!r->strict)
    return HAP_OK;
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)obj, key, val) {
    bool ok = false;
    for (int i = 0; allowed[i] && !ok; i++)
      ok = strcmp(key, allowed[i]) == 0;
    if (!ok) {
      hap_jpath p;
      hap_jquote b;
      return hap_jr_fail(r, HAP_EPARSE, hap_jpath_key(p, path, hap_json_quote(key, b)),
                         "unknown key, expected one of %s", list);
    }
  }
  return HAP_OK;
}

hap_status hap_jr_member(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                         bool required, const char *expected, json_t **out) {
  *out = json_object_get(obj, key);
  if (*out == NULL && required) {
    hap_jpath p;
    return hap_jr_fail(r, HAP_EPARSE, hap_jpath_key(p, path, key), "missing, expected %s",
                       expected);
  }
  return HAP_OK;
}

/* ---- typed getters -------------------------------------------------------------------------- */

hap_status hap_jr_want_type(const hap_jr *r, const json_t *v, json_type type, const char *path,
                            const char *expected) {
  if (json_typeof(v) != type)
    return hap_jr_fail(r, HAP_EPARSE, path, "expected %s, got %s", expected, hap_json_kind(v));
  return HAP_OK;
}

hap_status hap_jr_want_str(const hap_jr *r, const json_t *v, const char *path, const char *expected,
                           const char **out) {
  HAP_TRY(hap_jr_want_type(r, v, JSON_STRING, path, expected));
  *out = json_string_value(v);
  if (strlen(*out) != json_string_length(v))
    return hap_jr_fail(r, HAP_EPARSE, path, "contains a NUL byte, expected plain text");
  return HAP_OK;
}

hap_status hap_jr_want_text(const hap_jr *r, const json_t *v, const char *path,
                            const char *expected, const char **out) {
  HAP_TRY(hap_jr_want_str(r, v, path, expected, out));
  for (const unsigned char *p = (const unsigned char *)*out; *p; p++) {
    hap_jquote b;
    if (*p < 0x20 || *p == 0x7F)
      return hap_jr_fail(r, HAP_EPARSE, path,
                         "'%s' contains a control character, expected plain text",
                         hap_json_quote(*out, b));
  }
  return HAP_OK;
}

hap_status hap_jr_want_name(const hap_jr *r, const json_t *v, const char *path, const char **out) {
  HAP_TRY(hap_jr_want_text(r, v, path, "a non-empty name", out));
  if ((*out)[0] == '\0')
    return hap_jr_fail(r, HAP_EPARSE, path, "is empty, expected a non-empty name");
  return HAP_OK;
}

hap_status hap_jr_want_int(const hap_jr *r, const json_t *v, const char *path, int64_t lo,
                           int64_t hi, const char *expected, int64_t *out) {
  HAP_TRY(hap_jr_want_type(r, v, JSON_INTEGER, path, expected));
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return hap_jr_fail(r, HAP_EPARSE, path, "is %lld, expected %s", (long long)x, expected);
  *out = (int64_t)x;
  return HAP_OK;
}

hap_status hap_jr_want_num(const hap_jr *r, const json_t *v, const char *path, const char *expected,
                           double *out) {
  if (!json_is_number(v))
    return hap_jr_fail(r, HAP_EPARSE, path, "expected %s, got %s", expected, hap_json_kind(v));
  *out = json_number_value(v);
  return HAP_OK;
}

hap_status hap_jr_want_amount(const hap_jr *r, const json_t *v, const char *path,
                              hap_jr_range range, const char *what, double *out) {
  const char *rel = range == HAP_JR_POSITIVE ? "> 0" : ">= 0";
  if (!json_is_number(v))
    return hap_jr_fail(r, HAP_EPARSE, path, "expected %s %s (a number), got %s", what, rel,
                       hap_json_kind(v));
  double x = json_number_value(v);
  bool ok = isfinite(x) && (range == HAP_JR_POSITIVE ? x > 0 : x >= 0);
  if (!ok)
    return hap_jr_fail(r, HAP_EPARSE, path, "is %g, expected %s %s", x, what, rel);
  *out = x;
  return HAP_OK;
}

hap_status hap_jr_want_bool(const hap_jr *r, const json_t *v, const char *path, bool *out) {
  if (!json_is_boolean(v))
    return hap_jr_fail(r, HAP_EPARSE, path, "expected true or false, got %s", hap_json_kind(v));
  *out = json_is_true(v);
  return HAP_OK;
}

hap_status hap_jr_want_array(const hap_jr *r, const json_t *v, const char *path,
                             const char *expected, size_t max) {
  HAP_TRY(hap_jr_want_type(r, v, JSON_ARRAY, path, expected));
  if (json_array_size(v) > max)
    return hap_jr_fail(r, HAP_EPARSE, path, "has %zu entries, expected at most %zu",
                       json_array_size(v), max);
  return HAP_OK;
}
