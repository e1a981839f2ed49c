"""The timeout chain through the real command line: a topology whose written numbers
break it is refused before anything starts; --dry-run prints every process's chain."""

import sys

import pytest

from tests.integration.jobs import cli

pytestmark = pytest.mark.timeout(60)
TOPOLOGY = f"""\
version: 1
timeout: 20
processes:
  leader: {{cmd: [{sys.executable}, -c, pass], hang_timeout: 15}}
  worker: {{cmd: [{sys.executable}, -c, pass]}}
worlds:
  w: {{members: [leader, worker]}}
"""
# Where the leader's hang_timeout is written (its line holds this interpreter's path).
HANG_AT = f"4:{TOPOLOGY.splitlines()[3].index('hang_timeout: 15') + len('hang_timeout: ') + 1}"


def test_a_launch_whose_timeouts_are_out_of_order_is_refused_before_it_starts(home, tmp_path):
    topology = tmp_path / "job.yaml"
    topology.write_text(TOPOLOGY)
    result = cli(home, "launch", str(topology))
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"{topology}:2:10: timeout 20s of world 'w' (top level) is not below hang_timeout"
        f" 15s of its member 'leader' (process, {topology}:{HANG_AT}): a call may block for its"
        " whole timeout without its process being declared hung; shorten the timeout or"
        " lengthen hang_timeout")
    assert "Traceback" not in result.stderr
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
    assert cli(home, "validate", str(topology)).returncode == 2


def test_dry_run_prints_the_chain_of_every_process(home, tmp_path):
    topology = tmp_path / "job.yaml"
    topology.write_text(TOPOLOGY.replace("timeout: 20", "timeout: 5"))
    result = cli(home, "launch", str(topology), "--dry-run", check=True)
    lines = result.stdout.splitlines()
    start = lines.index("Timeouts, in order: call timeout < hang_timeout < peers' rejoin()"
                        " deadline")
    assert lines[start + 1].split() == ["PROCESS", "CALL", "TIMEOUT", "(longest)",
                                        "HEARTBEAT", "HANG_TIMEOUT", "PEERS'", "REJOIN",
                                        "(shortest)"]
    rows = {line.split()[0]: " ".join(line.split()) for line in lines[start + 2:start + 4]}
    assert rows["leader"] == (f"leader 5s in w (top level, {topology}:2:10) every 1s 15s"
                              f" (process, {topology}:{HANG_AT}) 210s in w (default, 2 x"
                              " hang_timeout 60s + 90s)")
    assert rows["worker"] == (f"worker 5s in w (top level, {topology}:2:10) every 1s 60s"
                              " (default, at least 1m) 210s in w (default, 2 x hang_timeout"
                              " 60s + 90s)")
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
