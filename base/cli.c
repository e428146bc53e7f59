#include "base/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

hap_status hap_format_parse(const char *s, hap_format *out) {
  static const char *const names[HAP_FORMAT_COUNT] = {"table", "csv", "json", "nccl-tests"};
  for (int i = 0; i < HAP_FORMAT_COUNT; i++) {
    if (strcmp(s, names[i]) == 0) {
      *out = (hap_format)i;
      return HAP_OK;
    }
  }
  return HAP_EINVAL;
}

void hap_csv_field(FILE *f, const char *s) {
  if (strpbrk(s, ",\"\r\n") == NULL) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (const char *p = s; *p != '\0'; p++) {
    if (*p == '"')
      fputc('"', f);
    fputc(*p, f);
  }
  fputc('"', f);
}

const char *hap_fmt_si(double v, const char *unit, char *buf, size_t len) {
  static const char *const prefix[] = {"", "K", "M", "G", "T", "P", "E", "Z"};
  int i = 0;
  double a = fabs(v);
  while (a >= 999.95 && i < 7) {
    a /= 1000;
    v /= 1000;
    i++;
  }
  int decimals = a >= 100 ? 1 : a >= 10 ? 2 : 3;
  if (i == 0 && v == floor(v))
    decimals = 0;
  const char *sep = (prefix[i][0] || unit[0]) ? " " : "";
  snprintf(buf, len, "%.*f%s%s%s", decimals, v, sep, prefix[i], unit);
  return buf;
}

const char *hap_fmt_bytes(double bytes, char *buf, size_t len) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  while (fabs(bytes) >= 1024 && i < 6) {
    bytes /= 1024;
    i++;
  }
  snprintf(buf, len, i ? "%.2f %s" : "%.0f %s", bytes, unit[i]);
  return buf;
}

hap_status hap_parse_bytes(const char *s, double *bytes) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0)
    return HAP_EINVAL;
  double scale = 1;
  switch (*end) {
  case 'K':
  case 'k':
    scale = 1024.0;
    end++;
    break;
  case 'M':
  case 'm':
    scale = 1024.0 * 1024;
    end++;
    break;
  case 'G':
  case 'g':
    scale = 1024.0 * 1024 * 1024;
    end++;
    break;
  case 'T':
  case 't':
    scale = 1024.0 * 1024 * 1024 * 1024;
    end++;
    break;
  default: break;
  }
  if (strcmp(end, "") != 0 && strcmp(end, "B") != 0 && strcmp(end, "iB") != 0)
    return HAP_EINVAL;
  *bytes = v * scale;
  return HAP_OK;
}

hap_status hap_cli_parse_int(const char *opt, const char *s, long long min, long long max,
                             long long *out, hap_err *err) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno == ERANGE || v < min || v > max)
    return hap_err_set(err, HAP_EINVAL, "%s wants an integer %lld..%lld, got '%s'", opt, min, max,
                       s);
  *out = v;
  return HAP_OK;
}

hap_status hap_cli_parse_double(const char *opt, const char *s, double min, double max, double *out,
                                hap_err *err) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !isfinite(v) || v < min || v > max)
    return hap_err_set(err, HAP_EINVAL, "%s wants a number in %g..%g, got '%s'", opt, min, max, s);
  *out = v;
  return HAP_OK;
}

void hap_cli_usage_error(const char *prog, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry '%s --help'.\n", prog);
  va_end(ap);
}

void hap_cli_error(const char *prog, const hap_err *err) {
  fprintf(stderr, "%s: %s\n", prog, err->msg[0] ? err->msg : hap_status_str(err->status));
}

bool hap_cli_progress_enabled(FILE *f, bool quiet) {
  if (quiet || !isatty(fileno(f)))
    return false;
  const char *term = getenv("TERM");
  return term == NULL || strcmp(term, "dumb") != 0;
}
