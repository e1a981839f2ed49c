"""The head's side of a remote host: one agent, reached over ssh, spoken to in frames.

``AgentLink`` starts the agent (``ssh ... PYTHON -m mwrun agent``), reads its frames and
stderr, and writes requests; ``connect_all`` brings every remote host's agent up in
parallel before anything is planned onto it, and turns each way it can fail (host
unreachable, authentication refused, python or mwrun missing, another mwrun version)
into one line naming the host and the missing piece.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import IO

from mwrun import __version__
from mwrun.errors import RunError, TopologyError
from mwrun.host import frames
from mwrun.host.door import door_path
from mwrun.host.frames import Kind
from mwrun.plan.inventory import HostInventory
from mwrun.schema import HostState as H

CONNECT_TIMEOUT = 30.0  # seconds for ssh and the agent's hello, per host (in parallel)
READ_SLICE = 1 << 20
CLOSE_WAIT = 3.0  # seconds an agent told to stop has to end its ssh session


def ssh_argv(target: str, options: tuple[str, ...], python: str, host: str,
             control: str, grace: float = 0.0) -> list[str]:
    """ssh [user@]host[:port] running the agent; never prompts (BatchMode). ``grace``:
    the run's head_grace, how long that agent goes on once the head is gone."""
    return ssh_running(target, options, [python, "-m", "mwrun", "agent", "--host", host,
                                         "--control", control, "--head-grace", f"{grace:g}"])


def ssh_running(target: str, options: tuple[str, ...], words: list[str]) -> list[str]:
    """ssh [user@]host[:port] running ``words`` there (quoted for its shell)."""
    user_host, port = target, None
    if target.count(":") == 1:
        user_host, _, port = target.partition(":")
    remote = " ".join(shlex.quote(a) for a in words)
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2"]
    if port:
        argv += ["-p", port]
    return [*argv, *options, user_host, "--", f"exec {remote}"]


class Ssh:
    """A started link's ssh session: its process and its three pipes."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None):
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True, env=env)
        assert popen.stdin is not None and popen.stdout is not None \
            and popen.stderr is not None, "all three are pipes (PIPE above)"
        self.popen = popen
        self.stdin: IO[bytes] = popen.stdin
        self.stdout: IO[bytes] = popen.stdout
        self.stderr: IO[bytes] = popen.stderr

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)


class AgentLink:
    def __init__(self, name: str, argv: list[str], python: str, local: bool = False,
                 env: dict[str, str] | None = None, again: AgentLink | None = None):
        self.name = name
        self.argv = argv
        # How the host is reached again once lost, where that is not this link's own
        # way (an adopting head's, through a door): as at launch, a fresh agent.
        self.again = again
        self.env = env  # the agent's environment (the run's secret: never in its argv)
        self.python = python
        self.local = local  # the head's own machine's agent, started directly (no ssh)
        self.state = H.CONNECTING
        self.hello: dict | None = None
        self.decoder = frames.Decoder()
        self.outbox = frames.Outbox()
        self.stderr = b""
        self.sent_at = 0.0  # monotonic, the last frame sent
        self.heard = time.monotonic()
        self.ssh: Ssh | None = None  # once started
        # Frames read before the loop watched the link (an adopting head's handshake
        # reads past its hello): handed to the loop first (links.Links.attach).
        self.unread: list[dict] = []
        self.out_fd = self.err_fd = -1  # once started

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        """ssh, once started."""
        return self.ssh.popen if self.ssh is not None else None

    def start(self) -> None:
        ssh = self.ssh = Ssh(self.argv, self.env)
        self.out_fd, self.err_fd = ssh.stdout.fileno(), ssh.stderr.fileno()
        for fd in (self.out_fd, self.err_fd, ssh.stdin.fileno()):
            os.set_blocking(fd, False)

    def read(self) -> list[dict] | None:
        """Frames that arrived; None once the link is closed."""
        data = frames.received(self.out_fd, READ_SLICE)
        if not data:
            return None if data is None else []
        self.heard = time.monotonic()
        return self.decoder.feed(data)

    def read_stderr(self) -> bool:
        """Collect what ssh or the remote python said; False at its end."""
        try:
            data = os.read(self.err_fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        self.stderr = (self.stderr + data)[-8192:]
        return bool(data)

    def send(self, kind: str, **fields) -> None:
        self.send_all([{"kind": kind, **fields}])

    def send_all(self, messages: list[dict]) -> None:
        """Frames in one write (as much as the pipe takes): the usage probes of a host's
        processes are one write, not one each (each write wakes the reader)."""
        for message in messages:
            self.outbox.put(message)
        self.sent_at = time.monotonic()
        self.flush()

    def flush(self) -> bool:
        ssh = self.ssh
        if ssh is None:  # not started: what was sent waits in the outbox
            return False
        try:
            return self.outbox.flush(lambda data: os.write(ssh.stdin.fileno(), data))
        except (OSError, ValueError):
            return True  # the link is gone; its end of file says so

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Ask the agent to stop, then make sure ssh is gone: after ``wait`` seconds,
        or at once with 0 (a lost link: its agent may be stalled, and the head must not
        be; ssh's end closes the agent's link, and the agent ends what it started).
        ssh's exit is collected later (the head reaps its orphans)."""
        ssh = self.ssh
        if ssh is None or ssh.stdin.closed:
            return
        self.send(Kind.STOP)
        with contextlib.suppress(OSError):
            ssh.stdin.close()
        if wait <= 0:
            ssh.kill()
            self._forget_files()
        else:
            try:
                ssh.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                ssh.kill()
                ssh.popen.wait()
                self._forget_files()
        for pipe in (ssh.stdout, ssh.stderr):
            pipe.close()
        self.state = H.LOST if self.state == H.UP else self.state

    def _forget_files(self) -> None:
        """The sockets of this machine's agent, killed before its own end could remove
        them (a loaded machine's agent can take longer than CLOSE_WAIT), and its folder
        once empty; a remote agent's are swept by the next agent there."""
        control = str((self.hello or {}).get("control") or "") if self.local else ""
        if not control:
            return
        for path in (control, door_path(control)):
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(control))

    def abandon(self) -> None:
        """Let the link go without a word (a new head that could not take the run):
        its agent goes on as it was, never told to stop."""
        if self.ssh is not None:
            self.ssh.kill()
            for pipe in (self.ssh.stdin, self.ssh.stdout, self.ssh.stderr):
                with contextlib.suppress(OSError):
                    pipe.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.ssh.popen.wait(timeout=5)

    def failure(self) -> str:
        """Why the link did not come up, in one line a user can act on."""
        said = self.stderr.decode("utf-8", "replace").strip()
        last = said.splitlines()[-1] if said else ""
        code = self.popen.poll() if self.popen else None
        if "No module named mwrun" in said:
            return f"mwrun is not installed for {self.python} there"
        if "No module named" in said:
            return f"{self.python} there cannot run mwrun: {last}"
        if code == 127 or ("No such file" in said and self.python in said):
            return f"no {self.python} there (set the host's python:)"
        if "Permission denied" in said or "Host key verification failed" in said:
            return f"ssh refused authentication: {last}"
        if code == 255:
            return f"unreachable over ssh: {last or 'ssh exited 255'}"
        if code is None:
            return f"no answer from its agent within {CONNECT_TIMEOUT:.0f} s"
        return f"its agent exited ({code}) before saying hello" + (f": {last}" if last else "")


class SocketLink(AgentLink):
    """An agent's link over one socket: a TCP connection the agent opened to the head
    (Slurm), or its door a new head connected to (``mwrun adopt``)."""

    def __init__(self, name: str, sock: socket.socket, python: str, local: bool = False,
                 again: AgentLink | None = None):
        super().__init__(name, [], python, local, again=again)
        self.sock = sock
        sock.setblocking(False)
        self.out_fd = sock.fileno()

    def start(self) -> None:  # it started itself (srun), or was there (adopted)
        pass

    def read_stderr(self) -> bool:
        return False

    def abandon(self) -> None:
        self.sock.close()

    def flush(self) -> bool:
        try:
            return self.outbox.flush(self.sock.send)
        except OSError:
            return True

    def close(self, wait: float = 0.0) -> None:  # never waits: nothing to wait for
        if self.sock.fileno() < 0:
            return
        self.send(Kind.STOP)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
        self.sock.close()
        self.state = H.LOST if self.state == H.UP else self.state

    def failure(self) -> str:
        return "its agent did not connect"


def check_hello(link: AgentLink, message: dict) -> str | None:
    """None if the agent is one we can talk to, else why not."""
    if message.get("kind") != Kind.HELLO:
        return f"its agent spoke before saying hello ({message.get('kind')!r})"
    if message.get("protocol") != frames.PROTOCOL or message.get("version") != __version__:
        return (f"mwrun {message.get('version')} (protocol {message.get('protocol')}) there,"
                f" {__version__} (protocol {frames.PROTOCOL}) here: install the same version")
    return None


def connect_all(links: list[AgentLink], timeout: float = CONNECT_TIMEOUT,
                progress=None) -> None:
    """Start every agent and wait for each hello, all in parallel; RunError naming every
    host that failed (and nothing left running) otherwise."""
    selector = selectors.DefaultSelector()
    problems: dict[str, str] = {}
    for link in links:
        try:
            link.start()
        except OSError as exc:
            what = "its agent" if link.local else "ssh"
            problems[link.name] = f"cannot run {what}: {exc.strerror or exc}"
            continue
        selector.register(link.out_fd, selectors.EVENT_READ, (link, "out"))
        selector.register(link.err_fd, selectors.EVENT_READ, (link, "err"))
    waiting = {link.name for link in links if link.name not in problems}
    deadline = time.monotonic() + timeout
    told = time.monotonic()
    while waiting and time.monotonic() < deadline:
        if progress and time.monotonic() - told > 2:
            progress(f"waiting for the agent on {', '.join(sorted(waiting))}")
            told = time.monotonic()
        for key, _ in selector.select(min(1.0, deadline - time.monotonic())):
            link, which = key.data
            if link.name not in waiting:
                continue
            if which == "err":
                if not link.read_stderr():
                    selector.unregister(link.err_fd)
                continue
            try:
                messages = link.read()
            except frames.FrameError:
                problems[link.name] = ("its agent's output is not mwrun's (does a login script"
                                       " print to stdout?)")
                waiting.discard(link.name)
                continue
            if messages is None:
                selector.unregister(link.out_fd)
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(link.err_fd)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    link.popen.wait(timeout=5)
                while link.read_stderr():
                    pass
                problems[link.name] = link.failure()
                waiting.discard(link.name)
                continue
            if messages:
                why = check_hello(link, messages[0])
                if why:
                    problems[link.name] = why
                else:
                    link.hello = messages[0]
                    link.state = H.UP
                waiting.discard(link.name)
    selector.close()
    for name in waiting:
        problems[name] = next(lk for lk in links if lk.name == name).failure()
    if problems:
        for link in links:
            link.close()
        raise RunError("cannot start on every host; nothing was started:\n" + "\n".join(
            f"  host {name}: {why}" for name, why in sorted(problems.items())))


def control_path(run_id: str, host: str) -> str:
    """Where a remote host's agent makes its socket (``agent.own_path``: beside this,
    one per agent, said in its hello): short (sun_path), per run and host (namespaces
    on one machine share /tmp); the last agent of the run to end removes the folder."""
    digest = hashlib.sha1(f"{run_id}/{host}".encode()).hexdigest()[:16]
    return f"/tmp/mwrun-agent-{digest}/control.sock"


class Started:
    """A host reached again: a fresh ssh session, or a fresh agent on the head's own
    machine (its hello comes over the link, as at launch), or why none could be
    started."""

    def __init__(self, old: AgentLink):
        way = old.again or old
        self.link: AgentLink | None = AgentLink(way.name, way.argv, way.python, way.local,
                                                way.env)
        self.error: str | None = None
        try:
            self.link.start()
        except OSError as exc:
            what = "its agent" if old.local else "ssh"
            self.link, self.error = None, f"{what} could not be started: {exc}"

    def done(self) -> bool:
        return True


class SshReach:
    """How ssh hosts, and the head's own machine, are reached again after a loss
    (``agents.Reach``): the same command line, at once (it never waits: ssh, or the
    agent, runs on its own)."""

    def again(self, link: AgentLink) -> Started:
        return Started(link)

    def close(self, wait: float = 0.0) -> None:
        """Nothing of its own to end: every ssh session is a link's."""


def links_for(topo, run_id: str) -> dict[str, AgentLink]:
    """An agent link for every host reached over ssh (not yet started)."""
    links = {}
    for name, host in topo.hosts.items():
        if host.ssh is None:
            continue
        python = host.python or sys.executable
        argv = ssh_argv(host.ssh, host.ssh_options, python, name, control_path(run_id, name),
                        topo.head_grace)
        links[name] = AgentLink(name, argv, python)
    return links


def local_links(hosts: list[str], run_id: str, zygote_log: str, grace: float = 0.0,
                away_note: str | None = None, secret: str = "",
                epoch: int = 1, restart: bool = False) -> dict[str, AgentLink]:
    """An agent link for each host that is the head's own machine (not yet started):
    the same agent as over ssh, started directly. Its zygotes write to the run
    folder's ``zygote.log``. It takes the head for gone only when its link closes
    (the head's death closes it at once): a head stopped for a while (Ctrl-Z in its
    terminal) is still there, and its machine's processes go on meanwhile. Once the
    head is gone, ``grace`` seconds (head_grace), and it notes that in ``away_note``;
    meanwhile a head that proves the run's ``secret`` (in its environment) with a
    newer epoch than ``epoch`` can adopt it (host/door.py); with ``restart``
    (head_restart), the agent starts one itself (host/headrestart.py)."""
    extra = ["--head-grace", f"{grace:g}"] + (["--away-note", away_note] if away_note else [])
    first = ["--head-restart"] if restart and away_note else []  # one new head, not one each
    env = {**os.environ, "MWRUN_AGENT_SECRET": secret, "MWRUN_HEAD_EPOCH": str(epoch)} \
        if secret else None
    return {name: AgentLink(name, [sys.executable, "-m", "mwrun", "agent", "--host", name,
                                   "--control", control_path(run_id, name),
                                   "--zygote-log", zygote_log, "--silence", "inf", *extra,
                                   *(first if name == hosts[0] else [])],
                            sys.executable, local=True, env=env)
            for name in hosts}


def reported_inventory(topo, links: dict[str, AgentLink],
                       known: dict[str, HostInventory]) -> dict[str, HostInventory]:
    """What each remote host has, as its agent reported; a stated count more than it
    has is a positioned error."""
    inv, errors = {}, []
    for name, link in links.items():
        assert link.hello is not None, "connected: every link is up, with its hello"
        host, facts = topo.hosts[name], link.hello["inventory"]
        cpus, gpus = tuple(facts["cpus"]), tuple(str(g) for g in facts["gpus"])
        for kind, stated, have in (("gpus", host.gpus, gpus), ("cpus", host.cpus, cpus)):
            if stated is not None and stated > len(have):
                errors.append(host.pos.diagnostic(
                    f"host '{name}': {kind}: {stated}, but {name} reports {len(have)}"))
        inv[name] = HostInventory(known[name].local, cpus[:host.cpus] if host.cpus else cpus,
                                  gpus[:host.gpus] if host.gpus is not None else gpus)
    if errors:
        raise TopologyError(errors)
    return inv
