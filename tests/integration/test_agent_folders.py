"""An agent leaves no folder behind in /tmp (``/tmp/mwrun-agent-*``): its end removes
it, SIGTERM included, and an agent that starts sweeps away the folders of agents that
died without their end (SIGKILL). Checked on the files themselves, before any fixture
cleans up."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mwrun.host import agent, frames
from tests.integration.jobs import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def short():
    """A folder whose sockets' paths fit AF_UNIX's 108 bytes (a worker's tmp_path may
    not), holding only this test's agent folders (an agent sweeps its siblings)."""
    path = Path(tempfile.mkdtemp(prefix="mwaf-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_agent(control: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mwrun", "agent", "--host", "h1",
                             "--control", control, "--silence", "30"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)


def hello(popen: subprocess.Popen) -> dict:
    decoder = frames.Decoder()
    while True:
        data = os.read(popen.stdout.fileno(), 65536)
        assert data, "the agent closed its link before its hello"
        for message in decoder.feed(data):
            if message["kind"] == "hello":
                return message


def dead_agents_folder(root, name: str, age: float) -> str:
    """A folder as a SIGKILLed agent leaves it: its socket (nobody listens) and log."""
    folder = root / name
    folder.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "control-4242.sock"))
    (folder / "control-4242-zygote.log").write_text("")
    then = time.time() - age
    os.utime(folder, (then, then))
    return str(folder)


@pytest.mark.parametrize("end", ["stop", "sigterm"])
def test_an_agent_that_ends_leaves_no_folder(short, end):
    folder = short / "mwrun-agent-run"
    popen = start_agent(str(folder / "control.sock"))
    try:
        control = hello(popen)["control"]
        wait_for(lambda: os.path.exists(control), 10, "the agent's socket")
        if end == "stop":
            popen.stdin.write(frames.encode({"kind": "stop"}))
            popen.stdin.flush()
        else:
            popen.send_signal(signal.SIGTERM)
        assert popen.wait(timeout=30) == 0
        assert not folder.exists(), os.listdir(folder)
    finally:
        if popen.poll() is None:
            popen.kill()
        popen.wait()
        popen.stdin.close()
        popen.stdout.close()


def test_an_agent_sweeps_the_folders_of_dead_agents_and_only_those(short):
    dead = dead_agents_folder(short, "mwrun-agent-dead", agent.SWEEP_AGE + 60)
    young = dead_agents_folder(short, "mwrun-agent-young", 0)  # may be one starting
    other = dead_agents_folder(short, "mwrun-agent-other", agent.SWEEP_AGE + 60)
    with open(os.path.join(other, "notes.txt"), "w"):
        pass  # not an agent's file: never removed
    live = start_agent(str(short / "mwrun-agent-live" / "control.sock"))
    try:
        control = hello(live)["control"]  # once: a second hello would never come
        wait_for(lambda: os.path.exists(control), 10, "the live agent's socket")
        then = time.time() - agent.SWEEP_AGE - 60
        os.utime(short / "mwrun-agent-live", (then, then))  # old, but alive
        later = start_agent(str(short / "mwrun-agent-later" / "control.sock"))
        try:
            hello(later)  # it swept before it said hello
            assert not os.path.exists(dead)
            assert os.path.exists(young) and os.path.exists(other)
            assert (short / "mwrun-agent-live").exists()
        finally:
            later.kill()
            later.wait()
            later.stdin.close()
            later.stdout.close()
    finally:
        live.kill()
        live.wait()
        live.stdin.close()
        live.stdout.close()
