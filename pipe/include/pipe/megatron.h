/* megatron.h — the `megatron` strategy: Megatron-LM's 3-D layout given as its own options
 * (docs/design-megatron-tp.md, "The 3-D layout"). `pp` pipeline stages of consecutive devices,
 * each stage a megatron-tp program over its `tp * dp` devices: tensor parallelism over groups of
 * `tp` consecutive devices, data parallelism over the `dp` groups, sequence parallelism on or off;
 * 1F1B (interleaved with `v` model chunks per device when v > 1) over batch / (mbs * dp)
 * micro-batches of `mbs` samples per replica. Recomputation is the policy's (--policy recompute=,
 * or here `recompute=`). */
#ifndef HAP_PIPE_MEGATRON_H
#define HAP_PIPE_MEGATRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipe/estimate.h"
#include "synth/synth.h"

/* "megatron[:tp=T,pp=P,dp=D,mbs=B,v=V,sp=on|off,recompute=none|selective|full]"; 0 = derived. */
typedef struct hap_megatron_spec {
  int32_t tp;              /* tensor-parallel degree; 0: a host's devices */
  int32_t pp;              /* pipeline stages; default 1 */
  int32_t dp;              /* data-parallel degree; 0: devices / (tp * pp) */
  int32_t mbs;             /* samples per micro-batch per replica; default 1 */
  int32_t v;               /* model chunks per device (interleaved 1F1B when > 1); default 1 */
  hap_seq_parallel sp;     /* default on */
  bool recompute_given;    /* recompute= was given: it overrides the policy's */
  hap_recompute recompute; /* when given */
} hap_megatron_spec;

/* Is `text` a megatron spec ("megatron" or "megatron:...")? */
bool hap_megatron_spec_is(const char *text);

/* Parse; HAP_EINVAL with one line naming the key and what was expected
 * ("megatron: tp='x', expected a positive integer"). */
hap_status hap_megatron_spec_parse(const char *text, hap_megatron_spec *out, hap_err *err);

/* The layout with tp and dp resolved (*resolved), the pipeline and the stage programs' options it
 * means for `g` on `c`: base options `o` (policy, memory limit) with strategy megatron-tp, the
 * tensor-parallel degree, sequence parallelism and the recomputation set. The batch is dim 0 of the
 * graph's first input. HAP_EINVAL naming the numbers when tp * pp * dp is not the devices, when mbs
 * * dp does not divide the batch, or when tp does not divide a stage's devices. */
hap_status hap_megatron_layout(const hap_megatron_spec *m, const hap_graph *g, const hap_cluster *c,
                               const hap_synth_options *o, hap_megatron_spec *resolved,
                               hap_pipe_spec *pipe, hap_synth_options *stage, hap_err *err);

/* "tp=8,pp=16,dp=8,mbs=1,v=1,sp=on" of a resolved spec, for reports. */
void hap_megatron_describe(const hap_megatron_spec *m, char *buf, size_t len);

#endif
