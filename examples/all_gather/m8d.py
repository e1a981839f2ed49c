"""all_gather: every rank contributes a tensor; every rank receives all of them,
100 steps, in every world of this process.

See ../collectives.py for the arguments and ./README.rst for how to run it.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from collectives import main

if __name__ == "__main__":
    main("all_gather")
