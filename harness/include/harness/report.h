/* report.h — a tool's messages on stderr, each said once. "prog: rank N: msg" names the MPI rank
 * (rank >= 0); "prog: msg" is for a process outside MPI or a message said for the whole job
 * (rank < 0). Every line goes out in one write() (stderr is unbuffered), so the lines of several
 * ranks do not interleave. */
#ifndef HAP_HARNESS_REPORT_H
#define HAP_HARNESS_REPORT_H

#include <stdint.h>

#include "base/status.h"

/* "prog: rank N: msg\n" (rank >= 0) or "prog: msg\n" (rank < 0) on stderr. */
void hap_report(const char *prog, int32_t rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same with err's message, or its status name when the message is empty. */
void hap_report_err(const char *prog, int32_t rank, const hap_err *err);

/* A usage error, said once per job: by rank 0, or before MPI starts (rank < 0) by the launcher's
 * rank 0 or a process no launcher started (hap_launcher_rank0: every rank parsed the same
 * arguments, so every rank has the same error): "prog: msg" and "Try 'prog --help'."
 * (hap_cli_usage_error). Returns 2, the usage exit status, on every rank. */
int hap_report_usage(const char *prog, int32_t rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
