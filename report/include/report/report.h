/* report.h — hap-report: one self-contained HTML page (inline SVG and CSS, no scripts, nothing
 * fetched) for each thing a user looks at, drawn from the tools' JSON outputs:
 *   sweep    hap-sim -f json: iteration time against the swept parameter, one line per strategy,
 *            the speedups over the baselines
 *   plan     a hap-plan file: per-device ratios, memory by component, predicted busy time, the
 *            program step by step (a pipelined plan, 2.x: its stages, then each stage so)
 *   run      a hap-trace file (hap-run --trace): simulated and measured Gantt lanes per rank, the
 *            task-error histogram, the largest differences
 *   profile  hap-profile show -f json of a .h5 profile: GEMM throughput against size, p2p and
 *            collective bandwidth against size with the fitted pieces
 * The page is XHTML-compatible (well-formed XML: xmllint --noout accepts it); every text taken
 * from the input is escaped. A malformed input is one line in err naming the file, the JSON path
 * and what was expected (base/json_read.h), and nothing is written: the page goes to a temporary
 * file renamed into place only when complete (base/fileio.h). */
#ifndef HAP_REPORT_H
#define HAP_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "base/status.h"

typedef enum hap_report_kind {
  HAP_REPORT_AUTO, /* from the document: "format", else its shape */
  HAP_REPORT_SWEEP,
  HAP_REPORT_PLAN,
  HAP_REPORT_RUN,
  HAP_REPORT_PROFILE,
  HAP_REPORT_KIND_COUNT
} hap_report_kind;

/* "auto", "sweep", "plan", "run", "profile". */
const char *hap_report_kind_name(hap_report_kind k);
/* The inverse; HAP_EINVAL for anything else. */
hap_status hap_report_kind_parse(const char *s, hap_report_kind *out);

/* Render the JSON document `json` (len bytes; `label` names it in messages and on the page) as a
 * report of `kind` to the stream `out` (the caller owns it). Nothing is written when the input
 * is refused; a failed write is HAP_EIO. */
hap_status hap_report_render_json(const char *json, size_t len, const char *label,
                                  hap_report_kind kind, FILE *out, hap_err *err);

/* The same, written atomically to the file `out_path` ("-" = stdout). */
hap_status hap_report_write_json(const char *json, size_t len, const char *label,
                                 hap_report_kind kind, const char *out_path, hap_err *err);

/* Read the file `in_path` ("-" = stdin) and write its report to `out_path`. */
hap_status hap_report_file(const char *in_path, hap_report_kind kind, const char *out_path,
                           hap_err *err);

#endif
