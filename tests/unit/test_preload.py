"""The preload key, which processes start warm, and what --dry-run says about it."""

import json
import sys
from dataclasses import asdict

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.errors import TopologyError
from mwrun.plan import preload
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import Start
from tests.unit.test_topology import minimal, one_problem

PY = "/venv/bin/python"


@pytest.mark.parametrize("cmd, expected", [
    ([PY, "run.py", "--x", "1"], ("script", "run.py", ["--x", "1"])),
    ([PY, "-m", "pkg.mod", "a"], ("module", "pkg.mod", ["a"])),
    ([PY, "-mpkg", "a"], ("module", "pkg", ["a"])),
    ([PY, "-c", "print(1)"], None),
    ([PY, "-u", "run.py"], None),  # an interpreter option: a fresh interpreter differs
    ([PY, "-m"], None),
    ([PY], None),
    (["/usr/bin/python3", "run.py"], None),  # not the interpreter mwrun runs on
    (["bash", "run.sh"], None),
])
def test_which_commands_can_be_forked(cmd, expected):
    assert preload.target(cmd, PY) == expected


def said(proc) -> str:
    """How a plan's start reads for people: warm, or cold and why."""
    return f"{proc.start.value} ({proc.why_cold})" if proc.why_cold else proc.start.value


def plan_of(text):
    inv = {"localhost": HostInventory(True, (0, 1), ())}
    return place(parse(text, "t.yaml"), inv, lambda addr, taken: 40000, PY)


def test_warm_starts_are_the_default_and_false_turns_them_off_for_the_job_or_a_process():
    text = ("processes:\n  a: {cmd: python a.py}\n  b: {cmd: python b.py, preload: false}\n"
            "  c: {cmd: python -c 'x'}\n  d: {cmd: 'python -m m', preload: [torch, numpy]}\n"
            "  e: {cmd: python e.py, preload: true}\n  f: {cmd: bash f.sh}\n"
            "worlds:\n  w: {members: [a, b, c, d, e, f]}\n")
    procs = plan_of(text).processes
    assert [said(procs[n]) for n in "abcdef"] == [
        "warm", "cold (preload: false)", "cold (python -c)", "warm", "warm",
        "cold (not the interpreter mwrun runs on)"]
    assert [procs[n].preload for n in "abcdef"] == [
        ("torch",), (), (), ("torch", "numpy"), ("torch",), ()]
    off = plan_of("preload: false\n" + text).processes  # the job's default, per process
    assert [said(off[n]) for n in "abcdef"] == [
        "cold (preload: false)", "cold (preload: false)", "cold (preload: false)", "warm",
        "warm", "cold (preload: false)"]
    assert off["d"].preload == ("torch", "numpy")


@pytest.mark.parametrize("top, line, expected", [
    ("preload: torch\n", "",
     "t.yaml:2:10: preload must be a list of module names (like [torch]) or false, not a string"),
    ("preload: [torch, 'not a module']\n", "",
     "t.yaml:2:18: preload: 'not a module' is not a module name"),
    ("", "    preload: [torch, torch]\n", "t.yaml:5:22: process 'a': preload: 'torch' is listed"
     " twice"),
    ("", "    preload: {torch: 1}\n", "t.yaml:5:14: process 'a': preload must be a list"),
    ("", "    preload: [1.5]\n", "t.yaml:5:15: process 'a': preload: '1.5' is not a module"),
    ("", "    prelaod: [torch]\n", "t.yaml:5:5: process 'a': unknown key 'prelaod'; did you"
     " mean 'preload'?"),
])
def test_bad_preload_values_are_positioned(top, line, expected):
    assert one_problem(minimal(extra_process=line, top=top)).startswith(expected)


def test_a_start_is_kept_as_its_word_and_why_apart_never_as_one_text():
    procs = plan_of("processes:\n  a: {cmd: python a.py}\n  b: {cmd: python b.py, preload:"
                    " false}\nworlds:\n  w: {members: [a, b]}\n").processes
    assert (procs["a"].start, procs["a"].why_cold) == (Start.WARM, None)
    assert (procs["b"].start, procs["b"].why_cold) == (Start.COLD, "preload: false")
    written = json.loads(json.dumps(asdict(procs["b"])))  # as plan.json has it
    assert (written["start"], written["why_cold"]) == ("cold", "preload: false")


def test_dry_run_shows_which_processes_start_warm(tmp_path):
    path = tmp_path / "job.yaml"
    (tmp_path / "a.py").write_text("")  # a script python cannot open is a mistake
    path.write_text("processes:\n  a: {cmd: python a.py}\n"
                    "  b: {cmd: python a.py, preload: false}\nworlds:\n  w: {members: [a, b]}\n")
    result = CliRunner().invoke(main, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    rows: dict[str, str] = {}  # the process table's row of each (the first)
    for line in result.output.splitlines():
        if line[:2] in ("a ", "b "):
            rows.setdefault(line.split()[0], line)
    assert rows["a"].rstrip().endswith("warm (torch)")
    assert rows["b"].rstrip().endswith("cold (preload: false)")


def test_a_preload_module_this_python_lacks_is_a_positioned_mistake():
    text = ("preload: [torch, torchh]\nhosts:\n  here: {addr: 10.0.0.1}\n"
            "  there: {addr: 10.0.0.2, ssh: 10.0.0.2}\n"
            "processes:\n  a: {cmd: python a.py, host: here}\n"
            "  b: {cmd: python b.py, host: here, preload: [numpy.linalg, nope]}\n"
            "  c: {cmd: python c.py, host: there, preload: [only_there]}\n"
            "  d: {cmd: python d.py, host: here}\n"
            "worlds:\n  w: {members: [a, b, c, d]}\n")
    with pytest.raises(TopologyError) as caught:
        parse(text, "t.yaml", has_module=lambda name: name.split(".")[0] in ("torch", "numpy"))
    # Said once for the top level's list; a remote host's own modules are not known here.
    assert [str(d) for d in caught.value.diagnostics] == [
        "t.yaml:1:18: preload: no module named 'torchh' for the python mwrun runs on",
        "t.yaml:7:61: preload: no module named 'nope' for the python mwrun runs on"]


def test_installed_finds_a_module_without_importing_it():
    assert preload.installed("json") and preload.installed("mwrun.plan")
    assert not preload.installed("torchh") and not preload.installed("no_such.sub")
    assert "tests.bin.threader" not in sys.modules
    assert preload.installed("tests.bin.threader")  # found by its package, not imported
    assert "tests.bin.threader" not in sys.modules


def test_validate_refuses_a_preload_module_that_is_not_installed(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("preload: [torchh]\nprocesses:\n  a: {cmd: python a.py}\n"
                    "worlds:\n  w: {members: [a]}\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:1:11: preload: no module named 'torchh'" in result.output


def test_an_interpreter_is_known_by_its_file_and_folder_not_its_name(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python3").write_text("")
    (venv / "python").symlink_to("python3")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "python3").symlink_to(venv / "python3")
    python, python3 = str(venv / "python"), str(venv / "python3")
    assert preload.same_interpreter(python, python3)
    assert preload.target([python, "a.py"], python3, preload.same_interpreter) == \
        ("script", "a.py", [])
    # The same file found in another folder is another venv (or none): not the same.
    assert not preload.same_interpreter(str(tmp_path / "other" / "python3"), python3)
    assert not preload.same_interpreter("python3", python3)  # a PATH lookup: unknown
    assert not preload.same_interpreter(str(venv / "missing"), python3)
    inv = {"localhost": HostInventory(True, (0, 1), ())}
    text = f"processes:\n  a: {{cmd: {python} a.py}}\nworlds:\n  w: {{members: [a]}}\n"
    plan = place(parse(text, "t.yaml"), inv, lambda addr, taken: 40000, python3)
    assert plan.processes["a"].start == "warm"


def test_validate_warns_of_preload_modules_beyond_torch(tmp_path):
    path = tmp_path / "job.yaml"
    body = ("processes:\n  a: {cmd: python a.py}\n  b: {cmd: python b.py, preload: [torch,"
            " json]}\n  c: {cmd: python c.py, preload: [torch.nn]}\nworlds:\n"
            "  w: {members: [a, b, c]}\n")
    path.write_text(body)
    for script in ("a.py", "b.py", "c.py"):  # a script python cannot open is a mistake
        (tmp_path / script).write_text("")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "warning: preload json: imported once per zygote" \
        in warnings[0] and "RANK" in warnings[0]
    path.write_text(body.replace(" json", " torch.nn"))  # torch alone: nothing to say
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0 and "warning" not in result.stderr
