"""The package layout is the architecture: these tests hold its boundaries.

``worlds`` (inside the user's process) carries nothing of the launcher; ``plan`` is pure
and knows nothing that runs; ``host`` only does; ``head`` decides but never reaches into
the library or the command line; ``schema`` (what a run writes) and ``runs`` (a run
folder read back, its supervisor asked) are shared by the head and the command line,
which imports the head only to launch; ``records`` (a run's history read into faults,
phases, pace, drills and scale operations) prints nothing and acts on nothing, and the
command line reads it through its public names only; whatever ``mwrun --help``, ``validate`` or
``status`` imports stays free of torch, and ``status``, ``logs``, ``report``,
``kill-world`` and ``stop`` free of the head; no state name is spelled as a string
outside ``schema``.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mwrun
from mwrun import protocol, records, schema
from mwrun.host import frames

PACKAGE = Path(mwrun.__file__).parent
STAR = str(Path(__file__).parents[2] / "configs" / "star.yaml")
SUBPACKAGES = ("worlds", "plan", "membership", "host", "head", "keeper", "records", "cli")

# What each part may not import (inside functions too: lazy imports count).
FORBIDDEN = {
    "worlds": ("mwrun.plan", "mwrun.host", "mwrun.head", "mwrun.cli"),
    "plan": ("mwrun.worlds", "mwrun.membership", "mwrun.host", "mwrun.head", "mwrun.cli",
             "torch"),
    # membership decides what the job should be; the head applies it through the hands
    "membership": ("mwrun.worlds", "mwrun.host", "mwrun.head", "mwrun.cli", "torch"),
    "host": ("mwrun.worlds", "mwrun.plan", "mwrun.membership", "mwrun.head", "mwrun.cli",
             "torch"),
    # the head never imports torch: the worlds' stores are its keeper's
    "head": ("mwrun.worlds", "mwrun.cli", "torch"),
    "keeper": ("mwrun.worlds", "mwrun.host", "mwrun.head", "mwrun.membership", "mwrun.cli"),
    # records reads what a run wrote: it prints nothing and acts on nothing
    "records": ("mwrun.head", "mwrun.host", "mwrun.cli", "mwrun.worlds", "mwrun.plan",
                "mwrun.membership", "torch", "matplotlib", "click"),
    "cli": ("mwrun.worlds", "mwrun.membership"),
    "shared": ("mwrun.worlds", "mwrun.plan", "mwrun.host", "mwrun.head", "mwrun.cli",
               "torch"),
}
SHARED = ("errors.py", "launchspec.py", "machine.py", "protocol.py", "terminal.py", "schema.py",
          "runs.py", "lookups.py", "elfslot.py", "stacktext.py")
# The shared modules that the others build on import fewer still.
SHARED_IMPORTS = {"schema.py": set(), "runs.py": {"mwrun", "mwrun.schema", "mwrun.errors"},
                  "stacktext.py": set(), "elfslot.py": set(),
                  "lookups.py": {"mwrun", "mwrun.elfslot"}}
LONGEST_CLASS = 200  # lines of one class, its docstring included: one job each


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
    return sorted((PACKAGE / part).rglob("*.py"))


@pytest.mark.parametrize("part", [*SUBPACKAGES, "shared"])
def test_each_part_imports_only_what_it_may(part):
    assert part_files(part), f"no modules found for {part}"
    assert violations(part, part_files(part)) == []


def test_the_schema_imports_nothing_and_the_reader_only_the_schema():
    for name, allowed in SHARED_IMPORTS.items():
        found = {".".join(n.split(".")[:2]) for n in imported_names(PACKAGE / name)
                 if n.split(".")[0] == "mwrun"}
        assert found - allowed == set(), name


def test_the_command_line_imports_the_head_only_to_launch():
    """... or to adopt a run: the two commands whose process becomes a head."""
    found = []
    for path in part_files("cli"):
        tree = ast.parse(path.read_text(), str(path))
        allowed = {id(node) for fn in ast.walk(tree)
                   if isinstance(fn, ast.FunctionDef) and fn.name in ("launch", "adopt")
                   for node in ast.walk(fn)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in allowed:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else [node.module or ""]
                found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                          if n == "mwrun.head" or n.startswith("mwrun.head.")]
    assert found == []


def records_internals(files: list[Path]) -> list[str]:
    """Where a module reaches past the history reader's public names (what
    ``mwrun/records/__init__.py`` re-exports): one of its modules, an underscored name,
    or a name it does not export, imported or read as ``records.NAME``."""
    public = set(records.__all__)
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for name in sorted(imported_names(path)):
            parts = name.split(".")
            if parts[:2] == ["mwrun", "records"] and len(parts) > 2 and \
                    (len(parts) > 3 or parts[2] not in public):
                found.append(f"{path.name} imports {name}")
        aliases = {a.asname or a.name for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module == "mwrun"
                   for a in node.names if a.name == "records"}
        aliases |= {a.asname for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for a in node.names if a.name == "mwrun.records" and a.asname}
        found += [f"{path.name}:{node.lineno} reads {ast.unparse(node)}"
                  for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                  and isinstance(node.value, ast.Name) and node.value.id in aliases
                  and node.attr not in public]
    return found


def test_the_command_line_reads_records_through_its_public_names_only():
    assert records.__all__ and not [n for n in records.__all__ if n.startswith("_")]
    assert all(getattr(records, n, None) is not None for n in records.__all__)
    assert records_internals(part_files("cli")) == []


def test_the_check_sees_the_command_line_reach_into_records(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from mwrun.records import build, Timeline\n"
                   "from mwrun.records.timeline import build as b\n"
                   "from mwrun.records import _secret, timeline\n"
                   "import mwrun.records.drills\n"
                   "def f():\n    from mwrun import records as r\n"
                   "    return r.build, r._counts, r.faults.joined\n")
    assert records_internals([bad]) == [
        "bad.py imports mwrun.records._secret",
        "bad.py imports mwrun.records.drills",
        "bad.py imports mwrun.records.timeline",
        "bad.py imports mwrun.records.timeline.build",
        "bad.py:7 reads r._counts",
        "bad.py:7 reads r.faults"]


LONGEST_CLI_MODULE = 300  # lines: the command line parses, delegates and words


def long_modules(files: list[Path], longest: int) -> list[str]:
    return [f"{path.name} has {n} lines" for path in files
            if (n := len(path.read_text().splitlines())) > longest]


def test_the_command_line_is_thin():
    """No module of the command line is long: what reads a run's history into numbers
    is ``records``', what the command line keeps is commands, live loops and views."""
    assert long_modules(part_files("cli"), LONGEST_CLI_MODULE) == []


def test_the_module_check_sees_a_long_module(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n" * (LONGEST_CLI_MODULE + 1))
    (tmp_path / "ok.py").write_text("x = 1\n" * LONGEST_CLI_MODULE)
    assert long_modules(sorted(tmp_path.glob("*.py")), LONGEST_CLI_MODULE) == [
        f"bad.py has {LONGEST_CLI_MODULE + 1} lines"]


def may_import(part: str) -> str:
    """The "May import: ..." sentence of a part's package docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / part / "__init__.py").read_text())) or ""
    assert "May import:" in doc, f"mwrun/{part}/__init__.py must say what it may import"
    return doc.split("May import:", 1)[1].split("Never", 1)[0]


@pytest.mark.parametrize("part", SUBPACKAGES)
def test_each_part_says_what_it_imports(part):
    """Every part of mwrun a part imports is named in its docstring's "May import"."""
    said = may_import(part)
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    unsaid = set()
    for path in part_files(part):
        for name in imported_names(path):
            top = name.split(".")
            if top[0] != "mwrun" or len(top) < 2 or top[1] in (part, "__version__"):
                continue
            spelled = f"``mwrun.{top[1]}``" if top[1] in modules else f"``{top[1]}``"
            if spelled not in said:
                unsaid.add(f"{path.name}: {spelled}")
    assert sorted(unsaid) == []


STATE_NAMES = {s.value for enum in (schema.ProcessState, schema.WorldState, schema.RunState,
                                    schema.HostState) for s in enum}


def _stateful(node: ast.AST) -> bool:
    """Whether an expression reads a state: ``x.state``, ``x["state"]``, ``x.get("state")``."""
    return any((isinstance(n, ast.Attribute) and n.attr == "state")
               or (isinstance(n, ast.Constant) and n.value == "state") for n in ast.walk(node))


def _names(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [n.value for n in items if isinstance(n, ast.Constant) and n.value in STATE_NAMES]


def state_literals(path: Path) -> list[str]:
    """State names spelled as strings where a state is compared or written: the side of a
    comparison facing a state, or the value of a "state" key."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_stateful(side) for side in sides):
                found += [f"{path.name}:{node.lineno}: {name!r}" for side in sides
                          for name in _names(side)]
        elif isinstance(node, ast.Dict):
            found += [f"{path.name}:{node.lineno}: {name!r}"
                      for key, value in zip(node.keys, node.values, strict=True)
                      if isinstance(key, ast.Constant) and key.value == "state"
                      for name in _names(value)]
    return sorted(found)


@pytest.mark.parametrize("part", ["head", "cli"])
def test_no_state_name_is_spelled_outside_the_schema(part):
    assert [hit for path in part_files(part) for hit in state_literals(path)] == []


# The wire's words, each an enum with one spelling: a frame's kind (head <-> agent), how
# a process started. (field, words) -> the parts that must not spell them.
VOCABULARIES = {
    ("kind", frozenset(k.value for k in frames.Kind)): ("head", "host"),
    ("start", frozenset(s.value for s in schema.Start)): ("head", "cli"),
    # what the library tells of a world, and the verbs between a library and its head
    ("event", frozenset(e.value for e in protocol.WorldReport)): ("worlds", "head", "host"),
    ("verb", frozenset(v.value for v in protocol.Verb)): ("worlds", "head", "host"),
}
# Where a word may still be spelled, for now: control.py's handlers are being rewritten
# over a typed facade on another branch, which takes the enums; then this goes.
# Calls that name a word of the wire by position: (method, field) -> which arguments.
SAID_BY_CALL = {("send", "kind"): slice(0, 2),  # send(KIND, ...), send(host, KIND, ...)
                ("world_event", "event"): slice(2, 3)}  # world_event(world, gen, EVENT)


def _mentions(node: ast.AST, field: str) -> bool:
    """Whether an expression reads ``field``: ``x.field``, ``x["field"]``, ``field``."""
    return any((isinstance(n, ast.Attribute) and n.attr == field)
               or (isinstance(n, ast.Constant) and n.value == field)
               or (isinstance(n, ast.Name) and n.id == field) for n in ast.walk(node))


def word_literals(path: Path, field: str, words: frozenset) -> list[str]:
    """Words of a vocabulary spelled as strings where the field is compared or written:
    a comparison with the field, the value of a "field" key, a frame sent by name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        spelled: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_mentions(side, field) for side in sides):
                spelled += sides
        elif isinstance(node, ast.Dict):
            spelled += [v for k, v in zip(node.keys, node.values, strict=True)
                        if isinstance(k, ast.Constant) and k.value == field]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                (node.func.attr, field) in SAID_BY_CALL:
            spelled += node.args[SAID_BY_CALL[node.func.attr, field]]
        found += [f"{path.name}:{node.lineno}: {n.value!r}" for side in spelled
                  for n in ([side] if isinstance(side, ast.Constant)
                            else getattr(side, "elts", []))
                  if isinstance(n, ast.Constant) and n.value in words]
    return sorted(set(found))


@pytest.mark.parametrize(("field", "words"), list(VOCABULARIES))
def test_no_word_of_the_wire_is_spelled_outside_its_enum(field, words):
    parts = VOCABULARIES[(field, words)]
    spared = {"frames.py", "protocol.py"}
    assert [hit for part in parts for path in part_files(part)
            if path.name not in spared for hit in word_literals(path, field, words)] == []


def test_the_check_sees_a_word_of_the_wire_spelled(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("link.send('spawned', name=n)\nlinks.send(host, 'probe')\n"
                   "if msg['kind'] in ('lines', 'x'):\n    out = {'kind': 'beat'}\n"
                   "if kind == Kind.SAY or p.get('start') == 'cold':\n    pass\n")
    kinds = frozenset(k.value for k in frames.Kind)
    assert word_literals(bad, "kind", kinds) == ["bad.py:1: 'spawned'", "bad.py:2: 'probe'",
                                                 "bad.py:3: 'lines'", "bad.py:4: 'beat'"]
    assert word_literals(bad, "start", frozenset({"cold", "warm"})) == ["bad.py:5: 'cold'"]


def test_the_check_sees_a_world_event_or_a_verb_spelled(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("link.world_event(w, g, 'ready')\nlink.world_event(w, g, WorldReport.BROKEN)\n"
                   "if event == 'closed' or msg['event'] in ('added', 'x'):\n"
                   "    send({'verb': 'hello', 'event': 'released'})\n"
                   "if request.get('verb') == 'stacks_told' or verb in ('add', 'drain'):\n"
                   "    pass\n")
    events = frozenset(e.value for e in protocol.WorldReport)
    verbs = frozenset(v.value for v in protocol.Verb)
    assert word_literals(bad, "event", events) == [
        "bad.py:1: 'ready'", "bad.py:3: 'added'", "bad.py:3: 'closed'", "bad.py:4: 'released'"]
    assert word_literals(bad, "verb", verbs) == [
        "bad.py:4: 'hello'", "bad.py:5: 'add'", "bad.py:5: 'drain'", "bad.py:5: 'stacks_told'"]


def test_the_check_sees_a_state_name_spelled(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("if link.state == 'up' or doc['state'] in ('finished', 'other'):\n"
                   "    write({'state': 'failed', 'kind': 'failed'})\n"
                   "if kind == 'failed' or doc.get('state') != 'starting':\n    pass\n")
    assert state_literals(bad) == ["bad.py:1: 'finished'", "bad.py:1: 'up'",
                                   "bad.py:2: 'failed'", "bad.py:3: 'starting'"]


def test_the_class_check_sees_a_long_class(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class Big:\n" + "    x = 1\n" * LONGEST_CLASS + "\n\nclass Small:\n"
                   "    pass\n")
    assert long_classes(bad) == [f"bad.py: Big has {LONGEST_CLASS + 1} lines"]


def test_the_check_sees_a_forbidden_import(tmp_path):
    # A lazy import deep inside a function is still caught.
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    if True:\n        from mwrun.head import rundir\n")
    assert violations("worlds", [bad]) == ["bad.py imports mwrun.head",
                                           "bad.py imports mwrun.head.rundir"]
    assert violations("head", [bad]) == []


# The hands' duties (start, drain output, watch exits, reap, zygotes) have one body of
# code, host/hands.py, which every host's agent runs (the head's own machine's too):
# nothing else may reach for the parts it is made of, and the head starts no process.
HANDS_PARTS = ("mwrun.host.process", "mwrun.host.lines", "mwrun.host.warmstarts",
               "mwrun.host.warm.reap_orphans", "mwrun.host.watchdog")
HANDS_ALLOWED = {"hands.py", "process.py", "lines.py", "warmstarts.py", "warm.py",
                 "watchdog.py", "zygote.py", "child.py", "title.py"}


def test_one_set_of_hands_on_every_host():
    users = sorted(f"{path.parent.name}/{path.name}"
                   for path in PACKAGE.glob("*/*.py") if path.name not in HANDS_ALLOWED
                   for name in imported_names(path) | set(_strings(path))
                   if name.startswith(HANDS_PARTS))
    assert users == []
    assert "mwrun.host.hands.Hands" in imported_names(PACKAGE / "host/agent.py")
    heads = sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "head").rglob("*.py")
                   if any(name.startswith(("mwrun.host.hands", "mwrun.host.warm", "subprocess"))
                          for name in imported_names(path))
                   and path.name not in HEAD_STARTS)
    assert heads == []


# What the head may still start itself: the agents' transports (ssh, srun, the head's own
# machine's agent) and, for --detach, the head of its own.
HEAD_STARTS = {"remote.py", "slurm.py", "bringup.py"}


def _strings(path: Path) -> list[str]:
    """String constants too: the watchdog is started as ``python -m mwrun.host...``."""
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def long_classes(path: Path) -> list[str]:
    """Classes of a file longer than LONGEST_CLASS lines: a class with more than one
    job (cut by cohesion, not moved out to meet the cap)."""
    return [f"{path.name}: {node.name} has {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ClassDef)
            and node.end_lineno - node.lineno + 1 > LONGEST_CLASS]


def test_every_module_sits_in_a_part_and_no_class_is_long():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == sorted(["__init__.py", "__main__.py", *SHARED])
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"
                  ) == sorted(SUBPACKAGES)
    assert [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in long_classes(path)] == []
    for part in SUBPACKAGES:
        doc = ast.get_docstring(ast.parse((PACKAGE / part / "__init__.py").read_text()))
        assert doc and "import" in doc, f"mwrun/{part}/__init__.py must say what it may import"


def test_help_validate_and_status_do_not_import_torch_or_matplotlib_nor_the_head(tmp_path):
    """--help, validate and status stay free of torch and matplotlib; status, logs,
    report, kill-world and stop read a run folder without the head."""
    run = tmp_path / "runs" / "done-1"
    (run / "logs").mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({
        "run_id": "done-1", "name": "done", "state": "finished", "supervisor_pid": None,
        "started_at": 1.0, "exit_code": 0,
        "processes": [{"name": "p", "host": "localhost", "pid": None, "state": "exited",
                       "exit_code": 0, "restarts": 0, "worlds": {"w": 0}}],
        "worlds": [{"name": "w", "state": "closed", "generation": 0, "breaks": 0,
                    "backend": "gloo", "port": 29501, "members": ["p"]}]}))
    (run / "logs" / "p.log").write_text("hello from p\n")
    (run / "history.jsonl").write_text(
        '{"t": 1.0, "event": "start", "run_id": "done-1", "name": "done",'
        ' "worlds": {"w": ["p"]}}\n'
        '{"t": 2.0, "event": "end", "state": "finished"}\n')
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
            " 'matplotlib')))\n"
            "r = CliRunner().invoke(main, ['logs', 'p', 'done-1'])\n"
            "assert r.exit_code == 0 and 'hello from p' in r.output, r.output\n"
            "for verb in (['kill-world', 'w', 'done-1'], ['stop', 'done-1']):\n"
            "    r = CliRunner().invoke(main, verb)\n"
            "    assert r.exit_code == 1 and 'is not running' in r.output, r.output\n"
            "r = CliRunner().invoke(main, ['report', 'done-1'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'"
            " or m.startswith('mwrun.head')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={"MWRUN_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "[]"]


def test_the_public_api_is_unchanged():
    for name in ("init", "WorldSpec", "BrokenWorldError", "ReduceOp", "from_worldinfo", "Job",
                 "World", "Work", "MwrunError"):
        assert getattr(mwrun, name) is not None
    assert mwrun.BrokenWorldError.__module__ == "mwrun.errors"


# Where the library touches an underscored name of another object, and why: torch's
# own option fields (no public setter), the stale-copy exit of fencing, and init
# driving the Job its module defines.
FOREIGN_PRIVATES = {("backends.py", "options._timeout"), ("backends.py", "options._devices"),
                    ("fencing.py", "os._exit"), ("nccl.py", "c._nccl_version"),
                    ("nccl.py", "c._nccl_version_suffix"), ("job.py", "job._form_initial"),
                    ("stacks.py", "sys._current_frames")}  # what every thread runs


def test_the_library_keeps_its_objects_privates():
    """No module of the library writes or reads another object's underscored attributes
    (each object has one job and its own state: World is a facade over its membership,
    calls and traffic); the classes' size is held for the whole package above."""
    reached = set()
    for path in part_files("worlds"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    not node.attr.startswith("__") and \
                    not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                reached.add((path.name, ast.unparse(node)))
    assert reached - FOREIGN_PRIVATES == set()


# The head's folders, and the other folders of the head each may import: ``decide`` acts
# through its own typed seams only; ``hosts`` and the listeners (``observe``,
# ``postmortem``) know the decisions' records and events; ``serve`` translates requests
# into calls on all of them. The head's root (``loop``, ``bringup``, ``adopting``,
# ``epochs``, ``wakeups``) builds
# and drives the parts and may import any.
HEAD_FOLDERS = {
    "decide": set(),
    "hosts": {"decide"},
    "observe": {"decide"},
    "postmortem": {"decide"},
    "serve": {"decide", "hosts", "observe", "postmortem"},
}
HEAD_ROOT = {"__init__.py", "loop.py", "bringup.py", "adopting.py", "epochs.py", "wakeups.py"}


def head_folder_violations(head: Path) -> list[str]:
    """Imports across the head's folders that ``HEAD_FOLDERS`` does not allow (a folder
    importing the head's root counts too: only the root builds)."""
    found = []
    for path in sorted(head.rglob("*.py")):
        folder = path.parent.name
        if path.parent == head:
            continue
        for name in sorted(imported_names(path)):
            parts = name.split(".")
            if parts[:2] != ["mwrun", "head"] or len(parts) < 3 or parts[2] == folder:
                continue
            if parts[2] not in HEAD_FOLDERS[folder]:
                found.append(f"{folder}/{path.name} imports {name}")
    return found


def test_the_heads_folders_import_only_what_they_may():
    head = PACKAGE / "head"
    folders = {p.name for p in head.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(HEAD_FOLDERS)
    assert {p.name for p in head.glob("*.py")} == HEAD_ROOT
    for folder in HEAD_FOLDERS:
        doc = ast.get_docstring(ast.parse((head / folder / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"mwrun/head/{folder}/__init__.py says what"
    assert head_folder_violations(head) == []


def test_the_folder_check_sees_a_forbidden_import(tmp_path):
    head = tmp_path / "head"
    for folder in HEAD_FOLDERS:
        (head / folder).mkdir(parents=True)
    (head / "hosts" / "agents.py").write_text("from mwrun.head.serve import control\n")
    (head / "decide" / "x.py").write_text("def f():\n    from mwrun.head import loop\n")
    (head / "serve" / "ok.py").write_text("from mwrun.head.decide import events\n")
    assert head_folder_violations(head) == [
        "decide/x.py imports mwrun.head.loop",
        "hosts/agents.py imports mwrun.head.serve",
        "hosts/agents.py imports mwrun.head.serve.control"]


# The loop builds the head's parts and hands each the parts it uses, never itself:
# nothing takes a ``loop`` to reach through it, and it is handed whole to nothing. What
# the hands tell (``host.hands.Owner``, ``hosts.agents.Head``) is ``loop.Heard``'s.
LOOP_HANDED_TO: set[str] = set()


def loop_parameters(path: Path) -> list[str]:
    """Functions, methods and lambdas of a file that take a parameter named ``loop``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            if "loop" in names:
                found.append(f"{path.name}:{node.lineno}: "
                             f"{getattr(node, 'name', 'lambda')} takes a loop")
    return found


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func).split(".")[-1]


def loop_handed(path: Path) -> list[str]:
    """Where a file hands the Loop object to a call (outside LOOP_HANDED_TO): ``self`` in
    a method of ``class Loop`` passed as an argument (or returned by a lambda passed),
    or a name bound to ``Loop(...)`` passed as an argument anywhere in the file."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    loops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                _callee(node.value) == "Loop":
            loops.update(t.id for t in node.targets if isinstance(t, ast.Name))
    scopes: list[tuple[ast.AST, set[str]]] = [(tree, loops)]
    scopes += [(cls, loops | {"self"}) for cls in ast.walk(tree)
               if isinstance(cls, ast.ClassDef) and cls.name == "Loop"]
    for scope, names in scopes:
        for call in ast.walk(scope):
            if not isinstance(call, ast.Call) or _callee(call) in LOOP_HANDED_TO:
                continue
            for arg in (*call.args, *(k.value for k in call.keywords)):
                value = arg.body if isinstance(arg, ast.Lambda) else arg
                if isinstance(value, ast.Name) and value.id in names:
                    found.append(f"{path.name}:{call.lineno}: {value.id} handed to"
                                 f" {_callee(call)}")
    return sorted(set(found))


def test_no_part_of_the_head_is_handed_the_loop():
    """The control verbs are methods over the parts they use (serve/verbs.py,
    serve/library.py, served by serve/dispatcher.py), the status document reads what it
    is given (observe/document.py): no ``loop`` is taken anywhere in serve/, and the
    Loop itself is handed only to the typed seams it implements."""
    head = PACKAGE / "head"
    assert [hit for path in sorted((head / "serve").rglob("*.py"))
            for hit in loop_parameters(path)] == []
    assert [hit for path in sorted(head.rglob("*.py")) for hit in loop_handed(path)] == []
    handed = {_callee(call) for cls in ast.walk(ast.parse((head / "loop.py").read_text()))
              if isinstance(cls, ast.ClassDef) and cls.name == "Loop"
              for call in ast.walk(cls) if isinstance(call, ast.Call)
              if any(isinstance(a, ast.Name) and a.id == "self" for a in call.args)}
    assert handed == LOOP_HANDED_TO  # the seams the docstring above names, still used


def test_the_check_sees_the_loop_handed_or_taken(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def handle_stop(loop, request):\n    return loop.supervisor\n\n\n"
                   "class Loop:\n    def __init__(self):\n"
                   "        self.hands = Hands(self.selector, self)\n"
                   "        self.writer = Writer(lambda: build(self), lambda: self)\n"
                   "        self.clients = Clients(lambda line: serve(self, line))\n\n\n"
                   "def main():\n    loop = Loop()\n    summary(printer, loop)\n"
                   "    loop.run()\n    f = lambda loop, line: None\n")
    assert loop_parameters(bad) == ["bad.py:1: handle_stop takes a loop",
                                    "bad.py:16: lambda takes a loop"]
    assert loop_handed(bad) == ["bad.py:14: loop handed to summary",
                                "bad.py:7: self handed to Hands",
                                "bad.py:8: self handed to Writer",
                                "bad.py:8: self handed to build",
                                "bad.py:9: self handed to serve"]


# The head's one mover per kind of record, each checking its machine's table
# (decide/moves.py): nothing else sets a record's state. A remote host's link keeps a
# machine of its own (hosts/), not a record's.
MOVERS = {("processbook.py", "move"), ("worldbook.py", "move"), ("supervisor.py", "_move"),
          ("supervisor.py", "__init__")}  # the run's first state, STARTING


def state_writes(path: Path) -> list[str]:
    """Where a file sets ``X.state`` (alone, or in a tuple), outside the movers."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or \
                (path.name, fn.name) in MOVERS:
            continue
        for node in ast.walk(fn):
            targets = list(node.targets) if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            while targets:
                target = targets.pop()
                if isinstance(target, ast.Tuple | ast.List):
                    targets += target.elts
                elif isinstance(target, ast.Starred):
                    targets.append(target.value)
                elif isinstance(target, ast.Attribute) and target.attr == "state":
                    found.append(f"{path.name}:{target.lineno} ({fn.name})")
    return found


def test_only_the_movers_set_a_records_state():
    head = PACKAGE / "head"
    files = [p for p in head.rglob("*.py") if p.parent.name != "hosts"]
    assert [hit for path in sorted(files) for hit in state_writes(path)] == []
    # and every mover checks its move against its machine's table
    for name, mover in MOVERS - {("supervisor.py", "__init__")}:
        tree = ast.parse((head / "decide" / name).read_text())
        body = next(fn for fn in ast.walk(tree)
                    if isinstance(fn, ast.FunctionDef) and fn.name == mover)
        assert any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "checked"
                   for n in ast.walk(body)), f"{name}: {mover} must check its move"


def test_the_mover_check_sees_a_state_set_elsewhere(tmp_path):
    bad = tmp_path / "processbook.py"
    bad.write_text("def move(rec, s):\n    rec.state = s\n\n"
                   "def hang(rec):\n    rec.state, rec.why = 'hung', 'x'\n\n"
                   "def spawn(self):\n    self.rec.state = 1\n"
                   "def forget(self, rec):\n    self.tally[rec.state] -= 1\n")
    assert state_writes(bad) == ["processbook.py:5 (hang)", "processbook.py:8 (spawn)"]


# Who may ask a mover to move a record: a process's state moves only in its reconcile
# (decide/reconcile.py: its goal and what was seen of it), a world's only in its own
# (decide/worldreconcile.py); no book moves a record of its own accord.
MOVE_CALLERS = {"processes.move": {"reconcile.py"}, "book.move": {"worldreconcile.py"}}


def move_calls(path: Path) -> list[str]:
    """Every ``X.move(...)`` call in a file, as ``owner.move`` (``self.move`` for the
    book's own)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "move":
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else \
                getattr(owner, "id", "?")
            found.append(f"{name}.move")
    return found


def test_only_the_reconcile_moves_a_record():
    """A process's state moves in one place, its reconcile; a world's in its own."""
    wrong = []
    for path in sorted((PACKAGE / "head" / "decide").glob("*.py")):
        for call in move_calls(path):
            if path.name not in MOVE_CALLERS.get(call, set()):
                wrong.append(f"{path.name}: {call}")
    assert wrong == []
    assert "processes.move" in move_calls(PACKAGE / "head" / "decide" / "reconcile.py")
    assert "book.move" in move_calls(PACKAGE / "head" / "decide" / "worldreconcile.py")


def test_the_move_check_sees_a_move_elsewhere(tmp_path):
    bad = tmp_path / "beats.py"
    bad.write_text("def hang(self, rec):\n    self.processes.move(rec, 'hung')\n"
                   "    self.settle.reconcile(rec)\n")
    assert move_calls(bad) == ["processes.move"]


def test_the_head_keeps_its_timers_in_one_heap():
    """Only decide/deadlines.py keeps a heap; the head makes one ``Timers`` (the loop's;
    a supervisor alone, in tests and benchmarks, makes its own)."""
    heaps, made = [], []
    for path in sorted((PACKAGE / "head").rglob("*.py")):
        names = imported_names(path)
        if path.name != "deadlines.py" and any(n == "heapq" or n.startswith("heapq.")
                                               for n in names):
            heaps.append(path.name)
        tree = ast.parse(path.read_text(), str(path))
        made += [f"{path.name}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) in ("Timers", "Deadlines")]
    assert heaps == []
    assert sorted(m.split(":")[0] for m in made) == ["loop.py", "supervisor.py"], made
