# Unit tests of libhap_run_ref (init, boxes, the reference run against finite differences).
# Included from exec/run/CMakeLists.txt.
if(BUILD_TESTING)
  if(NOT TARGET PkgConfig::CRITERION)
    pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)
  endif()
  add_executable(test_run_ref test_run_ref.c)
  target_link_libraries(test_run_ref PRIVATE hap_run_ref hap_kernels hap_core PkgConfig::CRITERION
                                             ${MATH_LIBRARY})
  # --jobs 2: this machine has 2 cores; Criterion forks one process per test.
  add_test(NAME unit_run_ref COMMAND test_run_ref --jobs 2 --ascii)
  set_tests_properties(unit_run_ref PROPERTIES LABELS unit TIMEOUT 300)
endif()

# The runner's kernel table on one rank (a loop-back comm, no MPI): timing from the table, refused
# ops, and the GPU path's kernel programs run on the host (exec/gpu/kx.h) against the reference.
if(BUILD_TESTING AND TARGET hap_kx)
  add_executable(test_run_kernels test_run_kernels.c)
  target_link_libraries(test_run_kernels PRIVATE hap_run hap_kx hap_synth hap_core
                                                 PkgConfig::CRITERION ${MATH_LIBRARY})
  add_test(NAME unit_run_kernels COMMAND test_run_kernels --jobs 2)
  set_tests_properties(unit_run_kernels PROPERTIES LABELS unit TIMEOUT 300)
endif()
