"""multiprocessing with the spawn and fork start methods, and a DataLoader with workers."""

import json
import multiprocessing
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def square(x):
    return x * x


if __name__ == "__main__":
    results = {}
    for method in ("spawn", "fork"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            results[method] = pool.map(square, [1, 2, 3])
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)
    results["loader"] = sum(batch[0].sum().item() for batch in loader)
    print(json.dumps(results), flush=True)
    sys.exit(0 if results == {"spawn": [1, 4, 9], "fork": [1, 4, 9], "loader": 28.0} else 5)
