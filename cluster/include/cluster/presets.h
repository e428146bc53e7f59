/* presets.h — device presets: published peak FLOP/s and memory figures of common GPUs (and of
 * one CPU rank), with the fraction of peak that large GEMMs sustain, for hypothetical clusters
 * (hap-cluster JSON, cluster_io.h). Measured profiles replace them in practice.
 * Ownership: the preset table is static and immutable; hap_preset_to_device fills a caller-owned
 * hap_device whose strings point into the table. Docs: docs/clusters.md. */
#ifndef HAP_PRESETS_H
#define HAP_PRESETS_H

#include "cluster/cluster.h"
#include "model/ops.h"

/* Sustained memory bandwidth as a fraction of the datasheet figure (STREAM-like copies reach
 * about 0.85 of HBM/GDDR peak; an estimate, not a measurement). */
#define HAP_PRESET_MEMORY_BW_FRACTION 0.85
#define HAP_PRESET_GPU_LAUNCH_S       5e-6 /* s per kernel launch, GPU */
#define HAP_PRESET_CPU_LAUNCH_S       1e-6 /* s per kernel call, CPU */

typedef struct hap_device_preset {
  const char *name; /* "V100-16GB"; matched case-insensitively */
  hap_device_kind kind;
  double peak_flops[HAP_DTYPE_COUNT];         /* FLOP/s, dense; 0 = not supported */
  double sustained_fraction[HAP_DTYPE_COUNT]; /* of peak, that large GEMMs reach */
  double memory_bytes;                        /* bytes */
  double memory_bw_peak_Bps;                  /* datasheet memory bandwidth, bytes/s */
  double launch_s;                            /* fixed cost per kernel, s */
  const char *doc;                            /* one line: form factor and sources */
} hap_device_preset;

int hap_preset_count(void);
const hap_device_preset *hap_preset_get(int i); /* NULL when out of range */
/* Exact name, ignoring case; NULL if unknown. */
const hap_device_preset *hap_preset_find(const char *name);
/* The preset name closest to `name` (a prefix or substring match first, ignoring case, '-', '_'
 * and spaces; then the smallest edit distance), or NULL when nothing is reasonably close. */
const char *hap_preset_suggest(const char *name);

/* Fill `proto` (for hap_cluster_add_device): model = preset name, kind, peak FLOP/s, sustained
 * FLOP/s = peak x fraction, memory, sustained memory bandwidth = datasheet x
 * HAP_PRESET_MEMORY_BW_FRACTION, launch overhead; no name, no GEMM or kernel samples. */
void hap_preset_to_device(const hap_device_preset *p, hap_device *proto);

#endif
