"""The head's promises at their edges, on real jobs: an ``--op`` id is kept for the
life of the run however many operations came between; ``mwrun scale`` shows a new
replica's first call; many ``mwrun stacks`` asks at once are each answered, and an
answer too big for one line is trimmed, never lost; a request asked while the run is
still starting waits for it."""

import concurrent.futures
import json
import os
import subprocess
import sys

import pytest

from mwrun import runs
from mwrun.head.observe import rundir
from mwrun.host import sockets
from tests.helpers import BIN, wait_gone
from tests.integration.jobs import cli, launch, status, wait_for, wait_status
from tests.integration.test_scale_requests import healthy, topology, trainers

pytestmark = pytest.mark.timeout(240)


def control(home) -> str:
    return status(home)["control"]


def test_an_op_id_is_kept_however_many_operations_came_after(procs, home, tmp_path):
    job = launch(procs, home, topology(tmp_path))
    job.expect(lambda line: "every world formed" in str(line), 120)
    grown = cli(home, "scale", "trainer=+1", "--op", "grow-1")
    assert grown.returncode == 0, grown.stderr
    # its first call comes with a heartbeat after the operation is done: waited for,
    # and shown once known (never "-" while the head still waits for it)
    [line] = [x for x in grown.stdout.splitlines() if x.startswith("  trainer-2")]
    assert "first_call +" in line or "first_call pending" in line, grown.stdout
    assert "first_call -" not in line

    path = control(home)
    for i in range(300):  # no-op requests are operations too: once the 256th pushed it out
        reply = runs.request(path, {"verb": "scale", "changes": ["trainer=3"],
                                    "op": f"noop-{i}"})
        assert reply["changes"] == []
    again = cli(home, "scale", "trainer=+1", "--op", "grow-1")
    assert again.returncode == 0, again.stderr
    assert "grow-1 was asked already (scale trainer=+1); nothing more was changed" \
        in again.stdout
    doc = wait_status(home, lambda d: len(trainers(d)) == 3 and healthy(d), "three trainers")
    assert doc["scale"]["trainer"]["desired"] == 3
    # the head's own ids never take one a user gave: op-N is free however asked
    reply = runs.request(path, {"verb": "scale", "changes": ["trainer=3"], "op": "op-1"})
    assert reply["op"] == "op-1" and not reply.get("repeated")
    reply = runs.request(path, {"verb": "scale", "changes": ["trainer=3"]})
    assert reply["op"] == "op-2" and not reply.get("repeated")

    history = [json.loads(x) for x in next((home / "runs").glob("*/history.jsonl"))
               .read_text().splitlines()]
    job.signal(2)
    assert job.wait(timeout=60) == 0, job.output()[-3000:]
    wait_gone(home)
    if "first_call pending" in line:  # a slow machine: the history has it now
        [record] = [r for r in history if r.get("event") == "scale"
                    and r.get("process") == "trainer-2"] or [None]
        assert record is None or record["phases"]["first_call"] is not None


CROWD = f"""\
version: 1
timeout: 10
processes:
  crowd: {{cmd: {sys.executable} {BIN / 'crowd.py'}}}
  quiet: {{cmd: {sys.executable} {BIN / 'trainer.py'}}}
worlds:
  one: {{members: [crowd]}}
  two: {{members: [quiet]}}
"""


def test_many_stacks_asks_at_once_are_each_answered_and_a_huge_answer_is_trimmed(
        procs, home, tmp_path):
    path = tmp_path / "crowd.yaml"
    path.write_text(CROWD)
    job = launch(procs, home, path)
    job.expect(lambda line: "crowded" in str(line), 120)
    wait_status(home, healthy, "both worlds formed", timeout=90)
    socket_path = control(home)
    asked = [runs.request(socket_path, {"verb": "stacks", "processes": ["quiet"]})
             for _ in range(12)]  # all asked before any is read back, as 12 terminals

    def answered(ask):
        def done():
            now = runs.request(socket_path, {"verb": "stacks_result", "id": ask["id"]})
            return now if not now["waiting"] else None
        return wait_for(done, 30, f"ask {ask['id']} answered")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(answered, asked))
    assert all(r["members"][0]["answered"] for r in results)

    shown = cli(home, "stacks", "crowd", "--json", check=True)
    [member] = json.loads(shown.stdout)["members"]
    assert member["answered"], member.get("reason")
    assert "names cut to" in member["trimmed"]
    assert len(member["threads"]) > 200 and any(t["main"] for t in member["threads"])
    text = cli(home, "stacks", "crowd", check=True).stdout
    assert "its answer was trimmed to fit one message" in text
    job.signal(2)
    assert job.wait(timeout=60) == 0, job.output()[-3000:]
    wait_gone(home)


def test_a_request_while_the_run_starts_waits_for_its_supervisor(home, monkeypatch):
    """The run folder names its control socket before the supervisor listens on it (a
    head imports and forks its zygotes first): asked then, a command waits."""
    monkeypatch.setenv("MWRUN_HOME", str(home))
    run_dir = rundir.create("starting", "starting")  # this test plays the supervisor
    state = json.loads((run_dir / "state.json").read_text())
    stop = subprocess.Popen([sys.executable, "-m", "mwrun", "stop", "starting", "--no-wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MWRUN_HOME": str(home)})
    try:
        said = stop.stderr.readline()  # what it says while it waits
        assert "run starting is starting; waiting for its supervisor to listen" in said
        listener = sockets.listen(state["control"])
        listener.setblocking(True)
        connection, _ = listener.accept()
        with connection, listener:
            request = json.loads(connection.makefile().readline())
            assert request == {"verb": "stop", "force": False}
            connection.sendall(b'{"ok": true}\n')
        out, err = stop.communicate(timeout=60)
    finally:
        stop.kill()
    assert stop.returncode == 0, said + err
    assert "stopping starting..." in out


def test_a_request_right_after_the_run_folder_appears_is_served(procs, home, tmp_path):
    job = launch(procs, home, topology(tmp_path))
    wait_for(lambda: list(home.glob("runs/*/state.json")), 60, "the run's folder")
    grown = cli(home, "scale", "trainer=+1", "--no-wait")
    assert grown.returncode == 0, grown.stderr
    doc = wait_status(home, lambda d: len(trainers(d)) == 3 and healthy(d), "three trainers",
                      timeout=120)
    assert doc["scale"]["trainer"]["desired"] == 3
    job.signal(2)
    assert job.wait(timeout=60) == 0, job.output()[-3000:]
    wait_gone(home)
