"""The ResNet leader: serves batches through every pipeline (one world each), checks
every answer against its own copy of the model, and routes around a broken pipeline
until it is back.

    mwrun launch configs/resnet.yaml
"""

import argparse
import pathlib
import queue
import sys
import threading
import time

import torch
from model import BATCH, build, images

import mwrun

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import recover, say


def serve(world, batches: queue.Queue, report, interval: float) -> None:
    while True:
        index = batches.get()
        if index is None:
            return
        try:
            world.send(images(index).to(world.device), 1)  # to stage 0
            predicted = torch.zeros(BATCH, dtype=torch.int64, device=world.device)
            world.recv(predicted, 2)  # from stage 1
        except mwrun.BrokenWorldError as exc:
            batches.put(index)  # another pipeline takes it
            if not recover(world, exc, " (the other pipelines serve)"):
                return
            continue
        report(index, world.name, predicted.cpu())
        time.sleep(interval)


def main(args) -> None:
    job = mwrun.init()
    model = build()
    batches: queue.Queue = queue.Queue()
    for index in range(args.batches):
        batches.put(index)
    done = threading.Event()
    served: dict[str, int] = {name: 0 for name in job.worlds}
    lock = threading.Lock()

    def report(index, world, predicted):
        with torch.no_grad():
            expected = model(images(index)).argmax(1)
        verdict = "verified" if torch.equal(predicted, expected) else "WRONG"
        say(f"batch {index} served by {world}: classes {predicted.tolist()} ({verdict})")
        with lock:
            served[world] += 1
            if sum(served.values()) == args.batches:
                done.set()
                for _ in job.worlds:
                    batches.put(None)

    threads = [threading.Thread(target=serve, args=(w, batches, report, args.interval))
               for w in job.worlds.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    say(f"served {sum(served.values())} of {args.batches} batches:"
        f" {', '.join(f'{w} {n}' for w, n in served.items())}")
    job.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds per batch")
    main(parser.parse_args())
