"""On PYTHONPATH, makes ``import torch`` run SLOW_TORCH_IMPORT seconds late and notes
when it began (SLOW_TORCH_MARK): a stand-in for a machine where importing torch is slow.
The wait is in the module's execution, where a real import spends its time (a finder
runs under the global import lock and would hold up every import in the process)."""

import importlib.machinery
import os
import sys
import time

DELAY = float(os.environ.get("SLOW_TORCH_IMPORT") or 0)


class _SlowLoader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        time.sleep(DELAY)
        with open(os.environ["SLOW_TORCH_MARK"], "a") as mark:
            mark.write(f"{time.time()}\n")
        self.loader.exec_module(module)


class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name != "torch" or not DELAY:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _SlowLoader(spec.loader)
        return spec


sys.meta_path.insert(0, _Slow())
