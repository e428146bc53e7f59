/* test_json_read.c — base/json_read.h: loading, the header, unknown keys and the typed getters,
 * each failing with "<label>: <JSON path>: <what, what was expected>". */
#include <criterion/criterion.h>

#include <string.h>

#include "base/json_read.h"

static json_t *load_ok(hap_jr *r, const char *text) {
  json_t *root = NULL;
  cr_assert_eq(hap_jr_load(r, text, strlen(text), "hap-test", &root), HAP_OK, "%s", r->err->msg);
  return root;
}

static void load_fails(const char *text, const char *msg) {
  hap_err err = {0};
  hap_jr r = {.label = "f.json", .err = &err, .strict = true};
  json_t *root = (json_t *)&r;
  cr_assert_eq(hap_jr_load(&r, text, strlen(text), "hap-test", &root), HAP_EPARSE);
  cr_assert_null(root);
  cr_assert_str_eq(err.msg, msg);
}

Test(json_read, load_errors) {
  load_fails(" \n\t", "f.json: the file is empty, expected a hap-test JSON object");
  load_fails("[1, 2]",
             "f.json: root: expected a hap-test object {\"format\": \"hap-test\", ...}, got "
             "an array");
  load_fails("{\"a\": 1, \"a\": 2}",
             "f.json: line 1, column 12: duplicate object key near '\"a\"'");
  hap_err err = {0};
  hap_jr r = {.label = "f.json", .err = &err};
  json_t *root;
  cr_assert_eq(hap_jr_load(&r, "{\"a\":\n\"x\ny\"}", 12, "hap-test", &root), HAP_EPARSE);
  cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
}

Test(json_read, header_and_keys) {
  static const char *const keys[] = {"format", "version", "x", NULL};
  hap_err err = {0};
  hap_jr r = {.label = "f.json", .err = &err, .strict = true};
  json_t *root = load_ok(&r, "{\"format\": \"hap-test\", \"version\": \"1.3\", \"y\": 1}");
  cr_assert_eq(hap_jr_read_header(&r, root, "hap-test", 1, 2, keys, "format, version, x"), HAP_OK,
               "a newer minor: unknown keys are ignored (%s)", err.msg);
  cr_assert(!r.strict);
  json_decref(root);
  r.strict = true;
  root = load_ok(&r, "{\"format\": \"hap-test\", \"version\": \"1.0\", \"y\": 1}");
  cr_assert_eq(hap_jr_read_header(&r, root, "hap-test", 1, 2, keys, "format, version, x"),
               HAP_EPARSE);
  cr_assert_str_eq(err.msg, "f.json: y: unknown key, expected one of format, version, x");
  json_decref(root);
  hap_err_clear(&err);
  root = load_ok(&r, "{\"format\": \"hap-test\", \"version\": \"2.0\"}");
  cr_assert_eq(hap_jr_read_header(&r, root, "hap-test", 1, 2, keys, "format, version, x"),
               HAP_EVERSION);
  cr_assert_str_eq(err.msg, "f.json: version: the file was written by a newer hap (format version "
                            "2.0); this build reads 1.x");
  json_decref(root);
  hap_err_clear(&err);
  root = load_ok(&r, "{\"format\": \"hap-other\", \"version\": \"1.0\"}");
  cr_assert_eq(hap_jr_read_header(&r, root, "hap-test", 1, 2, keys, "format, version, x"),
               HAP_EPARSE);
  cr_assert_str_eq(err.msg, "f.json: format: is \"hap-other\", expected \"hap-test\"");
  json_decref(root);
}

/* Run `call_` on member "v" of `text_` (as v, the document as root); it fails with `want_`. */
#define GETTER_FAILS(text_, want_, call_)                                                          \
  do {                                                                                             \
    hap_err err = {0};                                                                             \
    hap_jr r = {.label = "f.json", .err = &err, .strict = true};                                   \
    json_t *root = load_ok(&r, text_);                                                             \
    json_t *v = json_object_get(root, "v");                                                        \
    (void)v;                                                                                       \
    cr_assert_neq((call_), HAP_OK);                                                                \
    cr_assert_str_eq(err.msg, want_);                                                              \
    json_decref(root);                                                                             \
  } while (0)

Test(json_read, getters_fail_with_paths) {
  int64_t i;
  double d;
  bool b;
  const char *s;
  json_t *m;
  GETTER_FAILS("{\"v\": 1}", "f.json: a.w: missing, expected a thing",
               hap_jr_member(&r, root, "a", "w", true, "a thing", &m));
  GETTER_FAILS("{\"v\": 7}", "f.json: v: is 7, expected 1..5",
               hap_jr_want_int(&r, v, "v", 1, 5, "1..5", &i));
  GETTER_FAILS("{\"v\": 1.5}", "f.json: v: expected an integer, got a real number",
               hap_jr_want_int(&r, v, "v", 1, 5, "an integer", &i));
  GETTER_FAILS("{\"v\": \"\"}", "f.json: v: is empty, expected a non-empty name",
               hap_jr_want_name(&r, v, "v", &s));
  GETTER_FAILS("{\"v\": \"a\\nb\"}",
               "f.json: v: 'a\\x0ab' contains a control character, expected plain text",
               hap_jr_want_name(&r, v, "v", &s));
  GETTER_FAILS("{\"v\": true}", "f.json: v: expected a time, got true",
               hap_jr_want_num(&r, v, "v", "a time", &d));
  GETTER_FAILS("{\"v\": 0}", "f.json: v: is 0, expected a bandwidth > 0",
               hap_jr_want_amount(&r, v, "v", HAP_JR_POSITIVE, "a bandwidth", &d));
  GETTER_FAILS("{\"v\": \"x\"}", "f.json: v: expected a latency >= 0 (a number), got a string",
               hap_jr_want_amount(&r, v, "v", HAP_JR_NON_NEGATIVE, "a latency", &d));
  GETTER_FAILS("{\"v\": 1}", "f.json: v: expected true or false, got an integer",
               hap_jr_want_bool(&r, v, "v", &b));
  GETTER_FAILS("{\"v\": [1, 2, 3]}", "f.json: v: has 3 entries, expected at most 2",
               hap_jr_want_array(&r, v, "v", "an array", 2));
  GETTER_FAILS("{\"v\": {}}", "f.json: v: expected an array, got an object",
               hap_jr_want_array(&r, v, "v", "an array", 2));
}

Test(json_read, getters_store_values) {
  hap_err err = {0};
  hap_jr r = {.label = "f.json", .err = &err, .strict = true};
  json_t *root = load_ok(&r, "{\"i\": 3, \"d\": 0, \"b\": false, \"s\": \"gpu-0\"}");
  int64_t i = 0;
  double d = -1;
  bool b = true;
  const char *s = NULL;
  cr_assert_eq(hap_jr_want_int(&r, json_object_get(root, "i"), "i", 1, 5, "1..5", &i), HAP_OK);
  cr_assert_eq(
      hap_jr_want_amount(&r, json_object_get(root, "d"), "d", HAP_JR_NON_NEGATIVE, "a latency", &d),
      HAP_OK);
  cr_assert_eq(hap_jr_want_bool(&r, json_object_get(root, "b"), "b", &b), HAP_OK);
  cr_assert_eq(hap_jr_want_name(&r, json_object_get(root, "s"), "s", &s), HAP_OK);
  cr_assert(i == 3 && d == 0 && !b && strcmp(s, "gpu-0") == 0);
  json_t *m = (json_t *)root;
  cr_assert_eq(hap_jr_member(&r, root, "", "absent", false, NULL, &m), HAP_OK);
  cr_assert_null(m);
  cr_assert_eq(err.status, HAP_OK);
  json_decref(root);
}
