"""The GPU suite: what can run on one GPU, skipped (with the command that runs it)
where torch sees no CUDA device, so CI without GPUs stays green.

What one GPU cannot cover: NCCL refuses two ranks of one communicator on the same
GPU, and mwrun gives each GPU to one process only, so no nccl world here has more
than one rank (nccl worlds of several ranks run only where several GPUs are lent).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOW = ("on a machine with a GPU: `pip install --no-deps --no-build-isolation -e .`,"
       " then `python -m pytest tests/gpu -q`")


def missing() -> str | None:
    """Why the suite cannot run here, or None when it can."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    if not dist.is_nccl_available():
        return "this torch build has no NCCL"
    return None


def pytest_collection_modifyitems(config, items):
    why = missing()
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"{why}; the GPU suite runs {HOW}")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
