/* clock.h — the one clock every measurement in exec/ and profile/ reads: CLOCK_MONOTONIC in
 * seconds, and waiting until a point on it. Nothing here allocates or keeps state. */
#ifndef HAP_CLOCK_H
#define HAP_CLOCK_H

/* Seconds on the monotonic clock (arbitrary origin), ns resolution. */
double hap_clock_s(void);

/* Return at hap_clock_s() >= deadline_s, spinning (returns at once if it passed): a padded
 * kernel (--emulate-speed) ends within about a microsecond of its deadline and keeps its core
 * busy, as a slower device's kernel would. A sleep to the deadline woke 0.13-0.23 ms late at the
 * median on dev-2c's VM, and up to 2 ms (quiet host) or 13 ms (busy) at the 99th percentile
 * (tests/bench/bench_wait). */
void hap_clock_wait_until(double deadline_s);

#endif
