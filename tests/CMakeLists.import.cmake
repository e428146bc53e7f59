# Bring your own model (issue 17, docs/import.md): PyTorch modules through hap-import (torch.fx)
# and through ONNX (hap-model import) checked against PyTorch's own loss and gradients, and the
# malformed files of hap-run --weights and hap-model import. The
# torch tests report skipped (77) where /usr/bin/python3 lacks torch (scripts/setup-debian.sh
# --test installs it). Included by tests/CMakeLists.txt.
if(TARGET hap-run AND TARGET hap-synth AND TARGET hap-model AND HAP_MPIRUN)
  set(HAP_IMPORT_TOOLS ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/hap-import $<TARGET_FILE:hap-model>
                       $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> ${HAP_MPIRUN})
  # every covered model: loss and gradients on one rank equal PyTorch's (1e-4), a 2-rank hap plan
  # of the imported graph passes --check
  set(HAP_IMPORT_NUMERICS numerics)
  if(HAP_SANITIZE)
    set(HAP_IMPORT_NUMERICS numerics-quick) # the convolutional models only in the plain build
  endif()
  add_test(NAME import_torch_numerics
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/import/test_import_torch.sh
                   ${HAP_IMPORT_NUMERICS} ${HAP_IMPORT_TOOLS})
  # unsupported ops all listed with source lines, exit 1, nothing written; usage errors
  add_test(NAME import_torch_errors
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/import/test_import_torch.sh errors
                   ${HAP_IMPORT_TOOLS})
  # hap-run --weights: malformed and mismatched files refused with one line (needs h5py only)
  add_test(NAME import_weights_bad
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/import/test_weights_bad.sh
                   ${HAP_IMPORT_TOOLS})
  # hap-model import: malformed and unsupported ONNX files refused (the crafted ones need
  # python3-onnx)
  add_test(NAME import_onnx_bad
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/import/test_onnx_bad.sh $<TARGET_FILE:hap-model>
                   ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/onnx/mlp.onnx)
  set_tests_properties(import_torch_numerics import_torch_errors import_weights_bad import_onnx_bad
                       PROPERTIES LABELS import TIMEOUT 600 SKIP_RETURN_CODE 77
                                  ENVIRONMENT "${HAP_MPI_TEST_ENV}")
endif()
