/* zoo.h — the bundled model zoo and model specs. A model spec is either a zoo name with options,
 * "bert-base:layers=24,batch=256,seq=128", or a path to a hap-graph file; every tool accepts one.
 * Defaults follow the original HAP experiments (8 devices: global batch 256, 12 layers, width 768).
 * Ownership: definitions are static; graphs returned through `out` belong to the caller. */
#ifndef HAP_ZOO_H
#define HAP_ZOO_H

#include <stdint.h>

#include "model/graph.h"

#define HAP_MODEL_MAX_OPTS 16

typedef enum hap_model_opt_type {
  HAP_MOPT_INT,   /* positive integer */
  HAP_MOPT_FLOAT, /* finite real */
  HAP_MOPT_CHOICE /* one of a comma-separated list; value = index */
} hap_model_opt_type;

typedef struct hap_model_opt {
  const char *name;
  hap_model_opt_type type;
  double def;
  const char *choices; /* CHOICE only: "fused,fine" */
  const char *doc;
} hap_model_opt;

typedef struct hap_model_args {
  double v[HAP_MODEL_MAX_OPTS]; /* in option order */
  uint32_t given;               /* bit i: option i was given in the spec */
} hap_model_args;

typedef struct hap_model_def {
  const char *name;
  const char *summary;
  int n_opts;
  const hap_model_opt *opts;
  /* Build the graph into the empty `g` (the builder validates at the end). */
  hap_status (*build)(hap_graph *g, const hap_model_args *args, hap_err *err);
} hap_model_def;

int hap_zoo_count(void);
const hap_model_def *hap_zoo_get(int i);
const hap_model_def *hap_zoo_find(const char *name); /* NULL if unknown */

/* Parse "name:k=v,k=v" against the zoo. Errors name the option and list the valid ones. */
hap_status hap_model_parse_spec(const char *spec, const hap_model_def **def, hap_model_args *args,
                                hap_err *err);
/* Build a zoo model from a spec, validated. */
hap_status hap_zoo_build(const char *spec, hap_graph **out, hap_err *err);
/* A zoo spec or a hap-graph file path (anything containing '/' or ending in ".json", or an
 * existing file). */
hap_status hap_model_load(const char *spec, hap_graph **out, hap_err *err);

#endif
