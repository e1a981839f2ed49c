"""A run's history file (mwrun/head/observe/history.py writes it) read back: its
records, each checked for the shape mwrun writes, and notes on what was left out.
Pure but for ``load``'s reading of the two files."""

from __future__ import annotations

import json
from pathlib import Path

from mwrun.errors import RunError
from mwrun.schema import CALLS, FAULT_ID, FAULT_IDS, HISTORY, HISTORY_ROTATED, RATES, WAITS
from mwrun.schema import Event as E


def load(run_dir: Path, run_id: str) -> tuple[list[dict], list[str]]:
    """The history's records (rotated part first) and notes on what could not be read."""
    paths = [run_dir / HISTORY_ROTATED, run_dir / HISTORY]
    if not paths[1].exists():
        raise RunError(f"run {run_id} has no history ({paths[1]} is missing): it was"
                       " started by an mwrun without history, or the file was removed")
    records, notes, bad, shapeless = [], [], 0, 0
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RunError(f"cannot read {path}: {exc.strerror}") from None
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                if i == len(lines) - 1:  # no newline after it: cut short mid-write
                    notes.append(f"{path.name} ends in a line cut short; it was left out")
                else:
                    bad += 1
                continue
            if well_shaped(record):
                records.append(record)
            else:
                shapeless += 1
    if bad:
        notes.append(f"{bad} unreadable line(s) in the history were left out")
    if shapeless:
        notes.append(f"{shapeless} line(s) of the history not shaped as mwrun writes them"
                     " were left out")
    return records, notes


_NUMBER = (int, float)
_TEXT_OR_NONE = (str, type(None))
# What each record kind must hold for the readers (timeline, report, drill) to read it;
# a record without it is left out, said in a note, never a traceback.
SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    E.START: {"worlds": (dict,)},
    E.SPAWN: {"process": (str,), "restarts": (int,)},
    E.SIGNAL: {"process": (str,), "signal": (str,), "why": (str,)},
    E.HANG: {"process": (str,)},
    E.EXIT: {"process": (str,)},
    E.BREAK: {"world": (str,), "reason": _TEXT_OR_NONE},
    E.FORM: {"world": (str,), "generation": (int,)},
    E.CLOSE: {"world": (str,)},
    E.END: {"state": (str,)},
    E.FAULT: {"world": (str,), "phases": (dict,)},
    E.DRILL: {},
    E.SCALE: {"phases": (dict,)},
    E.ADD: {"world": (str,), "members": (list,)},
    E.RESIZE: {"world": (str,), "members": (list,)},
    E.DRAIN: {"world": (str,)},
    E.REMOVE: {"world": (str,)},
    E.SLOW: {"world": (str,), "member": _TEXT_OR_NONE},
    E.LATE: {"process": (str,), "world": (str,)},
}


def well_shaped(record: object) -> bool:
    """Whether a history line is a record as mwrun writes them (history.py): a time,
    and for its kind the fields the readers use, of their types; the fault ids, rate
    and count samples, a start's worlds and a fault's phases as they are written. An
    event of a kind this mwrun does not know is kept (and not read)."""
    if not isinstance(record, dict) or not isinstance(record.get("t"), _NUMBER):
        return False
    kind = record.get("event", "")
    if not isinstance(kind, str):
        return False
    for key, types in SHAPES.get(kind, {}).items():
        if not isinstance(record.get(key), types):
            return False
    if kind == E.START and not all(isinstance(v, list) and all(isinstance(m, str) for m in v)
                                   for v in record["worlds"].values()):
        return False
    if kind in (E.FAULT, E.SCALE) and not all(
            isinstance(t, (*_NUMBER, type(None))) for t in record["phases"].values()):
        return False
    ids = record.get(FAULT_IDS, {})
    if not isinstance(record.get(FAULT_ID, 0), int) or not isinstance(ids, dict) \
            or not all(isinstance(i, int) for i in ids.values()):
        return False
    return all(_pairs(record.get(key, {})) for key in (RATES, CALLS)) and \
        isinstance(record.get(WAITS, {}), dict)


def _pairs(samples: object) -> bool:
    """{world: [number, number]}: a rate or count sample."""
    return isinstance(samples, dict) and all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, _NUMBER) for x in v)
        for v in samples.values())
