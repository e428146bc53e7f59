/* watchdog.h — the watchdog of a tool that runs one MPI rank per device, and its fatal-signal
 * handler; async-signal-safe.
 *
 * A rank blocked in a collective whose peer died never returns. The watchdog (SIGALRM: armed for
 * the timeout, re-armed at every step) and SIGTERM/SIGINT (how mpirun stops the other ranks when
 * one fails) print one line "prog: rank N: TEXT" in one write(), remove the tool's temporary file
 * if one is registered, and _exit(1). TEXT is the tool's own template, with {phase} (what the
 * rank was doing), {timeout} (whole seconds) and {signal} ("SIGTERM", "SIGINT") replaced.
 *
 * One watchdog per process; set it up from the main thread. */
#ifndef HAP_HARNESS_WATCHDOG_H
#define HAP_HARNESS_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct hap_watchdog_text {
  const char *timeout; /* SIGALRM, e.g. "no step finished for {timeout} s during {phase}" */
  const char *stopped; /* SIGTERM, SIGINT, e.g. "stopped by {signal} during {phase}" */
} hap_watchdog_text;

/* Longest path hap_watchdog_unlink_on_exit keeps, bytes with the NUL. */
#define HAP_WATCHDOG_PATH_MAX 4200

/* Install the handlers of SIGALRM, SIGTERM and SIGINT (not armed yet). prog, rank (< 0: no
 * "rank N: ") and the templates (each < 256 bytes) are copied; timeout_s in [0, 1e6] is rounded
 * up to whole seconds. HAP_EINVAL otherwise. */
hap_status hap_watchdog_install(const char *prog, int32_t rank, double timeout_s,
                                const hap_watchdog_text *text, hap_err *err);

/* Start the countdown again: the timeout line comes when no arm happened for the timeout (at
 * most a second later; a timeout of 0 never comes). Cheap enough to call per task: a clock read,
 * with alarm() only when none is set (the handler sets it again for the time left). Disarm: stop
 * the countdown. */
void hap_watchdog_arm(void);
void hap_watchdog_disarm(void);

/* From now on SIGTERM and SIGINT end the rank without a line (the job's failure was said already,
 * e.g. by the lowest failing rank of a set-up every rank agreed failed; mpirun then stops the
 * ranks still cleaning up). The timeout still speaks. */
void hap_watchdog_quiet(void);

/* {phase} from now on: a copy of `phase` (at most 159 bytes kept). */
void hap_watchdog_set_phase(const char *phase);

/* {phase} from now on: fn(ctx), called inside the handler, so fn must be async-signal-safe (read
 * memory, no locks, no allocation) and return a NUL-terminated string. */
typedef const char *(*hap_watchdog_phase_fn)(const void *ctx);
void hap_watchdog_set_phase_fn(hap_watchdog_phase_fn fn, const void *ctx);

/* The handler removes `path` before exiting (NULL or "": nothing). HAP_EINVAL when the path
 * does not fit HAP_WATCHDOG_PATH_MAX (nothing registered then). */
hap_status hap_watchdog_unlink_on_exit(const char *path, hap_err *err);

/* The line the handler would write now for `sig` (SIGALRM: the timeout text, else the stopped
 * one), NUL-terminated and ending in '\n' (cut to fit `len`, the newline kept). Returns its length
 * without the NUL. Async-signal-safe. */
size_t hap_watchdog_message(int sig, char *buf, size_t len);

#endif
