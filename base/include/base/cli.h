/* cli.h — helpers shared by the hap-* command-line tools: output formats, human-readable numbers,
 * bounded option values, TTY detection. Printing helpers write to the given stream; nothing here
 * exits. */
#ifndef HAP_CLI_H
#define HAP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/status.h"

typedef enum hap_format {
  HAP_FORMAT_TABLE,
  HAP_FORMAT_CSV,
  HAP_FORMAT_JSON,
  HAP_FORMAT_NCCL_TESTS, /* "nccl-tests": collective sweeps as nccl-tests prints them */
  HAP_FORMAT_COUNT
} hap_format;

/* "table" | "csv" | "json" | "nccl-tests"; HAP_EINVAL otherwise. */
hap_status hap_format_parse(const char *s, hap_format *out);

/* One CSV field: `s` as it is, or in double quotes (inner quotes doubled) when it holds a comma,
 * a quote or a line break (RFC 4180). */
void hap_csv_field(FILE *f, const char *s);

/* 136.21 M, 1.23 T: value scaled by powers of 1000 with 4 significant digits, then `unit`. */
const char *hap_fmt_si(double v, const char *unit, char *buf, size_t len);
/* 1.50 GiB: bytes scaled by powers of 1024. */
const char *hap_fmt_bytes(double bytes, char *buf, size_t len);

/* "12G", "512M", "1.5T", "4096" (bytes; K/M/G/T are powers of 1024, an optional trailing "B"
 * or "iB" is accepted); HAP_EINVAL for anything else. */
hap_status hap_parse_bytes(const char *s, double *bytes);

/* An integer option value: all of `s` in base 10 (leading blanks and a sign allowed, as strtoll),
 * within [min, max]. Otherwise HAP_EINVAL, *out untouched, and in err (may be NULL)
 * "OPT wants an integer MIN..MAX, got 'S'" (junk, empty, overflow and out of range alike). */
hap_status hap_cli_parse_int(const char *opt, const char *s, long long min, long long max,
                             long long *out, hap_err *err);
/* A number option value: all of `s` as strtod reads it (decimal, exponent, hex), finite, within
 * [min, max]. Otherwise HAP_EINVAL, *out untouched, and "OPT wants a number in MIN..MAX, got 'S'"
 * (bounds as %g). An underflow to 0 or a subnormal counts as that value. */
hap_status hap_cli_parse_double(const char *opt, const char *s, double min, double max, double *out,
                                hap_err *err);

/* Print "prog: message" and "Try 'prog --help'." on stderr (usage errors; callers exit 2). */
void hap_cli_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Print "prog: message" for a failed operation (callers exit 1). */
void hap_cli_error(const char *prog, const hap_err *err);

/* Should progress be drawn on `f`: a TTY, TERM not "dumb", not quiet. */
bool hap_cli_progress_enabled(FILE *f, bool quiet);

#endif
