"""torch's own distributed suite (DistributedTest, torch.testing._internal) as one test class,
driven the way torch-ucc drove it. Imported by run_suite.py in the parent and again by every
rank torch's harness spawns ("spawn" start method), so all configuration comes from the
environment, set by run_suite.py before the first import:

  TORCH_SUITE_SELECT   the backend name the suite's decorators see when the class is built
                        (which tests run or skip): "gloo" or "strait"
  TORCH_SUITE_BACKEND  the backend the ranks really create their groups with: "gloo" or
                        "strait" (the module's BACKEND global is set to it after the import, so
                        init_process_group and every branch inside a test body see it)
  WORLD_SIZE, TEMP_DIR  as the suite reads them

strait is given the feature flags torch gives gloo ("gpu", "cuda", "ddp", "subgroup") and the
"plugin" flag torch's suite has for out-of-tree backends.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "stubs"))  # expecttest (not packaged in Debian 12)

SELECT = os.environ["TORCH_SUITE_SELECT"]
RUN = os.environ["TORCH_SUITE_BACKEND"]
os.environ["BACKEND"] = SELECT  # distributed_test reads it at import

import torch.distributed as dist  # noqa: E402

import strait.torch  # noqa: E402,F401  (registers "strait": the feature checks name it)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

for feature in ("gpu", "cuda", "ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[feature].add("strait")

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

import logging  # noqa: E402

distributed_test.BACKEND = RUN
logging.getLogger().setLevel(logging.WARNING)  # common_distributed sets INFO: a line per rank


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
