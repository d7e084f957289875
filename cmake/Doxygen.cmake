# The API reference: Doxygen over the installed headers (STRAIT_PUBLIC_HEADERS of
# cmake/Package.cmake and capi/strait.h), written to build/docs/api/html by the target `docs`
# (a custom target, so not part of `all`: `cmake --build build --target docs`).
#
# The test docs_api (label docs) runs the same Doxygen with WARN_IF_UNDOCUMENTED and fails on any
# warning, naming each (file:line: what), so an undocumented public function, class or member of
# an installed header fails the build's tests. This file is also that test's script:
#   cmake -DDOXYGEN=... -DDOXYFILE=... -DLOG=... -P cmake/Doxygen.cmake

if(CMAKE_SCRIPT_MODE_FILE)
  file(REMOVE ${LOG})
  execute_process(COMMAND ${DOXYGEN} ${DOXYFILE} RESULT_VARIABLE status
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "doxygen failed (${status}):\n${out}${err}")
  endif()
  file(READ ${LOG} warnings)
  string(STRIP "${warnings}" warnings)
  if(NOT warnings STREQUAL "")
    string(REGEX MATCHALL "\n" lines "\n${warnings}")
    list(LENGTH lines count)
    message(FATAL_ERROR
            "${count} Doxygen warnings in the public headers (document each with /// or /** */):\n"
            "${warnings}")
  endif()
  message(STATUS "public headers: every public function, class and member is documented")
  return()
endif()

find_program(STRAIT_DOXYGEN doxygen)
if(NOT STRAIT_DOXYGEN)
  message(STATUS "doxygen not found: no `docs` target and no docs_api test (scripts/setup.sh)")
  return()
endif()

set(strait_doxygen_inputs)
foreach(header IN LISTS STRAIT_PUBLIC_HEADERS)
  list(APPEND strait_doxygen_inputs "${PROJECT_SOURCE_DIR}/${header}")
endforeach()
if(EXISTS ${PROJECT_SOURCE_DIR}/capi/strait.h)
  list(APPEND strait_doxygen_inputs "${PROJECT_SOURCE_DIR}/capi/strait.h")
endif()
list(JOIN strait_doxygen_inputs " \\\n  " strait_doxygen_input)

set(strait_doxygen_dir ${CMAKE_BINARY_DIR}/docs/api)
# STRAIT_API and STRAIT_C_EXPORT expand to nothing, so Doxygen sees plain declarations. Private
# members and those of the detail namespaces are not the API and are not checked.
set(strait_doxyfile_common "PROJECT_NAME = strait
PROJECT_NUMBER = ${PROJECT_VERSION}
PROJECT_BRIEF = \"Collectives, offload and pipeline schedules for training over slow links\"
INPUT = ${strait_doxygen_input}
STRIP_FROM_PATH = ${PROJECT_SOURCE_DIR}
STRIP_FROM_INC_PATH = ${PROJECT_SOURCE_DIR}
FULL_PATH_NAMES = YES
JAVADOC_AUTOBRIEF = YES
DISTRIBUTE_GROUP_DOC = YES
EXTRACT_ALL = NO
EXTRACT_PRIVATE = NO
EXTRACT_STATIC = YES
EXCLUDE_SYMBOLS = *::detail *::detail::* STRAIT_C_EXPORT
ENABLE_PREPROCESSING = YES
MACRO_EXPANSION = YES
EXPAND_ONLY_PREDEF = YES
PREDEFINED = STRAIT_API= STRAIT_C_EXPORT= __cplusplus
WARN_IF_UNDOCUMENTED = YES
WARN_IF_DOC_ERROR = YES
WARN_NO_PARAMDOC = NO
QUIET = YES
GENERATE_LATEX = NO
HAVE_DOT = NO
")
file(WRITE ${strait_doxygen_dir}/Doxyfile "${strait_doxyfile_common}
OUTPUT_DIRECTORY = ${strait_doxygen_dir}
GENERATE_HTML = YES
WARN_LOGFILE = ${strait_doxygen_dir}/warnings.log
")
file(WRITE ${strait_doxygen_dir}/Doxyfile.check "${strait_doxyfile_common}
OUTPUT_DIRECTORY = ${strait_doxygen_dir}/check
GENERATE_HTML = NO
GENERATE_XML = YES
XML_PROGRAMLISTING = NO
WARN_LOGFILE = ${strait_doxygen_dir}/check-warnings.log
")

add_custom_target(docs
  COMMAND ${STRAIT_DOXYGEN} ${strait_doxygen_dir}/Doxyfile
  COMMAND ${CMAKE_COMMAND} -E echo "API reference: ${strait_doxygen_dir}/html/index.html"
  WORKING_DIRECTORY ${strait_doxygen_dir}
  DEPENDS ${strait_doxygen_inputs}
  COMMENT "Doxygen: the API reference of the public headers"
  VERBATIM)

add_test(NAME docs_api
         COMMAND ${CMAKE_COMMAND} -DDOXYGEN=${STRAIT_DOXYGEN}
                 -DDOXYFILE=${strait_doxygen_dir}/Doxyfile.check
                 -DLOG=${strait_doxygen_dir}/check-warnings.log
                 -P ${PROJECT_SOURCE_DIR}/cmake/Doxygen.cmake)
set_tests_properties(docs_api PROPERTIES LABELS docs TIMEOUT 120)
