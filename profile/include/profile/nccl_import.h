/* nccl_import.h — a profile from nccl-tests logs (`hap-profile import-nccl-tests`), so that GPU
 * users who already ran nccl-tests can give hap their cluster's collectives without a run of
 * hap-profile measure.
 *
 * Every log must list the same ranks (host, device) in the same order; each test at most once.
 * The profile gets the logs' hosts and one GPU device per rank, named "<host>:<device>" (the
 * device index on its host, as hap-profile names them), with the numbers of a device preset
 * (cluster/presets.h): its published peak FLOP/s (no GEMM was measured, so hap prices compute at
 * that peak), memory and datasheet memory bandwidth x HAP_PRESET_MEMORY_BW_FRACTION. Each
 * collective log becomes the sweep "world" of its kind over all ranks (samples: the out-of-place
 * time of each size > 0, one per size, as nccl-tests' mean), and "world:in-place" from the
 * in-place columns; sendrecv_perf becomes a p2p sweep of each ring pair r -> r + 1 (its time is
 * every pair sending at once). Fits as hap-profile measure's (profile/fit_rel.h). Backend
 * "nccl-tests"; the environment records each log's path ("nccl-tests.<test>") and the preset.
 * Ownership: *out is owned by the caller (hap_profile_destroy). */
#ifndef HAP_PROFILE_NCCL_IMPORT_H
#define HAP_PROFILE_NCCL_IMPORT_H

#include "base/status.h"
#include "store/nccl_tests.h"
#include "store/profile_store.h"

/* The preset whose family and size a GPU model string names ("NVIDIA A100-SXM4-80GB" ->
 * A100-80GB, "Tesla V100-SXM2-16GB" -> V100-16GB, "NVIDIA H100 80GB HBM3" -> H100-SXM: the first
 * of a family whose variant the model does not name); NULL when none. */
const char *hap_nt_preset_for(const char *model);

/* logs[0..n) read from paths[0..n); preset: a device preset name, or NULL to take the one
 * hap_nt_preset_for the first rank's model names. Errors name the log: HAP_EINVAL (ranks that
 * differ, a test twice, no preset, sizes not increasing, sendrecv on one rank), HAP_ENOMEM. */
hap_status hap_profile_from_nccl_tests(const hap_nt_log *logs, const char *const *paths, int n,
                                       const char *preset, hap_profile **out, hap_err *err);

#endif
