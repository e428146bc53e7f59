/* pipeline_report.h — hap-sim --pipeline: pipeline estimates (pipe/estimate.h). One is printed
 * as a table of its stages, several as one row each; JSON: one object, or an array of them. */
#ifndef HAP_PIPELINE_REPORT_H
#define HAP_PIPELINE_REPORT_H

#include <stdbool.h>

#include "harness/format.h"
#include "model/policy.h"
#include "pipe/alpa_inter.h"
#include "pipe/galvatron.h"
#include "pipe/layouts.h"
#include "synth/synth.h"

/* --pipeline options one run takes. */
#define HAP_PIPELINE_REPORT_MAX 32

typedef struct hap_pipeline_report_args {
  const char *model, *cluster; /* MODEL, --cluster */
  const char *const *specs;    /* every --pipeline, in order */
  int n_specs;                 /* 1 .. HAP_PIPELINE_REPORT_MAX */
  hap_strategy strategy;       /* each stage's program */
  /* a megatron 3-D spec (pipe/megatron.h): the pipeline and the stage programs are its; specs
   * and strategy are then ignored. NULL: none */
  const char *megatron;
  hap_train_policy policy;
  double memory_limit; /* bytes per device; 0: each device's memory */
  hap_format format;
  const char *output; /* with one spec: write its pipelined plan there ('-': stdout, and then no
                         report); NULL: none */
  bool quiet;         /* no report (errors only) */
} hap_pipeline_report_args;

/* hap-synth's report when the hap strategy chose a 3-D layout (pipe/layouts.h): every layout
 * tried and why the others lost, what the one-stage search found (`one_stage`: a line), the
 * chosen pipeline's stages and, with `explain`, each stage's memory by component and its
 * program's tensor-parallel and sequence-parallel choices. JSON: one object. */
void hap_layout_report(const hap_layout_search *s, const hap_graph *g, const char *model,
                       const char *cluster, const char *one_stage, bool explain, hap_format format);

/* hap-synth's report when alpa's inter-operator pass chose a pipeline (pipe/alpa_inter.h): every
 * sub-mesh size tried (stages, devices per stage, micro-batches, the dynamic program's objective,
 * the simulated iteration, the fullest device, or why it has none), what the one-stage program
 * gave (`one_stage`: a line), and the chosen pipeline's stages. JSON: one object. */
void hap_alpa_report(const hap_alpa_inter *s, const hap_graph *g, const char *model,
                     const char *cluster, const char *one_stage, hap_format format);

/* hap-synth's report of the galvatron strategy (pipe/galvatron.h): the candidates of its decision
 * tree ranked by its cost model (the modelled and simulated iteration, the fullest device, or why
 * it has none), the chosen one's per-layer sharding and the chosen pipeline's stages (a flat plan
 * when it has one stage). JSON: one object. */
void hap_galvatron_report(const hap_galvatron *s, const hap_graph *g, const char *model,
                          const char *cluster, hap_format format);

/* Run and print; the exit status (0 ok, 1 failure: any estimate failed, 2 usage error in a
 * spec, before any runs). */
int hap_pipeline_report(const char *prog, const hap_pipeline_report_args *a);

#endif
