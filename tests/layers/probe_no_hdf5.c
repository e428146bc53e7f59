/* A program linked with the synthesis and simulation libraries only (and what lies beneath
 * them). ctest (layers_no_hdf5) checks with ldd that it needs no libhdf5: only the profile
 * store (libhap_store) may link HDF5. */
#include <stdio.h>

#include "simulate/plan_sim.h"
#include "synth/synth.h"

int main(void) {
  printf("%s %p\n", hap_strategy_name(HAP_STRATEGY_HAP), (void *)hap_plan_sim_rescore);
  return 0;
}
