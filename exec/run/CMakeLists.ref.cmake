# libhap_run_ref: deterministic initial values of parameters, buffers and inputs (init.h), boxes of
# tensors (box.h) and the single-device reference run of a whole graph (reference.h) that hap-run's
# --check compares a distributed run against. Included from exec/run/CMakeLists.txt.
add_library(hap_run_ref STATIC init.c reference.c box.c)
target_include_directories(hap_run_ref PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(hap_run_ref PUBLIC hap_kernels hap_core ${MATH_LIBRARY})
