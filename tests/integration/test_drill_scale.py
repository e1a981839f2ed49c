"""mwrun drill --scale against a real elastic job (examples/serving: a frontend and
scaled workers, one world per worker): faults and scale operations mixed, every
operation done, every fault recovered, no call failed and no world broke outside the
worlds the drill faulted, the summary in the history and in report, nothing left."""

import json
import os
import subprocess
import sys

import pytest

from mwrun.cli import drill as d
from mwrun.cli import drillscale as ds
from tests.helpers import ROOT
from tests.integration.jobs import cli, launch, wait_for, wait_status

pytestmark = pytest.mark.timeout(300)

SEED, EVERY, FOR = 1, 2.0, 10.0  # seed 1: five scale operations and three faults
SCALE = ds.Scaling("worker", 1, 4)

SERVE = f"""\
version: 1
name: serve
timeout: 10
hang_timeout: 30
processes:
  frontend:
    cmd: {sys.executable} examples/serving/frontend.py --rate 50
    cwd: {ROOT}
  worker:
    cmd: {sys.executable} examples/serving/worker.py --work 0.02
    cwd: {ROOT}
    replicas: 2
    scale: {{min: 1, max: 4}}
    drain_timeout: 3
    restart: on-failure
    max_restarts: 100
    restart_backoff: 0.2
worlds:
  pair:
    per: worker
    members: [frontend, worker]
"""


def drill(home, *args, timeout=240):
    """``mwrun drill``: its measuring alone may take a minute on a busy machine, and
    its recovery half a minute more (jobs.cli gives a command 60 s)."""
    return subprocess.run([sys.executable, "-m", "mwrun", "drill", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MWRUN_HOME": str(home)})


def test_a_drill_with_scale_operations_on_a_serving_job(procs, home, tmp_path):
    topology = tmp_path / "serve.yaml"
    topology.write_text(SERVE)
    job = launch(procs, home, topology, "--run-id", "serve")
    wait_for(lambda: cli(home, "status").returncode == 0, 60, "the run to answer")
    wait_status(home, lambda doc: [w["state"] for w in doc["worlds"]] == ["healthy"] * 2,
                "both pairs formed", timeout=90)

    # --scale is checked against the run before anything is done to it
    for scale, says in (("worker:1-8", "worker scales within 1-4"),
                        ("frontend:1-2", "frontend has no 'scale:' in its topology"),
                        ("nobody:1-2", "nobody is no process of the run"),
                        ("worker:3", "--scale takes PROCESS:MIN-MAX")):
        refused = drill(home, "serve", "--every", "1", "--for", "1", "--scale", scale)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    assert not [line for line in (home / "runs" / "serve" / "history.jsonl").read_text()
                .splitlines() if '"drill"' in line or '"scale"' in line]

    done = drill(home, "serve", "--every", str(EVERY), "--for", str(FOR), "--scale",
                 str(SCALE), "--seed", str(SEED))
    assert done.returncode == 0, done.stdout + done.stderr
    history = (home / "runs" / "serve" / "history.jsonl").read_text().splitlines()
    [record] = [r for r in map(json.loads, history) if r.get("event") == "drill"]
    planned = list(d.schedule(SEED, EVERY, FOR, {}, [SCALE]))
    moves = [s for s in planned if isinstance(s, ds.Move)]
    assert moves and len(moves) < len(planned)  # the seed mixes both

    scale = record["scale"]
    assert scale["count"] + len(scale["skipped"]) == len(moves)
    assert scale["count"] > 0 and scale["done"] == scale["count"] and scale["failed"] == []
    for op in scale["ops"]:  # each as the head answered it last: ended, every phase timed
        assert op["state"] == "done" and op["to"] != op["from"] and 1 <= op["to"] <= 4
        assert len(op["changes"]) == abs(op["to"] - op["from"])
        for change in op["changes"]:
            last = "told" if change["change"] == "add" else "exited"
            assert change["outcome"] == "done"
            assert change["phases"]["requested"] <= change["phases"][last]
    changed = sum(scale[kind]["count"] for kind in ("add", "remove"))
    assert changed == sum(len(op["changes"]) for op in scale["ops"])

    faults = [f for w in record["worlds"].values() for f in w["list"]]
    assert len(faults) + len(record["skipped"]) == len(planned) - len(moves)
    assert faults and all(f["recovered"] for f in faults) and record["not_recovered"] == []
    # the leader (in every pair) is never hit: only the workers, each in its own world
    assert {f["process"] for f in faults} <= {f"worker-{i}" for i in range(4)}

    outside = record["outside"]
    assert outside["failed_calls"] == 0 and outside["breaks"] == 0, outside
    assert outside["looks"] > FOR / 2  # read through the drill, about once a second
    assert f"drill: {len(faults)} fault(s) (SIGKILL) and {scale['count']} scale" \
           f" operation(s) in {FOR:.0f} s" in done.stdout
    assert "0 failed call(s), 0 break(s)" in done.stdout

    report = cli(home, "report", "serve", "-o", str(tmp_path / "r.png"), check=True).stdout
    assert f"scale: {scale['count']} operation(s), {scale['done']} done" in report

    cli(home, "stop", "serve", check=True)
    assert job.wait(timeout=60) == 0, job.output()[-3000:]
