#include "harness/format.h"

#include <stdio.h>

hap_status hap_format_select(const char *arg, unsigned offered, hap_format *out, hap_err *err) {
  static const char *const names[HAP_FORMAT_COUNT] = {"table", "csv", "json", "nccl-tests"};
  hap_format f;
  if (hap_format_parse(arg, &f) == HAP_OK && (offered & (1u << f)) != 0) {
    *out = f;
    return HAP_OK;
  }
  /* "table, csv or json": commas between, "or" before the last */
  char list[64] = "";
  size_t len = 0;
  int n = 0, total = 0;
  for (int i = 0; i < HAP_FORMAT_COUNT; i++)
    total += (offered >> i) & 1u;
  for (int i = 0; i < HAP_FORMAT_COUNT && len < sizeof list; i++) {
    if (((offered >> i) & 1u) == 0)
      continue;
    const char *sep = n == 0 ? "" : n + 1 == total ? " or " : ", ";
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", sep, names[i]);
    n++;
  }
  return hap_err_set(err, HAP_EINVAL, "unknown format '%s' (expected %s)", arg, list);
}
