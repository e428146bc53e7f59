/* nccl_tests.h — nccl-tests' text output, read and written: the log of one run of all_reduce_perf,
 * all_gather_perf, reduce_scatter_perf, alltoall_perf, broadcast_perf or sendrecv_perf parsed
 * into its rows, and a profile's sweeps printed in the same layout (`hap-profile show --format
 * nccl-tests`).
 *
 * What a log holds (nccl-tests' documented output): '#' lines, among them one per rank
 * ("#  Rank  0 Group  0 Pid  1887 on   worker-1 device  0 [0x8d] NVIDIA H100 80GB HBM3"), the
 * column header ("#  size  count  type  redop  root  time  algbw  busbw #wrong  time ..."), then
 * one row per size: size (B), count (elements), type, redop, root, and for out-of-place then
 * in-place: time (us, the mean over the timed iterations), algbw and busbw (GB/s, 1e9 B/s),
 * #wrong (an integer, or N/A without validation). algbw = size / time; busbw = algbw x the test's
 * factor (2(n-1)/n all_reduce, (n-1)/n all_gather, reduce_scatter, alltoall, 1 broadcast and
 * sendrecv). Lines NCCL itself prints (NCCL_DEBUG) and other text are skipped; a row that starts
 * with an integer must be whole. Which test wrote a log is not in every log: a
 * "# Collective test starting: NAME" line, else the file name (all_reduce_perf.log), else the
 * caller's hint says it, and the rows must agree with it (size = count x type size, x ranks for
 * all_gather, reduce_scatter and alltoall; a reduction op only where the test reduces; algbw and
 * busbw as above to their printed precision).
 * Ownership: hap_nt_log owns its arrays; hap_nt_log_free. */
#ifndef HAP_STORE_NCCL_TESTS_H
#define HAP_STORE_NCCL_TESTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "cluster/cluster.h"
#include "store/profile_store.h"

#define HAP_NT_NAME_MAX 96

/* The tests hap reads: the five collectives (hap_coll_kind) and sendrecv. */
typedef enum hap_nt_test {
  HAP_NT_ALL_REDUCE = 0,
  HAP_NT_ALL_GATHER,
  HAP_NT_REDUCE_SCATTER,
  HAP_NT_ALLTOALL,
  HAP_NT_BROADCAST,
  HAP_NT_SENDRECV,
  HAP_NT_TEST_COUNT
} hap_nt_test;

/* "all_reduce_perf", ... "sendrecv_perf". */
const char *hap_nt_test_name(hap_nt_test t);
/* The collective a test times (HAP_NT_SENDRECV: none, false). */
bool hap_nt_test_coll(hap_nt_test t, hap_coll_kind *kind);

typedef struct hap_nt_rank {
  char host[HAP_NT_NAME_MAX];
  int32_t device; /* the GPU's index on its host */
  char model[HAP_NT_NAME_MAX];
} hap_nt_rank;

typedef struct hap_nt_row {
  int64_t bytes, count;
  double time_us[2]; /* [0] out-of-place, [1] in-place (NaN: not in the log) */
  double algbw_GBps[2], busbw_GBps[2];
} hap_nt_row;

typedef struct hap_nt_log {
  hap_nt_test test;
  char type[16], redop[16];
  int32_t root;
  int32_t n_ranks;
  hap_nt_rank *ranks; /* [n_ranks], in rank order */
  int32_t n_rows;
  hap_nt_row *rows; /* in the log's order */
} hap_nt_log;

/* Parse the text of a log (len bytes; need not end in '\0') that came from `path` (for messages
 * and, with no starting line, the test name). hint: the test when neither the log nor the path
 * names one (< 0: none). Errors, one line naming path and line: HAP_EPARSE for anything that is
 * not an nccl-tests log of a known test or contradicts itself, HAP_ENOMEM. */
hap_status hap_nt_parse(const char *path, const char *text, size_t len, int hint, hap_nt_log *out,
                        hap_err *err);
/* Read the file and parse it (HAP_EIO when it cannot be read). */
hap_status hap_nt_read(const char *path, int hint, hap_nt_log *out, hap_err *err);
void hap_nt_log_free(hap_nt_log *log);

/* Print every collective sweep of p as an nccl-tests table: a '#' line naming it, the column
 * header, one row per size from its p50 (time in us, algbw, busbw), the in-place columns from the
 * sweep named "<group>:in-place" of the same kind where there is one (else N/A), #wrong N/A; then
 * a sendrecv table when p has the p2p ring r -> r + 1 (each size's slowest pair). Sweeps named
 * ":in-place" are printed only beside their out-of-place one. */
void hap_nt_print_profile(FILE *f, const hap_profile *p);

#endif
