"""Free TCP ports for worlds whose topology names none."""

from __future__ import annotations

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
        sock.bind((addr, 0))
        if sock.getsockname()[1] not in taken:
            sock.listen(512)
            return sock
        sock.close()
    raise OSError(f"no free port found on {addr}")


def probe_free(addr: str, taken: set[int]) -> int:
    """A port that is free now (for plans that start nothing, like --dry-run)."""
    with bind_free(addr, taken) as sock:
        return sock.getsockname()[1]
