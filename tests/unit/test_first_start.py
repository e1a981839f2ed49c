"""A process whose first start cannot start: caught before anything starts where mwrun
can see it (a ``python FILE`` whose FILE is missing on this machine: a positioned
topology error in validate and launch), and said once, plainly, where it cannot (a
first start that ends before its hello is not retried)."""

import textwrap

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.errors import TopologyError
from mwrun.plan import scripts, topology
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W
from tests.unit.test_supervisor import join_all, make


@pytest.mark.parametrize("cmd, file", [
    (["python", "a.py", "--steps", "3"], "a.py"),
    (["/usr/bin/python3.11", "-u", "-W", "error", "-X", "dev", "-OO", "a.py"], "a.py"),
    (["python3", "-Wdefault", "-Xdev", "--", "-a.py"], "-a.py"),
    (["python", "--check-hash-based-pycs", "always", "a.py"], "a.py"),
    (["python", "-c", "import a"], None),
    (["python", "-uc", "import a"], None),
    (["python", "-m", "a"], None),
    (["python", "-"], None),
    (["python"], None),
    (["torchrun", "a.py"], None),
    (["./a.py"], None),
])
def test_the_script_python_is_told_to_run(cmd, file):
    assert scripts.script(cmd) == file


def write(tmp_path, text: str, name: str = "t.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_missing_script_is_a_positioned_topology_error_relative_to_its_cwd(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "there.py").write_text("")
    path = write(tmp_path, """\
        version: 1
        processes:
          a: {cmd: python there.py, cwd: sub}
          worker:
            replicas: 3
            cwd: sub
            cmd: [python, -u, nope.py, --steps, 3]
          b: {cmd: python there.py}
          c: {cmd: [python, -c, "import nope"]}
        worlds:
          w: {members: [a, worker, b, c]}
        """)
    with pytest.raises(TopologyError) as raised:
        topology.load(path)
    found = [str(d) for d in raised.value.diagnostics]
    sub = tmp_path / "sub"
    assert found == [  # once per entry, where its cmd is written
        f"{path}:7:10: process 'worker': cmd: python cannot open {sub / 'nope.py'}: no such"
        f" file (its cwd is {sub})",
        f"{path}:8:12: process 'b': cmd: python cannot open {tmp_path / 'there.py'}: no"
        f" such file (its cwd is {tmp_path})"]


def test_validate_and_launch_refuse_a_missing_script_and_start_nothing(tmp_path):
    path = write(tmp_path, """\
        version: 1
        processes:
          a: {cmd: python nope.py}
        worlds:
          w: {members: [a]}
        """)
    said = f"{path}:3:12: process 'a': cmd: python cannot open {tmp_path / 'nope.py'}"
    for args in (["validate"], ["launch", "--dry-run"], ["launch", "--detach"], ["launch"]):
        result = CliRunner().invoke(main, [*args, str(path)], env={"MWRUN_HOME": str(tmp_path)})
        assert result.exit_code == 2, (args, result.output)
        assert said in result.output and "nothing was started" in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_a_remote_hosts_scripts_are_not_checked_and_validate_says_so(tmp_path):
    path = write(tmp_path, """\
        version: 1
        hosts:
          head: {addr: 10.1.2.2}
          far: {addr: 10.1.2.3, ssh: far.example}
        processes:
          a: {cmd: python here.py, host: head}
          b: {cmd: python there.py, host: far}
        worlds:
          w: {members: [a, b]}
        """)
    (tmp_path / "here.py").write_text("")
    assert scripts.unchecked(topology.load(path)) == ["b"]  # no error for there.py
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: note: the python scripts of b were not checked: they run on other" \
           " machines, whose files cannot be seen from here" in result.stderr


def lines(sup, name, *said):
    sup.first_words.heard(name, list(said))


def test_a_first_start_that_ends_before_its_hello_could_not_start_and_is_not_retried():
    sup, host = make()
    lines(sup, "worker-0", "Traceback (most recent call last):", "  File ...",
          "/usr/bin/python3: can't open file '/x/nope.py': [Errno 2] No such file", "")
    sup.on_exit("worker-0", 2)
    rec = sup.procs["worker-0"]
    assert rec.state is P.FAILED and rec.restarts == 0
    why = "worker-0 could not start: python3: can't open file '/x/nope.py': [Errno 2] No" \
          " such file; a command that cannot start is not retried"
    assert rec.why == why
    assert [c for c in host.of("say") if "worker-0" in c[0]] == [(why,)]  # said once
    sup.on_tick()
    assert host.of("spawn")[-1][0] == "worker-1"  # the last start at launch: no other
    assert sup.worlds["world1"].state is W.CLOSED  # nothing can re-form it
    assert sup.worlds["world2"].state is W.FORMING  # the other world is not its


@pytest.mark.parametrize("how", ["said hello", "a restart", "a signal", "no words",
                                 "joined", "a clean exit", "its world broke"])
def test_any_other_end_is_restarted_by_its_policy_as_ever(how):
    sup, _ = make()
    rec = sup.procs["worker-0"]
    code = 1
    if how == "said hello":
        sup.members.on_hello("worker-0", rec.worker.pid, 1.0)
    elif how == "a restart":
        sup.on_exit("worker-0", 1)
        sup.on_tick()
        assert rec.restarts == 1
    elif how == "a signal":
        code = -9
    elif how == "joined":
        join_all(sup)
    elif how == "a clean exit":
        code = 0
    elif how == "its world broke":  # its peer ended while it started: its rendezvous fails
        sup.on_exit("leader", -9)
    if how != "no words":
        lines(sup, "worker-0", "ValueError: boom")
    sup.on_exit("worker-0", code)
    assert "could not start" not in rec.why, rec.why
    if how != "a clean exit":
        assert rec.state is P.RESTARTING, rec.why


def test_a_first_start_that_ends_while_the_job_stops_is_only_stopped():
    sup, _ = make()
    lines(sup, "worker-0", "Terminated by the stop")
    sup.request_stop()
    sup.on_exit("worker-0", 1)
    assert "could not start" not in sup.procs["worker-0"].why


@pytest.mark.parametrize("said", [
    '{"event": "pinned", "error_handling": "2", "sum": 8.0}',  # the GPU suite's pinned.py
    "step 20 of 20 done",
])
def test_a_first_start_that_printed_its_own_results_got_going_and_is_restarted(said):
    sup, _ = make()
    lines(sup, "worker-0", "starting", said)
    sup.on_exit("worker-0", 1)
    rec = sup.procs["worker-0"]
    assert "could not start" not in rec.why, rec.why
    assert rec.state is P.RESTARTING, rec.why


@pytest.mark.parametrize("said", [
    ["Traceback (most recent call last):", '  File "a.py", line 1', "boom"],
    ["usage: a.py [-h] --steps STEPS", "a.py: error: the following arguments are required"],
    ["/bin/sh: 1: ./serve: not found"],
    ["RuntimeError: CUDA error: no CUDA-capable device is detected"],
])
def test_a_first_start_whose_words_read_as_a_failure_could_not_start(said):
    sup, _ = make()
    lines(sup, "worker-0", *said)
    sup.on_exit("worker-0", 2)
    rec = sup.procs["worker-0"]
    assert rec.state is P.FAILED and "could not start" in rec.why, rec.why
