"""Post-mortem bundles, measured (issue 28's figures; head/postmortem.py).

    python bench/postmortem.py                      # ~5 min: 10 drills of each kind
    python bench/postmortem.py --drills 100 --kills 20    # ~65 min
    python bench/postmortem.py --ssh --skip onoff,stacks  # as root: b on an ssh host

1. Declared -> complete bundle on disk, per drill kind, from the ``took_s`` the head
   writes in each ``postmortem`` record (its monotonic clock, from the event that
   declared the hang or the break to the bundle written). A world of three
   (tests/bin/stuck.py, all_reduce in a loop), ``hang_timeout: 4``; the kinds:
   ``stop`` (SIGSTOP: declared hung, captured, then killed), ``gil`` (a C call
   holding the GIL: the same, its library cannot answer), ``sleep`` (asleep in
   Python while its peers' call times out: a break), ``kill`` (SIGKILL: a break whose
   survivors are captured beside the restart). Goal: <= 3 s in every drill.
   ``--ssh``: the same drills with b on an ssh host (a network namespace of this
   machine with a real sshd, tests/integration/testbed.py): its agent reads it with
   py-spy and its library answers through the agent's relay.
2. Kill -> survivors_told and kill -> reformed with bundles on and off
   (``MWRUN_POSTMORTEM=off``), from the head's own ``fault`` records, the two
   alternated in blocks in one invocation. Goal: unchanged.
3. ``mwrun stacks`` on 64 members (32 worlds of two, each member idle in
   ``time.sleep``): the command's wall time, 5 times. Goal: <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import NotStarted, read_doc, run_over, wait_for  # noqa: E402
from bench.hosts import hosts_yaml  # noqa: E402
from mwrun.host import spy  # noqa: E402
from tests.integration import testbed  # noqa: E402

STUCK = ROOT / "tests" / "bin" / "stuck.py"
IDLE = Path(__file__).resolve().parent / "bin" / "sleeping_member.py"
KINDS = ("stop", "gil", "sleep", "kill")


class Job:
    def __init__(self, work: Path, name: str, topology: str, env: dict | None = None):
        self.home, self.run = work / f"home-{name}", name
        self.env = {**os.environ, "MWRUN_HOME": str(self.home), "NO_COLOR": "1", **(env or {})}
        path = work / f"{name}.yaml"
        path.write_text(topology)
        self.mwrun("launch", str(path), "--detach", "--run-id", name)

    def mwrun(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([PY, "-m", "mwrun", *args], env=self.env, capture_output=True,
                              text=True, timeout=600)
        if check and done.returncode != 0:
            raise SystemExit(f"mwrun {' '.join(args)}: {done.stderr.strip()}")
        return done

    def records(self, kind: str) -> list[dict]:
        path = self.home / "runs" / self.run / "history.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [r for r in map(json.loads, lines) if r.get("event") == kind]

    def wait(self, what: str, found, timeout: float = 120.0):
        """``found()``'s first value; at once, saying why, when the run is over."""
        try:
            return wait_for(found, self.over, timeout, f"{self.run}: {what}")
        except NotStarted as exc:
            shown = self.mwrun("status", self.run, check=False)
            raise NotStarted(f"{exc}; status:\n{shown.stdout}{shown.stderr}"
                             f"{self.keep()}") from None

    def over(self) -> str | None:
        return run_over(read_doc(self.home / "runs" / self.run / "state.json"))

    def keep(self) -> str:
        """What a failed wait leaves to read: every process's stacks as py-spy sees
        them now, and the run's folder, copied out of the bench's temporary one."""
        kept = Path(tempfile.mkdtemp(prefix=f"mwrun-bench-pm-{self.run}-failed-"))
        doc = self.mwrun("status", self.run, "--json", check=False)
        status = json.loads(doc.stdout) if doc.returncode == 0 else {"processes": []}
        pids = [(p["name"], p["pid"]) for p in status["processes"] if p.get("pid")]
        pids += [("supervisor", status.get("supervisor_pid"))] + \
            [(f"agent of {h['name']}", h.get("agent_pid")) for h in status.get("hosts", [])]
        pids = [(name, pid) for name, pid in pids if pid]
        with open(kept / "stacks.txt", "w") as out:
            for name, pid in pids:
                out.write(f"== {name} (pid {pid})\n")
                out.flush()
                subprocess.run([spy.find()[0] or "py-spy", "dump", "--native", "--pid",
                                str(pid)],
                               stdout=out, stderr=subprocess.STDOUT, timeout=60,
                               check=False)

        def special(folder, names):  # sockets and pipes: nothing to read after
            return [n for n in names if not os.path.isdir(os.path.join(folder, n))
                    and not os.path.isfile(os.path.join(folder, n))]
        # the bench's folder whole: the run's, and each ssh host's agent's
        shutil.copytree(self.home.parent, kept / "work", symlinks=True, ignore=special)
        return f"\nkept: {kept} (py-spy's stacks of every process; the bench's folder)"

    def serving(self) -> None:
        def ok():
            done = self.mwrun("status", self.run, "--json", check=False)
            if done.returncode != 0:
                return False
            doc = json.loads(done.stdout)
            return doc["worlds"] and all(w["state"] == "healthy" for w in doc["worlds"]) and \
                all(p["state"] == "running" for p in doc["processes"])
        self.wait("every world healthy", ok)

    def stop(self) -> None:
        self.mwrun("stop", self.run, check=False)


def world_of_three(cue: Path, hosts: str = "") -> str:
    """``hosts``: a hosts block naming node1, where b then runs (a and c on the head)."""
    stuck = f"[{PY}, {STUCK}"
    where, here = (", host: node1", ", host: head") if hosts else ("", "")
    return f"""\
version: 1
name: pm
hang_timeout: 4
{hosts}processes:
  a: {{cmd: {stuck}], restart: on-failure, max_restarts: 1000{here}}}
  b: {{cmd: {stuck}, {cue}], restart: on-failure, max_restarts: 1000{where}}}
  c: {{cmd: {stuck}], restart: on-failure, max_restarts: 1000{here}}}
worlds:
  world1: {{members: [a, b, c]}}
"""


def drill(job: Job, kind: str, cue: Path) -> float:
    """One drill of ``kind``; the seconds from declared to its bundle on disk."""
    before = len(job.records("postmortem"))
    if kind in ("stop", "kill"):
        job.mwrun("kill-world", "world1", job.run, "--rank", "1", "--signal", kind.upper())
    else:
        cue.write_text(kind)
    hung = kind in ("stop", "gil")  # declared hung: its own bundle; else the break's

    def bundle():
        new = job.records("postmortem")[before:]
        return next((r for r in new if (r["hung"] is not None) == hung), None)
    found = job.wait(f"the {kind} drill's bundle", bundle)
    if kind == "sleep":  # asleep for good: ended by hand, so the world re-forms
        job.wait("the break's fault", lambda: len(job.records("postmortem")) > before)
        job.mwrun("kill-world", "world1", job.run, "--rank", "1", "--signal", "KILL")
    job.serving()
    return found["took_s"]


def bundles(work: Path, kinds: list[str], drills: int,
            hosts: str = "") -> dict[str, list[float]]:
    cue = work / "cue"  # the namespaces share this machine's files: b reads it there too
    job = Job(work, "bundles", world_of_three(cue, hosts))
    took: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        job.serving()
        for i in range(drills):
            for kind in kinds:
                took[kind].append(drill(job, kind, cue))
            print(f"  drills {i + 1}/{drills}: " + ", ".join(
                f"{k} {took[k][-1]:.3f}s" for k in kinds), flush=True)
    finally:
        job.stop()
    return took


def on_off(work: Path, kills: int, blocks: int = 2) -> dict[str, dict[str, list[float]]]:
    """Kill -> survivors_told and -> reformed per fault, bundles on and off."""
    found: dict[str, dict[str, list[float]]] = {
        s: {"survivors_told": [], "reformed": []} for s in ("on", "off")}
    for block in range(blocks):
        for setting in ("on", "off"):
            job = Job(work, f"{setting}{block}", world_of_three(work / "never"),
                      {"MWRUN_POSTMORTEM": setting})
            try:
                job.serving()
                for kill in range(kills):
                    job.mwrun("kill-world", "world1", job.run, "--rank", "1")
                    job.wait("the fault's record",
                             lambda j=job, k=kill: len(j.records("fault")) > k)
                    job.serving()
                for fault in job.records("fault"):
                    p = fault["phases"]
                    for phase in ("survivors_told", "reformed"):
                        if p.get(phase) is not None and p.get("t_fault") is not None:
                            found[setting][phase].append(p[phase] - p["t_fault"])
            finally:
                job.stop()
    return found


def stacks_on_64(work: Path, looks: int = 5) -> tuple[list[float], int]:
    pairs = "\n".join(f"  pair{i}: {{members: [m-{2 * i}, m-{2 * i + 1}]}}" for i in range(32))
    job = Job(work, "wide", f"""\
version: 1
name: wide
processes:
  m: {{cmd: [{PY}, {IDLE}], replicas: 64}}
worlds:
{pairs}
""")
    times, answered = [], 0
    try:
        job.serving()
        for _ in range(looks):
            t0 = time.monotonic()
            done = job.mwrun("stacks", job.run, "--json")
            times.append(time.monotonic() - t0)
            answered = sum(m["answered"] for m in json.loads(done.stdout)["members"])
    finally:
        job.stop()
    return times, answered


def spread(values: list[float], unit: float = 1.0, suffix: str = "s") -> str:
    if not values:
        return "none"
    return (f"median {statistics.median(values) * unit:.3f} {suffix},"
            f" max {max(values) * unit:.3f} {suffix} (n={len(values)})")


def show(title: str, took: dict[str, list[float]]) -> None:
    print(title)
    for kind, values in took.items():
        within = sum(v <= 3.0 for v in values)
        print(f"  {kind:6} {spread(values)}; within 3 s: {within} of {len(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drills", type=int, default=10, help="drills of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--kills", type=int, default=10, help="kills per on/off block")
    parser.add_argument("--skip", default="", help="parts to skip: bundles,onoff,stacks")
    parser.add_argument("--ssh", action="store_true",
                        help="the bundle drills with b on an ssh host (as root)")
    args = parser.parse_args()
    if args.ssh and testbed.missing():
        raise SystemExit(f"cannot make an ssh host here: {testbed.missing()}")
    skip = set(filter(None, args.skip.split(",")))
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.node()};"
          f" {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mwrun-bench-pm-") as tmp:
        work = Path(tmp)
        if "bundles" not in skip and args.ssh:
            with testbed.nodes(work, [True]) as nodes:
                took = bundles(work, args.kinds.split(","), args.drills,
                               hosts_yaml(nodes[0].head_addr, nodes))
            show("declared -> complete bundle on disk, b on an ssh host (goal <= 3 s):", took)
        elif "bundles" not in skip:
            took = bundles(work, args.kinds.split(","), args.drills)
            show("declared -> complete bundle on disk (goal <= 3 s in every drill):", took)
        if "onoff" not in skip:
            found = on_off(work, args.kills)
            print("with bundles on / off (MWRUN_POSTMORTEM=off), kill -> phase:")
            for phase in ("survivors_told", "reformed"):
                on, off = found["on"][phase], found["off"][phase]
                ratio = statistics.median(on) / statistics.median(off) if on and off else None
                print(f"  {phase:15} on {spread(on, 1000, 'ms')}; off {spread(off, 1000, 'ms')}"
                      + (f"; on/off {ratio:.2f}x" if ratio else ""))
        if "stacks" not in skip:
            times, answered = stacks_on_64(work)
            print(f"mwrun stacks on 64 members (goal <= 2 s): {spread(times)};"
                  f" {answered} of 64 answered")
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
