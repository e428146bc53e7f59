/* format.h — a tool's --format: which of table, csv, json and nccl-tests it offers, and the one
 * usage message for any other name. */
#ifndef HAP_HARNESS_FORMAT_H
#define HAP_HARNESS_FORMAT_H

#include "base/cli.h"
#include "base/status.h"

/* Sets of formats: bit (1u << HAP_FORMAT_x) per format offered. */
#define HAP_FORMATS_TABLE_JSON ((1u << HAP_FORMAT_TABLE) | (1u << HAP_FORMAT_JSON))
#define HAP_FORMATS_ALL                                                                            \
  ((1u << HAP_FORMAT_TABLE) | (1u << HAP_FORMAT_CSV) | (1u << HAP_FORMAT_JSON))

/* `arg` (a hap_format_parse name) if it is in `offered`. Otherwise HAP_EINVAL, *out untouched, and
 * in err (may be NULL) "unknown format 'ARG' (expected table or json)" naming the offered ones in
 * table, csv, json, nccl-tests order. */
hap_status hap_format_select(const char *arg, unsigned offered, hap_format *out, hap_err *err);

#endif
