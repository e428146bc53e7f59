# Optional CUDA toolkit detection. Sets HAP_HAVE_CUDA. Never links the driver library (libcuda):
# tools must start on machines without a GPU driver.
set(HAP_HAVE_CUDA OFF)
if(HAP_WITH_CUDA)
  # The toolkit is often installed without nvcc on PATH.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # CUDA 13 supports Turing (75) and newer; "native" fails on machines without a GPU.
      set(CMAKE_CUDA_ARCHITECTURES 75 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(HAP_HAVE_CUDA ON)
    endif()
  endif()
endif()
message(STATUS "hap: CUDA backend ${HAP_HAVE_CUDA} (architectures: ${CMAKE_CUDA_ARCHITECTURES})")

# hap_cuda_target(TARGET): the CUDA settings every target with .cu sources shares: C++17, the
# static CUDA runtime (one per binary; it dlopens libcuda.so.1 lazily), nvcc's own warning flags,
# -Werror and the sanitizers as the C code gets them.
function(hap_cuda_target target)
  set_target_properties(${target} PROPERTIES
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_EXTENSIONS OFF
    CUDA_RUNTIME_LIBRARY Static
    CUDA_SEPARABLE_COMPILATION OFF)
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow>)
  if(HAP_WERROR)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
  if(HAP_SANITIZE)
    # One flag per -Xcompiler: nvcc splits on commas.
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fsanitize=address;-Xcompiler=-fsanitize=undefined;-Xcompiler=-fno-omit-frame-pointer;-Xcompiler=-fno-sanitize-recover=undefined>")
  endif()
endfunction()
