/* clock.h — the one clock every measurement in exec/ and profile/ reads: CLOCK_MONOTONIC in
 * seconds, and waiting until a point on it. Nothing here allocates or keeps state. */
#ifndef HAP_CLOCK_H
#define HAP_CLOCK_H

/* Seconds on the monotonic clock (arbitrary origin), ns resolution. */
double hap_clock_s(void);

/* Return at hap_clock_s() >= deadline_s, spinning (returns at once if it passed): a padded
 * kernel (--emulate-speed) ends within about a microsecond of its deadline and keeps its core
 * busy, as a slower device's kernel would. A sleep overshot on dev-2c's VM by 0.1 ms at the
 * median and 1-13 ms at the 99th percentile (clock_nanosleep to a deadline, 0.2-10 ms). */
void hap_clock_wait_until(double deadline_s);

#endif
