/* test_trace.c — the Chrome trace writer (trace.h) and the trace.json checker (check.h). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "test_util.h"
#include "traces/check.h"
#include "traces/trace.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static char *slurp(const char *path) {
  char *data = NULL;
  size_t len = 0;
  hap_err err = {0};
  cr_assert_eq(hap_read_file(path, &data, &len, &err), HAP_OK, "%s", err.msg);
  return data;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

static json_t *load_json(const char *path) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  cr_assert_not_null(root, "%s: line %d: %s", path, jerr.line, jerr.text);
  return root;
}

/* The first event with this phase, name and pid (pid < 0: any). */
static json_t *find_event(json_t *root, const char *ph, const char *name, int pid) {
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(root, "traceEvents"), i, ev) {
    if (strcmp(json_string_value(json_object_get(ev, "ph")), ph) == 0 &&
        strcmp(json_string_value(json_object_get(ev, "name")), name) == 0 &&
        (pid < 0 || json_integer_value(json_object_get(ev, "pid")) == pid))
      return ev;
  }
  cr_assert_fail("no %s event '%s' on pid %d", ph, name, pid);
  return NULL;
}

static const char *str_at(json_t *obj, const char *key) {
  const char *s = json_string_value(json_object_get(obj, key));
  cr_assert_not_null(s, "\"%s\" is not a string", key);
  return s;
}

static double num_at(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_number(v), "\"%s\" is not a number", key);
  return json_number_value(v);
}

static hap_trace *open_trace(const char *path) {
  hap_trace *t = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_trace_open(path, "test_trace", &t, &err), HAP_OK, "%s", err.msg);
  cr_assert_not_null(t);
  return t;
}

static void close_ok(hap_trace *t) {
  hap_err err = {0};
  cr_assert_eq(hap_trace_close(t, &err), HAP_OK, "%s", err.msg);
}

static void complete(hap_trace *t, const char *name, int pid, int tid, int64_t ts_ns,
                     int64_t dur_ns) {
  hap_trace_event e = HAP_TRACE_EVENT_INIT;
  e.name = name;
  e.cat = tid == HAP_TRACE_LANE_COMPUTE ? "compute" : "collective";
  e.pid = pid;
  e.tid = tid;
  e.ts_ns = ts_ns;
  e.dur_ns = dur_ns;
  cr_assert_eq(hap_trace_complete(t, &e), HAP_OK);
}

/* A name with a quote, a backslash, control characters, UTF-8 (2, 3 and 4 bytes) and two bytes
 * that are not UTF-8 (written as U+FFFD each). */
#define ODD_NAME "q\"b\\s\n\t\x01 \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xff\xc0"
#define ODD_NAME_OUT                                                                               \
  "q\"b\\s\n\t\x01 \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xef\xbf\xbd\xef\xbf\xbd"
#define ODD_NAME_RAW                                                                               \
  "\"q\\\"b\\\\s\\n\\t\\u0001 \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \\ufffd\\ufffd\""

/* Two timelines x 2 ranks: per process an iteration span holding two sequential ops (the second
 * starts exactly where the first ends), a collective, a counter; global instants; odd names. */
static void write_sample(const char *path) {
  hap_trace *t = open_trace(path);
  static const char *const devices[] = {"v100-0:0 (V100-16GB)", "p100-1:0 (P100-16GB)"};
  for (int rank = 0; rank < 2; rank++)
    for (int tl = HAP_TRACE_SIM; tl <= HAP_TRACE_MEASURED; tl++)
      cr_assert_eq(hap_trace_rank(t, (hap_trace_timeline)tl, rank, devices[rank]), HAP_OK);
  cr_assert_eq(hap_trace_instant(t, "iteration 0", 1, 1, 0, 'g'), HAP_OK);
  for (int rank = 0; rank < 2; rank++) {
    for (int tl = HAP_TRACE_SIM; tl <= HAP_TRACE_MEASURED; tl++) {
      int pid = hap_trace_pid((hap_trace_timeline)tl, rank);
      bool meas = tl == HAP_TRACE_MEASURED;
      complete(t, "forward", pid, HAP_TRACE_LANE_COMPUTE, 0, 5000000);
      hap_trace_event e = HAP_TRACE_EVENT_INIT;
      e.name = "linear_3.fwd";
      e.cat = "compute";
      e.pid = pid;
      e.tid = HAP_TRACE_LANE_COMPUTE;
      e.ts_ns = 1234567;
      e.dur_ns = meas ? 1100 : 1000;
      e.task = "fwd:linear_3";
      e.flops = 1.2e12;
      e.bytes = 4096;
      if (meas) {
        e.sim_dur_us = 1.0;
        e.err_pct = 10.0;
      }
      cr_assert_eq(hap_trace_complete(t, &e), HAP_OK);
      complete(t, ODD_NAME, pid, HAP_TRACE_LANE_COMPUTE, 1234567 + e.dur_ns, 500);
      complete(t, "all_reduce grads", pid, HAP_TRACE_LANE_COLLECTIVE, 2000000, 1000000);
      complete(t, "clamped", pid, HAP_TRACE_LANE_COLLECTIVE, 4000000, -7);
      cr_assert_eq(hap_trace_counter(t, "memory", pid, 0, "allocated_MiB", 10240 + rank), HAP_OK);
    }
  }
  cr_assert_eq(hap_trace_instant(t, "iteration 1", 1, 1, 5000000, 'g'), HAP_OK);
  cr_assert_eq(hap_trace_meta(t, "plan", "plan.json"), HAP_OK);
  cr_assert_eq(hap_trace_meta(t, "cluster", "paper-hetero"), HAP_OK);
  cr_assert_eq(hap_trace_meta(t, "plan", "plans/plan \"b\".json"), HAP_OK); /* replaces */
  close_ok(t);
}

/* ---- the writer ----------------------------------------------------------------------------- */

Test(trace, pid_scheme_and_lanes) {
  cr_assert_eq(hap_trace_pid(HAP_TRACE_SIM, 0), 1);
  cr_assert_eq(hap_trace_pid(HAP_TRACE_MEASURED, 0), 2);
  cr_assert_eq(hap_trace_pid(HAP_TRACE_SIM, 3), 7);
  cr_assert_eq(hap_trace_pid(HAP_TRACE_MEASURED, 3), 8);
  cr_assert_str_eq(hap_trace_lane_name(HAP_TRACE_LANE_COMPUTE), "compute");
  cr_assert_str_eq(hap_trace_lane_name(HAP_TRACE_LANE_COLLECTIVE), "collective");
  cr_assert_str_eq(hap_trace_lane_name(HAP_TRACE_LANE_P2P), "p2p");
  cr_assert_null(hap_trace_lane_name((hap_trace_lane)9));
}

Test(trace, two_timelines_pass_the_checker) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "trace.json");
  write_sample(path);
  cr_assert_eq(count_entries(dir), 1, "a temporary file was left behind");

  hap_trace_check_report r;
  hap_err err = {0};
  cr_assert_eq(hap_trace_check(path, &r, &err), HAP_OK, "%s", err.msg);
  /* 4 processes x (3 process + 3 lanes x 2 thread metadata) + 4 x (5 X + 1 C) + 2 instants */
  cr_assert_eq(r.metadata, 36);
  cr_assert_eq(r.complete, 20);
  cr_assert_eq(r.counters, 4);
  cr_assert_eq(r.instants, 2);
  cr_assert_eq(r.events, 62);
  cr_assert_eq(r.processes, 4);
  cr_assert_eq(r.lanes, 8);
  cr_assert_eq(r.max_depth, 2);
  cr_assert_eq(r.end_ns, 5000000);

  /* python's json module reads it too (strict UTF-8, strict JSON) */
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "python3 -c \"import json,sys; json.load(open(sys.argv[1], "
           "encoding='utf-8'))\" '%s'",
           path);
  cr_assert_eq(system(cmd), 0, "python3 could not load %s", path);
  free(path);
  rm_tree(dir);
}

Test(trace, exact_fields) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "trace.json");
  write_sample(path);
  json_t *root = load_json(path);

  cr_assert_str_eq(str_at(root, "displayTimeUnit"), "ms");
  json_t *other = json_object_get(root, "otherData");
  cr_assert_str_eq(str_at(other, "format"), "hap-trace");
  cr_assert_str_eq(str_at(other, "version"), "1.0");
  cr_assert_str_eq(str_at(other, "tool"), "test_trace");
  cr_assert_str_eq(str_at(other, "plan"), "plans/plan \"b\".json");
  cr_assert_str_eq(str_at(other, "cluster"), "paper-hetero");
  cr_assert_null(json_object_get(other, "base_time_ns"));
  const char *key;
  json_t *v;
  const char *order[] = {"format", "version", "tool", "plan", "cluster"};
  size_t k = 0;
  json_object_foreach(other, key, v) { cr_assert_str_eq(key, order[k++]); }

  json_t *pn = find_event(root, "M", "process_name", 3);
  cr_assert_str_eq(str_at(json_object_get(pn, "args"), "name"),
                   "sim | rank 1 | p100-1:0 (P100-16GB)");
  pn = find_event(root, "M", "process_name", 2);
  cr_assert_str_eq(str_at(json_object_get(pn, "args"), "name"),
                   "meas | rank 0 | v100-0:0 (V100-16GB)");
  json_t *si = find_event(root, "M", "process_sort_index", 4);
  cr_assert_eq(json_integer_value(json_object_get(json_object_get(si, "args"), "sort_index")), 3);
  json_t *pl = find_event(root, "M", "process_labels", 4);
  cr_assert_str_eq(str_at(json_object_get(pl, "args"), "labels"), "measured");
  json_t *tn = find_event(root, "M", "thread_name", 4);
  cr_assert_eq(json_integer_value(json_object_get(tn, "tid")), 1);
  cr_assert_str_eq(str_at(json_object_get(tn, "args"), "name"), "compute");

  json_t *sim = find_event(root, "X", "linear_3.fwd", 1);
  cr_assert_str_eq(str_at(sim, "cat"), "compute");
  cr_assert_eq(json_integer_value(json_object_get(sim, "tid")), 1);
  cr_assert_float_eq(num_at(sim, "ts"), 1234.567, 1e-9);
  cr_assert_float_eq(num_at(sim, "dur"), 1.0, 1e-12);
  json_t *args = json_object_get(sim, "args");
  cr_assert_str_eq(str_at(args, "task"), "fwd:linear_3");
  cr_assert_eq(num_at(args, "flops"), 1.2e12);
  cr_assert_eq(num_at(args, "bytes"), 4096.0);
  cr_assert_null(json_object_get(args, "sim_dur_us"));
  cr_assert_null(json_object_get(args, "err_pct"));
  json_t *meas = find_event(root, "X", "linear_3.fwd", 2);
  args = json_object_get(meas, "args");
  cr_assert_str_eq(str_at(args, "task"), "fwd:linear_3");
  cr_assert_eq(num_at(args, "sim_dur_us"), 1.0);
  cr_assert_eq(num_at(args, "err_pct"), 10.0);
  cr_assert_float_eq(num_at(meas, "dur"), 1.1, 1e-12);

  json_t *odd = find_event(root, "X", ODD_NAME_OUT, 4);
  cr_assert_float_eq(num_at(odd, "ts"), 1235.667, 1e-9);
  cr_assert_null(json_object_get(odd, "args"));
  json_t *clamped = find_event(root, "X", "clamped", 1);
  cr_assert_eq(num_at(clamped, "dur"), 0.0);
  json_t *c = find_event(root, "C", "memory", 3);
  cr_assert_eq(num_at(json_object_get(c, "args"), "allocated_MiB"), 10241.0);
  json_t *inst = find_event(root, "i", "iteration 1", -1);
  cr_assert_str_eq(str_at(inst, "s"), "g");
  cr_assert_float_eq(num_at(inst, "ts"), 5000.0, 1e-12);
  json_decref(root);

  /* The raw text: fixed-point µs with 3 decimals, reals kept real, escapes as JSON wants them. */
  char *text = slurp(path);
  cr_assert(strncmp(text, "{\"traceEvents\":[\n", 17) == 0, "%.40s", text);
  cr_assert_not_null(strstr(text, "{\"ph\":\"X\",\"name\":\"linear_3.fwd\",\"cat\":\"compute\","
                                  "\"pid\":1,\"tid\":1,\"ts\":1234.567,\"dur\":1.000,\"args\":{"
                                  "\"task\":\"fwd:linear_3\",\"flops\":1200000000000.0,"
                                  "\"bytes\":4096.0}}"),
                     "%s", text);
  cr_assert_not_null(strstr(text, "\"ts\":4000.000,\"dur\":0.000}"));
  cr_assert_not_null(strstr(text, "\"ts\":0.000,\"dur\":5000.000}"));
  cr_assert_not_null(strstr(text, "\"sim_dur_us\":1.0,\"err_pct\":10.0}"));
  cr_assert_not_null(strstr(text, "\"name\":" ODD_NAME_RAW ","), "%s", text);
  cr_assert_not_null(strstr(text, "{\"ph\":\"i\",\"name\":\"iteration 0\",\"s\":\"g\",\"pid\":1,"
                                  "\"tid\":1,\"ts\":0.000}"));
  cr_assert_not_null(strstr(text, "{\"ph\":\"C\",\"name\":\"memory\",\"pid\":1,\"ts\":0.000,"
                                  "\"args\":{\"allocated_MiB\":10240.0}}"));
  cr_assert_not_null(strstr(text, "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":2,"
                                  "\"tid\":3,\"args\":{\"sort_index\":3}}"));
  const char *tail = "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"hap-trace\","
                     "\"version\":\"1.0\",\"tool\":\"test_trace\",\"plan\":\"plans/plan "
                     "\\\"b\\\".json\",\"cluster\":\"paper-hetero\"}}\n";
  size_t n = strlen(text), tn_len = strlen(tail);
  cr_assert(n > tn_len && strcmp(text + n - tn_len, tail) == 0, "tail: %s", text + n - tn_len);
  free(text);
  free(path);
  rm_tree(dir);
}

Test(trace, output_is_deterministic) {
  char *dir = tmpdir_make("trace");
  char *a = path_in(dir, "a.json"), *b = path_in(dir, "b.json");
  write_sample(a);
  write_sample(b);
  char *ta = slurp(a), *tb = slurp(b);
  cr_assert_str_eq(ta, tb);
  free(ta);
  free(tb);
  free(a);
  free(b);
  rm_tree(dir);
}

Test(trace, fixed_point_microseconds) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  hap_trace *t = open_trace(path);
  complete(t, "a", 1, 1, 0, 1);                /* 0.000 / 0.001 */
  complete(t, "b", 1, 1, 999, 1000);           /* 0.999 / 1.000 */
  complete(t, "c", 1, 1, 123456789012345, 10); /* large ts, exact */
  close_ok(t);
  char *text = slurp(path);
  cr_assert_not_null(strstr(text, "\"ts\":0.000,\"dur\":0.001}"), "%s", text);
  cr_assert_not_null(strstr(text, "\"ts\":0.999,\"dur\":1.000}"), "%s", text);
  cr_assert_not_null(strstr(text, "\"ts\":123456789012.345,\"dur\":0.010}"), "%s", text);
  free(text);
  hap_err err = {0};
  cr_assert_eq(hap_trace_check(path, NULL, &err), HAP_OK, "%s", err.msg);
  free(path);
  rm_tree(dir);
}

Test(trace, rebase) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  hap_trace *t = open_trace(path);
  int64_t base = 1700000000123456789;
  cr_assert_eq(hap_trace_rebase(t, base), HAP_OK);
  complete(t, "a", 1, 1, base + 1234, 5);
  close_ok(t);
  json_t *root = load_json(path);
  cr_assert_float_eq(num_at(find_event(root, "X", "a", 1), "ts"), 1.234, 1e-12);
  json_t *b = json_object_get(json_object_get(root, "otherData"), "base_time_ns");
  cr_assert(json_is_integer(b));
  cr_assert_eq(json_integer_value(b), base);
  json_decref(root);

  /* after a timed event, rebasing is refused (and the trace fails) */
  t = open_trace(path);
  complete(t, "a", 1, 1, 10, 5);
  cr_assert_eq(hap_trace_rebase(t, 5), HAP_EINVAL);
  hap_err err = {0};
  cr_assert_eq(hap_trace_close(t, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "rebase"), "%s", err.msg);
  free(path);
  rm_tree(dir);
}

Test(trace, errors_are_sticky_and_leave_no_file) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  hap_trace *t = open_trace(path);
  cr_assert_eq(hap_trace_rebase(t, 1000), HAP_OK);
  complete(t, "fine", 1, 1, 2000, 5);
  hap_trace_event e = HAP_TRACE_EVENT_INIT;
  e.name = "too early";
  e.pid = 1;
  e.tid = 1;
  e.ts_ns = 999;
  cr_assert_eq(hap_trace_complete(t, &e), HAP_EINVAL);
  /* every later call is a no-op returning the first error */
  e.ts_ns = 5000;
  cr_assert_eq(hap_trace_complete(t, &e), HAP_EINVAL);
  cr_assert_eq(hap_trace_counter(t, "m", 1, 5000, "x", 1.0), HAP_EINVAL);
  cr_assert_eq(hap_trace_meta(t, "k", "v"), HAP_EINVAL);
  hap_err err = {0};
  cr_assert_eq(hap_trace_close(t, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "'too early'"), "%s", err.msg);
  cr_assert_eq(count_entries(dir), 0, "a failed trace left a file");

  /* argument errors fail the trace the same way */
  t = open_trace(path);
  cr_assert_eq(hap_trace_instant(t, "x", 1, 1, 0, 'q'), HAP_EINVAL);
  cr_assert_eq(hap_trace_close(t, NULL), HAP_EINVAL);
  t = open_trace(path);
  cr_assert_eq(hap_trace_counter(t, "m", 1, 0, "x", NAN), HAP_EINVAL);
  hap_trace_abort(t);
  t = open_trace(path);
  cr_assert_eq(hap_trace_meta(t, "format", "x"), HAP_EINVAL);
  hap_trace_abort(t);
  t = open_trace(path);
  hap_trace_event unnamed = HAP_TRACE_EVENT_INIT;
  cr_assert_eq(hap_trace_complete(t, &unnamed), HAP_EINVAL);
  hap_trace_abort(t);
  cr_assert_eq(count_entries(dir), 0);
  cr_assert_eq(hap_trace_close(NULL, NULL), HAP_EINVAL);
  hap_trace_abort(NULL);
  free(path);
  rm_tree(dir);
}

Test(trace, abort_leaves_no_file) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  hap_trace *t = open_trace(path);
  cr_assert_eq(hap_trace_rank(t, HAP_TRACE_SIM, 0, NULL), HAP_OK);
  complete(t, "a", 1, 1, 0, 10);
  cr_assert_eq(hap_trace_events(t), 10);
  cr_assert_eq(count_entries(dir), 1); /* the temporary */
  hap_trace_abort(t);
  cr_assert_eq(count_entries(dir), 0);
  free(path);
  rm_tree(dir);
}

Test(trace, abort_keeps_an_existing_file) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  write_text(path, "old");
  hap_trace *t = open_trace(path);
  complete(t, "a", 1, 1, 0, 10);
  hap_trace_abort(t);
  char *text = slurp(path);
  cr_assert_str_eq(text, "old");
  free(text);
  free(path);
  rm_tree(dir);
}

Test(trace, unwritable_directory_fails_at_open) {
  char *dir = tmpdir_make("trace");
  char *file = path_in(dir, "plain");
  write_text(file, "x");
  const char *paths[] = {"/nonexistent-hap-dir/sub/trace.json", NULL};
  char *under_file = path_in(file, "trace.json"); /* a regular file as the directory: ENOTDIR */
  paths[1] = under_file;
  for (size_t i = 0; i < 2; i++) {
    hap_trace *t = (hap_trace *)1;
    hap_err err = {0};
    cr_assert_eq(hap_trace_open(paths[i], "x", &t, &err), HAP_EIO, "%s", paths[i]);
    cr_assert_null(t);
    cr_assert_not_null(strstr(err.msg, paths[i]), "%s", err.msg);
  }
  free(under_file);
  free(file);
  rm_tree(dir);
}

/* ---- the checker ---------------------------------------------------------------------------- */

Test(trace, overlap_on_one_lane_fails_naming_both_events) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  hap_trace *t = open_trace(path);
  complete(t, "outer", 1, 1, 0, 10000);
  complete(t, "inner", 1, 1, 2000, 3000);
  complete(t, "elsewhere", 1, 2, 5000, 10000); /* another lane: free to overlap */
  complete(t, "intruder", 1, 1, 5000, 10000);  /* starts inside "outer", ends after it */
  close_ok(t);
  hap_trace_check_report r;
  hap_err err = {0};
  cr_assert_eq(hap_trace_check(path, &r, &err), HAP_EINVAL, "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "traceEvents[3] 'intruder'"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "traceEvents[0] 'outer'"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "5.000-15.000 us"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "must nest"), "%s", err.msg);
  free(path);
  rm_tree(dir);
}

Test(trace, nesting_tolerance_is_one_ns) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "t.json");
  hap_trace *t = open_trace(path);
  complete(t, "a", 1, 1, 0, 1000);
  complete(t, "b", 1, 1, 999, 1000); /* 1 ns early: accepted */
  complete(t, "p", 2, 1, 0, 1000);
  complete(t, "c", 2, 1, 500, 501); /* ends 1 ns after its parent: accepted */
  complete(t, "z", 3, 1, 100, 0);   /* zero-length events are fine anywhere */
  complete(t, "z", 3, 1, 100, 0);
  close_ok(t);
  hap_trace_check_report r;
  hap_err err = {0};
  cr_assert_eq(hap_trace_check(path, &r, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(r.lanes, 3);

  t = open_trace(path);
  complete(t, "a", 1, 1, 0, 1000);
  complete(t, "b", 1, 1, 998, 1000); /* 2 ns early: an overlap */
  close_ok(t);
  cr_assert_eq(hap_trace_check(path, &r, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "'b'"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "'a'"), "%s", err.msg);
  free(path);
  rm_tree(dir);
}

/* A document and what hap_trace_check must say about it. */
typedef struct bad_case {
  const char *text;
  hap_status status;
  const char *needle;
} bad_case;

Test(trace, checker_refuses_malformed_traces) {
  static const bad_case cases[] = {
      {"{\"traceEvents\":[", HAP_EPARSE, "line 1"},
      {"[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":1}]", HAP_EPARSE,
       "object form"},
      {"{\"traceEvents\":{}}", HAP_EPARSE, "traceEvents: not an array"},
      {"{\"traceEvents\":[],\"traceEvents\":[]}", HAP_EPARSE, "duplicate"},
      {"{\"traceEvents\":[7]}", HAP_EPARSE, "traceEvents[0]: expected an object"},
      {"{\"traceEvents\":[{\"name\":\"a\"}]}", HAP_EPARSE, "traceEvents[0] 'a': \"ph\" is missing"},
      {"{\"traceEvents\":[{\"ph\":\"Q\",\"name\":\"a\"}]}", HAP_EPARSE, "not a Trace Event"},
      {"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0}]}", HAP_EPARSE,
       "'a': \"dur\" is missing"},
      {"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":-1,\"dur\":1}]}",
       HAP_EPARSE, "\"ts\" is -1, expected a number >= 0"},
      {"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":-2}]}",
       HAP_EPARSE, "\"dur\" is -2"},
      {"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":\"1\",\"tid\":1,\"ts\":0,"
       "\"dur\":1}]}",
       HAP_EPARSE, "\"pid\" is not an integer"},
      {"{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":1}]}", HAP_EPARSE,
       "traceEvents[0]: \"name\" is missing"},
      {"{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":1,\"tid\":1,\"ts\":\"0\","
       "\"dur\":1}]}",
       HAP_EPARSE, "\"ts\" is not a number"},
      {"{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"args\":{\"name\":"
       "\"x\"}}]}",
       HAP_EPARSE, "\"tid\" is missing"},
      {"{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{}}]}",
       HAP_EPARSE, "\"args.name\" is missing"},
      {"{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":1,\"args\":{"
       "\"sort_index\":\"1\"}}]}",
       HAP_EPARSE, "\"args.sort_index\" is of the wrong type, expected an integer"},
      {"{\"traceEvents\":[{\"ph\":\"C\",\"name\":\"m\",\"pid\":1,\"ts\":0,\"args\":{\"a\":\"x\"}}]"
       "}",
       HAP_EPARSE, "\"args.a\" is not a number"},
      {"{\"traceEvents\":[{\"ph\":\"i\",\"name\":\"m\",\"ts\":0,\"s\":\"x\"}]}", HAP_EPARSE,
       "\"s\" is 'x'"},
      {"{\"traceEvents\":[],\"displayTimeUnit\":\"s\"}", HAP_EPARSE, "displayTimeUnit"},
      {"{\"traceEvents\":[],\"otherData\":{\"format\":\"hap-trace\",\"version\":\"2.0\"}}",
       HAP_EVERSION, "otherData.version: is '2.0'"},
      {"{\"traceEvents\":[],\"otherData\":{\"format\":\"hap-trace\",\"version\":2}}", HAP_EPARSE,
       "otherData.version"},
  };
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "bad.json");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_text(path, cases[i].text);
    hap_err err = {0};
    hap_status st = hap_trace_check(path, NULL, &err);
    cr_assert_eq(st, cases[i].status, "case %zu (%s): %s", i, cases[i].text, err.msg);
    cr_assert_not_null(strstr(err.msg, cases[i].needle), "case %zu: '%s' not in: %s", i,
                       cases[i].needle, err.msg);
    cr_assert_not_null(strstr(err.msg, path), "case %zu: %s", i, err.msg);
  }
  free(path);
  rm_tree(dir);
}

Test(trace, checker_accepts_foreign_minimal_traces) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "ok.json");
  /* integer ts/dur, no otherData, another tool's format, B/E and flow events, a 1.x version */
  write_text(path, "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"a\",\"pid\":5,\"tid\":9,\"ts\":3,"
                   "\"dur\":2},{\"ph\":\"B\",\"name\":\"b\",\"pid\":5,\"tid\":9,\"ts\":3},"
                   "{\"ph\":\"E\",\"pid\":5,\"tid\":9,\"ts\":4},{\"ph\":\"s\",\"id\":1,\"pid\":6,"
                   "\"tid\":1,\"ts\":0}],\"otherData\":{\"format\":\"hap-trace\","
                   "\"version\":\"1.7\"}}");
  hap_trace_check_report r;
  hap_err err = {0};
  cr_assert_eq(hap_trace_check(path, &r, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(r.events, 4);
  cr_assert_eq(r.complete, 1);
  cr_assert_eq(r.processes, 2);
  cr_assert_eq(r.lanes, 1);
  cr_assert_eq(r.end_ns, 5000);

  cr_assert_eq(hap_trace_check("/nonexistent-hap-dir/t.json", &r, &err), HAP_EIO);
  free(path);
  rm_tree(dir);
}

Test(trace, empty_trace_is_valid) {
  char *dir = tmpdir_make("trace");
  char *path = path_in(dir, "empty.json");
  hap_trace *t = open_trace(path);
  close_ok(t);
  hap_trace_check_report r;
  hap_err err = {0};
  cr_assert_eq(hap_trace_check(path, &r, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(r.events, 0);
  cr_assert_eq(r.processes, 0);
  free(path);
  rm_tree(dir);
}
