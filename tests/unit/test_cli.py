import json
import sys
from pathlib import Path

from click.testing import CliRunner

from mwrun.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]
STAR = str(ROOT / "configs" / "star.yaml")


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_validate_ok():
    result = run("validate", STAR)
    assert result.exit_code == 0, result.output
    assert "ok: 3 processes, 2 worlds (world1: leader, worker-0; world2: leader, worker-1)" \
        in result.output


def test_validate_reports_every_error_with_position_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nprocesses:\n  a: {cmd: x, restart: often}\n"
                   "worlds:\n  w: {members: [a, ghost]}\n")
    result = run("validate", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:3:24: process 'a': restart must be one of" in result.output
    assert f"{bad}:5:20: world 'w': unknown process 'ghost'" in result.output
    assert "2 problems found; nothing was started." in result.output
    assert "Traceback" not in result.output


def test_validate_missing_file_is_a_clear_error(tmp_path):
    result = run("validate", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert result.output == f"Error: {tmp_path / 'nope.yaml'}: no such file\n"


def test_validate_yaml_syntax_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("processes: [a\n")
    result = run("validate", str(bad))
    assert result.exit_code == 2
    assert result.output.startswith(f"{bad}:2:1: YAML syntax error")


def test_dry_run_prints_the_plan_and_starts_nothing():
    result = run("launch", STAR, "--dry-run", "--run-id", "demo-1")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "3 processes, 2 worlds; stores on localhost (127.0.0.1)" in out
    assert "leader    localhost  -     -     world1:0 world2:0" in out
    assert "(free port)" in out
    assert "MWRUN_RUN_ID=demo-1" in out
    assert f"cmd: {sys.executable} examples/send_recv/leader.py" in out


def test_dry_run_json_has_environment_of_every_process():
    result = run("launch", STAR, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert set(plan["processes"]) == {"leader", "worker-0", "worker-1"}
    worker = plan["processes"]["worker-1"]
    assert worker["worlds"] == {"world2": 1}
    assert worker["environment"]["RANK"] == "1"
    ports = {w["port"] for w in plan["worlds"].values()}
    assert len(ports) == 2


def test_json_needs_dry_run():
    result = run("launch", STAR, "--json")
    assert result.exit_code == 2
    assert "--json goes with --dry-run" in result.output


def test_grace_must_be_a_finite_number_of_seconds():
    for bad in ("nan", "inf", "-1", "-inf", "soon"):
        result = run("launch", STAR, "--grace", bad)
        assert result.exit_code == 2, (bad, result.output)
        assert "--grace" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(main, ["launch", STAR, "--dry-run"], env={"MWRUN_GRACE": "nan"})
    assert result.exit_code == 2 and "--grace" in result.output


def test_launch_refuses_a_topology_without_this_machine_before_reaching_out(tmp_path):
    path = tmp_path / "far.yaml"
    path.write_text("hosts:\n  far: {addr: 10.9.0.2}\n  node: {addr: 10.9.0.3, ssh: 10.9.0.3,"
                    " ssh_options: [-o, ProxyCommand=false]}\n"  # never a packet, even if
                    # the check broke
                    "processes:\n  a: {cmd: x, host: far}\n  b: {cmd: x, host: node}\n"
                    "worlds:\n  w: {members: [a, b]}\n")
    result = run("launch", str(path))
    assert result.exit_code == 2
    assert "none of the hosts is this machine" in result.output
    assert "waiting for the agent" not in result.output  # no ssh was tried


def test_dry_run_shows_remote_processes_their_agents_socket():
    """A process on an ssh host reaches its supervisor through that host's agent, never
    through the head's control socket (which is on another machine)."""
    result = run("launch", str(Path(STAR).parent / "star_ssh.yaml"), "--dry-run", "--json",
                 "--run-id", "demo-2")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    envs = {name: p["environment"]["MWRUN_CONTROL"] for name, p in plan["processes"].items()}
    hosts = {name: p["host"] for name, p in plan["processes"].items()}
    remote = [n for n in envs if hosts[n] != "head"]
    assert remote and all("agent" in envs[n] and hosts[n] in envs[n] for n in remote)
    assert all(envs[n].endswith("/runs/demo-2/control.sock") or "mwrun-" in envs[n]
               for n in envs if hosts[n] == "head")
