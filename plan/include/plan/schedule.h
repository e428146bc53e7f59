/* schedule.h — pipeline schedules: the order in which each of p device groups runs the forward
 * and backward passes of m micro-batches over v model chunks per group
 * (docs/pipeline-schedules.md). The model is cut into p*v virtual stages in model order; virtual
 * stage k = chunk*p + group runs on group k % p (Megatron's interleaving). GPipe and 1F1B have v =
 * 1; interleaved 1F1B v >= 2. Ownership: hap_pipe_order_build returns an owned order freed with
 * hap_pipe_order_destroy; ops read through the accessors are copies. */
#ifndef HAP_PLAN_SCHEDULE_H
#define HAP_PLAN_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef enum hap_pipe_schedule {
  HAP_PIPE_GPIPE = 0,   /* all forwards, then all backwards (last micro-batch first) */
  HAP_PIPE_1F1B,        /* PipeDream-flush: warm-up forwards, one forward one backward, cool-down */
  HAP_PIPE_INTERLEAVED, /* 1F1B over v >= 2 chunks per group (Narayanan et al., SC'21) */
  HAP_PIPE_SCHEDULE_COUNT
} hap_pipe_schedule;

/* The choices, for a one-line usage error. */
#define HAP_PIPE_SCHEDULE_CHOICES "gpipe, 1f1b, interleaved"

/* "gpipe", "1f1b", "interleaved"; "?" for a value out of range. */
const char *hap_pipe_schedule_name(hap_pipe_schedule s);
/* The schedule named `s`; HAP_ENOTFOUND (out untouched) for any other text or NULL. */
hap_status hap_pipe_schedule_parse(const char *s, hap_pipe_schedule *out);

/* One pass of one micro-batch through one chunk of a group: virtual stage chunk*p + group. */
typedef struct hap_pipe_op {
  bool backward;
  int32_t micro; /* 0 .. m-1 */
  int32_t chunk; /* 0 .. v-1 */
} hap_pipe_op;

typedef struct hap_pipe_order hap_pipe_order;

/* Largest p*m*v accepted (each group holds 2*m*v ops). */
#define HAP_PIPE_MAX_OPS (1 << 24)

/* Build the per-group op order of schedule `s` for p groups ("stages"), m micro-batches and v
 * chunks per group. Every group runs 2*m*v ops.
 *  - gpipe: forwards of micro-batches 0..m-1, then backwards m-1..0 (reverse, as in GPipe's
 *    figure: the last micro-batch's activations are the freshest). v must be 1.
 *  - 1f1b: group i (0-based) runs min(p-i-1, m) warm-up forwards, then alternates one forward and
 *    one backward (in micro-batch order), then the remaining backwards. v must be 1.
 *  - interleaved: Megatron's interleaved 1F1B; forwards visit micro-batches in groups of p, chunk
 *    0..v-1 for each group of p (chunk-major), backwards the same with chunks v-1..0; group i runs
 *    min((p-i-1)*2 + (v-1)*p, m*v) warm-up forwards, then one forward one backward, then the
 *    remaining backwards. Needs v >= 2 (one chunk per group is what 1f1b is for) and
 *    m a multiple of p.
 * Fails with HAP_EINVAL and one line naming the field ("stages", "micro_batches", "chunks") and
 * what was expected; HAP_ENOMEM. *out is NULL on failure. */
hap_status hap_pipe_order_build(hap_pipe_schedule s, int32_t p, int32_t m, int32_t v,
                                hap_pipe_order **out, hap_err *err);
void hap_pipe_order_destroy(hap_pipe_order *o);

hap_pipe_schedule hap_pipe_order_schedule(const hap_pipe_order *o);
int32_t hap_pipe_order_groups(const hap_pipe_order *o); /* p */
int32_t hap_pipe_order_micro(const hap_pipe_order *o);  /* m */
int32_t hap_pipe_order_chunks(const hap_pipe_order *o); /* v */
/* Ops group g runs (2*m*v); 0 for a group out of range. */
int32_t hap_pipe_order_n_ops(const hap_pipe_order *o, int32_t group);
/* Op k of group g in execution order; k and g must be in range. */
hap_pipe_op hap_pipe_order_op(const hap_pipe_order *o, int32_t group, int32_t k);

/* Peak number of activations group `group` holds: forwards run whose backward has not, each
 * chunk's counted separately (one chunk's activation is 1/v of a group's). Walked from the order:
 * 1f1b min(p-i, m), gpipe m, interleaved min(2(p-i-1) + (v-1)p + 1, m*v). 0 for a bad group. */
int32_t hap_pipe_order_in_flight(const hap_pipe_order *o, int32_t group);

/* Is `ops` (n_ops entries) a consistent order for one group with m micro-batches and v chunks:
 * micro and chunk in range, exactly one forward and one backward of every (micro, chunk), each
 * forward before its backward? HAP_EINVAL naming the first offending op otherwise. */
hap_status hap_pipe_ops_check(int32_t m, int32_t v, const hap_pipe_op *ops, int32_t n_ops,
                              hap_err *err);
/* hap_pipe_ops_check on every group of `o`, the message prefixed with "group g: ". */
hap_status hap_pipe_order_check(const hap_pipe_order *o, hap_err *err);

#endif
