"""README's "Why did it hang?", command by command, against configs/hang.yaml as it is.

The commands are read from README.rst itself and run as written (``mwrun ...`` with
the test's MWRUN_HOME, from the repository): a member stopped, declared hung, its
world captured before the kill; ``status`` names the culprit and the bundle, whose
``stacks.txt`` starts with that line; ``report`` lists the bundles."""

import json
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, wait_gone
from tests.integration.jobs import wait_for
from tests.integration.test_readme_drill import mwrun

pytestmark = pytest.mark.timeout(240)


def hang_commands() -> list[str]:
    text = (ROOT / "README.rst").read_text()
    section = text.split("Why did it hang?\n----------------\n")[1].split("\n\nThe others'")[0]
    block = section.split("::\n\n")[1]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def hung_bundle(home: Path) -> dict | None:
    for history in home.glob("runs/*/history.jsonl"):
        for line in history.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == "postmortem" and record.get("hung") == "rank-1":
                return record
    return None


@pytest.mark.slow
def test_readme_why_did_it_hang_as_written(home):
    commands = hang_commands()
    assert [c.split()[1] for c in commands] == ["launch", "kill-world", "status", "report",
                                                "stop"]
    launched = mwrun(home, commands[0], ROOT)
    assert launched.returncode == 0, launched.stderr
    try:
        stopped = mwrun(home, commands[1], ROOT)
        assert stopped.returncode == 0 and "SIGSTOP to rank-1" in stopped.stdout, stopped
        record = wait_for(lambda: hung_bundle(home), 90, "rank-1 declared hung, captured")
        shown = mwrun(home, commands[2], ROOT).stdout
        assert "why (the last post-mortem per world" in shown, shown
        why = shown.split("why (the last post-mortem per world")[1].splitlines()
        line = why[1].strip()  # under the heading: the culprit line, then its bundle
        assert line.startswith("world1 g"), shown
        assert "rank-1" in line
        folder = Path(re.search(r"bundle: (\S+)", shown)[1])
        assert folder.name.startswith("world1-g")
        assert (folder / "stacks.txt").read_text().splitlines()[0] == line
        assert folder == Path(record["path"]) or (folder / "bundle.json").exists()
        report = mwrun(home, commands[3], ROOT)
        assert report.returncode == 0 and "post-mortem bundles:" in report.stdout, report
        assert record["culprit"] in report.stdout
        # the break came first (timeout 1 s < hang_timeout 3 s): its bundle, one
        # generation back, names rank-1 too, as the hang's line says it does
        assert "'s bundle says what broke the world" in line, line
        back = int(line.split("; g")[-1].split("'s bundle")[0])
        assert re.search(rf"world1 g{back}: rank-1 .*broke", report.stdout), report.stdout
    finally:
        done = mwrun(home, commands[4], ROOT)
    assert done.returncode == 0, done.stderr
    wait_gone(home)
