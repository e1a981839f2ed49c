"""The head at scale: what one job of many processes costs it, side by side with
another checkout (today's main) where that can run.

    python bench/scale.py                          # this checkout
    python bench/scale.py --baseline /path/to/main # and the same against another one
    python bench/scale.py --only local --pairs 64 --watch 20

``local``: 2 x PAIRS warm processes (``preload: [torch]``) in PAIRS two-member worlds on
this machine, rank 1 sending rank 0 one number every 2 s (so each beats once a second):
launch to every world healthy (beside one ``import torch`` plus as many forks of a
process that has it, timed in the same run), the supervisor's CPU, a status request
(through the control socket, and the whole ``mwrun status --json`` command), and a
member SIGKILLed to its world healthy again.

``sim``: HOSTS x 8 ranks (1,000 on 125 hosts by default) in two-member worlds, on
hosts simulated by the benchmark's own stand-in agents (bench/bin/standin_agent.py,
reached through a stand-in ``ssh`` on the head's PATH): they speak the real frame
protocol and the library's hello, ready and heartbeats for the processes they pretend
to run. The head is real, on 10.232.N.1 of a bridge the bench makes for the run and
removes when it ends (the test bed's, tests/integration/testbed.py: a free /24 under
a lock of the whole machine); root and iproute2 needed. Not loopback: a job with ssh
hosts needs an address they reach its head on (a loopback head is refused for it),
and not this machine's own address either: traffic goes only to loopback and to
links of our own. Its CPU from launch to every world healthy, its CPU idle after, and
the time from a stand-in's exit frame to the break written in the world's store (read
by a store client of the benchmark's own, over that link).

``events``: the supervisor's own work for one exit, with no processes at all (a
scripted host), at 10 and at 1,000 processes; their ratio is what "cost proportional
to what an event touches" means.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent

# The test bed (tests/integration/testbed.py) makes the sim's link; it needs the
# standard library and psutil only.
if __package__:  # bench.scale, the checkout's root on the path (the tests)
    from bench.common import Launched, NotStarted, compiled, wait_for
    from bench.supervisor import control_plane, cpu_percent, cpu_seconds, import_torch_seconds
    from tests.integration import testbed
else:  # a script: its folder first on the path, and the root for the test bed
    sys.path.insert(0, str(HERE.parent))
    from common import Launched, NotStarted, compiled, wait_for
    from supervisor import control_plane, cpu_percent, cpu_seconds, import_torch_seconds

    from tests.integration import testbed

PY = sys.executable


def _env(checkout: Path | None) -> dict:
    """What the head (and every process it starts) gets beside MWRUN_HOME: the code of
    ``checkout`` where one is given."""
    return {"PYTHONPATH": str(checkout)} if checkout is not None else {}


def _request(path: str, message: dict, timeout: float = 30.0) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def _unfinished(doc: dict | None) -> str:
    if doc is None:
        return ""
    starting = sum(p["state"] == "starting" for p in doc["processes"])
    forming = sum(w["state"] != "healthy" for w in doc["worlds"])
    return f" ({starting} processes starting, {forming} worlds not healthy)"


def _stop(job: Launched) -> None:
    try:
        job.stop()
    except subprocess.TimeoutExpired:
        job.popen.kill()
        job.popen.wait()


def fork_seconds(count: int) -> float:
    """``count`` forks (each child exits at once) of a process that imported torch."""
    code = ("import os, time, torch\nstart = time.monotonic()\n"
            f"pids = [os.fork() or os._exit(0) for _ in range({count})]\n"
            "[os.waitpid(p, 0) for p in pids]\nprint(time.monotonic() - start)")
    return float(subprocess.run([PY, "-c", code], capture_output=True, text=True,
                                check=True).stdout)


def local(work: Path, pairs: int, watch: float, kills: int, checkout: Path | None) -> dict:
    members = "".join(f"  w{i}: {{members: [m-{2 * i}, m-{2 * i + 1}]}}\n" for i in range(pairs))
    topology = work / "scale.yaml"
    topology.write_text(f"""version: 1
name: scale
preload: [torch]
hang_timeout: 300
processes:
  m:
    replicas: {2 * pairs}
    cmd: [{PY}, {HERE / 'bin' / 'pair_member.py'}, --interval, '2']
    restart: on-failure
    max_restarts: {kills + 5}
    restart_backoff: 0
worlds:
{members}""")
    home = work / f"home-{'base' if checkout else 'this'}"
    started = time.monotonic()
    job = Launched(topology, home, env=_env(checkout), cwd=work)
    out: dict = {}
    try:
        try:
            doc = job.healthy(300, every=0.05)
        except NotStarted as exc:
            return {"never": f"{exc}{_unfinished(job.state())}"}
        out["healthy_s"] = time.monotonic() - started
        control = doc["control"]
        time.sleep(3.0)  # past the bring-up's last beats
        out["cpu"] = cpu_percent(job.popen.pid, watch)
        times = []
        for _ in range(10):
            t0 = time.monotonic()
            _request(control, {"verb": "status"})
            times.append(time.monotonic() - t0)
        out["status_request_s"] = statistics.median(times)
        cli = []
        for _ in range(3):
            t0 = time.monotonic()
            subprocess.run([PY, "-m", "mwrun", "status", "--json"],
                           env={**os.environ, **_env(checkout), "MWRUN_HOME": str(home)},
                           capture_output=True, check=True, cwd=work)
            cli.append(time.monotonic() - t0)
        out["status_cli_s"] = statistics.median(cli)
        out["recovered_s"] = _kills(control, kills)
    finally:
        _stop(job)
    return out


def _kills(control: str, count: int) -> list[float]:
    """Kill world i's rank 1 (a different world each time); seconds until that world
    is healthy again at its next generation, polled through the control socket."""
    times = []
    for i in range(count):
        doc = _request(control, {"verb": "status"})["status"]
        world = next(w for w in doc["worlds"] if w["name"] == f"w{i}")
        victim = next(p for p in doc["processes"] if p["name"] == world["members"][1])
        killed = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        while time.monotonic() - killed < 60:
            doc = _request(control, {"verb": "status"})["status"]
            now = next(w for w in doc["worlds"] if w["name"] == f"w{i}")
            if now["state"] == "healthy" and now["generation"] > world["generation"]:
                times.append(time.monotonic() - killed)
                break
            time.sleep(0.005)
        time.sleep(1.0)
    return times


def sim_topology(hosts: int, head: str, per_host: int = 8) -> str:
    """HOSTS simulated hosts (reached through the stand-in ssh) of PER_HOST ranks each in
    two-member worlds, every world on one host; the head at ``head``. A simulated host
    keeps a loopback address: only its own members reach it, as on a real host."""
    lines = ["version: 1", "name: sim", "hang_timeout: 300", "hosts:",
             f"  head: {{addr: '{head}'}}"]
    lines += [f"  h{i}: {{addr: 127.0.0.1, ssh: h{i}}}" for i in range(hosts)]
    lines.append("processes:")
    lines += [f"  p{i}: {{replicas: {per_host}, cmd: [{PY}, idle.py], host: h{i},"
              " preload: false}" for i in range(hosts)]
    lines.append("worlds:")
    lines += [f"  w{i}-{k}: {{members: [p{i}-{2 * k}, p{i}-{2 * k + 1}]}}"
              for i in range(hosts) for k in range(per_host // 2)]
    return "\n".join(lines) + "\n"


def no_link() -> str | None:
    """Why the simulated job cannot run here, or None: its head's link cannot be made."""
    why = testbed.missing_link()
    return f"sim: not run, its head needs a link of its own: {why}" if why else None


def simulated(work: Path, hosts: int, watch: float, exits: int,
              checkout: Path | None) -> dict:
    """The simulated job, its head on a bridge made for it and removed when it ends,
    also on failure (its processes are gone by then: ``_sim_on``'s ``finally``)."""
    why = no_link()
    if why:
        raise NotStarted(why)
    with testbed.bridge() as link:
        print(f"sim: the head on {link.head_addr}, link {link.name}, made for this run",
              flush=True)
        return _sim_on(link.head_addr, work, hosts, watch, exits, checkout)


def _sim_on(head: str, work: Path, hosts: int, watch: float, exits: int,
            checkout: Path | None) -> dict:
    topology = work / "sim.yaml"
    topology.write_text(sim_topology(hosts, head))
    home, exits_log = work / "home-sim", work / "exits.log"
    # Each tree's own stand-in: it plays that tree's agent (its beats, its frames).
    standin = (checkout / "bench" if checkout else HERE) / "bin" / "standin_agent.py"
    env = {**_env(checkout), "PATH": f"{HERE / 'bin'}:{os.environ['PATH']}",
           "MWRUN_BENCH_PYTHON": PY, "MWRUN_BENCH_STANDIN": str(standin),
           "MWRUN_BENCH_EXITS": str(exits_log)}
    started = time.monotonic()
    job = Launched(topology, home, env=env, cwd=work)
    out: dict = {}
    try:
        proc = psutil.Process(job.popen.pid)
        try:
            doc = job.healthy(600, every=0.1)
        except NotStarted as exc:
            return {"never": f"{exc}{_unfinished(job.state())}"}
        out["healthy_s"], out["bringup_cpu_s"] = (time.monotonic() - started,
                                                  cpu_seconds(control_plane(proc.pid)))
        _stores_served(doc, head)
        time.sleep(3.0)
        out["cpu"] = cpu_percent(job.popen.pid, watch)
        out["break_s"] = _exit_to_break(doc, head, exits_log, exits, job.gone)
    finally:
        _stop(job)
    return out


def _exit_time(exits_log: Path, victim: str) -> float | None:
    """When the stand-in sent ``victim``'s exit frame, once its line is whole."""
    text = exits_log.read_text() if exits_log.exists() else ""
    for line in text.splitlines(keepends=True):
        name, _, at = line.partition(" ")
        if name == victim and line.endswith("\n"):
            return float(at)
    return None


def _stores_served(doc: dict, head: str) -> None:
    """Until the last world's store serves: the stand-ins never touch their stores, so
    their worlds are healthy before the head has imported torch and built its stores (a
    real member waits for its store), and an idle measured from there measured that
    import (a profile of the "idle" head showed 85 % of its samples in it)."""
    from datetime import timedelta

    import torch.distributed as dist

    world = doc["worlds"][-1]
    store = dist.TCPStore(head, world["port"], None, False, timeout=timedelta(seconds=300))
    store.check([f"mwrun/g{world['generation']}/broken"])


def _exit_to_break(doc: dict, head: str, exits_log: Path, count: int,
                   gone: Callable[[], str | None]) -> list[float]:
    """Kill rank 1 of a few worlds (the stand-in answers with its exit frame at once);
    seconds from that frame to the break in the world's store, seen by a client."""
    from datetime import timedelta

    import torch.distributed as dist

    took = []
    for i in range(count):
        world = doc["worlds"][i * 4]
        store = dist.TCPStore(head, world["port"], None, False,  # its members are away
                              timeout=timedelta(seconds=300))
        # The stand-ins never touch their worlds' stores, so their worlds form before
        # the head has built them all (a real member waits for its store): measure
        # from a store that serves.
        store.check([f"mwrun/g{world['generation']}/broken"])
        _request(doc["control"], {"verb": "kill_world", "world": world["name"], "rank": 1,
                                  "signal": "KILL"})
        store.wait([f"mwrun/g{world['generation']}/broken"])
        seen = time.time()
        victim = world["members"][1]
        # The stand-in writes the frame's time once the frame went: the break may be
        # seen before that line is there.
        sent = wait_for(lambda v=victim: _exit_time(exits_log, v), gone, 30,
                        f"{victim}'s exit frame in {exits_log}", every=0.01)
        took.append(seen - sent)
    return took


def events(checkout: Path | None) -> dict:
    """The supervisor's work for one exit at 10 and 1,000 processes (a scripted host)."""
    env = {**os.environ, **({"PYTHONPATH": str(checkout)} if checkout else {})}
    # Run from elsewhere; its own folder (bench/bin: its scripted host) is first on its path.
    result = subprocess.run([PY, str(HERE / "bin" / "one_exit.py")], env=env,
                            capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        return {"never": result.stderr.strip().splitlines()[-1]}
    return json.loads(result.stdout)


def sims(hosts: int, watch: float, kills: int, runs: list[tuple[str, Path | None]]) -> None:
    for label, checkout in runs:
        with tempfile.TemporaryDirectory(prefix="mwrun-sim-") as tmp:
            res = simulated(Path(tmp), hosts, watch, kills, checkout)
        if "never" in res:
            print(f"[{label}] {8 * hosts} simulated ranks: {res['never']}")
            continue
        ms = [t * 1000 for t in res["break_s"]]
        print(f"[{label}] {8 * hosts} ranks on {hosts} simulated hosts:\n"
              f"  launch -> every world healthy {res['healthy_s']:.1f} s, supervisor CPU"
              f" {res['bringup_cpu_s']:.1f} s (goal <= 5 s)\n"
              f"  supervisor CPU idle {res['cpu']:.2f} % of a core (goal <= 0.5 %)\n"
              f"  exit frame -> break in the store median {statistics.median(ms):.1f} ms,"
              f" max {max(ms):.1f} ms (goal <= 50 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--watch", type=float, default=20.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout to run side by side")
    parser.add_argument("--hosts", type=int, default=125, help="simulated hosts, 8 ranks each")
    parser.add_argument("--only", choices=["local", "sim", "events"])
    args = parser.parse_args()
    runs = [("this", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    compiled(*(checkout for _, checkout in runs))
    if args.only in (None, "events"):
        for label, checkout in runs:
            ev = events(checkout)
            print(f"[{label}] one exit's supervisor work: " + (ev.get("never") or
                  f"{ev['10'] * 1e6:.0f} us at 10 processes, {ev['1000'] * 1e6:.0f} us at"
                  f" 1,000: ratio {ev['1000'] / ev['10']:.2f} (goal <= 2)"))
    if args.only in (None, "sim"):
        why = no_link()
        if why and args.only == "sim":
            raise NotStarted(why)
        if why:  # the other parts run without one
            print(why)
        else:
            sims(args.hosts, args.watch, args.kills, runs)
    if args.only in (None, "local"):
        n = 2 * args.pairs
        torch_s = import_torch_seconds(3)
        forks_s = fork_seconds(n)
        print(f"import torch {torch_s:.2f} s, {n} forks {forks_s:.2f} s (same run)")
        for label, checkout in runs:
            with tempfile.TemporaryDirectory(prefix="mwrun-scale-") as tmp:
                res = local(Path(tmp), args.pairs, args.watch, args.kills, checkout)
            if "never" in res:
                print(f"[{label}] {n} warm processes in {args.pairs} worlds: never healthy"
                      f" ({res['never']})")
                continue
            rec = res["recovered_s"]
            print(f"[{label}] {n} warm processes in {args.pairs} worlds:\n"
                  f"  launch -> every world healthy {res['healthy_s']:.2f} s ="
                  f" {res['healthy_s'] / (torch_s + forks_s):.2f} x (import + forks) (goal <= 2)\n"
                  f"  supervisor CPU {res['cpu']:.2f} % of a core (goal <= 1 %)\n"
                  f"  status request {res['status_request_s'] * 1000:.0f} ms, `mwrun status"
                  f" --json` {res['status_cli_s']:.2f} s (goal <= 0.2 s)\n"
                  f"  SIGKILL -> world healthy again median {statistics.median(rec):.2f} s,"
                  f" max {max(rec):.2f} s over {len(rec)} (goal median <= 0.3 s)")


if __name__ == "__main__":
    # A TERM ends the bench through its ``finally`` blocks: the sim's job stopped and
    # its link removed, as at Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
