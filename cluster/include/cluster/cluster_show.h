/* cluster_show.h — a cluster printed for `hap-profile show`: a table of hosts and links, devices
 * (identical devices as one row) and collective fits, or the same as JSON. Units in the table:
 * GB/s, us, TFLOP/s (a device's launch overhead in ns, us or ms, whichever shows it); in JSON:
 * bytes/s, s, FLOP/s. */
#ifndef HAP_CLUSTER_SHOW_H
#define HAP_CLUSTER_SHOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/json_write.h"
#include "cluster/cluster.h"

/* "cluster NAME (SOURCE): ..." and the tables; `what` names the source when c has none. */
void hap_cluster_show_table(FILE *f, const hap_cluster *c, const char *what);
/* The JSON view; false when writing failed. */
bool hap_cluster_show_json(FILE *f, const hap_cluster *c);
/* The same, with `more` (when not NULL) writing further keys of the root object before it closes
 * (hap-profile show: a profile's sweeps). */
bool hap_cluster_show_json_more(FILE *f, const hap_cluster *c,
                                void (*more)(hap_jw *w, const void *arg), const void *arg);
/* Piece k of a piecewise fit as a size range: "< 4 KiB", "4 KiB..64 KiB", ">= 64 KiB" or "all". */
void hap_fit_piece_range(const hap_ab_fit *f, int32_t k, char *buf, size_t len);

#endif
