"""python -m quorumlog.sim --seeds 0:100 --steps 5000"""

import sys

from .runner import main

sys.exit(main())
