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
