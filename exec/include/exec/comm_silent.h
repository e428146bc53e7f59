/* comm_silent.h — a communicator whose data calls cross no rank: for timing one rank's compute in
 * the order a plan runs it, without peers (hap-profile --plan's replay).
 *
 * Semantics: no data crosses ranks. Every data call writes what the real call writes, from this
 * rank's own data: all-reduce copies send to recv; the gathers and all-to-alls fill every rank's
 * block of recv with (the start of) what this rank sends; the reduce-scatters copy this rank's
 * block of send to recv; broadcast leaves buf as it is. So values stay finite and the caches see
 * the writes the real call would make. send and recv are refused (HAP_EUNSUPPORTED).
 * With `sync`, every collective call and barrier first waits at a barrier of the backing
 * communicator, so ranks meet where the real collectives would make them meet (and memory-bound
 * work between two collectives overlaps across ranks as it does for real); without it, barrier
 * returns at once and no call waits.
 * rank and size are the backing communicator's; split is collective over the backing communicator
 * (every rank must call it, as with any split) and returns a silent communicator over the part,
 * with the same `sync`; abort aborts the backing communicator.
 * Ownership: the silent world borrows `backing`, which must outlive it; a split result owns its
 * backing part. Free with hap_comm_destroy. */
#ifndef HAP_COMM_SILENT_H
#define HAP_COMM_SILENT_H

#include <stdbool.h>

#include "exec/comm.h"

hap_status hap_comm_silent_create(hap_comm *backing, bool sync, hap_comm **out, hap_err *err);

#endif
