#include "harness/report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "harness/launcher.h"

/* fmt formatted after `head` bytes of `head` and before `tail`, into `stack` when it fits, else
 * into a malloc'd buffer (free it when it is not `stack`); NULL when out of memory. *len: bytes. */
static char *vjoin(const char *head, const char *tail, char *stack, size_t cap, size_t *len,
                   const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  size_t nh = strlen(head), nt = strlen(tail);
  char *buf = NULL;
  if (n >= 0) {
    *len = nh + (size_t)n + nt;
    buf = *len < cap ? stack : malloc(*len + 1);
  }
  if (buf != NULL) {
    memcpy(buf, head, nh);
    vsnprintf(buf + nh, (size_t)n + 1, fmt, again);
    memcpy(buf + nh + (size_t)n, tail, nt + 1);
  }
  va_end(again);
  return buf;
}

static void vreport(const char *prog, int32_t rank, const char *fmt, va_list ap) {
  char prefix[160];
  if (rank >= 0)
    snprintf(prefix, sizeof prefix, "%s: rank %d: ", prog, (int)rank);
  else
    snprintf(prefix, sizeof prefix, "%s: ", prog);
  char stack[2048];
  size_t len = 0;
  char *line = vjoin(prefix, "\n", stack, sizeof stack, &len, fmt, ap);
  if (line != NULL)
    fwrite(line, 1, len, stderr);
  if (line != stack)
    free(line);
}

void hap_report(const char *prog, int32_t rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(prog, rank, fmt, ap);
  va_end(ap);
}

void hap_report_err(const char *prog, int32_t rank, const hap_err *err) {
  hap_report(prog, rank, "%s", err->msg[0] ? err->msg : hap_status_str(err->status));
}

int hap_report_usage(const char *prog, int32_t rank, const char *fmt, ...) {
  if (rank > 0 || (rank < 0 && !hap_launcher_rank0()))
    return 2;
  char stack[2048];
  size_t len = 0;
  va_list ap;
  va_start(ap, fmt);
  char *msg = vjoin("", "", stack, sizeof stack, &len, fmt, ap);
  va_end(ap);
  if (msg != NULL)
    hap_cli_usage_error(prog, "%s", msg);
  if (msg != stack)
    free(msg);
  return 2;
}
