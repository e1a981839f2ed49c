"""The phases of a real fault (head/faults.py): a drill on a live star, its record in
history.jsonl and its ``last_fault`` in status, every phase there and in order."""

import json

import pytest

from mwrun.schema import Event as E
from mwrun.schema import Phase
from tests.helpers import wait_gone
from tests.integration.jobs import cli, launch, status, wait_status, world_state
from tests.integration.test_traffic import started, write_star

pytestmark = pytest.mark.timeout(180)

PHASES = [p.value for p in Phase]


def in_order(phases: dict) -> bool:
    times = [phases[p] for p in PHASES]
    return None not in times and times == sorted(times)


def test_a_drill_is_timed_phase_by_phase_in_history_and_status(procs, home, tmp_path):
    topology = write_star(tmp_path, spoke="--interval 0.05")
    job = launch(procs, home, topology, "--run-id", "phases")
    started(home)
    wait_status(home, lambda d: all(w["state"] == "healthy" and w["calls_per_s"]
                                    for w in d["worlds"]), "both worlds carrying", timeout=90)
    assert all(w["last_fault"] is None for w in status(home)["worlds"])
    cli(home, "kill-world", "world1", check=True)

    doc = wait_status(home, lambda d: (f := world_state(d, "world1")["last_fault"]) is not None
                      and not f["open"], "world1's fault closed by its first call", timeout=60)
    fault = world_state(doc, "world1")["last_fault"]
    assert fault["generation"] == 0 and fault["process"] == "worker-0"
    assert fault["signal"] == "SIGKILL" and fault["phases"]["t_fault"] == 0.0
    assert in_order(fault["phases"]), fault
    assert world_state(doc, "world2")["last_fault"] is None
    shown = cli(home, "status", "phases", check=True).stdout
    assert "world1 generation 0 (worker-0, SIGKILL): exit_seen +" in shown

    cli(home, "stop", "phases", check=True)
    assert job.wait() == 0
    wait_gone(home)
    history = (home / "runs" / "phases" / "history.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in history if '"event"' in line]
    [record] = [r for r in records if r["event"] == E.FAULT]
    assert record["world"] == "world1" and record["generation"] == 0
    assert record["process"] == "worker-0" and record["signal"] == "SIGKILL"
    assert record["cause"] == "worker-0 was killed by SIGKILL"
    assert list(record["phases"]) == PHASES and in_order(record["phases"]), record
    # The same moments as the events the history keeps: the signal, the re-form.
    signal_t = next(r["t"] for r in records if r["event"] == E.SIGNAL)
    form_t = next(r["t"] for r in records if r["event"] == E.FORM and r["generation"] == 1)
    assert abs(record["phases"]["t_fault"] - signal_t) < 0.01
    assert record["phases"]["reformed"] <= form_t
