/* test_util.h — fixtures the unit tests share: a zoo model or a bundled cluster, built or the test
 * fails with the error message. Header-only (static), for Criterion test files. */
#ifndef HAP_TEST_UTIL_H
#define HAP_TEST_UTIL_H

#include <criterion/criterion.h>

#include "cluster/cluster_io.h"
#include "model/zoo.h"

/* A validated zoo model ("mlp:layers=2,..."); the caller destroys it. */
static inline hap_graph *model(const char *spec) {
  hap_graph *g = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_zoo_build(spec, &g, &err), HAP_OK, "%s", err.msg);
  return g;
}

/* A bundled cluster spec ("paper-hetero:gpus_per_host=2"); the caller destroys it. */
static inline hap_cluster *bundled(const char *spec) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_load(spec, &c, &err), HAP_OK, "%s", err.msg);
  return c;
}

#endif
