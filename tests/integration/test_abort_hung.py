"""An abort that does not return within its deadline ends in the member being killed
and restarted, never in a hung process (worlds/aborts.py, Supervisor.on_abort_hung).

On gloo, with the abort replaced by one that never returns, so it runs without a GPU;
tests/gpu has the same on an nccl world."""

import pytest

from tests.helpers import BIN, ROOT
from tests.integration.jobs import cli, expect, launch, proc_state, status

pytestmark = pytest.mark.timeout(120)

TOPOLOGY = """\
version: 1
name: hung-abort
timeout: 10
processes:
  stuck:
    cmd: python {bin}/hung_abort.py stuck
    cwd: {root}
    restart: on-failure
    max_restarts: 1
  peer:
    cmd: python {bin}/hung_abort.py peer
    cwd: {root}
    restart: on-failure
worlds:
  w: {{members: [stuck, peer]}}
"""


def test_a_hung_abort_is_killed_and_restarted(procs, home, tmp_path):
    path = tmp_path / "hung.yaml"
    path.write_text(TOPOLOGY.format(bin=BIN, root=ROOT))
    job = launch(procs, home, path)
    job.expect(lambda line: "every world formed" in str(line), 60)
    cli(home, "kill-world", "w", "--rank", "1", check=True)  # the peer dies: w breaks
    expect(job, "stuck", "broke")
    restarted = expect(job, "stuck", "restarted", timeout=60)
    assert restarted["restart"] == 1
    said = [line for line in job.lines if "stuck hung:" in line]
    assert said and "did not return within 1s" in said[0], job.output()
    doc = status(home)
    assert proc_state(doc, "stuck")["restarts"] == 1
    assert job.wait(60) == 0, job.output()
