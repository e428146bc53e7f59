/* export.h — a simulated plan written as Chakra execution traces (docs/chakra.md): one
 * `<dir>/<prefix>.<rank>.et` per device, one Node per lowered task (plan/lower.h) with the task's
 * id, name, dependencies and simulated start and duration; compute, local and update tasks are
 * COMP_NODEs with their FLOPs and bytes, collectives COMM_COLL_NODEs with their type, this
 * device's bytes and their process group (its ranks in ring order, the implementation and the NIC
 * sharing the simulator priced them with), so that hap_chakra_replay on the same cluster
 * reproduces the iteration. Data dependencies are the lowering's; each node's control dependency
 * is the task before it on the same stream (compute or communication), the order the simulator
 * and the executor keep. */
#ifndef HAP_CHAKRA_EXPORT_H
#define HAP_CHAKRA_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simulate/plan_sim.h"

/* Write every device's trace of `ps` (a flat plan's simulation). `dir` is created when missing
 * (one level); each file is written atomically, and rank files of the same prefix beyond this
 * plan's devices (from an earlier export) are removed. *nodes (may be NULL) gets the nodes
 * written over all files. Errors name the file. */
hap_status hap_chakra_export(const hap_plan_sim *ps, const char *dir, const char *prefix,
                             int64_t *nodes, hap_err *err);

/* "<dir>/<prefix>.<rank>.et" into buf; false when it does not fit. */
bool hap_chakra_path(const char *dir, const char *prefix, int32_t rank, char *buf, size_t len);

#endif
