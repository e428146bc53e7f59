/* hap_sim_pipeline.h — hap-sim --pipeline: one pipeline estimate (pipe/estimate.h) printed as a
 * table of stages or as JSON. */
#ifndef HAP_SIM_PIPELINE_H
#define HAP_SIM_PIPELINE_H

#include <stdbool.h>

#include "harness/format.h"
#include "model/policy.h"
#include "synth/synth.h"

typedef struct hap_sim_pipeline_args {
  const char *model, *cluster, *spec; /* MODEL, --cluster, --pipeline */
  hap_strategy strategy;              /* each stage's program */
  hap_train_policy policy;
  double memory_limit; /* bytes per device; 0: each device's memory */
  hap_format format;
} hap_sim_pipeline_args;

/* Run and print; the exit status (0 ok, 1 failure, 2 usage error in the spec). */
int hap_sim_pipeline(const char *prog, const hap_sim_pipeline_args *a);

#endif
