"""What status, the history and the report say about a real run: traffic rates, the
forming of worlds (never claimed before it happens), and a drill's timeline."""

import json
import signal
import struct
import sys
import time

import pytest

from tests.helpers import BIN, prefixed, wait_gone
from tests.integration.jobs import (
    cli,
    expect,
    launch,
    proc_state,
    status,
    wait_for,
    wait_status,
    world_state,
    write_star,
)

pytestmark = pytest.mark.timeout(180)

RATE = 20  # messages per second each spoke sends
NUMEL = 1024  # float32 elements: 4 KiB a message


def counted_past_the_drill(path) -> bool:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kill = next((r["t"] for r in records if r.get("why") == "drill"), None)
    return kill is not None and any(
        r.get("calls", {}).get("world2", [0, 0])[1] > kill + 1.0 for r in records)


def started(home):
    wait_for(lambda: cli(home, "status").returncode == 0 and status(home)["processes"],
             what="the run to answer")


def first_times(job, event):
    """process name -> the 't' of its first JSON line with this event."""
    found = {}
    for line in job.lines:
        name = line.partition(" | ")[0].strip()
        value = prefixed(name)(line)
        if value and value.get("event") == event:
            found.setdefault(name, value["t"])
    return found


@pytest.mark.slow
def test_a_drill_rates_history_and_report(procs, home, tmp_path):
    topology = write_star(tmp_path, spoke=f"--interval {1 / RATE} --numel {NUMEL}", numel=NUMEL)
    job = launch(procs, home, topology, "--run-id", "drill")
    started(home)
    # Rates: members that send messages of 4 KiB (RATE a second, fewer on a loaded
    # machine: status shows what was sent, not what was meant) for a whole window.
    doc = wait_status(home, lambda d: all((w["healthy_for_s"] or 0) > 7 for w in d["worlds"]),
                      "both worlds healthy for 7 s", timeout=90)
    for world in doc["worlds"]:
        assert world["calls_per_s"] > 0, world
        assert world["bytes_per_s"] == pytest.approx(world["calls_per_s"] * NUMEL * 4,
                                                     rel=0.02), world
        assert world["last_call_age_s"] >= 0 and world["failures"] == 0
    assert proc_state(doc, "worker-0")["traffic"]["world1"]["calls_per_s"] > 0
    shown = cli(home, "status", "drill", check=True).stdout
    assert "CALLS/S" in shown and "HEALTHY FOR" in shown

    cli(home, "kill-world", "world1", check=True)
    expect(job, "leader", "rejoined", world="world1", timeout=60)
    wait_status(home, lambda d: world_state(d, "world1")["state"] == "healthy",
                "world1 re-formed")
    live = cli(home, "report", "-o", str(tmp_path / "live.png"), check=True).stdout
    assert "run drill (star)" in live and "re-formed +" in live  # a live run draws too
    # world2's pace around the fault is known once its calls were counted past it (the
    # counts come about once a second; a warm re-form takes a fraction of one).
    wait_for(lambda: counted_past_the_drill(home / "runs" / "drill" / "history.jsonl"), 30,
             "world2's calls counted past the fault")
    cli(home, "stop", "drill", check=True)
    assert job.wait() == 0
    wait_gone(home)

    lines = (home / "runs" / "drill" / "history.jsonl").read_text().splitlines()
    events = [e for e in map(json.loads, lines) if "event" in e and e["event"] != "postmortem"]
    drill = [e for e in events if e.get("process") == "worker-0" or e.get("world") == "world1"]
    kinds = [(e["event"], e.get("why"), e.get("generation"), e.get("restarts"))
             for e in drill]
    kill = kinds.index(("signal", "drill", None, None))
    assert [k[0] for k in kinds[kill:kill + 5]] == ["signal", "exit", "break", "spawn", "form"]
    assert kinds[kill + 3][3] == 1 and kinds[kill + 4][2] == 1  # restart 1, generation 1
    times = [e["t"] for e in drill[kill:kill + 5]]
    assert times == sorted(times)
    assert not any(e["event"] == "break" and e["world"] == "world2" for e in events)

    out = tmp_path / "drill.png"
    report = cli(home, "report", "drill", "-o", str(out), check=True).stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 1_000_000
    width, height = struct.unpack(">II", data[16:24])
    assert 500 <= width <= 2000 and 300 <= height <= 2000
    down = times[4] - times[0]  # kill to re-form; to its first call where that was timed
    fault = next((e for e in events if e["event"] == "fault" and e["world"] == "world1"), None)
    if fault is not None and fault["phases"].get("first_call") is not None:
        down = fault["phases"]["first_call"] - fault["phases"]["t_fault"]
    shown_down = f"{down * 1000:.0f} ms" if down < 1 else f"{down:.2f} s"
    assert f"world1: 1 break(s), down {shown_down} in all" in report
    assert "meanwhile world2: " in report, report  # its pace, kept or not (a loaded machine)
    assert "world2: no breaks" in report


@pytest.mark.slow
def test_sixteen_worlds_show_forming_until_they_have_formed(procs, home, tmp_path):
    topology = write_star(tmp_path, workers=16, spoke="--interval 0.2", restart="never",
                          numel=NUMEL)
    job = launch(procs, home, topology)
    started(home)
    healthy_at: dict[str, float] = {}
    running_at: dict[str, float] = {}
    deadline = time.monotonic() + 150
    while len(healthy_at) < 16:
        assert time.monotonic() < deadline, f"only {sorted(healthy_at)} formed"
        doc = status(home)
        seen = time.time()  # the answer came before this moment
        for w in doc["worlds"]:
            if w["state"] == "healthy":
                healthy_at.setdefault(w["name"], seen)
        for p in doc["processes"]:
            if p["state"] == "running":
                running_at.setdefault(p["name"], seen)
    inits = first_times(job, "init")  # each process's moment just before mwrun.init()
    for i in range(16):
        world, worker = f"world{i + 1}", f"worker-{i}"
        # A world shown healthy had both members in init already: it formed, it was
        # not taken for formed while they were still importing torch.
        never = float("inf")  # had not even begun init when the world was shown healthy
        assert inits.get("leader", never) <= healthy_at[world], world
        assert inits.get(worker, never) <= healthy_at[world], world
        assert inits.get(worker, never) <= running_at[worker], worker
    job.signal(signal.SIGTERM)
    assert job.wait() == 0
    wait_gone(home)


def test_a_plain_script_is_not_healthy_before_its_group_exists(procs, home, tmp_path):
    gate = tmp_path / "gate"
    path = tmp_path / "plain.yaml"
    path.write_text(f"version: 1\nprocesses:\n  rank:\n    replicas: 2\n"
                    f"    cmd: {sys.executable} {BIN / 'plain.py'} --gate {gate}\n"
                    "worlds:\n  default: {members: [rank]}\n")
    job = launch(procs, home, path)
    started(home)
    # Long past the 3 s after which mwrun once took a silent process for joined.
    doc = wait_status(home, lambda d: world_state(d, "default")["state"] != "forming"
                      or all(p["started_at"] and time.time() - p["started_at"] > 5
                             for p in d["processes"]), "processes up for 5 s", timeout=60)
    assert world_state(doc, "default")["state"] == "forming"
    assert {p["state"] for p in doc["processes"]} == {"starting"}
    gate.write_text("")
    doc = wait_status(home, lambda d: world_state(d, "default")["state"] == "healthy",
                      "the plain group formed")
    assert {p["state"] for p in doc["processes"]} == {"running"}
    assert len(first_times(job, "init")) == 2  # both ranks did reach init_process_group
    (tmp_path / "gate.end").write_text("")
    assert job.wait() == 0, job.output()
    wait_gone(home)
