"""README's "Scale while it serves", command by command, against configs/serve.yaml
and configs/serve_autoscale.yaml.

The commands are read from README.rst itself, so the text and this test stay in step:
each is run as written (``mwrun ...`` with the run's MWRUN_HOME, no run id, as a user
in a second terminal types it), and what README says of it is checked, the frontend's
own log first: no request failed because of a scale operation.

The job runs from a copy of the config that differs in ``cwd`` only (the repository,
wherever the copy lies).
"""

import json
import re
import signal

import pytest

from tests.helpers import ROOT, wait_gone
from tests.integration.jobs import launch, proc_state, wait_for, wait_status, world_state
from tests.integration.test_readme_drill import mwrun

pytestmark = pytest.mark.timeout(300)


def section() -> str:
    text = (ROOT / "README.rst").read_text()
    return text.split("Scale while it serves\n---------------------\n")[1].split(
        "\n\nWhy did it hang?")[0]


def blocks() -> list[list[str]]:
    """Each literal block of the section: its commands, comments cut."""
    found = []
    for paragraph in section().split("\n\n"):
        if paragraph.startswith("    mwrun "):
            found.append([line.split("  #")[0].strip() for line in paragraph.splitlines()])
    return found


def config_copy(tmp_path, name: str) -> str:
    text = (ROOT / "configs" / name).read_text()
    text, found = re.subn(r"^(\s*cwd: )\S+", rf"\g<1>{ROOT}", text, flags=re.M)
    assert found == 2
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def workers(doc) -> list[str]:
    return sorted(p["name"] for p in doc["processes"] if p["name"].startswith("worker-"))


def healthy(doc) -> bool:
    return all(w["state"] == "healthy" for w in doc["worlds"]) and \
        all(p["state"] == "running" for p in doc["processes"])


def failures(log: str) -> list[str]:
    return [line for line in log.splitlines() if "failed (" in line]


def test_readme_scale_commands_as_written(procs, home, tmp_path):
    launch_block, commands, _ = blocks()
    assert launch_block == ["mwrun launch configs/serve.yaml"]
    assert commands == ["mwrun scale worker=6", "mwrun drain worker-2", "mwrun scale worker=-1",
                        "mwrun kill-world pair-0", "mwrun status", "mwrun logs frontend"]
    scale_up, drain, scale_down, kill, status, logs = commands
    job = launch(procs, home, config_copy(tmp_path, "serve.yaml"))
    job.expect(lambda line: "every world formed" in str(line), 120)
    wait_status(home, healthy, "the frontend and both workers serving", timeout=120)
    job.expect(lambda line: "frontend | served" in str(line) and "0 failed" in str(line), 60)

    done = mwrun(home, scale_up, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "adding worker-2, worker-3, worker-4, worker-5" in done.stdout
    assert re.search(r"worker-5 +add +started \+\d+ ms, formed \+\d+ ms, told \+\d+ ms",
                     done.stdout), done.stdout
    doc = wait_status(home, lambda d: len(workers(d)) == 6 and healthy(d), "six workers")
    assert len(world_state(doc, "pair-5")["members"]) == 2
    job.expect(lambda line: str(line).startswith("frontend | pair-5 added"), 60)

    done = mwrun(home, drain, tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"worker-2 +remove +draining \+\d+ ms, closed \+\d+ ms, exited \+\d+ ms",
                     done.stdout), done.stdout
    doc = wait_status(home, lambda d: "worker-2" not in workers(d), "worker-2 gone")
    assert "pair-2" not in [w["name"] for w in doc["worlds"]]

    done = mwrun(home, scale_down, tmp_path)
    assert done.returncode == 0 and "draining worker-5" in done.stdout, done
    wait_status(home, lambda d: workers(d) == ["worker-0", "worker-1", "worker-3",
                                               "worker-4"], "four workers")

    done = mwrun(home, kill, tmp_path)
    assert done.returncode == 0 and "sent SIGKILL to worker-0" in done.stdout, done
    doc = wait_status(home, lambda d: proc_state(d, "worker-0")["restarts"] == 1
                      and healthy(d), "worker-0 back and pair-0 re-formed", timeout=120)
    assert world_state(doc, "pair-0")["breaks"] == 1
    assert [w["breaks"] for w in doc["worlds"] if w["name"] != "pair-0"] == [0, 0, 0]

    done = mwrun(home, status, tmp_path)
    assert "worker: 4 desired, 4 running (scale 1-8)" in done.stdout, done.stdout

    job.expect(lambda line: "frontend | served" in str(line), 60)  # a line since the kill
    done = mwrun(home, logs, tmp_path)
    assert done.returncode == 0
    assert "served" in done.stdout
    # "a failure only where the kill hit": none because of scaling.
    assert all("to pair-0 failed" in line for line in failures(done.stdout)), \
        failures(done.stdout)
    assert len(failures(done.stdout)) <= 1

    run_dir = next((home / "runs").iterdir())
    revisions = [json.loads(line) for line in (run_dir / "revisions.jsonl").read_text()
                 .splitlines()]
    assert [r["revision"] for r in revisions] == [1, 2, 3]

    def faulted() -> list[dict] | None:
        """The history once the kill's fault is in it: written when the fault closes, at
        pair-0's first call after the re-form, which the frontend's next heartbeat
        tells (the "served" line above may be one from before the kill, unclaimed)."""
        records = [json.loads(line) for line in (run_dir / "history.jsonl").read_text()
                   .splitlines()]
        return records if any(r.get("event") == "fault" for r in records) else None

    records = wait_for(faulted, 60, "the kill's fault record")
    scaled = [(r["process"], r["change"], r["outcome"]) for r in records
              if r.get("event") == "scale"]
    assert sorted(scaled) == sorted([(f"worker-{i}", "add", "done") for i in (2, 3, 4, 5)]
                                    + [("worker-2", "remove", "done"),
                                       ("worker-5", "remove", "done")])
    faults = [r for r in records if r.get("event") == "fault"]
    assert [f["world"] for f in faults] == ["pair-0"]  # scaling is no fault

    job.signal(signal.SIGINT)
    assert job.wait(timeout=60) == 0, job.output()
    wait_gone(home)


def test_readme_autoscale_from_inside_the_job(procs, home, tmp_path):
    [command] = blocks()[2]
    assert command == "mwrun launch configs/serve_autoscale.yaml"
    job = launch(procs, home, config_copy(tmp_path, "serve_autoscale.yaml"))
    job.expect(lambda line: "every world formed" in str(line), 120)
    job.expect(lambda line: str(line).startswith("frontend | autoscale worker=+1"), 120)
    doc = wait_status(home, lambda d: len(workers(d)) >= 3 and healthy(d),
                      "a third worker, asked for by the frontend", timeout=120)
    assert doc["scale"]["worker"]["desired"] >= 3
    job.signal(signal.SIGINT)
    assert job.wait(timeout=60) == 0, job.output()
    wait_gone(home)
    assert not failures("\n".join(job.lines))
