/* clock.h — the one clock every measurement in exec/ and profile/ reads: CLOCK_MONOTONIC in
 * seconds, and waiting until a point on it. Nothing here allocates or keeps state. */
#ifndef HAP_CLOCK_H
#define HAP_CLOCK_H

/* Seconds on the monotonic clock (arbitrary origin), ns resolution. */
double hap_clock_s(void);

/* Return at hap_clock_s() >= deadline_s: sleeps for all but the last 200 us, then spins, so a
 * padded kernel ends within about a microsecond of its deadline. Returns at once if it passed. */
void hap_clock_wait_until(double deadline_s);

#endif
