"""Rank 1 of its world: sends 1 KiB tensors to the leader as fast as it takes them."""

import torch

import mwrun

world = next(iter(mwrun.init().worlds.values()))
t = torch.ones(256)
while True:
    world.send(t, 0)
