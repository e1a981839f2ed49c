"""Which head an agent serves, and how that changes: the hello to the head that started
it; that head's going (its link closed or silent: the job goes on for ``head_grace``,
host/absence.py, else it ends); and a newer head taking the link at the agent's door
(host/door.py), told first what runs here (host/recall.py) and what each library had
said, then what was kept for it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from mwrun import __version__, machine
from mwrun.host import frames
from mwrun.host.absence import Absence
from mwrun.host.frames import Kind
from mwrun.host.headlink import HeadLink
from mwrun.host.recall import Recall


class Headship:
    """The agent's side of its heads' comings and goings, one link at a time."""

    def __init__(self, link: HeadLink, absence: Absence, recall: Recall, control_path: str,
                 on_away: Callable[[], None]):
        self.link, self.absence, self.recall = link, absence, recall
        self.control_path = control_path
        self.on_away = on_away  # once the head went and the job goes on (main: _quiet)
        self.host = ""  # as its hello says
        self.placed: dict[str, str] = {}  # under Slurm: its node and job (hello)
        self.said: list[dict] = []  # the libraries' state when the head went (recall.py)

    def hello(self, host: str, **more) -> dict:
        """The hello to the head that started the agent."""
        self.host = host
        # Where Slurm runs us: said again to a head that adopts the run, which notes it
        # for the head after it (the run folder's AGENTS).
        self.placed = {k: more[k] for k in ("node", "jobid") if more.get(k)}
        return hello_frame(host, self.control_path, **more)

    def lost(self, why: str) -> bool:
        """The head went (``why``): True if the job goes on for its grace; False if it
        ends now (no grace)."""
        if not self.absence.begin(why):
            return False
        self.link.unwatch()
        self.said = self.recall.replay()  # the libraries' state now: the rest is kept
        self.on_away()
        return True

    def adopted(self, sock: socket.socket, epoch: int) -> None:
        """A head of a newer epoch took the job (host/door.py): its link replaces the
        old one (a stale head reads its end), and it hears first what runs here and
        what each library said, then what was kept for it."""
        hello = hello_frame(self.host, self.control_path, **self.placed, adopted={
            "epoch": epoch, "processes": self.recall.report(), "dropped": self.absence.dropped})
        # What each library had said when the head went; what it said since is kept
        # (absence.ALWAYS), in order, behind. Taken from a head that lives: all of it.
        said = [{"kind": Kind.CONTROL, "request": r}
                for r in (self.said if self.absence.away else self.recall.replay())]
        self.recall.told()
        self.absence.back()
        self.link.replace(sock.detach(), [hello, *said])


def hello_frame(host: str, control_path: str, **more) -> dict:
    """An agent's hello: who it is and what its host has (frames.py)."""
    return {"kind": Kind.HELLO, "protocol": frames.PROTOCOL, "version": __version__,
            "host": host, "pid": os.getpid(), "control": control_path,
            "inventory": machine.facts(), **more}
