/* test_nccl_tests.c — nccl-tests logs (store/nccl_tests.h) and profiles made from them
 * (profile/nccl_import.h): the checked-in 8-GPU logs of tests/data/nccl-tests parse with their
 * test, ranks and rows; the imported fits give each log's busbw at its largest size within 1 %;
 * malformed logs and logs of other tools get one line naming the file, the line and the field. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/nccl_import.h"
#include "store/fit.h"
#include "store/nccl_tests.h"

#define DIR HAP_TEST_DATA "/nccl-tests/"

static const char *const logs[HAP_NT_TEST_COUNT] = {
    DIR "all_reduce_perf.log", DIR "all_gather_perf.log", DIR "reduce_scatter_perf.log",
    DIR "alltoall_perf.log",   DIR "broadcast_perf.log",  DIR "sendrecv_perf.log"};

static void read_log(const char *path, hap_nt_log *log) {
  hap_err err = {0};
  cr_assert_eq(hap_nt_read(path, -1, log, &err), HAP_OK, "%s", err.msg);
}

Test(nccl_tests, checked_in_logs_parse) {
  for (int t = 0; t < HAP_NT_TEST_COUNT; t++) {
    hap_nt_log log;
    read_log(logs[t], &log);
    cr_expect_eq(log.test, (hap_nt_test)t, "%s: test from the file name", logs[t]);
    cr_assert_eq(log.n_ranks, 8);
    cr_assert_not_null(log.ranks);
    cr_expect_str_eq(log.ranks[7].host, "dgx-a100-0");
    cr_expect_eq(log.ranks[7].device, 7);
    cr_expect_str_eq(log.ranks[0].model, "NVIDIA A100-SXM4-80GB");
    cr_expect_str_eq(log.type, "float");
    cr_expect_gt(log.n_rows, 20);
    const hap_nt_row *last = &log.rows[log.n_rows - 1];
    cr_expect_eq(last->bytes, (int64_t)1 << 30);
    cr_expect(last->time_us[0] > 1000 && last->time_us[1] > 1000, "%s: both columns", logs[t]);
    hap_nt_log_free(&log);
  }
}

/* The fit of each imported sweep at the log's largest size gives the log's busbw within 1 %. */
Test(nccl_tests, imported_fits_match_the_logs_busbw) {
  hap_nt_log in[HAP_NT_TEST_COUNT];
  for (int t = 0; t < HAP_NT_TEST_COUNT; t++)
    read_log(logs[t], &in[t]);
  hap_profile *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_profile_from_nccl_tests(in, logs, HAP_NT_TEST_COUNT, NULL, &p, &err), HAP_OK,
               "%s", err.msg);
  cr_expect_str_eq(p->backend, "nccl-tests");
  cr_expect_eq(p->n_devices, 8);
  cr_expect_str_eq(p->devices[3].name, "dgx-a100-0:3");
  cr_expect_eq(p->devices[0].memory_bytes, (int64_t)80 << 30, "A100-80GB's memory");
  cr_expect_eq(p->n_colls, 10, "5 collectives, out-of-place and in-place");
  cr_expect_eq(p->n_p2p, 8, "the sendrecv ring");
  for (int t = 0; t < HAP_NT_TEST_COUNT; t++) {
    const hap_nt_row *last = &in[t].rows[in[t].n_rows - 1];
    double bytes = (double)last->bytes, fitted = 0, factor = 1;
    hap_coll_kind kind;
    if (hap_nt_test_coll((hap_nt_test)t, &kind)) {
      const hap_profile_coll *c = hap_profile_find_coll(p, kind, "world");
      cr_assert_not_null(c);
      fitted = hap_ab_fit_time(&c->fit, bytes);
      factor = hap_busbw_factor(kind, 8);
      const hap_profile_coll *ip = hap_profile_find_coll(p, kind, "world:in-place");
      cr_assert_not_null(ip);
      cr_expect(fabs(ip->p50_s[ip->n_sizes - 1] * 1e6 - last->time_us[1]) < 1e-6);
    } else {
      const hap_profile_p2p *s = hap_profile_find_p2p(p, 7, 0);
      cr_assert_not_null(s, "the ring closes: 7 -> 0");
      fitted = hap_ab_fit_time(&s->pieces, bytes);
    }
    double busbw = bytes / fitted / 1e9 * factor, want = last->busbw_GBps[0];
    cr_expect_lt(fabs(busbw - want) / want, 0.01, "%s: fitted busbw %.2f GB/s, log %.2f", logs[t],
                 busbw, want);
  }
  hap_profile_destroy(p);
  for (int t = 0; t < HAP_NT_TEST_COUNT; t++)
    hap_nt_log_free(&in[t]);
}

Test(nccl_tests, presets_from_model_names) {
  cr_expect_str_eq(hap_nt_preset_for("NVIDIA A100-SXM4-80GB"), "A100-80GB");
  cr_expect_str_eq(hap_nt_preset_for("NVIDIA A100-SXM4-40GB"), "A100-40GB");
  cr_expect_str_eq(hap_nt_preset_for("Tesla V100-SXM2-16GB"), "V100-16GB");
  cr_expect_str_eq(hap_nt_preset_for("NVIDIA H100 80GB HBM3"), "H100-SXM");
  cr_expect_str_eq(hap_nt_preset_for("NVIDIA H100 PCIe"), "H100-PCIe");
  cr_expect_null(hap_nt_preset_for("AMD Instinct MI300X"));
}

/* ---- malformed input --------------------------------------------------------------------------
 */

#define HEAD                                                                                       \
  "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor)\n"                                   \
  "#  Rank  0 Group  0 Pid  1 on   h device  0 [0x07] NVIDIA A100-SXM4-80GB\n"                     \
  "#  Rank  1 Group  0 Pid  2 on   h device  1 [0x0f] NVIDIA A100-SXM4-80GB\n"                     \
  "#       size         count      type   redop    root     time   algbw   busbw #wrong     time " \
  "  algbw   busbw #wrong\n"
#define ROW_8                                                                                      \
  "           8             2     float     sum      -1    10.00    0.00    0.00      0  "         \
  "  10.00    0.00    0.00      0\n"
#define ROW_BIG                                                                                    \
  "     1048576        262144     float     sum      -1   100.00   10.49   10.49      0 "          \
  "  100.00   10.49   10.49    N/A\n"

/* hap_nt_parse of text as "x/all_reduce_perf.log" fails with a message containing `want`. */
static void refused(const char *text, int hint, const char *path, const char *want) {
  hap_nt_log log;
  hap_err err = {0};
  cr_expect_eq(hap_nt_parse(path, text, strlen(text), hint, &log, &err), HAP_EPARSE, "accepted: %s",
               text);
  cr_expect(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
  cr_expect(strstr(err.msg, path) == err.msg, "'%s' does not start with the path", err.msg);
  cr_expect(strchr(err.msg, '\n') == NULL, "one line: %s", err.msg);
}

Test(nccl_tests, a_good_small_log_parses) {
  const char *text = HEAD ROW_8 ROW_BIG "# Avg bus bandwidth    : 5.2\n";
  hap_nt_log log;
  hap_err err = {0};
  cr_assert_eq(hap_nt_parse("x/all_reduce_perf.log", text, strlen(text), -1, &log, &err), HAP_OK,
               "%s", err.msg);
  cr_expect_eq(log.n_rows, 2);
  cr_expect_eq(log.rows[1].bytes, 1048576);
  cr_expect(log.rows[1].busbw_GBps[1] == 10.49);
  hap_nt_log_free(&log);
}

Test(nccl_tests, malformed_logs_are_refused) {
  const char *p = "x/all_reduce_perf.log";
  refused("", -1, p, "not an nccl-tests log");
  refused(
      "# OSU MPI Allreduce Latency Test v7.2\n# Size       Avg Latency(us)\n4    1.52\n8  1.6\n",
      -1, p, "not an nccl-tests log");
  refused(HEAD, -1, p, "no rows");
  refused("#  Rank  0 Group  0 Pid  1 on h device 0 [0x07] A100\n" ROW_8, -1, p,
          "a row before nccl-tests' column header");
  refused(HEAD "           8             2     float     sum      -1    10.00    0.00\n", -1, p,
          "7 columns, expected 13");
  refused(HEAD
          "           8             2     float     sum      -1    ten    0.00    0.00      0  "
          "  10.00    0.00    0.00      0\n",
          -1, p, "time is not a number of microseconds > 0: ten");
  refused(HEAD
          "           8             2     float     sum      -1    10.00    0.00    0.00      x  "
          "  10.00    0.00    0.00      0\n",
          -1, p, "#wrong is not a count or N/A: x");
  refused(HEAD
          "           8             3     float     sum      -1    10.00    0.00    0.00      0  "
          "  10.00    0.00    0.00      0\n",
          -1, p, "8 B for 3 float elements, expected 12 B");
  refused(HEAD
          "     1048576        262144     float     sum      -1   100.00   99.00   10.49      0 "
          "  100.00   10.49   10.49    N/A\n",
          -1, p, "algbw 99.00, busbw 10.49 GB/s, expected 10.49");
  refused(HEAD
          "           8             2     float    none      -1    10.00    0.00    0.00      0  "
          "  10.00    0.00    0.00      0\n",
          -1, p, "redop 'none' in a log of all_reduce_perf");
  refused(HEAD
          "           8             2    quarks     sum      -1    10.00    0.00    0.00      0 "
          "   10.00    0.00    0.00      0\n",
          -1, p, "type 'quarks' is not an nccl-tests data type");
  refused("#  Rank  1 Group  0 Pid  1 on h device 0 [0x07] A100\n", -1, p,
          "rank 1 where rank 0 was expected");
  refused(
      "#       size  count type redop root time algbw busbw #wrong time algbw busbw #wrong\n" ROW_8,
      -1, p, "cannot tell how many ranks");
  refused(HEAD ROW_8, -1, "x/run.log", "cannot tell which nccl-tests test wrote it");
  refused("# Collective test starting: gather_perf\n" HEAD ROW_8, -1, p,
          "a test hap does not read: ");
  const char nul[] = HEAD "\0" ROW_8;
  hap_nt_log log;
  hap_err err = {0};
  cr_expect_eq(hap_nt_parse(p, nul, sizeof nul - 1, -1, &log, &err), HAP_EPARSE);
  cr_expect(strstr(err.msg, "a NUL byte") != NULL, "%s", err.msg);
}

/* The test comes from the starting line first, then the file name, then the hint. */
Test(nccl_tests, which_test_wrote_it) {
  const char *text = "# Collective test starting: reduce_scatter_perf\n" HEAD ROW_8;
  hap_nt_log log;
  hap_err err = {0};
  /* the starting line wins over the file name, and reduce_scatter's sizes count 2 ranks */
  cr_expect_eq(hap_nt_parse("x/all_reduce_perf.log", text, strlen(text), -1, &log, &err),
               HAP_EPARSE);
  cr_expect(strstr(err.msg, "expected 16 B from reduce_scatter_perf on 2 ranks") != NULL, "%s",
            err.msg);
  const char *plain = HEAD ROW_8;
  cr_assert_eq(hap_nt_parse("run.log", plain, strlen(plain), HAP_NT_ALL_REDUCE, &log, &err), HAP_OK,
               "%s", err.msg);
  cr_expect_eq(log.test, HAP_NT_ALL_REDUCE);
  hap_nt_log_free(&log);
}

Test(nccl_tests, import_errors_name_the_log) {
  hap_nt_log in[2];
  read_log(logs[0], &in[0]);
  read_log(logs[0], &in[1]);
  const char *paths[2] = {"a/all_reduce_perf.log", "b/all_reduce_perf.log"};
  hap_profile *p = NULL;
  hap_err err = {0};
  cr_expect_eq(hap_profile_from_nccl_tests(in, paths, 2, NULL, &p, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "b/all_reduce_perf.log: a second log of all_reduce_perf") != NULL, "%s",
            err.msg);
  in[1].ranks[5].device = 9;
  in[1].test = HAP_NT_BROADCAST;
  err = (hap_err){0};
  cr_expect_eq(hap_profile_from_nccl_tests(in, paths, 2, NULL, &p, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg,
                   "its ranks differ from those of a/all_reduce_perf.log (first at rank 5") != NULL,
            "%s", err.msg);
  err = (hap_err){0};
  cr_expect_eq(hap_profile_from_nccl_tests(in, paths, 1, "A100-90GB", &p, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "--device: 'A100-90GB' is not a GPU preset") != NULL, "%s", err.msg);
  snprintf(in[0].ranks[0].model, sizeof in[0].ranks[0].model, "AMD Instinct MI300X");
  err = (hap_err){0};
  cr_expect_eq(hap_profile_from_nccl_tests(in, paths, 1, NULL, &p, &err), HAP_EINVAL);
  cr_expect(strstr(err.msg, "no device preset matches the GPU 'AMD Instinct MI300X'") != NULL, "%s",
            err.msg);
  cr_expect_eq(hap_profile_from_nccl_tests(in, paths, 1, "H100-SXM", &p, &err), HAP_OK, "%s",
               err.msg);
  cr_expect(p->devices[0].peak_flops[HAP_F16] == 989.4e12, "--device names the numbers");
  hap_profile_destroy(p);
  hap_nt_log_free(&in[0]);
  hap_nt_log_free(&in[1]);
}
