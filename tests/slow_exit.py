"""A worker preload whose process takes 6 s to exit, for tests/unit/test_terminal_quiet.py.

Stands in for a worker on a loaded machine, whose interpreter needs longer than
distributed's 4 s to tear down the engine's modules after the worker closed.
"""

from __future__ import annotations

import atexit
import time

EXIT_SECONDS = 6.0


def dask_setup(worker: object) -> None:
    """Register the slow exit in the worker's process (the hook distributed calls at start)."""
    atexit.register(time.sleep, EXIT_SECONDS)
