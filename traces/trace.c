/* trace.c — streaming Chrome trace writer: one event per line, strings escaped (", \, control
 * characters; invalid UTF-8 becomes U+FFFD so the file always parses), times in fixed-point µs
 * from integer ns, the first error kept and reported at close. */
#include "traces/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json_write.h"
#include "base/utf8.h"
#include "base/vec.h"

struct hap_trace {
  hap_atomic_file af;
  hap_err err;      /* first failure (sticky), without the path */
  int64_t base_ns;  /* subtracted from every timestamp */
  int64_t events;   /* written so far, metadata included */
  int64_t timed;    /* events with a timestamp */
  char *tool;       /* otherData.tool */
  char **meta_keys; /* otherData, in first-set order */
  char **meta_vals;
  size_t n_meta, cap_meta;
};

int hap_trace_pid(hap_trace_timeline timeline, int rank) {
  return 2 * rank + 1 + (timeline == HAP_TRACE_MEASURED ? 1 : 0);
}

const char *hap_trace_lane_name(hap_trace_lane lane) {
  switch (lane) {
  case HAP_TRACE_LANE_COMPUTE: return "compute";
  case HAP_TRACE_LANE_COLLECTIVE: return "collective";
  case HAP_TRACE_LANE_P2P: return "p2p";
  }
  return NULL;
}

int64_t hap_trace_events(const hap_trace *t) { return t != NULL ? t->events : 0; }

/* ---- low-level output ----------------------------------------------------------------------- */

/* The escape for one byte that cannot go out as it is (c < 0x20, '"', '\\'). */
static void put_escape(FILE *f, unsigned char c) {
  static const char hex[] = "0123456789abcdef";
  switch (c) {
  case '"': fputs("\\\"", f); return;
  case '\\': fputs("\\\\", f); return;
  case '\n': fputs("\\n", f); return;
  case '\r': fputs("\\r", f); return;
  case '\t': fputs("\\t", f); return;
  case '\b': fputs("\\b", f); return;
  case '\f': fputs("\\f", f); return;
  default: break;
  }
  char esc[] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], '\0'};
  fputs(esc, f);
}

/* A JSON string literal; runs of plain bytes are written with one fwrite. */
static void put_str(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s, *run = p;
  fputc('"', f);
  while (*p != '\0') {
    size_t n = hap_utf8_seq(p);
    if (n > 0 && *p >= 0x20 && *p != '"' && *p != '\\') {
      p += n;
      continue;
    }
    fwrite(run, 1, (size_t)(p - run), f);
    if (n == 0)
      fputs("\\ufffd", f); /* not UTF-8: replacement character */
    else
      put_escape(f, *p);
    run = ++p;
  }
  fwrite(run, 1, (size_t)(p - run), f);
  fputc('"', f);
}

/* "key": with a leading comma unless first. */
static void put_key(FILE *f, const char *key, bool first) {
  if (!first)
    fputc(',', f);
  put_str(f, key);
  fputc(':', f);
}

/* Fixed-point microseconds with 3 decimals from non-negative integer ns: 1234567 -> 1234.567. */
static void put_us(FILE *f, int64_t ns) {
  fprintf(f, "%" PRId64 ".%03d", ns / 1000, (int)(ns % 1000));
}

/* Shortest round-trip double, kept a JSON real ("2.0", not "2"); finite values only. */
static void put_double(FILE *f, double v) {
  char buf[40];
  hap_format_double(v, buf, sizeof buf);
  fputs(buf, f);
  if (strpbrk(buf, ".eE") == NULL)
    fputs(".0", f);
}

/* ---- errors and event framing --------------------------------------------------------------- */

/* Record the first failure; every later call returns it. */
__attribute__((format(printf, 3, 4))) static hap_status fail(hap_trace *t, hap_status st,
                                                             const char *fmt, ...) {
  if (t->err.status != HAP_OK)
    return t->err.status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->err.msg, sizeof t->err.msg, fmt, ap);
  va_end(ap);
  t->err.status = st;
  return st;
}

/* Common guard: NULL handle, or an earlier failure. */
static hap_status usable(const hap_trace *t) {
  if (t == NULL)
    return HAP_EINVAL;
  return t->err.status;
}

static const char *safe(const char *s) { return s != NULL ? s : "(null)"; }

/* Timestamp after rebasing; a negative result fails the trace. */
static hap_status rebased(hap_trace *t, const char *what, const char *name, int64_t ts_ns,
                          int64_t *out) {
  if ((t->base_ns > 0 && ts_ns < INT64_MIN + t->base_ns) ||
      (t->base_ns < 0 && ts_ns > INT64_MAX + t->base_ns))
    return fail(t, HAP_EOVERFLOW, "%s '%s': ts %" PRId64 " ns minus base %" PRId64 " overflows",
                what, safe(name), ts_ns, t->base_ns);
  int64_t ts = ts_ns - t->base_ns;
  if (ts < 0)
    return fail(t, HAP_EINVAL,
                "%s '%s': ts %" PRId64 " ns is before the trace start (base %" PRId64
                " ns); timestamps must be >= the base",
                what, safe(name), ts_ns, t->base_ns);
  *out = ts;
  t->timed++;
  return HAP_OK;
}

/* Open an event object: separator, "ph" and "name". */
static void begin_event(hap_trace *t, const char *ph, const char *name) {
  FILE *f = t->af.f;
  errno = 0; /* so a write error names its own cause */
  fputs(t->events == 0 ? "\n{\"ph\":" : ",\n{\"ph\":", f);
  put_str(f, ph);
  put_key(f, "name", false);
  put_str(f, name);
  t->events++;
}

/* Close the event object and turn a stream error into the sticky error. */
static hap_status end_event(hap_trace *t) {
  fputc('}', t->af.f);
  if (ferror(t->af.f))
    return fail(t, HAP_EIO, "cannot write event %" PRId64 ": %s", t->events,
                errno != 0 ? strerror(errno) : "write error");
  return HAP_OK;
}

static void put_ids(FILE *f, int pid, const int *tid) {
  fprintf(f, ",\"pid\":%d", pid);
  if (tid != NULL)
    fprintf(f, ",\"tid\":%d", *tid);
}

/* ---- API ------------------------------------------------------------------------------------ */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL)
    memcpy(d, s, n);
  return d;
}

static void free_trace(hap_trace *t) {
  for (size_t i = 0; i < t->n_meta; i++) {
    free(t->meta_keys[i]);
    free(t->meta_vals[i]);
  }
  free(t->meta_keys);
  free(t->meta_vals);
  free(t->tool);
  free(t);
}

hap_status hap_trace_open(const char *path, const char *tool, hap_trace **out, hap_err *err) {
  *out = NULL;
  if (path == NULL)
    return hap_err_set(err, HAP_EINVAL, "trace: output path is missing");
  hap_trace *t = calloc(1, sizeof *t);
  char *tool_copy = dup_str(tool != NULL ? tool : "hap");
  if (t == NULL || tool_copy == NULL) {
    free(t);
    free(tool_copy);
    return hap_err_set(err, HAP_ENOMEM, "%s: out of memory opening the trace", path);
  }
  t->tool = tool_copy;
  hap_status st = hap_atomic_open(&t->af, path, err);
  if (st != HAP_OK) {
    free_trace(t);
    return st;
  }
  fputs("{\"traceEvents\":[", t->af.f);
  *out = t;
  return HAP_OK;
}

hap_status hap_trace_rebase(hap_trace *t, int64_t base_ns) {
  HAP_TRY(usable(t));
  if (t->timed > 0)
    return fail(t, HAP_EINVAL,
                "rebase to %" PRId64 " ns after %" PRId64 " timed events; rebase "
                "before the first one",
                base_ns, t->timed);
  t->base_ns = base_ns;
  return HAP_OK;
}

/* A metadata event ("M") whose args hold one string or one integer. */
static hap_status put_meta(hap_trace *t, const char *kind, int pid, const int *tid, const char *key,
                           const char *sval, int ival) {
  FILE *f = t->af.f;
  begin_event(t, "M", kind);
  put_ids(f, pid, tid);
  fputs(",\"args\":{", f);
  put_key(f, key, true);
  if (sval != NULL)
    put_str(f, sval);
  else
    fprintf(f, "%d", ival);
  fputc('}', f);
  return end_event(t);
}

hap_status hap_trace_process(hap_trace *t, int pid, const char *name, int sort_index,
                             const char *label) {
  HAP_TRY(usable(t));
  if (name == NULL)
    return fail(t, HAP_EINVAL, "process %d: name is missing", pid);
  HAP_TRY(put_meta(t, "process_name", pid, NULL, "name", name, 0));
  HAP_TRY(put_meta(t, "process_sort_index", pid, NULL, "sort_index", NULL, sort_index));
  if (label != NULL)
    HAP_TRY(put_meta(t, "process_labels", pid, NULL, "labels", label, 0));
  return HAP_OK;
}

hap_status hap_trace_thread(hap_trace *t, int pid, int tid, const char *name) {
  HAP_TRY(usable(t));
  if (name == NULL)
    return fail(t, HAP_EINVAL, "thread %d of process %d: name is missing", tid, pid);
  HAP_TRY(put_meta(t, "thread_name", pid, &tid, "name", name, 0));
  return put_meta(t, "thread_sort_index", pid, &tid, "sort_index", NULL, tid);
}

hap_status hap_trace_rank(hap_trace *t, hap_trace_timeline timeline, int rank, const char *device) {
  HAP_TRY(usable(t));
  if (rank < 0 || rank > (INT32_MAX - 2) / 2)
    return fail(t, HAP_EINVAL, "rank %d: expected 0 <= rank <= %d", rank, (INT32_MAX - 2) / 2);
  bool sim = timeline == HAP_TRACE_SIM;
  int pid = hap_trace_pid(timeline, rank);
  char name[512];
  if (device != NULL)
    snprintf(name, sizeof name, "%s | rank %d | %s", sim ? "sim" : "meas", rank, device);
  else
    snprintf(name, sizeof name, "%s | rank %d", sim ? "sim" : "meas", rank);
  HAP_TRY(hap_trace_process(t, pid, name, pid - 1, sim ? "simulated" : "measured"));
  for (int lane = HAP_TRACE_LANE_COMPUTE; lane <= HAP_TRACE_LANE_P2P; lane++)
    HAP_TRY(hap_trace_thread(t, pid, lane, hap_trace_lane_name((hap_trace_lane)lane)));
  return HAP_OK;
}

/* Numeric arg when finite; `first` tracks whether "args":{ still needs opening. */
static void put_num_arg(FILE *f, const char *key, double v, bool *first) {
  if (!isfinite(v))
    return;
  fputs(*first ? ",\"args\":{" : "", f);
  put_key(f, key, *first);
  put_double(f, v);
  *first = false;
}

hap_status hap_trace_complete(hap_trace *t, const hap_trace_event *e) {
  HAP_TRY(usable(t));
  if (e == NULL || e->name == NULL)
    return fail(t, HAP_EINVAL, "complete event %" PRId64 ": name is missing", t->events);
  int64_t ts = 0, dur = e->dur_ns > 0 ? e->dur_ns : 0; /* negative durations clamp to 0 */
  HAP_TRY(rebased(t, "event", e->name, e->ts_ns, &ts));
  if (dur > INT64_MAX - ts)
    return fail(t, HAP_EOVERFLOW, "event '%s': ts %" PRId64 " + dur %" PRId64 " ns overflows",
                e->name, ts, dur);
  FILE *f = t->af.f;
  begin_event(t, "X", e->name);
  if (e->cat != NULL) {
    put_key(f, "cat", false);
    put_str(f, e->cat);
  }
  put_ids(f, e->pid, &e->tid);
  fputs(",\"ts\":", f);
  put_us(f, ts);
  fputs(",\"dur\":", f);
  put_us(f, dur);
  bool first = true;
  if (e->task != NULL) {
    fputs(",\"args\":{", f);
    put_key(f, "task", true);
    put_str(f, e->task);
    first = false;
  }
  put_num_arg(f, "flops", e->flops, &first);
  put_num_arg(f, "bytes", e->bytes, &first);
  put_num_arg(f, "sim_dur_us", e->sim_dur_us, &first);
  put_num_arg(f, "err_pct", e->err_pct, &first);
  if (!first)
    fputc('}', f);
  return end_event(t);
}

hap_status hap_trace_instant(hap_trace *t, const char *name, int pid, int tid, int64_t ts_ns,
                             char scope) {
  HAP_TRY(usable(t));
  if (name == NULL)
    return fail(t, HAP_EINVAL, "instant event %" PRId64 ": name is missing", t->events);
  if (scope != 'g' && scope != 'p' && scope != 't')
    return fail(t, HAP_EINVAL, "instant '%s': scope is '\\x%02x', expected 'g', 'p' or 't'", name,
                (unsigned char)scope);
  int64_t ts = 0;
  HAP_TRY(rebased(t, "instant", name, ts_ns, &ts));
  FILE *f = t->af.f;
  begin_event(t, "i", name);
  fprintf(f, ",\"s\":\"%c\"", scope);
  put_ids(f, pid, &tid);
  fputs(",\"ts\":", f);
  put_us(f, ts);
  return end_event(t);
}

hap_status hap_trace_counter(hap_trace *t, const char *name, int pid, int64_t ts_ns,
                             const char *series, double value) {
  HAP_TRY(usable(t));
  if (name == NULL || series == NULL)
    return fail(t, HAP_EINVAL, "counter '%s': name and series are required", safe(name));
  if (!isfinite(value))
    return fail(t, HAP_EINVAL, "counter '%s' series '%s': value is not finite", name, series);
  int64_t ts = 0;
  HAP_TRY(rebased(t, "counter", name, ts_ns, &ts));
  FILE *f = t->af.f;
  begin_event(t, "C", name);
  put_ids(f, pid, NULL);
  fputs(",\"ts\":", f);
  put_us(f, ts);
  fputs(",\"args\":{", f);
  put_key(f, series, true);
  put_double(f, value);
  fputc('}', f);
  return end_event(t);
}

/* Grow the otherData arrays to hold one more entry. */
static bool meta_reserve(hap_trace *t) {
  if (t->n_meta < t->cap_meta)
    return true;
  int64_t cap = hap_vec_next_cap((int64_t)t->cap_meta, (int64_t)t->n_meta + 1, 8, INT64_MAX);
  char **keys = hap_vec_realloc(t->meta_keys, cap, sizeof *keys);
  if (keys == NULL)
    return false;
  t->meta_keys = keys;
  char **vals = hap_vec_realloc(t->meta_vals, cap, sizeof *vals);
  if (vals == NULL)
    return false;
  t->meta_vals = vals;
  t->cap_meta = (size_t)cap;
  return true;
}

hap_status hap_trace_meta(hap_trace *t, const char *key, const char *value) {
  HAP_TRY(usable(t));
  if (key == NULL || value == NULL)
    return fail(t, HAP_EINVAL, "otherData '%s': key and value are required", safe(key));
  static const char *const reserved[] = {"format", "version", "tool", "base_time_ns"};
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (strcmp(key, reserved[i]) == 0)
      return fail(t, HAP_EINVAL, "otherData '%s': reserved key (the writer sets it)", key);
  char *val = dup_str(value);
  if (val == NULL)
    return fail(t, HAP_ENOMEM, "otherData '%s': out of memory", key);
  for (size_t i = 0; i < t->n_meta; i++) {
    if (strcmp(t->meta_keys[i], key) == 0) {
      free(t->meta_vals[i]);
      t->meta_vals[i] = val;
      return HAP_OK;
    }
  }
  char *k = dup_str(key);
  if (k == NULL || !meta_reserve(t)) {
    free(k);
    free(val);
    return fail(t, HAP_ENOMEM, "otherData '%s': out of memory", key);
  }
  t->meta_keys[t->n_meta] = k;
  t->meta_vals[t->n_meta] = val;
  t->n_meta++;
  return HAP_OK;
}

/* The tail: end of traceEvents, displayTimeUnit and otherData. */
static void put_tail(hap_trace *t) {
  FILE *f = t->af.f;
  fputs("\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{", f);
  put_key(f, "format", true);
  put_str(f, HAP_TRACE_FORMAT);
  put_key(f, "version", false);
  put_str(f, HAP_TRACE_VERSION);
  put_key(f, "tool", false);
  put_str(f, t->tool);
  if (t->base_ns != 0)
    fprintf(f, ",\"base_time_ns\":%" PRId64, t->base_ns);
  for (size_t i = 0; i < t->n_meta; i++) {
    put_key(f, t->meta_keys[i], false);
    put_str(f, t->meta_vals[i]);
  }
  fputs("}}\n", f);
}

hap_status hap_trace_close(hap_trace *t, hap_err *err) {
  if (t == NULL)
    return hap_err_set(err, HAP_EINVAL, "trace: closing a trace that is not open");
  if (t->err.status != HAP_OK) {
    hap_status st = hap_err_set(err, t->err.status, "%s: %s", t->af.path, t->err.msg);
    hap_trace_abort(t);
    return st;
  }
  put_tail(t);
  hap_status st = hap_atomic_commit(&t->af, err);
  if (st != HAP_OK)
    hap_atomic_abort(&t->af);
  free_trace(t);
  return st;
}

void hap_trace_abort(hap_trace *t) {
  if (t == NULL)
    return;
  hap_atomic_abort(&t->af);
  free_trace(t);
}
