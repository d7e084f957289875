# torch's own distributed suite (DistributedTest) against strait: the tests Gloo passes on this
# machine (gloo_passes_n*.txt, written by compare.py) must pass on strait too, Gloo's selection
# (suite.py). Sharded so `ctest -j` runs the parts side by side; WORLD_SIZE 3 is labelled slow.
# Included from python/tests/CMakeLists.txt (torch_env, STRAIT_TORCH_PYTHON come from there).
set(suite_dir ${CMAKE_CURRENT_LIST_DIR})
function(strait_torch_suite ranks shards labels)
  set(list ${suite_dir}/gloo_passes_n${ranks}.txt)
  math(EXPR last "${shards} - 1")
  foreach(i RANGE ${last})
    set(name torch.suite_n${ranks}_${i})
    add_test(NAME ${name}
             COMMAND ${STRAIT_TORCH_PYTHON} ${suite_dir}/run_suite.py --backend strait
                     --select gloo --world-size ${ranks} --only ${list} --expect ${list}
                     --shard ${i}/${shards})
    # COST: a fresh build has no timing history, and ctest would start these minute-long shards
    # last, after every short test, leaving one core idle at the end; started first they overlap
    # the short tests (a fresh clone's ctest: 601 s with them last).
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT 900 COST 1000
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${torch_env}")
  endforeach()
endfunction()

strait_torch_suite(2 4 "torch;suite")
strait_torch_suite(3 4 "torch;suite;slow")
