/* test_report.c — report/report.h on small documents written here: each kind detected and drawn
 * (the SVG elements its data calls for), the axes it picks, text escaped, and a refused input one
 * line with nothing written. The end-to-end checks over the tools' real outputs are in
 * tests/cli/test_hap_report.sh. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

/* The page of `json` (kind k) or NULL with the error in *err; *st gets the status. */
static char *page(const char *json, hap_report_kind k, hap_err *err, hap_status *st) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  *st = hap_report_render_json(json, strlen(json), "t.json", k, f, err);
  cr_assert_eq(fclose(f), 0);
  if (*st != HAP_OK) {
    cr_assert_eq(len, 0, "a refused input wrote %zu bytes", len);
    free(buf);
    return NULL;
  }
  return buf;
}

static char *page_ok(const char *json, hap_report_kind k) {
  hap_err err = {0};
  hap_status st;
  char *p = page(json, k, &err, &st);
  cr_assert_eq(st, HAP_OK, "%s", err.msg);
  return p;
}

static void refused(const char *json, hap_report_kind k, const char *msg) {
  hap_err err = {0};
  hap_status st;
  cr_assert_null(page(json, k, &err, &st));
  cr_assert_neq(st, HAP_OK);
  cr_assert_str_eq(err.msg, msg);
}

static int occurrences(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what))
    n++;
  return n;
}

#define ROW(pt, s, t)                                                                              \
  "{\"point\": \"" pt "\", \"strategy\": \"" s "\", \"devices\": 8, \"ok\": true, "                \
  "\"iteration_s\": " t "}"

static const char sweep[] = "{\"model\": \"m<&>\", \"cluster\": \"c\", \"rows\": [" ROW(
    "gpus_per_host=1", "hap", "0.5") "," ROW("gpus_per_host=1", "dp-ev",
                                             "0.7") "," ROW("gpus_per_host=8", "hap",
                                                            "0.4") "," ROW("gpus_per_host=8",
                                                                           "dp-ev", "0.6") "]}";

Test(report, kinds_by_name) {
  for (int k = 0; k < HAP_REPORT_KIND_COUNT; k++) {
    hap_report_kind back;
    cr_assert_eq(hap_report_kind_parse(hap_report_kind_name((hap_report_kind)k), &back), HAP_OK);
    cr_assert_eq(back, k);
  }
  hap_report_kind back;
  cr_assert_eq(hap_report_kind_parse("chart", &back), HAP_EINVAL);
}

Test(report, sweep_lines_and_log2_axis) {
  char *p = page_ok(sweep, HAP_REPORT_AUTO);
  cr_assert(strncmp(p, "<!DOCTYPE html>", 15) == 0);
  cr_assert_eq(occurrences(p, "<polyline class=\"series\""), 2, "one line per strategy");
  cr_assert_eq(occurrences(p, "<circle class=\"point\""), 4);
  /* powers of two spanning 8x: a log2 axis with ticks 1, 2, 4, 8 */
  cr_assert(strstr(p, ">4</text>") != NULL && strstr(p, ">2</text>") != NULL);
  cr_assert(strstr(p, ">gpus_per_host</text>") != NULL);
  /* the model's name escaped in the title */
  cr_assert(strstr(p, "<title>hap-sim sweep: m&lt;&amp;&gt; on c</title>") != NULL);
  cr_assert(strstr(p, "m<&>") == NULL);
  free(p);
}

Test(report, sweep_category_axis) {
  const char json[] = "{\"model\": \"m\", \"cluster\": \"c\", \"rows\": [" ROW(
      "device[P100]=V100", "hap", "0.5") "," ROW("device[P100]=H100", "hap", "0.3") "]}";
  char *p = page_ok(json, HAP_REPORT_SWEEP);
  cr_assert(strstr(p, ">device[P100]=H100</text>") != NULL);
  cr_assert_eq(occurrences(p, "<polyline class=\"series\""), 1);
  free(p);
}

Test(report, plan_bars) {
  const char json[] =
      "{\"format\": \"hap-plan\", \"version\": \"1.0\", \"strategy\": \"hap\", "
      "\"graph\": {\"name\": \"mlp\", \"digest\": \"0\"}, "
      "\"cluster\": {\"name\": \"c\", \"digest\": \"0\", \"devices\": [\"a\", \"b\", \"c\"]}, "
      "\"segments\": [{\"ratios\": [0.5, 0.25, 0.25]}], "
      "\"steps\": [{\"kind\": \"source\", \"tensor\": \"x\", \"storage\": \"input\", \"to\": "
      "\"G0\", \"segment\": 0, \"predicted_s\": 0.0}, {\"kind\": \"compute\", \"node\": \"n\", "
      "\"variant\": \"v\", \"inputs\": [\"G0\"], \"outputs\": [\"G0\"], \"segment\": 0, "
      "\"predicted_s\": 0.001}], "
      "\"predicted\": {\"iteration_s\": 0.01, \"devices\": ["
      "{\"compute_s\": 0.004, \"comm_s\": 0.001, \"memory_bytes\": 1048576.0},"
      "{\"compute_s\": 0.004, \"comm_s\": 0.001, \"memory_bytes\": 524288.0},"
      "{\"compute_s\": 0.004, \"comm_s\": 0.001, \"memory_bytes\": 524288.0}]}}";
  char *p = page_ok(json, HAP_REPORT_AUTO);
  cr_assert_eq(occurrences(p, "class=\"bar ratio"), 3);
  cr_assert_eq(occurrences(p, "class=\"bar memory"), 3);
  cr_assert_eq(occurrences(p, "class=\"bar compute"), 3);
  cr_assert(strstr(p, "G0 -&gt; G0") != NULL);
  free(p);
}

Test(report, run_lanes) {
  const char json[] =
      "{\"traceEvents\": ["
      "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"args\": {\"name\": \"sim | rank 0 "
      "| dev0\"}},"
      "{\"ph\": \"X\", \"name\": \"a.fwd\", \"cat\": \"compute\", \"pid\": 1, \"tid\": 1, \"ts\": "
      "0.0, \"dur\": 10.0},"
      "{\"ph\": \"X\", \"name\": \"a.fwd\", \"cat\": \"compute\", \"pid\": 2, \"tid\": 1, \"ts\": "
      "0.0, \"dur\": 12.0, \"args\": {\"sim_dur_us\": 10.0, \"err_pct\": 20.0}},"
      "{\"ph\": \"X\", \"name\": \"g.all_reduce\", \"cat\": \"collective\", \"pid\": 4, \"tid\": "
      "2, \"ts\": 10.0, \"dur\": 5.0, \"args\": {\"sim_dur_us\": 4.0, \"err_pct\": 25.0}},"
      "{\"ph\": \"C\", \"name\": \"memory\", \"pid\": 2, \"ts\": 0.0, \"args\": {}}], "
      "\"otherData\": {\"format\": \"hap-trace\", \"version\": \"1.0\", \"tool\": \"hap-run\"}}";
  char *p = page_ok(json, HAP_REPORT_AUTO);
  cr_assert_eq(occurrences(p, "<rect class=\"task"), 3);
  cr_assert(strstr(p, ">rank 0 measured</text>") != NULL);
  cr_assert(strstr(p, ">rank 1 measured</text>") != NULL);
  cr_assert(strstr(p, ">rank 1 simulated</text>") == NULL, "no lane without tasks");
  cr_assert(strstr(p, "<td class=\"l\">dev0</td>") != NULL);
  cr_assert_eq(occurrences(p, "class=\"bin"), 2, "a bin per measured task here");
  free(p);
}

Test(report, profile_fits) {
  const char json[] =
      "{\"name\": \"p.h5\", \"hosts\": [], \"devices\": [], \"collective_fits\": [], "
      "\"sweeps\": {\"gemm\": [{\"device\": \"d0\", \"samples\": [{\"m\": 64, \"n\": 64, \"k\": "
      "64, \"dtype\": \"float32\", \"seconds\": 0.001, \"flops_per_s\": 5e8}]}], "
      "\"p2p\": [{\"src\": \"d0\", \"dst\": \"d1\", \"sizes_bytes\": [8, 4096, 1048576], "
      "\"p50_s\": [1e-6, 2e-6, 1e-4], \"pieces\": [{\"below_bytes\": 4096, \"alpha_s\": 1e-6, "
      "\"beta_Bps\": 1e9}, {\"alpha_s\": 1e-6, \"beta_Bps\": 1e10}]}], \"collectives\": []}}";
  char *p = page_ok(json, HAP_REPORT_AUTO);
  /* the p2p sweep: its measured line and one dashed line per piece */
  cr_assert_eq(occurrences(p, "<polyline class=\"series\""), 3);
  cr_assert_eq(occurrences(p, "stroke-dasharray=\"6 4\" points"), 2);
  cr_assert(strstr(p, "below 4 KiB") != NULL && strstr(p, "from 4 KiB") != NULL);
  free(p);
}

Test(report, refusals_are_one_line) {
  refused("", HAP_REPORT_AUTO,
          "t.json: the file is empty, expected a hap-sim sweep (hap-sim -f json), a hap-plan, a "
          "hap-trace (hap-run --trace) or a profile (hap-profile show -f json PROFILE.h5)");
  refused("{\"rows\": [", HAP_REPORT_SWEEP,
          "t.json: line 1, column 10: ']' expected near end of file (expected a hap-sim "
          "sweep (hap-sim -f json))");
  refused("{\"format\": \"hap-graph\"}", HAP_REPORT_AUTO,
          "t.json: format: is \"hap-graph\", expected a hap-sim sweep (hap-sim -f json), a "
          "hap-plan, a hap-trace (hap-run --trace) or a profile (hap-profile show -f json "
          "PROFILE.h5)");
  refused(sweep, HAP_REPORT_PROFILE,
          "t.json: root: looks like a hap-sim sweep (hap-sim -f json), expected a profile "
          "(hap-profile show -f json PROFILE.h5)");
  refused("{\"model\": \"m\", \"cluster\": \"c\", \"rows\": [{\"point\": \"\", \"strategy\": "
          "\"hap\", \"ok\": true, \"iteration_s\": \"1\"}]}",
          HAP_REPORT_AUTO,
          "t.json: rows[0].iteration_s: expected an iteration time in s > 0 (a number), got a "
          "string");
  refused("{\"model\": \"m\", \"cluster\": \"c\", \"rows\": []}", HAP_REPORT_AUTO,
          "t.json: rows: is empty, expected at least one row");
  refused("{\"traceEvents\": [{\"ph\": \"M\", \"name\": \"x\"}]}", HAP_REPORT_RUN,
          "t.json: traceEvents: has no complete (\"ph\": \"X\") events, expected the tasks of an "
          "iteration");
}
