"""The limitations engine: the up-front check and the generated limitations table."""
from limitations.targets import ALL_TARGETS, RUNTIMES, Target

__all__ = ["ALL_TARGETS", "RUNTIMES", "Target"]
