"""Elastic training: a world that lists a scaled process bare is resized with it. Its
members see one BrokenWorldError that says ``resized`` and rejoin() at the new size
with their new ranks; a replica drained away sees the world closed for it
(WorldClosedError) and ends; nothing counts as a fault."""

import json
import sys

import pytest

from tests.helpers import BIN, prefixed, wait_gone
from tests.integration.jobs import cli, launch, wait_status

pytestmark = pytest.mark.timeout(180)


def topology(tmp_path, replicas: int) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(f"""\
version: 1
name: train
timeout: 10
processes:
  trainer:
    cmd: {sys.executable} {BIN / 'trainer.py'}
    replicas: {replicas}
    scale: {{min: 1, max: 5}}
    drain_timeout: 1
worlds:
  all:
    members: [trainer]
""")
    return str(path)


def sums(job, size: int, names: list[str]) -> dict[str, dict]:
    """Each named member's first all_reduce at ``size`` (its value is the size), in
    whatever order they come."""
    found: dict[str, dict] = {}
    parsers = {name: prefixed(name) for name in names}

    def one(line) -> bool:
        for name, parse in parsers.items():
            value = parse(line)
            if name not in found and value is not None and value.get("event") == "sum" \
                    and value.get("size") == size:
                found[name] = value
                return True
        return False

    while len(found) < len(names):
        job.expect(one, 120)
    return found


def test_a_bare_world_is_resized_with_its_scaled_process(procs, home, tmp_path):
    job = launch(procs, home, topology(tmp_path, 3))
    first = sums(job, 3, ["trainer-0", "trainer-1", "trainer-2"])
    assert sorted(v["rank"] for v in first.values()) == [0, 1, 2]

    done = cli(home, "scale", "trainer=4")
    assert done.returncode == 0, done.stderr
    grown = sums(job, 4, ["trainer-0", "trainer-1", "trainer-2", "trainer-3"])
    assert {n: v["rank"] for n, v in grown.items()} == \
        {"trainer-0": 0, "trainer-1": 1, "trainer-2": 2, "trainer-3": 3}
    assert all(v["value"] == 4 and v["generation"] == 1 for v in grown.values())

    done = cli(home, "scale", "trainer=-2")  # trainer-3 and trainer-2 drain away
    assert done.returncode == 0, done.stderr
    shrunk = sums(job, 2, ["trainer-0", "trainer-1"])
    assert {n: v["rank"] for n, v in shrunk.items()} == {"trainer-0": 0, "trainer-1": 1}
    doc = wait_status(home, lambda d: [p["name"] for p in d["processes"]]
                      == ["trainer-0", "trainer-1"], "two trainers left")
    assert doc["worlds"][0]["breaks"] == 0 and doc["worlds"][0]["members"] == \
        ["trainer-0", "trainer-1"]

    lines = [json.loads(text) for line in job.lines if " | {" in line
             for text in [line.partition(" | ")[2]]]
    assert sum(1 for v in lines if v.get("event") == "closed") == 2, job.output()
    broken = [v for v in lines if v.get("event") == "broken"]
    assert broken and all(v["resized"] for v in broken)  # every break was a resize
    run_dir = next((home / "runs").iterdir())
    records = [json.loads(line) for line in (run_dir / "history.jsonl").read_text()
               .splitlines()]
    assert not [r for r in records if r.get("event") in ("fault", "break")]
    assert [r["generation"] for r in records if r.get("event") == "resize"] == [1, 2]

    job.signal(2)
    assert job.wait(timeout=60) == 0, job.output()
    wait_gone(home)
