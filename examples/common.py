"""What every example shares: MultiWorld's by-hand arguments, and riding out a break.

Scripts in the example folders put this folder on sys.path and import it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading

import mwrun


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--backend, --addr, --base-port, --worldinfo: for running by hand."""
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--addr", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=29500,
                        help="by hand: world W's store is on BASE_PORT + 1000*W")
    parser.add_argument("--worldinfo", action="append", default=[],
                        help="WORLD,RANK by hand (repeat for each world)")
    return parser


def worlds(args, size: int):
    """None under mwrun launch (the launcher names the worlds), else --worldinfo's."""
    if "MWRUN_WORLDS" in os.environ:
        return None
    return mwrun.from_worldinfo(args.worldinfo, size=size, addr=args.addr,
                                backend=args.backend, base_port=args.base_port)


def say(text: str) -> None:
    """One line, written at once: print() writes text and newline separately, and
    lines from two threads can then run together."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def recover(world, error: mwrun.BrokenWorldError, what: str = "") -> bool:
    """Say the world broke (or ended: a peer finished) and wait for it to re-form;
    False once it never will."""
    verb = "ended" if isinstance(error, mwrun.WorldEnded) else "broke"
    say(f"{world.name} {verb}{what}: {error.reason}")
    try:
        world.rejoin()
    except (mwrun.BrokenWorldError, mwrun.WorldClosedError) as final:  # closed: on purpose
        if final.reason != error.reason:  # by hand, "its store host has gone" says it all
            say(f"{world.name} is over: {final.reason}")
        return False
    say(f"{world.name} re-formed (generation {world.generation})")
    return True


async def arecover(world, error: mwrun.BrokenWorldError, what: str = "") -> bool:
    """recover() for asyncio code: the wait runs in a thread, the loop goes on.

    A daemon thread, not asyncio.to_thread: on Ctrl-C asyncio.run waits for its
    executor's threads, and a rejoin may wait for a peer that never comes back.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def wait() -> None:
        result = recover(world, error, what)
        with contextlib.suppress(RuntimeError):  # the loop has closed: no one waits
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))

    threading.Thread(target=wait, name=f"recover-{world.name}", daemon=True).start()
    # Not a bare ``await done``: the kernel may hand Ctrl-C to any thread (this wait's,
    # torch's), and then Python only notes it; its handler runs when the main thread
    # next runs Python, and an idle loop would sleep on in epoll, for good if the peer
    # never comes back. Waking twice a second lets asyncio.run see it.
    while not done.done():
        await asyncio.wait({done}, timeout=0.5)
    return done.result()


def quiet_interrupt(main) -> None:
    """Run main(); Ctrl-C ends the program with status 130 and no traceback.

    By then main() has left ``with mwrun.init(...)``, so its worlds are closed (peers
    see it leave). What is left is the interpreter's teardown, with torch's C++ threads
    (a rejoin's store waits, a group being released) still about; a Ctrl-C should not
    wait on them, so the process ends here, its output flushed.
    """
    try:
        main()
    except KeyboardInterrupt:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(130)
