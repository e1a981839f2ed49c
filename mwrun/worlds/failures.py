"""Whose fault a failed call is: the world's (it breaks) or the caller's (raised as is).

Decided by torch's exception types and by where the call failed, never by message
text, so "Cannot use ReduceOp.BAND with NCCL" stays an error of the arguments:

* ``torch.distributed.DistError`` and its kinds (``DistBackendError`` from a
  communicator, ``DistNetworkError`` from a lost connection, ``DistStoreError`` from
  the store) are the world's, on any backend.
* nccl reports every communicator failure as a ``DistError``; anything else it raises
  (``ValueError`` for an unsupported op, ``RuntimeError`` from a failed check, a CUDA
  error) is the caller's.
* gloo's own transport errors (a closed pair, its timeout) reach Python as a plain
  ``RuntimeError``, so there the stage decides: a collective is only queued when it
  is issued, so what fails then is torch's check of its arguments; what fails when a
  collective is waited for, or when a send/recv is issued (gloo posts it to the pair
  at once), is the transport. The few argument errors gloo only finds while running a
  collective are checked before it is issued (``check_reduce``).
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

ISSUE, ISSUE_P2P, WAIT = "issue", "issue-p2p", "wait"
_BITWISE = (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR)
# Ops that torch's all_reduce refuses on complex tensors (distributed_c10d.supports_complex).
_NOT_COMPLEX = (dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT, *_BITWISE)


def is_worlds(exc: BaseException, backend: str, stage: str) -> bool:
    """True if ``exc``, raised by a call of a healthy-looking world at ``stage``, means
    the world is broken; False if it is the caller's to handle."""
    if isinstance(exc, dist.DistError):
        return True
    if backend != "gloo" or type(exc) is not RuntimeError:
        return False  # nccl's own failures are DistErrors; subclasses (CUDA, OOM) are not
    return stage in (WAIT, ISSUE_P2P)


def store_timed_out(exc: BaseException) -> bool:
    """A store call that ran out of time (worth waiting again), not a lost store."""
    return isinstance(exc, TimeoutError | dist.DistStoreError)


def summarize(exc: BaseException) -> str:
    """gloo's '[/path/pair.cc:553] Connection closed by peer [addr]. This is ...' -> the gist."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    message = re.sub(r"^\[[^\]]*\]\s*", "", message)
    message = message.split(". This is typically")[0]
    if "Application timeout" in message or re.search(r"Timed out waiting \d+ms", message):
        return "a call timed out waiting for a peer (the world's timeout)"
    return message


def noticed(rank: int, exc: BaseException, call: str | None = None,
            for_s: float | None = None) -> str:
    """A failed call's reason, said as who noticed what: "rank 0 lost its connection to a
    peer (...)", never "rank 0: Connection closed by peer", which reads as if rank 0
    were the one that died; a timeout names the call and how long it waited, when the
    caller knows (inflight.py), which a post-mortem's culprit line reads. (Wording only:
    what breaks a world is decided above.)"""
    gist = summarize(exc)
    if call is not None and for_s is not None and gist.startswith("a call timed out"):
        gist = f"its {call} timed out after {for_s:.1f}s waiting for a peer (the world's timeout)"
    lowered = gist.lower()
    if "closed by peer" in lowered or "reset by peer" in lowered or "broken pipe" in lowered:
        return f"rank {rank} lost its connection to a peer ({gist})"
    if "timed out" in gist and "waiting for a peer" in gist:
        return f"rank {rank}: {gist}"
    return f"rank {rank} saw its call fail: {gist}"


def check_reduce(op, tensor: torch.Tensor, backend: str, world: str) -> None:
    """Refuse, before anything is sent, the reductions gloo would only refuse while
    running them (where its error cannot be told from a failed peer)."""
    name = _op_name(op)
    if backend == "gloo" and name == "PREMUL_SUM":
        raise ValueError(f"{world}: ReduceOp.PREMUL_SUM works with nccl only, not gloo")
    if tensor.is_complex() and any(_same(op, o) for o in _NOT_COMPLEX):
        raise ValueError(f"{world}: ReduceOp.{name} does not work on complex tensors"
                         f" ({tensor.dtype})")
    integral = not (tensor.is_floating_point() or tensor.is_complex())
    if any(_same(op, o) for o in _BITWISE) and not integral:
        raise ValueError(f"{world}: ReduceOp.{name} needs an integer or bool tensor,"
                         f" not {tensor.dtype}")


def _same(op, kind) -> bool:
    try:
        return op == kind
    except TypeError:
        return False


def _op_name(op) -> str:
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if _same(op, getattr(dist.ReduceOp, name)):
            return name
    return str(op)
