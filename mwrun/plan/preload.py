"""Which processes start warm: forked from a zygote that has imported ``preload``.

Pure: a command qualifies when it is the interpreter mwrun runs on followed by a script
path or ``-m module`` and nothing else the interpreter would read before the script
(``-c``, ``-O``, ``-X ...`` change what a fresh interpreter is, so those start cold).
"""

from __future__ import annotations

import re

DEFAULT = ("torch",)  # what ``preload: true`` means
# Warm starts are opt-in: with them on, the examples' test of the resnet drill fails
# (it expects the other pipeline to serve a batch before the killed one re-forms, and a
# warm restart is quicker than that). The README says so.
OFF = ()
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_module_name(text: str) -> bool:
    return bool(_MODULE.match(text))


def target(cmd, python: str) -> tuple[str, str, list[str]] | None:
    """("script", path, args) or ("module", name, args) for a warm-startable cmd, else None."""
    if len(cmd) < 2 or cmd[0] != python:
        return None
    first = cmd[1]
    if first == "-m" and len(cmd) > 2 and is_module_name(cmd[2]):
        return "module", cmd[2], list(cmd[3:])
    if first.startswith("-m") and is_module_name(first[2:]):
        return "module", first[2:], list(cmd[2:])
    if first.startswith("-") or not first:
        return None
    return "script", first, list(cmd[2:])


def why_cold(cmd, python: str, preload: tuple[str, ...], netns: str | None) -> str | None:
    """Why a process starts the ordinary way, or None when it is forked warm."""
    if not preload:
        return "no preload"
    if netns:
        return "it runs in a network namespace"
    if not cmd or cmd[0] != python:
        return "not the interpreter mwrun runs on"
    if target(cmd, python) is None:
        option = cmd[1] if len(cmd) > 1 else ""
        return f"python {option}".strip() if option else "an interactive python"
    return None
