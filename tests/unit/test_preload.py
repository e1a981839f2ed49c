"""The preload key, which processes start warm, and what --dry-run says about it."""

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.plan import preload
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
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


def plan_of(text):
    inv = {"localhost": HostInventory(True, (0, 1), ())}
    return place(parse(text, "t.yaml"), inv, lambda addr, taken: 40000, PY)


def test_preload_is_opt_in_for_the_job_or_per_process_and_false_turns_it_off():
    text = ("processes:\n  a: {cmd: python a.py}\n  b: {cmd: python b.py, preload: false}\n"
            "  c: {cmd: python -c 'x'}\n  d: {cmd: 'python -m m', preload: [torch, numpy]}\n"
            "  e: {cmd: python e.py, preload: true}\n"
            "worlds:\n  w: {members: [a, b, c, d, e]}\n")
    procs = plan_of(text).processes
    assert [procs[n].preload for n in "abcde"] == [(), (), (), ("torch", "numpy"), ("torch",)]
    assert [procs[n].start for n in "abcde"] == [
        "cold (no preload)", "cold (no preload)", "cold (no preload)", "warm", "warm"]
    on = plan_of("preload: [torch]\n" + text).processes
    assert [on[n].start for n in "abcde"] == [
        "warm", "cold (no preload)", "cold (python -c)", "warm", "warm"]
    assert on["a"].preload == ("torch",) and on["d"].preload == ("torch", "numpy")


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


def test_dry_run_shows_which_processes_start_warm(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("preload: [torch]\nprocesses:\n  a: {cmd: python a.py}\n"
                    "  b: {cmd: python a.py, preload: false}\nworlds:\n  w: {members: [a, b]}\n")
    result = CliRunner().invoke(main, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()
            if line[:2] in ("a ", "b ")}
    assert rows["a"].rstrip().endswith("warm (torch)")
    assert rows["b"].rstrip().endswith("cold (no preload)")
