"""A job larger than any fixed limit of the head (its listen backlog was 64): every
process supervised, none left without heartbeats because the head was busy."""

import contextlib
import os

import pytest

from tests.helpers import python
from tests.integration.jobs import launch, status, wait_for, wait_status

PAIRS = 100  # 200 processes, warm from one zygote


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_hundred_warm_processes_are_each_supervised(procs, home, tmp_path):
    cmd = " ".join(python("pair.py", "--interval", "2"))
    procs_yaml = f"  member: {{replicas: {2 * PAIRS}, cmd: {cmd}}}\n"
    worlds = "".join(f"  w{i}: {{members: [member-{2 * i}, member-{2 * i + 1}]}}\n"
                     for i in range(PAIRS))
    topology = tmp_path / "big.yaml"
    topology.write_text(f"version: 1\nhang_timeout: 300\n"  # warm: the default
                        f"processes:\n{procs_yaml}worlds:\n{worlds}")
    job = launch(procs, home, topology)
    wait_for(lambda: list(home.glob("runs/*/state.json")), 120, "the run's folder")
    # Running means it said hello and joined (its ready arrived); traffic in its
    # entry comes only from its heartbeats: both are the supervisor hearing it.
    try:
        doc = wait_status(home, lambda d: all(p["state"] == "running" for p in d["processes"])
                          and all(w["state"] == "healthy" for w in d["worlds"]),
                          "every process running and every world healthy", timeout=420)
    except AssertionError:
        raise AssertionError(f"not all running: {stuck(status(home))}") from None
    assert len(doc["processes"]) == 2 * PAIRS
    assert all(p["start"] == "warm" for p in doc["processes"])
    wait_status(home, lambda d: all(p["traffic"] for p in d["processes"]),
                "a heartbeat with traffic from every process", timeout=120)
    job.signal(2)
    assert job.wait(120) == 0
    # Said once, when the last of the worlds formed (a count kept as each forms).
    assert job.output().count("every world formed") == 1, job.output()[-2000:]


def stuck(doc) -> list:
    """What the kernel says of each process not yet running (where is it waiting?)."""
    found = []
    for proc in doc["processes"]:
        if proc["state"] == "running":
            continue
        seen = {"name": proc["name"], "state": proc["state"], "pid": proc.get("pid")}
        for part in ("status", "wchan", "stack", "cmdline"):
            with contextlib.suppress(OSError, TypeError), \
                    open(f"/proc/{proc['pid']}/{part}", "rb") as file:
                seen[part] = file.read().decode(errors="replace")[:1500]
        with contextlib.suppress(OSError, TypeError):
            seen["fds"] = sorted(os.listdir(f"/proc/{proc['pid']}/fd"))
        found.append(seen)
    return found
