/* hap_sim_pipeline.h — hap-sim --pipeline: pipeline estimates (pipe/estimate.h). One is printed
 * as a table of its stages, several as one row each; JSON: one object, or an array of them. */
#ifndef HAP_SIM_PIPELINE_H
#define HAP_SIM_PIPELINE_H

#include <stdbool.h>

#include "harness/format.h"
#include "model/policy.h"
#include "synth/synth.h"

/* --pipeline options one run takes. */
#define HAP_SIM_MAX_PIPELINES 32

typedef struct hap_sim_pipeline_args {
  const char *model, *cluster; /* MODEL, --cluster */
  const char *const *specs;    /* every --pipeline, in order */
  int n_specs;                 /* 1 .. HAP_SIM_MAX_PIPELINES */
  hap_strategy strategy;       /* each stage's program */
  hap_train_policy policy;
  double memory_limit; /* bytes per device; 0: each device's memory */
  hap_format format;
} hap_sim_pipeline_args;

/* Run and print; the exit status (0 ok, 1 failure: any estimate failed, 2 usage error in a
 * spec, before any runs). */
int hap_sim_pipeline(const char *prog, const hap_sim_pipeline_args *a);

#endif
