# Fails when the committed docs/environment.md differs from what `strait info --markdown` prints
# from the parameter registry (core/param_table.cpp), naming the command that regenerates it.
# cmake -DSTRAIT=<strait binary> -DDOC=<docs/environment.md> -P environment_doc.cmake
execute_process(COMMAND "${STRAIT}" info --markdown OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "`${STRAIT} info --markdown` failed (${rc})")
endif()
file(READ "${DOC}" committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "${DOC} is stale (the registry changed): regenerate it with\n"
                      "  ${STRAIT} info --markdown > ${DOC}\nand commit it.")
endif()
message(STATUS "${DOC} matches the registry")
