"""What the preload imports did that a fork would copy as it is: Python random
generators seeded from the OS, signal handlers; and which environment variables they
read.

A fresh process seeds every ``random.Random()`` it makes from the OS, so a generator a
module makes at import differs in every process; forked, every warm child would draw
the same numbers. While the zygote imports, ``Imprint`` watches each seeding of
Python's generators (the module's own instance included): those whose last seed came
from the OS are reseeded from it in each child, those seeded on purpose
(``random.Random(7)``, ``random.seed(7)``) stay as they are, alike in every process as
they would be cold. It also notes the signal handlers the imports set, which a child
keeps (a fresh import would have set them). A value drawn at import, a numpy
``Generator`` made at import, are what they are: docs/topology.rst (Warm starts) says so.

The variables the imports read through ``os.environ`` (``get``, ``[]``, ``in``,
``getenv``; a look at all of them, ``copy()`` or ``items()``, counts as reading every
one) tell the supervisor which processes this zygote may serve (host/warm.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import weakref


def handlers() -> dict[int, object]:
    found: dict[int, object] = {}
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            found[int(sig)] = signal.getsignal(sig)
    return found


class Imprint:
    """Started before the preload imports, ``stop()``-ed after them."""

    def __init__(self):
        # The module's own generator, seeded from the OS as random was imported.
        self.from_os: weakref.WeakSet[random.Random] = weakref.WeakSet([random._inst])
        self.handlers_before = handlers()
        self.set_handlers: dict[int, object] = {}
        self._class_seed = random.Random.seed
        self._module_seed = random.seed
        watch = self

        def class_seed(rng, a=None, version=2):
            watch._note(rng, a)
            return watch._class_seed(rng, a, version)

        def module_seed(a=None, version=2):
            watch._note(random._inst, a)
            return watch._module_seed(a, version)

        random.Random.seed = class_seed
        random.seed = module_seed
        self.read: set[str] = set()
        self.read_all = False
        environ = type(os.environ)
        self._getitem, self._iter = environ.__getitem__, environ.__iter__

        def getitem(mapping, key):
            watch.read.add(key if isinstance(key, str) else os.fsdecode(key))
            return watch._getitem(mapping, key)

        def iterate(mapping):
            watch.read_all = True
            return watch._iter(mapping)

        environ.__getitem__, environ.__iter__ = getitem, iterate

    def _note(self, rng, a) -> None:
        if a is None:
            self.from_os.add(rng)
        else:
            self.from_os.discard(rng)

    def stop(self) -> None:
        random.Random.seed = self._class_seed  # type: ignore[method-assign]
        random.seed = self._module_seed
        environ = type(os.environ)
        environ.__getitem__, environ.__iter__ = self._getitem, self._iter  # type: ignore[method-assign]
        after = handlers()
        self.set_handlers = {sig: h for sig, h in after.items()
                             if h is not self.handlers_before.get(sig)}

    def reseed(self) -> None:
        """In the child: each generator the imports left seeded from the OS, anew."""
        for rng in list(self.from_os):
            rng.seed()

    def restore_handlers(self) -> None:
        """In the child, after its dispositions are a fresh process's: the imports'."""
        for sig, handler in self.set_handlers.items():
            if handler is None:  # set outside Python: nothing Python can put back
                continue
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, handler)  # type: ignore[arg-type]
