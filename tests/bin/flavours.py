"""Prints, as JSON, what its package read at import and what its environment says."""

import json
import os

from tests.bin.preloads import flavour

print(json.dumps({"at_import": flavour.FLAVOUR, "flavour": os.environ.get("FLAVOUR"),
                  "other": os.environ.get("OTHER"),
                  "imported_by": flavour.IMPORTED_BY}), flush=True)
