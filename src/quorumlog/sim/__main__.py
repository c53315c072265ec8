"""python -m quorumlog.sim --seeds 0:100 --steps 5000; --mode pb: a primary/backup group (pb.py, pb_cli.py)"""

import argparse
import sys

from .pb_cli import main as pb_main
from .runner import main

mode = argparse.ArgumentParser(add_help=False)  # --help goes on to the chosen simulator
mode.add_argument("--mode", choices=("raft", "pb"), default="raft")
known, rest = mode.parse_known_args()
sys.exit(pb_main(rest) if known.mode == "pb" else main(rest))
