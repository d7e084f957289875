# DDP tests of strait's torch integration (tools/python/strait/torch/hooks.py, examples/ddp_gpt.py):
# 2 ranks under the launcher, Debian's python3-torch at /usr/bin/python3 (the `python3` on PATH may
# have no torch). Each compares against torch's own Gloo backend; exit 77 is a skip (a
# prerequisite from another branch is missing: the message names it).
foreach(case backend identical wire dtypes errors)
  set(name torch_ddp_${case})
  add_test(NAME ${name}
           COMMAND $<TARGET_FILE:strait> run -n 2 --kill-grace 20 --
                   /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/torch/ddp_test.py ${case})
  set_tests_properties(${name} PROPERTIES LABELS "torch;multiprocess" TIMEOUT 180
                                          SKIP_RETURN_CODE 77
                                          ENVIRONMENT
                                          "PYTHONPATH=${PROJECT_SOURCE_DIR}/tools/python;STRAIT_LIBRARY=$<TARGET_FILE:strait_shared>;OMP_NUM_THREADS=1")
endforeach()
