/* graph_io.h — read and write hap-graph JSON files (format "hap-graph", version "1.0").
 * The schema is documented in docs/formats.md. Reading validates the graph; errors name the file,
 * the JSON path (e.g. `nodes[17].inputs[1]`) and what was expected; a file with a newer major
 * version is refused. Writing is canonical (same graph, same bytes) and atomic.
 * Ownership: a graph returned through `out` is owned by the caller (hap_graph_destroy). */
#ifndef HAP_GRAPH_IO_H
#define HAP_GRAPH_IO_H

#include <stdio.h>

#include "model/graph.h"

#define HAP_GRAPH_FORMAT        "hap-graph"
#define HAP_GRAPH_VERSION_MAJOR 1
#define HAP_GRAPH_VERSION_MINOR 0

/* Parse and validate `json` (NUL-terminated). `label` names the source in messages (a path). */
hap_status hap_graph_from_json(const char *json, size_t len, const char *label, hap_graph **out,
                               hap_err *err);
hap_status hap_graph_read_file(const char *path, hap_graph **out, hap_err *err);

/* Write `g` (validated) as JSON to `f`. */
hap_status hap_graph_write(const hap_graph *g, FILE *f, hap_err *err);
/* Atomic write to `path` ("-" = stdout). */
hap_status hap_graph_write_file(const hap_graph *g, const char *path, hap_err *err);

/* The digest of the graph's canonical file form: 64-bit FNV-1a (base/hash.h) of what
 * hap_graph_write writes, without "source" (how a graph was made is not what it is). The same
 * graph always gives the same digest, any change to a name, tensor, node or attribute another
 * one. Plans record it (plan.h). */
hap_status hap_graph_digest(const hap_graph *g, uint64_t *out, hap_err *err);

#endif
