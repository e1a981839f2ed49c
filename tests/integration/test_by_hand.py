"""Worlds run by hand (no launcher), as examples/send_recv's README shows: a world whose
peers all left is over, and Ctrl-C ends a process whatever it waits for."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.integration.test_examples import free_base

pytestmark = pytest.mark.timeout(120)
SCRIPT = ROOT / "examples" / "send_recv"


def starter(procs):
    base = free_base()

    def start(name, *args):
        return procs.start([sys.executable, str(SCRIPT / name), "--base-port", str(base),
                            *args], env={"PYTHONFAULTHANDLER": "1"})
    return start


def no_traceback(proc) -> None:
    out = proc.output()
    assert "Traceback" not in out and "Exception in thread" not in out, out


def test_the_leader_ends_once_its_workers_have_finished(procs):
    start = starter(procs)
    leader = start("leader.py", "--worldinfo", "1,0", "--worldinfo", "2,0")
    workers = [start("worker.py", "--worldinfo", f"{w},1", "--steps", "3", "--interval", "0.05")
               for w in (1, 2)]
    for worker in workers:
        assert worker.wait() == 0, worker.output()
    assert leader.wait(timeout=60) == 0, leader.output()
    lines = leader.lines
    for world in ("world1", "world2"):
        assert f"{world} ended: rank 1 left the world (it closed it)" in lines
        assert f"{world} is over: every peer left the world (they closed it)" in lines
        assert f"{world}: received 3 tensors" in lines
    assert not any(" broke" in line for line in lines), lines
    no_traceback(leader)


def test_ctrl_c_ends_a_leader_that_waits_for_a_peer(procs):
    start = starter(procs)
    leader = start("leader.py", "--worldinfo", "1,0")
    worker = start("worker.py", "--worldinfo", "1,1", "--steps", "100000", "--interval", "0.05")
    leader.expect(lambda line: "from rank 1 in world1" in str(line))
    worker.signal(signal.SIGKILL)  # it will not come back: the leader waits in rejoin()
    leader.expect(lambda line: str(line).startswith("world1 broke: "))
    leader.signal(signal.SIGINT)
    assert ended(leader) == 130, leader.output()
    no_traceback(leader)


def ended(proc, timeout: float = 20.0) -> int | str:
    """Its exit status; if it has not ended in time, what each of its threads was doing
    (faulthandler prints them on SIGABRT), for the failure to show."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.signal(signal.SIGABRT)
        proc.wait(timeout=30)
        return "still running after Ctrl-C; its threads:"


def test_ctrl_c_on_the_store_host_ends_its_peers_worlds_in_one_line(procs):
    """Rank 0 hosts each world's store by hand: when it goes, its peers' worlds end with
    one line, no C++ dump of torch's store client, no traceback, and they exit 0."""
    start = starter(procs)
    leader = start("leader.py", "--worldinfo", "1,0", "--worldinfo", "2,0")
    workers = [start("worker.py", "--worldinfo", f"{w},1", "--steps", "0", "--interval", "0.05")
               for w in (1, 2)]
    for world in ("world1", "world2"):
        leader.expect(lambda line, world=world: f"from rank 1 in {world}" in str(line))
    leader.signal(signal.SIGINT)
    assert ended(leader) == 130, leader.output()
    for world, worker in zip(("world1", "world2"), workers, strict=True):
        assert ended(worker) == 0, worker.output()
        said = [line for line in worker.lines if not line.startswith(f"{world}: sent ")]
        assert said[1:] == [f"{world} ended: its store host, rank 0, has gone"], said
        assert "TCPStore" not in worker.output() and "frame #" not in worker.output()
        no_traceback(worker)


def test_a_store_host_that_dies_ends_its_peers_worlds_all_the_same(procs):
    """Killed, rank 0 cannot say it leaves; its peers read it from the lost store, in the
    same one line, and exit 0. (torch's store client may log its own C++ warning first:
    its log threshold is one per process, see worlds/storehost.py.)"""
    start = starter(procs)
    leader = start("leader.py", "--worldinfo", "1,0")
    worker = start("worker.py", "--worldinfo", "1,1", "--steps", "0", "--interval", "0.05")
    leader.expect(lambda line: "from rank 1 in world1" in str(line))
    leader.signal(signal.SIGKILL)
    assert ended(worker) == 0, worker.output()
    assert "world1 ended: its store host, rank 0, has gone" in worker.lines
    no_traceback(worker)


EXITS_MID_LETTING_GO = """\
import threading, time
import mwrun.worlds.storehost  # its exit hook, as any member process has it
from mwrun.worlds.interruptible import letting_go

seen = threading.Event()

def watcher():  # woken by a removal: the caller sees the error before this is done
    with letting_go():
        seen.set()
        time.sleep(1.0)  # an abort, a store write, a group handed to its reaper
        print("let go", flush=True)

threading.Thread(target=watcher, daemon=True).start()
seen.wait()
print("exiting", flush=True)
"""


EXITS_AS_ITS_WORLD_BREAKS = """\
import sys, time
import mwrun
from mwrun import WorldSpec

port, flag = int(sys.argv[1]), sys.argv[2]
mwrun.init(worlds={"w": WorldSpec(rank=0, size=1, port=port, host_store=False)})

class Teardown:  # deleted as __main__ is cleared: the interpreter's teardown has begun
    def __del__(self, touch=open, sleep=time.sleep):
        touch(flag, "w").close()  # the world breaks now (a peer that ended just then)
        sleep(2.0)

keep = Teardown()
print("joined", flush=True)
"""


# A member here is a new interpreter that imports torch: 3 s alone, but with two suites
# at once on two cores one took over 60 s to reach its end (its stacks showed it in its
# teardown just after the deadline, not stuck). Their deadlines are for a hang only.
STARVED = 240


@pytest.mark.timeout(2 * STARVED + 60)
def test_a_process_that_exits_without_close_as_its_world_breaks_ends_normally(tmp_path):
    """A member that ends without close() while a peer's end breaks the world (under the
    launcher: both ended at the same moment): its watcher, asleep in the store, must be
    woken by the exit hook, not by the break during the interpreter's teardown, where
    it comes back from torch's C++ and the process dies by SIGABRT."""
    from datetime import timedelta

    import torch.distributed as dist

    from mwrun import protocol

    store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=30),
                          wait_for_workers=False)  # the launcher's, in effect
    protocol.start(store)
    flag = tmp_path / "in-teardown"
    member = subprocess.Popen([sys.executable, "-c", EXITS_AS_ITS_WORLD_BREAKS,
                               str(store.port), str(flag)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARVED
        while not flag.exists() and member.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flag.exists(), stacks_of(member)
        protocol.mark_broken(store, 0, 1, "its peer ended")
        out, _ = member.communicate(timeout=STARVED)
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
        member.stdout.close()  # (communicate closes it; a failure before would leave it)
    assert (member.returncode, out) == (0, "joined\n")


def stacks_of(member: subprocess.Popen) -> str:
    """What a member that never reached its teardown was doing (its threads' stacks, read
    from outside by py-spy, which mwrun's bundles use too): a rare hang at exit, seen
    only under two suites at once, says where it waits."""
    if member.poll() is not None:
        return f"exited {member.returncode}: {member.communicate(timeout=30)[0]}"
    spy = subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--native",
                          "--pid", str(member.pid)], capture_output=True, text=True,
                         timeout=60)
    return f"still running; its stacks:\n{spy.stdout}{spy.stderr}"


@pytest.mark.timeout(STARVED + 60)
def test_a_process_that_exits_while_a_generation_is_let_go_waits_for_it():
    """A thread of ours still in C++ when the interpreter's teardown begins aborts the
    process as it returns ("terminate called without an active exception", a drained
    member under CI load): the exit hook waits for a watcher letting a generation go
    (an abort, a store write, a group handed to its reaper) before anything else."""
    done = subprocess.run([sys.executable, "-c", EXITS_MID_LETTING_GO], cwd=ROOT,
                          capture_output=True, text=True, timeout=STARVED)
    assert (done.returncode, done.stdout) == (0, "exiting\nlet go\n"), done
