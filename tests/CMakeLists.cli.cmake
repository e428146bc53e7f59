# End-to-end tests of the command-line tools, driven by shell scripts in tests/cli/.
# check_bad_files.sh: every malformed file refused (exit 1, one stderr line naming it) for the
# reason DIR/expected-errors.txt gives; cli_bad_files_check_fails shows it fails on a wrong reason.
if(TARGET hap-model)
  add_test(NAME cli_bad_graphs
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_bad_files.sh $<TARGET_FILE:hap-model> check
                   ${HAP_TEST_DATA}/graphs/bad)
  add_test(NAME cli_bad_files_check_fails
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_check_bad_files.sh
                   ${CMAKE_CURRENT_SOURCE_DIR}/check_bad_files.sh $<TARGET_FILE:hap-model>
                   ${HAP_TEST_DATA}/graphs)
  add_test(NAME cli_hap_model
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hap_model.sh $<TARGET_FILE:hap-model>)
  set_tests_properties(cli_bad_graphs cli_bad_files_check_fails cli_hap_model PROPERTIES LABELS cli
                       TIMEOUT 600)
endif()

# reports/trace-gaps.py (time between a hap-run trace's tasks): sums of a hand-made trace, and
# malformed traces refused in one line
add_test(NAME cli_trace_gaps COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_trace_gaps.sh
                                     ${PROJECT_SOURCE_DIR}/reports)
set_tests_properties(cli_trace_gaps PROPERTIES LABELS cli TIMEOUT 60)
# reports/rank-skew.py (hap-run --task-times: what ranks lose waiting for each other): a hand-made
# file's known penalty, and malformed files refused in one line
add_test(NAME cli_rank_skew COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_rank_skew.sh
                                    ${PROJECT_SOURCE_DIR}/reports)
set_tests_properties(cli_rank_skew PROPERTIES LABELS cli TIMEOUT 60)
# reports/price-bias.py (hap-run --task-times: how far a replay's pricing statistic falls from the
# mean): a hand-made file's known gaps, and malformed files refused in one line
add_test(NAME cli_price_bias COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_price_bias.sh
                                     ${PROJECT_SOURCE_DIR}/reports)
set_tests_properties(cli_price_bias PROPERTIES LABELS cli TIMEOUT 60)

if(TARGET hap-profile)
  add_test(NAME cli_bad_clusters
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_bad_files.sh $<TARGET_FILE:hap-profile>
                   show ${HAP_TEST_DATA}/clusters/bad)
  add_test(NAME cli_hap_profile
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hap_profile.sh
                   $<TARGET_FILE:hap-profile> $<TARGET_FILE:write_sample_profile>)
  set_tests_properties(cli_bad_clusters cli_hap_profile PROPERTIES LABELS cli TIMEOUT 600)
  # `measure --single` starts MPI as a singleton: root needs Open MPI's two variables, and under
  # the sanitizers LeakSanitizer must skip Open MPI's own allocations (CMakeLists.profile.cmake).
  set_tests_properties(cli_hap_profile PROPERTIES ENVIRONMENT "${HAP_MPI_TEST_ENV}")
endif()

if(TARGET hap-sim AND TARGET hap-synth)
  add_test(NAME cli_hap_sim
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hap_sim.sh $<TARGET_FILE:hap-sim>
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:write_sample_profile>)
  add_test(NAME cli_hap_synth_policy
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hap_synth_policy.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-sim>)
  # the paper study: every strategy planned, hap never slower than the dp baselines
  add_test(NAME cli_paper_study_order
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_paper_study_order.sh
                   $<TARGET_FILE:hap-sim>)
  # segments in the paper study: never slower, and bert-moe gains (issue 20)
  add_test(NAME cli_paper_segments
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_paper_segments.sh
                   $<TARGET_FILE:hap-sim>)
  # Chakra execution traces: export decoded by protoc, replayed to the same iteration, malformed
  # traces refused (issue 18; docs/chakra.md)
  add_test(NAME cli_chakra
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_chakra.sh $<TARGET_FILE:hap-sim>
                   ${HAP_ET_PROTO} $<TARGET_FILE:hap-synth>)
  set_tests_properties(cli_chakra PROPERTIES LABELS cli TIMEOUT 600)
  # hap-synth --compare ranks the strategies as hap-sim does (issue 20)
  # (the sanitizer build runs the quick modes: the mlp cases, no steered point)
  set(HAP_CLI_MODE all)
  if(HAP_SANITIZE)
    set(HAP_CLI_MODE quick)
  endif()
  add_test(NAME cli_compare_order
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_compare_order.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-sim> ${HAP_CLI_MODE})
  # the alpa strategy: no slower than the programs its space holds, plans on paper-hetero, a
  # program over the memory limit refused (issue 16)
  add_test(NAME cli_alpa
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_alpa.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-sim> ${HAP_CLI_MODE})
  # the galvatron strategy: plans for the zoo at 8-64 GPUs and GPT-3 on 1,024, the per-layer
  # choice following the memory limit, refusals in one line (issue 16)
  add_test(NAME cli_galvatron
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_galvatron.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-sim> ${HAP_CLI_MODE})
  # a memory limit under which any baseline fits gets a hap plan that fits (issue 20)
  add_test(NAME cli_memory_limit_fits
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_memory_limit_fits.sh
                   $<TARGET_FILE:hap-synth> ${HAP_CLI_MODE})
  set_tests_properties(cli_hap_sim cli_hap_synth_policy cli_paper_study_order cli_paper_segments
                       cli_compare_order cli_memory_limit_fits cli_alpa cli_galvatron PROPERTIES
                       LABELS cli TIMEOUT 600)
endif()

# hap-report (issue 18): a page of each kind from the tools' real outputs, well-formed (xmllint)
# with the SVG elements its data calls for; --report on hap-sim and hap-run; malformed inputs one
# line with no output left. cli_report_browser renders each kind in headless Chromium and checks
# the PNG is not blank (skipped, 77, where Chromium is not installed: it is in the test setup,
# scripts/setup-debian.sh --test, not the main job's).
if(TARGET hap-report AND TARGET hap-sim AND TARGET hap-synth AND TARGET hap-run
   AND TARGET hap-profile AND HAP_MPIRUN)
  set(HAP_REPORT_TEST_ARGS $<TARGET_FILE:hap-report> $<TARGET_FILE:hap-sim>
      $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> $<TARGET_FILE:hap-profile>
      $<TARGET_FILE:write_sample_profile> ${HAP_MPIRUN})
  add_test(NAME cli_report
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hap_report.sh ${HAP_REPORT_TEST_ARGS})
  set_tests_properties(cli_report PROPERTIES LABELS cli TIMEOUT 600
                       ENVIRONMENT "${HAP_MPI_TEST_ENV}")
  # the browser's rendering does not depend on the sanitizers: the Release step runs it
  if(NOT HAP_SANITIZE)
    add_test(NAME cli_report_browser
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_report_browser.sh
                     ${HAP_REPORT_TEST_ARGS})
    set_tests_properties(cli_report_browser PROPERTIES LABELS cli TIMEOUT 600
                         ENVIRONMENT "${HAP_MPI_TEST_ENV}" SKIP_RETURN_CODE 77)
  endif()
endif()
