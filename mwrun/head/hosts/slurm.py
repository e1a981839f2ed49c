"""``launcher: slurm``: inside an allocation, one ``srun`` starts an agent on every node.

The topology's hosts take the allocation's nodes in file order (a host's ``addr``
defaults to its node's address). The agents connect back to the head over TCP and
answer a challenge with an HMAC of the run's secret, which reaches them in srun's
environment (never in argv, never logged); a connection that does not prove it is
dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import selectors
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time

from mwrun.errors import RunError, TopologyError, UsageError
from mwrun.head.hosts.remote import (
    CONNECT_TIMEOUT,
    AgentLink,
    SocketLink,
    check_hello,
    control_path,
)
from mwrun.host import frames
from mwrun.host.frames import Kind
from mwrun.schema import HostState as H


def allocation(environ=os.environ) -> list[str]:
    """The allocation's nodes, in Slurm's order; UsageError outside an allocation."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise UsageError("launcher: slurm needs a Slurm allocation (SLURM_JOB_NODELIST is not"
                         " set): run mwrun launch inside salloc or an sbatch script")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise RunError(f"cannot read the allocation's nodes with scontrol: {exc}") from None
    return out.split()


def node_addr(node: str) -> str:
    """The address Slurm reaches a node on (its NodeAddr), else what its name resolves to."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True,
                             text=True, timeout=30).stdout
        for field in out.split():
            if field.startswith("NodeAddr="):
                return field.partition("=")[2]
    return socket.gethostbyname(node)


def assign(topo, nodes: list[str], addr_of=node_addr):
    """(topology with every host's addr filled in, host -> node); the hosts take the
    nodes in file order. Too few nodes is a positioned error."""
    hosts = list(topo.hosts.values())
    if len(nodes) < len(hosts):
        raise TopologyError([topo.pos.get("hosts", hosts[0].pos).diagnostic(
            f"launcher: slurm: {len(hosts)} hosts, but the allocation has {len(nodes)}"
            f" node{'s' * (len(nodes) != 1)} ({', '.join(nodes)}); ask salloc for"
            f" --nodes={len(hosts)}")])
    filled, mapping = {}, {}
    for host, node in zip(hosts, nodes, strict=False):
        filled[host.name] = dataclasses.replace(host, addr=host.addr or addr_of(node))
        mapping[host.name] = node
    return dataclasses.replace(topo, hosts=filled), mapping


def head_addr(towards: str) -> str:
    """This machine's address on the way to ``towards`` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET6 if ":" in towards else socket.AF_INET,
                       socket.SOCK_DGRAM) as probe:
        probe.connect((towards, 9))
        return probe.getsockname()[0]


def job_id(environ=os.environ) -> str | None:
    """The allocation's job id (a new head names it to srun: it may run outside)."""
    return environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")


def connect(topo, mapping: dict[str, str], run_id: str, progress=None,
            timeout: float = CONNECT_TIMEOUT, started=None, jobid: str | None = None,
            ) -> tuple[dict[str, SocketLink], subprocess.Popen]:
    """One srun for every node (in job ``jobid``, else the allocation we run in); each
    agent connects back and proves the secret. ``started(srun)`` is told of the srun as
    soon as it runs (so it can be cut short)."""
    hosts = list(mapping)
    first = topo.hosts[hosts[0]]
    listener = socket.create_server((head_addr(first.addr), 0))
    addr, port = listener.getsockname()[:2]
    secret = secrets.token_hex(32)
    python = first.python or sys.executable
    nodes = [mapping[h] for h in hosts]
    argv = ["srun", *([f"--jobid={jobid}"] if jobid else []), f"--nodes={len(nodes)}",
            "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", "--kill-on-bad-exit=0",
            "--overlap", python, "-m", "mwrun", "agent", "--connect", f"{addr}:{port}",
            "--control", control_path(run_id, "{node}"), "--head-grace", f"{topo.head_grace:g}"]
    # srun's stderr (and its agents', forwarded) in a file of its own, never a pipe to
    # this head: a head that dies must not take srun with it (a write to a pipe nobody
    # reads ends srun), and a head that lives never has to drain it.
    said = tempfile.TemporaryFile()  # noqa: SIM115 (srun's for its life; end() closes ours)
    try:
        srun = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=said, start_new_session=True,
                                env={**os.environ, "MWRUN_AGENT_SECRET": secret})
    except BaseException:
        said.close()
        raise
    srun.stderr = said  # (read back only if srun ends before its agents connect)
    if started is not None:
        started(srun)
    by_node = {mapping[h]: h for h in hosts}
    try:
        links = _accept(listener, secret, by_node, python, srun, progress, timeout)
    except BaseException:
        end(srun)
        raise
    finally:
        listener.close()
    return links, srun


def _accept(listener, secret, by_node, python, srun, progress, timeout):
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    links: dict[str, SocketLink] = {}
    pending: dict[socket.socket, tuple[str, frames.Decoder, float]] = {}
    deadline = time.monotonic() + timeout
    told = time.monotonic()
    while len(links) < len(by_node) and time.monotonic() < deadline:
        if srun.poll() is not None:
            srun.stderr.seek(0)
            said = srun.stderr.read().decode("utf-8", "replace").strip()
            raise RunError(f"srun ended ({srun.returncode}) before every agent connected"
                           + (f": {said.splitlines()[-1]}" if said else ""))
        if progress and time.monotonic() - told > 2:
            missing = sorted(set(by_node.values()) - set(links))
            progress(f"waiting for the agent on {', '.join(missing)}")
            told = time.monotonic()
        for key, _ in selector.select(0.2):
            if key.data is None:
                sock, _ = listener.accept()
                nonce = secrets.token_hex(16)
                sock.sendall(frames.encode({"kind": Kind.CHALLENGE, "nonce": nonce}))
                sock.setblocking(False)
                pending[sock] = (nonce, frames.Decoder(), time.monotonic() + 10)
                selector.register(sock, selectors.EVENT_READ, sock)
                continue
            sock = key.data
            nonce, decoder, _ = pending[sock]
            try:
                data = sock.recv(65536)
                messages = decoder.feed(data) if data else None
            except (OSError, frames.FrameError):
                messages = None
            if messages == []:
                continue
            selector.unregister(sock)
            del pending[sock]
            hello = messages[0] if messages else None
            # Proof first: nothing of a frame is read before it proves the secret.
            node = hello.get("node") if frames.proven(hello, secret, nonce) else None
            host = by_node.get(node) if isinstance(node, str) else None
            if host is None or host in links:
                sock.close()  # not one of ours: dropped, and nothing said about why
                continue
            link = SocketLink(host, sock, python)
            why = check_hello(link, hello)
            if why:
                sock.close()
                raise RunError(f"host {host}: {why}")
            link.hello, link.state = hello, H.UP
            links[host] = link
        for sock, (_, _, expires) in list(pending.items()):
            if time.monotonic() > expires:
                selector.unregister(sock)
                sock.close()
                del pending[sock]
    selector.close()
    for sock in pending:
        sock.close()
    if len(links) < len(by_node):
        for link in links.values():
            link.close()
        missing = sorted(h for h in by_node.values() if h not in links)
        raise RunError(f"no agent connected from {', '.join(missing)} within {timeout:.0f} s"
                       f" (srun: {shlex.join(srun.args[:4])} ...)")
    return links


def end(srun: subprocess.Popen, wait: float = 0.0) -> None:
    """Let srun end (its agents were told to stop) for ``wait`` seconds, then kill it."""
    if wait:
        with contextlib.suppress(subprocess.TimeoutExpired):
            srun.wait(timeout=wait)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(srun.pid, 9)
    srun.wait()
    if srun.stderr is not None:  # connect's srun has it (its file)
        srun.stderr.close()


class Steps:
    """The job's srun steps: the one that started every agent, and one more for each
    agent started again after its host was lost (Slurm does not restart an agent; the
    head asks for it, as ssh hosts are reached again). A head that adopted the run has
    none of the first (its agents outlive the srun that started them, which is nobody's
    child now: it ends when they do) and names the job to each srun it runs."""

    def __init__(self, sruns: list[subprocess.Popen], topo, mapping: dict[str, str],
                 run_id: str, jobid: str | None = None):
        self.sruns = list(sruns)
        self.topo, self.mapping, self.run_id, self.jobid = topo, mapping, run_id, jobid
        self.lock = threading.Lock()  # sruns grows in a rejoin's thread
        self.closed = False

    def again(self, link: AgentLink) -> Rejoin:
        """A lost host's agent started again by an srun of its own (``agents.Reach``)."""
        return Rejoin(self, link.name)

    def close(self, wait: float = 5.0) -> None:
        with self.lock:
            sruns, self.sruns, self.closed = self.sruns, [], True
        deadline = time.monotonic() + wait
        for srun in sruns:
            end(srun, max(deadline - time.monotonic(), 0.01) if wait else 0.0)


class Rejoin:
    """One host's agent started again by an srun of its own, connected in a thread:
    the head's loop must not wait for Slurm (it asks ``done()`` on every tick)."""

    def __init__(self, steps: Steps, host: str):
        self.host = host
        self.link: SocketLink | None = None  # once done: the new link, checked
        self.error: str | None = None
        self._steps = steps
        self._thread = threading.Thread(target=self._run, name=f"mwrun-rejoin-{host}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        steps = self._steps
        try:
            links, _ = connect(steps.topo, {self.host: steps.mapping[self.host]},
                               steps.run_id, started=self._started, jobid=steps.jobid)
            self.link = links[self.host]
        except Exception as exc:  # said to the user, never a traceback
            self.error = str(exc) or type(exc).__name__

    def _started(self, srun: subprocess.Popen) -> None:
        with self._steps.lock:
            if self._steps.closed:  # the run ended meanwhile: this srun ends at once
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(srun.pid, 9)
            else:
                self._steps.sruns.append(srun)  # ended with the others, whatever happens

    def done(self) -> bool:
        return not self._thread.is_alive()
