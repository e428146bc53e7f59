/* interrupt.h — Ctrl-C as a request, not a kill: a long search polls a flag and stops with the
 * best result so far. */
#ifndef HAP_HARNESS_INTERRUPT_H
#define HAP_HARNESS_INTERRUPT_H

#include <signal.h>

/* Install a SIGINT handler that sets the returned flag (0 until then) to 1. One-shot, as System V
 * signal(): the first SIGINT sets the flag and restores the default, so a second one ends the
 * process; no SA_RESTART. One flag per process. */
volatile sig_atomic_t *hap_interrupt_on_sigint(void);

#endif
