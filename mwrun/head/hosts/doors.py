"""A new head at the doors of what keeps a run going (``mwrun adopt``): each agent's
(host/door.py: its challenge answered with the run's secret, bound to the head's
epoch; its hello then says what it runs) and the keeper's (keeper/door.py). Each
answer that is not a yes is a RunError saying why.
"""

from __future__ import annotations

import select
import socket
import sys
import time

from mwrun.errors import RunError
from mwrun.head.hosts import remote
from mwrun.host import frames
from mwrun.host.door import door_path
from mwrun.host.frames import Kind
from mwrun.keeper import wire
from mwrun.schema import HostState as H

KNOCK_WAIT = 15.0  # seconds for an agent to answer at its door (ssh included)


def agent(host: str, control: str, again: remote.AgentLink) -> remote.AgentLink:
    """The link to the agent of ``host``, the head's own machine, at its door
    (host/door.py), not yet proven (``proven``); RunError saying why there is none.
    ``again``: how the host is reached once lost (a fresh agent)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(door_path(control))
    except OSError as exc:
        sock.close()
        raise RunError(f"host {host}'s agent cannot be reached at {door_path(control)}"
                       f" ({exc.strerror or exc}): it has ended, and with it the"
                       " processes there") from None
    return remote.SocketLink(host, sock, sys.executable, local=True, again=again)


def agent_over_ssh(host: str, spec, control: str, again: remote.AgentLink
                   ) -> remote.AgentLink:
    """The link to the agent of ssh host ``host`` (its topology entry ``spec``), not yet
    proven: ``mwrun agent-door`` there joins this ssh session to the agent's door.
    ``again``: how the host is reached once lost (a fresh agent over ssh, as at launch)."""
    python = spec.python or sys.executable
    return _started(remote.AgentLink(host, remote.ssh_running(
        spec.ssh, spec.ssh_options, [python, "-m", "mwrun", "agent-door", door_path(control)]),
        python, again=again), "ssh")


def agent_over_srun(host: str, spec, control: str, node: str, jobid: str
                    ) -> remote.AgentLink:
    """The link to the agent of Slurm host ``host``, not yet proven: ``mwrun agent-door``
    on its ``node``, in a step of its own of job ``jobid`` (``--overlap``: beside the
    agents' step). Slurm authenticates the step; the run's secret, the head. A host lost
    later is reached again by the head's ``slurm.Steps``, as at launch."""
    python = spec.python or sys.executable
    return _started(remote.AgentLink(host, [
        "srun", f"--jobid={jobid}", "--overlap", "--nodes=1", "--ntasks=1",
        f"--nodelist={node}", "--kill-on-bad-exit=0", "--quiet",
        "--unbuffered",  # (else srun holds stdin back until a newline: frames have none)
        python, "-m", "mwrun", "agent-door", door_path(control)], python), "srun")


def _started(link: remote.AgentLink, what: str) -> remote.AgentLink:
    try:
        link.start()
    except OSError as exc:
        raise RunError(f"host {link.name}: cannot run {what}: {exc.strerror or exc}") from None
    return link


def proven(links: dict[str, remote.AgentLink], secret: str, epoch: int) -> None:
    """Every link of ``links`` up once the challenge at its door is answered and its
    agent took this head and said what it runs (what it sent after its hello is the
    loop's first to read); RunError saying why one was not, the links left as they are
    (the caller abandons them). All at once: each challenge is answered as it comes,
    none waiting behind a slower door (an ssh one takes seconds; each agent gives its
    knocking head host/door.py's HANDSHAKE)."""
    deadline = time.monotonic() + KNOCK_WAIT
    waiting = {name: False for name in links}  # host -> its challenge answered
    while waiting:
        for name in [n for n in waiting if links[n].unread]:
            link, frame = links[name], links[name].unread.pop(0)
            if waiting[name]:
                _took(link, frame)
                del waiting[name]
                continue
            nonce = str(frame.get("nonce", ""))
            link.send(Kind.ADOPT, epoch=epoch, proof=frames.adoption_proof(secret, nonce, epoch))
            waiting[name] = True
        pending = [links[n] for n in waiting if not links[n].unread]
        if waiting and len(pending) == len(waiting):
            _heard(pending, deadline)


def _took(link: remote.AgentLink, hello: dict) -> None:
    """``link`` up, given the agent's ``hello`` after the answered challenge."""
    if hello.get("kind") == Kind.REFUSED:
        raise RunError(f"host {link.name}'s agent refused this head: {hello.get('why')}")
    why = remote.check_hello(link, hello)
    if why is not None or not isinstance(hello.get("adopted"), dict):
        raise RunError(f"host {link.name}'s agent: {why or 'it did not say what it runs'}")
    link.hello, link.state = hello, H.UP


def _heard(links: list[remote.AgentLink], deadline: float) -> None:
    """What came on ``links`` by ``deadline`` read into each one's ``unread``."""
    left = deadline - time.monotonic()
    ready = select.select([link.out_fd for link in links], [], [], left)[0] if left > 0 else []
    if not ready:
        raise RunError(f"host {links[0].name}'s agent did not answer at its door within"
                       f" {KNOCK_WAIT:g}s (stopped, or its host stalled?); nothing was"
                       " touched: the job goes on headless, and mwrun adopt can try"
                       " again once it answers")
    for link in (link for link in links if link.out_fd in ready):
        try:
            messages = link.read()
        except frames.FrameError:
            raise RunError(f"host {link.name}: what answered at its agent's door is not"
                           " mwrun's") from None
        if messages is None:
            while link.err_fd >= 0 and link.read_stderr():
                pass
            said = link.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RunError(f"host {link.name}'s agent closed its door without an answer"
                           + (f": {said[-1]}" if said else ""))
        link.unread.extend(messages)


def keeper(path, epoch: int) -> socket.socket:
    """A new head's connection to the keeper that runs (keeper/door.py), for
    ``StoreKeeper(adopted=)``; RunError saying why there is none."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        wire.send(sock, {"adopt": epoch})
    except OSError as exc:
        sock.close()
        raise RunError(f"the worlds' stores' keeper cannot be reached at {path}"
                       f" ({exc.strerror or exc}): it has ended, or the head died before it"
                       " started it (in a launch's first seconds); without it the job's"
                       " worlds cannot be taken back: mwrun stop ends what runs") from None
    return sock
