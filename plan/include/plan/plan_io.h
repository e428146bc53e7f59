/* plan_io.h — read and write hap-plan JSON files (format "hap-plan", version "1.0"): a plan with
 * steps that name the graph's nodes and tensors and the cluster's devices, the per-segment ratios
 * and the integer shard lengths they imply, and the predictions. The schema and the property-flow
 * rules are in docs/formats.md. Reading resolves names against the graph and cluster it is given,
 * refuses a plan made for another graph or cluster (naming both digests), matches every compute
 * step's layouts against the op's variants, checks the lengths against the ratios and runs
 * hap_plan_validate; errors are one line naming the file, the JSON path and what was expected; a
 * newer major version is refused (HAP_EVERSION). Writing validates first, is canonical (same plan,
 * same bytes; one step per line) and atomic.
 * Ownership: a plan returned through `out` belongs to the caller (hap_plan_destroy); the graph
 * and cluster are borrowed. */
#ifndef HAP_PLAN_IO_H
#define HAP_PLAN_IO_H

#include <stddef.h>
#include <stdio.h>

#include "cluster/cluster.h"
#include "model/graph.h"
#include "plan/plan.h"

#define HAP_PLAN_FORMAT        "hap-plan"
#define HAP_PLAN_VERSION_MAJOR 1
#define HAP_PLAN_VERSION_MINOR 0
/* A pipelined plan (plan/pipeline_io.h) is a hap-plan of this major. */
#define HAP_PIPELINE_VERSION_MAJOR 2
#define HAP_PIPELINE_VERSION_MINOR 0

/* Write `p` (it must pass hap_plan_validate against g and c) as JSON to `f`. */
hap_status hap_plan_write(const hap_plan *p, const hap_graph *g, const hap_cluster *c, FILE *f,
                          hap_err *err);
/* Atomic write to `path` ("-" = stdout). */
hap_status hap_plan_write_file(const hap_plan *p, const hap_graph *g, const hap_cluster *c,
                               const char *path, hap_err *err);

/* Parse `json` (`len` bytes) for the validated graph `g` and cluster `c` into a validated plan.
 * `label` names the source in messages (a path). */
hap_status hap_plan_from_json(const char *json, size_t len, const char *label, const hap_graph *g,
                              const hap_cluster *c, hap_plan **out, hap_err *err);
hap_status hap_plan_read_file(const char *path, const hap_graph *g, const hap_cluster *c,
                              hap_plan **out, hap_err *err);

/* The model and cluster specs a plan file (any version) records ("graph.spec", "cluster.spec"),
 * without reading the rest: *out's strings, NULL where absent. A file that is not a hap-plan, or
 * a spec that is not a non-empty string, is one error naming the file and the JSON path. */
hap_status hap_plan_file_specs(const char *path, hap_plan_specs *out, hap_err *err);

/* A tool's model and cluster defaulting to the ones the plan file records: each of *model and
 * *cluster that is NULL becomes the recorded spec, owned by *specs (free it with
 * hap_plan_specs_free once they are no longer used; zeroed when nothing was read). A needed spec
 * the plan does not record is one error: "PATH: the plan does not record its model (made by an
 * older hap-synth, or edited): give HINT", HINT being model_hint or cluster_hint (the tool's own
 * option, e.g. "--model"). */
hap_status hap_plan_default_specs(const char *path, const char **model, const char **cluster,
                                  const char *model_hint, const char *cluster_hint,
                                  hap_plan_specs *specs, hap_err *err);

#endif
