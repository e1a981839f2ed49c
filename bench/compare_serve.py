"""mwrun side by side with Ray Serve, serving the same model on this machine.

    pip install -e '.[bench]'            # Ray Serve, pinned (a bench-only extra)
    python bench/compare_serve.py        # 2 runs, ~5 min
    python bench/compare_serve.py --quick              # 1 run, shorter windows, ~2 min
    python bench/compare_serve.py --runs 1 --gcs-window 70   # ~4.5 min: Ray without a GCS

The model: three Linear(256, 256) + ReLU, seeded, one torch thread, built by the same
function on both sides (bench/bin/serve_model_worker.py). Two replicas; requests
(the same 1 x 256 input) arrive open-loop at 50 a second, request i due at start + i /
50 whatever happened to earlier ones, each tried once and recorded (due -> answered,
ok or why not, the answering replica's pid) as one JSON line:

* Ray Serve: a Ray instance of its own (``ray start --head`` with a temp folder under a
  fresh ``mkdtemp`` and free ports on 127.0.0.1, no dashboard), the model a Serve
  deployment (bench/bin/ray_serve_app.py), called through a DeploymentHandle by a
  driver that connects to that instance; the HTTP proxy is off (a handle needs none);
* mwrun: ``mwrun launch`` of a frontend (bench/bin/serve_model_frontend.py) and two
  workers, one world each (examples/serving's job, ``head_grace: 60``), its own
  MWRUN_HOME.

Each run starts one side, measures everything below, stops it whole, then the other
(the order alternates run to run: neither always comes first on a warm page cache).
The table gives the median over runs; the ratio is mwrun / Ray Serve.

* cold launch -> first answer: from starting ``ray start`` (Ray) or ``mwrun launch`` to
  the first answered request: everything a user waits for, control plane and replicas.
* steady p50 / p99 and control-plane CPU: the requests due in a steady window of
  ``--steady`` seconds, and the CPU time the control plane spent in that window (user +
  system, psutil) over its length, in % of one core. Ray's control plane is the GCS,
  the raylet, the Serve controller and the dashboard head that ``ray start`` runs even
  with ``--include-dashboard false``; mwrun's is the head, the agent, the keeper and
  the agent's watchdog. Each side's other processes of its own (Ray: the monitors,
  the agents, the client server, idle workers; mwrun: the zygote) are a second row.
  Replicas and clients are in neither.
* +1 replica -> its first answer: from the command (Ray: the app's config deployed
  again with ``num_replicas: 3``, the lightweight update ``serve deploy`` makes, sent
  by the running driver; mwrun: ``mwrun scale worker=+1``, a new interpreter, ~0.2 s
  of it) to the first answer from a pid never seen before.
* -1 replica: back to two the same way; the requests due in the next ``--window``
  seconds that were not answered ok, and their p99.
* a replica SIGKILLed: the requests due from the kill until the replica's replacement
  answers (+ 1 s) that failed, and the time from the kill to that first answer.
* the control plane SIGKILLed while serving. Ray, first the Serve controller (an actor
  Ray restarts): failed requests in ``--window`` s, and until it answers again (the
  driver's ``serve.status()`` returns); then the GCS (Ray restarts no GCS without an
  external Redis): the requests due in ``--gcs-window`` s that were answered ok (all,
  and in its last 5 s), the last answer, and whether a GCS came back. Without a GCS
  the replicas go on answering for a while, then Ray's processes give up on it
  (``gcs_rpc_server_reconnect_timeout_s``, 60 s): ``--gcs-window 70`` watches that end.
  mwrun, the head (``supervisor_pid``): with ``head_grace`` the agents keep every
  process, and ``head_restart`` starts a new head at once; failed requests in the same
  windows, and until the new head answers on the run's control socket. One head kill
  stands beside both of Ray's.

A failed request is one that got an error or no answer: the windows are read once the
last is over, so every request in the earlier ones has had its whole timeout (10 s, both
sides) and an unanswered one is lost, not late. A replica is told by the pid that
answered (both sides send it back): a new pid is the added replica, or the killed one's
replacement. Each figure starts once the service is steady again (every request of two
seconds answered, none failed), so none measures the aftermath of the one before.

Everything the bench starts is stopped on every way out (an error, Ctrl-C, SIGTERM):
the Ray instance lives under a keeper process of the bench's making, a child
subreaper, so that every process of that instance stays its descendant however it was
started, and is killed whole (never ``ray stop``, which stops every instance of the
user); the mwrun run is stopped with ``mwrun stop``, then anything left with its
MWRUN_HOME killed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import json
import os
import platform
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import compiled, ended  # noqa: E402  (a bench's own folder first)

BIN = HERE / "bin"
PY = sys.executable
RATE = 50.0  # requests per second, both sides
PORTS = ("--port", "--node-manager-port", "--object-manager-port", "--ray-client-server-port",
         "--dashboard-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
         "--runtime-env-agent-port", "--metrics-export-port")
PR_SET_PDEATHSIG = 1


class Failed(SystemExit):
    """A side did not come up or did not do what was asked: the bench ends with the
    message (status 1), its ``finally`` blocks run, no traceback."""


def need_ray() -> str:
    """Ray's version; a clear way out where Ray Serve is not installed."""
    try:
        import ray
        import ray.serve  # the extra brings both
    except ImportError:
        raise SystemExit("bench/compare_serve.py needs Ray Serve: pip install -e '.[bench]'"
                         " (from the checkout's root)") from None
    return ray.__version__


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _die_with_parent() -> None:
    """In a child (preexec_fn): SIGKILLed when the bench dies, however it dies."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (held together, so that they differ)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def wait_until(found, timeout: float, what: str, every: float = 0.02, gone=None):
    """``found()``'s first true value; Failed saying ``what`` at the timeout, or at
    once with ``gone()``'s reason when that says the side ended."""
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value:
            return value
        why = gone() if gone else None
        if why:
            raise Failed(f"{what}: never, {why}")
        if time.monotonic() >= deadline:
            raise Failed(f"{what}: not within {timeout:g} s")
        time.sleep(every)


def tail(path: Path, count: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-count:])
    except OSError:
        return "(no output)"


class Records:
    """A client's JSON lines (``{"i", "t", "lat", "ok", "pid", "err"}``), read as they
    grow; request i was due at ``t``, answered (or failed) at ``t + lat``."""

    def __init__(self, path: Path):
        self.path, self.at, self.rows, self.rest = path, 0, [], b""

    def read(self) -> list[dict]:
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as f:
            f.seek(self.at)
            data = self.rest + f.read()
            self.at = f.tell()
            *lines, self.rest = data.split(b"\n")  # a line half written waits
            self.rows += [json.loads(line) for line in lines if line.strip()]
        return self.rows

    def first_answer(self) -> float | None:
        done = [r["t"] + r["lat"] for r in self.read() if r["ok"]]
        return min(done) if done else None

    def new_pid_answer(self, since: float) -> float | None:
        """When a pid that had not answered before ``since`` first answered ok."""
        rows = self.read()
        old = {r["pid"] for r in rows if r["ok"] and r["t"] + r["lat"] < since}
        new = [r["t"] + r["lat"] for r in rows if r["ok"] and r["pid"] not in old
               and r["t"] + r["lat"] >= since]
        return min(new) if new else None

    def serving(self) -> bool:
        """The service is steady: of the requests due in the two seconds before the
        last one, none failed and at least 95 % are answered (a second is long enough
        to answer in; a loaded machine may hold up one or two longer)."""
        now = time.time()
        recent = self.window(now - 3.0, now - 1.0)
        errors = sum(n for kind, n in recent["errors"].items() if kind != "unanswered")
        return recent["due"] > 0 and errors == 0 and recent["ok"] >= 0.95 * recent["due"]

    def pids_since(self, since: float) -> set[int]:
        return {r["pid"] for r in self.read() if r["ok"] and r["t"] >= since}

    def window(self, start: float, end: float) -> dict:
        """The requests due in [start, end): how many, answered ok, failed (an error,
        or no answer yet: lost with a client that died, or still waiting), the
        latencies of those answered, and the errors' kinds."""
        rows = self.read()
        if not rows:
            return {"due": 0, "ok": 0, "failed": 0, "lat": [], "errors": {}}
        zero = rows[0]["t"] - rows[0]["i"] / RATE  # the schedule: due = zero + i / RATE
        first = max(0, int((start - zero) * RATE + 0.999999))
        last = int((end - zero) * RATE + 0.999999)  # first index due at or after end
        due = range(first, max(first, last))
        by_index = {r["i"]: r for r in rows if r["i"] in due}
        ok = [r for r in by_index.values() if r["ok"]]
        errors: dict[str, int] = {}
        for r in by_index.values():
            if not r["ok"]:
                kind = r["err"].split(":")[0]
                errors[kind] = errors.get(kind, 0) + 1
        if len(due) > len(by_index):
            errors["unanswered"] = len(due) - len(by_index)
        return {"due": len(due), "ok": len(ok), "failed": len(due) - len(ok),
                "lat": sorted(r["lat"] for r in ok), "errors": errors}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            out[proc.pid] = times.user + times.system
    return out


def cpu_percent(groups: dict[str, list[psutil.Process]], seconds: float) -> dict[str, float]:
    """% of one core each group of processes used over the next ``seconds`` (a process
    gone meanwhile counts what it had used until its last look)."""
    before = {name: cpu_seconds(procs) for name, procs in groups.items()}
    began = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - began
    out = {}
    for name, procs in groups.items():
        after = cpu_seconds(procs)
        used = sum(after.get(pid, was) - was for pid, was in before[name].items())
        out[name] = 100.0 * used / took
    return out


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


# -- Ray Serve ---------------------------------------------------------------------------

HOLD = r"""
import ctypes, os, signal, subprocess, sys, time
import psutil
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)       # a child subreaper: the instance's orphans come here
libc.prctl(1, signal.SIGTERM, 0, 0, 0)   # the bench gone (however): end the instance
def end(*_):
    me = psutil.Process()
    for _ in range(3):           # what a dying process starts meanwhile, too
        kids = me.children(recursive=True)
        for kid in kids:
            try: kid.kill()
            except psutil.Error: pass
        psutil.wait_procs(kids, timeout=5)
    os._exit(0)
signal.signal(signal.SIGTERM, end)
signal.signal(signal.SIGINT, end)
code = subprocess.call(sys.argv[1:], stdout=sys.stdout, stderr=sys.stdout)
print(f"RAY-START-EXITED {code}", flush=True)
while True:                      # reap the instance's processes as they end
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""


class RaySide:
    """A Ray instance of the bench's own, the app deployed, its driver's client."""

    name = "Ray Serve"

    def __init__(self, work: Path):
        self.work = Path(tempfile.mkdtemp(prefix="ray-", dir=work))
        self.records = Records(self.work / "requests.jsonl")
        self.holder: subprocess.Popen | None = None
        self.driver: subprocess.Popen | None = None
        self.events: queue.Queue = queue.Queue()
        self.env = {**os.environ,
                    # Ray resolves 127.0.0.1 to the machine's outward address unless told
                    # it runs one node here: then every address it uses is loopback.
                    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                    "RAY_USAGE_STATS_ENABLED": "0",
                    # Serve's controller imports the app (ray_serve_app:app), and that
                    # imports the model from serve_model_worker: both in bench/bin.
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (str(BIN), os.environ.get("PYTHONPATH")) if p)}

    def start(self) -> float:
        """Start the instance and the app; the seconds to the first answer."""
        ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        self.gcs = f"127.0.0.1:{ports['--port']}"
        argv = [str(Path(PY).with_name("ray")), "start", "--head", "--node-ip-address",
                "127.0.0.1", "--temp-dir", str(self.work / "t"), "--include-dashboard",
                "false", "--dashboard-host", "127.0.0.1", "--disable-usage-stats",
                # Logical CPUs as there are cores; the object store small: one tensor
                # at a time crosses it, and /dev/shm is not the bench's to fill.
                "--num-cpus", str(os.cpu_count() or 1), "--object-store-memory", str(10**8),
                *(x for port in ports.items() for x in (port[0], str(port[1])))]
        began = time.time()
        with open(self.work / "ray.log", "w") as log:
            self.holder = subprocess.Popen([PY, "-c", HOLD, *argv], stdout=log,
                                           stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True, cwd=self.work)
        wait_until(lambda: "RAY-START-EXITED" in tail(self.work / "ray.log", 3), 120,
                   "ray start", every=0.05, gone=self.gone)
        if "RAY-START-EXITED 0" not in tail(self.work / "ray.log", 3):
            raise Failed(f"ray start failed:\n{tail(self.work / 'ray.log')}")
        with open(self.work / "driver.log", "w") as log:
            self.driver = subprocess.Popen(
                [PY, str(BIN / "ray_serve_app.py"), "--address", self.gcs, "--rate",
                 str(RATE), "--out", str(self.records.path)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, env=self.env,
                start_new_session=True, preexec_fn=_die_with_parent)
        threading.Thread(target=self._read, daemon=True).start()
        first = wait_until(self.records.first_answer, 180, "Ray Serve's first answer",
                           gone=self.gone)
        return first - began

    def _read(self) -> None:
        assert self.driver is not None and self.driver.stdout is not None
        for line in self.driver.stdout:
            with contextlib.suppress(ValueError):
                self.events.put(json.loads(line))

    def gone(self) -> str | None:
        if self.holder is not None and self.holder.poll() is not None:
            return f"the Ray instance's keeper exited:\n{tail(self.work / 'ray.log')}"
        if self.driver is not None and self.driver.poll() is not None:
            return (f"the Ray driver exited ({self.driver.returncode}):\n"
                    f"{tail(self.work / 'driver.log')}")
        return None

    def tell(self, command: dict) -> None:
        assert self.driver is not None and self.driver.stdin is not None
        self.driver.stdin.write(json.dumps(command) + "\n")
        self.driver.stdin.flush()

    def expect(self, event: str, timeout: float) -> dict | None:
        """The driver's next ``event`` line; None if it does not come in time."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                return None
            if got.get("event") == event:
                return got

    def scale(self, replicas: int) -> float:
        """Send the new count; when it was sent (wall clock)."""
        sent = time.time()
        self.tell({"replicas": replicas})
        return sent

    def settle(self) -> None:
        if self.expect("applied", 60) is None:
            raise Failed(f"Ray Serve did not take the new config:\n{self.gone() or ''}")

    def processes(self) -> list[psutil.Process]:
        if self.holder is None:
            return []
        with contextlib.suppress(psutil.Error):
            return psutil.Process(self.holder.pid).children(recursive=True)
        return []

    def find(self, *words: str) -> list[psutil.Process]:
        found = []
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                line = " ".join(proc.cmdline())
                if any(word in line for word in words):
                    found.append(proc)
        return found

    def groups(self) -> dict[str, list[psutil.Process]]:
        """The control plane (the GCS, the raylet, the Serve controller, the dashboard
        head) and Ray's other processes; replicas, and the driver, in neither."""
        parts = {"gcs_server": "GCS", "raylet/raylet": "raylet",
                 "ServeController": "Serve controller", "dashboard/dashboard.py": "dashboard"}
        groups: dict[str, list[psutil.Process]] = {"core": [], "other": []}
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                line = " ".join(proc.cmdline())
                if "ServeReplica" in line:
                    continue
                part = next((name for word, name in parts.items() if word in line), None)
                groups["core" if part else "other"].append(proc)
                if part:
                    groups.setdefault(f"core:{part}", []).append(proc)
        return groups

    def victim(self) -> psutil.Process:
        """A replica that answered lately."""
        answered = self.records.pids_since(time.time() - 2)
        for proc in self.find("ray::ServeReplica"):
            if proc.pid in answered:
                return proc
        raise Failed("no Ray Serve replica found among the instance's processes")

    def stop(self) -> None:
        if self.driver is not None and self.driver.poll() is None:
            with contextlib.suppress(OSError):
                assert self.driver.stdin is not None
                self.driver.stdin.close()  # it ends itself
            ended(self.driver, 5)
        if self.holder is not None:
            left = self.processes()
            if self.holder.poll() is None:
                self.holder.terminate()  # it kills every process of the instance
                ended(self.holder, 30)
            kill_all(left)  # in case the keeper could not (killed itself)
        shutil.rmtree(self.work, ignore_errors=True)


def measure_ray(work: Path, opts) -> dict:
    side, out = RaySide(work), {"windows": {}}
    try:
        common(side, opts, out)

        # The Serve controller: Ray restarts it (a detached actor, max_restarts=-1).
        # "Back" is the driver's serve.status() returning: the new controller answers.
        steady_again(side, opts)
        [controller] = side.find("ray::ServeController") or [None]
        if controller is None:
            raise Failed("no Serve controller among the Ray instance's processes")
        killed = time.time()
        controller.kill()
        side.tell({"status": True})
        answered = side.expect("status", 60)
        out["ctl_back"] = answered["t"] - killed if answered else float("inf")
        out["windows"]["ctl"] = (killed, killed + opts.window)
        time.sleep(max(0.0, killed + opts.window - time.time()))

        # The GCS: nothing restarts it (GCS fault tolerance needs an external Redis).
        steady_again(side, opts, out)
        [gcs] = side.find("gcs_server") or [None]
        if gcs is None:
            raise Failed("no GCS among the Ray instance's processes")
        killed = time.time()
        gcs.kill()
        back = None
        while time.time() < killed + opts.gcs_window:
            if back is None and side.find("gcs_server"):
                back = time.time() - killed
            time.sleep(0.2)
        out["gcs_back"] = back if back is not None else float("inf")
        out["windows"]["gcs"] = (killed, killed + opts.gcs_window)
        time.sleep(1.0)  # the window's last requests: answered, or not
        evaluate(side, opts, out)
        return out
    finally:
        side.stop()


# -- mwrun -------------------------------------------------------------------------------

class MwrunSide:
    """``mwrun launch`` of the frontend and two workers, MWRUN_HOME its own."""

    name = "mwrun"

    def __init__(self, work: Path):
        self.work = Path(tempfile.mkdtemp(prefix="mwrun-", dir=work))
        self.home = self.work / "home"
        self.records = Records(self.work / "requests.jsonl")
        self.env = {**os.environ, "MWRUN_HOME": str(self.home), "NO_COLOR": "1"}
        self.launch: subprocess.Popen | None = None
        self.seen: dict[int, psutil.Process] = {}  # every process of the run looked at

    def topology(self) -> Path:
        path = self.work / "serve.yaml"
        path.write_text(f"""\
version: 1
name: serve
head_grace: 60        # a SIGKILLed head leaves every process serving
head_restart: true    # and a new head takes the run back at once
timeout: 10           # a request's call waits at most this (Ray's client: the same)
processes:
  frontend:
    cmd: [{PY}, {BIN / 'serve_model_frontend.py'}, --rate, '{RATE:g}', --out,
          {self.records.path}]
  worker:
    cmd: [{PY}, {BIN / 'serve_model_worker.py'}]
    replicas: 2
    scale: {{min: 1, max: 8}}
    drain_timeout: 10
    restart: on-failure
worlds:
  pair:
    per: worker
    members: [frontend, worker]
""")
        return path

    def start(self) -> float:
        path = self.topology()
        began = time.time()
        with open(self.work / "launch.log", "w") as log:
            self.launch = subprocess.Popen([PY, "-m", "mwrun", "launch", str(path)],
                                           stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True, cwd=self.work)
        first = wait_until(self.records.first_answer, 120, "mwrun's first answer",
                           gone=self.gone)
        self.processes()
        return first - began

    def gone(self) -> str | None:
        if self.launch is not None and self.launch.poll() is not None:
            return (f"mwrun launch exited ({self.launch.returncode}):\n"
                    f"{tail(self.work / 'launch.log')}")
        return None

    def status(self, timeout: float = 1.0) -> dict | None:
        """The run's status from its head, asked on its control socket; None while
        no head answers."""
        from mwrun import runs
        from mwrun.errors import RunError

        docs = sorted((self.home / "runs").glob("*/state.json"))
        if not docs:
            return None
        try:
            control = json.loads(docs[0].read_text())["control"]
            return runs.request(control, {"verb": "status"}, timeout=timeout)["status"]
        except (OSError, ValueError, KeyError, RunError):
            return None

    def mwrun(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([PY, "-m", "mwrun", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.env)

    def scale(self, replicas: int) -> float:
        """``mwrun scale worker=+1`` or ``-1`` (from two); when it was started."""
        sent = time.time()
        self.command = self.mwrun("scale", "worker=+1" if replicas > 2 else "worker=-1")
        return sent

    def settle(self) -> None:
        out, _ = self.command.communicate(timeout=60)
        if self.command.returncode != 0:
            raise Failed(f"mwrun scale failed: {out}")

    def processes(self) -> list[psutil.Process]:
        """The run's processes: those with its MWRUN_HOME, and their descendants (the
        zygote's title hides its environment)."""
        home = str(self.home)
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.environ().get("MWRUN_HOME") == home:
                    found.append(proc)
        for proc in list(found):
            with contextlib.suppress(psutil.Error):
                found += proc.children(recursive=True)
        unique = {p.pid: p for p in found}
        self.seen.update(unique)
        return list(unique.values())

    def groups(self) -> dict[str, list[psutil.Process]]:
        """The control plane (the head, the agent, the keeper, the watchdog) and the
        rest of mwrun's own (the zygote); the frontend and the workers in neither."""
        groups: dict[str, list[psutil.Process]] = {"core": [], "other": []}
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                argv = proc.cmdline()
                line = " ".join(argv)
                if "serve_model_" in line or (argv[1:3] == ["-m", "mwrun"] and
                                              argv[3:4] in (["scale"], ["status"], ["stop"])):
                    continue
                part = "keeper" if "mwrun.keeper" in line else \
                    "watchdog" if "mwrun.host.watchdog" in line else \
                    "agent" if argv[1:4] == ["-m", "mwrun", "agent"] else \
                    "head" if argv[1:3] == ["-m", "mwrun"] else None
                groups["core" if part else "other"].append(proc)
                if part:
                    groups.setdefault(f"core:{part}", []).append(proc)
        return groups

    def victim(self) -> psutil.Process:
        doc = self.status()
        pid = next((p["pid"] for p in (doc or {}).get("processes", ())
                    if p["name"] == "worker-0"), None)
        if not pid:
            raise Failed("worker-0 not found in the run's status")
        return psutil.Process(pid)

    def stop(self) -> None:
        left = self.processes()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run([PY, "-m", "mwrun", "stop"], env=self.env, capture_output=True,
                           timeout=60)
        if self.launch is not None and self.launch.poll() is None:
            self.launch.send_signal(signal.SIGINT)
            ended(self.launch, 30)
        kill_all([*left, *self.processes(), *self.seen.values()])
        shutil.rmtree(self.work, ignore_errors=True)


def measure_mwrun(work: Path, opts) -> dict:
    side, out = MwrunSide(work), {"windows": {}}
    try:
        common(side, opts, out)

        # The head: SIGKILL, then until a head of the next epoch answers on the run's
        # control socket (head_restart starts it at once). One kill beside both of Ray's.
        steady_again(side, opts)
        doc = side.status()
        if not doc:
            raise Failed("mwrun's head does not answer on its control socket")
        epoch, head = doc["epoch"], psutil.Process(doc["supervisor_pid"])
        side.processes()
        killed = time.time()
        head.kill()
        wait_until(lambda: (side.status(0.5) or {}).get("epoch", 0) > epoch, 60,
                   "a new head", every=0.01)
        out["ctl_back"] = out["gcs_back"] = time.time() - killed
        side.processes()
        out["windows"]["ctl"] = (killed, killed + opts.window)
        out["windows"]["gcs"] = (killed, killed + opts.gcs_window)
        time.sleep(max(0.0, killed + opts.gcs_window - time.time()) + 1.0)
        evaluate(side, opts, out)
        return out
    finally:
        side.stop()


# -- what both sides do alike -------------------------------------------------------------

def steady_again(side, opts, out: dict | None = None) -> None:
    """Until the service is steady again (every request of the last second answered
    ok), then ``--settle`` seconds more: no figure measures the last one's aftermath.
    With ``out``, a service that is not steady within the wait is noted there and the
    bench goes on (not recovering is then the finding); without, the bench ends."""
    try:
        wait_until(side.records.serving, 120, f"{side.name}: serving steadily again",
                   every=0.1, gone=side.gone)
    except Failed as exc:
        if out is None:
            raise
        out.setdefault("notes", []).append(str(exc))
    time.sleep(opts.settle)


def common(side, opts, out: dict) -> None:
    """What both sides are measured on alike, in the same order: cold launch, steady
    serving, a scale up and down, a replica SIGKILLed. Then each its control plane."""
    out["cold"] = side.start()
    common_steady(side, opts, out)
    common_scale(side, opts, out)
    common_replica_kill(side, opts, out)


def common_steady(side, opts, out: dict) -> None:
    steady_again(side, opts)
    start = time.time()
    cpu = cpu_percent(side.groups(), opts.steady)
    out["windows"]["steady"] = (start, start + opts.steady)
    out.update(cpu=cpu["core"], cpu_other=cpu["other"],
               cpu_parts={k[5:]: v for k, v in cpu.items() if k.startswith("core:")})


def common_scale(side, opts, out: dict) -> None:
    steady_again(side, opts)
    sent = side.scale(3)
    first = wait_until(lambda: side.records.new_pid_answer(sent), 120,
                       f"{side.name}: the added replica's first answer", gone=side.gone)
    out["up"] = first - sent
    side.settle()
    steady_again(side, opts)
    sent = side.scale(2)
    side.settle()
    out["windows"]["down"] = (sent, sent + opts.window)
    time.sleep(max(0.0, sent + opts.window - time.time()))


def common_replica_kill(side, opts, out: dict) -> None:
    steady_again(side, opts)
    victim = side.victim()
    killed = time.time()
    victim.kill()
    back = wait_until(lambda: side.records.new_pid_answer(killed), 120,
                      f"{side.name}: the killed replica's replacement answering",
                      gone=side.gone)
    out["kill_back"] = back - killed
    out["windows"]["kill"] = (killed, back + 1.0)
    time.sleep(1.0)


def evaluate(side, opts, out: dict) -> None:
    """Each window's requests, read once the last window is over: by then every
    earlier request has had its whole timeout (10 s) to be answered or fail, so an
    unanswered one is lost, not late."""
    windows, records = out["windows"], side.records
    steady = records.window(*windows["steady"])
    out.update(p50=pct(steady["lat"], 0.5), p99=pct(steady["lat"], 0.99),
               steady_failed=steady["failed"])
    down = records.window(*windows["down"])
    out["down_failed"], out["down_p99"] = down["failed"], pct(down["lat"], 0.99)
    kill = records.window(*windows["kill"])
    out["kill_failed"], out["kill_errors"] = kill["failed"], kill["errors"]
    ctl = records.window(*windows["ctl"])
    out["ctl_failed"], out["ctl_p99"] = ctl["failed"], pct(ctl["lat"], 0.99)
    start, end = windows["gcs"]
    out["gcs"] = records.window(start, end)
    out["gcs_failed_first"] = records.window(start, start + opts.window)["failed"]
    last = records.window(end - 5.0, end)
    out["gcs_last"] = 100.0 * last["ok"] / max(last["due"], 1)
    answered = [r["t"] + r["lat"] for r in records.read()
                if r["ok"] and start <= r["t"] < end and r["t"] + r["lat"] <= end]
    out["gcs_until"] = max(answered, default=start) - start


# -- the table ---------------------------------------------------------------------------

def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def fmt(value: float, unit: str = "s") -> str:
    if value != value:  # NaN: nothing answered in the window
        return "none answered"
    if value == float("inf"):
        return "never"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "ms":
        return f"{value * 1000:.1f} ms"
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:g}"


def ratio(ours: float, theirs: float) -> str:
    if any(v != v or v == float("inf") for v in (ours, theirs)):
        return "--"
    if theirs == 0:  # nothing to divide by (0 failed requests, say)
        return "--"
    return f"{ours / theirs:.2f}"


def table(ray: list[dict], mw: list[dict], opts) -> str:
    def gcs_ok(runs: list[dict]) -> float:
        return statistics.median(100.0 * r["gcs"]["ok"] / max(r["gcs"]["due"], 1) for r in runs)

    rows = [
        ("cold launch -> first answer", "cold", "s"),
        ("steady p50 latency", "p50", "ms"),
        ("steady p99 latency", "p99", "ms"),
        (f"steady failed requests ({opts.steady:g} s)", "steady_failed", "n"),
        ("control-plane CPU, steady (% of a core)", "cpu", "%"),
        ("  other system processes of its own", "cpu_other", "%"),
        ("+1 replica: command -> its first answer", "up", "s"),
        (f"-1 replica: failed requests ({opts.window:g} s)", "down_failed", "n"),
        ("-1 replica: p99 latency meanwhile", "down_p99", "ms"),
        ("replica SIGKILLed: failed requests", "kill_failed", "n"),
        ("replica SIGKILLed: -> its replacement answers", "kill_back", "s"),
        (f"control plane SIGKILLed (Ray: Serve controller): failed ({opts.window:g} s)",
         "ctl_failed", "n"),
        ("  p99 latency meanwhile", "ctl_p99", "ms"),
        ("  -> the control plane answers again", "ctl_back", "s"),
        (f"control plane SIGKILLed (Ray: GCS): failed, first {opts.window:g} s",
         "gcs_failed_first", "n"),
    ]
    lines = [("figure", "Ray Serve", "mwrun", "ratio")]
    for label, key, unit in rows:
        theirs, ours = median(ray, key), median(mw, key)
        lines.append((label, fmt(theirs, unit), fmt(ours, unit), ratio(ours, theirs)))
    theirs, ours = gcs_ok(ray), gcs_ok(mw)
    lines.append((f"  answered ok over {opts.gcs_window:g} s (% of due)", fmt(theirs, "%"),
                  fmt(ours, "%"), ratio(ours, theirs)))
    theirs, ours = median(ray, "gcs_back"), median(mw, "gcs_back")
    lines.append(("  -> the control plane back", fmt(theirs), fmt(ours), ratio(ours, theirs)))
    theirs, ours = median(ray, "gcs_last"), median(mw, "gcs_last")
    lines.append(("  answered ok in its last 5 s (% of due)", fmt(theirs, "%"),
                  fmt(ours, "%"), ratio(ours, theirs)))
    lines.append(("  the last answer, after the kill", fmt(median(ray, "gcs_until")),
                  fmt(median(mw, "gcs_until")), ""))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    rule = "  ".join("=" * w for w in widths)
    text = [rule]
    for n, line in enumerate(lines):
        text.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                    .rstrip())
        if n == 0:
            text.append(rule)
    text.append(rule)
    return "\n".join(text)


def details(side: str, runs: list[dict]) -> str:
    """What each run saw, beyond the medians: the errors of the replica kill, the
    GCS/head kill's window."""
    out = []
    for n, r in enumerate(runs, 1):
        gcs = r["gcs"]
        parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["cpu_parts"].items()))
        out.append(f"  {side} run {n}: control-plane CPU % by process: {parts}")
        out.append(f"  {side} run {n}: replica kill errors {r['kill_errors'] or '{}'};"
                   f" {'GCS' if side == 'Ray Serve' else 'head'} kill window: {gcs['ok']} of"
                   f" {gcs['due']} answered ok,"
                   f" errors {gcs['errors'] or '{}'}"
                   + "".join(f"; {note}" for note in r.get("notes", ())))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each side (medians)")
    parser.add_argument("--quick", action="store_true",
                        help="one run, shorter windows (~2 min)")
    parser.add_argument("--steady", type=float, default=15.0,
                        help="seconds of steady serving measured (latency, CPU)")
    parser.add_argument("--window", type=float, default=6.0,
                        help="seconds after a scale-down or a controller kill counted")
    parser.add_argument("--gcs-window", type=float, default=20.0,
                        help="seconds watched after the GCS (mwrun: the head) is killed")
    parser.add_argument("--settle", type=float, default=1.5,
                        help="seconds between one figure and the next")
    opts = parser.parse_args()
    if opts.quick:
        opts.runs, opts.steady, opts.window, opts.gcs_window, opts.settle = 1, 8, 5, 12, 1
    if opts.runs < 1 or min(opts.steady, opts.window, opts.gcs_window) <= 0:
        parser.error("--runs, --steady, --window and --gcs-window must be positive")
    if opts.gcs_window < opts.window:
        parser.error("--gcs-window must be at least --window")
    version = need_ray()
    compiled()  # mwrun's bytecode, as pip writes Ray's: no side compiles at each start

    def stop(signum, frame):  # SIGTERM: the same way out as Ctrl-C, every finally run
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"bench/compare_serve.py: Ray {version}, mwrun {mwrun_version()}, torch"
          f" {torch_version()}; {os.cpu_count()} cores ({platform.machine()}),"
          f" {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC;"
          f" {RATE:g} requests/s, 2 replicas; {opts.runs} run(s); {load()}", flush=True)
    ray_runs: list[dict] = []
    mw_runs: list[dict] = []
    began = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="serve-") as tmp:
            for n in range(opts.runs):
                order = [("Ray Serve", measure_ray, ray_runs), ("mwrun", measure_mwrun, mw_runs)]
                for name, measure, into in order if n % 2 == 0 else order[::-1]:
                    print(f"run {n + 1}: {name}...", flush=True)
                    into.append(measure(Path(tmp), opts))
                    r = into[-1]
                    print(f"  cold {r['cold']:.2f} s, p50/p99 {r['p50'] * 1e3:.1f}/"
                          f"{r['p99'] * 1e3:.1f} ms, CPU {r['cpu']:.1f} %, +1 {r['up']:.2f} s,"
                          f" kill -> back {r['kill_back']:.2f} s ({r['kill_failed']} failed),"
                          f" control plane back {r['ctl_back']:.2f} s", flush=True)
    except KeyboardInterrupt:
        raise SystemExit("interrupted: everything the bench started is stopped") from None
    print(f"\n{opts.runs} run(s) in {time.monotonic() - began:.0f} s, {load()}; medians;"
          " ratio = mwrun / Ray Serve\n")
    print(table(ray_runs, mw_runs, opts))
    print()
    print(details("Ray Serve", ray_runs))
    print(details("mwrun", mw_runs))


def load() -> str:
    """The machine's load: on two cores, anything else running moves every figure."""
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


def mwrun_version() -> str:
    import mwrun

    return mwrun.__version__


def torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
