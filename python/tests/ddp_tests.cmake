# DDP tests of strait's hooks and DDP example (python/strait/torch/hooks.py,
# examples/ddp_gpt.py; python/tests/ddp_test.py says what each case checks): 2 ranks under the
# launcher, Debian's python3-torch, each against torch's own Gloo. Exit 77 is a skip (the message
# names the missing prerequisite). Included from CMakeLists.txt (torch_env, STRAIT_TORCH_PYTHON).
foreach(case backend identical wire dtypes errors)
  set(name torch.ddp_gpt_${case})
  add_test(NAME ${name}
           COMMAND $<TARGET_FILE:strait> run -n 2 --kill-grace 20 --
                   ${STRAIT_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ddp_test.py ${case})
  set_tests_properties(${name} PROPERTIES LABELS "torch;multiprocess" TIMEOUT 180
                                          SKIP_RETURN_CODE 77
                                          ENVIRONMENT "${torch_env};OMP_NUM_THREADS=1")
endforeach()

# DDP without a hook overlaps its bucket allreduces with backward (pending C++ Works,
# python/strait/torch/_work.py), by order of events; and a rank SIGKILLed mid-backward is a named
# error in the survivor's backward (kill_driver.py judges it).
# Both with the compiled extension's Works (when built) and with the Python completer's.
set(torch_ext_env "STRAIT_TEST_TORCH_EXT=0")
if(TARGET strait_torch_ext)
  set(torch_ext_env "STRAIT_TEST_TORCH_EXT=1")
endif()
foreach(mode pending python)
  set(name torch.ddp_overlap_n2)
  if(mode STREQUAL "python")
    set(name torch.ddp_overlap_python_n2)
  endif()
  add_test(NAME ${name}
           COMMAND $<TARGET_FILE:strait> run -n 2 --kill-grace 20 --
                   ${STRAIT_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ddp_overlap.py)
  set_tests_properties(${name} PROPERTIES
                       LABELS "torch;multiprocess" TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT
                       "${torch_env};OMP_NUM_THREADS=1;STRAIT_TORCH_CPP_WORK=${mode};${torch_ext_env}")
endforeach()
add_test(NAME torch.kill_rank_ddp_n2
         COMMAND ${STRAIT_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/kill_driver.py
                 $<TARGET_FILE:strait> ddp)
set_tests_properties(torch.kill_rank_ddp_n2 PROPERTIES
                     LABELS "torch;multiprocess" TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${torch_env};OMP_NUM_THREADS=1")
