"""Remake the README's drill picture from a real ``mwrun drill``: a star of a leader and
4 workers, a fault every 10 s (mean) for 2 minutes, then ``mwrun report``.

    python bench/drill_report.py                  # writes docs/drill-report.png
    python bench/drill_report.py -o /tmp/my.png --for 60
    sudo python bench/drill_report.py --ssh       # 2 of the 4 workers on an ssh host

Launches the star (examples/send_recv, each worker sending every 0.1 s so that a
world's pace is counted to a few calls in a thousand) in the background under a fresh
MWRUN_HOME, lets every world run fault-free for --settle seconds (the drill's
fault-free pace), runs ``mwrun drill``, stops the run, draws its report and prints
the drill's figures: faults, downtime, the phases kill -> survivors told and kill ->
re-formed, pace kept by the faulted worlds and by the others.

mwrun's settings are the defaults: no ``preload:`` line (warm starts are the default),
the default restart backoff (a drill's kill is no crash loop), the default timeouts.
Only ``max_restarts`` is raised, since a 2-minute drill may hit one worker more often
than the default 3 restarts allow.

--ssh puts worker-2 and worker-3 on a host reached over ssh: a network namespace of
this machine with a real sshd (the project's test bed, tests/integration/testbed.py;
needs root). Its picture goes to a temporary folder unless -o says where, so that
docs/drill-report.png stays the local drill's. Whatever happens (failure, Ctrl-C) the
run is stopped and the namespace and its sshd removed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import run_over, wait_for  # noqa: E402 - the benches' own helpers

WORKERS = 4
REMOTE = 2  # of the workers, on the ssh host with --ssh

PROCESSES = """\
version: 1
name: drill
{hosts}processes:
  leader:
    cmd: python examples/send_recv/leader.py
    cwd: {root}
    restart: on-failure{host}
{workers}
worlds:
{worlds}
"""

WORKER = """\
  {name}:
    replicas: {replicas}
    cmd: python examples/send_recv/worker.py --steps 1000000 --interval 0.1
    cwd: {root}
    restart: on-failure
    max_restarts: 1000{host}"""


def topology(nodes) -> str:
    """The star; with ssh nodes, workers 2 and 3 (``remote-0``, ``remote-1``) on node1."""
    if not nodes:
        groups = [("worker", WORKERS, "")]
        hosts = ""
    else:
        from bench.hosts import hosts_yaml  # the bench's own ssh host lines
        groups = [("worker", WORKERS - REMOTE, "\n    host: head"),
                  ("remote", REMOTE, "\n    host: node1")]
        hosts = hosts_yaml(nodes[0].head_addr, nodes[:1])
    members = [f"{name}-{i}" for name, count, _ in groups for i in range(count)]
    return PROCESSES.format(
        root=ROOT, hosts=hosts, host="\n    host: head" if nodes else "",
        workers="\n".join(WORKER.format(name=name, replicas=count, root=ROOT, host=host)
                          for name, count, host in groups),
        worlds="\n".join(f"  world{i + 1}: {{members: [leader, {m}]}}"
                         for i, m in enumerate(members)))


def mwrun(*args: str, env: dict, check: bool = True, live: bool = False) -> str:
    done = subprocess.run([sys.executable, "-m", "mwrun", *args], env=env, cwd=ROOT,
                          stdout=None if live else subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=900)
    if check and done.returncode != 0:
        raise SystemExit(f"mwrun {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout or ""


def wait_healthy(env: dict, settle: float, timeout: float = 240.0) -> None:
    """Every world healthy for ``settle`` seconds; at once, saying why, when the run
    is over (failed, or its head gone: ``mwrun status`` reads it as lost)."""
    doc: dict = {}

    def settled() -> bool:
        nonlocal doc
        doc = json.loads(mwrun("status", "drill", "--json", env=env, check=False) or "{}")
        worlds = doc.get("worlds") or []
        return bool(worlds) and all((w["healthy_for_s"] or 0) >= settle for w in worlds)

    wait_for(settled, lambda: run_over(doc or None), timeout,
             "every world healthy", every=0.5)


def figures(home: str) -> dict:
    history = Path(home) / "runs" / "drill" / "history.jsonl"
    records = [r for r in map(json.loads, history.read_text().splitlines())
               if r.get("event") == "drill"]
    if not records:
        raise SystemExit("the drill wrote no summary into the run's history")
    return records[-1]


def run_drill(args, env: dict) -> None:
    """``mwrun drill``, live. Ctrl-C reaches it too (one process group): it ends the
    drill with the summary so far, in the history, and this script goes on to stop the
    run and report, as after a full drill."""
    proc = subprocess.Popen([sys.executable, "-m", "mwrun", "drill", "drill", "--every",
                             str(args.every), "--for", str(args.duration), "--seed",
                             str(args.seed)], env=env, cwd=ROOT)
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.wait(timeout=60)  # its summary; a second Ctrl-C gives up (stop follows)


def drill(args, nodes, home: str) -> tuple[dict, tuple, tuple]:
    """Launch, settle, drill, stop (always), report; the drill record and the loads."""
    env = {**os.environ, "MWRUN_HOME": home, "NO_COLOR": "1"}
    path = Path(home) / "drill.yaml"
    path.write_text(topology(nodes))
    load_before = os.getloadavg()
    try:
        mwrun("launch", str(path), "--detach", "--run-id", "drill", env=env)
        wait_healthy(env, args.settle)
        run_drill(args, env)
    finally:
        # A second Ctrl-C must not cut the stop short: the run's processes (and, with
        # --ssh, its agent in the namespace) would outlive the script.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            mwrun("stop", "drill", env=env, check=False)
        finally:
            signal.signal(signal.SIGINT, previous)
    load_after = os.getloadavg()
    mwrun("report", "drill", "-o", args.output, env=env)
    return figures(home), load_before, load_after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", help="the picture (default: docs/drill-report.png;"
                        " with --ssh, a file in the temporary folder)")
    parser.add_argument("--ssh", action="store_true",
                        help=f"{REMOTE} of the {WORKERS} workers on an ssh host (netns, real"
                        " sshd; root)")
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--for", dest="duration", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds of fault-free traffic before the drill")
    args = parser.parse_args()
    if args.output is None:
        args.output = (os.path.join(tempfile.gettempdir(), "mwrun-drill-report-ssh.png")
                       if args.ssh else str(ROOT / "docs" / "drill-report.png"))
    try:
        record, load_before, load_after = in_home(args)
    except KeyboardInterrupt:
        raise SystemExit("interrupted; the run was stopped") from None
    show(args, record, load_before, load_after)


def in_home(args) -> tuple[dict, tuple, tuple]:
    """The drill under a fresh MWRUN_HOME (and, with --ssh, a fresh ssh host), both
    removed at the end whatever happens."""
    with tempfile.TemporaryDirectory(prefix="mwrun-drill-") as home:
        if args.ssh:
            from tests.integration import testbed  # the project's test bed: netns + sshd
            if testbed.missing():
                raise SystemExit(f"--ssh: {testbed.missing()}")
            with testbed.nodes(Path(home) / "nodes", [True]) as nodes:
                return drill(args, nodes, home)
        return drill(args, [], home)


def show(args, record: dict, load_before: tuple, load_after: tuple) -> None:
    # One outage per fault that found its world up: a fault that hit a world still
    # down joined its outage (the drill's "again").
    outages = [f for w in record["worlds"].values() for f in w["list"]
               if f["downtime"] is not None and not f.get("again")]
    downs = sorted(f["downtime"] for f in outages)
    faults = sum(w["faults"] for w in record["worlds"].values())
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores,"
          f" load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
          f" ({'2 workers on an ssh host' if args.ssh else 'one host'})")
    took = record["ended"] - record["started"]  # shorter than --for after a Ctrl-C
    print(f"{faults} faults in {took:.0f} s (--every {args.every:g}, seed"
          f" {args.seed}); outages {len(outages)}; not recovered:"
          f" {len(record['not_recovered'])}")
    for name in record["not_recovered"]:
        print(f"  not recovered: {name}")
    if downs:
        print(f"downtime (t_fault -> first call, else re-form): median"
              f" {statistics.median(downs):.3f} s, max {downs[-1]:.3f} s")
    for phase, goal in (("survivors_told", "<= 50 ms"), ("reformed", "median <= 0.3 s")):
        took = sorted(f["phases"][phase] - f["phases"]["t_fault"] for f in outages
                      if f["phases"] and f["phases"].get(phase) is not None
                      and f["phases"].get("t_fault") is not None)
        if took:
            print(f"kill -> {phase}: median {statistics.median(took) * 1000:.1f} ms, max"
                  f" {took[-1] * 1000:.1f} ms over {len(took)} outages (goal {goal})")
    print(f"pace kept: faulted worlds {_pct(record['kept_faulted'])} (goal >= 97.7 %),"
          f" others during each fault {_pct(record['kept_others'])} (goal >= 99 %)")
    for name, w in record["worlds"].items():
        print(f"  {name}: {w['faults']} fault(s), kept {_pct(w['kept'])}, down median"
              f" {_secs(w['downtime_median'])} max {_secs(w['downtime_max'])}")
    print(f"picture: {args.output}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


if __name__ == "__main__":
    main()
