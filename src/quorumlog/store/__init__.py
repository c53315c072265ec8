"""Log stores: the LogStore contract, an in-memory store and DLedger's segmented file store."""

from .base import Appended, Damage, LogStore, place
from .memory import MemoryStore

__all__ = ["Appended", "Damage", "LogStore", "MemoryStore", "place"]
