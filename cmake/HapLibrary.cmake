# hap_library(NAME SOURCES src... [DEPENDS lib...] [PRIVATE_DEPENDS lib...])
#
# One library of the tree, called from its folder's CMakeLists.txt. Public headers live in
# <folder>/include/<folder>/ and are included with the folder's prefix ("model/graph.h"); sources
# and private headers live in <folder>/. A dependant sees only the include/ directories of the
# libraries it links (DEPENDS is PUBLIC, so that is what lies beneath it), never a private
# header: an include of a library above, or beside, fails to compile. The allowed arrows are
# written in ARCHITECTURE.md and checked by tests/check_layers.sh (ctest: layers_*).
function(hap_library name)
  cmake_parse_arguments(PARSE_ARGV 1 A "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS")
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
                                     PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${A_DEPENDS} PRIVATE ${A_PRIVATE_DEPENDS})
endfunction()
