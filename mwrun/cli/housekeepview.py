"""How ``mwrun runs`` and ``mwrun clean`` word the runs folder: the table, the JSON
objects, one run in a line and what a clean did."""

from __future__ import annotations

import time

from mwrun.records import Choice, Entry
from mwrun.terminal import count, seconds, size
from mwrun.terminal import table as columns

UNREADABLE = "unreadable"  # the table's word for a run whose state cannot be read


def duration(entry: Entry, now: float) -> float | None:
    """How long it ran (until its head's last word), or has run so far when live."""
    if entry.state is None:
        return None
    end = now if not entry.finished else entry.ended_at
    return None if end is None else max(end - entry.started_at, 0.0)


def table(listed: list[tuple[Entry, dict | None]], now: float) -> str:
    rows = []
    for entry, doc in listed:
        took = duration(entry, now)
        code = (doc or {}).get("exit_code")
        rows.append([entry.run_id, str((doc or {}).get("name", "-")),
                     entry.state or UNREADABLE,
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.started_at)),
                     "-" if took is None else seconds(took), "-" if code is None else str(code),
                     size(entry.bytes)])
    text = columns(["RUN", "NAME", "STATE", "STARTED", "DURATION", "EXIT", "SIZE"], rows)
    live = sum(1 for e, _ in listed if e.live)
    total = sum(e.bytes for e, _ in listed)
    notes = [f"{e.run_id}: {e.held}" for e, _ in listed if e.held and not e.live]
    return "\n".join([text, "", f"{count(len(listed), 'run')} ({live} live),"
                                f" {size(total)} on disk", *notes])


def as_json(entry: Entry, doc: dict | None, now: float, path: str) -> dict:
    """One run for ``mwrun runs --json``: ``state`` is null where it cannot be read
    (``problem`` says why); ``live``: its head runs; ``held``: why ``clean`` keeps it
    whatever its age (null: it may go)."""
    took = duration(entry, now)
    return {"run_id": entry.run_id, "name": (doc or {}).get("name"), "state": entry.state,
            "live": entry.live, "started_at": entry.started_at,
            "ended_at": entry.ended_at if entry.finished else None,
            "duration_s": None if took is None else round(took, 3),
            "exit_code": (doc or {}).get("exit_code"), "bytes": entry.bytes, "path": path,
            "held": entry.held, **({"problem": entry.held} if entry.state is None else {})}


def age(value: float) -> str:
    """604800 -> '7d', 43200 -> '12h', 5400 -> '90m'; as the options are written."""
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= length and value % length == 0:
            return f"{value / length:.0f}{unit}"
    return f"{value:g}s"


def one(entry: Entry) -> str:
    return f"{entry.run_id} ({entry.state}, {size(entry.bytes)})"


def summary(choice: Choice, removed: int, freed: int, dry_run: bool,
            listed: list[Entry]) -> str:
    rules = (f"the newest {count(choice.keep, 'finished run')}" if choice.keep is not None
             else "the finished runs") + (f" that ended within {age(choice.older_than)}"
                                          if choice.older_than is not None else "")
    rules = "no finished run" if choice.keep == 0 else rules
    live = sum(1 for e in listed if e.live)
    kept = f"kept {rules}" + (f"; {live} live" if live else "")
    if not choice.remove:
        return f"nothing to clean ({count(len(listed), 'run')}; {kept})"
    if dry_run:
        return (f"would remove {count(len(choice.remove), 'run')}, freeing {size(freed)};"
                f" nothing was removed (--dry-run); {kept}")
    return f"removed {count(removed, 'run')}, freed {size(freed)}; {kept}"
