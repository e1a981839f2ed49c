"""Free TCP ports for worlds whose topology names none."""

from __future__ import annotations

import errno
import socket


def bind_free(addr: str, taken: set[int]) -> socket.socket:
    """A listening socket on a free port of ``addr`` that is not in ``taken``.

    The supervisor keeps the socket and hands it to the world's store, so the port
    cannot be taken by someone else between choosing and using it.
    """
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    for _ in range(100):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, 0))
        except OSError:
            sock.close()
            raise
        if sock.getsockname()[1] not in taken:
            sock.listen(512)
            return sock
        sock.close()
    raise OSError(f"no free port found on {addr}")


def probe_free(addr: str, taken: set[int]) -> int:
    """A port that is free now (for plans that start nothing, like --dry-run).

    For an address of another machine (a plan made away from its head) a port free
    here stands in: the launch there chooses its own.
    """
    try:
        sock = bind_free(addr, taken)
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise
        sock = bind_free("::" if ":" in addr else "0.0.0.0", taken)
    with sock:
        return sock.getsockname()[1]


def in_use(addr: str, port: int) -> str | None:
    """Why ``port`` on ``addr`` cannot be listened on now, or None if it can."""
    exc = bind_error(addr, port)
    return None if exc is None else exc.strerror or str(exc)


def bind_error(addr: str, port: int) -> OSError | None:
    """The error binding ``port`` on ``addr`` gives now, or None if it binds."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As the launch binds it: a port left in TIME_WAIT by an earlier run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, port))
        except OSError as exc:
            return exc
    return None
