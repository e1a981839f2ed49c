import sys

from mwrun.keeper.main import main

sys.exit(main())
