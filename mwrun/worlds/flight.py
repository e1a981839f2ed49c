"""torch's Flight Recorder, read for a post-mortem bundle: the last collectives of every
group of this process, each with its sequence number and state (scheduled, started,
completed), and each group's last enqueued, started and completed call. It is what
shows that a member never *entered* call #812 while its peers wait in it.

torch records only where ``TORCH_FR_BUFFER_SIZE`` (or its older name
``TORCH_NCCL_TRACE_BUFFER_SIZE``) is above 0 when a group is made; the launcher sets it
for members of nccl worlds (``nccl.member_env``), and a user may set it for any world
(torch 2.13's gloo records too). mwrun names each group ``WORLD-gGEN`` (backends.py),
so the dump says which world each call was in.

The dump goes up the link in the ``stacks_told`` line, so it is bounded (``fit``): the
last entries are what a hang shows, the older ones go first.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence

from mwrun.worlds.nccl import FLIGHT_RECORDER as BUFFER
from mwrun.worlds.nccl import FLIGHT_RECORDER_OLD as BUFFER_OLD

MAX_ENTRIES = 256  # sent up, the newest
MAX_BYTES = 256 * 1024  # as JSON: beside the stacks (512 KiB), under the 1 MiB line
WITHIN = 0.5  # seconds the link's thread waits for a dump (``within``)


def within(seconds: float = WITHIN, environ: Mapping[str, str] | None = None,
           readers: Sequence[Callable[..., str | bytes]] | None = None) -> dict:
    """``dump``, waited for at most ``seconds``: the link's thread asks, and its beats
    must go on whatever torch does (an nccl dump asks each communicator for its state,
    and a hung one may never answer). The dump goes on in its own daemon thread."""
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(dump(environ, readers)),
                              name="mwrun-flight-recorder", daemon=True)
    worker.start()
    worker.join(seconds)
    return dict(done) if not worker.is_alive() else \
        {"off": f"the Flight Recorder's dump did not come within {seconds:g}s"}


def size(environ: Mapping[str, str] | None = None) -> int:
    """The recorder's size as torch reads it (0: off)."""
    environ = os.environ if environ is None else environ
    try:
        return max(int(environ.get(BUFFER, environ.get(BUFFER_OLD, "0"))), 0)
    except ValueError:
        return 0


# torch keeps two recorders, read by two calls: ProcessGroupNCCL's own (CUDA events:
# where nccl collectives go; only in builds with NCCL) and the generic one (gloo and
# the CPU). Reading only the generic one gives an nccl member's dump with no nccl call.
RECORDERS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")


def recorders() -> list[Callable[..., str | bytes]]:
    """The dump calls of this torch's recorders, of ``RECORDERS``."""
    from torch._C import _distributed_c10d
    found = (getattr(_distributed_c10d, name, None) for name in RECORDERS)
    return [read for read in found if read is not None]


def dump(environ: Mapping[str, str] | None = None,
         readers: Sequence[Callable[..., str | bytes]] | None = None) -> dict:
    """``{"entries", "pg_config", "pg_status", "dropped"}`` of every recorder, the
    entries in the order they were made; or ``{"off": why}`` where there is nothing
    to read. Never raises (it runs on the link's thread)."""
    if not size(environ):
        return {"off": f"torch's Flight Recorder is off ({BUFFER} is not set above 0)"}
    try:
        readers = recorders() if readers is None else readers
    except Exception as exc:  # a torch without c10d: said, never the link's end
        return {"off": f"this torch has no Flight Recorder ({type(exc).__name__})"}
    if not readers:
        return {"off": "this torch has no Flight Recorder"}
    docs, failed = [], []
    for read in readers:
        try:
            # positional: the two calls name their arguments alike only in some torches
            docs.append(json.loads(read(True, False)))  # with collectives, not only active
        except Exception as exc:  # a dump torch could not make: said, never the link's end
            failed.append(f"{type(exc).__name__}: {exc}"[:240])
    if not docs:
        return {"off": f"the Flight Recorder could not be read: {'; '.join(failed)}"[:500]}
    entries = sorted((e for d in docs for e in d.get("entries") or []),
                     key=lambda e: e.get("time_created_ns") or 0)
    kept = {"version": docs[0].get("version"),
            **{key: {k: v for d in docs for k, v in (d.get(key) or {}).items()}
               for key in ("pg_config", "pg_status")},  # per group: groups are apart
            "entries": entries[-MAX_ENTRIES:], "dropped": max(len(entries) - MAX_ENTRIES, 0)}
    if failed:
        kept["unread"] = failed
    return fit(kept)


def fit(doc: dict, limit: int = MAX_BYTES) -> dict:
    """``doc`` with its oldest entries dropped until its JSON fits ``limit``."""
    while len(json.dumps(doc)) > limit and doc["entries"]:
        cut = max(len(doc["entries"]) // 2, 1)
        doc = {**doc, "entries": doc["entries"][cut:], "dropped": doc["dropped"] + cut}
    return doc
