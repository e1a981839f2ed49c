"""``mwrun scale`` and ``mwrun drain`` as a user types them, the bad ones above all:
each refused whole (exit 2, nothing changed, said why), two at once, the same ``--op``
twice, and against a run that has ended."""

import concurrent.futures
import sys

import pytest

from tests.helpers import BIN, wait_gone
from tests.integration.jobs import cli, launch, status, wait_status

pytestmark = pytest.mark.timeout(180)


def topology(tmp_path) -> str:
    path = tmp_path / "elastic.yaml"
    path.write_text(f"""\
version: 1
name: elastic
timeout: 10
processes:
  fixed: {{cmd: {sys.executable} {BIN / 'trainer.py'}}}
  trainer:
    cmd: {sys.executable} {BIN / 'trainer.py'}
    replicas: 2
    scale: {{min: 1, max: 5}}
    drain_timeout: 1
worlds:
  alone: {{members: [fixed]}}
  solo:
    per: trainer
    members: [trainer]
""")
    return str(path)


def trainers(doc) -> list[str]:
    return sorted(p["name"] for p in doc["processes"] if p["name"].startswith("trainer-"))


def healthy(doc) -> bool:
    return all(w["state"] == "healthy" for w in doc["worlds"])


BAD = [
    (["scale", "trainer=9"], "trainer would have 9 replicas; its scale is 1-5 (now 2)"),
    (["scale", "trainer=0"], "its scale is 1-5"),
    (["scale", "trainer=-2"], "its scale is 1-5"),
    (["scale", "nobody=2"], "no process 'nobody' in this job; scaled processes: trainer"),
    (["scale", "fixed=2"], "process 'fixed' has no 'scale:' in the topology"),
    (["scale", "trainer-1=3"], "'trainer-1' names one replica"),
    (["scale", "trainer=2", "trainer=3"], "trainer is named twice in one request"),
    (["drain", "trainer-7"], "replica trainer-7 is not running"),
    (["drain", "fixed"], "'fixed' is not a replica of a scaled process"),
    (["drain", "trainer-0", "trainer-1"], "would have 0 replicas"),
    (["drain", "trainer-1", "trainer-1"], "replica trainer-1 is named twice in one request"),
    (["scale", "trainer"], "write PROCESS=N, PROCESS=+K or PROCESS=-K"),
]


def test_a_bad_request_changes_nothing_and_says_why(procs, home, tmp_path):
    job = launch(procs, home, topology(tmp_path))
    job.expect(lambda line: "every world formed" in str(line), 120)
    for args, said in BAD:
        done = cli(home, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    doc = status(home)
    assert trainers(doc) == ["trainer-0", "trainer-1"] and doc.get("revision", 0) == 0
    assert doc["scale"] == {"trainer": {"desired": 2, "current": 2, "min": 1, "max": 5,
                                        "draining": []}}
    job.signal(2)
    assert job.wait(timeout=60) == 0, job.output()
    wait_gone(home)


def test_two_at_once_both_count_and_the_same_op_is_done_once(procs, home, tmp_path):
    job = launch(procs, home, topology(tmp_path))
    job.expect(lambda line: "every world formed" in str(line), 120)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: cli(home, "scale", "trainer=+1"), range(2)))
    assert [d.returncode for d in both] == [0, 0], [(d.stdout, d.stderr) for d in both]
    added = sorted(line.split()[0] for d in both for line in d.stdout.splitlines()
                   if line.startswith("  trainer-"))
    assert added == ["trainer-2", "trainer-3"]  # each its own, the lowest free
    doc = wait_status(home, lambda d: len(trainers(d)) == 4 and healthy(d), "four trainers")
    assert doc["scale"]["trainer"]["desired"] == 4

    first = cli(home, "scale", "trainer=+1", "--op", "grow-once")
    again = cli(home, "scale", "trainer=+1", "--op", "grow-once")
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    assert "grow-once was asked already (scale trainer=+1); nothing more was changed" \
        in again.stdout
    doc = wait_status(home, lambda d: len(trainers(d)) == 5 and healthy(d), "five trainers")
    assert doc["scale"]["trainer"]["desired"] == 5 and doc["revision"] == 3

    done = cli(home, "drain", "trainer-4", "--no-wait")
    assert done.returncode == 0, done.stderr
    twice = cli(home, "drain", "trainer-4")
    assert twice.returncode == 2, twice.stderr  # being retired, or gone already
    assert "trainer-4 is being retired already" in twice.stderr \
        or "trainer-4 is not running" in twice.stderr, twice.stderr

    job.signal(2)
    assert job.wait(timeout=60) == 0, job.output()
    wait_gone(home)
    ended = cli(home, "scale", "trainer=2")
    assert ended.returncode == 1 and "no live run" in ended.stderr, ended.stderr
    run = next((home / "runs").iterdir()).name
    ended = cli(home, "scale", run, "trainer=2")
    assert ended.returncode == 1 and f"run {run} is not running (it is finished)" \
        in ended.stderr, ended.stderr
