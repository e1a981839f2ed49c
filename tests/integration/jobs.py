"""Driving ``mwrun`` jobs from tests: launch, the CLI, the status document."""

import json
import os
import subprocess
import sys
import time

from mwrun.schema import ProcessState, WorldState
from tests.helpers import BIN, prefixed


def launch(procs, home, topology, *extra):
    return procs.start([sys.executable, "-m", "mwrun", "launch", str(topology), *extra],
                       env={"MWRUN_HOME": str(home), "NO_COLOR": "1"})


def cli(home, *args, check=False, env=None):
    # A command can take a minute on a loaded 2-core machine (report's first matplotlib
    # import builds its font cache); the test's own timeout bounds a hang.
    result = subprocess.run([sys.executable, "-m", "mwrun", *args], capture_output=True,
                            text=True, env={**os.environ, "MWRUN_HOME": str(home),
                                            **(env or {})}, timeout=180)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def status(home, run=None):
    return json.loads(cli(home, "status", *([run] if run else []), "--json",
                          check=True).stdout)


def wait_for(condition, timeout=30.0, what="condition"):
    """Poll ``condition`` until it holds. The pause between looks grows from 0.05 s to
    0.5 s: a look is often a whole ``mwrun status`` (a new interpreter), and looking
    ten times a second through a minute's wait took a good part of a core from a
    suite that is short of cores."""
    deadline, pause = time.monotonic() + timeout, 0.05
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(pause)
        pause = min(pause * 1.5, 0.5)
    raise AssertionError(f"timed out waiting for {what}")


def wait_status(home, predicate, what, run=None, timeout=30.0):
    """Poll the run's status document until predicate(doc) holds; return it. The
    document a run folder holds before its supervisor wrote one (no processes yet)
    never counts: ``all(...)`` over its empty lists would hold at once."""
    found = {}

    def check():
        found["doc"] = status(home, run)
        return bool(found["doc"]["processes"]) and predicate(found["doc"])

    wait_for(check, timeout, what)
    return found["doc"]


def expect(proc, name, event, timeout=30.0, **match):
    parse = prefixed(name)
    line = proc.expect(lambda line: (v := parse(line)) is not None and v.get("event") == event
                       and all(v.get(k) == m for k, m in match.items()), timeout)
    return parse(line)


def world_state(doc, name):
    return next(w for w in doc["worlds"] if w["name"] == name)


def proc_state(doc, name):
    return next(p for p in doc["processes"] if p["name"] == name)


def write_star(tmp_path, workers=2, spoke="", restart="on-failure", max_restarts=3, numel=1):
    """A leader (tests/bin/hub.py) and WORKERS spokes, each pair a world of its own."""
    procs = "\n".join(f"""\
  worker-{i}:
    cmd: {sys.executable} {BIN / 'spoke.py'} {spoke}
    restart: {restart}
    max_restarts: {max_restarts}
    restart_backoff: 0.2""" for i in range(workers))
    worlds = "\n".join(f"  world{i + 1}: {{members: [leader, worker-{i}]}}"
                       for i in range(workers))
    path = tmp_path / "star.yaml"
    path.write_text(f"version: 1\nname: star\ntimeout: 20\nprocesses:\n  leader:\n"
                    f"    cmd: {sys.executable} {BIN / 'hub.py'} {numel}\n{procs}\n"
                    f"worlds:\n{worlds}\n")
    return path


# A pair that counts over its world (tests/bin/pair.py): the job the tests of a head
# that dies (test_headless, test_adopt, test_drill_head) kill heads under.

def ticker_job(tmp_path, grace=600, restart=False):
    out = tmp_path / "count"
    cmd = f"{sys.executable} {BIN / 'pair.py'} --interval 0.05 --out {out}"
    path = tmp_path / "ticks.yaml"
    path.write_text(f"version: 1\nname: ticks\nhead_grace: {grace}\n"
                    f"head_restart: {str(restart).lower()}\nprocesses:\n"
                    f"  a: {{cmd: {cmd}, restart: on-failure}}\n"
                    f"  b: {{cmd: {cmd}, restart: on-failure}}\n"
                    f"worlds:\n  w: {{members: [a, b]}}\n")
    return path, out


def count(out) -> int:
    try:
        return int(out.read_text())
    except (OSError, ValueError):
        return 0


def healthy(home, epoch=None) -> dict:
    """The run's status once its world is healthy and every process runs (under the
    head of ``epoch``, if given)."""
    wait_for(lambda: list((home / "runs").glob("*/state.json")), 60, "the run")
    return wait_status(home, lambda d: all(w["state"] == WorldState.HEALTHY for w in d["worlds"])
                       and all(p["state"] == ProcessState.RUNNING for p in d["processes"])
                       and epoch in (None, d.get("epoch")) and "head" not in d,
                       "the world healthy", timeout=120)
