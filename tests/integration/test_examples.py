"""Every example, launched from its topology in configs/ (fewer steps), and drilled."""

import contextlib
import random
import re
import signal
import socket
import sys

import pytest

from tests.helpers import ROOT, wait_gone
from tests.integration.jobs import cli, launch, proc_state, status, world_state

pytestmark = pytest.mark.timeout(180)
OPS = ("broadcast", "reduce", "all_reduce", "all_gather", "gather", "scatter")


def config(tmp_path, name: str, *replacements) -> str:
    """configs/NAME.yaml run from the repository, with (old, new) replacements."""
    text = (ROOT / "configs" / f"{name}.yaml").read_text().replace("cwd: ..", f"cwd: {ROOT}")
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def line_of(job, name: str, pattern: str, timeout: float = 60.0) -> str:
    """The next output line of process ``name`` matching a regular expression: waited
    for as long as ``name`` makes progress (prints lines), until it is ``timeout``
    seconds silent; a busy machine makes the examples slower, never wrong."""
    regex = re.compile(pattern)

    def said(line):
        return isinstance(line, str) and line.split(" | ", 1)[0].strip() == name

    while True:
        text = job.expect(said, timeout).split(" | ", 1)[-1]
        if regex.search(text) is not None:
            return text


def lines_of(job, name: str) -> list[str]:
    return [line.split(" | ", 1)[1] for line in job.lines
            if line.split(" | ", 1)[0].strip() == name and " | " in line]


def served_after(job, name: str, first: str, then: str) -> bool:
    """Whether ``name`` said a line matching ``then`` after its first matching ``first``:
    the other world carried on after the break, whenever the broken one re-formed (a
    warm restart may re-form it before the next call of the other world)."""
    said = lines_of(job, name)
    start = next(i for i, line in enumerate(said) if re.search(first, line))
    return any(re.search(then, line) for line in said[start + 1:])


def test_send_recv_star_leader_serves_through_a_drill(procs, home, tmp_path):
    path = config(tmp_path, "star", ("--steps 0", "--steps 0 --interval 0.05"))
    job = launch(procs, home, path)
    line_of(job, "leader", r"received tensor\(\[5\.\]\) from rank 1 in world1")
    assert "sent SIGKILL to worker-0" in cli(home, "kill-world", "world1", check=True).stdout
    assert line_of(job, "leader", r"^world1 broke:") == \
        "world1 broke: worker-0 was killed by SIGKILL"
    line_of(job, "leader", r"^world1 re-formed \(generation 1\)")
    line_of(job, "leader", r"received tensor\(\[0\.\]\) from rank 1 in world1")  # the new one
    line_of(job, "leader", r"from rank 1 in world2")
    assert served_after(job, "leader", r"^world1 broke:", r"from rank 1 in world2")
    doc = status(home)
    assert proc_state(doc, "worker-0")["restarts"] == 1
    assert proc_state(doc, "worker-1")["restarts"] == 0
    job.signal(signal.SIGINT)
    assert job.wait() == 0
    wait_gone(home)


def test_send_recv_by_hand_with_worldinfo(procs, tmp_path):
    script = ROOT / "examples" / "send_recv"
    base = free_base()

    def start(name, *args):
        return procs.start([sys.executable, str(script / name), "--base-port", str(base),
                            *args])

    leader = start("leader.py", "--worldinfo", "1,0", "--worldinfo", "2,0")
    first = start("worker.py", "--worldinfo", "1,1", "--steps", "100000", "--interval", "0.05")
    start("worker.py", "--worldinfo", "2,1", "--steps", "100000", "--interval", "0.05")
    leader.expect(lambda line: "from rank 1 in world1" in str(line))
    leader.expect(lambda line: "from rank 1 in world2" in str(line))
    first.signal(signal.SIGKILL)  # by hand: no supervisor, the peers notice it themselves
    # The leader's own call notices: "Connection closed by peer" or, when the killed
    # process left unread data behind (the kernel then resets), "Read error ... reset".
    broke = leader.expect(lambda line: str(line).startswith(
        "world1 broke: rank 0 lost its connection to a peer ("))
    assert "Connection closed" in broke or "reset by peer" in broke, broke
    leader.expect(lambda line: "from rank 1 in world2" in str(line))
    start("worker.py", "--worldinfo", "1,1", "--steps", "100000", "--interval", "0.05")
    leader.expect(lambda line: str(line) == "world1 re-formed (generation 1)")
    leader.expect(lambda line: "tensor([0.]) from rank 1 in world1" in str(line))


def free_base() -> int:
    """A base port B with B+1000 and B+2000 free (MultiWorld's port scheme)."""
    return free_ports((1000, 2000))


@pytest.mark.parametrize("op", OPS)
def test_collective_in_a_single_world(procs, home, tmp_path, op):
    # One example starts cold (preload: false), the ordinary way, as every other test
    # here starts them warm (the default); three cold torch imports per example would
    # cost the suite more than all the rest of this file.
    start = "cold" if op == OPS[0] else "warm"
    preload = ("version: 1\n", "version: 1\npreload: false\n") if start == "cold" \
        else ("version: 1\n", "version: 1\n")
    path = config(tmp_path, f"{op}_single", ("--steps 100 --interval 0.1",
                                             "--steps 3 --interval 0.05"), preload)
    job = launch(procs, home, path)
    assert job.wait(timeout=120) == 0, job.output()
    # Its own bring-up (the stores wait for its torch import) is no stall of the
    # supervisor's, and it says nothing of the kind: nothing went wrong. (A machine too
    # busy to run it at all is no defect of mwrun's: that notice says "starved".)
    assert not [line for line in job.lines if "was not running" in line
                and "starved" not in line], job.output()
    assert {p["start"] for p in status(home, next((home / "runs").iterdir()).name)
            ["processes"]} == {start}
    for rank in range(3):
        out = lines_of(job, f"rank-{rank}")
        # it says how long it will run before it starts
        assert out[0] == f"{op}: 3 steps in world1, one every 0.05s: about 0.2s" \
                         " (--steps, --interval)", out
        assert [x for x in out if "done with step" in x] == \
            [f"world1: done with step: {s}" for s in (1, 2, 3)]
        for step in (1, 2, 3):
            assert expected_line(op, rank, step) in out, (rank, step, out)
    wait_gone(home)


def expected_line(op: str, rank: int, step: int) -> str:
    def t(value):
        return f"tensor([{value}., {value}., {value}.])"

    base, total = 10 * step, 30 * step + 3
    every = "[" + ", ".join(t(base + r) for r in range(3)) + "]"
    return {
        "broadcast": f"rank: {rank} from world1 "
                     + ("has broadcast" if rank == 0 else "has received") + f" tensor: {t(base)}",
        "reduce": f"rank: 0 from world1 has reduced tensor: {t(total)}" if rank == 0
        else f"rank: {rank} from world1 has sent tensor: {t(base + rank)}",
        "all_reduce": f"rank: {rank} from world1 has all-reduced tensor: {t(total)}",
        "all_gather": f"rank: {rank} from world1 has gathered tensors: {every}",
        "gather": f"rank: 0 from world1 has gathered tensors: {every}" if rank == 0
        else f"rank: {rank} from world1 has tensor: {t(base + rank)}",
        "scatter": f"rank: {rank} from world1 has received tensor: {t(base + rank)}",
    }[op]


STEPS = 100


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_collective_drill_the_other_world_finishes(procs, home, tmp_path, op):
    # 100 steps (10 s): the kill must land while world1 still works, and on a loaded
    # machine kill-world has come 4 s after the step it follows (30 steps were too few).
    path = config(tmp_path, f"{op}_multi", ("--steps 100 --interval 0.1",
                                            f"--steps {STEPS} --interval 0.1"))
    job = launch(procs, home, path)
    line_of(job, "leader", r"^world1: done with step: 3$")
    killed = cli(home, "kill-world", "world1", check=True).stdout
    assert "w1-0" in killed and "w1-1" in killed
    assert job.wait(timeout=120) == 1  # two processes failed: restart is never
    leader = lines_of(job, "leader")
    assert any(x.startswith("world1 broke at step") for x in leader), job.output()
    assert any(x.startswith("world1 is over") for x in leader), job.output()
    assert f"world1: done with step: {STEPS}" not in leader
    for name in ("leader", "w2-0", "w2-1"):  # world2 ran every step
        done = [x for x in lines_of(job, name) if x.startswith("world2: done with step")]
        assert done == [f"world2: done with step: {s}" for s in range(1, STEPS + 1)], name
    doc = status(home, next((home / "runs").iterdir()).name)
    assert doc["state"] == "failed"
    assert proc_state(doc, "w1-0")["state"] == "failed"
    assert proc_state(doc, "leader")["state"] == "exited"
    assert world_state(doc, "world1")["breaks"] == 1
    assert world_state(doc, "world2")["breaks"] == 0
    wait_gone(home)


@pytest.mark.slow
@pytest.mark.timeout(600)  # 200 batches of ResNet on 2 busy cores: minutes, not wrong
def test_resnet_pipelines_serve_through_a_drill(procs, home, tmp_path):
    path = config(tmp_path, "resnet", ("--batches 200 --interval 0.1",
                                       "--batches 200 --interval 0.05"))
    job = launch(procs, home, path)
    line_of(job, "leader", r"^batch \d+ served by world1: .*\(verified\)")
    cli(home, "kill-world", "world1", check=True)
    assert line_of(job, "leader", r"^world1 broke").startswith(
        "world1 broke (the other pipelines serve): pipeline1-")
    # Both of its stages were killed: the generation opened after the first death
    # counted on the second as it was, so it is spent too (fencing) and the next forms.
    line_of(job, "leader", r"^world1 re-formed \(generation [12]\)")
    summary = line_of(job, "leader", r"^served \d+ of 200 batches")
    assert summary.startswith("served 200 of 200 batches")
    assert job.wait() == 0, job.output()
    # Pipeline 1 serves again once re-formed, if batches were left for it: its thread
    # takes the next from the queue right after saying so, so three more served by
    # pipeline 2 (one in flight, one taken meanwhile, then one more) mean one was
    # there for it. (On a loaded machine its stages' restart took 30 s, and pipeline 2
    # had served every batch by then.)
    said = lines_of(job, "leader")
    after = said[next(i for i, x in enumerate(said) if x.startswith("world1 re-formed")):]
    if len([x for x in after if " served by world2" in x]) >= 3:
        assert any(" served by world1" in x for x in after), after
    # Pipeline 2 carried on after the break (before or after pipeline 1 re-formed).
    assert served_after(job, "leader", r"^world1 broke", r"^batch \d+ served by world2")
    served = [x for x in lines_of(job, "leader") if " served by " in x]
    assert len(served) == 200 and all(x.endswith("(verified)") for x in served)
    assert len({int(x.split()[1]) for x in served}) == 200  # each batch exactly once
    wait_gone(home)


def free_run(count: int) -> int:
    """A port P with P .. P+count-1 free (the example's worlds take consecutive ports)."""
    return free_ports(range(count))


def free_ports(offsets) -> int:
    """A base B with every B+offset free, drawn below the kernel's ephemeral range: the
    ports there are taken only by an explicit bind, never as the local end of some other
    test's connection between this check and the example's bind (40692 once was)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        top = int(ranges.read().split()[0]) - 1 - max(offsets)
    draw = random.Random()
    for _ in range(200):
        base = draw.randrange(10000, top)
        try:
            with contextlib.ExitStack() as held:
                for offset in offsets:
                    held.enter_context(socket.socket()).bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
    raise AssertionError(f"no free ports at offsets {list(offsets)}")


def test_examples_are_documented():
    for name in ("send_recv", *OPS, "resnet", "serving"):
        readme = (ROOT / "examples" / name / "README.rst").read_text()
        assert "mwrun launch configs/" in readme and "kill-world" in readme, name


def test_serving_by_hand_adds_and_removes_worlds_beside_one(procs, tmp_path):
    """examples/serving/README.rst's two terminals: worlds added, used and removed by
    hand (job.add_world, job.remove_world) while the first one goes on."""
    script = ROOT / "examples" / "serving" / "by_hand.py"
    port = free_run(4)
    first = procs.start([sys.executable, str(script), "--rank", "0", "--port", str(port),
                         "--pause", "0.1"])
    second = procs.start([sys.executable, str(script), "--rank", "1", "--port", str(port),
                          "--pause", "0.1"])
    for rank, proc in ((0, first), (1, second)):
        assert proc.wait(timeout=120) == 0, proc.output()
        out = proc.output()
        for n in range(3):
            assert f"rank {rank}: extra-{n} formed, all_reduce gave {2 * n};" \
                f" worlds now: main, extra-{n}" in out, out
            assert f"rank {rank}: event added extra-{n}" in out
            assert f"rank {rank}: event removed extra-{n}" in out
        assert f"rank {rank}: done; worlds now: main" in out
        assert "broken" not in out
