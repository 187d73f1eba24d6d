# CMake package of the fused_norm ONNX Runtime custom-op library.
#
#   find_package(fused_norm_ort CONFIG REQUIRED)      # with this folder's prefix on CMAKE_PREFIX_PATH
#   target_link_libraries(host PRIVATE fused_norm_ort::fused_norm_ort)   # the header's include folder
#   # the library to register: $<TARGET_FILE:fused_norm_ort::fused_norm_ort>
#
# The package is relocatable: every path is found from this file's location
# (<prefix>/lib/cmake/fused_norm_ort/).
get_filename_component(_fused_norm_ort_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET fused_norm_ort::fused_norm_ort)
  add_library(fused_norm_ort::fused_norm_ort SHARED IMPORTED)
  set_target_properties(fused_norm_ort::fused_norm_ort PROPERTIES
    IMPORTED_LOCATION "${_fused_norm_ort_prefix}/lib/libfused_norm_ort.so"
    # Built without a soname: a host that links it records the file name.
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${_fused_norm_ort_prefix}/include")
endif()

set(fused_norm_ort_LIBRARY "${_fused_norm_ort_prefix}/lib/libfused_norm_ort.so")
set(fused_norm_ort_INCLUDE_DIR "${_fused_norm_ort_prefix}/include")
unset(_fused_norm_ort_prefix)
