"""send/recv with plain torch.distributed in ONE default group: the contrast to mwrun.

Rank 0 receives from ranks 1..N-1 in turn; the others send. Written exactly as for
torchrun (init_process_group reads MASTER_ADDR, RANK, ... from the environment), so
it runs unchanged under both:

    mwrun launch configs/single_world.yaml
    torchrun --nproc-per-node 3 examples/send_recv/single_world.py

Kill any rank and the whole group is done for: rank 0's next receive from it fails,
and there is no way to carry on with the others. That is what worlds are for.
"""

import argparse
import time

import torch
import torch.distributed as dist


def main(args) -> None:
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", 0) if args.backend == "nccl" else torch.device("cpu")
    if rank == 0:
        for step in range(args.steps):
            for src in range(1, size):
                tensor = torch.zeros(1, device=device)
                dist.recv(tensor, src=src)
                print(f"Rank 0 received tensor {tensor} from {src} (step {step})", flush=True)
    else:
        tensor = torch.ones(1, device=device) * rank
        for _ in range(args.steps):
            dist.send(tensor, dst=0)
            print(f"Rank {rank} sent tensor to rank 0", flush=True)
            time.sleep(args.interval)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.2)
    main(parser.parse_args())
