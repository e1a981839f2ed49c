"""Where a new head reaches the keeper (``mwrun adopt``): a Unix socket in the run's
private folder, beside the one the first head listened on. A head's first message is
``{"adopt": EPOCH}``; the keeper obeys it if that epoch is above every one it obeyed
(the first head's is 1): the new connection replaces the old one, whose head (stale,
if it still lives) reads its end. Anything else is told why and closed. The folder is
owner-only, and a connection from another user is refused before it is read.
"""

from __future__ import annotations

import contextlib
import os
import socket

from mwrun.keeper import wire

HANDSHAKE = 2.0  # seconds a head that connected has to say its epoch (it is local)


class Door:
    def __init__(self, path: str, epoch: int = 1):
        self.path, self.epoch = path, epoch
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(4)

    def fileno(self) -> int:
        return self.listener.fileno()

    def take(self) -> tuple[socket.socket, wire.Reader, list] | None:
        """A head that knocked, if the keeper obeys it: its connection, a reader on
        it, and what it said after its epoch."""
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return None
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        if int.from_bytes(creds[4:8], "little") != os.getuid():
            sock.close()
            return None
        sock.settimeout(HANDSHAKE)
        reader = wire.Reader(sock)
        said: list = []
        while not said and not reader.ended:
            said = reader.read()
        epoch = said[0][0].get("adopt") if said else None
        if not isinstance(epoch, int) or epoch <= self.epoch:
            with contextlib.suppress(OSError):
                wire.send(sock, {"refused": f"a newer head (epoch {self.epoch}) has the"
                                            f" stores; this one's epoch is {epoch}"})
            sock.close()
            return None
        sock.settimeout(None)
        self.epoch = epoch
        return sock, reader, said[1:]

    def close(self) -> None:
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
