/* pipeline_io.h — pipelined plans in hap-plan files (docs/formats.md). A one-stage pipeline of
 * every device is written as an ordinary plan (format 1.x, plan_io.h), byte for byte what
 * hap_plan_write writes; any other pipeline as format 2.0: the header of a plan ("format",
 * "version", "strategy", "graph", "cluster"), then
 *   "pipeline"   {"schedule": "gpipe" | "1f1b" | "interleaved", "chunks": v,
 *                 "groups": [[device ids], ...]}  (ids of the cluster, increasing in a group)
 *   "stages"     [{"nodes": [first, end], "group": g, "plan": {a complete hap-plan 1.0 object
 *                 for the stage graph on the group's cluster, pipeline.h}}, ...] in model order
 *   "predicted"  {"iteration_s": s}
 * Reading accepts both: a 1.x file is the one-stage pipeline of its plan. Errors are one line
 * naming the file and the JSON path; a stage plan's own errors read
 * "<file>: stages[K].plan: <path>: ...". hap_plan_read_file refuses a 2.x file with a line that
 * says it is a pipelined plan.
 * Ownership: a pipeline returned through `out` belongs to the caller (hap_pipeline_destroy). */
#ifndef HAP_PLAN_PIPELINE_IO_H
#define HAP_PLAN_PIPELINE_IO_H

#include <stddef.h>
#include <stdio.h>

#include "plan/pipeline.h"
#include "plan/plan_io.h"

/* Write `pl` (it must pass hap_pipeline_validate against g and c) to `f`. */
hap_status hap_pipeline_write(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                              FILE *f, hap_err *err);
/* Atomic write to `path` ("-" = stdout). */
hap_status hap_pipeline_write_file(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c,
                                   const char *path, hap_err *err);

/* Parse a hap-plan of format 1.x or 2.x for the validated `g` and `c` into a validated pipeline.
 * `label` names the source in messages. */
hap_status hap_pipeline_from_json(const char *json, size_t len, const char *label,
                                  const hap_graph *g, const hap_cluster *c, hap_pipeline **out,
                                  hap_err *err);
hap_status hap_pipeline_read_file(const char *path, const hap_graph *g, const hap_cluster *c,
                                  hap_pipeline **out, hap_err *err);

#endif
