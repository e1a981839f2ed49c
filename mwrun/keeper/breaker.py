"""``python -m mwrun.keeper.breaker ADDR PORT GENERATION SIZE REASON``: break one
generation of a world in its store, as the head would (``protocol.mark_broken``), and
end. An agent starts it while its head is away, when a member of that world exited
(host/breaks.py): forked from the member's own zygote (torch imported: the survivors
hear of it within milliseconds), else started cold. Its output is the agent's zygote
log. A keeper's part, not the agent's: the agent never imports torch.
"""

from __future__ import annotations

import sys
from datetime import timedelta

WAIT = 5.0  # seconds to reach the store: a keeper that is gone too ends the job anyway


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 5:
        print("usage: python -m mwrun.keeper.breaker ADDR PORT GENERATION SIZE REASON"
              " (started by an agent, not by hand)", file=sys.stderr)
        return 2
    addr, port, generation, size, reason = args
    import torch.distributed as dist  # the zygote's already, when forked warm

    from mwrun import protocol

    try:
        store = dist.TCPStore(addr, int(port), None, False, timeout=timedelta(seconds=WAIT))
        won = protocol.mark_broken(store, int(generation), int(size), reason)
    except (RuntimeError, ValueError) as exc:  # torch's DistError is a RuntimeError
        print(f"breaker: could not break generation {generation} at {addr}:{port}: {exc}",
              flush=True)
        return 1
    print(f"breaker: generation {generation} at {addr}:{port} broken: {won}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
