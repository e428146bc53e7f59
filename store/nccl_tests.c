/* nccl_tests.c — nccl-tests' output read and written (nccl_tests.h). */
#include "store/nccl_tests.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/fileio.h"
#include "store/fit.h"

static const char *const test_names[HAP_NT_TEST_COUNT] = {"all_reduce_perf",     "all_gather_perf",
                                                          "reduce_scatter_perf", "alltoall_perf",
                                                          "broadcast_perf",      "sendrecv_perf"};

const char *hap_nt_test_name(hap_nt_test t) {
  return t >= 0 && t < HAP_NT_TEST_COUNT ? test_names[t] : "?";
}

bool hap_nt_test_coll(hap_nt_test t, hap_coll_kind *kind) {
  static const hap_coll_kind kinds[] = {HAP_COLL_ALL_REDUCE, HAP_COLL_ALL_GATHER,
                                        HAP_COLL_REDUCE_SCATTER, HAP_COLL_ALL_TO_ALL,
                                        HAP_COLL_BROADCAST};
  if (t < 0 || t >= HAP_NT_SENDRECV)
    return false;
  *kind = kinds[t];
  return true;
}

void hap_nt_log_free(hap_nt_log *log) {
  if (log == NULL)
    return;
  free(log->ranks);
  free(log->rows);
  memset(log, 0, sizeof *log);
}

/* The test whose name ("all_reduce_perf", also "all_reduce_perf_mpi") starts somewhere in s, or
 * -1; the last such in s wins (a path's file name after its directories). */
static int test_in(const char *s) {
  int found = -1;
  const char *best = NULL;
  for (int t = 0; t < HAP_NT_TEST_COUNT; t++) {
    for (const char *at = strstr(s, test_names[t]); at != NULL; at = strstr(at + 1, test_names[t]))
      if (best == NULL || at > best) {
        best = at;
        found = t;
      }
  }
  return found;
}

/* Bytes of one element of an nccl-tests type name; 0 when unknown. */
static int64_t type_bytes(const char *type) {
  static const struct {
    const char *name;
    int64_t bytes;
  } types[] = {{"int8", 1},   {"char", 1},    {"uint8", 1},    {"f8e4m3", 1}, {"f8e5m2", 1},
               {"half", 2},   {"float16", 2}, {"bfloat16", 2}, {"int32", 4},  {"int", 4},
               {"uint32", 4}, {"float", 4},   {"float32", 4},  {"int64", 8},  {"uint64", 8},
               {"double", 8}, {"float64", 8}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strcmp(type, types[i].name) == 0)
      return types[i].bytes;
  return 0;
}

/* Does the test's size count every rank's share (size = count x type x ranks)? */
static bool size_is_total(hap_nt_test t) {
  return t == HAP_NT_ALL_GATHER || t == HAP_NT_REDUCE_SCATTER || t == HAP_NT_ALLTOALL;
}

static double busbw_factor(hap_nt_test t, int32_t n) {
  hap_coll_kind k;
  return hap_nt_test_coll(t, &k) ? hap_busbw_factor(k, n) : 1.0;
}

/* ---- parsing -------------------------------------------------------------------------------- */

typedef struct parser {
  const char *path;
  int line;
  hap_nt_log *log;
  int cap_ranks, cap_rows;
  bool header;   /* the column header was seen */
  bool has_root; /* ... and it has a root column */
  int started;   /* the test a "# Collective test starting" line names, or -1 */
  hap_err *err;
} parser;

static hap_status fail(parser *ps, const char *fmt, const char *what) {
  return hap_err_set(ps->err, HAP_EPARSE, "%s:%d: %s%s", ps->path, ps->line, fmt, what);
}

static hap_status oom(parser *ps) {
  return hap_err_set(ps->err, HAP_ENOMEM, "%s: out of memory", ps->path);
}

/* The next whitespace-separated token of *s (NULL at the end). */
static const char *token(char **s);
static bool parse_i64(const char *t, int64_t lo, int64_t *out);

/* "#  Rank  0 Group  0 Pid  1887 on   worker-1 device  0 [0x8d] NVIDIA H100 80GB HBM3" */
static hap_status rank_line(parser *ps, const char *line) {
  static const char *const words[] = {"#",  "Rank", NULL, "Group",  NULL, "Pid",
                                      NULL, "on",   NULL, "device", NULL};
  char copy[512];
  snprintf(copy, sizeof copy, "%s", line);
  char *rest = copy;
  const char *tok[11];
  bool ok = true;
  for (int i = 0; i < 11 && ok; i++) {
    tok[i] = token(&rest);
    ok = tok[i] != NULL && (words[i] == NULL || strcmp(tok[i], words[i]) == 0);
  }
  int64_t rank = -1, device = -1;
  if (!ok || !parse_i64(tok[2], 0, &rank) || !parse_i64(tok[10], 0, &device) ||
      strlen(tok[8]) >= HAP_NT_NAME_MAX || device > INT32_MAX)
    return fail(ps,
                "a rank line that does not read '#  Rank R Group G Pid P on HOST device D "
                "[BUS] MODEL'",
                "");
  const char *host = tok[8], *s = rest;
  hap_nt_log *log = ps->log;
  if (rank != log->n_ranks)
    return hap_err_set(ps->err, HAP_EPARSE,
                       "%s:%d: rank %lld where rank %d was expected (ranks in order from 0)",
                       ps->path, ps->line, (long long)rank, (int)log->n_ranks);
  if (log->n_ranks == ps->cap_ranks) {
    int cap = ps->cap_ranks ? 2 * ps->cap_ranks : 16;
    hap_nt_rank *r = realloc(log->ranks, (size_t)cap * sizeof *r);
    if (r == NULL)
      return oom(ps);
    log->ranks = r;
    ps->cap_ranks = cap;
  }
  hap_nt_rank *r = &log->ranks[log->n_ranks++];
  memset(r, 0, sizeof *r);
  snprintf(r->host, sizeof r->host, "%s", host);
  r->device = (int32_t)device;
  const char *m = s;
  const char *close = strchr(m, ']');
  m = close != NULL ? close + 1 : m; /* past the bus id */
  while (isspace((unsigned char)*m))
    m++;
  snprintf(r->model, sizeof r->model, "%s", *m ? m : "GPU");
  size_t n = strlen(r->model);
  while (n > 0 && isspace((unsigned char)r->model[n - 1]))
    r->model[--n] = '\0';
  return HAP_OK;
}

/* A '#' line: a rank, the column header, the test's name, or commentary. */
static hap_status comment_line(parser *ps, const char *s) {
  const char *p = s + 1;
  while (*p == ' ' || *p == '\t')
    p++;
  if (strncmp(p, "Rank ", 5) == 0)
    return rank_line(ps, s);
  if (strncmp(p, "Collective test starting:", 25) == 0) {
    ps->started = test_in(p + 25);
    if (ps->started < 0)
      return fail(ps, "a test hap does not read: ", p + 25);
    return HAP_OK;
  }
  if (strstr(p, "size") != NULL && strstr(p, "count") != NULL && strstr(p, "type") != NULL &&
      strstr(p, "redop") != NULL && strstr(p, "algbw") != NULL && strstr(p, "busbw") != NULL) {
    ps->header = true;
    ps->has_root = strstr(p, "root") != NULL;
  }
  return HAP_OK;
}

/* The next whitespace-separated token of *s (NULL at the end). */
static const char *token(char **s) {
  char *p = *s;
  while (*p == ' ' || *p == '\t')
    p++;
  if (*p == '\0')
    return NULL;
  char *start = p;
  while (*p && *p != ' ' && *p != '\t')
    p++;
  if (*p)
    *p++ = '\0';
  *s = p;
  return start;
}

/* A whole integer >= lo, or a finite number >= lo (base/cli.h's parsers; no message). */
static bool parse_i64(const char *t, int64_t lo, int64_t *out) {
  long long v = 0;
  if (t == NULL || hap_cli_parse_int("", t, lo, INT64_MAX, &v, NULL) != HAP_OK)
    return false;
  *out = v;
  return true;
}

static bool parse_num(const char *t, double lo, double *out) {
  return t != NULL && hap_cli_parse_double("", t, lo, HUGE_VAL, out, NULL) == HAP_OK;
}

/* One row: size count type redop [root] then (time algbw busbw #wrong) out-of-place and, when
 * there, in-place. */
static hap_status data_row(parser *ps, char *s) {
  if (!ps->header)
    return fail(ps,
                "a row before nccl-tests' column header (size count type redop root time "
                "algbw busbw): not an nccl-tests log",
                "");
  hap_nt_log *log = ps->log;
  const char *tok[16];
  int n = 0;
  for (const char *t = token(&s); t != NULL; t = token(&s))
    if (n < 16)
      tok[n++] = t;
    else
      n++;
  int fixed = ps->has_root ? 5 : 4;
  if (n != fixed + 4 && n != fixed + 8)
    return hap_err_set(ps->err, HAP_EPARSE,
                       "%s:%d: %d columns, expected %d (size count type redop%s, then time algbw "
                       "busbw #wrong out-of-place and in-place)",
                       ps->path, ps->line, n, fixed + 8, ps->has_root ? " root" : "");
  hap_nt_row row = {.time_us = {NAN, NAN}, .algbw_GBps = {NAN, NAN}, .busbw_GBps = {NAN, NAN}};
  if (!parse_i64(tok[0], 0, &row.bytes))
    return fail(ps, "size is not a byte count >= 0: ", tok[0]);
  if (!parse_i64(tok[1], 0, &row.count))
    return fail(ps, "count is not an element count >= 0: ", tok[1]);
  const char *type = tok[2], *redop = tok[3];
  int64_t root = -1;
  if (ps->has_root && !parse_i64(tok[4], -1, &root))
    return fail(ps, "root is not a rank (or -1): ", tok[4]);
  for (int k = 0, sets = (n - fixed) / 4; k < sets; k++) {
    const char *const *c = &tok[fixed + 4 * k];
    int64_t wrong = 0;
    if (!parse_num(c[0], 0, &row.time_us[k]) || !(row.time_us[k] > 0))
      return fail(ps, "time is not a number of microseconds > 0: ", c[0]);
    if (!parse_num(c[1], 0, &row.algbw_GBps[k]))
      return fail(ps, "algbw is not a number of GB/s >= 0: ", c[1]);
    if (!parse_num(c[2], 0, &row.busbw_GBps[k]))
      return fail(ps, "busbw is not a number of GB/s >= 0: ", c[2]);
    if (strcmp(c[3], "N/A") != 0 && !parse_i64(c[3], 0, &wrong))
      return fail(ps, "#wrong is not a count or N/A: ", c[3]);
  }
  if (log->n_rows == 0) {
    snprintf(log->type, sizeof log->type, "%s", type);
    snprintf(log->redop, sizeof log->redop, "%s", redop);
    log->root = (int32_t)root;
  } else if (strcmp(log->type, type) != 0 || strcmp(log->redop, redop) != 0 || log->root != root) {
    return fail(ps, "type, redop or root differ from the first row's", "");
  }
  if (log->n_rows == ps->cap_rows) {
    int cap = ps->cap_rows ? 2 * ps->cap_rows : 32;
    hap_nt_row *r = realloc(log->rows, (size_t)cap * sizeof *r);
    if (r == NULL)
      return oom(ps);
    log->rows = r;
    ps->cap_rows = cap;
  }
  log->rows[log->n_rows++] = row;
  return HAP_OK;
}

/* After the last line: the test, and every row against it. */
static hap_status check_rows(parser *ps, int hint) {
  hap_nt_log *log = ps->log;
  int test = ps->started >= 0 ? ps->started : test_in(ps->path);
  if (test < 0)
    test = hint;
  if (test < 0 || test >= HAP_NT_TEST_COUNT)
    return hap_err_set(ps->err, HAP_EPARSE,
                       "%s: cannot tell which nccl-tests test wrote it (no '# Collective test "
                       "starting' line): name the file after it (e.g. all_reduce_perf.log) or "
                       "give --test",
                       ps->path);
  log->test = (hap_nt_test)test;
  if (!ps->header || log->n_rows == 0)
    return hap_err_set(ps->err, HAP_EPARSE,
                       "%s: %s, expected nccl-tests' output (its column header 'size count type "
                       "redop root time algbw busbw' and a row per size)",
                       ps->path, ps->header ? "no rows" : "not an nccl-tests log");
  if (log->n_ranks == 0)
    return hap_err_set(ps->err, HAP_EPARSE,
                       "%s: no '#  Rank R ... on HOST device D' lines: cannot tell how many ranks "
                       "ran",
                       ps->path);
  int32_t n = log->n_ranks;
  int64_t ts = type_bytes(log->type);
  if (ts == 0)
    return hap_err_set(ps->err, HAP_EPARSE, "%s: type '%s' is not an nccl-tests data type",
                       ps->path, log->type);
  bool reduces = log->test == HAP_NT_ALL_REDUCE || log->test == HAP_NT_REDUCE_SCATTER;
  bool none = strcmp(log->redop, "none") == 0;
  if (log->test != HAP_NT_SENDRECV && reduces == none)
    return hap_err_set(ps->err, HAP_EPARSE, "%s: redop '%s' in a log of %s, expected %s", ps->path,
                       log->redop, hap_nt_test_name(log->test),
                       reduces ? "a reduction (sum, prod, max, min, avg)" : "none");
  if (ps->has_root && (log->test == HAP_NT_BROADCAST) != (log->root >= 0))
    return hap_err_set(ps->err, HAP_EPARSE, "%s: root %d in a log of %s, expected %s", ps->path,
                       (int)log->root, hap_nt_test_name(log->test),
                       log->test == HAP_NT_BROADCAST ? "a rank" : "-1");
  double factor = busbw_factor(log->test, n);
  for (int32_t i = 0; i < log->n_rows; i++) {
    const hap_nt_row *r = &log->rows[i];
    int64_t want = r->count * ts * (size_is_total(log->test) ? n : 1);
    if (r->bytes != want)
      return hap_err_set(ps->err, HAP_EPARSE,
                         "%s: row %d: %lld B for %lld %s elements, expected %lld B from %s on %d "
                         "ranks",
                         ps->path, (int)i + 1, (long long)r->bytes, (long long)r->count, log->type,
                         (long long)want, hap_nt_test_name(log->test), (int)n);
    for (int k = 0; k < 2; k++) {
      if (isnan(r->time_us[k]))
        continue;
      /* printed to 0.01: allow that, the time's own rounding and 1 % */
      double alg = (double)r->bytes / (r->time_us[k] * 1e3);
      double tol = 0.011 + 0.01 * alg;
      if (fabs(r->algbw_GBps[k] - alg) > tol ||
          fabs(r->busbw_GBps[k] - alg * factor) > tol * fmax(factor, 1))
        return hap_err_set(ps->err, HAP_EPARSE,
                           "%s: row %d (%lld B): algbw %.2f, busbw %.2f GB/s, expected %.2f and "
                           "%.2f from the time (%.2f us) and %s's busbw factor %.3f",
                           ps->path, (int)i + 1, (long long)r->bytes, r->algbw_GBps[k],
                           r->busbw_GBps[k], alg, alg * factor, r->time_us[k],
                           hap_nt_test_name(log->test), factor);
    }
  }
  return HAP_OK;
}

hap_status hap_nt_parse(const char *path, const char *text, size_t len, int hint, hap_nt_log *out,
                        hap_err *err) {
  memset(out, 0, sizeof *out);
  out->root = -1;
  parser ps = {.path = path, .log = out, .started = -1, .err = err};
  char *buf = malloc(len + 1);
  if (buf == NULL)
    return oom(&ps);
  memcpy(buf, text, len);
  buf[len] = '\0';
  hap_status st = HAP_OK;
  if (memchr(text, '\0', len) != NULL)
    st = hap_err_set(err, HAP_EPARSE, "%s: a NUL byte: not a text log", path);
  char *line = buf;
  while (st == HAP_OK && line != NULL && *line != '\0') {
    char *next = strchr(line, '\n');
    if (next != NULL)
      *next++ = '\0';
    size_t n = strlen(line);
    if (n > 0 && line[n - 1] == '\r')
      line[n - 1] = '\0';
    ps.line++;
    char *s = line;
    while (*s == ' ' || *s == '\t')
      s++;
    if (*s == '#')
      st = comment_line(&ps, s);
    else if (isdigit((unsigned char)*s))
      st = data_row(&ps, s);
    /* anything else (NCCL's own INFO lines, a version banner): not ours to read */
    line = next;
  }
  free(buf);
  if (st == HAP_OK)
    st = check_rows(&ps, hint);
  if (st != HAP_OK)
    hap_nt_log_free(out);
  return st;
}

hap_status hap_nt_read(const char *path, int hint, hap_nt_log *out, hap_err *err) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  HAP_TRY(hap_read_file(path, &text, &len, err));
  hap_status st = hap_nt_parse(path, text, len, hint, out, err);
  free(text);
  return st;
}

/* ---- printing ------------------------------------------------------------------------------- */

static void print_header(FILE *f) {
  fprintf(f, "#%73s%30s\n", "out-of-place", "in-place");
  fprintf(f, "#%11s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type",
          "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  fprintf(f, "#%11s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "",
          "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

/* time, algbw, busbw, #wrong for t seconds (NaN: N/A) of `bytes` */
static void print_cols(FILE *f, double t, int64_t bytes, double factor) {
  if (!(t > 0)) {
    fprintf(f, " %8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  double alg = (double)bytes / t / 1e9;
  fprintf(f, " %8.2f %7.2f %7.2f %6s", t * 1e6, alg, alg * factor, "N/A");
}

static const hap_profile_coll *in_place_of(const hap_profile *p, const hap_profile_coll *c) {
  char name[256];
  snprintf(name, sizeof name, "%s:in-place", c->group);
  const hap_profile_coll *ip = hap_profile_find_coll(p, c->kind, name);
  if (ip == NULL || ip->n_sizes != c->n_sizes)
    return NULL;
  for (int32_t i = 0; i < c->n_sizes; i++)
    if (ip->sizes_bytes[i] != c->sizes_bytes[i])
      return NULL;
  return ip;
}

static void print_coll(FILE *f, const hap_profile *p, const hap_profile_coll *c) {
  static const hap_nt_test test_of[HAP_COLL_KIND_COUNT] = {
      [HAP_COLL_ALL_REDUCE] = HAP_NT_ALL_REDUCE,
      [HAP_COLL_ALL_GATHER] = HAP_NT_ALL_GATHER,
      [HAP_COLL_REDUCE_SCATTER] = HAP_NT_REDUCE_SCATTER,
      [HAP_COLL_ALL_TO_ALL] = HAP_NT_ALLTOALL,
      [HAP_COLL_BROADCAST] = HAP_NT_BROADCAST};
  hap_nt_test t = test_of[c->kind];
  const hap_profile_coll *ip = in_place_of(p, c);
  double factor = hap_busbw_factor(c->kind, c->n_ranks);
  fprintf(f, "# %s: %s over %s (%d ranks), p50 of %d samples per size%s%s\n#\n",
          hap_nt_test_name(t), hap_coll_kind_name(c->kind), c->group, (int)c->n_ranks, (int)c->reps,
          ip ? "; in-place: " : "; in-place: not measured", ip ? ip->group : "");
  print_header(f);
  double sum = 0;
  for (int32_t i = 0; i < c->n_sizes; i++) {
    int64_t bytes = c->sizes_bytes[i];
    int64_t count = bytes / 4 / (size_is_total(t) ? c->n_ranks : 1);
    fprintf(f, " %11lld %13lld %9s %7s %7d", (long long)bytes, (long long)count, "float",
            t == HAP_NT_ALL_REDUCE || t == HAP_NT_REDUCE_SCATTER ? "sum" : "none",
            t == HAP_NT_BROADCAST ? 0 : -1);
    print_cols(f, c->p50_s[i], bytes, factor);
    print_cols(f, ip ? ip->p50_s[i] : NAN, bytes, factor);
    fputc('\n', f);
    sum += (double)bytes / c->p50_s[i] / 1e9 * factor;
  }
  fprintf(f, "# Avg bus bandwidth    : %g\n#\n\n", c->n_sizes > 0 ? sum / c->n_sizes : 0.0);
}

/* The ring r -> r + 1 of every device, each with the first pair's sizes; NULL-free on success. */
static bool ring_of(const hap_profile *p, const hap_profile_p2p **ring) {
  int32_t n = p->n_devices;
  if (n < 2)
    return false;
  for (int32_t r = 0; r < n; r++) {
    ring[r] = hap_profile_find_p2p(p, r, (r + 1) % n);
    if (ring[r] == NULL || ring[r]->n_sizes != ring[0]->n_sizes)
      return false;
    for (int32_t i = 0; i < ring[0]->n_sizes; i++)
      if (ring[r]->sizes_bytes[i] != ring[0]->sizes_bytes[i])
        return false;
  }
  return true;
}

static void print_sendrecv(FILE *f, const hap_profile *p) {
  const hap_profile_p2p **ring = calloc((size_t)p->n_devices + 1, sizeof(const hap_profile_p2p *));
  if (ring == NULL || !ring_of(p, ring)) {
    free(ring);
    return;
  }
  fprintf(f, "# %s: p2p ring r -> r + 1 over %d devices, each size's slowest pair (p50)\n#\n",
          hap_nt_test_name(HAP_NT_SENDRECV), (int)p->n_devices);
  print_header(f);
  double sum = 0;
  for (int32_t i = 0; i < ring[0]->n_sizes; i++) {
    int64_t bytes = ring[0]->sizes_bytes[i];
    double t = 0;
    for (int32_t r = 0; r < p->n_devices; r++)
      t = fmax(t, ring[r]->p50_s[i]);
    fprintf(f, " %11lld %13lld %9s %7s %7d", (long long)bytes, (long long)(bytes / 4), "float",
            "sum", -1);
    print_cols(f, t, bytes, 1);
    print_cols(f, NAN, bytes, 1);
    fputc('\n', f);
    sum += (double)bytes / t / 1e9;
  }
  fprintf(f, "# Avg bus bandwidth    : %g\n#\n\n", sum / ring[0]->n_sizes);
  free(ring);
}

void hap_nt_print_profile(FILE *f, const hap_profile *p) {
  fprintf(f, "# hap-profile: %s, backend %s, %d devices on %d hosts, in nccl-tests' layout\n",
          p->source ? p->source : "profile", p->backend ? p->backend : "?", (int)p->n_devices,
          (int)p->n_hosts);
  fprintf(f, "# Using devices\n");
  for (int32_t d = 0; d < p->n_devices; d++) {
    const char *colon = strrchr(p->devices[d].name, ':'); /* "<host>:<index on the host>" */
    fprintf(f, "#  Rank %2d Group  0 Pid      0 on %10s device %2d [0x00] %s\n", (int)d,
            p->devices[d].host, colon ? (int)strtol(colon + 1, NULL, 10) : (int)d,
            p->devices[d].model);
  }
  fprintf(f, "#\n");
  for (int32_t j = 0; j < p->n_colls; j++) {
    const hap_profile_coll *c = &p->colls[j];
    size_t n = strlen(c->group);
    if (n > 9 && strcmp(c->group + n - 9, ":in-place") == 0) {
      char base[256]; /* printed beside its out-of-place sweep, where there is one */
      snprintf(base, sizeof base, "%.*s", (int)(n - 9), c->group);
      const hap_profile_coll *oop = hap_profile_find_coll(p, c->kind, base);
      if (oop != NULL && in_place_of(p, oop) == c)
        continue;
    }
    print_coll(f, p, c);
  }
  print_sendrecv(f, p);
}
