/* bench_wait.c — the host's timing primitives that hap-run leans on between and after kernels:
 *  - how late clock_nanosleep wakes when asked to sleep to a deadline (why --emulate-speed's
 *    padding spins: exec/clock.h), for sleeps of 0.2 to 10 ms, against hap_clock_wait_until;
 *  - what re-arming the watchdog costs per task (harness/watchdog.h, armed by hap-run before each
 *    task), against one alarm() system call per arm, the way it was armed before.
 * Usage: bench_wait [REPS] (default 300 per sleep length). Prints overshoot percentiles in us and
 * the cost per arm in ns. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "exec/clock.h"
#include "harness/watchdog.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void sleep_until(double deadline_s) {
  struct timespec ts = {(time_t)deadline_s,
                        (long)((deadline_s - (double)(time_t)deadline_s) * 1e9)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
}

/* Overshoot percentiles of `reps` waits of `len_s` each, us. */
static void overshoot(const char *how, void (*wait)(double), double len_s, double *o, int reps) {
  for (int i = 0; i < reps; i++) {
    double deadline = hap_clock_s() + len_s;
    wait(deadline);
    o[i] = hap_clock_s() - deadline;
  }
  qsort(o, (size_t)reps, sizeof *o, cmp);
  printf("%-22s %6.1f ms  p50 %8.1f  p90 %8.1f  p99 %8.1f  max %8.1f us\n", how, len_s * 1e3,
         o[reps / 2] * 1e6, o[reps * 9 / 10] * 1e6, o[reps * 99 / 100] * 1e6, o[reps - 1] * 1e6);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 300;
  if (reps < 10 || reps > 100000) {
    fprintf(stderr, "usage: bench_wait [REPS] (10..100000, default 300)\n");
    return 2;
  }
  double *o = malloc((size_t)reps * sizeof *o);
  if (o == NULL) {
    fprintf(stderr, "bench_wait: out of memory\n");
    return 1;
  }
  printf("overshoot of a wait to a deadline (us late):\n");
  const double lens[] = {0.2e-3, 0.5e-3, 1e-3, 3e-3, 10e-3};
  for (int k = 0; k < 5; k++)
    overshoot("clock_nanosleep", sleep_until, lens[k], o, reps);
  for (int k = 0; k < 5; k++)
    overshoot("hap_clock_wait_until", hap_clock_wait_until, lens[k], o, reps);

  const int arms = 200000;
  hap_watchdog_text text = {.timeout = "bench_wait: watchdog fired", .stopped = "stopped"};
  if (hap_watchdog_install("bench_wait", -1, 120, &text, NULL) != HAP_OK) {
    fprintf(stderr, "bench_wait: cannot install the watchdog\n");
    free(o);
    return 1;
  }
  double t0 = hap_clock_s();
  for (int i = 0; i < arms; i++)
    alarm(120);
  double t1 = hap_clock_s();
  for (int i = 0; i < arms; i++)
    hap_watchdog_arm();
  double t2 = hap_clock_s();
  hap_watchdog_disarm();
  printf("re-arming a 120 s watchdog (ns per arm, %d arms):\n", arms);
  printf("  alarm() per arm        %8.1f\n", (t1 - t0) / arms * 1e9);
  printf("  hap_watchdog_arm       %8.1f\n", (t2 - t1) / arms * 1e9);
  free(o);
  return 0;
}
