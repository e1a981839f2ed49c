"""The head and its agents watching idle processes across ssh hosts: the CPU each
uses, for issue 18's "head + 2 ssh hosts (netns, real sshd), 64 processes each".

    sudo python bench/ssh_idle.py [--per-host 64] [--watch 20]

Hosts are network namespaces of this machine with a real sshd each (the test bed,
tests/integration/testbed.py; root needed); the processes are bench/hosts.py's idle
members (the library's protocol without torch), as many on the head as on each host.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import psutil  # noqa: E402

from bench.hosts import idle  # noqa: E402 - the bench's own helpers
from tests.integration import testbed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-host", type=int, default=64)
    parser.add_argument("--watch", type=float, default=20.0)
    args = parser.parse_args()
    if testbed.missing():
        raise SystemExit(testbed.missing())
    with tempfile.TemporaryDirectory(prefix="mwrun-ssh-idle-") as tmp:
        work = Path(tmp)
        with testbed.nodes(work, [True, True]) as nodes:
            began = time.monotonic()
            job, doc = idle(work, nodes[0].head_addr, nodes, args.per_host, on_head=True)
            print(f"{3 * args.per_host} idle processes (head + 2 ssh hosts x {args.per_host})"
                  f" healthy after {time.monotonic() - began:.1f} s", flush=True)
            try:
                time.sleep(3.0)  # past the bring-up's last writes
                pids = {"head": job.popen.pid}
                pids.update({h["name"]: h["agent_pid"] for h in doc["hosts"]
                             if h.get("agent_pid")})
                procs = {name: psutil.Process(pid) for name, pid in pids.items()}
                before = {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
                start = time.monotonic()
                time.sleep(args.watch)
                took = time.monotonic() - start
                for name, proc in procs.items():
                    used = 100 * (sum(proc.cpu_times()[:2]) - before[name]) / took
                    print(f"  {name} (pid {pids[name]}): {used:.2f} % of a core over"
                          f" {took:.0f} s (goal <= 1 %)", flush=True)
            finally:
                job.stop()


if __name__ == "__main__":
    main()
