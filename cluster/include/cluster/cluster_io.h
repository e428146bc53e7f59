/* cluster_io.h — hap-cluster JSON files (format "hap-cluster", version "1.0"): hypothetical
 * clusters of host groups with device presets or explicit devices, link defaults, per-pair link
 * overrides and collective fits; cluster specs ("paper-hetero:gpus_per_host=4") naming a bundled
 * cluster (datasets/clusters/NAME.json) or a file, with parameters every cluster accepts.
 * The schema is documented in docs/clusters.md. Errors are one line naming the file, the JSON path
 * and what was expected; a newer major version is refused. Writing gives the fully explicit form
 * (no presets, every value spelled out) that reads back identically.
 * Ownership: a cluster returned through `out` belongs to the caller (hap_cluster_destroy). */
#ifndef HAP_CLUSTER_IO_H
#define HAP_CLUSTER_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/json_write.h"
#include "base/status.h"
#include "cluster/cluster.h"

#define HAP_CLUSTER_FORMAT        "hap-cluster"
#define HAP_CLUSTER_VERSION_MAJOR 1
#define HAP_CLUSTER_VERSION_MINOR 1 /* 1.1: collective fits' points */

#define HAP_CLUSTER_MAX_DEVICES 65536 /* per cluster: bounds what a small file can allocate */

/* A spec parameter every cluster accepts ("gpus_per_host", ...), for --help texts. */
typedef struct hap_cluster_param_def {
  const char *name;
  const char *doc;
} hap_cluster_param_def;

int hap_cluster_param_count(void);
const hap_cluster_param_def *hap_cluster_param_get(int i); /* NULL when out of range */

/* Parse `json` (NUL-terminated, `len` bytes) into a validated cluster. `label` names the source in
 * messages (a path); `params` is "key=value,..." (the part of a spec after ':') or NULL. */
hap_status hap_cluster_from_json(const char *json, size_t len, const char *label,
                                 const char *params, hap_cluster **out, hap_err *err);
hap_status hap_cluster_read_file(const char *path, const char *params, hap_cluster **out,
                                 hap_err *err);

/* A spec: "NAME[:key=value,...]" where NAME is a bundled cluster or a hap-cluster file (anything
 * containing '/' or ending in ".json", or an existing file). Bundled clusters are looked up in
 * $HAP_DATASETS/clusters, then <executable dir>/../share/hap/datasets/clusters, then the source
 * tree's datasets/clusters (compiled in as HAP_DATASETS_DIR). The cluster's source is the spec. */
hap_status hap_cluster_load(const char *spec, hap_cluster **out, hap_err *err);

/* The bundled cluster names, sorted, as "a, b, c" into buf (from the first directory above that
 * exists); HAP_ENOTFOUND when no datasets directory is found. */
hap_status hap_cluster_bundled_names(char *buf, size_t len, hap_err *err);

/* Write `c` (it must pass hap_cluster_validate) in explicit form: one host per entry, every device
 * with all of its values, link overrides sorted by (src, dst), fits in their order. Same cluster,
 * same bytes. */
hap_status hap_cluster_write(const hap_cluster *c, FILE *f, hap_err *err);
/* `"key": {"bandwidth_Bps": B, "latency_s": L}` on one line, as hap-cluster files hold links. */
void hap_cluster_write_link(hap_jw *w, const char *key, hap_link l);
/* Atomic write to `path` ("-" = stdout). */
hap_status hap_cluster_write_file(const hap_cluster *c, const char *path, hap_err *err);

/* The digest of the cluster's canonical file form: 64-bit FNV-1a (base/hash.h) of what
 * hap_cluster_write writes, without "source" and "name" (how a cluster was made or where it was
 * read from is not what it is: "cpu-2" and the path of cpu-2.json give one digest, and so do a
 * profile and a byte-identical copy of it under another path). The same cluster always gives the
 * same digest, any change to a device (its name too), host, link or fit another one. Plans record
 * it (plan.h). */
hap_status hap_cluster_digest(const hap_cluster *c, uint64_t *out, hap_err *err);

#endif
