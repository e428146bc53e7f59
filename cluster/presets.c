/* presets.c — the device preset table and name lookup with "did you mean" suggestions.
 *
 * Peaks are dense datasheet figures (PEERS.md §4.3; FP64 and T4 from the NVIDIA datasheets):
 * float32 is the non-tensor FMA peak; float16/bfloat16 the tensor-core peak (P100 has no tensor
 * cores: its packed-FP16 peak); float64 the peak DGEMM uses (the FP64 tensor-core figure on A100,
 * H100, H200). 0 = the dtype is not supported (bfloat16 before Ampere).
 * Sustained fractions (of peak, what large GEMMs reach):
 *   tensor float16/bfloat16: MAMF measured 85.9 % on A100 SXM and 80.1 % on H100 SXM (BF16,
 *     Bekman's mamf-finder, PEERS.md §4.1); H200 takes H100's figure (same GH100 chip; GH200
 *     measured 83.0 %); H100 PCIe 0.80, V100 0.75, P100 0.80 and T4 0.60 (70 W power cap) are
 *     estimates;
 *   float32 and float64: 0.80 of the FMA peak, an estimate for cuBLAS SGEMM/DGEMM;
 *   cpu: 0.70, an estimate for OpenBLAS on one core.
 * Memory: capacity as GiB (what nvidia-smi reports, within about 1 %); bandwidth is the datasheet
 * figure, used at HAP_PRESET_MEMORY_BW_FRACTION (0.85) as the sustained rate. */
#include "cluster/presets.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

#define TF  1e12         /* FLOP/s per TFLOP/s */
#define GBs 1e9          /* bytes/s per GB/s */
#define GiB 1073741824.0 /* bytes */

#define FRAC_FMA 0.80 /* float32 / float64 sustained fraction (estimate) */

/* A GPU preset: peaks in TFLOP/s, tensor fraction for float16/bfloat16. */
#define GPU(nm, f32, f16, bf16, f64, tensor_frac, mem_gib, bw_gbs, text)                           \
  {                                                                                                \
    .name = (nm), .kind = HAP_DEVICE_GPU,                                                          \
    .peak_flops = {[HAP_F32] = (f32)*TF,                                                           \
                   [HAP_F16] = (f16)*TF,                                                           \
                   [HAP_BF16] = (bf16)*TF,                                                         \
                   [HAP_F64] = (f64)*TF},                                                          \
    .sustained_fraction = {[HAP_F32] = FRAC_FMA,                                                   \
                           [HAP_F16] = (tensor_frac),                                              \
                           [HAP_BF16] = (bf16) > 0 ? (tensor_frac) : 0,                            \
                           [HAP_F64] = FRAC_FMA},                                                  \
    .memory_bytes = (mem_gib)*GiB, .memory_bw_peak_Bps = (bw_gbs)*GBs,                             \
    .launch_s = HAP_PRESET_GPU_LAUNCH_S, .doc = (text)                                             \
  }

static const hap_device_preset presets[] = {
    GPU("P100-16GB", 9.3, 18.7, 0, 4.7, 0.80, 16, 732,
        "Tesla P100 PCIe 16 GB (Pascal): no tensor cores, FP16 is packed half2"),
    GPU("V100-16GB", 15.7, 125, 0, 7.8, 0.75, 16, 900, "Tesla V100 SXM2 16 GB (Volta), NVLink2"),
    GPU("V100-32GB", 15.7, 125, 0, 7.8, 0.75, 32, 900, "Tesla V100 SXM2 32 GB (Volta), NVLink2"),
    GPU("T4", 8.1, 65, 0, 0.25, 0.60, 16, 320,
        "Tesla T4 16 GB (Turing, 70 W): FP16 tensor cores, no bfloat16"),
    GPU("A100-40GB", 19.5, 312, 312, 19.5, 0.859, 40, 1555, "A100 SXM4 40 GB (Ampere), NVLink3"),
    GPU("A100-80GB", 19.5, 312, 312, 19.5, 0.859, 80, 2039, "A100 SXM4 80 GB (Ampere), NVLink3"),
    GPU("H100-SXM", 66.9, 989.4, 989.4, 66.9, 0.801, 80, 3350, "H100 SXM5 80 GB (Hopper), NVLink4"),
    GPU("H100-PCIe", 51, 756, 756, 51, 0.80, 80, 2000, "H100 PCIe 80 GB (Hopper)"),
    GPU("H200", 66.9, 989.4, 989.4, 66.9, 0.801, 141, 4800,
        "H200 SXM 141 GB HBM3e (Hopper), NVLink4"),
    {.name = "cpu",
     .kind = HAP_DEVICE_CPU,
     .peak_flops = {[HAP_F32] = 1e11, [HAP_F64] = 5e10},
     .sustained_fraction = {[HAP_F32] = 0.70, [HAP_F64] = 0.70},
     .memory_bytes = 8 * GiB,
     .memory_bw_peak_Bps = 1e10,
     .launch_s = HAP_PRESET_CPU_LAUNCH_S,
     .doc = "one CPU rank (one core, AVX2 FMA class) of an MPI job; replace with a profile"},
};
enum { N_PRESETS = (int)(sizeof presets / sizeof presets[0]) };

int hap_preset_count(void) { return N_PRESETS; }

const hap_device_preset *hap_preset_get(int i) {
  return i >= 0 && i < N_PRESETS ? &presets[i] : NULL;
}

static bool eq_nocase(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return false;
  return *a == *b;
}

const hap_device_preset *hap_preset_find(const char *name) {
  for (int i = 0; name != NULL && i < N_PRESETS; i++)
    if (eq_nocase(name, presets[i].name))
      return &presets[i];
  return NULL;
}

#define KEY_MAX 48 /* compared length; longer names are cut */

/* Lower case without '-', '_' and spaces: "H100 sxm" and "h100-SXM" give the same key. */
static size_t key_of(const char *s, char *key) {
  size_t n = 0;
  for (; *s && n < KEY_MAX; s++)
    if (*s != '-' && *s != '_' && *s != ' ')
      key[n++] = (char)tolower((unsigned char)*s);
  key[n] = '\0';
  return n;
}

/* Levenshtein distance of two keys (unit costs). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  size_t row[KEY_MAX + 1];
  for (size_t j = 0; j <= nb; j++)
    row[j] = j;
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

const char *hap_preset_suggest(const char *name) {
  char key[KEY_MAX + 1], other[KEY_MAX + 1];
  if (name == NULL)
    return NULL;
  size_t n = key_of(name, key);
  if (n == 0)
    return NULL;
  /* 1. a preset starting with the name, 2. containing it, both in table order */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < N_PRESETS; i++) {
      key_of(presets[i].name, other);
      const char *at = strstr(other, key);
      if (at != NULL && (pass == 1 || at == other))
        return presets[i].name;
    }
  }
  /* 3. the smallest edit distance, if at most half the name's length */
  const char *best = NULL;
  size_t best_d = n / 2 + 1;
  for (int i = 0; i < N_PRESETS; i++) {
    size_t m = key_of(presets[i].name, other);
    size_t d = edit_distance(key, n, other, m);
    if (d < best_d) {
      best_d = d;
      best = presets[i].name;
    }
  }
  return best;
}

void hap_preset_to_device(const hap_device_preset *p, hap_device *proto) {
  memset(proto, 0, sizeof *proto);
  proto->model = p->name;
  proto->kind = p->kind;
  for (int t = 0; t < HAP_DTYPE_COUNT; t++) {
    proto->peak_flops[t] = p->peak_flops[t];
    proto->sustained_flops[t] = p->peak_flops[t] * p->sustained_fraction[t];
  }
  proto->memory_bytes = p->memory_bytes;
  proto->memory_bw_Bps = p->memory_bw_peak_Bps * HAP_PRESET_MEMORY_BW_FRACTION;
  proto->launch_s = p->launch_s;
}
