"""Writes what a process can see of how it was started, as JSON, to --out/PROCESS.json."""

import argparse
import json
import os
import random
import signal
import sys

import psutil

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--torch", action="store_true", help="also torch's state")
args = parser.parse_args()

main = sys.modules["__main__"]
me = psutil.Process()
fields = {
    "name": __name__,
    "main_globals": sorted(k for k in vars(main) if k.startswith("__")),
    "file": globals().get("__file__"),
    "loader": type(globals().get("__loader__")).__name__,
    "spec": repr(globals().get("__spec__"))[:60],
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "path": sys.path,
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "proc_environ": me.environ(),
    "proc_cmdline": me.cmdline(),
    "affinity": sorted(os.sched_getaffinity(0)),
    "session_leader": os.getsid(0) == os.getpid(),
    "group_leader": os.getpgid(0) == os.getpid(),
    "ppid": os.getppid(),
    "signals": {s.name: repr(signal.getsignal(s)) for s in signal.Signals
                if s not in (signal.SIGKILL, signal.SIGSTOP)},
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "stdout": [sys.stdout.isatty(), sys.stdout.line_buffering, sys.stdout.encoding,
               sys.stdout.errors, sys.stderr.errors],
    "flags": list(sys.flags),
    "random": random.random(),
    "threads": len(os.listdir("/proc/self/task")),
}
if args.torch:
    import torch

    fields.update(torch_rand=torch.rand(3).tolist(), torch_seed=torch.initial_seed(),
                  torch_threads=torch.get_num_threads())
with open(os.path.join(args.out, os.environ["MWRUN_PROCESS"] + ".json"), "w") as out:
    json.dump(fields, out)
