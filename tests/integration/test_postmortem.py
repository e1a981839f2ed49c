"""Post-mortem bundles on real processes (tests/bin/stuck.py: three members of world1 in
an all_reduce loop, one of which misbehaves on cue): a stopped member, one holding the
GIL in C, one asleep while its peers' call times out, and one killed. Each leaves a
bundle under runs/RUN/postmortem/WORLD-gGEN/ with every member's stacks, the culprit
line, its log tails; a hung member is captured before it is killed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mwrun.host import spy
from mwrun.schema import ProcessState, WorldState
from tests.helpers import BIN
from tests.integration.jobs import cli, launch, status, wait_for, wait_status

pytestmark = pytest.mark.timeout(180)
SPY = spy.find()[0] is not None  # py-spy installed (the test extra has it)


def topology(tmp_path: Path) -> Path:
    path = tmp_path / "pm.yaml"
    stuck = f"[{sys.executable}, {BIN / 'stuck.py'}"
    # torch's Flight Recorder on (gloo records too): the bundle holds each one's dump
    rest = "restart: on-failure, max_restarts: 5, env: {TORCH_FR_BUFFER_SIZE: '200'}"
    path.write_text(f"""\
version: 1
name: pm
hang_timeout: 4
processes:
  a: {{cmd: {stuck}], {rest}}}
  b: {{cmd: {stuck}, {tmp_path / 'cue'}], {rest}}}
  c: {{cmd: {stuck}], {rest}}}
worlds:
  world1: {{members: [a, b, c]}}
""")
    return path


def records(home: Path, kind: str) -> list[dict]:
    lines = (home / "runs" / "pm" / "history.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines if f'"{kind}"' in line]
    return [r for r in found if r.get("event") == kind]


def bundle_of(home: Path, pick) -> dict:
    """The first bundle ``pick(record)`` chooses, once written; with its folder."""
    record = wait_for(lambda: next((r for r in records(home, "postmortem") if pick(r)), None),
                      60, "the bundle written")
    folder = Path(record["path"])
    return {**json.loads((folder / "bundle.json").read_text()), "folder": folder,
            "record": record}


def member(bundle: dict, name: str) -> dict:
    return next(m for m in bundle["members"] if m["process"] == name)


def frames(m: dict) -> list[str]:
    return [f"{f[0]}:{f[2]}" for t in m.get("threads", []) for f in t["stack"]]


def serving(home):
    return wait_status(home, lambda d: all(w["state"] == WorldState.HEALTHY for w in d["worlds"])
                       and all(p["state"] == ProcessState.RUNNING for p in d["processes"]),
                       "world1 serving", run="pm", timeout=90)


def start(procs, home, tmp_path):
    job = launch(procs, home, topology(tmp_path), "--run-id", "pm")
    wait_for(lambda: (home / "runs" / "pm" / "state.json").exists(), 60, "the run folder")
    serving(home)
    return job


def stop(home, job):
    cli(home, "stop", "pm", check=True)
    job.wait(timeout=60)


@pytest.mark.slow
def test_a_stopped_member_is_captured_with_its_peers_then_killed_and_a_killed_one_named(
        procs, home, tmp_path):
    job = start(procs, home, tmp_path)
    cli(home, "kill-world", "world1", "pm", "--rank", "1", "--signal", "STOP", check=True)
    hang = bundle_of(home, lambda r: r["hung"] == "b")
    b, a = member(hang, "b"), member(hang, "a")
    assert hang["world"] == "world1" and "b" in hang["culprit"]
    assert a["answered"] and a["threads"] and any("stuck.py" in f for f in frames(a))
    if SPY:  # read from outside: the library of a stopped process cannot answer
        assert b["answered"] and b["by"].startswith("py-spy"), b
        assert any("stuck.py" in f for f in frames(b))
    else:
        assert not b["answered"] and "py-spy is not installed" in b["reason"]
    assert "did not answer" in " ".join(b["reasons"])
    # Captured first, then killed: the bundle is on record before the hang's kill.
    kill = wait_for(lambda: next((r for r in records(home, "signal") if r["process"] == "b"
                                  and r["why"] == "hang"), None), 60, "b's hang kill")
    assert hang["record"]["t"] <= kill["t"]
    text = (hang["folder"] / "stacks.txt").read_text()
    assert text.splitlines()[0] == hang["culprit"]
    # The peers' Flight Recorder dumps, each call numbered in its world's group: by
    # the hang (its peers' call timed out first: the world broke, and they wait in
    # rejoin), g0's all_reduces.
    dump = json.loads((hang["folder"] / a["flight_recorder"]["path"]).read_text())
    calls = [e for e in dump["entries"] if e["process_group"][0] == "world1-g0"]
    assert calls and {e["profiling_name"] for e in calls} == {"gloo:all_reduce"}, dump
    assert "flight_recorder" not in (a.get("inside") or {})  # written once, to its file
    assert "flight_recorder" not in b or "off" in b["flight_recorder"]  # it could not tell
    assert "a  pid " in text and "b  pid " in text and "c  pid " in text
    assert (hang["folder"] / "logs" / "b.log").exists()

    # status points at the last bundle, and report lists each with its culprit.
    doc = status(home, "pm")
    shown = next(w for w in doc["worlds"] if w["name"] == "world1")["postmortem"]
    assert shown["path"].startswith(str(home / "runs" / "pm" / "postmortem"))
    assert "post-mortem bundles:" in cli(home, "report", "pm", check=True).stdout

    # A member killed (an exit breaks the world): never waited for, named as gone.
    serving(home)
    before = len(records(home, "postmortem"))
    cli(home, "kill-world", "world1", "pm", "--rank", "0", "--signal", "KILL", check=True)
    broke = bundle_of(home, lambda r: r["hung"] is None
                      and records(home, "postmortem").index(r) >= before)
    assert "not running when captured" in " ".join(member(broke, "a")["reasons"])
    assert member(broke, "c")["answered"]
    stop(home, job)


@pytest.mark.slow
def test_a_member_holding_the_gil_and_one_asleep_while_its_peers_call_times_out(
        procs, home, tmp_path):
    job = start(procs, home, tmp_path)
    (tmp_path / "cue").write_text("gil")
    hang = bundle_of(home, lambda r: r["hung"] == "b")
    b = member(hang, "b")
    if SPY:  # its frames, native ones too: the C call it is in
        assert b["answered"] and b["by"] in ("py-spy --native", "py-spy"), b
        assert any("stuck.py" in f for f in frames(b))
    assert "did not answer" in " ".join(b["reasons"])
    serving(home)  # b restarted, the world re-formed

    before = len(records(home, "postmortem"))
    (tmp_path / "cue").write_text("sleep")  # its library beats on: only a timeout tells
    broke = bundle_of(home, lambda r: records(home, "postmortem").index(r) >= before)
    assert broke["hung"] is None
    assert "b never entered all_reduce" in broke["culprit"], broke["culprit"]
    asleep = member(broke, "b")
    assert asleep["answered"] and any("stuck.py" in f for f in frames(asleep))
    stop(home, job)
