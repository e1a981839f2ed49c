"""``mwrun agent``: the head's hands on a host.

Started by the head (on its own machine directly, over ssh, or by one ``srun`` under
Slurm), never by users. It
decides nothing: it spawns, pins, watches and signals this host's processes with the
same hands on every host (``host.hands``), streams their output lines and exits back
over the link (``host.frames``), and relays what the library inside each process tells
the supervisor (heartbeats, world events), and what the head tells it back, through a
Unix socket on this host (``host.relay``). Processes with a preload are forked from
this host's own zygotes; so is the worlds' stores' keeper, on the host that keeps them
(``host.asks``: the head asks for it).

When the head goes away (the link closes, or is silent for ``frames.SILENCE``) the
agent keeps everything running for the run's ``head_grace`` (``host.absence``), then,
or at once without one, SIGKILLs every process group it started and exits; a watchdog
does the same if the agent itself is SIGKILLed. Either way nothing of the job outlives
the head by more than that grace and about two seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import socket
import sys
import time

from mwrun.host import breaks, frames
from mwrun.host.absence import Absence
from mwrun.host.asks import Asks
from mwrun.host.door import Door, door_path
from mwrun.host.frames import Kind
from mwrun.host.hands import Hands
from mwrun.host.headlink import HeadLink
from mwrun.host.headrestart import HeadRestart
from mwrun.host.headship import Headship
from mwrun.host.recall import Recall
from mwrun.host.relay import Relay
from mwrun.host.spy import Spies
from mwrun.launchspec import LaunchSpec

SHUTDOWN_WAIT = 2.0  # for the last exits and output once everything was SIGKILLed
OUTBOX_CAP = 4 * 2**20  # queued for the head past this: stop reading children's output
TURN = 1.0  # the longest the loop sleeps: a SIGTERM and orphans are seen within it


class Agent:
    """The agent's link to the head and its loop: frames in (each request done by its
    ``Asks``), what the hands tell back to the head, beats and silence either way; the
    libraries' messages go through its ``Relay``. With the run's ``secret`` a new head
    can take the link over at its door (host/door.py; ``Headship``: which head it serves)."""

    def __init__(self, link_in: int, link_out: int, control_path: str, *,
                 silence: float = frames.SILENCE, clock=time.monotonic, wall=time.time,
                 zygote_log: str | None = None, grace: float = 0.0,
                 away_note: str | None = None, on_away=lambda: None,
                 secret: str = "", epoch: int = 1, restart: HeadRestart | None = None):
        self.control_path = control_path
        self.clock = clock
        self.wall = wall  # this host's wall clock: the times told to the head (frames.py)
        self.selector = selectors.DefaultSelector()
        self.link = HeadLink(link_in, link_out, self.selector, self._from_head, silence,
                             clock)
        self.beat_due = 0.0
        self.done = False
        self.stopping = False  # the job is stopping (the head said): no start waits on
        self.absence = Absence(grace, away_note, clock, wall, restart)  # the head gone, a while
        # The zygotes' log: the run folder's on the head's machine (kept), else beside
        # the socket (removed with it).
        self.keep_log = zygote_log is not None
        self.zygote_log = zygote_log or os.path.splitext(control_path)[0] + "-zygote.log"
        self.relay = Relay(control_path, self.selector, self, clock)
        self.hands = Hands(self.selector, self, self.zygote_log,
                           lambda: self.done or self.stopping, clock)
        self.spies = Spies(self.selector, clock, lambda key, pid, result: self.send(
            Kind.CAPTURED, key=key, pid=pid, result=result))  # read for the head's bundles
        self.breaks = breaks.on(self.hands, self.zygote_log)  # headless, exits break here
        self.recall = Recall()  # what a new head is told runs here
        self.headship = Headship(self.link, self.absence, self.recall, control_path, on_away)
        # Where a new head takes over (mwrun adopt, restart-head), proving the secret.
        self.door = Door(door_path(control_path), secret, self.selector, self._adopted,
                         epoch, clock)
        self.asks = Asks(self.hands, self.spies, self.relay, self, wall, self._stop,
                         lambda: setattr(self, "stopping", True), self.breaks, self.door,
                         self.absence.noted)

    # -- the link ---------------------------------------------------------------------

    def send(self, kind: str, **fields) -> None:
        if kind == Kind.CONTROL and "request" in fields:  # (heartbeats go as "requests")
            self.breaks.heard(fields["request"])  # a generation a member joined
            self.recall.heard(fields["request"])
        if self.absence.away and not self.absence.keep(kind, self.link.size,
                                                      "requests" in fields):
            return  # kept for a new head up to a bound, the rest counted
        self.link.put({"kind": kind, **fields})
        self.beat_due = self.clock() + frames.BEAT  # any frame tells the head we live

    def away(self) -> str | None:
        """Why the head cannot answer now (host.relay.Uplink); None while it is here."""
        return self.absence.why if self.absence.away else None

    def _lost(self, why: str) -> None:
        """The head went (``why``): the job goes on for its grace, else ends now."""
        if not self.headship.lost(why):
            self.done = True

    def _adopted(self, sock: socket.socket, epoch: int) -> None:
        """A head of a newer epoch took the job at the door (``Headship.adopted``)."""
        self.headship.adopted(sock, epoch)
        self.beat_due = self.clock() + frames.BEAT

    def _stop(self) -> None:
        self.done = True  # the head's stop: everything is ended on the way out

    def hello(self, host: str, **more) -> None:
        frame = self.headship.hello(host, **more)
        self.send(frame.pop("kind"), **frame)

    def _from_head(self, _) -> None:
        try:
            messages = self.link.read()
        except frames.FrameError:
            self._lost("its link sent what is not a frame")
            return
        if messages is None:
            self._lost("its link closed")  # its ssh session or socket closed: it died
            return
        for message in messages:
            handler = self.asks.handler(message["kind"])
            if handler is not None:
                handler(message)

    # -- what the hands tell (host.hands.Owner): over the link ----------------------------

    def starting(self, spec: LaunchSpec) -> None:
        self.recall.started(spec)

    def spawned(self, name: str, pid: int, warm: bool) -> None:
        at = self.wall()
        self.recall.spawned(name, pid, warm, at)
        self.send(Kind.SPAWNED, name=name, pid=pid, warm=warm, t=at)

    def failed(self, name: str, error: str) -> None:
        self.recall.ended(name)
        self.send(Kind.FAILED, name=name, error=error)

    def lines(self, name: str, lines: list[str]) -> None:
        self.send(Kind.LINES, name=name, lines=lines)

    def exited(self, name: str, code: int) -> None:
        self.recall.ended(name)
        if self.absence.away and not self.done:  # nobody else would break its worlds
            self.breaks.exited(name, code)  # (an end of the agent's own breaks nothing)
        self.send(Kind.EXITED, name=name, code=code, t=self.wall())

    def say(self, text: str) -> None:
        self.send(Kind.SAY, text=text)

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> int:
        self.link.watch()
        self.relay.listen()
        self.door.listen()
        paused = False
        try:
            while not self.done:
                now = self.clock()
                if self.link.silent(now):
                    self._lost(f"{self.link.silence:g}s of silence")  # take it for gone
                    continue
                if self.absence.over(now):
                    break  # no head came back: everything ends (_shutdown)
                self.absence.tick(now)  # a new head started, when one is due
                self.relay.release(now)  # the heartbeats held, once due
                if now >= self.beat_due and not self.absence.away:
                    self.send(Kind.BEAT)
                self.hands.tick()  # forked children are ours, so are their orphans
                self.spies.tick()
                self.door.tick(now)  # knocks never answered
                self.relay.serve()  # what a library sent beyond one turn's share
                if self.link.size and not self.absence.away:
                    self.link.flush()
                    if self.link.broken:
                        self._lost("its link closed")
                    elif not self.link.size:
                        self.recall.told()  # the head has every exit
                # Headless, nothing is written: what is over the bound is dropped, never
                # a child's output stalled (a job that serves goes on as it was).
                if (self.link.size > OUTBOX_CAP and not self.absence.away) != paused:
                    paused = not paused
                    self.hands.pause_output(paused)
                self._wait(now)
        finally:
            self._shutdown()
        return 0

    def _wait(self, now: float) -> None:
        writing = not self.absence.away and self.link.want_writes(bool(self.link.size))
        due = next_due(self.absence.due(), self.beat_due, self.link.silent_at(),
                       (self.relay.held_until, self.spies.earliest()))
        if self.relay.backlog:
            due = now  # a library's lines wait to be served: look, do not sleep
        for key, _ in self.selector.select(max(0.0, min(due - now, TURN))):
            callback, arg = key.data
            callback(arg)
        if writing:
            self.link.done_writing()

    def _shutdown(self) -> None:
        self.done = True  # (the grace over, too): what ends now is the agent's doing
        self.absence.end(self.clock())  # while the head is away: the run folder's note
        self.door.close()
        self.breaks.end()
        self.spies.close()
        self.hands.pause_output(False)  # the last words are read, whatever the link's pace
        for name, code in self.hands.close(self.clock() + SHUTDOWN_WAIT).items():
            self.exited(name, code)
        self.relay.close()
        if self.absence.away:
            self.asks.end_keeper()  # no head to close it: the stores go with the job
        _leave(self.control_path, None if self.keep_log else self.zygote_log)
        if not self.absence.away:  # else nobody reads the link any more
            self.link.last_words()


def next_due(grace_ends: float | None, beat_due: float, silent_at: float | None,
             others: tuple[float | None, ...]) -> float:
    """When the agent's loop must look next: headless, only the grace's end (no beat is
    due); else its next beat, or the head's silence running out; and whatever else
    (held heartbeats, a capture) is due sooner."""
    if grace_ends is not None:
        due = grace_ends
    else:
        due = beat_due if silent_at is None else min(beat_due, silent_at)
    return min([due, *(other for other in others if other is not None)])


def main(host: str | None, control_path: str, connect: str | None = None,
         silence: float = frames.SILENCE, zygote_log: str | None = None,
         grace: float = 0.0, away_note: str | None = None, head_restart: bool = False
         ) -> int:
    """Serve the link: stdin/stdout (ssh), or a TCP connection to the head (Slurm),
    proven with the run's secret. Our own stray output must never reach the link, so
    stdout becomes stderr for everything but the frames."""
    link_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # The link's fate decides, nothing else. Caught, not ignored: an ignored SIGINT or
    # SIGHUP would be inherited by every process started here (and Python installs no
    # KeyboardInterrupt where SIGINT starts ignored); a handler is reset at exec, and a
    # zygote passes on only what is ignored (host/warm.py).
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _unheeded)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    control_path = own_path(control_path.replace("{node}", node))
    sweep(os.path.dirname(os.path.dirname(control_path)))
    # The run's secret, and the epoch of the head that started us: never handed to a
    # child, never in an argv.
    secret = os.environ.pop("MWRUN_AGENT_SECRET", "")
    epoch = int(os.environ.pop("MWRUN_HEAD_EPOCH", "1") or 1)
    if connect is None:
        restart = HeadRestart(os.path.dirname(away_note)) \
            if head_restart and away_note and secret and grace > 0 else None
        agent = Agent(0, link_out, control_path, silence=silence, zygote_log=zygote_log,
                      grace=grace, away_note=away_note, on_away=_quiet, secret=secret,
                      epoch=epoch, restart=restart)
        _end_on_sigterm(agent)
        agent.hello(host or node)
        return agent.run()
    addr, _, port = connect.rpartition(":")
    sock = socket.create_connection((addr.strip("[]"), int(port)), timeout=30)
    challenge = _first_frame(sock)
    sock.setblocking(True)
    fd = sock.detach()
    agent = Agent(fd, fd, control_path, silence=silence, grace=grace, on_away=_quiet)
    _end_on_sigterm(agent)
    agent.hello(host or node, node=node, jobid=os.environ.get("SLURM_JOB_ID"),
                proof=frames.proof(secret, challenge.get("nonce", "")))
    return agent.run()


def _quiet() -> None:
    """Our stdout and stderr (the head's pipe, or the ssh session's) to /dev/null: a
    write there raises once the head is gone (EPIPE), and would end the agent."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


def _unheeded(signum, frame) -> None:
    """A signal the agent takes and does nothing with."""


def _end_on_sigterm(agent: Agent) -> None:
    """SIGTERM (a host shutting down, a session torn down) ends the agent as the head's
    stop does: what it started, its socket and its folder, within a beat (the loop
    wakes at least every TURN)."""
    signal.signal(signal.SIGTERM, lambda *_: setattr(agent, "done", True))


# An agent's files (own_path, door.door_path).
_OWN = re.compile(r"^control-[0-9]+(\.sock|-door\.sock|-zygote\.log)$")
SWEEP_AGE = 60.0  # a younger folder may be an agent's that is starting: never touched


def sweep(root: str, now: float | None = None) -> list[str]:
    """Remove the folders that agents of this user left in ``root`` when they died
    without their end (SIGKILL, a machine torn down): a folder whose sockets nobody
    answers on, older than SWEEP_AGE, holding only an agent's files. The folders
    removed."""
    now = time.time() if now is None else now
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if not entry.name.startswith("mwrun-agent-"):
                continue
            with contextlib.suppress(OSError):
                stat = entry.stat(follow_symlinks=False)
                if not entry.is_dir(follow_symlinks=False) or stat.st_uid != os.getuid() \
                        or now - stat.st_mtime < SWEEP_AGE:
                    continue
                names = os.listdir(entry.path)
                if any(not _OWN.match(n) for n in names) or any(
                        _answers(os.path.join(entry.path, n)) for n in names
                        if n.endswith(".sock")):
                    continue  # someone else's file, or a live agent's socket
                for name in names:
                    os.unlink(os.path.join(entry.path, name))
                os.rmdir(entry.path)
                removed.append(entry.path)
    return removed


def _leave(control_path: str, zygote_log: str | None) -> None:
    """This agent's files on its host, at its end: its zygotes' log (unless kept:
    None), and the run's folder once its last agent is gone."""
    if zygote_log is not None:
        with contextlib.suppress(OSError):
            os.unlink(zygote_log)
    folder = os.path.dirname(control_path)
    _forget_dead(folder)  # an agent of this host killed before us left its files
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def _forget_dead(folder: str) -> None:
    """The files an earlier agent of this run and host left when it was killed (its
    socket nobody answers on, its zygote log), so that the last agent's end removes the
    folder; a live agent's (one started again while we were taken for lost) are left."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if name.endswith(".sock") and _OWN.match(name) and not _answers(path):
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    os.unlink(path[:-len(".sock")] + "-zygote.log")


def _answers(path: str) -> bool:
    """Whether an agent listens on the socket ``path`` (a dead one's refuses)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # cannot tell: leave it
        return True


def own_path(control_path: str) -> str:
    """This agent's own socket, beside the path the head named (which the hello tells
    it): an agent started again for its host (the old one stalled, not gone) must never
    listen on, or on its end remove, the socket of another."""
    root, ext = os.path.splitext(control_path)
    return f"{root}-{os.getpid()}{ext or '.sock'}"


def _first_frame(sock: socket.socket) -> dict:
    decoder, messages = frames.Decoder(), list[dict]()
    while not messages:
        data = sock.recv(65536)
        if not data:
            raise SystemExit("mwrun agent: the head closed the connection")
        messages = decoder.feed(data)
    return messages[0]
