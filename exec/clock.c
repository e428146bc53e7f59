/* clock.c — monotonic seconds and waiting until a deadline (clock.h). */
#include "exec/clock.h"

#include <time.h>

double hap_clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void hap_clock_wait_until(double deadline_s) {
  while (hap_clock_s() < deadline_s) {
  }
}
