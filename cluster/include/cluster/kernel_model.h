/* kernel_model.h — the built-in kernel grid hap-profile times on every CPU rank, and the model that
 * prices an op application at shapes a device's kernel table did not time from the same op's
 * measured times at the grid's shapes (cluster/cost.c hap_compute_time's fallback).
 *
 * Grid: `quick` = one or two small shapes per op (milliseconds each), else 2-3 model-like shapes
 * per op; every op the zoo models use. Float inputs are float32, index inputs int64, every float
 * input needs a gradient. The model knows each grid case's shapes, attributes, FLOPs and bytes, so
 * it recognises a device's grid rows by (op, direction, hap_kernel_shape_key); rows from other
 * shapes (hap-profile --plan) are only exact matches.
 *
 * Model: the work of an application is its roofline time without launch overhead,
 *   w = max(FLOP / rate, bytes / memory_bw)   (s; rate: hap_gemm_rate at the op's GEMM dims, else
 *                                               the sustained FLOP/s of the dtype)
 * and the device's grid rows of the same op and direction give points (w_i, t_i). A float32 query
 * of work w gets t interpolated linearly in (log w, log t) between the two rows around it; above
 * the largest row t = t_max * w / w_max (constant efficiency), below the smallest row
 * t = t_min * (w / w_min)^p with p the slope of the lowest segment clamped to [0, 1] (1 with one
 * row). A grid row's own shape gets exactly its time; between two rows the time lies between
 * theirs.
 * Cost: the grid table is built once per process (call_once); a query is O(g log n) for g grid
 * shapes of the op (at most 5) and n kernel rows, plus g + 1 roofline evaluations. */
#ifndef HAP_KERNEL_MODEL_H
#define HAP_KERNEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "cluster/cluster.h"
#include "model/ops.h"

/* One grid case; io.attrs points at attrs (hap_kgrid_case_fix after copying). */
typedef struct hap_kgrid_case {
  hap_op op;
  hap_attrs attrs;
  hap_op_io io; /* inferred; in_grad set for every float input */
} hap_kgrid_case;

void hap_kgrid_case_fix(hap_kgrid_case *kc);

/* Number of cases in the quick or default grid. */
int32_t hap_kernel_grid_count(bool quick);

/* Case i (0 <= i < hap_kernel_grid_count(quick)) of the quick or default grid. */
hap_status hap_kernel_grid_case(bool quick, int32_t i, hap_kgrid_case *out, hap_err *err);

/* Roofline work of one application on device d without launch overhead, s (see above); dtype is
 * the dtype the FLOPs run in. */
double hap_kernel_work_s(const hap_device *d, hap_op op, const hap_op_io *io, bool backward,
                         hap_dtype dtype);

/* Seconds for an application of `op` of work `work_s` (hap_kernel_work_s) in direction
 * `backward` on d from d's grid rows of that op and direction; a negative value when d holds
 * none or dtype is not float32 (the caller then uses the roofline). */
double hap_kernel_model_time(const hap_device *d, hap_op op, bool backward, hap_dtype dtype,
                             double work_s);

#endif
