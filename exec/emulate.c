/* emulate.c — parsing --emulate-speed and the padding it implies (emulate.h). */
#include "exec/emulate.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OPT "--emulate-speed"

hap_status hap_emulate_parse(const char *text, double **speeds, int32_t *n, hap_err *err) {
  *speeds = NULL;
  *n = 0;
  if (text == NULL || text[0] == '\0')
    return hap_err_set(err, HAP_EINVAL,
                       OPT ": empty, expected comma-separated speeds in (0, 1] such as 1,0.5");
  int32_t count = 1;
  for (const char *c = text; *c; c++)
    count += *c == ',';
  double *out = malloc((size_t)count * sizeof *out);
  if (out == NULL)
    return hap_err_set(err, HAP_ENOMEM, OPT ": out of memory");
  const char *item = text;
  for (int32_t i = 0; i < count; i++) {
    const char *comma = strchr(item, ',');
    size_t len = comma ? (size_t)(comma - item) : strlen(item);
    char buf[64];
    if (len == 0 || len >= sizeof buf) {
      free(out);
      return hap_err_set(err, HAP_EINVAL,
                         OPT ": item %d is %s, expected a speed in (0, 1] (e.g. 1,0.5)", i + 1,
                         len == 0 ? "empty" : "too long");
    }
    memcpy(buf, item, len);
    buf[len] = '\0';
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (strspn(buf, "0123456789.eE+-") != len || end == buf || *end != '\0' || errno != 0 ||
        !isfinite(v)) {
      free(out);
      return hap_err_set(err, HAP_EINVAL,
                         OPT ": item %d '%s' is not a number, expected a speed in (0, 1]", i + 1,
                         buf);
    }
    if (!(v > 0.0 && v <= 1.0)) {
      free(out);
      return hap_err_set(err, HAP_EINVAL,
                         OPT ": item %d is %s, expected a speed in (0, 1] (emulation can only "
                             "slow a rank down)",
                         i + 1, buf);
    }
    out[i] = v;
    item = comma ? comma + 1 : item + len;
  }
  *speeds = out;
  *n = count;
  return HAP_OK;
}

double hap_emulate_pad_s(double kernel_s, double speed) {
  if (!(speed > 0.0) || speed >= 1.0 || !(kernel_s > 0.0))
    return 0.0;
  return kernel_s * (1.0 / speed - 1.0);
}
