/* emulate.h — heterogeneous clusters on one CPU host: `--emulate-speed s0,s1,...` gives rank i a
 * speed s_i in (0, 1], and every kernel rank i runs takes 1/s_i as long (the kernel runs, its time
 * t is measured, then the rank waits t * (1/s_i - 1) more). hap-profile and hap-run take the same
 * option. Ownership: hap_emulate_parse returns a malloc'd array the caller frees. */
#ifndef HAP_EMULATE_H
#define HAP_EMULATE_H

#include <stdint.h>

#include "base/status.h"

/* Parse "1,0.5,0.25": one or more comma-separated decimal numbers, each finite with 0 < s <= 1,
 * no empty items, no spaces. *speeds gets a malloc'd array of *n values. On failure nothing is
 * allocated and err says which item is wrong ("--emulate-speed: item 2 'x' is not a number,
 * expected a speed in (0, 1]"). */
hap_status hap_emulate_parse(const char *text, double **speeds, int32_t *n, hap_err *err);

/* Seconds to wait after a kernel that took kernel_s at speed s (0 < s <= 1): kernel_s * (1/s - 1).
 */
double hap_emulate_pad_s(double kernel_s, double speed);

#endif
