/* chakra_report.h — hap-sim's Chakra execution traces (chakra/, docs/chakra.md): --chakra DIR
 * writes a simulated plan's traces, --chakra-in DIR simulates a set of traces on a cluster and
 * prints the iteration (a table, or JSON). */
#ifndef HAP_CHAKRA_REPORT_H
#define HAP_CHAKRA_REPORT_H

#include <stdbool.h>

#include "harness/format.h"
#include "simulate/plan_sim.h"

#define HAP_CHAKRA_DEFAULT_PREFIX "hap"

/* --chakra: write ps's traces to dir as <prefix>.<rank>.et, or <prefix>.<label>.<rank>.et when
 * `label` (a row of several: point and strategy) is not NULL; a note on stderr unless quiet. */
hap_status hap_chakra_report_export(const char *prog, const hap_plan_sim *ps, const char *dir,
                                    const char *prefix, const char *label, bool quiet,
                                    hap_err *err);

/* --chakra-in: load dir's <prefix>.<rank>.et traces, simulate them on `cluster` (a spec, file or
 * profile; NULL: the cluster the traces record) and print the result. Returns the exit status:
 * 0, or 1 after one line on stderr. */
int hap_chakra_report_replay(const char *prog, const char *dir, const char *prefix,
                             const char *cluster, hap_format format);

#endif
