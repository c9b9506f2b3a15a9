# CMake package of the GPU runtime toolkit's C library, written by `cargo xtask install`:
# `find_package(gpu_runtime)` gives the imported targets
#   gpu_runtime::gpu_runtime         the shared library (libgpu_capi.so) and its header
#   gpu_runtime::gpu_runtime_static  the static library (libgpu_capi.a) and what it needs
# Relocatable: the prefix is found from where this file lies (<prefix>/lib/cmake/gpu_runtime).
get_filename_component(_gpu_runtime_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET gpu_runtime::gpu_runtime)
  add_library(gpu_runtime::gpu_runtime SHARED IMPORTED)
  set_target_properties(gpu_runtime::gpu_runtime PROPERTIES
    IMPORTED_LOCATION "${_gpu_runtime_prefix}/lib/libgpu_capi.so"
    # The library has no SONAME: link it by name (-L... -lgpu_capi), not by its path.
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${_gpu_runtime_prefix}/include")
endif()

if(NOT TARGET gpu_runtime::gpu_runtime_static)
  find_package(Threads REQUIRED)
  add_library(gpu_runtime::gpu_runtime_static STATIC IMPORTED)
  set_target_properties(gpu_runtime::gpu_runtime_static PROPERTIES
    IMPORTED_LOCATION "${_gpu_runtime_prefix}/lib/libgpu_capi.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_gpu_runtime_prefix}/include"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m")
endif()

unset(_gpu_runtime_prefix)
