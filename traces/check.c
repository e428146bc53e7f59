/* check.c — trace.json checker: jansson DOM, one pass over traceEvents for the schema, then a sort
 * of the complete events by (pid, tid, start) and a stack walk per lane for the nesting rule. */
#include "traces/check.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "traces/trace.h"

/* Largest accepted ts or dur, in µs (~127 years): keeps ns values and ts + dur inside int64. */
#define MAX_TIME_US 4e15

/* One complete event on its lane, in integer ns. */
typedef struct span {
  int64_t pid, tid;
  int64_t ts, end; /* ns */
  size_t index;    /* position in traceEvents */
  const char *name;
} span;

typedef struct checker {
  const char *path;
  hap_err *err;
  hap_trace_check_report rep;
  span *spans; /* complete events */
  size_t n_spans;
  int64_t *pids; /* pid of every event that has one */
  size_t n_pids;
} checker;

/* "traceEvents[3] 'name'" (or without the name when there is none) into buf. */
static const char *where(char *buf, size_t len, size_t i, const json_t *ev) {
  const char *name = json_string_value(json_object_get(ev, "name"));
  if (name != NULL)
    snprintf(buf, len, "traceEvents[%zu] '%.200s'", i, name);
  else
    snprintf(buf, len, "traceEvents[%zu]", i);
  return buf;
}

/* Schema failure of event i: "<file>: traceEvents[i] 'name': <what>". BAD() is HAP_EPARSE as
 * a macro, so the static analyzer (which does not follow variadic calls) sees the status. */
__attribute__((format(printf, 4, 5))) static void report_bad(checker *c, size_t i, const json_t *ev,
                                                             const char *fmt, ...) {
  char what[768], at[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  hap_err_set(c->err, HAP_EPARSE, "%s: %s: %s", c->path, where(at, sizeof at, i, ev), what);
}
#define BAD(...) (report_bad(__VA_ARGS__), HAP_EPARSE)

/* ---- fields --------------------------------------------------------------------------------- */

static hap_status need_string(checker *c, size_t i, const json_t *ev, const char *key,
                              const char **out) {
  const json_t *v = json_object_get(ev, key);
  const char *s = json_string_value(v); /* NULL unless a string */
  if (s == NULL)
    return BAD(c, i, ev, "\"%s\" is %s, expected a string", key, v ? "not a string" : "missing");
  *out = s;
  return HAP_OK;
}

/* An integer field; `required` false accepts absence (out untouched, *present false). */
static hap_status get_int(checker *c, size_t i, const json_t *ev, const char *key, bool required,
                          int64_t *out, bool *present) {
  const json_t *v = json_object_get(ev, key);
  *present = v != NULL;
  if (v == NULL && !required)
    return HAP_OK;
  if (!json_is_integer(v))
    return BAD(c, i, ev, "\"%s\" is %s, expected an integer", key,
               v ? "not an integer" : "missing");
  *out = (int64_t)json_integer_value(v);
  return HAP_OK;
}

static hap_status need_int(checker *c, size_t i, const json_t *ev, const char *key, int64_t *out) {
  bool present = false;
  return get_int(c, i, ev, key, true, out, &present);
}

/* A time field in µs (number >= 0) as integer ns. */
static hap_status need_time(checker *c, size_t i, const json_t *ev, const char *key, int64_t *ns) {
  const json_t *v = json_object_get(ev, key);
  if (!json_is_number(v))
    return BAD(c, i, ev, "\"%s\" is %s, expected a number of microseconds", key,
               v ? "not a number" : "missing");
  double us = json_number_value(v);
  if (!(us >= 0))
    return BAD(c, i, ev, "\"%s\" is %g, expected a number >= 0", key, us);
  if (us > MAX_TIME_US)
    return BAD(c, i, ev,
               "\"%s\" is %g us, expected at most %g (rebase timestamps to the run start)", key, us,
               MAX_TIME_US);
  *ns = llround(us * 1000.0);
  return HAP_OK;
}

static hap_status need_args(checker *c, size_t i, const json_t *ev, const json_t **args) {
  *args = json_object_get(ev, "args");
  if (!json_is_object(*args))
    return BAD(c, i, ev, "\"args\" is %s, expected an object", *args ? "not an object" : "missing");
  return HAP_OK;
}

static void note_end(checker *c, int64_t end_ns) {
  if (end_ns > c->rep.end_ns)
    c->rep.end_ns = end_ns;
}

/* ---- events by phase ------------------------------------------------------------------------ */

static hap_status check_complete(checker *c, size_t i, const json_t *ev, span *s) {
  const char *name = NULL;
  HAP_TRY(need_string(c, i, ev, "name", &name));
  HAP_TRY(need_int(c, i, ev, "pid", &s->pid));
  HAP_TRY(need_int(c, i, ev, "tid", &s->tid));
  int64_t dur = 0;
  HAP_TRY(need_time(c, i, ev, "ts", &s->ts));
  HAP_TRY(need_time(c, i, ev, "dur", &dur));
  const json_t *cat = json_object_get(ev, "cat");
  if (cat != NULL && !json_is_string(cat))
    return BAD(c, i, ev, "\"cat\" is not a string");
  const json_t *args = json_object_get(ev, "args");
  if (args != NULL && !json_is_object(args))
    return BAD(c, i, ev, "\"args\" is not an object");
  s->end = s->ts + dur;
  s->index = i;
  s->name = name;
  note_end(c, s->end);
  return HAP_OK;
}

/* Which args key and type a metadata event needs, and whether it is per thread. */
typedef struct meta_kind {
  const char *name, *key;
  bool is_int, per_thread;
} meta_kind;

static const meta_kind meta_kinds[] = {
    {"process_name", "name", false, false},
    {"process_labels", "labels", false, false},
    {"process_sort_index", "sort_index", true, false},
    {"thread_name", "name", false, true},
    {"thread_sort_index", "sort_index", true, true},
};

static hap_status check_metadata(checker *c, size_t i, const json_t *ev) {
  const char *name = NULL;
  int64_t pid = 0, tid = 0;
  HAP_TRY(need_string(c, i, ev, "name", &name));
  HAP_TRY(need_int(c, i, ev, "pid", &pid));
  for (size_t k = 0; k < sizeof meta_kinds / sizeof *meta_kinds; k++) {
    const meta_kind *m = &meta_kinds[k];
    if (strcmp(name, m->name) != 0)
      continue;
    if (m->per_thread)
      HAP_TRY(need_int(c, i, ev, "tid", &tid));
    const json_t *args = NULL;
    HAP_TRY(need_args(c, i, ev, &args));
    const json_t *v = json_object_get(args, m->key);
    if (m->is_int ? !json_is_integer(v) : !json_is_string(v))
      return BAD(c, i, ev, "\"args.%s\" is %s, expected %s", m->key,
                 v ? "of the wrong type" : "missing", m->is_int ? "an integer" : "a string");
  }
  return HAP_OK;
}

static hap_status check_instant(checker *c, size_t i, const json_t *ev) {
  const char *name = NULL, *scope = "t";
  int64_t ts = 0, id = 0;
  bool present = false;
  HAP_TRY(need_string(c, i, ev, "name", &name));
  HAP_TRY(need_time(c, i, ev, "ts", &ts));
  HAP_TRY(get_int(c, i, ev, "pid", false, &id, &present));
  HAP_TRY(get_int(c, i, ev, "tid", false, &id, &present));
  if (json_object_get(ev, "s") != NULL)
    HAP_TRY(need_string(c, i, ev, "s", &scope));
  if (strcmp(scope, "g") != 0 && strcmp(scope, "p") != 0 && strcmp(scope, "t") != 0)
    return BAD(c, i, ev, "\"s\" is '%.20s', expected \"g\", \"p\" or \"t\"", scope);
  note_end(c, ts);
  return HAP_OK;
}

static hap_status check_counter(checker *c, size_t i, const json_t *ev) {
  const char *name = NULL, *key = NULL;
  int64_t ts = 0, pid = 0;
  const json_t *args = NULL, *v = NULL;
  HAP_TRY(need_string(c, i, ev, "name", &name));
  HAP_TRY(need_int(c, i, ev, "pid", &pid));
  HAP_TRY(need_time(c, i, ev, "ts", &ts));
  HAP_TRY(need_args(c, i, ev, &args));
  if (json_object_size(args) == 0)
    return BAD(c, i, ev, "\"args\" is empty, expected at least one series");
  json_object_foreach((json_t *)args, key, v) {
    if (!json_is_number(v))
      return BAD(c, i, ev, "\"args.%.100s\" is not a number", key);
  }
  note_end(c, ts);
  return HAP_OK;
}

/* Phases of the Trace Event Format; others are refused. */
static bool known_phase(const char *ph) {
  static const char *const phases[] = {"B", "E", "X", "i", "I", "C", "M", "b", "n",
                                       "e", "s", "t", "f", "P", "O", "N", "D", "S",
                                       "T", "F", "p", "R", "c", "(", ")", "v", "V"};
  for (size_t k = 0; k < sizeof phases / sizeof *phases; k++)
    if (strcmp(ph, phases[k]) == 0)
      return true;
  return false;
}

static hap_status check_event(checker *c, size_t i, const json_t *ev) {
  if (!json_is_object(ev))
    return hap_err_set(c->err, HAP_EPARSE, "%s: traceEvents[%zu]: expected an object", c->path, i);
  const char *ph = NULL;
  HAP_TRY(need_string(c, i, ev, "ph", &ph));
  if (!known_phase(ph))
    return BAD(c, i, ev, "\"ph\" is '%.20s', not a Trace Event Format phase", ph);
  int64_t pid = 0;
  bool has_pid = false;
  HAP_TRY(get_int(c, i, ev, "pid", false, &pid, &has_pid));
  if (has_pid)
    c->pids[c->n_pids++] = pid;
  switch (ph[0]) {
  case 'X': c->rep.complete++; return check_complete(c, i, ev, &c->spans[c->n_spans++]);
  case 'M': c->rep.metadata++; return check_metadata(c, i, ev);
  case 'i':
  case 'I': c->rep.instants++; return check_instant(c, i, ev);
  case 'C': c->rep.counters++; return check_counter(c, i, ev);
  default: return HAP_OK;
  }
}

/* ---- the document --------------------------------------------------------------------------- */

/* otherData: an object; when it says hap-trace, a version whose major we know. */
static hap_status check_other_data(checker *c, const json_t *other) {
  if (other == NULL)
    return HAP_OK;
  if (!json_is_object(other))
    return hap_err_set(c->err, HAP_EPARSE, "%s: otherData: expected an object", c->path);
  const char *format = json_string_value(json_object_get(other, "format"));
  if (format == NULL || strcmp(format, HAP_TRACE_FORMAT) != 0)
    return HAP_OK;
  const char *version = json_string_value(json_object_get(other, "version"));
  char *end = NULL;
  long major = version != NULL ? strtol(version, &end, 10) : -1;
  if (version == NULL || end == version || *end != '.' || major < 0)
    return hap_err_set(c->err, HAP_EPARSE, "%s: otherData.version: expected \"MAJOR.MINOR\"",
                       c->path);
  long known = strtol(HAP_TRACE_VERSION, NULL, 10);
  if (major > known)
    return hap_err_set(c->err, HAP_EVERSION,
                       "%s: otherData.version: is '%.20s', this reader knows %s %ld.x", c->path,
                       version, HAP_TRACE_FORMAT, known);
  return HAP_OK;
}

static hap_status check_root(checker *c, const json_t *root, const json_t **events) {
  if (!json_is_object(root))
    return hap_err_set(c->err, HAP_EPARSE,
                       "%s: expected the object form {\"traceEvents\":[...], ...}", c->path);
  *events = json_object_get(root, "traceEvents");
  if (!json_is_array(*events))
    return hap_err_set(c->err, HAP_EPARSE, "%s: traceEvents: %s, expected an array", c->path,
                       *events ? "not an array" : "missing");
  const json_t *unit = json_object_get(root, "displayTimeUnit");
  const char *u = json_string_value(unit);
  if (unit != NULL && (u == NULL || (strcmp(u, "ms") != 0 && strcmp(u, "ns") != 0)))
    return hap_err_set(c->err, HAP_EPARSE, "%s: displayTimeUnit: expected \"ms\" or \"ns\"",
                       c->path);
  return check_other_data(c, json_object_get(root, "otherData"));
}

/* ---- nesting -------------------------------------------------------------------------------- */

/* Lane, then start, then longer first (an enclosing event precedes what it holds), then order. */
static int span_cmp(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  if (a->pid != b->pid)
    return a->pid < b->pid ? -1 : 1;
  if (a->tid != b->tid)
    return a->tid < b->tid ? -1 : 1;
  if (a->ts != b->ts)
    return a->ts < b->ts ? -1 : 1;
  if (a->end != b->end)
    return a->end > b->end ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

static hap_status overlap(checker *c, const span *outer, const span *e) {
  return hap_err_set(
      c->err, HAP_EINVAL,
      "%s: traceEvents[%zu] '%.200s' (pid %" PRId64 ", tid %" PRId64 ", %" PRId64 ".%03d-%" PRId64
      ".%03d us) partially overlaps traceEvents[%zu] '%.200s' (%" PRId64 ".%03d-%" PRId64
      ".%03d us); complete events on one lane must nest",
      c->path, e->index, e->name, e->pid, e->tid, e->ts / 1000, (int)(e->ts % 1000), e->end / 1000,
      (int)(e->end % 1000), outer->index, outer->name, outer->ts / 1000, (int)(outer->ts % 1000),
      outer->end / 1000, (int)(outer->end % 1000));
}

static hap_status check_nesting(checker *c) {
  qsort(c->spans, c->n_spans, sizeof *c->spans, span_cmp);
  size_t *stack = malloc((c->n_spans + 1) * sizeof *stack); /* indices into spans */
  if (stack == NULL)
    return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory checking the trace", c->path);
  size_t depth = 0;
  hap_status st = HAP_OK;
  for (size_t k = 0; k < c->n_spans && st == HAP_OK; k++) {
    const span *e = &c->spans[k];
    if (k == 0 || e->pid != e[-1].pid || e->tid != e[-1].tid) {
      depth = 0; /* a new lane */
      c->rep.lanes++;
    }
    while (depth > 0 && c->spans[stack[depth - 1]].end <= e->ts + HAP_TRACE_NEST_TOLERANCE_NS)
      depth--;
    const span *outer = depth > 0 ? &c->spans[stack[depth - 1]] : NULL;
    if (outer != NULL && e->end > outer->end + HAP_TRACE_NEST_TOLERANCE_NS)
      st = overlap(c, outer, e);
    stack[depth++] = k;
    if ((int)depth > c->rep.max_depth)
      c->rep.max_depth = (int)depth;
  }
  free(stack);
  return st;
}

static int int64_cmp(const void *pa, const void *pb) {
  int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return a < b ? -1 : a > b;
}

static void count_processes(checker *c) {
  qsort(c->pids, c->n_pids, sizeof *c->pids, int64_cmp);
  for (size_t k = 0; k < c->n_pids; k++)
    if (k == 0 || c->pids[k] != c->pids[k - 1])
      c->rep.processes++;
}

/* ---- entry point ---------------------------------------------------------------------------- */

static hap_status check_document(checker *c, const json_t *root) {
  const json_t *events = NULL;
  HAP_TRY(check_root(c, root, &events));
  size_t n = json_array_size(events);
  c->rep.events = (int64_t)n;
  c->spans = malloc((n + 1) * sizeof *c->spans);
  c->pids = malloc((n + 1) * sizeof *c->pids);
  if (c->spans == NULL || c->pids == NULL)
    return hap_err_set(c->err, HAP_ENOMEM, "%s: out of memory checking %zu events", c->path, n);
  for (size_t i = 0; i < n; i++)
    HAP_TRY(check_event(c, i, json_array_get(events, i)));
  count_processes(c);
  return check_nesting(c);
}

hap_status hap_trace_check(const char *path, hap_trace_check_report *r, hap_err *err) {
  checker c = {.path = path, .err = err};
  char *data = NULL;
  size_t len = 0;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  json_error_t jerr;
  json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
  free(data);
  hap_status st = HAP_OK;
  if (root == NULL)
    st = hap_err_set(err, HAP_EPARSE, "%s: line %d, column %d: %s", path, jerr.line, jerr.column,
                     jerr.text);
  else
    st = check_document(&c, root);
  json_decref(root);
  free(c.spans);
  free(c.pids);
  if (r != NULL)
    *r = c.rep;
  return st;
}
