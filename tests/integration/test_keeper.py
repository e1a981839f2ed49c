"""The worlds' stores live in a process of their own, the keeper, beside the head: the
head imports no torch and listens on no world's port; the head's machine's agent forks
the keeper warm when the job preloads torch and starts it cold when not; it does what
the head writes, in order; a keeper that dies ends the run saying so and leaves nothing;
a head that dies takes its keeper along. Real processes, real stores."""

import json
import signal
import subprocess
import sys

import psutil
import pytest

from mwrun.errors import RunError
from mwrun.head.hosts.stores import StoreKeeper
from mwrun.plan import ports
from mwrun.plan.placement import Plan, WorldPlan
from tests.helpers import EXIT_WAIT, assert_gone, wait_gone
from tests.integration.jobs import launch, status, wait_for
from tests.integration.test_warm import finish, write

pytestmark = pytest.mark.timeout(120)
PY = sys.executable
SLEEPER = [PY, "-c", "import time; time.sleep(120)"]


def keeper_of(head: int) -> psutil.Process | None:
    """The keeper: its agent's, never the head's own child."""
    for child in psutil.Process(head).children(recursive=True):
        try:
            if "mwrun.keeper" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def said(home, run=None) -> str:
    """What the run's keeper wrote to its log, once it said which worlds it keeps."""
    logs = list((home / "runs").glob(f"{run or '*'}/keeper.log"))
    text = logs[0].read_text() if logs else ""
    return text if "keeper (pid" in text else ""


def world_ports(home) -> set[int]:
    (plan,) = (home / "runs").glob("*/plan.json")
    return {w["port"] for w in json.loads(plan.read_text())["worlds"].values()}


def listening(proc: psutil.Process) -> set[int]:
    return {c.laddr.port for c in proc.net_connections("inet") if c.status == "LISTEN"}


def test_the_keeper_forked_warm_holds_every_worlds_port_and_the_head_no_torch(
        procs, home, tmp_path):
    script = tmp_path / "sleeper.py"  # a script, so its processes start warm
    script.write_text("import time\ntime.sleep(120)\n")
    job = launch(procs, home, write(tmp_path, {"a": ([PY, str(script)], []),
                                               "b": ([PY, str(script)], [])}))
    log = wait_for(lambda: said(home), 60, "the keeper's first line")
    assert "forked warm" in log, log
    keeper = wait_for(lambda: keeper_of(job.pid), 10, "the keeper")
    wanted = world_ports(home)
    wait_for(lambda: wanted <= listening(keeper), 60, "every store listening")
    head = psutil.Process(job.pid)
    assert not wanted & listening(head)
    assert not [m.path for m in head.memory_maps() if "torch" in m.path]
    assert [m.path for m in keeper.memory_maps() if "libtorch" in m.path]
    job.signal(signal.SIGTERM)
    finish(job, home, 0)


# Ends once the run's keeper has said its first line: a run over before its keeper
# (a cold one imports torch first) never hears it.
ONCE_KEPT = ("import glob, os, time\n"
             "log = os.path.join(os.environ['MWRUN_HOME'], 'runs', '*', 'keeper.log')\n"
             "while not any('keeper (pid' in open(p).read() for p in glob.glob(log)):\n"
             "    time.sleep(0.05)\n")


def test_without_a_torch_zygote_the_keeper_starts_cold(procs, home, tmp_path):
    job = launch(procs, home, write(tmp_path, {"a": ([PY, "-c", ONCE_KEPT], [])},
                                    preload="false"))
    finish(job, home, 0)
    assert "started cold" in said(home)


def test_a_keeper_that_dies_ends_the_run_saying_so_and_leaves_nothing(procs, home, tmp_path):
    # Restarted by its policy: only a stop ends its run (it once ended "lost").
    job = launch(procs, home, write(tmp_path, {"a": (SLEEPER, ["restart: always"])}))
    wait_for(lambda: said(home), 60, "the keeper's first line")
    keeper = wait_for(lambda: keeper_of(job.pid), 10, "the keeper")
    (saved,) = (home / "runs").glob("*/state.json")  # the run under way, its process made
    wait_for(lambda: json.loads(saved.read_text())["processes"][0]["pid"], 60, "a's pid")
    keeper.kill()
    assert job.wait(60) == 1
    assert "the worlds' stores' keeper" in job.output() and "keeper.log" in job.output()
    wait_gone(home)
    doc = status(home)  # a failed run, saying why: never one whose head is "lost"
    assert doc["state"] == "failed" and doc["exit_code"] == 1, doc["state"]


def test_a_head_killed_takes_its_keeper_along(procs, home, tmp_path):
    job = launch(procs, home, write(tmp_path, {"a": (SLEEPER, [])}))
    wait_for(lambda: said(home), 60, "the keeper's first line")
    keeper = wait_for(lambda: keeper_of(job.pid), 10, "the keeper")
    job.signal(signal.SIGKILL)
    assert_gone([keeper.pid])
    wait_gone(home)


def world(name: str, port: int) -> WorldPlan:
    return WorldPlan(name, ("a", "b"), "gloo", 10.0, "127.0.0.1", port, True, "isolate")


def client(port: int):
    import datetime

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=5))


def kept(tmp_path, plan: Plan, listeners: dict) -> StoreKeeper:
    """A StoreKeeper and its keeper, started cold as an agent starts it (host/asks.py)."""
    keeper = StoreKeeper(plan, listeners, tmp_path / "keeper.log", tmp_path / "k.sock", None)

    def ask(args, modules, env, log):
        with open(log, "ab") as out:
            popen = subprocess.Popen([PY, "-m", "mwrun.keeper", *args], stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        STARTED.append(popen)
        keeper.kept({"pid": popen.pid, "warm": False})

    keeper.start(ask)
    return keeper


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def reaped():
    yield
    while STARTED:
        STARTED.pop().wait(timeout=30)


def test_what_the_head_writes_the_keeper_does_in_order(tmp_path):
    from mwrun import protocol

    first = ports.bind_free("127.0.0.1", set())
    port = first.getsockname()[1]
    plan = Plan("p", "p.yaml", "localhost", {}, {"w": world("w", port)})
    keeper = kept(tmp_path, plan, {"w": first})
    try:
        keeper.serve(lambda: None)
        keeper.mark_broken("w", 0, "a member died")  # before the store exists: it waits
        wait_for(keeper.ready, 60, "the stores built")
        store = client(port)
        # Written in the keeper, a moment after the head wrote it, in the head's order.
        wait_for(lambda: protocol.broken_reason(store, 0), 10, "the break")
        assert protocol.broken_reason(store, 0) == "a member died"
        keeper.open_next("w", 0, [2, 1])
        keeper.mark_broken("w", 1, "another one")
        wait_for(lambda: protocol.broken_reason(store, 1), 10, "the next break")
        assert protocol.admitted(store, 1, 2) == [2, 1]
        # A world added while the job runs, on the port its revision chose and bound.
        added = world("v", keeper.choose_port("127.0.0.1", {port}))
        keeper.add_world(added, [1, 1])
        new = client(added.port)  # it waits in the listener's backlog until the store is
        protocol.wait_value(new, protocol.GEN, 10)  # as a joining member does: then all is
        assert protocol.members(new, 0) == ["a", "b"]  # there that the generation needs
        # A plain group's rendezvous keys, as gloo writes them: which ranks met.
        store.set("default_pg/0//cpu//0/0", "x")
        assert keeper.plain_ranks("w") == {0}
        store.set("default_pg/0//cpu//0/1", "x")
        assert keeper.plain_ranks("w") == {0, 1}
    finally:
        pid = keeper.pid
        keeper.close()
    assert_gone([pid])


def test_a_keeper_that_ends_unasked_is_reported_naming_its_log(tmp_path):
    log = tmp_path / "keeper.log"
    keeper = kept(tmp_path, Plan("p", "p.yaml", "localhost", {}, {}), {})
    pid = keeper.pid
    try:
        psutil.Process(pid).kill()

        def raised() -> str | None:
            try:
                keeper.ready()
            except RunError as exc:
                return str(exc)
            return None

        said = wait_for(raised, EXIT_WAIT, "ready() to say the keeper ended")
        assert f"keeper (pid {pid}) ended" in said and str(log) in said
    finally:
        keeper.close()
    assert_gone([pid])
