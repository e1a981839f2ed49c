"""Topologies from an unkind user: every mistake a positioned error, nothing rewritten."""

import json
import socket
import textwrap

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.errors import TopologyError
from mwrun.plan import topology
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import MAX_PROCESSES, MAX_WORLDS, parse


def parsed(text: str):
    return parse(textwrap.dedent(text), "t.yaml", "/base")


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parsed(text)
    return [str(d) for d in info.value.diagnostics]


def with_env(env: str) -> str:
    return ("version: 1\nprocesses:\n  a:\n    cmd: run a\n    env:\n"
            + textwrap.indent(textwrap.dedent(env), "      ")
            + "worlds:\n  w:\n    members: [a]\n")


def test_env_values_keep_the_text_as_written():
    topo = parsed(with_env("""\
        OCT: 010
        HEX: 0x10
        VERSION: 1.10
        TIME: 12:30
        BIG: 1_000
        EXP: 1e3
        DATE: 2024-01-02 10:00:00
        QUOTED: "010"
        EMPTY:
        WORD: plain
        """))
    assert topo.processes["a"].env == {
        "OCT": "010", "HEX": "0x10", "VERSION": "1.10", "TIME": "12:30", "BIG": "1_000",
        "EXP": "1e3", "DATE": "2024-01-02 10:00:00", "QUOTED": "010", "EMPTY": "",
        "WORD": "plain"}


def test_env_booleans_still_ask_for_quotes():
    [found] = problems(with_env("DEBUG: yes\n"))
    assert found.startswith("t.yaml:6:14:") and "in quotes" in found


def test_deep_nesting_is_a_positioned_error():
    [found] = problems("processes: " + "[" * 500 + "]" * 500 + "\n")
    assert found.startswith("t.yaml:1:") and "nested more than" in found


def test_replicas_are_capped_with_a_position():
    text = ("version: 1\nprocesses:\n  w:\n    cmd: run\n    replicas: 100000\n"
            "worlds:\n  x:\n    members: [w]\n")
    [found] = problems(text)
    assert found.startswith("t.yaml:5:15:") and f"at most {MAX_PROCESSES}" in found


def test_processes_in_all_are_capped_with_a_position():
    entries = "".join(f"  p{i}:\n    cmd: run\n    replicas: 3000\n" for i in range(2))
    found = problems(f"version: 1\nprocesses:\n{entries}worlds:\n  x:\n    members: [p0]\n")
    assert any(f.startswith("t.yaml:6:3:") and "more than 4096" in f for f in found), found


def test_too_many_worlds_is_a_positioned_error(monkeypatch):
    monkeypatch.setattr(topology, "MAX_WORLDS", 3)  # the rule, without 4,097 lines of YAML
    worlds = "".join(f"  w{i}: {{members: [a]}}\n" for i in range(4))
    [found] = problems(f"version: 1\nprocesses:\n  a: {{cmd: run}}\nworlds:\n{worlds}")
    assert found.startswith("t.yaml:5:3:") and "4 worlds; at most 3" in found
    assert MAX_WORLDS >= 1024


def test_the_largest_job_plans():
    """The largest allowed job is placed, every replica on its own CPU (how long it
    takes: bench/plan.py; placement was once quadratic, 4.3 s for 4,000 replicas)."""
    text = (f"version: 1\nhosts:\n  h: {{addr: 10.0.0.9, cpus: {MAX_PROCESSES}}}\n"
            f"processes:\n  w:\n    cmd: run\n    replicas: {MAX_PROCESSES}\n    cpus: 1\n"
            "worlds:\n  x:\n    members: [w]\n  y:\n    members: [w]\n")
    topo = parsed(text)
    plan = place(topo, {"h": HostInventory(False, tuple(range(MAX_PROCESSES)), ())},
                 lambda addr, taken: 40000 + len(taken), here=False)
    assert plan.processes[f"w-{MAX_PROCESSES - 1}"].local_rank == MAX_PROCESSES - 1
    assert plan.processes[f"w-{MAX_PROCESSES - 1}"].cpus == (MAX_PROCESSES - 1,)
    assert len({p.cpus for p in plan.processes.values()}) == MAX_PROCESSES


def test_no_free_port_is_a_positioned_error():
    def exhausted(addr, taken):
        raise OSError(24, "Too many open files")

    with pytest.raises(TopologyError) as info:
        place(parsed("version: 1\nprocesses:\n  a: {cmd: run}\nworlds:\n  w: {members: [a]}\n"),
              {"localhost": HostInventory(True, (0,), ())}, exhausted)
    [found] = [str(d) for d in info.value.diagnostics]
    assert found.startswith("t.yaml:5:3:") and "Too many open files" in found


def cli(*args):
    return CliRunner().invoke(main, list(args))


def test_validate_reports_a_port_in_use_along_with_other_errors(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = tmp_path / "t.yaml"
        path.write_text(f"version: 1\nprocesses:\n  a: {{cmd: run, cpus: [100000]}}\n"
                        f"worlds:\n  w:\n    members: [a]\n    port: {port}\n")
        result = cli("validate", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}:7:11: world 'w': port {port} on 127.0.0.1 is not free" in result.output
    assert f"{path}:3:" in result.output  # the CPU beyond the host, in the same report


def test_a_missing_cwd_is_reported_along_with_other_errors(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nprocesses:\n  a: {cmd: run, cwd: nowhere, restart: sometimes}\n"
                    "worlds:\n  w: {members: [a]}\n")
    result = cli("validate", str(path))
    assert result.exit_code == 2, result.output
    assert f"cwd {tmp_path / 'nowhere'} is not a folder" in result.output
    assert "restart must be one of" in result.output


def test_a_topology_of_remote_hosts_validates_and_plans(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nhosts:\n  n1: {addr: 10.11.12.13, cpus: 4}\n"
                    "  n2: {addr: 10.11.12.14, cpus: 4}\n"
                    "processes:\n  a: {cmd: run, host: n1, cpus: 2}\n  b: {cmd: run, host: n2}\n"
                    "worlds:\n  w: {members: [a, b]}\n")
    assert cli("validate", str(path)).exit_code == 0
    result = cli("launch", str(path), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["store_host"] == "n1"
    assert plan["worlds"]["w"]["addr"] == "10.11.12.13"
    assert plan["processes"]["b"]["environment"]["MASTER_ADDR"] == "10.11.12.13"
