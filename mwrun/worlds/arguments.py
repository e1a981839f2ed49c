"""A call's arguments, checked before anything is sent: a wrong one raises ``TypeError``
or ``ValueError`` saying what is wrong, and the world stays healthy (failures.py says
why a failed call's fault is the world's or the caller's)."""

from __future__ import annotations

import torch


def tensor(world: str, value, device, backend: str, what: str = "tensor") -> None:
    if not isinstance(value, torch.Tensor):
        kind = type(value).__name__
        raise TypeError(f"{world}: {what} must be a torch.Tensor, not {kind}")
    if value.device != device:
        raise ValueError(f"{world}: {what} is on {value.device}, but this world's"
                         f" backend {backend} works on {device}")
    if not value.is_contiguous():
        raise ValueError(f"{world}: {what} must be contiguous (call .contiguous())")


def rank(world: str, value, size: int, what: str, own: int | None = None) -> int:
    """A rank of the world (``own``: this member's, which a peer may not be)."""
    if type(value) is int and 0 <= value < size and value != own:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise ValueError(f"{world}: {what} must be a rank in 0..{size - 1}, not {value!r}")
    raise ValueError(f"{world}: {what} {value} is this process's own rank")


def tensors(world: str, values, like, size: int, device, backend: str, what: str) -> list:
    """One tensor per rank, each shaped and typed as ``like``."""
    if not isinstance(values, list | tuple) or len(values) != size:
        count = len(values) if isinstance(values, list | tuple) else type(values).__name__
        raise ValueError(f"{world}: {what} must be a list of {size} tensors"
                         f" (one per rank), not {count}")
    for i, t in enumerate(values):
        tensor(world, t, device, backend, f"{what}[{i}]")
        if t.shape != like.shape or t.dtype != like.dtype:
            raise ValueError(f"{world}: {what}[{i}] is {t.dtype} {tuple(t.shape)}, the"
                             f" tensor is {like.dtype} {tuple(like.shape)}")
    return list(values)
