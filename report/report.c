/* report.c — hap-report's entry points: load the JSON, tell its kind, read it with the kind's
 * reader, render the page, write it atomically; and the typed getters the readers share. */
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "report_internal.h"

static const char *const kind_names[HAP_REPORT_KIND_COUNT] = {"auto", "sweep", "plan", "run",
                                                              "profile"};

/* What each kind reads, for messages. */
static const char *kind_input(hap_report_kind k) {
  switch (k) {
  case HAP_REPORT_SWEEP: return "a hap-sim sweep (hap-sim -f json)";
  case HAP_REPORT_PLAN: return "a hap-plan file (hap-synth -o)";
  case HAP_REPORT_RUN: return "a hap-trace file (hap-run --trace)";
  case HAP_REPORT_PROFILE: return "a profile (hap-profile show -f json PROFILE.h5)";
  default:
    return "a hap-sim sweep (hap-sim -f json), a hap-plan, a hap-trace (hap-run --trace) or a "
           "profile (hap-profile show -f json PROFILE.h5)";
  }
}

const char *hap_report_kind_name(hap_report_kind k) {
  return k >= 0 && k < HAP_REPORT_KIND_COUNT ? kind_names[k] : "?";
}

hap_status hap_report_kind_parse(const char *s, hap_report_kind *out) {
  for (int k = 0; k < HAP_REPORT_KIND_COUNT; k++)
    if (strcmp(s, kind_names[k]) == 0) {
      *out = (hap_report_kind)k;
      return HAP_OK;
    }
  return HAP_EINVAL;
}

/* ---- getters ------------------------------------------------------------------------------ */

hap_status rep_get_text(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                        bool required, const char **out) {
  json_t *v;
  hap_jpath p;
  HAP_TRY(hap_jr_member(r, obj, path, key, required, "a string", &v));
  return v == NULL ? HAP_OK : hap_jr_want_text(r, v, hap_jpath_key(p, path, key), "a string", out);
}

hap_status rep_get_num(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                       bool required, const char *what, double *out) {
  json_t *v;
  hap_jpath p;
  HAP_TRY(hap_jr_member(r, obj, path, key, required, what, &v));
  return v == NULL ? HAP_OK : hap_jr_want_num(r, v, hap_jpath_key(p, path, key), what, out);
}

hap_status rep_get_amount(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                          bool required, hap_jr_range range, const char *what, double *out) {
  json_t *v;
  hap_jpath p;
  char expected[160];
  snprintf(expected, sizeof expected, "%s %s", what, range == HAP_JR_POSITIVE ? "> 0" : ">= 0");
  HAP_TRY(hap_jr_member(r, obj, path, key, required, expected, &v));
  return v == NULL ? HAP_OK
                   : hap_jr_want_amount(r, v, hap_jpath_key(p, path, key), range, what, out);
}

hap_status rep_get_int(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                       bool required, int64_t lo, int64_t hi, const char *what, int64_t *out) {
  json_t *v;
  hap_jpath p;
  HAP_TRY(hap_jr_member(r, obj, path, key, required, what, &v));
  return v == NULL ? HAP_OK : hap_jr_want_int(r, v, hap_jpath_key(p, path, key), lo, hi, what, out);
}

hap_status rep_get_bool(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                        bool required, bool *out) {
  json_t *v;
  hap_jpath p;
  HAP_TRY(hap_jr_member(r, obj, path, key, required, "true or false", &v));
  return v == NULL ? HAP_OK : hap_jr_want_bool(r, v, hap_jpath_key(p, path, key), out);
}

hap_status rep_get_array(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                         bool required, const char *expected, size_t max, const json_t **out) {
  json_t *v;
  hap_jpath p;
  *out = NULL;
  HAP_TRY(hap_jr_member(r, obj, path, key, required, expected, &v));
  if (v == NULL)
    return HAP_OK;
  HAP_TRY(hap_jr_want_array(r, v, hap_jpath_key(p, path, key), expected, max));
  *out = v;
  return HAP_OK;
}

hap_status rep_get_object(const hap_jr *r, const json_t *obj, const char *path, const char *key,
                          bool required, const char *expected, const json_t **out) {
  json_t *v;
  hap_jpath p;
  *out = NULL;
  HAP_TRY(hap_jr_member(r, obj, path, key, required, expected, &v));
  if (v == NULL)
    return HAP_OK;
  HAP_TRY(hap_jr_want_type(r, v, JSON_OBJECT, hap_jpath_key(p, path, key), expected));
  *out = v;
  return HAP_OK;
}

/* ---- the document ------------------------------------------------------------------------- */

static const rep_kind *kind_ops(hap_report_kind k) {
  switch (k) {
  case HAP_REPORT_SWEEP: return &rep_sweep_kind;
  case HAP_REPORT_PLAN: return &rep_plan_kind;
  case HAP_REPORT_RUN: return &rep_run_kind;
  case HAP_REPORT_PROFILE: return &rep_profile_kind;
  default: return NULL;
  }
}

/* Parse: an empty input, a syntax error or a root that is no object is one line. */
static hap_status load(const hap_jr *r, const char *json, size_t len, hap_report_kind want,
                       json_t **root) {
  size_t skip = 0;
  while (skip < len && strchr(" \n\r\t", json[skip]) != NULL && json[skip] != '\0')
    skip++;
  if (skip == len)
    return hap_err_set(r->err, HAP_EPARSE, "%s: the file is empty, expected %s", r->label,
                       kind_input(want));
  json_error_t je;
  *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (*root == NULL) {
    hap_err_set(r->err, HAP_EPARSE, "%s: line %d, column %d: %s (expected %s)", r->label, je.line,
                je.column, je.text, kind_input(want));
    hap_jr_one_line(r->err);
    return HAP_EPARSE;
  }
  if (!json_is_object(*root)) {
    hap_jr_fail(r, HAP_EPARSE, "root", "expected %s: a JSON object, got %s", kind_input(want),
                hap_json_kind(*root));
    json_decref(*root);
    *root = NULL;
    return HAP_EPARSE;
  }
  return HAP_OK;
}

/* The kind the document says it is, from "format" or its shape; HAP_REPORT_AUTO when unsure. */
static hap_report_kind detect(const json_t *root, const char **format) {
  *format = json_string_value(json_object_get(root, "format"));
  if (*format != NULL)
    return strcmp(*format, "hap-plan") == 0 ? HAP_REPORT_PLAN : HAP_REPORT_AUTO;
  const json_t *other = json_object_get(root, "otherData");
  const char *tf = json_string_value(json_object_get(other, "format"));
  if (tf != NULL) {
    *format = tf;
    return strcmp(tf, "hap-trace") == 0 ? HAP_REPORT_RUN : HAP_REPORT_AUTO;
  }
  if (json_object_get(root, "traceEvents") != NULL)
    return HAP_REPORT_RUN;
  if (json_object_get(root, "rows") != NULL)
    return HAP_REPORT_SWEEP;
  if (json_object_get(root, "sweeps") != NULL || json_object_get(root, "collective_fits") != NULL)
    return HAP_REPORT_PROFILE;
  return HAP_REPORT_AUTO;
}

/* Which kind to read `root` as: `want`, unless the document is plainly of another kind. */
static hap_status choose(const hap_jr *r, const json_t *root, hap_report_kind want,
                         hap_report_kind *kind) {
  const char *format = NULL;
  hap_report_kind seen = detect(root, &format);
  hap_jquote q;
  if (want == HAP_REPORT_AUTO && seen == HAP_REPORT_AUTO) {
    if (format != NULL)
      return hap_jr_fail(r, HAP_EPARSE, "format", "is \"%s\", expected %s",
                         hap_json_quote(format, q), kind_input(HAP_REPORT_AUTO));
    return hap_jr_fail(r, HAP_EPARSE, "root",
                       "has none of the keys rows, format, traceEvents, sweeps, expected %s",
                       kind_input(HAP_REPORT_AUTO));
  }
  if (want != HAP_REPORT_AUTO && seen != want && (seen != HAP_REPORT_AUTO || format != NULL)) {
    if (format != NULL)
      return hap_jr_fail(r, HAP_EPARSE, "format", "is \"%s\", expected %s",
                         hap_json_quote(format, q), kind_input(want));
    return hap_jr_fail(r, HAP_EPARSE, "root", "looks like %s, expected %s", kind_input(seen),
                       kind_input(want));
  }
  *kind = want != HAP_REPORT_AUTO ? want : seen;
  return HAP_OK;
}

/* Read `json` as a report of `want`: *ops, *data (ops->destroy) and *root (json_decref). */
static hap_status read_doc(const char *json, size_t len, const char *label, hap_report_kind want,
                           const rep_kind **ops, void **data, json_t **root, hap_err *err) {
  hap_jr r = {.label = label, .err = err, .strict = false};
  *data = NULL;
  if (want < 0 || want >= HAP_REPORT_KIND_COUNT)
    return hap_err_set(err, HAP_EINVAL, "%s: unknown report kind %d", label, (int)want);
  HAP_TRY(load(&r, json, len, want, root));
  hap_report_kind kind = HAP_REPORT_AUTO;
  hap_status st = choose(&r, *root, want, &kind);
  if (st == HAP_OK) {
    *ops = kind_ops(kind);
    st = (*ops)->read(&r, *root, data);
  }
  if (st != HAP_OK) {
    hap_jr_one_line(err);
    json_decref(*root);
    *root = NULL;
  }
  return st;
}

static void render(FILE *f, const rep_kind *ops, const void *data, const char *label,
                   hap_report_kind kind) {
  char title[512];
  ops->title(data, title, sizeof title);
  rep_page_begin(f, title, hap_report_kind_name(kind), label);
  ops->render(f, data);
  rep_page_end(f);
}

static hap_report_kind kind_of(const rep_kind *ops) {
  for (int k = 1; k < HAP_REPORT_KIND_COUNT; k++)
    if (kind_ops((hap_report_kind)k) == ops)
      return (hap_report_kind)k;
  return HAP_REPORT_AUTO;
}

hap_status hap_report_render_json(const char *json, size_t len, const char *label,
                                  hap_report_kind kind, FILE *out, hap_err *err) {
  const rep_kind *ops = NULL;
  void *data = NULL;
  json_t *root = NULL;
  HAP_TRY(read_doc(json, len, label, kind, &ops, &data, &root, err));
  render(out, ops, data, label, kind_of(ops));
  ops->destroy(data);
  json_decref(root);
  if (fflush(out) != 0 || ferror(out))
    return hap_err_set(err, HAP_EIO, "%s: writing the report failed", label);
  return HAP_OK;
}

hap_status hap_report_write_json(const char *json, size_t len, const char *label,
                                 hap_report_kind kind, const char *out_path, hap_err *err) {
  const rep_kind *ops = NULL;
  void *data = NULL;
  json_t *root = NULL;
  HAP_TRY(read_doc(json, len, label, kind, &ops, &data, &root, err));
  hap_atomic_file af;
  hap_status st = hap_atomic_open(&af, out_path, err);
  if (st == HAP_OK) {
    render(af.f, ops, data, label, kind_of(ops));
    st = hap_atomic_commit(&af, err);
    if (st != HAP_OK)
      hap_atomic_abort(&af);
  }
  ops->destroy(data);
  json_decref(root);
  return st;
}

hap_status hap_report_file(const char *in_path, hap_report_kind kind, const char *out_path,
                           hap_err *err) {
  char *json = NULL;
  size_t len = 0;
  HAP_TRY(hap_read_file(in_path, &json, &len, err));
  hap_status st = hap_report_write_json(json, len, strcmp(in_path, "-") == 0 ? "stdin" : in_path,
                                        kind, out_path, err);
  free(json);
  return st;
}
