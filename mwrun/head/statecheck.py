"""Is a state.json one mwrun can read? A pure check of the status document's shape.

Run folders outlive the processes that wrote them: a disk filled up, a hand edited
one, an older mwrun wrote it. Every command reads state.json through this check, so
a damaged one is named and skipped rather than crashing the command.
"""

from __future__ import annotations

_NUMBER = (int, float)
_RUN = {"run_id": str, "name": str, "state": str, "supervisor_pid": (int, type(None)),
        "started_at": _NUMBER, "processes": list, "worlds": list}
_RUN_OPTIONAL = {"control": str}  # a run that never started has no control socket
_PROCESS = {"name": str, "host": str, "pid": (int, type(None)), "state": str,
            "exit_code": (int, type(None)), "restarts": int, "worlds": dict}
_WORLD = {"name": str, "state": str, "generation": int, "breaks": int, "backend": str,
          "port": int, "members": list}
_POSITIVE = ("supervisor_pid", "pid")


def _fields(doc, fields: dict, what: str, optional: dict | None = None) -> str | None:
    if not isinstance(doc, dict):
        return f"{what} is {type(doc).__name__}, not an object"
    for key, kind in {**fields, **(optional or {})}.items():
        if key not in doc:
            if key in fields:
                return f"{what} has no '{key}'"
            continue
        value = doc[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"{what}: '{key}' is {value!r}"
        if key in _POSITIVE and value is not None and value <= 0:
            return f"{what}: '{key}' is {value!r}, not a process id"
    return None


def problem(doc) -> str | None:
    """What makes ``doc`` unusable as a status document, or None if nothing does."""
    found = _fields(doc, _RUN, "the state", _RUN_OPTIONAL)
    if found:
        return found
    for index, proc in enumerate(doc["processes"]):
        found = _fields(proc, _PROCESS, f"process {index}")
        if found:
            return found
    for index, world in enumerate(doc["worlds"]):
        found = _fields(world, _WORLD, f"world {index}")
        if found:
            return found
    return None
