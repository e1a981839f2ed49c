"""Worlds added and removed by hand (MultiWorld's ``initialize_world``), no launcher:
two terminals, each rank keeps one world and, beside it, adds a world, talks in it and
removes it again, while the first world's calls go on.

    python examples/serving/by_hand.py --rank 0     # terminal 1 (it hosts the stores)
    python examples/serving/by_hand.py --rank 1     # terminal 2
"""

import argparse
import time

import torch

import mwrun


def main(args) -> None:
    base = args.port
    job = mwrun.init(worlds={"main": mwrun.WorldSpec(rank=args.rank, size=2, port=base)})
    main_world = job.world("main")
    for round_ in range(args.rounds):
        name = f"extra-{round_}"
        extra = job.add_world(name, mwrun.WorldSpec(rank=args.rank, size=2,
                                                    port=base + 1 + round_))
        value = torch.tensor([float(round_)])
        extra.all_reduce(value)  # both ranks' round: 2 * round_
        main_world.all_reduce(torch.ones(1))  # the first world never stopped
        print(f"rank {args.rank}: {name} formed, all_reduce gave {value.item():g};"
              f" worlds now: {', '.join(job.worlds)}", flush=True)
        # Rank 0 hosts the added world's store, and the world ends with it: the other
        # rank leaves first, and says so through the first world.
        if args.rank == 1:
            job.remove_world(name)
        main_world.barrier()
        if args.rank == 0:
            job.remove_world(name)
        for event in job.events(timeout=0):
            print(f"rank {args.rank}: event {event.kind.value} {event.world}", flush=True)
        time.sleep(args.pause)
    print(f"rank {args.rank}: done; worlds now: {', '.join(job.worlds)}", flush=True)
    job.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True, choices=(0, 1))
    parser.add_argument("--port", type=int, default=29600, help="the first world's port;"
                        " the added worlds take the next ones")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.5)
    main(parser.parse_args())
