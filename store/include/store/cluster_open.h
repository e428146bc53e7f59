/* cluster_open.h — the one way tools take a --cluster argument: a cluster spec
 * ("paper-hetero:gpus_per_host=4", a hap-cluster JSON file) or a hap-profile HDF5 file (one
 * measured on real machines). Ownership: the cluster returned through `out` belongs to the caller.
 */
#ifndef HAP_CLUSTER_OPEN_H
#define HAP_CLUSTER_OPEN_H

#include <stdbool.h>

#include "base/status.h"
#include "cluster/cluster.h"

/* True when `path` names an HDF5 file (by its signature, or a .h5/.hdf5 name when unreadable). */
bool hap_is_hdf5_path(const char *path);

/* Load a spec or a profile into the cluster model (validated). */
hap_status hap_cluster_open(const char *spec_or_profile, hap_cluster **out, hap_err *err);

#endif
