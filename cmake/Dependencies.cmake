# Third-party libraries, all from Debian packages (scripts/setup.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 SYSTEM INTERFACE ${CLI11_INCLUDE_DIR})
endif()
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)

pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
# xxHash (XXH3_64bits): SwapStore's per-extent checksum.
pkg_check_modules(XXHASH QUIET IMPORTED_TARGET libxxhash)
if(NOT XXHASH_FOUND)
  message(FATAL_ERROR "xxHash (libxxhash.pc) not found: SwapStore checksums its extents with "
                      "XXH3_64bits. Install Debian's libxxhash-dev (scripts/setup.sh does).")
endif()
# libsodium: the store's authentication (HMAC-SHA256) and the sealed links (XChaCha20-Poly1305).
pkg_check_modules(SODIUM QUIET IMPORTED_TARGET libsodium)
if(NOT SODIUM_FOUND)
  message(FATAL_ERROR "libsodium (libsodium.pc) not found: the store authenticates its clients and "
                      "links between sites are sealed with it. Install Debian's libsodium-dev "
                      "(scripts/setup.sh does).")
endif()

# OpenBLAS (not the reference BLAS): we want its sgemm and openblas_set_num_threads.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
add_library(strait_openblas INTERFACE)
target_include_directories(strait_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(strait_openblas INTERFACE ${OPENBLAS_LIBRARY})
