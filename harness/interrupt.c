#include "harness/interrupt.h"

#include <string.h>

static volatile sig_atomic_t interrupted = 0;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

volatile sig_atomic_t *hap_interrupt_on_sigint(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigaction(SIGINT, &sa, NULL);
  return &interrupted;
}
