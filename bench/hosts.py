"""What running across hosts costs: launch, failure detection, watching.

    python bench/hosts.py                 # as root: hosts are network namespaces with sshd
    python bench/hosts.py --kills 5 --rounds 1 --watch 10

Hosts are network namespaces of this machine, each with a real sshd (the test bed of
tests/integration/testbed.py), so every byte between head and agent goes through ssh;
they share this machine's cores, so ratios, not absolute times, carry over.

1. Launch to every rank's first all_reduce, N = 8, over head + 2 ssh hosts, against the
   same N on the head alone (goal: <= 1.2x).
2. A worker on an ssh host SIGKILLed -> BrokenWorldError at its peer on the head
   (goal: median <= 50 ms, max <= 250 ms).
3. The agent of that host SIGKILLed -> the world broken at the peer (goal: <= 1 s).
   Also: worker SIGKILLed -> the world working again with its restart, forked warm from
   that host's zygote against started cold (``preload: false``).
4. CPU of an agent watching 64 idle processes, and of the head with 3 hosts x 32
   (goal: <= 1 % of a core each).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.common import Launched  # noqa: E402
from bench.supervisor import cpu_percent  # noqa: E402
from tests.integration import testbed  # noqa: E402

PY = sys.executable


def hosts_yaml(head: str, nodes) -> str:
    lines = ["hosts:", f"  head: {{addr: {head}}}"]
    for i, node in enumerate(nodes, 1):
        lines.append(f"  node{i}: {{addr: {node.addr}, ssh: '{node.ssh}',"
                     f" ssh_options: {json.dumps(node.ssh_options())}}}")
    return "\n".join(lines) + "\n"


def launch_seconds(work: Path, head: str, nodes, spread: bool, n: int = 8) -> float:
    hosts = ["head"] + [f"node{i + 1}" for i in range(len(nodes))] if spread else ["head"]
    procs = [f"  r{i}: {{cmd: [{PY}, {HERE / 'bin' / 'first_collective.py'}],"
             f" host: {hosts[i * len(hosts) // n]}}}" for i in range(n)]
    topology = work / f"launch-{spread}.yaml"
    topology.write_text("version: 1\nname: launch\ntimeout: 60\n" + hosts_yaml(head, nodes)
                        + "processes:\n" + "\n".join(procs) + "\nworlds:\n  w: {members: ["
                        + ", ".join(f"r{i}" for i in range(n)) + "]}\n")
    start = time.time()
    job = Launched(topology, work / f"home-{time.monotonic_ns()}")
    try:
        return max(job.expect(f"r{i}", "first", 180)["t"] for i in range(n)) - start
    finally:
        job.popen.wait(timeout=120)


def drill(work: Path, head: str, nodes, kills: int, preload: str = "[torch]",
          agent_kills_wanted: int = 3) -> tuple[list[float], list[float], list[float]]:
    """(worker kill -> break at its peer, worker kill -> world working again with its
    restart, agent kill -> break), each in seconds."""
    topology = work / f"drill-{preload}.yaml"
    topology.write_text(f"""\
version: 1
name: drill
timeout: 30
preload: {preload}
{hosts_yaml(head, nodes)}processes:
  hub: {{cmd: [{PY}, {HERE / 'bin' / 'drill_hub.py'}], host: head}}
  member:
    cmd: [{PY}, {HERE / 'bin' / 'drill_member.py'}]
    host: node1
    restart: on-failure
    max_restarts: {kills + 10}
    restart_backoff: 0
worlds:
  w: {{members: [hub, member]}}
""")
    home = work / f"home-drill-{time.monotonic_ns()}"
    job = Launched(topology, home)
    worker_kills, recoveries, agent_kills = [], [], []
    try:
        job.expect("hub", "ready", 120)
        for _ in range(kills):
            pid = job.expect("member", "member", 120)["pid"]
            time.sleep(0.3)  # the hub is blocked in its recv by now
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            worker_kills.append(job.expect("hub", "broken")["t"] - killed)
            recoveries.append(job.expect("hub", "ready", 120)["t"] - killed)
        for _ in range(agent_kills_wanted):
            job.expect("member", "member", 120)
            time.sleep(0.3)
            state = json.loads(next((home / "runs").glob("*/state.json")).read_text())
            agent = next(h["agent_pid"] for h in state["hosts"] if h["name"] == "node1")
            killed = time.monotonic()
            os.kill(agent, signal.SIGKILL)
            agent_kills.append(job.expect("hub", "broken")["t"] - killed)
            job.expect("hub", "ready", 180)  # the host is reached again, the member restarts
    finally:
        job.stop()
    return worker_kills, recoveries, agent_kills


def idle(work: Path, head: str, nodes, per_host: int,
         on_head: bool) -> tuple[Launched, dict]:
    """The idle job, launched, and its state once every world is healthy."""
    hosts = (["head"] if on_head else []) + [f"node{i + 1}" for i in range(len(nodes))]
    procs, worlds = [], []
    for h in hosts:
        for i in range(per_host):
            procs.append(f"  {h}-{i}: {{cmd: [{PY}, {HERE / 'bin' / 'idle_member.py'}],"
                         f" host: {h}}}")
        for i in range(0, per_host, 2):
            worlds.append(f"  {h}w{i}: {{members: [{h}-{i}, {h}-{i + 1}]}}")
    topology = work / f"idle-{on_head}.yaml"
    topology.write_text("version: 1\nname: idle\n" + hosts_yaml(head, nodes) + "processes:\n"
                        + "\n".join(procs) + "\nworlds:\n" + "\n".join(worlds) + "\n")
    home = work / f"home-idle-{on_head}"
    job = Launched(topology, home)
    try:
        return job, job.healthy(180)
    except SystemExit:
        job.stop()
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3, help="launches of each kind")
    parser.add_argument("--watch", type=float, default=20.0)
    parser.add_argument("--only", choices=("launch", "kills", "watch"),
                        help="run one part alone")
    args = parser.parse_args()
    if testbed.missing():
        raise SystemExit(f"cannot make hosts here: {testbed.missing()}")
    with tempfile.TemporaryDirectory(prefix="mwrun-hosts-") as tmp:
        work = Path(tmp)
        with testbed.nodes(work, [True, True]) as nodes:
            head = nodes[0].head_addr
            if args.only in (None, "launch"):
                one, three = [], []
                for _ in range(args.rounds):  # interleaved, so load drifts hit both alike
                    one.append(launch_seconds(work, head, nodes, spread=False))
                    three.append(launch_seconds(work, head, nodes, spread=True))
                report_launch(one, three)
            if args.only in (None, "kills"):
                worker_kills, warm, agent_kills = drill(work, head, nodes, args.kills)
                cold = drill(work, head, nodes, max(args.kills // 3, 3), "false", 0)[1]
                report_kills(worker_kills, agent_kills, warm, cold)
            if args.only in (None, "watch"):
                report_watch(*watch(work, head, nodes, args.watch))


def watch(work: Path, head: str, nodes, seconds: float) -> tuple[float, float]:
    """CPU of one agent with 64 idle processes, then of the head with 3 hosts x 32."""
    job, doc = idle(work, head, nodes[:1], 64, on_head=False)
    try:
        time.sleep(2.0)
        agent = next(h["agent_pid"] for h in doc["hosts"] if h["name"] == "node1")
        agent_cpu = cpu_percent(agent, seconds)
    finally:
        job.stop()
    job, _ = idle(work, head, nodes, 32, on_head=True)
    try:
        time.sleep(2.0)
        head_cpu = cpu_percent(job.popen.pid, seconds)
    finally:
        job.stop()
    return agent_cpu, head_cpu


def report_launch(one: list[float], three: list[float]) -> None:
    print(f"launch to every rank's first all_reduce, N=8 (median of {len(one)}):")
    print(f"  head alone {statistics.median(one):5.2f} s   head + 2 ssh hosts"
          f" {statistics.median(three):5.2f} s   ratio"
          f" {statistics.median(three) / statistics.median(one):.2f} (goal <= 1.2)")


def report_kills(worker_kills: list[float], agent_kills: list[float], warm: list[float],
                 cold: list[float]) -> None:
    ms = [k * 1000 for k in worker_kills]
    print(f"{len(ms)} SIGKILLs of a worker on an ssh host, BrokenWorldError at its peer:"
          f" median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms"
          " (goal: median <= 50, max <= 250)")
    print(f"{len(agent_kills)} SIGKILLs of that host's agent, world broken at the peer:"
          f" {', '.join(f'{k * 1000:.0f} ms' for k in agent_kills)} (goal: <= 1 s)")
    print(f"worker on an ssh host SIGKILLed -> its world working again: warm median"
          f" {statistics.median(warm):.2f} s, max {max(warm):.2f} s ({len(warm)} kills);"
          f" cold median {statistics.median(cold):.2f} s ({len(cold)});"
          f" warm/cold {statistics.median(warm) / statistics.median(cold):.2f}")


def report_watch(agent_cpu: float, head_cpu: float) -> None:
    print(f"agent watching 64 idle processes: {agent_cpu:.2f} % of a core (goal <= 1 %)")
    print(f"head with 3 hosts x 32 idle processes: {head_cpu:.2f} % of a core (goal <= 1 %)")


if __name__ == "__main__":
    main()
