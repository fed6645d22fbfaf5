"""Validated evaluation options and the run-wide plan shared by every partition."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

from evalcore.config import BOUNDARY_SAMPLE_SPACING_M, DEFAULT_TILE_SIZE_M
from evalcore.groups import SizeClasses
from evalcore.matching import check_matching

__all__ = ["EvalOptions", "check_options", "RunPlan", "positive_number"]


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


