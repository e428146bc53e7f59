/* test_gpu_smoke.c — GPU smoke test (plain C, not Criterion): the argument checks and library
 * versions everywhere, then every visible GPU's fields and a kernel self-test. Exits 77 (ctest:
 * Skipped) when there is no usable GPU, after printing why; 1 on any failed check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/devices.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                       \
      printf(__VA_ARGS__);                                                                         \
      putchar('\n');                                                                               \
    }                                                                                              \
  } while (0)

/* "0000:3b:00.0"-like: hex digits, two ':' and one '.'. Empty is allowed (unknown). */
static int pci_id_ok(const char *s) {
  if (s[0] == '\0')
    return 1;
  int colons = 0, dots = 0;
  for (const char *p = s; *p != '\0'; p++) {
    if (*p == ':')
      colons++;
    else if (*p == '.')
      dots++;
    else if (strchr("0123456789abcdefABCDEF", *p) == NULL)
      return 0;
  }
  return colons == 2 && dots == 1;
}

int main(void) {
  hap_err err = {0};
  int n = -1;

  /* Contracts that hold with or without a GPU. */
  CHECK(hap_gpu_query(NULL, 0, NULL, &err) == HAP_EINVAL, "count NULL must be rejected");
  hap_err_clear(&err);
  CHECK(hap_gpu_query(NULL, 2, &n, &err) == HAP_EINVAL, "out NULL with max 2 must be rejected");
  hap_err_clear(&err);
  CHECK(hap_gpu_versions(NULL, &err) == HAP_EINVAL, "versions(NULL) must be rejected");
  hap_err_clear(&err);

  hap_gpu_lib_versions v;
  CHECK(hap_gpu_versions(&v, &err) == HAP_OK, "%s", err.msg);
  printf("compiled with CUDA: %s\n", hap_gpu_compiled() ? "yes" : "no");
  printf("versions: cudart %d, driver %d, nccl %d, cupti %d, cublas %d\n", v.cudart, v.cuda_driver,
         v.nccl, v.cupti, v.cublas);
  if (hap_gpu_compiled())
    CHECK(v.cudart >= 11000, "cudart version %d", v.cudart);
  else
    CHECK(v.cudart == 0 && v.nccl == 0, "a build without CUDA reports no versions");

  hap_err_clear(&err);
  hap_status st = hap_gpu_query(NULL, 0, &n, &err);
  if (st == HAP_ENOGPU) {
    CHECK(n == 0, "count is %d with HAP_ENOGPU", n);
    CHECK(err.msg[0] != '\0', "HAP_ENOGPU needs a message");
    CHECK(hap_gpu_selftest(0, NULL) == HAP_ENOGPU, "self-test without a GPU");
    if (failures) {
      printf("%d check(s) failed\n", failures);
      return 1;
    }
    printf("SKIP: no GPU: %s\n", err.msg);
    return 77;
  }
  CHECK(st == HAP_OK, "hap_gpu_query: %s: %s", hap_status_str(st), err.msg);
  if (st != HAP_OK)
    return 1;
  CHECK(n >= 1 && n <= 1024, "device count %d", n);
  CHECK(v.cuda_driver > 0, "a GPU without a driver version?");

  hap_gpu_info *g = calloc((size_t)n, sizeof *g);
  if (g == NULL)
    return 1;
  int n2 = 0;
  st = hap_gpu_query(g, n, &n2, &err);
  CHECK(st == HAP_OK && n2 == n, "second query: %s (%d vs %d devices)", err.msg, n2, n);
  for (int i = 0; i < n2 && i < n; i++) {
    const hap_gpu_info *d = &g[i];
    printf("GPU %d: %s, cc %d.%d, %.2f GiB, %d SMs, PCI %s\n", d->index, d->name, d->cc_major,
           d->cc_minor, (double)d->memory_bytes / (1024.0 * 1024.0 * 1024.0), d->sm_count,
           d->pci_bus_id);
    CHECK(d->index == i, "index %d at position %d", d->index, i);
    CHECK(d->name[0] != '\0' && memchr(d->name, '\0', sizeof d->name) != NULL, "name");
    CHECK(d->cc_major >= 3 && d->cc_major <= 20 && d->cc_minor >= 0 && d->cc_minor <= 9,
          "compute capability %d.%d", d->cc_major, d->cc_minor);
    CHECK(d->memory_bytes >= ((int64_t)256 << 20) && d->memory_bytes <= ((int64_t)1 << 44),
          "memory %lld bytes", (long long)d->memory_bytes);
    CHECK(d->sm_count >= 1 && d->sm_count <= 4096, "SM count %d", d->sm_count);
    CHECK(pci_id_ok(d->pci_bus_id), "PCI bus id '%s'", d->pci_bus_id);
    hap_err terr = {0};
    CHECK(hap_gpu_selftest(d->index, &terr) == HAP_OK, "self-test on GPU %d: %s", d->index,
          terr.msg);
  }
  /* A partial query fills only what fits but still reports the full count. */
  hap_gpu_info one;
  int n3 = 0;
  hap_err_clear(&err);
  CHECK(hap_gpu_query(&one, 1, &n3, &err) == HAP_OK && n3 == n, "partial query: %s", err.msg);
  hap_err_clear(&err);
  CHECK(hap_gpu_selftest(n, &err) == HAP_ENOGPU, "self-test on a device that does not exist");
  free(g);

  printf("%d GPU(s), %d check(s) failed\n", n, failures);
  return failures ? 1 : 0;
}
