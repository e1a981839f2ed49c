"""A ResNet pipeline stage: rank 1 runs stage 0, rank 2 stage 1 of its world's pipeline."""

import pathlib
import sys

import torch
from model import BATCH, BETWEEN_STAGES, IMAGE, build, stages

import mwrun

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import recover


def main() -> None:
    job = mwrun.init()
    [world] = job.worlds.values()
    stage = world.rank - 1
    part = stages(build())[stage].to(world.device)  # cuda:0 with nccl, else the CPU
    print(f"{world.name}: stage {stage} ready (generation {world.generation})", flush=True)
    while True:
        try:
            with torch.no_grad():
                if stage == 0:
                    batch = torch.zeros(BATCH, *IMAGE, device=world.device)
                    world.recv(batch, 0)
                    world.send(part(batch).contiguous(), 2)
                else:
                    features = torch.zeros(BATCH, *BETWEEN_STAGES, device=world.device)
                    world.recv(features, 1)
                    world.send(part(features).argmax(1), 0)
        except mwrun.BrokenWorldError as exc:
            if not recover(world, exc):
                break
    job.close()


if __name__ == "__main__":
    main()
