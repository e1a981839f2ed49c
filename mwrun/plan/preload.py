"""Which processes start warm: forked from a zygote that has imported ``preload``.

Pure: a command qualifies when it is the interpreter mwrun runs on followed by a script
path or ``-m module`` and nothing else the interpreter would read before the script
(``-c``, ``-O``, ``-X ...`` change what a fresh interpreter is, so those start cold).
Warm starts are the default. ``installed`` and ``same_interpreter`` alone read the
machine (validate's check of a ``preload`` name on the python mwrun runs on; whether a
command's interpreter is that python under another name), and are passed in.
"""

from __future__ import annotations

import importlib.util
import operator
import os
import re
from collections.abc import Callable

# What a topology that says nothing of preload (or ``preload: true``) means: warm
# starts are the default, ``preload: false`` turns them off.
DEFAULT = ("torch",)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_module_name(text: str) -> bool:
    return bool(_MODULE.match(text))


Same = Callable[[str, str], bool]  # whether two paths start the same interpreter


def same_interpreter(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` start the same interpreter on this machine: the same
    file (``VENV/bin/python`` and ``VENV/bin/python3`` are one), found in the same
    folder. The folder counts, not only the file: a virtualenv's python is a link to the
    base interpreter, and what makes it the venv's (its pyvenv.cfg) is found beside the
    path it was started by, so ``/usr/bin/python3`` is not ``VENV/bin/python3``."""
    if a == b:
        return True
    if not (os.path.isabs(a) and os.path.isabs(b)):
        return False  # relative to the process's cwd, or looked up in its PATH: unknown
    try:
        return os.path.samefile(a, b) and \
            os.path.samefile(os.path.dirname(a), os.path.dirname(b))
    except OSError:
        return False


def target(cmd, python: str, same: Same = operator.eq) -> tuple[str, str, list[str]] | None:
    """("script", path, args) or ("module", name, args) for a warm-startable cmd, else None.
    ``same``: whether the cmd's interpreter is ``python`` (names alone, by default)."""
    if len(cmd) < 2 or not same(cmd[0], python):
        return None
    first = cmd[1]
    if first == "-m" and len(cmd) > 2 and is_module_name(cmd[2]):
        return "module", cmd[2], list(cmd[3:])
    if first.startswith("-m") and is_module_name(first[2:]):
        return "module", first[2:], list(cmd[2:])
    if first.startswith("-") or not first:
        return None
    return "script", first, list(cmd[2:])


def why_cold(cmd, python: str, preload: tuple[str, ...], netns: str | None,
             same: Same = operator.eq) -> str | None:
    """Why a process starts the ordinary way, or None when it is forked warm."""
    if not preload:
        return "preload: false"
    if netns:
        return "it runs in a network namespace"
    if not cmd or not same(cmd[0], python):
        return "not the interpreter mwrun runs on"
    if target(cmd, python, same) is None:
        option = cmd[1] if len(cmd) > 1 else ""
        return f"python {option}".strip() if option else "an interactive python"
    return None


def installed(name: str) -> bool:
    """Whether the python mwrun runs on has module ``name``, found without importing
    it: a dotted name counts as found when its top package is (looking up ``a.b``
    would import ``a``)."""
    try:
        return importlib.util.find_spec(name.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def missing(modules, where, has_module) -> list:
    """A diagnostic for each of ``modules`` written in the topology (its position in
    ``where``, as ``preload:NAME``) that ``has_module`` does not find."""
    return [where[f"preload:{m}"].diagnostic(
                f"preload: no module named '{m}' for the python mwrun runs on")
            for m in modules if f"preload:{m}" in where and not has_module(m)]
