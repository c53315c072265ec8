"""Deterministic simulation of whole quorumlog clusters with fault injection and invariant checks."""

from .cluster import ALL_FAULTS, Cluster, SimConfig
from .runner import main, run_seed

__all__ = ["ALL_FAULTS", "Cluster", "SimConfig", "main", "run_seed"]
