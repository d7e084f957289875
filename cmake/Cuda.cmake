# CUDA is optional: with nvcc (and NCCL) present, kernels/ builds its CUDA kernels and comm/ its
# NCCL transport; without them the build succeeds and GPU code paths report Unavailable.
set(STRAIT_HAVE_CUDA OFF)
set(STRAIT_HAVE_NCCL OFF)
if(NOT STRAIT_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper (H100/H200) and Ampere unless the user asks for others.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag (nvcc has had it since CUDA 12) and, with
    # CXX_STANDARD_REQUIRED, refuses CUDA targets outright: teach it the flag.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # Debian 12's CMake 3.25.1 FindCUDAToolkit marks CUDA::nvToolsExt deprecated whenever
    # CMAKE_MINIMUM_REQUIRED_VERSION >= 3.25, without checking that the target exists, and CUDA 13
    # ships no libnvToolsExt: "set_property could not find TARGET CUDA::nvToolsExt" (fixed in
    # 3.25.2). That version is all the guard reads, so lower it around the call; all it costs is
    # a deprecation notice for a target strait does not use. tests/install/stock_cmake.sh
    # configures against Debian's unpatched modules to keep this working.
    set(strait_saved_minimum_version "${CMAKE_MINIMUM_REQUIRED_VERSION}")
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_MINIMUM_REQUIRED_VERSION "${strait_saved_minimum_version}")
    set(STRAIT_HAVE_CUDA ON)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(STRAIT_HAVE_NCCL ON)
      add_library(strait_nccl INTERFACE)
      target_include_directories(strait_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(strait_nccl INTERFACE ${NCCL_LIBRARY})
    endif()
  elseif(STRAIT_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRAIT_WITH_CUDA=ON but no CUDA compiler was found; install the CUDA "
                        "toolkit or configure with -DSTRAIT_WITH_CUDA=AUTO")
  endif()
endif()
message(STATUS "strait: CUDA kernels ${STRAIT_HAVE_CUDA}, NCCL transport ${STRAIT_HAVE_NCCL}")
