"""mwrun: several independent PyTorch process groups ("worlds") per job.

The command line (``mwrun launch``) plans, starts and supervises a job; the library
(``import mwrun``) joins the worlds a process belongs to. The library names below are
loaded on first use so that ``import mwrun`` — and with it the CLI — never imports
torch unless a script actually asks for a world.
"""

from mwrun.errors import BrokenWorldError, MwrunError, WorldClosedError, WorldEnded

__version__ = "0.1.0"

__all__ = [
    "BrokenWorldError",
    "Job",
    "MwrunError",
    "ReduceOp",
    "Work",
    "World",
    "WorldClosedError",
    "WorldEnded",
    "WorldEvent",
    "WorldSpec",
    "__version__",
    "from_worldinfo",
    "init",
]

_LAZY = {
    "init": "mwrun.worlds.job",
    "Job": "mwrun.worlds.job",
    "WorldSpec": "mwrun.worlds.worldspec",
    "from_worldinfo": "mwrun.worlds.worldspec",
    "World": "mwrun.worlds.world",
    "WorldEvent": "mwrun.worlds.events",
    "Work": "mwrun.worlds.work",
}


def __getattr__(name: str):
    if name == "ReduceOp":
        import torch.distributed

        return torch.distributed.ReduceOp
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mwrun' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
