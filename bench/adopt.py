"""A head SIGKILLed, and a new one taking the run back (``head_restart``, ``mwrun adopt``),
against launching the job again (what a killed head meant before: every process
gone, the whole job started cold).

One pair job (tests/bin/pair.py: a count every 10 ms over their world) with
``head_grace`` and ``head_restart``; its head is SIGKILLed ``--kills`` times in a row,
each time once the last head has the run, and each time measured:

* kill -> adopted: until the new head answers on the run's control socket with every
  process running under the pid it had and the world healthy (issue 34: median
  <= 1 s, max <= 2 s);
* pace kept: counts per second from the kill until the new head had the run (at least
  ``--window`` seconds) over the same before it (1.0: the job never noticed);
* processes restarted (0: the same pids every time).

Then ``mwrun restart-head`` on a live run: from the command until the new head has it
(issue 34: <= 1 s, nothing failed), and the pace kept. Then, with ``head_restart:
false``: the head SIGKILLed, a member SIGKILLed while the head is away, and ``mwrun
adopt`` started: from ``adopt``'s start until the member runs
again and its world is healthy (the new head's re-form: issue 34, <= 0.5 s once
adopted); ``adopt``'s own start (a Python interpreter and mwrun's imports) is said
apart. The baseline, in the same invocation: a cold launch of the same job until its
world is healthy.

    python bench/adopt.py                  # ~3 min (kills QUICK seconds apart: each a
                                           # head's first death, no crash-loop backoff)
    python bench/adopt.py --kills 20
    python bench/adopt.py --ssh            # as root: member b on an ssh host (a network
                                           # namespace with its own sshd, as in the tests)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT))  # (--ssh: the tests' testbed makes the host)
from common import PY, Launched, wait_for  # noqa: E402  (a bench's own folder first)

from mwrun import runs  # noqa: E402
from mwrun.errors import RunError  # noqa: E402
from mwrun.host.headrestart import QUICK  # noqa: E402

SSH_NODE = None  # --ssh: the testbed's host that member b runs on (its agent over ssh)


def topology(folder: Path, restart: bool) -> Path:
    out = folder / "count"
    cmd = f"{PY} {ROOT / 'tests' / 'bin' / 'pair.py'} --interval 0.01 --out {out}"
    hosts, here, on = "", "", ""
    if SSH_NODE is not None:
        node = SSH_NODE
        hosts = (f"hosts:\n  head: {{addr: {node.head_addr}}}\n  far: {{addr: {node.addr},"
                 f" ssh: '{node.ssh}', ssh_options: {json.dumps(node.ssh_options())}}}\n")
        here, on = ", host: head", ", host: far"
    path = folder / "ticks.yaml"
    path.write_text(f"version: 1\nname: ticks\nhead_grace: 60\n"
                    f"head_restart: {str(restart).lower()}\n{hosts}processes:\n"
                    f"  a: {{cmd: {cmd}, restart: on-failure{here}}}\n"
                    f"  b: {{cmd: {cmd}, restart: on-failure{on}}}\n"
                    f"worlds:\n  w: {{members: [a, b]}}\n")
    return path


def count(folder: Path) -> int:
    try:
        return int((folder / "count").read_text())
    except (OSError, ValueError):
        return 0


def asked(control: str) -> dict | None:
    """The status document from the head on ``control`` now; None if none answers."""
    with contextlib.suppress(RunError):
        return runs.request(control, {"verb": "status"}, timeout=1.0)["status"]
    return None


def taken(control: str, epoch: int, pids: dict | None = None, restarts: int = 0):
    """The document once the head of ``epoch`` has the run: every process running
    (under ``pids``, if given; else with ``restarts`` in all), the world healthy."""
    doc = asked(control)
    if not doc or doc.get("epoch") != epoch:
        return None
    procs = doc["processes"]
    if any(p["state"] != "running" for p in procs) or \
            any(w["state"] != "healthy" for w in doc["worlds"]):
        return None
    if pids is not None and {p["name"]: p["pid"] for p in procs} != pids:
        return None
    if pids is None and sum(p["restarts"] for p in procs) != restarts:
        return None
    return doc


def end(home: Path, *popens: subprocess.Popen) -> None:
    # Stopped by its head first: an ssh host's processes are its agent's, which would
    # otherwise wait out the head_grace for a new head.
    with contextlib.suppress(subprocess.SubprocessError):
        subprocess.run([PY, "-m", "mwrun", "stop"], env={**os.environ, "MWRUN_HOME": str(home)},
                       capture_output=True, timeout=60)
    for popen in popens:
        if popen.poll() is None:
            popen.kill()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get("MWRUN_HOME") == str(home):
                proc.kill()


def kills(folder: Path, n: int, window: float) -> list[dict]:
    home = folder / "home"
    job = Launched(topology(folder, True), home)
    try:
        doc = job.healthy(120)
        control = doc["control"]
        wait_for(lambda: count(folder) > 0, job.gone, 60, "the first count")
        pids = {p["name"]: p["pid"] for p in doc["processes"]}
        head, found, adopted = job.popen.pid, [], time.monotonic()
        for epoch in range(2, n + 2):
            # Settled, and past the crash-loop window: each kill is a head's first death
            # (within QUICK of its adoption the next head would wait a backoff).
            time.sleep(max(0.5, QUICK + 0.5 - (time.monotonic() - adopted)))
            first = count(folder)
            time.sleep(window)
            before = count(folder) - first
            os.kill(head, signal.SIGKILL)
            killed = time.monotonic()
            first = count(folder)
            new = wait_for(lambda: taken(control, epoch, pids), lambda: None, 30,  # noqa: B023
                           f"epoch {epoch}", every=0.005)
            adopted = time.monotonic()
            took = adopted - killed
            time.sleep(max(window - took, 0))
            after = (count(folder) - first) * window / (time.monotonic() - killed)
            head = new["supervisor_pid"]
            same = {p["name"]: p["pid"] for p in new["processes"]} == pids
            found.append({"took": took, "kept": after / before if before else 0.0,
                          "restarted": 0 if same else 1})
            print(f"kill {epoch - 1}: adopted in {took * 1000:.0f} ms, pace kept"
                  f" {found[-1]['kept']:.2f}, same pids {same}", flush=True)
        return found
    finally:
        end(home, job.popen)


def reform(folder: Path) -> dict:
    """A member killed while the head is away, then ``mwrun adopt``: its start, and
    until the member runs again in a healthy world."""
    home = folder / "home"
    job = Launched(topology(folder, False), home)
    adopt = None
    try:
        doc = job.healthy(120)
        control = doc["control"]
        victim = next(p["pid"] for p in doc["processes"] if p["name"] == "b")
        job.popen.send_signal(signal.SIGKILL)
        job.popen.wait()
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.5)  # its break written by its agent; the survivor waits for a head
        began = time.monotonic()
        adopt = subprocess.Popen([PY, "-m", "mwrun", "adopt"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL,
                                 env={**os.environ, "MWRUN_HOME": str(home)})
        answered = wait_for(lambda: asked(control) and asked(control).get("epoch") == 2,
                            lambda: None, 60, "the new head", every=0.005)
        listening = time.monotonic() - began
        del answered
        wait_for(lambda: taken(control, 2, restarts=1), lambda: None, 60, "b again",
                 every=0.005)
        return {"adopt_start": listening, "reformed": time.monotonic() - began - listening}
    finally:
        end(home, job.popen, *(p for p in (adopt,) if p is not None))


def handovers(folder: Path, n: int, window: float) -> list[dict]:
    """``mwrun restart-head`` ``n`` times on a live run (no head_grace): from the
    command's start until the new head has the run with every pid kept; pace kept."""
    home = folder / "home"
    (folder / "ticks.yaml").unlink(missing_ok=True)
    path = topology(folder, False)
    path.write_text(path.read_text().replace("head_grace: 60", "head_grace: 0"))
    job = Launched(path, home)
    try:
        doc = job.healthy(120)
        control = doc["control"]
        wait_for(lambda: count(folder) > 0, job.gone, 60, "the first count")
        pids = {p["name"]: p["pid"] for p in doc["processes"]}
        found = []
        for epoch in range(2, n + 2):
            time.sleep(0.5)
            first = count(folder)
            time.sleep(window)
            before = count(folder) - first
            began = time.monotonic()
            first = count(folder)
            command = subprocess.Popen([PY, "-m", "mwrun", "restart-head"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       env={**os.environ, "MWRUN_HOME": str(home)})
            wait_for(lambda: taken(control, epoch, pids), lambda: None, 60,  # noqa: B023
                     f"epoch {epoch}", every=0.005)
            took = time.monotonic() - began
            time.sleep(max(window - took, 0))
            after = (count(folder) - first) * window / (time.monotonic() - began)
            command.wait(60)
            found.append({"took": took, "kept": after / before if before else 0.0})
            print(f"restart-head {epoch - 1}: handed over in {took * 1000:.0f} ms, pace kept"
                  f" {found[-1]['kept']:.2f}", flush=True)
        return found
    finally:
        end(home, job.popen)


def cold(folder: Path) -> float:
    """The baseline: the same job launched cold until its world is healthy."""
    home = folder / "home"
    began = time.monotonic()
    job = Launched(topology(folder, False), home)
    try:
        job.healthy(120, every=0.01)
        return time.monotonic() - began
    finally:
        end(home, job.popen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--reforms", type=int, default=3)
    parser.add_argument("--handovers", type=int, default=5)
    parser.add_argument("--ssh", action="store_true",
                        help="member b on an ssh host (root: a network namespace + sshd)")
    args = parser.parse_args()
    if not args.ssh:
        return measure(args)
    from tests.integration import testbed
    if testbed.missing():
        raise SystemExit(f"cannot make an ssh host here: {testbed.missing()}")
    global SSH_NODE
    with tempfile.TemporaryDirectory(prefix="mwrun-adopt-") as work, \
            testbed.nodes(Path(work), [True]) as nodes:
        SSH_NODE = nodes[0]
        print(f"member b on an ssh host ({SSH_NODE.addr}): its agent over ssh, found again"
              " by each new head with mwrun agent-door over ssh", flush=True)
        return measure(args)


def measure(args) -> None:
    with tempfile.TemporaryDirectory(prefix="mwrun-adopt-") as folder:
        found = kills(Path(folder), args.kills, args.window)
    with tempfile.TemporaryDirectory(prefix="mwrun-adopt-") as folder:
        handed = handovers(Path(folder), args.handovers, args.window)
    again, relaunch = [], []
    for _ in range(args.reforms):  # interleaved with the baseline
        with tempfile.TemporaryDirectory(prefix="mwrun-adopt-") as folder:
            again.append(reform(Path(folder)))
        with tempfile.TemporaryDirectory(prefix="mwrun-adopt-") as folder:
            relaunch.append(cold(Path(folder)))
    took = [f["took"] for f in found]
    print()
    print(f"head SIGKILLed {len(found)} times (head_restart): adopted, every pid kept and"
          f" the world healthy, median {statistics.median(took) * 1000:.0f} ms (max"
          f" {max(took) * 1000:.0f}); pace kept median"
          f" {statistics.median(f['kept'] for f in found):.2f} (min"
          f" {min(f['kept'] for f in found):.2f}); processes restarted"
          f" {sum(f['restarted'] for f in found)}")
    if handed:
        print(f"mwrun restart-head {len(handed)} times: from the command until the new head"
              f" has the run, median {statistics.median(h['took'] for h in handed) * 1000:.0f}"
              f" ms (max {max(h['took'] for h in handed) * 1000:.0f}); pace kept median"
              f" {statistics.median(h['kept'] for h in handed):.2f} (min"
              f" {min(h['kept'] for h in handed):.2f})")
    if again:
        start = statistics.median(a["adopt_start"] for a in again)
        formed = statistics.median(a["reformed"] for a in again)
        base = statistics.median(relaunch)
        print(f"a member killed while headless, then mwrun adopt: the new head answers"
              f" {start * 1000:.0f} ms after adopt starts, the member runs again in its"
              f" healthy world {formed * 1000:.0f} ms later (median of {len(again)})")
        print(f"baseline, the job launched again cold until healthy: {base * 1000:.0f} ms;"
              f" adopted (head_restart) / relaunched: {statistics.median(took) / base:.2f}")


if __name__ == "__main__":
    main()
