#include "base/json_read.h"

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

hap_status hap_json_vfail(const char *label, hap_err *err, hap_status st, const char *path,
                          const char *fmt, va_list ap) {
  char what[768];
  vsnprintf(what, sizeof what, fmt, ap);
  return hap_err_set(err, st, "%s: %s: %s", label, path, what);
}

static hap_status fail(const char *label, hap_err *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static hap_status fail(const char *label, hap_err *err, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hap_status st = hap_json_vfail(label, err, HAP_EPARSE, path, fmt, ap);
  va_end(ap);
  return st;
}

hap_status hap_json_member(const char *label, hap_err *err, const json_t *obj, const char *path,
                           const char *key, bool required, const char *expected, json_t **out) {
  *out = json_object_get(obj, key);
  if (*out == NULL && required) {
    hap_jpath p;
    return fail(label, err, hap_jpath_key(p, path, key), "missing, expected %s", expected);
  }
  return HAP_OK;
}

hap_status hap_json_want_type(const char *label, hap_err *err, const json_t *v, json_type type,
                              const char *path, const char *expected) {
  if (json_typeof(v) != type)
    return fail(label, err, path, "expected %s, got %s", expected, hap_json_kind(v));
  return HAP_OK;
}

hap_status hap_json_want_str(const char *label, hap_err *err, const json_t *v, const char *path,
                             const char *expected, const char **out) {
  HAP_TRY(hap_json_want_type(label, err, v, JSON_STRING, path, expected));
  *out = json_string_value(v);
  if (strlen(*out) != json_string_length(v))
    return fail(label, err, path, "contains a NUL byte, expected plain text");
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

static hap_status failst(const char *label, hap_err *err, hap_status st, const char *path,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static hap_status failst(const char *label, hap_err *err, hap_status st, const char *path,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hap_status r = hap_json_vfail(label, err, st, path, fmt, ap);
  va_end(ap);
  return r;
}

hap_status hap_json_read_header(const char *label, hap_err *err, const json_t *root,
                                const char *format, int major_known, int minor_known,
                                bool *strict) {
  json_t *v;
  const char *s;
  hap_jquote b;
  char expected[64];
  snprintf(expected, sizeof expected, "\"%s\"", format);
  HAP_TRY(hap_json_member(label, err, root, "", "format", true, expected, &v));
  HAP_TRY(hap_json_want_str(label, err, v, "format", expected, &s));
  if (strcmp(s, format) != 0)
    return failst(label, err, HAP_EPARSE, "format", "is \"%s\", expected %s", hap_json_quote(s, b),
                  expected);
  HAP_TRY(hap_json_member(label, err, root, "", "version", true, "a version string such as \"1.0\"",
                          &v));
  HAP_TRY(hap_json_want_str(label, err, v, "version",
                            "a version string \"MAJOR.MINOR\" such as \"1.0\"", &s));
  int major, minor;
  if (!parse_version(s, &major, &minor))
    return failst(label, err, HAP_EPARSE, "version",
                  "is \"%s\", expected \"MAJOR.MINOR\" such as \"1.0\"", hap_json_quote(s, b));
  if (major > major_known)
    return failst(label, err, HAP_EVERSION, "version",
                  "the file was written by a newer hap (format version %d.%d); this build reads "
                  "%d.x",
                  major, minor, major_known);
  if (major < major_known)
    return failst(label, err, HAP_EPARSE, "version",
                  "format version %d.%d does not exist, expected %d.x", major, minor, major_known);
  *strict = minor <= minor_known;
  return HAP_OK;
}
