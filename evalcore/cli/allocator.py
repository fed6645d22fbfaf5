"""The command's process gives the memory it frees back to the system.

Two settings, both for the process an ``evalcore`` command runs in (the client of a run),
neither passed on to the workers it starts:

- :func:`arrow_on_system_allocator`: Arrow allocates with the C library's ``malloc``
  instead of its own pool (mimalloc in pyarrow 26), which kept the memory of the report's
  reads (one part of ``fields/`` at a time, the overlays' windows) after they were
  freed. Building the report of a 2M-field run in a fresh process (2026-12-05): peak
  499-513 MiB with Arrow's pool, 343 MiB with the system allocator and the threshold
  below; 250k fields 470 against 333 MiB.
- :func:`return_freed_memory`, the trim threshold:

glibc's ``malloc`` keeps freed memory inside the process until the free space at the top
of its heap passes a threshold, and it raises that threshold (and the size from which
blocks get their own mapping) each time a large block is freed: after a few large
temporary arrays, later ones come from the heap and stay resident once freed, behind
any small block allocated after them. Dask's nanny gives its workers a fixed threshold
of 64 KiB (``MALLOC_TRIM_THRESHOLD_=65536``, distributed's
``distributed.nanny.pre-spawn-environ``) for that reason; an ``evalcore`` command (the
client of a run) gets the same. Measured on a 2M-field run's site layers (2026-12-05):
checking the annotated area left the process 32 MiB larger with glibc's default, 5 MiB
with the fixed threshold, and its peak was 27 MiB lower.

Only the command line sets them (:mod:`evalcore.cli`: Arrow's pool when it is imported,
the threshold when a command runs): a library must not change its host process's allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["ARROW_POOL_ENV", "TRIM_THRESHOLD_BYTES", "arrow_on_system_allocator", "return_freed_memory"]

TRIM_THRESHOLD_BYTES = 65_536
"""Free space at the top of the heap above which glibc gives it back, bytes (distributed's value for its workers)."""

ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
"""Arrow reads it once, when ``pyarrow`` is imported."""

_M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
_ENV = "MALLOC_TRIM_THRESHOLD_"


def return_freed_memory() -> bool:
    """Give this process glibc's fixed trim threshold of :data:`TRIM_THRESHOLD_BYTES`.

    Returns
    -------
    bool
        True when it was set; False where it does not apply: not Linux, a C library
        without ``mallopt`` (or one that refuses it), or ``MALLOC_TRIM_THRESHOLD_``
        already in the environment (the user's own setting, which glibc read at start,
        stands).
    """
    if not sys.platform.startswith("linux") or os.environ.get(_ENV) is not None:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1


def arrow_on_system_allocator() -> bool:
    """Import ``pyarrow`` with the system allocator as its default memory pool.

    Arrow chooses its default pool from :data:`ARROW_POOL_ENV` when it is imported
    (``pyarrow.set_memory_pool`` afterwards still leaves some reads on mimalloc), so this
    must run before anything imports ``pyarrow``; the variable is removed again, so the
    processes this one starts (the embedded cluster's workers) keep Arrow's default.

    Returns
    -------
    bool
        True when ``pyarrow`` was imported here on the system allocator; False when it
        was already imported, or the user set :data:`ARROW_POOL_ENV` (their choice stands).
    """
    if "pyarrow" in sys.modules or ARROW_POOL_ENV in os.environ:
        return False
    os.environ[ARROW_POOL_ENV] = "system"
    try:
        import pyarrow  # noqa: F401  (the import is the point: it reads the variable)
    finally:
        del os.environ[ARROW_POOL_ENV]
    return True
