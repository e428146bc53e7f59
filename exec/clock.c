/* clock.c — monotonic seconds and waiting until a deadline (clock.h). */
#include "exec/clock.h"

#include <errno.h>
#include <time.h>

double hap_clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Below this much time left, spin instead of sleeping: a sleep can overshoot by the timer slack. */
#define SPIN_S 200e-6

void hap_clock_wait_until(double deadline_s) {
  double left = deadline_s - hap_clock_s();
  if (left > SPIN_S) {
    double wake = deadline_s - SPIN_S;
    struct timespec ts;
    ts.tv_sec = (time_t)wake;
    ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
  }
  while (hap_clock_s() < deadline_s) {
  }
}
