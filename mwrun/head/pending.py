"""The worlds' stores, brought up without making the job wait for torch.

The supervisor needs torch only for its TCPStores, and importing it takes seconds. The
import starts in a thread the moment the plan is sound; the processes are started
meanwhile (each world's listening socket is already bound, so a member that connects
early waits in its backlog), and ``serve()`` then builds the stores.
"""

from __future__ import annotations

import threading


class PendingStores:
    def __init__(self, plan, listeners):
        self._plan, self._listeners = plan, listeners
        self._stores = None
        self._import = threading.Thread(target=_import_torch, name="mwrun-import-torch",
                                        daemon=True)
        self._import.start()

    def serve(self) -> None:
        """Build the stores (after the import, which mostly ran while processes started)."""
        if self._stores is None:
            self._import.join()
            from mwrun.head.stores import WorldStores

            self._stores = WorldStores(self._plan, self._listeners)

    def close_listeners(self) -> None:
        """Before serve(): release the sockets (the launch failed)."""
        if self._stores is None:
            for sock in self._listeners.values():
                sock.close()

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self._served().mark_broken(world, generation, reason)

    def open_next(self, world: str, generation: int) -> None:
        self._served().open_next(world, generation)

    def close_world(self, world: str, generation: int, reason: str) -> None:
        self._served().close_world(world, generation, reason)

    def plain_ranks(self, world: str) -> set[int] | None:
        return self._served().plain_ranks(world)

    def close(self) -> None:
        if self._stores is not None:
            self._stores.close()
        else:
            self.close_listeners()

    def _served(self):
        self.serve()  # an event before serve() (a process that died at once) waits here
        return self._stores


def _import_torch() -> None:
    import torch.distributed  # noqa: F401 - imported for its side effect: loaded once
