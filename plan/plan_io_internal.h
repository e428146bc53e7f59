/* plan_io_internal.h — the hap-plan reader and writer on a JSON object already parsed or being
 * written, for files that hold plans inside them (pipeline_io.c: one plan per stage). */
#ifndef HAP_PLAN_IO_INTERNAL_H
#define HAP_PLAN_IO_INTERNAL_H

#include <jansson.h>

#include "base/json_read.h"
#include "base/json_write.h"
#include "plan/plan_io.h"

/* hap_plan_from_json on the parsed object `root` (borrowed); `label` starts every message. */
hap_status hap_plan_from_object(const json_t *root, const char *label, const hap_graph *g,
                                const hap_cluster *c, hap_plan **out, hap_err *err);
/* hap_plan_write's object, written as the next value of `w` (after a key or in an array). */
hap_status hap_plan_write_object(hap_jw *w, const hap_plan *p, const hap_graph *g,
                                 const hap_cluster *c, hap_err *err);
/* What the header of a plan file names: the strategy, the graph and the cluster. Strings belong
 * to the JSON document. */
typedef struct hap_plan_refs {
  const char *strategy, *graph_name, *cluster_name;
  uint64_t graph_digest, cluster_digest;
  const char *model_spec, *cluster_spec; /* "graph.spec", "cluster.spec"; NULL when absent */
} hap_plan_refs;

/* Read "strategy", "graph" and "cluster" (with "devices") of `root` and check them against `g` and
 * `c` (names, digests, device names in order), with the file's error conventions. */
hap_status hap_plan_read_refs(hap_jr *jr, const json_t *root, const hap_graph *g,
                              const hap_cluster *c, hap_plan_refs *out);
/* Write "format", "version" (MAJOR.MINOR), "strategy", "graph" and "cluster" (with "devices",
 * and each with "spec" where `specs` records it) as the next keys of the object `w` is in. */
void hap_plan_write_refs(hap_jw *w, int major, int minor, const char *strategy,
                         uint64_t graph_digest, uint64_t cluster_digest,
                         const hap_plan_specs *specs, const hap_graph *g, const hap_cluster *c);
/* The major of `root`'s "version" ("MAJOR.MINOR"), or 0 when it has none that reads. */
int hap_plan_version_major(const json_t *root);

#endif
