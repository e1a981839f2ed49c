"""What ``report`` and the launch's finish line count of a serving job that scaled
(configs/serve.yaml): a world removed and made again under its name is drawn at its
pace from its first calls (its count starting from 0 again is a reset, never a count
held at the old one's until the new one passes it), and a retired replica's restart
and its world's break are counted in the finish line as in report."""

import json
import re

import pytest

from mwrun.records import counts, read
from tests.helpers import wait_gone
from tests.integration.jobs import cli, launch, proc_state, wait_for, wait_status
from tests.integration.test_readme_scale import config_copy, healthy, workers

pytestmark = pytest.mark.timeout(300)

# pair-2's count before it is removed: more than the new one makes before the stop, on
# a loaded machine too (a stop there took long enough for 174 calls)
OLD_CALLS = 400


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()
            if line.strip()]


def count_of(run_dir, world: str, since: float = 0.0) -> float:
    """The world's last count the history wrote after ``since`` (0 if none)."""
    found = [r["calls"][world][0] for r in records(run_dir)
             if world in (r.get("calls") or {}) and r["t"] > since]
    return found[-1] if found else 0.0


def scale(home, change: str) -> None:
    done = cli(home, "scale", change)
    assert done.returncode == 0, done.stderr


def test_a_world_made_again_and_a_retired_replicas_restart_count_everywhere(
        procs, home, tmp_path):
    job = launch(procs, home, config_copy(tmp_path, "serve.yaml"))
    job.expect(lambda line: "every world formed" in str(line), 120)
    run_dir = wait_for(lambda: next((home / "runs").iterdir(), None), 30, "the run folder")
    scale(home, "worker=3")
    wait_status(home, lambda d: len(workers(d)) == 3 and healthy(d), "pair-2 serving", timeout=60)
    cli(home, "kill-world", "pair-2", check=True)  # worker-2 restarts, pair-2 breaks
    wait_status(home, lambda d: proc_state(d, "worker-2")["restarts"] == 1 and healthy(d),
                "worker-2 back", timeout=60)
    wait_for(lambda: count_of(run_dir, "pair-2") >= OLD_CALLS, 120, "pair-2's calls")
    scale(home, "worker=2")  # worker-2 retired, with its restart; pair-2 removed
    wait_status(home, lambda d: workers(d) == ["worker-0", "worker-1"], "worker-2 gone")
    removed = max(r["t"] for r in records(run_dir) if r.get("event") == "remove")
    old = count_of(run_dir, "pair-2")  # the removed world's last count
    scale(home, "worker=3")  # pair-2 made again: its count starts from 0
    wait_for(lambda: count_of(run_dir, "pair-2", removed) > 0, 60, "the new pair-2's calls")
    cli(home, "stop", check=True)
    assert job.wait(60) == 0
    wait_gone(home)

    tl = read(run_dir, run_dir.name)
    made = next(e["t"] for e in tl.events if e["event"] == "form"
                and e.get("world") == "pair-2" and e["t"] > removed)
    points = tl.counts["pair-2"]
    raw = count_of(run_dir, "pair-2", removed)
    assert 0 < raw < old  # the new world's count never passed the old one's
    assert old >= OLD_CALLS
    assert counts.calls(points, tl.downs("pair-2"), made, points[-1][0]) == raw
    edges, values = counts.steps(points, tl.downs("pair-2"))
    assert max(v for a, v in zip(edges, values, strict=False) if a >= made) > 0

    finish = next(line for line in job.output().splitlines()
                  if re.search(r"run \S+ \w+ after \S+: \d+ restart", line))
    assert "1 restart, 1 world break" in finish, finish
    shown = cli(home, "report", "-o", str(tmp_path / "r.png"), check=True).stdout
    assert "1 restart(s), 1 world break(s)" in shown.splitlines()[0], shown

