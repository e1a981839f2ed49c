"""A package that logs to a file it opens at import (logging.basicConfig(filename=...)),
the file named by $PRELOAD_LOG."""

import logging
import os

logging.basicConfig(filename=os.environ["PRELOAD_LOG"], level=logging.INFO,
                    format="%(process)d %(message)s")
