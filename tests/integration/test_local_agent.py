"""The head's own machine has its agent, as every other host does: the head starts no
process itself. Every process of the job (and the zygote, and the worlds' stores'
keeper) belongs to that agent; a killed agent is the loss of a host, reached again with
its processes restarted by their policy while the keeper, which ends only with its link
to the head, keeps every world's store; a killed head still leaves nothing.
Real processes, real stores."""

import os
import signal

import psutil
import pytest

from mwrun import runs, schema
from mwrun.head.hosts import remote
from mwrun.schema import HostState as H
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W
from tests.helpers import leftovers, wait_gone
from tests.integration.jobs import cli, launch, status, wait_for, wait_status, write_star

pytestmark = pytest.mark.timeout(180)


def healthy(home, restarts: int = 0):
    wait_for(lambda: list((home / "runs").glob("*/state.json")), 60, "the run")
    return wait_status(home, lambda d: all(w["state"] == W.HEALTHY for w in d["worlds"])
                       and all(p["state"] == P.RUNNING and p["restarts"] == restarts
                               for p in d["processes"]),
                       f"every world healthy after {restarts} restarts", timeout=120)


def named(pid: int, part: str) -> bool:
    try:
        return part in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def keeper_pids(head: int) -> list[int]:
    return [c.pid for c in psutil.Process(head).children(recursive=True)
            if named(c.pid, "mwrun.keeper")]


def test_every_process_is_the_agents_and_the_head_starts_none(procs, home, tmp_path):
    job = launch(procs, home, write_star(tmp_path, workers=2))
    doc = healthy(home)
    ((host, state, agent),) = [(h["name"], h["state"], h["agent_pid"]) for h in doc["hosts"]]
    assert state == H.LOCAL and agent is not None, doc["hosts"]
    head = psutil.Process(doc["supervisor_pid"])
    # The head's only children: this machine's agent (nothing over ssh here).
    assert [c.pid for c in head.children()] == [agent]
    assert named(agent, "mwrun agent") and f"--host {host}" in " ".join(
        psutil.Process(agent).cmdline())
    for proc in doc["processes"]:  # forked warm from the agent's zygote: the agent's
        assert psutil.Process(proc["pid"]).ppid() == agent, proc["name"]
    (keeper,) = wait_for(lambda: keeper_pids(head.pid), 30, "the keeper")
    assert psutil.Process(keeper).ppid() == agent
    assert (home / "runs" / doc["run_id"] / "zygote.log").exists()  # where the docs say
    job.signal(signal.SIGTERM)
    assert job.wait(60) == 0
    wait_gone(home)


def test_a_killed_local_agent_is_reached_again_and_its_processes_restarted(
        procs, home, tmp_path):
    star = write_star(tmp_path, workers=2)  # the leader restarted too (its default: never)
    star.write_text(_leader_restarts(star.read_text()))
    job = launch(procs, home, star)
    doc = healthy(home)
    (agent,) = [h["agent_pid"] for h in doc["hosts"]]
    (keeper,) = wait_for(lambda: keeper_pids(doc["supervisor_pid"]), 30, "the keeper")
    os.kill(agent, signal.SIGKILL)
    job.expect(lambda line: "host localhost lost" in line, 30)
    job.expect(lambda line: "host localhost is reachable again" in line, 60)
    after = healthy(home, restarts=1)  # re-formed on the stores the keeper kept
    ((state, again),) = [(h["state"], h["agent_pid"]) for h in after["hosts"]]
    assert state == H.LOCAL and again not in (None, agent)
    # The same keeper (no longer the agent's child: its agent died), never a second.
    assert [p.pid for p in leftovers(home) if named(p.pid, "mwrun.keeper")] == [keeper]
    assert all(w["generation"] > 0 for w in after["worlds"])
    job.signal(signal.SIGTERM)
    assert job.wait(60) == 0
    wait_gone(home)
    # The killed agent's files went with the last agent of the host: nothing in /tmp.
    folder = os.path.dirname(remote.control_path(doc["run_id"], "localhost"))
    assert not os.path.exists(folder), os.listdir(folder)


def _leader_restarts(text: str) -> str:
    head, _, rest = text.partition("  leader:\n")
    cmd, _, tail = rest.partition("\n")
    return f"{head}  leader:\n{cmd}\n    restart: on-failure\n{tail}"


def test_a_killed_head_leaves_nothing_on_its_machine(procs, home, tmp_path, monkeypatch):
    job = launch(procs, home, write_star(tmp_path, workers=1))
    doc = healthy(home)
    wait_for(lambda: keeper_pids(doc["supervisor_pid"]), 30, "the keeper")
    assert len(leftovers(home)) >= 5  # the head, its agent, the zygote, the keeper, the job
    job.signal(signal.SIGKILL)
    wait_gone(home)
    assert status(home)["state"] == "lost"
    # Its control socket could not be removed by it (its keeper's door went once the
    # keeper came); the run's removal takes it (under /tmp: a test's run folder is too
    # deep for a socket's path).
    monkeypatch.setenv("MWRUN_HOME", str(home))
    control = runs.socket_path(doc["run_id"], schema.CONTROL)
    assert control.is_socket() and str(control) == doc["control"]
    cli(home, "clean", "--keep", "0", check=True)
    assert not control.exists()
