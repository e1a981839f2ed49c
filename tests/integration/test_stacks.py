"""``mwrun stacks`` on a live star: a worker blocked in a world call is shown inside it,
with its duration, by its library's link thread; a stopped member is named as one that
did not answer."""

import json
import os
import signal

import pytest

from mwrun.schema import WorldState
from tests.helpers import wait_gone
from tests.integration.jobs import cli, launch, wait_for, wait_status, write_star

pytestmark = pytest.mark.timeout(180)

NUMEL = 256 * 1024  # float32 elements: 1 MiB a message, so a few fill the socket's buffers


def _stacks(home, *args) -> dict:
    return json.loads(cli(home, "stacks", *args, "--json", check=True).stdout)


def _member(answer: dict, name: str) -> dict:
    return next(m for m in answer["members"] if m["process"] == name)


def _blocked_in_send(home):
    """The stacks of world1 once worker-0's main thread has waited in send a while."""
    answer = _stacks(home, "--world", "world1")
    worker = _member(answer, "worker-0")
    main = next((t for t in worker.get("threads", []) if t["main"]), None)
    call = main and main["call"]
    return answer if call and call["call"] == "send" and call["for_s"] >= 1.0 else None


@pytest.mark.slow
def test_stacks_shows_a_worker_inside_its_world_call_and_names_a_stopped_member(
        procs, home, tmp_path):
    topology = write_star(tmp_path, workers=1, spoke=f"--interval 0.05 --numel {NUMEL}",
                          numel=NUMEL)
    # A long call timeout (and so hang timeout): the worker's send may stay blocked on
    # the stopped leader for as long as the test looks, however slow the machine.
    topology.write_text(topology.read_text().replace("timeout: 20", "timeout: 120"))
    job = launch(procs, home, topology, "--run-id", "stacks")
    wait_for(lambda: cli(home, "status", "stacks").returncode == 0, 60,
             "the run folder written")
    doc = wait_status(home, lambda d: all(w["state"] == WorldState.HEALTHY for w in d["worlds"]),
                      "world1 healthy", run="stacks", timeout=90)
    leader = next(p for p in doc["processes"] if p["name"] == "leader")
    worker_pid = next(p["pid"] for p in doc["processes"] if p["name"] == "worker-0")
    os.kill(leader["pid"], signal.SIGSTOP)  # it reads nothing more: the worker's send waits
    try:
        answer = wait_for(lambda: _blocked_in_send(home), 60, "worker-0 blocked in send")
        worker = _member(answer, "worker-0")
        assert (worker["pid"], worker["host"], worker["answered"]) == \
            (worker_pid, "localhost", True)
        main = next(t for t in worker["threads"] if t["main"])
        assert main["call"]["world"] == "world1"
        assert any(f[0].endswith("spoke.py") and "world.send(" in f[3] for f in main["stack"])
        assert any(t["name"] == "mwrun-heartbeat" for t in worker["threads"])
        stopped = _member(answer, "leader")
        assert not stopped["answered"] and "did not answer within" in stopped["reason"]

        shown = cli(home, "stacks", "stacks", "worker-0", check=True).stdout
        assert f"worker-0  pid {worker_pid} on localhost  in world1.send for " in shown
        assert "  Thread MainThread (main)  in world1.send for " in shown
        assert "spoke.py" in shown and "world.send(" in shown
        assert "leader" not in shown  # only the member named
    finally:
        os.kill(leader["pid"], signal.SIGCONT)
    cli(home, "stop", "stacks", check=True)
    job.wait()
    wait_gone(home)
    finished = cli(home, "stacks", "stacks")
    assert finished.returncode == 1 and "is not running" in finished.stderr
    assert "Traceback" not in finished.stderr
