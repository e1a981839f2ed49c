"""The package layout is the architecture: these tests hold its boundaries.

``worlds`` (inside the user's process) carries nothing of the launcher; ``plan`` is pure
and knows nothing that runs; ``host`` only does; ``head`` decides but never reaches into
the library or the command line; and whatever ``mwrun --help``, ``validate`` or
``status`` imports stays free of torch.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mwrun

PACKAGE = Path(mwrun.__file__).parent
STAR = str(Path(__file__).parents[2] / "configs" / "star.yaml")
SUBPACKAGES = ("worlds", "plan", "host", "head", "cli")

# What each part may not import (inside functions too: lazy imports count).
FORBIDDEN = {
    "worlds": ("mwrun.plan", "mwrun.host", "mwrun.head", "mwrun.cli"),
    "plan": ("mwrun.worlds", "mwrun.host", "mwrun.head", "mwrun.cli", "torch"),
    "host": ("mwrun.worlds", "mwrun.plan", "mwrun.head", "mwrun.cli", "torch"),
    "head": ("mwrun.worlds", "mwrun.cli"),
    "shared": ("mwrun.worlds", "mwrun.plan", "mwrun.host", "mwrun.head", "mwrun.cli",
               "torch"),
}
SHARED = ("errors.py", "machine.py", "protocol.py", "terminal.py", "schema.py", "runs.py")
LONGEST_MODULE = 400


def imported_names(path: Path) -> set[str]:
    """Every module a file imports, written out in full (``from mwrun.head import
    rundir`` counts as ``mwrun.head.rundir``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def violations(part: str, files: list[Path]) -> list[str]:
    found = []
    for path in files:
        for name in sorted(imported_names(path)):
            for banned in FORBIDDEN[part]:
                if name == banned or name.startswith(banned + "."):
                    found.append(f"{path.name} imports {name}")
    return found


def part_files(part: str) -> list[Path]:
    if part == "shared":
        return [PACKAGE / name for name in SHARED]
    return sorted((PACKAGE / part).glob("*.py"))


@pytest.mark.parametrize("part", [*SUBPACKAGES[:-1], "shared"])
def test_each_part_imports_only_what_it_may(part):
    assert part_files(part), f"no modules found for {part}"
    assert violations(part, part_files(part)) == []


def test_the_check_sees_a_forbidden_import(tmp_path):
    # A lazy import deep inside a function is still caught.
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    if True:\n        from mwrun.head import rundir\n")
    assert violations("worlds", [bad]) == ["bad.py imports mwrun.head",
                                           "bad.py imports mwrun.head.rundir"]
    assert violations("head", [bad]) == []


def test_every_module_sits_in_a_part_and_is_short():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == sorted(["__init__.py", "__main__.py", *SHARED])
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"
                  ) == sorted(SUBPACKAGES)
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines <= LONGEST_MODULE, f"{path.relative_to(PACKAGE)}: {lines} lines"
    for part in SUBPACKAGES:
        doc = ast.get_docstring(ast.parse((PACKAGE / part / "__init__.py").read_text()))
        assert doc and "import" in doc, f"mwrun/{part}/__init__.py must say what it may import"


def test_help_validate_and_status_do_not_import_torch_or_matplotlib(tmp_path):
    run = tmp_path / "runs" / "done-1"
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({
        "run_id": "done-1", "name": "done", "state": "finished", "supervisor_pid": None,
        "started_at": 1.0, "exit_code": 0, "processes": [], "worlds": []}))
    code = ("import sys\nfrom click.testing import CliRunner\nfrom mwrun.cli import main\n"
            f"r = CliRunner().invoke(main, ['validate', {STAR!r}])\n"
            "assert r.exit_code == 0, r.output\n"
            "r = CliRunner().invoke(main, ['--help'])\n"
            "assert 'Examples' in r.output\n"
            "r = CliRunner().invoke(main, ['status', 'done-1'])\n"
            "assert r.exit_code == 0 and 'finished' in r.output, r.output\n"
            "r = CliRunner().invoke(main, ['status', 'done-1', '--json'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch',"
            " 'matplotlib')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={"MWRUN_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_public_api_is_unchanged():
    for name in ("init", "WorldSpec", "BrokenWorldError", "ReduceOp", "from_worldinfo", "Job",
                 "World", "Work", "MwrunError"):
        assert getattr(mwrun, name) is not None
    assert mwrun.BrokenWorldError.__module__ == "mwrun.errors"
