/* profile_show.h — what a hap-profile file measured, printed for `hap-profile show` after the
 * cluster it loads into (cluster/cluster_show.h): the p2p sweeps with their one-piece links and
 * piecewise fits, and the collective sweeps (largest size, its p50, bus bandwidth). Each sweep
 * also shows its fit's worst relative miss at a measured size; a miss over HAP_FIT_MAX_MISS
 * (store/fit.h) is flagged with '!' and explained in a line below the table. */
#ifndef HAP_PROFILE_SHOW_H
#define HAP_PROFILE_SHOW_H

#include <stdio.h>

#include "base/json_write.h"
#include "store/profile_store.h"

void hap_profile_show_sweeps(FILE *f, const hap_profile *p);

/* The sweeps as the key "sweeps" of a JSON object being written (hap-profile show -f json; read
 * by hap-report): {"tool", "backend", "created", "gemm": [{"device", "model", "samples": [{"m",
 * "n", "k", "dtype", "seconds", "flops_per_s"}]}], "p2p": [{"src", "dst", "sizes_bytes", "p50_s",
 * "pieces"}], "collectives": [{"kind", "group", "ranks", "sizes_bytes", "p50_s", "busbw_Bps",
 * "pieces"}]}; pieces as hap-cluster JSON's ({"below_bytes"} but on the last, "alpha_s",
 * "beta_Bps"). Units: bytes, s, FLOP/s, bytes/s. `arg` is the hap_profile. */
void hap_profile_sweeps_json(hap_jw *w, const void *arg);

#endif
