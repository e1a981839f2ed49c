"""The zygote: a process that imports the ``preload`` modules once and forks on request.

Started by ``host/warm.py`` as ``python -c BOOT FD MODULES PAD`` with the environment
its children share, it imports the modules, says ``ready`` (with the environment
variables the imports read) on the socket FD (a
SOCK_SEQPACKET pair) and then serves fork requests, one JSON message each, with the
child's stdin and stdout descriptors attached (SCM_RIGHTS).

Each request is checked first: a process that has a second thread or an initialised
CUDA cannot fork safely, so the zygote answers ``cold`` (the supervisor then starts the
process the ordinary way) instead of forking. Otherwise it forks twice: a middle
process forks the children of up to BATCH requests waiting together and exits, so each
child is re-parented to the supervisor (a child subreaper), which waits for it exactly
as for a process it started itself; the zygote never holds a child. The child makes
itself the planned process (child.py) and reports its pid on a pipe only once it leads
its own session, so the supervisor never signals a process group that does not exist
yet. The zygote forks the next middle while the children before set up, and answers
in the order asked (``serve``).
"""

from __future__ import annotations

import array
import collections
import contextlib
import gc
import importlib
import json
import os
import select
import socket
import sys
import threading

MAX_FDS = 4
# Requests one middle process forks the children of. A fork of a zygote that imported
# torch copies the page tables of its ~150 MB of private memory, and a middle's exit
# tears its copy down again: with a middle per child, the zygote's own forks were the
# bring-up's one serial step (14 ms each on a busy 2-core machine, 128 one after
# another). Middles of a few children each fork side by side, and the zygote forks an
# eighth as often (bench/README.rst).
BATCH = 8
# What a process that uses torch under mwrun imports first (``mwrun.init``): about forty
# modules, most of a warm child's own start (20-30 ms of its CPU, more than the fork),
# so a zygote that preloads torch imports them too (see child.py for who keeps them).
LIBRARY = "mwrun.worlds.job"
PAD_VAR = "MWRUN_ZYGOTE_PAD"  # room for the children's environments in /proc/PID/environ


def send(sock: socket.socket, message: dict, fds=()) -> None:
    data = json.dumps(message).encode()
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def receive(sock: socket.socket, flags: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) at end of file.
    ``flags``: MSG_DONTWAIT raises BlockingIOError when none waits."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize),
                                       flags)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)


def _threads(n: int, kind: str) -> str:
    return f"{n} {kind} thread{'s' * (n != 1)} running"


def unsafe_to_fork() -> str | None:
    """Why forking now would give a broken child (threads, CUDA), or None."""
    if threading.active_count() > 1:
        return _threads(threading.active_count() - 1, "Python")
    tasks = len(os.listdir("/proc/self/task"))
    if tasks > 1:
        return _threads(tasks - 1, "native")
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "CUDA is initialised"
    return None


def main() -> None:
    fd, modules = int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m]
    supervisor = os.getppid()  # it started us, and is the subreaper our children come to
    from mwrun.host import child, seeds, title

    # -P (sys.flags.safe_path, new in 3.11) puts no '' for -c first; without it, drop it.
    safe_path = getattr(sys.flags, "safe_path", False)
    base_path = list(sys.path) if safe_path else sys.path[1:]
    os.environ.pop(PAD_VAR, None)
    area = title.Area.of_self()
    if area is not None:
        area.set_title(f"mwrun zygote (preload {','.join(modules) or 'nothing'})")
    sock = socket.socket(fileno=fd)
    before = child.open_fds()
    # numpy's OpenBLAS (imported by torch when numpy is installed) starts a worker
    # thread per core at import, and a process with threads cannot be forked safely:
    # keep its pool to the calling thread here. Children get their own environment, so
    # this setting is the zygote's alone; their numpy BLAS stays single-threaded.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    imprint = seeds.Imprint()
    try:
        for name in modules:
            importlib.import_module(name)
        if "torch" in sys.modules:  # watched as the preload is: what it reads is told
            with contextlib.suppress(Exception):  # a child's own import says why, if so
                importlib.import_module(LIBRARY)
    except BaseException as exc:  # any failure is reported, then we end
        send(sock, {"failed": f"import {name}: {type(exc).__name__}: {exc}"})
        return
    finally:
        imprint.stop()
    # What the imports opened (a log file of logging.basicConfig, say) is the preloaded
    # modules' own: every child keeps those descriptors, as a fresh import would hold them.
    opened = child.open_fds() - before
    if "torch" in sys.modules:  # its store connections never reverse-resolve a peer, in
        from mwrun import lookups  # every warm child too (they inherit the redirect)

        lookups.numeric_only()
    # Objects the children inherit stay out of their garbage collections: a collection
    # writes to every object it visits, which would copy the zygote's pages into each.
    # No collection first: after torch's import it frees a few dozen objects and takes
    # 55 ms, on the bring-up's critical path (every warm start waits for "ready").
    gc.freeze()
    state = child.Fresh.capture(base_path, set(modules), area, opened, imprint)
    # Which variables the imports read: the supervisor forks from here every process
    # whose environment agrees on those (host/warm.py).
    send(sock, {"ready": os.getpid(), "read": sorted(imprint.read), "all": imprint.read_all})
    request = serve(sock, supervisor)
    if request is not None:  # only in a forked child, with the zygote's loop left behind
        child.become(request, state)


class Forking:
    """A fork asked of the zygote, until its answer has gone: the child's report, read
    from its pipe to the end (the child closes it once it is set up), or an answer
    known at once (``cold``)."""

    def __init__(self, read: int = -1, middle: int = 0, answer: dict | None = None):
        self.read, self.middle, self.answer = read, middle, answer
        self.data = b""

    def take(self) -> None:
        """Read what the child wrote; at its end, the answer."""
        chunk = os.read(self.read, 65536)
        if chunk:
            self.data += chunk
            return
        os.close(self.read)
        if self.middle > 0:  # gone already: the child waits for that before it reports
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.middle, 0)
        try:
            self.answer = json.loads(self.data)
        except ValueError:
            self.answer = {"error": "the forked child ended before it was set up"}


def serve(sock: socket.socket, supervisor: int):
    """Answer requests until the supervisor closes the socket; returns the request in
    a forked child, None in the zygote.

    Forks are pipelined: the zygote forks the next child while those before it set
    themselves up (on a busy machine each takes tens of milliseconds to be scheduled,
    and the zygote waiting for each in turn made a bring-up of hundreds of processes a
    chain of those waits). The answers go in the order asked, as the supervisor reads
    them (host/warmstarts.py)."""
    flight: collections.deque[Forking] = collections.deque()
    while True:
        readable, _, _ = select.select(
            [sock.fileno(), *(f.read for f in flight if f.answer is None)], [], [])
        for forking in flight:
            if forking.answer is None and forking.read in readable:
                forking.take()
        _answer(sock, flight)
        if sock.fileno() not in readable:
            continue
        batch = waiting(sock)
        if batch is None:
            return None
        reason = unsafe_to_fork()
        if reason is not None:
            _close(batch)
            flight.extend(Forking(answer={"cold": reason}) for _ in batch)
        else:
            in_child, forked = fork(sock, batch, supervisor)
            if in_child:
                return forked
            flight.extend(forked)
        _answer(sock, flight)


def waiting(sock: socket.socket) -> list[tuple[dict, list[int]]] | None:
    """The requests waiting on a readable socket, up to BATCH; None once it is closed
    (what came before the close is of no use: the supervisor is gone)."""
    batch: list[tuple[dict, list[int]]] = []
    while len(batch) < BATCH:
        try:
            message, fds = receive(sock, socket.MSG_DONTWAIT if batch else 0)
        except BlockingIOError:
            break
        except ConnectionResetError:
            message = None
        if message is None:
            _close(batch)
            return None
        batch.append((message, fds))
    return batch


def _close(batch: list[tuple[dict, list[int]]]) -> None:
    """The zygote's copies of a batch's descriptors: the children (or none) hold them."""
    for _, fds in batch:
        for fd in fds:
            os.close(fd)


def _answer(sock: socket.socket, flight: collections.deque[Forking]) -> None:
    """Send the answers known, in the order asked (a later one waits for those before)."""
    while flight:
        answer = flight[0].answer
        if answer is None:
            return
        flight.popleft()
        send(sock, answer)


def fork(sock: socket.socket, batch: list[tuple[dict, list[int]]], supervisor: int):
    """Fork a middle process that forks a child for each request of ``batch`` and exits;
    (False, a Forking per request, in order) in the zygote, (True, its request with its
    descriptors and the pid pipe) in a child."""
    pipes = [os.pipe() for _ in batch]
    sys.stdout.flush()
    sys.stderr.flush()
    middle = os.fork()
    if middle == 0:
        middle = os.getpid()
        for mine, (message, fds) in enumerate(batch):
            try:
                pid = os.fork()
            except BaseException:  # no child: the zygote reads end of file for the rest
                os._exit(1)
            if pid == 0:
                _keep_only(mine, batch, pipes)
                sock.detach()  # the child closes every inherited descriptor by number
                return True, {**message, "fds": fds, "report": pipes[mine][1],
                              "middle": middle, "supervisor": supervisor}
        os._exit(0)  # the middle process: its exit hands the children to the supervisor
    for _, write in pipes:
        os.close(write)
    _close(batch)
    return False, [Forking(read, middle) for read, _ in pipes]


def _keep_only(mine: int, batch: list[tuple[dict, list[int]]],
               pipes: list[tuple[int, int]]) -> None:
    """In a child: the other children's descriptors closed (a report pipe another child
    held open would keep its end of file from the zygote), and every read end."""
    for i, ((_, fds), (read, write)) in enumerate(zip(batch, pipes, strict=True)):
        os.close(read)
        if i != mine:
            os.close(write)
            for fd in fds:
                os.close(fd)
