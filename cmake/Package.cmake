# libstrait.so, its installed headers, the CMake package (strait::strait) and strait.pc, and the
# install rules of the strait and strait-bench tools (README "Install and embed").
#
# The layers stay static libraries, which the tests, the CLI and the benchmarks link, internals
# included. libstrait.so is those archives linked whole, so it has every layer's code but exports
# only what the installed headers mark STRAIT_API (core/export.h): everything is compiled with
# -fvisibility=hidden (top-level CMakeLists.txt). Its dependencies (UCX, liburing, hwloc, xxhash,
# OpenBLAS, fmt, spdlog, CUDA, NCCL) are private: no installed header includes them, so the
# package and strait.pc ask nothing of a consumer but C++20.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The public headers, by their path in the tree; each installs as include/strait/<path>, and the C
# API's header (capi/strait.h, when present) as include/strait/strait.h. The set must be
# closed under #include: the build fails, naming the header, when one of these includes a project
# header that is not listed (cmake/GenerateHeaders.cmake).
set(STRAIT_PUBLIC_HEADERS
  core/error.h
  core/export.h
  core/fd.h
  kernels/adamw.h
  kernels/cuda_stream.h
  kernels/dtype.h
  kernels/reduce.h
  kernels/reduce_op.h
  comm/algorithms/collective_kind.h
  comm/bootstrap/prefix_store.h
  comm/bootstrap/store.h
  comm/bootstrap/tcp_store.h
  comm/collective_args.h
  comm/communicator.h
  comm/symmetric_memory.h
  comm/compress/matrix_shape.h
  comm/reform.h
  comm/sites.h
  comm/work.h
  offload/adamw_state.h
  offload/adamw_state_file.h
  offload/host_adamw_state.h
  offload/io_engine.h
  offload/io_engine_factory.h
  offload/io_file.h
  offload/optimizer_offload.h
  offload/pinned_buffer.h
  offload/pinned_pool.h
  offload/swap_store.h
  scheduler/schedule.h
  scheduler/schedule_csv.h
  scheduler/schedule_print.h
  scheduler/schedule_sim.h
  scheduler/schedule_trace.h
  scheduler/schedule_validate.h
)
set(strait_header_sources ${STRAIT_PUBLIC_HEADERS})
set(strait_header_destinations)
foreach(header IN LISTS STRAIT_PUBLIC_HEADERS)
  list(APPEND strait_header_destinations strait/${header})
endforeach()
if(EXISTS ${PROJECT_SOURCE_DIR}/capi/strait.h)
  list(APPEND strait_header_sources capi/strait.h)
  list(APPEND strait_header_destinations strait/strait.h)
endif()

# The installed copies, generated into build/include: the same text with the project's includes
# ("comm/work.h") spelled as installed ("strait/comm/work.h"), so a consumer needs only
# -I<prefix>/include and no bare "core/" or "comm/" folder lands on its include path.
set(strait_header_map ${CMAKE_BINARY_DIR}/strait_public_headers.cmake)
file(CONFIGURE OUTPUT ${strait_header_map} CONTENT
     "set(header_sources \"@strait_header_sources@\")\nset(header_destinations \"@strait_header_destinations@\")\n"
     @ONLY)
set(strait_header_inputs)
set(strait_header_outputs)
foreach(src dst IN ZIP_LISTS strait_header_sources strait_header_destinations)
  list(APPEND strait_header_inputs ${PROJECT_SOURCE_DIR}/${src})
  list(APPEND strait_header_outputs ${CMAKE_BINARY_DIR}/include/${dst})
endforeach()
add_custom_command(
  OUTPUT ${strait_header_outputs}
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT_DIR=${CMAKE_BINARY_DIR}/include
          -DMAP_FILE=${strait_header_map} -P ${PROJECT_SOURCE_DIR}/cmake/GenerateHeaders.cmake
  DEPENDS ${strait_header_inputs} ${strait_header_map} ${PROJECT_SOURCE_DIR}/cmake/GenerateHeaders.cmake
  COMMENT "Generating the installed headers (build/include/strait)"
  VERBATIM)
add_custom_target(strait_headers ALL DEPENDS ${strait_header_outputs})

# The static archives that make up libstrait.so: every project static library reachable from the
# layers' targets (strait_kernels_cuda and the NCCL backend included when built), and the C API
# (target strait_capi) when it exists. Found by walking LINK_LIBRARIES, so a layer that gains or
# moves a library needs no edit here.
set(strait_library_roots strait_scheduler strait_offload strait_comm strait_kernels strait_core)
if(TARGET strait_capi)
  list(PREPEND strait_library_roots strait_capi)
endif()
function(strait_collect_archives out)
  set(found)
  set(queue ${ARGN})
  while(queue)
    list(POP_FRONT queue item)
    if(NOT TARGET ${item})
      continue()
    endif()
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      set(item ${aliased})
    endif()
    get_target_property(type ${item} TYPE)
    get_target_property(imported ${item} IMPORTED)
    if(imported OR NOT type STREQUAL "STATIC_LIBRARY" OR item IN_LIST found)
      continue()
    endif()
    list(APPEND found ${item})
    get_target_property(links ${item} LINK_LIBRARIES)
    if(links)
      list(APPEND queue ${links})
    endif()
  endwhile()
  set(${out} ${found} PARENT_SCOPE)
endfunction()
strait_collect_archives(strait_archives ${strait_library_roots})
list(JOIN strait_archives ", " strait_archive_names)
message(STATUS "strait: libstrait.so links whole ${strait_archive_names}")

# Target strait_shared (the name `strait` is the CLI's), file libstrait.so.<version>, exported as
# strait::strait. It has no sources of its own: --whole-archive takes every object of the layers
# (a plain link would take none, nothing referring to them), and linking the layers also normally
# brings in their dependencies, after them on the command line.
# CMake wants a source file for a library; the code comes from the archives.
set(strait_shared_source ${CMAKE_BINARY_DIR}/strait_shared.cpp)
file(CONFIGURE OUTPUT ${strait_shared_source} CONTENT
     "// libstrait.so's code comes from the layers' archives (--whole-archive, cmake/Package.cmake).\n")
add_library(strait_shared SHARED ${strait_shared_source})
add_library(strait::strait ALIAS strait_shared)
set(strait_whole_archives)
foreach(archive IN LISTS strait_archives)
  list(APPEND strait_whole_archives $<TARGET_FILE:${archive}>)
endforeach()
target_link_options(strait_shared PRIVATE LINKER:--whole-archive ${strait_whole_archives}
                    LINKER:--no-whole-archive LINKER:--no-undefined
                    LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/libstrait.map)
target_link_libraries(strait_shared PRIVATE ${strait_archives})
add_dependencies(strait_shared strait_headers)
target_include_directories(strait_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>
                                                   $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(strait_shared INTERFACE cxx_std_20)
set_target_properties(strait_shared PROPERTIES
  OUTPUT_NAME strait
  EXPORT_NAME strait
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LINKER_LANGUAGE CXX
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/libstrait.map
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
  # CUDA's and NCCL's folders (not the system's) stay on the installed library's RUNPATH.
  INSTALL_RPATH_USE_LINK_PATH ON)

# Install tree: lib/libstrait.so*, include/strait/..., lib/cmake/strait/, lib/pkgconfig/strait.pc,
# bin/strait, bin/strait-bench. A Python package (python) brings its own install() rule in
# its folder's CMakeLists.txt, with COMPONENT runtime, loading this libstrait.so.
set(strait_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/strait)
install(TARGETS strait_shared EXPORT straitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
foreach(dst IN LISTS strait_header_destinations)
  get_filename_component(dir ${dst} DIRECTORY)
  install(FILES ${CMAKE_BINARY_DIR}/include/${dst} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir}
          COMPONENT dev)
endforeach()
# The tools link the static layers: their RUNPATH keeps only the non-system folders they load
# from (CUDA's), so they run from any prefix.
set_target_properties(strait strait-bench PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS strait strait-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

install(EXPORT straitTargets NAMESPACE strait:: DESTINATION ${strait_cmake_dir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/straitConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/straitConfig.cmake
                              INSTALL_DESTINATION ${strait_cmake_dir})
# 0.x: a new minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/straitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/straitConfig.cmake ${CMAKE_BINARY_DIR}/straitConfigVersion.cmake
        DESTINATION ${strait_cmake_dir} COMPONENT dev)

# strait.pc names absolute paths, so it is written at install time, for the prefix given to
# `cmake --install --prefix` (which may differ from CMAKE_INSTALL_PREFIX at configure time).
install(CODE "
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  set(strait_pc_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  foreach(kind libdir includedir)
    if(kind STREQUAL libdir)
      set(dir \"${CMAKE_INSTALL_LIBDIR}\")
    else()
      set(dir \"${CMAKE_INSTALL_INCLUDEDIR}\")
    endif()
    if(IS_ABSOLUTE \"\${dir}\")
      set(strait_pc_\${kind} \"\${dir}\")
    else()
      set(strait_pc_\${kind} \"\\\${prefix}/\${dir}\")
    endif()
  endforeach()
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/strait.pc.in\" \"${CMAKE_BINARY_DIR}/strait.pc\" @ONLY)
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\"
       TYPE FILE FILES \"${CMAKE_BINARY_DIR}/strait.pc\")
" COMPONENT dev)
