/* half.h — float16 and bfloat16 values of float32 numbers, for mixed precision's storage.
 *
 * Conversions round to nearest, ties to even (IEEE 754 binary16 with subnormals; bfloat16 is the
 * top 16 bits of a float32, rounded). Overflow gives +-Inf, NaN stays a (quiet) NaN of the same
 * sign, -0 stays -0: what a hardware conversion (F16C's vcvtps2ph, CUDA's __float2half_rn and
 * __float2bfloat16_rn) gives.
 *
 * The CPU backend stores half-precision tensors as float32 values that are exactly representable
 * in the half format ("emulated storage"): hap_round_to / hap_round_array apply the rounding a
 * store into that format does, and the kernels compute from those values in float32 with their
 * usual float32/double accumulations. */
#ifndef HAP_KERNELS_HALF_H
#define HAP_KERNELS_HALF_H

#include <stdbool.h>
#include <stdint.h>

#include "model/graph.h"

uint16_t hap_fp16_from_float(float x);
float hap_fp16_to_float(uint16_t bits);
uint16_t hap_bf16_from_float(float x);
float hap_bf16_to_float(uint16_t bits);

/* x rounded to the nearest value of `to` (HAP_F16 or HAP_BF16) as a float32; any other dtype
 * returns x unchanged. */
float hap_round_to(hap_dtype to, float x);

/* v[i] = hap_round_to(to, v[i]) for i < n (nothing for other dtypes). Returns true when every
 * result is finite. */
bool hap_round_array(hap_dtype to, float *v, int64_t n);

/* True when every v[i], i < n, is finite (no NaN, no Inf). */
bool hap_all_finite(const float *v, int64_t n);

#endif
