"""Validated evaluation options and the run-wide plan shared by every partition."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from evalcore.bootstrap import draw_partition_counts, pool_id
from evalcore.config import BOUNDARY_SAMPLE_SPACING_M, DEFAULT_TILE_SIZE_M
from evalcore.groups import SizeClasses, size_classes
from evalcore.matching import check_matching

__all__ = ["EvalOptions", "check_options", "RunPlan", "make_run_plan", "positive_number"]


@dataclass(frozen=True, slots=True)
class EvalOptions:
    """Validated evaluation parameters (see :func:`evaluate`)."""

    iou_threshold: float = 0.5
    matching: str = "one_to_one"
    bootstrap: int = 0
    bootstrap_seed: int = 42
    boundary_tolerance_m: float | None = None
    equal_area_crs: object = None
    boundary_sample_spacing_m: float | None = BOUNDARY_SAMPLE_SPACING_M
    tile_size_m: float = DEFAULT_TILE_SIZE_M


def positive_number(name: str, value: object, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{name} must be a positive finite number{' or None' if allow_none else ''}, but got {value!r}.")
    return float(value)


def check_options(**kwargs: object) -> EvalOptions:
    """Validate evaluation parameters; ValueError names the argument and the value."""
    opts = EvalOptions(**kwargs)  # type: ignore[arg-type]
    thr = opts.iou_threshold
    if isinstance(thr, bool) or not isinstance(thr, Real) or not (0.0 < float(thr) <= 1.0):
        raise ValueError(f"iou_threshold must be in (0, 1], but got {thr!r}.")
    check_matching(opts.matching)
    if isinstance(opts.bootstrap, bool) or not isinstance(opts.bootstrap, Integral) or opts.bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer (number of resamples), but got {opts.bootstrap!r}.")
    seed = opts.bootstrap_seed
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"bootstrap_seed must be a non-negative integer, but got {seed!r}.")
    return EvalOptions(
        iou_threshold=float(thr),
        matching=opts.matching,
        bootstrap=int(opts.bootstrap),
        bootstrap_seed=int(seed),
        boundary_tolerance_m=positive_number("boundary_tolerance_m", opts.boundary_tolerance_m, allow_none=True),
        equal_area_crs=opts.equal_area_crs,
        boundary_sample_spacing_m=positive_number(
            "boundary_sample_spacing_m", opts.boundary_sample_spacing_m, allow_none=True
        ),
        tile_size_m=positive_number("tile_size_m", opts.tile_size_m, allow_none=False),  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class RunPlan:
    """Run-wide decisions taken after preparation, shared by every partition.

    Attributes
    ----------
    strata_names : list of str or None
        Sorted stratum names (None without strata).
    sizes : SizeClasses or None
    draws : dict
        Bootstrap draws per (pool, partition), empty without bootstrap.
    """

    strata_names: list[str] | None
    sizes: SizeClasses | None
    draws: dict

    @property
    def n_strata(self) -> int:
        return len(self.strata_names) if self.strata_names is not None else 0

    @property
    def n_sizes(self) -> int:
        return len(self.sizes.keys) if self.sizes is not None else 0

    def group_codes(self, area_m2: np.ndarray, strata: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stratum code, size-class code (-1: none) and bootstrap pool of each field.

        Parameters
        ----------
        area_m2 : ndarray of float64
            Equal-area areas, square metres.
        strata : ndarray of object or None
            Stratum of each field as str (None: missing); ignored without strata.
        """
        n = len(area_m2)
        strata_codes = np.full(n, -1, dtype=np.int64)
        pools = np.full(n, pool_id(None, False), dtype=np.int64)
        if self.strata_names is not None:
            lookup = {name: k for k, name in enumerate(self.strata_names)}
            strata_codes = np.array([-1 if v is None else lookup[v] for v in strata.tolist()], dtype=np.int64)
            pool_of_code = [pool_id(name, True) for name in self.strata_names] + [pool_id(None, True)]
            pools = np.asarray(pool_of_code, dtype=np.int64)[strata_codes]  # code -1 -> the missing pool
        size_codes = self.sizes.codes(area_m2 / 1e4) if self.sizes is not None else np.full(n, -1, dtype=np.int64)
        return strata_codes, size_codes, pools


def make_run_plan(
    counts: dict[tuple[int, int, int], dict[str | None, int]],
    area_range_m2: tuple[float, ...],
    *,
    stratified: bool,
    size_bins: object,
    options: EvalOptions,
) -> RunPlan:
    """The run plan from per-partition counts alone (what the distributed index holds).

    Parameters
    ----------
    counts : dict
        ``{partition key: {stratum or None: number of reference fields}}``; without
        strata, ``{key: {None: n}}``.
    area_range_m2 : tuple of float
        Smallest and largest reference area (empty for an empty layer): all that
        ``size_bins="auto"`` needs.
    """
    names = sorted({name for c in counts.values() for name in c if name is not None}) if stratified else None
    sizes = size_classes(size_bins, np.asarray(area_range_m2, dtype=np.float64) / 1e4) if size_bins is not None else None
    draws: dict = {}
    if options.bootstrap > 0:
        pool_sizes: dict[int, dict[tuple[int, int, int], int]] = {}
        for key, per_stratum in counts.items():
            for name, n in per_stratum.items():
                per_key = pool_sizes.setdefault(pool_id(name, stratified), {})
                per_key[key] = per_key.get(key, 0) + n
        draws = draw_partition_counts(pool_sizes, options.bootstrap, options.bootstrap_seed)
    return RunPlan(names, sizes, draws)


