# GPU smoke test and hap-devices CLI tests (included by tests/CMakeLists.txt).
# GPU tests exit 77 without a usable GPU; SKIP_RETURN_CODE 77 makes ctest report them as Skipped.
# Run only them with `ctest -L gpu`, everything else with `ctest -LE gpu`.
if(NOT TARGET hap_exec OR NOT TARGET hap-devices)
  return()
endif()

add_executable(test_gpu_smoke ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_gpu_smoke.c)
target_link_libraries(test_gpu_smoke PRIVATE hap_exec)
add_test(NAME gpu_smoke COMMAND test_gpu_smoke)
set_tests_properties(gpu_smoke PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 120)

# The `cuda` device and `nccl` comm backends (exec/cuda/): a GEMM against a CPU reference and the
# collectives, on one rank and, with two GPUs, on two ranks under mpirun. Only with CUDA.
if(HAP_HAVE_CUDA)
  add_executable(test_gpu_backend ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_gpu_backend.c)
  target_link_libraries(test_gpu_backend PRIVATE hap_exec hap_kernels ${MATH_LIBRARY})
  add_test(NAME gpu_backend COMMAND test_gpu_backend)
  add_test(NAME gpu_backend_2ranks
           COMMAND ${MPIEXEC_EXECUTABLE} -np 2 $<TARGET_FILE:test_gpu_backend> --need 2)
  set_tests_properties(gpu_backend gpu_backend_2ranks PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu
                       TIMEOUT 120 ENVIRONMENT "${HAP_MPI_TEST_ENV}")
endif()

# hap-devices lists the GPUs (with a kernel self-test on each) as JSON, or says "no GPU: <reason>"
# on stderr and exits 1, which counts as a skip here.
add_test(NAME gpu_hap_devices_list
  COMMAND sh -c [[
err=$("$1" --format json --selftest 2>&1 >/dev/null); rc=$?
if [ $rc -eq 1 ] && printf '%s\n' "$err" | grep -q '^no GPU: '; then echo "$err"; exit 77; fi
"$1" --format json --selftest; exit $?
]] sh $<TARGET_FILE:hap-devices>)
set_tests_properties(gpu_hap_devices_list PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 120)

# CLI conventions: --help and --version exit 0 with text on stdout; usage errors exit 2 with one
# line plus "Try 'hap-devices --help'." on stderr.
add_test(NAME cli_hap_devices_help
  COMMAND sh -c [[out=$("$1" --help) && printf '%s\n' "$out" | grep -q '^Usage: hap-devices']]
  sh $<TARGET_FILE:hap-devices>)
add_test(NAME cli_hap_devices_version
  COMMAND sh -c [[out=$("$1" --version) && printf '%s\n' "$out" | grep -q '^hap-devices (hap) ']]
  sh $<TARGET_FILE:hap-devices>)
add_test(NAME cli_hap_devices_bogus
  COMMAND sh -c [[
err=$("$1" --bogus 2>&1 >/dev/null); rc=$?; echo "$err"
[ $rc -eq 2 ] && printf '%s\n' "$err" | grep -q "^Try 'hap-devices --help'.$"
]] sh $<TARGET_FILE:hap-devices>)
add_test(NAME cli_hap_devices_bad_format
  COMMAND sh -c [[
err=$("$1" --format yaml 2>&1 >/dev/null); rc=$?; echo "$err"
[ $rc -eq 2 ] && printf '%s\n' "$err" | grep -q -- "--format: expected table, csv or json"
]] sh $<TARGET_FILE:hap-devices>)
set_tests_properties(cli_hap_devices_help cli_hap_devices_version cli_hap_devices_bogus
  cli_hap_devices_bad_format PROPERTIES LABELS cli TIMEOUT 30)

# hap-run --backend cuda (kx/kernels_run.h): a 1-GPU mlp plan with --check (skipped without
# a usable GPU), and without a GPU the one-line "no CUDA device" error (skipped with one).
find_program(HAP_GPU_MPIRUN NAMES mpirun mpiexec)
if(TARGET hap-run AND TARGET hap-synth AND TARGET hap-profile AND HAP_GPU_MPIRUN)
  foreach(mode check no-gpu replay policies)
    add_test(NAME gpu_run_${mode}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_gpu_run.sh ${mode}
                     $<TARGET_FILE:hap-devices> $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run>
                     $<TARGET_FILE:hap-profile>)
  endforeach()
  set_tests_properties(gpu_run_check gpu_run_no-gpu gpu_run_replay gpu_run_policies PROPERTIES
                       SKIP_RETURN_CODE 77
                       LABELS gpu TIMEOUT 600 RUN_SERIAL TRUE)
  if(HAP_SANITIZE)
    set_tests_properties(gpu_run_check gpu_run_no-gpu gpu_run_replay gpu_run_policies PROPERTIES
      ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/profile/lsan-mpi.supp:fast_unwind_on_malloc=0:print_suppressions=0")
  endif()
else()
  # mpirun comes with openmpi-bin, which setup installs. Without it the gpu_run tests cannot run: a
  # failure, never a pass.
  add_test(NAME gpu_run_needs_mpirun
           COMMAND sh -c "echo 'mpirun not found (openmpi-bin): the gpu_run tests cannot run' >&2; exit 1")
endif()
