# End-to-end tests of the command-line tools, driven by shell scripts in tests/cli/.
if(TARGET hap-model)
  add_test(NAME cli_bad_graphs
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_bad_graphs.sh $<TARGET_FILE:hap-model>
                   ${HAP_TEST_DATA}/graphs/bad)
  add_test(NAME cli_hap_model
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hap_model.sh $<TARGET_FILE:hap-model>)
  set_tests_properties(cli_bad_graphs cli_hap_model PROPERTIES LABELS cli TIMEOUT 300)
endif()
