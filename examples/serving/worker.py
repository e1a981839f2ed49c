"""A serving worker: rank 1 of its own world with the frontend (pair-I), it answers each
request (twice the number it carries) after a little work, until its world is closed:
drained away by ``mwrun scale``/``mwrun drain``, when it ends on its own, exit 0."""

import argparse
import time

import torch

import mwrun


def main(args) -> None:
    job = mwrun.init()
    [(name, world)] = [(n, w) for n, w in job.worlds.items() if n.startswith("pair")]
    print(f"{name}: serving as rank {world.rank} of {world.size}", flush=True)
    request = torch.zeros(1)
    while True:
        try:
            world.recv(request, 0)
            time.sleep(args.work)  # the model's forward pass, say
            world.send(request * 2, 0)
        except mwrun.WorldClosedError as exc:  # retired: nothing more will come
            print(f"{name}: closed ({exc.reason}); this worker is done", flush=True)
            break
        except mwrun.BrokenWorldError as exc:  # the frontend went: it comes back
            print(f"{name}: broke ({exc.reason}); rejoining", flush=True)
            try:
                world.rejoin()
            except mwrun.MwrunError as gone:  # closed for good meanwhile
                print(f"{name}: not rejoined ({gone}); this worker is done", flush=True)
                break
    job.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=float, default=0.02, help="seconds per request")
    main(parser.parse_args())
