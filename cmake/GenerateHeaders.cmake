# cmake -DSOURCE_DIR=... -DOUTPUT_DIR=... -DMAP_FILE=... -P GenerateHeaders.cmake
# Writes the installed copy of each public header (cmake/Package.cmake): the same text, with every
# #include of a project header rewritten to its installed path ("comm/work.h" ->
# "strait/comm/work.h"). Fails, naming both, when a public header includes a header of the tree
# (or any other quoted header) that is not public: the installed set must compile on its own.
include(${MAP_FILE})  # header_sources, header_destinations: parallel lists
foreach(src dst IN ZIP_LISTS header_sources header_destinations)
  file(READ ${SOURCE_DIR}/${src} text)
  string(REGEX MATCHALL "#[ \t]*include[ \t]*\"[^\"]+\"" includes "${text}")
  foreach(directive IN LISTS includes)
    string(REGEX REPLACE ".*\"([^\"]+)\"" "\\1" included "${directive}")
    list(FIND header_sources "${included}" index)
    if(index LESS 0)
      message(FATAL_ERROR
        "${src} includes \"${included}\", which is not a public header, so the installed "
        "${dst} would not compile. Add it to STRAIT_PUBLIC_HEADERS in cmake/Package.cmake (and "
        "mark its exported declarations STRAIT_API, core/export.h), or drop the include.")
    endif()
    list(GET header_destinations ${index} installed)
    string(REPLACE "${directive}" "#include \"${installed}\"" text "${text}")
  endforeach()
  set(out ${OUTPUT_DIR}/${dst})
  set(old "")
  if(EXISTS ${out})
    file(READ ${out} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${out} "${text}")
  else()
    file(TOUCH_NOCREATE ${out})  # up to date for the build tool
  endif()
endforeach()
