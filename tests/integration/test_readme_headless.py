"""README's "When mwrun itself dies", as written: configs/serve.yaml with the
``head_grace: 60`` it says to add, launched detached, its head SIGKILLed by the
README's own line (through bash and jq), a new head (head_restart) found in ``status``
with every pid kept and no request failed, ``restart-head``, then ``stop``. The
config's ``cwd`` is the repository (as test_readme_scale does)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docpages import literal_blocks
from tests.helpers import ROOT, wait_gone
from tests.integration.jobs import status, wait_status
from tests.integration.test_readme_drill import mwrun
from tests.integration.test_readme_scale import config_copy, failures, healthy

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("jq") is None,
                                 reason="README's line needs jq (.ci/run installs it)")]


def commands() -> list[str]:
    text = (ROOT / "README.rst").read_text()
    section = text.split("When mwrun itself dies\n----------------------\n")[1].split(
        "\n\nWatch it in Prometheus")[0]
    assert "add ``head_grace: 60`` to ``configs/serve.yaml``" in section
    (block,) = literal_blocks(section)
    return block.strip().splitlines()


def shell(home, line: str, cwd) -> subprocess.CompletedProcess:
    """A README line as a user's shell runs it, with this venv's mwrun on the PATH."""
    bindir = str(Path(sys.executable).parent)
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env={**os.environ, "MWRUN_HOME": str(home),
                                            "PATH": f"{bindir}:{os.environ['PATH']}"})


def test_readme_headless_commands_as_written(home, tmp_path):
    launch, kill, look, restart, stop = commands()
    assert launch == "mwrun launch configs/serve.yaml --detach --run-id serve"
    (tmp_path / "configs").mkdir()  # the line's own path, from tmp_path
    config = Path(config_copy(tmp_path / "configs", "serve.yaml"))
    config.write_text(config.read_text() + "head_grace: 60\n")
    try:
        done = mwrun(home, launch, tmp_path)
        assert done.returncode == 0, done.stderr
        first = wait_status(home, healthy, "serving", run="serve", timeout=120)
        pids = {p["name"]: p["pid"] for p in first["processes"]}

        killed = shell(home, kill, tmp_path)
        assert killed.returncode == 0, killed.stderr
        second = wait_status(home, lambda d: d.get("epoch") == 2 and healthy(d)
                             and "head" not in d, "a new head", run="serve", timeout=60)
        assert {p["name"]: p["pid"] for p in second["processes"]} == pids
        shown = mwrun(home, look, tmp_path)
        assert shown.returncode == 0 and "running" in shown.stdout, shown.stderr

        handed = mwrun(home, restart, tmp_path)
        assert handed.returncode == 0 and "epoch 3" in handed.stdout, handed.stderr
        third = wait_status(home, lambda d: d.get("epoch") == 3 and healthy(d), "epoch 3",
                            run="serve", timeout=60)
        assert {p["name"]: p["pid"] for p in third["processes"]} == pids
        logs = mwrun(home, "mwrun logs frontend serve", tmp_path)
        assert "served" in logs.stdout and failures(logs.stdout) == [], logs.stdout
    finally:
        done = mwrun(home, stop, tmp_path)
    assert done.returncode == 0, done.stderr
    wait_gone(home)
    assert status(home, "serve")["state"] == "finished"
