"""Independent slices of one computation spread over this process's threads.

Some steps hold the CPU outside Python: PROJ's transforms, GEOS's operations through
shapely and evalcore's numba kernels (compiled ``nogil``) all release the GIL. A step that
gives each element a result of its own (a vertex its transformed coordinates, a pair its
boundary distances) can cut its elements into contiguous slices and run them on threads:
each element is computed by the same code on the same values, so the result is the same
to the last bit whatever the number of threads. Nothing is summed across slices here.

How many threads: the environment variable ``EVALCORE_THREADS`` when set; 1 inside a
Dask worker (there the parallelism is the cluster's, one task per worker thread); else the
CPUs this process may run on, at most :data:`MAX_THREADS`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TypeVar

import numpy as np

__all__ = ["GEOMS_PER_THREAD", "MAX_THREADS", "n_threads", "map_slices", "map_elements", "map_each"]

MAX_THREADS = 8
"""At most this many threads by default (a laptop's cores; set ``EVALCORE_THREADS`` for more)."""

GEOMS_PER_THREAD = 4_096
"""Fewer geometries than this are not given a thread of their own in a GEOS operation."""

T = TypeVar("T")
_THREAD_PREFIX = "evalcore-slices"


def _in_dask_worker() -> bool:
    distributed = sys.modules.get("distributed")
    if distributed is None:  # not imported: this process is no worker
        return False
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True


def n_threads() -> int:
    """The threads a step may use here (see the module's docstring)."""
    given = os.environ.get("EVALCORE_THREADS")
    if given:
        try:
            n = int(given)
        except ValueError:
            raise ValueError(f"EVALCORE_THREADS must be a positive integer, but got {given!r}") from None
        if n < 1:
            raise ValueError(f"EVALCORE_THREADS must be a positive integer, but got {given!r}")
        return n
    if _in_dask_worker():
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_THREADS))


@lru_cache(maxsize=None)
def _pool(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix=_THREAD_PREFIX)


# A forked child has none of its parent's threads, but would inherit the pool that thinks it
# has them (and wait on them forever): the child makes pools of its own.
os.register_at_fork(after_in_child=_pool.cache_clear)



def map_slices(fn: Callable[[int, int], T], n_items: int, min_slice: int) -> list[T]:
    """``fn(start, stop)`` over contiguous slices covering ``range(n_items)``, in order.

    Parameters
    ----------
    fn : callable
        Computes the elements ``start:stop``; it must not depend on the other slices.
    n_items : int
    min_slice : int
        Fewer elements than this per slice are not worth a thread: with fewer than
        ``2 * min_slice`` items, or one thread, ``fn(0, n_items)`` runs here, alone.

    Returns
    -------
    list
        Each slice's result, in the order of the slices.
    """
    n = min(n_threads(), n_items // max(1, min_slice))
    if n <= 1 or threading.current_thread().name.startswith(_THREAD_PREFIX):
        # A slice that slices again runs its pieces here: a pool thread waiting on its own
        # pool could wait forever.
        return [fn(0, n_items)]
    bounds = [n_items * k // n for k in range(n + 1)]
    futures = [_pool(n).submit(fn, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    return [f.result() for f in futures]


def map_elements(fn: Callable[..., object], *arrays: object, min_slice: int) -> object:
    """``fn(*arrays)`` computed in slices of the arrays (all of one length) on this process's
    threads, the slices' results concatenated: for an ``fn`` that gives each element a
    result of its own (an array of that length), e.g. ``shapely.is_valid``.

    Examples
    --------
    >>> import numpy as np
    >>> map_elements(np.sqrt, np.array([4.0, 9.0]), min_slice=1).tolist()
    [2.0, 3.0]
    """
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError(f"the arrays must have one length, but got {[len(a) for a in arrays]}")
    parts = map_slices(lambda start, stop: fn(*(a[start:stop] for a in arrays)), n, min_slice)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def map_each(fn: Callable[[object], T], items: Sequence[object]) -> list[T]:
    """``[fn(item) for item in items]``, a slice of the items on each of this process's
    threads, in order: for calls that spend their time outside the GIL, such as hashing
    files (hashlib releases it while it hashes a large buffer).

    Examples
    --------
    >>> map_each(len, ["a", "bcd", ""])
    [1, 3, 0]
    """
    return [result for part in map_slices(lambda start, stop: [fn(item) for item in items[start:stop]], len(items), 1)
            for result in part]
