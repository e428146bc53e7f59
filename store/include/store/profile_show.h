/* profile_show.h — what a hap-profile file measured, printed for `hap-profile show` after the
 * cluster it loads into (cluster/cluster_show.h): the p2p sweeps with their one-piece links and
 * piecewise fits, and the collective sweeps (largest size, its p50, bus bandwidth). Each sweep
 * also shows its fit's worst relative miss at a measured size; a miss over HAP_FIT_MAX_MISS
 * (store/fit.h) is flagged with '!' and explained in a line below the table. */
#ifndef HAP_PROFILE_SHOW_H
#define HAP_PROFILE_SHOW_H

#include <stdio.h>

#include "store/profile_store.h"

void hap_profile_show_sweeps(FILE *f, const hap_profile *p);

#endif
