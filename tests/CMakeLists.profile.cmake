# hap-profile store: what the C writer writes, h5py reads as documented (str attributes, int
# attributes, a units attribute on every dataset, the known sample values). Included by
# tests/CMakeLists.txt. The check exits 77 (Skipped) when h5py cannot be imported.
add_executable(write_sample_profile ${CMAKE_CURRENT_SOURCE_DIR}/profile/write_sample_profile.c)
target_link_libraries(write_sample_profile PRIVATE hap_core)

add_test(NAME profile_h5py
  COMMAND sh -c [[
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$1" "$dir/sample.h5" || exit 1
/usr/bin/python3 "$2" "$dir/sample.h5"
]] sh $<TARGET_FILE:write_sample_profile> ${CMAKE_CURRENT_SOURCE_DIR}/profile_h5py_check.py)
set_tests_properties(profile_h5py PROPERTIES SKIP_RETURN_CODE 77 LABELS unit TIMEOUT 60)
