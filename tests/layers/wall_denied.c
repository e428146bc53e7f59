/* Compiled with hap_cluster's include path by ctest (layers_wall_denied), which expects the
 * compile to fail: the cluster library lies beneath plan, so plan's headers are not visible. */
#include "plan/plan.h"

int layers_wall_denied(void) { return 0; }
