"""The registry of the metric families.

:data:`FAMILIES` lists the families in output order. Everything that depends on the
set of metrics (the quantity columns, the options and so the CLI flags and flow
parameters, the bootstrap, the arrays codec, the summary layout) loops over it, so adding
a family is one module, one line here, one test file and one docs section
(docs/architecture.md, "Adding a metric family").

This is the one module that imports the families; the interface they implement is
:mod:`evalcore.metrics.base`, which imports none of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import numpy as np

from evalcore.metrics.area import Area
from evalcore.metrics.base import MetricFamily, Option, Value
from evalcore.metrics.classes import Classes
from evalcore.metrics.detection import Detection
from evalcore.metrics.distance import Distance
from evalcore.metrics.incomplete import Incomplete
from evalcore.metrics.quality import Quality
from evalcore.metrics.scores import Scores
from evalcore.metrics.segmentation import Segmentation
from evalcore.metrics.sweep import Sweep
from evalcore.metrics.taxonomy import Taxonomy
from evalcore.metrics.tolerance import Tolerance
from evalcore.metrics.topology import Topology

__all__ = [
    "FAMILIES",
    "MetricFamily",
    "registered",
    "enabled_families",
    "family_options",
    "quantity_columns",
    "max_columns",
    "finalize_all",
    "interval_keys",
    "replicate_columns",
    "finalize_replicates",
    "unit_columns",
    "unit_replicate_columns",
    "order_statistics",
]

FAMILIES: list[MetricFamily] = [
    Detection(),
    Area(),
    Segmentation(),
    Distance(),
    Tolerance(),
    Sweep(),
    Topology(),
    Quality(),
    Taxonomy(),
    Incomplete(),
    Scores(),
    Classes(),
]


@contextlib.contextmanager
def registered(family: MetricFamily) -> Iterator[MetricFamily]:
    """Add a family to the registry for the duration of a ``with`` block (tests, plug-ins).

    A distributed run needs the family registered in the worker processes too (import
    it where the workers import their code).
    """
    FAMILIES.append(family)
    try:
        yield family
    finally:
        FAMILIES.remove(family)


def family_options() -> tuple[Option, ...]:
    return tuple(option for family in FAMILIES for option in family.options)


def enabled_families(options: object) -> tuple[MetricFamily, ...]:
    return tuple(f for f in FAMILIES if f.enabled(options))


def quantity_columns(options: object) -> tuple[str, ...]:
    """The summed per-reference columns of the enabled families, in registry order."""
    columns = tuple(c for f in enabled_families(options) for c in f.columns(options))
    if len(set(columns)) != len(columns):
        raise ValueError(f"two metric families declare the same quantity column: {columns}")
    return columns


def max_columns(options: object) -> tuple[str, ...]:
    """The columns that merge by max, in registry order."""
    return tuple(c for f in enabled_families(options) for c in f.maxima)


def finalize_all(sums: Mapping[str, object], options: object) -> dict[str, Value]:
    """Every enabled family's metrics as ``(value, defined)`` from column sums (scalars or replicate arrays)."""
    out: dict[str, Value] = {}
    for family in enabled_families(options):
        out.update(family.finalize(sums, options))
    return out


def interval_keys(options: object) -> tuple[str, ...]:
    return tuple(k for f in enabled_families(options) for k in f.interval_keys(options))


def replicate_columns(options: object) -> tuple[str, ...]:
    """The quantity columns summed per bootstrap replicate (:meth:`MetricFamily.replicate_columns`
    of every enabled family), in :func:`quantity_columns` order."""
    wanted = {c for f in enabled_families(options) for c in f.replicate_columns(options)}
    return tuple(c for c in quantity_columns(options) if c in wanted)


def finalize_replicates(sums: object, options: object) -> dict[str, Value]:
    """:func:`finalize_all` of one group's replicate sums, shape (n_replicates,
    len(:func:`replicate_columns`)); the other columns are NaN, so only the keys the
    intervals need are defined (tests/unit/test_replicate_columns.py)."""
    columns = replicate_columns(options)
    if sums.shape[-1] != len(columns):
        raise ValueError(f"{sums.shape[-1]} columns of replicate sums for the {len(columns)} replicate columns of these options")
    by_name = {name: sums[:, j] for j, name in enumerate(columns)}
    nan = np.full(sums.shape[0], np.nan)  # shared by the columns left out
    return finalize_all({name: by_name.get(name, nan) for name in quantity_columns(options)}, options)


def unit_columns(options: object) -> tuple[str, ...]:
    """The summed columns reporting tiles and AOIs carry, in registry order."""
    return tuple(c for f in enabled_families(options) for c in f.unit_columns(options))


def unit_replicate_columns(options: object) -> tuple[str, ...]:
    """The unit columns the per-AOI bootstrap intervals need (of the families with unit interval keys)."""
    return tuple(c for f in enabled_families(options) if f.unit_interval_keys(options) for c in f.unit_columns(options))


def order_statistics(options: object) -> dict[str, tuple[object, ...]]:
    """The gathered columns of the enabled families and their order statistics, in registry order."""
    out: dict[str, tuple[object, ...]] = {}
    for family in enabled_families(options):
        for column, statistics in family.order_statistics(options).items():
            if column in out:
                raise ValueError(f"two metric families gather the same column: {column!r}")
            out[column] = tuple(statistics)
    return out
