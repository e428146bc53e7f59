/* test_spec.c — the spec grammar (base/spec.h): parsing names and items, malformed specs and what
 * a caller learns about them, setting keys, formatting and the round trip. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/spec.h"

/* Parse a well-formed spec; the caller frees it. */
static hap_spec parse_ok(const char *text, hap_spec_names names) {
  hap_spec s;
  hap_err err = {0};
  hap_status st = hap_spec_parse(text, names, &s, &err);
  cr_assert_eq(st, HAP_OK, "%s: %s", text, err.msg);
  cr_assert_eq(s.fault, HAP_SPEC_OK, "%s", text);
  cr_assert_null(s.bad, "%s", text);
  return s;
}

static void expect_item(const hap_spec *s, int i, const char *key, const char *value) {
  cr_assert_lt(i, s->n);
  cr_assert_str_eq(s->items[i].key, key, "item %d", i);
  cr_assert_str_eq(s->items[i].value, value, "item %d", i);
}

/* hap_spec_format into a 256-byte buffer, which must succeed. */
static const char *format_ok(const hap_spec *s, char *buf) {
  hap_err err = {0};
  cr_assert_eq(hap_spec_format(s, buf, 256, &err), HAP_OK, "%s", err.msg);
  return buf;
}

/* ---- parsing --------------------------------------------------------------------------------- */

Test(spec_parse, name_and_items_in_order) {
  hap_spec s = parse_ok("bert-base:layers=24,batch=256,seq=128", HAP_SPEC_PLAIN_NAME);
  cr_assert_str_eq(s.name, "bert-base");
  cr_assert_eq(s.n, 3);
  expect_item(&s, 0, "layers", "24");
  expect_item(&s, 1, "batch", "256");
  expect_item(&s, 2, "seq", "128");
  hap_spec_free(&s);
}

Test(spec_parse, bare_name) {
  hap_spec s = parse_ok("paper-hetero", HAP_SPEC_PLAIN_NAME);
  cr_assert_str_eq(s.name, "paper-hetero");
  cr_assert_eq(s.n, 0);
  hap_spec_free(&s);
}

Test(spec_parse, values_may_be_empty_or_hold_equals_and_colons) {
  hap_spec s = parse_ok("m:a=,b=x=y,c=1:2", HAP_SPEC_PLAIN_NAME);
  cr_assert_eq(s.n, 3);
  expect_item(&s, 0, "a", "");
  expect_item(&s, 1, "b", "x=y");
  expect_item(&s, 2, "c", "1:2");
  hap_spec_free(&s);
}

/* The grammar lets keys repeat: the zoo and the cluster reader say "given twice" themselves. */
Test(spec_parse, duplicate_keys_are_kept_for_the_caller) {
  hap_spec s = parse_ok("bert-base:layers=2,layers=3", HAP_SPEC_PLAIN_NAME);
  cr_assert_eq(s.n, 2);
  expect_item(&s, 0, "layers", "2");
  expect_item(&s, 1, "layers", "3");
  cr_assert_eq(hap_spec_find(&s, "layers"), 0, "find returns the first");
  cr_assert_eq(hap_spec_find(&s, "batch"), -1);
  hap_spec_free(&s);
}

/* An empty NAME is the caller's to reject ("unknown model ''"), after its own checks. */
Test(spec_parse, empty_name_parses) {
  hap_spec s = parse_ok(":layers=2", HAP_SPEC_PLAIN_NAME);
  cr_assert_str_eq(s.name, "");
  cr_assert_eq(s.n, 1);
  expect_item(&s, 0, "layers", "2");
  hap_spec_free(&s);
  s = parse_ok("", HAP_SPEC_PLAIN_NAME);
  cr_assert_str_eq(s.name, "");
  cr_assert_eq(s.n, 0);
  hap_spec_free(&s);
}

Test(spec_parse, path_names_end_after_the_last_slash) {
  hap_spec s = parse_ok("runs/a:b/cluster.json:hosts=2", HAP_SPEC_PATH_NAME);
  cr_assert_str_eq(s.name, "runs/a:b/cluster.json");
  cr_assert_eq(s.n, 1);
  expect_item(&s, 0, "hosts", "2");
  hap_spec_free(&s);
  /* a plain name ends at the first ':' wherever the '/' are */
  s = parse_ok("runs/a:b/cluster.json:hosts=2", HAP_SPEC_PLAIN_NAME);
  cr_assert_str_eq(s.name, "runs/a");
  cr_assert_eq(s.n, 1);
  expect_item(&s, 0, "b/cluster.json:hosts", "2");
  hap_spec_free(&s);
  cr_assert_eq(hap_spec_name_len("dir/x.json", HAP_SPEC_PATH_NAME), 10);
  cr_assert_eq(hap_spec_name_len("a:b/c:d=1", HAP_SPEC_PATH_NAME), 5);
  cr_assert_eq(hap_spec_name_len("a:b/c:d=1", HAP_SPEC_PLAIN_NAME), 1);
  cr_assert_eq(hap_spec_name_len("x", HAP_SPEC_PLAIN_NAME), 1);
}

Test(spec_parse, params_alone) {
  hap_spec s;
  hap_err err = {0};
  cr_assert_eq(hap_spec_parse_params("hosts=2,inter_gbps=25", &s, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(s.name, "");
  cr_assert_eq(s.n, 2);
  expect_item(&s, 1, "inter_gbps", "25");
  hap_spec_free(&s);
  cr_assert_eq(hap_spec_parse_params(NULL, &s, &err), HAP_OK, "NULL: no parameters");
  cr_assert_eq(s.n, 0);
  hap_spec_free(&s);
  cr_assert_eq(hap_spec_parse_params("", &s, &err), HAP_EINVAL, "\"\": one empty item");
  cr_assert_eq(s.fault, HAP_SPEC_EMPTY_ITEM);
  hap_spec_free(&s);
}

/* ---- malformed specs ------------------------------------------------------------------------- */

typedef struct bad_case {
  const char *text;
  hap_spec_fault fault;
  const char *bad;   /* the offending item */
  int n_before;      /* items parsed before it */
  const char *first; /* key of the first item before it, or NULL */
  const char *msg;   /* the generic message */
} bad_case;

static const bad_case bad_cases[] = {
    {"bert-base:", HAP_SPEC_EMPTY_ITEM, "", 0, NULL,
     "spec 'bert-base:': empty item, expected key=value[,key=value...]"},
    {"bert-base:layers=2,", HAP_SPEC_EMPTY_ITEM, "", 1, "layers", "empty item"},
    {"bert-base:,layers=2", HAP_SPEC_EMPTY_ITEM, "", 0, NULL, "empty item"},
    {"m:a=1,,b=2", HAP_SPEC_EMPTY_ITEM, "", 1, "a", "empty item"},
    {"bert-base:layers", HAP_SPEC_NOT_KEY_VALUE, "layers", 0, NULL,
     "spec 'bert-base:layers': item 'layers' is not of the form key=value"},
    {"bert-base:=2", HAP_SPEC_NOT_KEY_VALUE, "=2", 0, NULL, "item '=2' is not of the form"},
    {"m:a=1,b=2,c", HAP_SPEC_NOT_KEY_VALUE, "c", 2, "a", "item 'c'"},
    {"m:a=1,=,b=2", HAP_SPEC_NOT_KEY_VALUE, "=", 1, "a", "item '='"},
};

Test(spec_parse, malformed_specs_keep_the_items_before_the_fault) {
  for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
    const bad_case *bc = &bad_cases[i];
    hap_spec s;
    hap_err err = {0};
    hap_status st = hap_spec_parse(bc->text, HAP_SPEC_PLAIN_NAME, &s, &err);
    cr_expect_eq(st, HAP_EINVAL, "%s", bc->text);
    cr_expect_eq(err.status, HAP_EINVAL, "%s", bc->text);
    cr_expect_eq(s.fault, bc->fault, "%s: fault %d", bc->text, s.fault);
    cr_expect_str_eq(s.bad, bc->bad, "%s", bc->text);
    cr_expect_eq(s.n, bc->n_before, "%s: %d items before the fault", bc->text, s.n);
    if (bc->first != NULL && s.n > 0)
      cr_expect_str_eq(s.items[0].key, bc->first, "%s", bc->text);
    cr_expect_not_null(strstr(err.msg, bc->msg), "%s: '%s' not in: %s", bc->text, bc->msg, err.msg);
    cr_expect_null(strchr(err.msg, '\n'));
    hap_spec_free(&s);
    cr_expect_null(s.bad, "freed specs are zeroed");
  }
}

Test(spec_parse, free_is_idempotent) {
  hap_spec s = parse_ok("m:a=1", HAP_SPEC_PLAIN_NAME);
  hap_spec_free(&s);
  hap_spec_free(&s);
  cr_assert_eq(s.n, 0);
  cr_assert_null(s.items);
  cr_assert_null(s.name);
}

/* ---- set, format, round trip ----------------------------------------------------------------- */

Test(spec_set, replaces_and_moves_the_key_first) {
  char buf[256];
  hap_spec s = parse_ok("name:a=1,b=2,c=3", HAP_SPEC_PLAIN_NAME);
  cr_assert_eq(hap_spec_set(&s, "b", "9", NULL), HAP_OK);
  cr_assert_str_eq(format_ok(&s, buf), "name:b=9,a=1,c=3");
  cr_assert_eq(s.n, 3);
  hap_spec_free(&s);
}

Test(spec_set, appends_a_new_key_first) {
  char buf[256];
  hap_spec s = parse_ok("name:a=1", HAP_SPEC_PLAIN_NAME);
  cr_assert_eq(hap_spec_set(&s, "z", "5", NULL), HAP_OK);
  cr_assert_str_eq(format_ok(&s, buf), "name:z=5,a=1");
  hap_spec_free(&s);
  s = parse_ok("name", HAP_SPEC_PLAIN_NAME);
  cr_assert_eq(hap_spec_set(&s, "z", "5", NULL), HAP_OK);
  cr_assert_str_eq(format_ok(&s, buf), "name:z=5");
  hap_spec_free(&s);
}

Test(spec_set, drops_every_duplicate) {
  char buf[256];
  hap_spec s = parse_ok("m:k=1,x=2,k=3,k=4", HAP_SPEC_PLAIN_NAME);
  cr_assert_eq(hap_spec_set(&s, "k", "0", NULL), HAP_OK);
  cr_assert_str_eq(format_ok(&s, buf), "m:k=0,x=2");
  cr_assert_eq(s.n, 2);
  hap_spec_free(&s);
}

/* Setting several keys in turn: the last one set comes first (what hap-sim's points look like). */
Test(spec_set, in_turn) {
  char buf[256];
  hap_spec s = parse_ok("paper-hetero:hosts=2", HAP_SPEC_PATH_NAME);
  cr_assert_eq(hap_spec_set(&s, "gpus_per_host", "1", NULL), HAP_OK);
  cr_assert_eq(hap_spec_set(&s, "inter_gbps", "10", NULL), HAP_OK);
  cr_assert_eq(hap_spec_set(&s, "gpus_per_host", "4", NULL), HAP_OK);
  cr_assert_str_eq(format_ok(&s, buf), "paper-hetero:gpus_per_host=4,inter_gbps=10,hosts=2");
  hap_spec_free(&s);
}

Test(spec_set, refuses_what_would_not_parse_back) {
  hap_spec s = parse_ok("m:a=1", HAP_SPEC_PLAIN_NAME);
  static const char *const keys[] = {"", "a=b", "a,b"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    hap_err err = {0};
    cr_expect_eq(hap_spec_set(&s, keys[i], "1", &err), HAP_EINVAL, "key '%s'", keys[i]);
    cr_expect_not_null(strstr(err.msg, "expected a non-empty key"), "%s", err.msg);
  }
  hap_err err = {0};
  cr_assert_eq(hap_spec_set(&s, "b", "1,2", &err), HAP_EINVAL);
  char buf[256];
  cr_assert_str_eq(format_ok(&s, buf), "m:a=1", "failed sets change nothing");
  hap_spec_free(&s);
}

Test(spec_format, round_trips) {
  static const char *const texts[] = {"bert-base",
                                      "bert-base:layers=24,batch=256,seq=128",
                                      "gpt:preset=gpt2-xl,layers=1,batch=1,granularity=fine",
                                      "m:a=,b=x=y,a=3",
                                      ":k=v",
                                      "x"};
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
    char buf[256];
    hap_spec s = parse_ok(texts[i], HAP_SPEC_PLAIN_NAME);
    cr_expect_str_eq(format_ok(&s, buf), texts[i]);
    hap_spec_free(&s);
  }
  char buf[256];
  hap_spec s = parse_ok("dir:1/c.json:hosts=2", HAP_SPEC_PATH_NAME);
  cr_expect_str_eq(format_ok(&s, buf), "dir:1/c.json:hosts=2");
  hap_spec_free(&s);
}

Test(spec_format, too_small_a_buffer) {
  hap_spec s = parse_ok("bert-base:layers=24", HAP_SPEC_PLAIN_NAME);
  char buf[12];
  hap_err err = {0};
  cr_assert_eq(hap_spec_format(&s, buf, sizeof buf, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "longer than 11 characters"), "%s", err.msg);
  cr_assert_eq(strlen(buf), sizeof buf - 1, "truncated, terminated");
  char exact[20]; /* "bert-base:layers=24" and its NUL */
  cr_assert_eq(hap_spec_format(&s, exact, sizeof exact, NULL), HAP_OK, "exactly fits");
  cr_assert_str_eq(exact, "bert-base:layers=24");
  hap_spec_free(&s);
}

Test(spec_number, exact_finite_reals_only) {
  double v = -1;
  cr_assert(hap_spec_number("0.5", 3, &v));
  cr_expect_eq(v, 0.5);
  cr_assert(hap_spec_number("1e3,x", 3, &v), "only s[0..n) is read");
  cr_expect_eq(v, 1000.0);
  cr_assert(hap_spec_number("-2", 2, &v));
  cr_expect_eq(v, -2.0);
  static const char *const bad[] = {"", " 1", "1 ", "1x", "inf", "nan", "1e999", "0x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    v = 7;
    cr_expect(!hap_spec_number(bad[i], strlen(bad[i]), &v), "'%s' accepted", bad[i]);
    cr_expect_eq(v, 7.0, "'%s': *out untouched", bad[i]);
  }
  char long_value[80];
  memset(long_value, '1', sizeof long_value);
  cr_expect(!hap_spec_number(long_value, 64, &v), "64 bytes is too long");
  cr_expect(hap_spec_number(long_value, 63, &v), "63 bytes fit");
}
