#include "harness/watchdog.h"

#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* State the handler reads: written before the handlers are installed, or (the phase) into the slot
 * the handler is not reading, then published by flipping `cur`. */
static char w_prefix[160];   /* "hap-profile: rank 3: " */
static char w_text[2][256];  /* [0] timeout, [1] stopped */
static unsigned w_timeout_s; /* whole seconds */
static char w_unlink[HAP_WATCHDOG_PATH_MAX];
static struct phase_slot {
  hap_watchdog_phase_fn fn; /* NULL: text */
  const void *ctx;
  char text[160];
} w_phase[2];
static volatile sig_atomic_t w_cur;

/* An output buffer that keeps its last byte for the newline. */
typedef struct line {
  char *buf;
  size_t len, cap;
} line;

static void put(line *l, const char *s) {
  while (s != NULL && *s != '\0' && l->len + 2 < l->cap)
    l->buf[l->len++] = *s++;
}

static void put_uint(line *l, unsigned v) {
  char num[24];
  int i = (int)sizeof num - 1;
  num[i] = '\0';
  do {
    num[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0 && i > 0);
  put(l, num + i);
}

/* Copy template t with its {names} replaced; an unknown {name} is copied as is. */
static void expand(line *l, const char *t, const char *phase, const char *signame) {
  while (*t != '\0' && l->len + 2 < l->cap) {
    if (strncmp(t, "{phase}", 7) == 0) {
      put(l, phase);
      t += 7;
    } else if (strncmp(t, "{timeout}", 9) == 0) {
      put_uint(l, w_timeout_s);
      t += 9;
    } else if (strncmp(t, "{signal}", 8) == 0) {
      put(l, signame);
      t += 8;
    } else {
      l->buf[l->len++] = *t++;
    }
  }
}

size_t hap_watchdog_message(int sig, char *buf, size_t len) {
  if (len < 2) {
    if (len == 1)
      buf[0] = '\0';
    return 0;
  }
  line l = {buf, 0, len};
  const struct phase_slot *p = &w_phase[w_cur];
  const char *phase = p->fn != NULL ? p->fn(p->ctx) : p->text;
  const char *signame = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
  put(&l, w_prefix);
  expand(&l, w_text[sig == SIGALRM ? 0 : 1], phase, signame);
  buf[l.len++] = '\n';
  buf[l.len] = '\0';
  return l.len;
}

static volatile sig_atomic_t w_quiet; /* hap_watchdog_quiet */

void hap_watchdog_quiet(void) { w_quiet = 1; }

/* Arming is cheap: each arm stores the time (CLOCK_MONOTONIC, ns), and alarm() runs only when no
 * alarm is pending; when it rings, the handler sets it again for what is left of the timeout
 * since the last arm (whole seconds, rounded up), and fires only when none is left. So a step
 * costs a clock read instead of a system call (27 ns against 1.2 us on dev-2c, bench_wait;
 * hap-run arms per task). */
static _Atomic int64_t w_arm_ns;        /* the last arm */
static volatile sig_atomic_t w_pending; /* an alarm is set */

static int64_t mono_ns(void) { /* async-signal-safe */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* SIGALRM: whether the timeout has passed since the last arm; if not, the alarm is set again. */
static bool timeout_passed(void) {
  if (!w_pending)
    return false; /* disarmed while the alarm was on its way */
  int64_t left = (int64_t)w_timeout_s * 1000000000 -
                 (mono_ns() - atomic_load_explicit(&w_arm_ns, memory_order_relaxed));
  if (left <= 0)
    return true;
  alarm((unsigned)((left + 999999999) / 1000000000));
  return false;
}

static void on_fatal(int sig) {
  if (sig == SIGALRM && !timeout_passed())
    return;
  char msg[1024];
  if (!w_quiet || sig == SIGALRM) {
    size_t n = hap_watchdog_message(sig, msg, sizeof msg);
    ssize_t rc = write(STDERR_FILENO, msg, n);
    (void)rc;
  }
  if (w_unlink[0] != '\0')
    unlink(w_unlink);
  _exit(1);
}

hap_status hap_watchdog_install(const char *prog, int32_t rank, double timeout_s,
                                const hap_watchdog_text *text, hap_err *err) {
  if (!(timeout_s >= 0 && timeout_s <= 1e6))
    return hap_err_set(err, HAP_EINVAL, "watchdog: timeout %g s is not in 0..1e6", timeout_s);
  if (strlen(text->timeout) >= sizeof w_text[0] || strlen(text->stopped) >= sizeof w_text[1])
    return hap_err_set(err, HAP_EINVAL, "watchdog: a message template is %zu bytes or longer",
                       sizeof w_text[0]);
  if (rank >= 0)
    snprintf(w_prefix, sizeof w_prefix, "%s: rank %d: ", prog, (int)rank);
  else
    snprintf(w_prefix, sizeof w_prefix, "%s: ", prog);
  snprintf(w_text[0], sizeof w_text[0], "%s", text->timeout);
  snprintf(w_text[1], sizeof w_text[1], "%s", text->stopped);
  w_timeout_s = (unsigned)ceil(timeout_s);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  return HAP_OK;
}

void hap_watchdog_arm(void) {
  if (w_timeout_s == 0)
    return;
  atomic_store_explicit(&w_arm_ns, mono_ns(), memory_order_relaxed);
  if (!w_pending) {
    w_pending = 1;
    alarm(w_timeout_s);
  }
}

void hap_watchdog_disarm(void) {
  w_pending = 0;
  alarm(0);
}

void hap_watchdog_set_phase(const char *phase) {
  int next = 1 - (int)w_cur;
  w_phase[next].fn = NULL;
  w_phase[next].ctx = NULL;
  snprintf(w_phase[next].text, sizeof w_phase[next].text, "%s", phase);
  w_cur = next;
}

void hap_watchdog_set_phase_fn(hap_watchdog_phase_fn fn, const void *ctx) {
  int next = 1 - (int)w_cur;
  w_phase[next].fn = fn;
  w_phase[next].ctx = ctx;
  w_phase[next].text[0] = '\0';
  w_cur = next;
}

hap_status hap_watchdog_unlink_on_exit(const char *path, hap_err *err) {
  if (path == NULL)
    path = "";
  if (strlen(path) >= sizeof w_unlink)
    return hap_err_set(err, HAP_EINVAL, "%s: path too long", path);
  size_t n = strlen(path);
  w_unlink[0] = '\0'; /* the handler sees "" until the copy is whole */
  if (n > 0) {
    memcpy(w_unlink + 1, path + 1, n);
    w_unlink[0] = path[0];
  }
  return HAP_OK;
}
