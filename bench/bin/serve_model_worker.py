"""bench/compare_serve.py's model, and mwrun's replica of it: rank 1 of its own world
with the frontend (``pair-I``), it answers each request (a 1 x 256 tensor) with the
model's output and its own pid (a 1 x 257 tensor) until its world is closed (drained
away by ``mwrun scale worker=-1``), then exits 0.

The model is built here, and ``bench/bin/ray_serve_app.py`` imports ``build_model``
from this file: Ray Serve's replicas and mwrun's run the very same code, weights
and thread count. mwrun is imported inside ``main`` only, so that Ray's processes,
which import this module for the model, need nothing of mwrun's.
"""

from __future__ import annotations

import argparse
import os

import torch

WIDTH = 256  # three Linear(256, 256) + ReLU layers; a request is a 1 x 256 tensor
SEED = 0  # the same weights in every replica, on either side


def build_model() -> torch.nn.Module:
    """Three Linear(256, 256) + ReLU, seeded: what every replica of either side serves.
    One intra-op thread: two replicas share this machine's two cores, and torch's
    default (a thread per core in each) would have them fight over both."""
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    layers: list[torch.nn.Module] = []
    for _ in range(3):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


def main() -> None:
    import mwrun  # here, not above: see the docstring

    job = mwrun.init()
    [world] = [w for n, w in job.worlds.items() if n.startswith("pair")]
    model = build_model()
    request = torch.zeros(1, WIDTH)
    answer = torch.zeros(1, WIDTH + 1)
    answer[0, WIDTH] = os.getpid()  # who answered: the bench tells replicas apart by pid
    while True:
        try:
            world.recv(request, 0)
            with torch.no_grad():
                answer[0, :WIDTH] = model(request)[0]
            world.send(answer, 0)
        except mwrun.WorldClosedError:  # retired by a scale: nothing more will come
            break
        except mwrun.BrokenWorldError:  # the frontend went: it comes back
            try:
                world.rejoin()
            except mwrun.MwrunError:  # closed for good meanwhile
                break
    job.close()


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    main()
