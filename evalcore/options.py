"""Evaluation options, declared once, and the run-wide plan shared by every partition.

The options are the engine's own (:data:`CORE_OPTIONS`: bootstrap, equal-area CRS,
partition tile) plus those each metric family declares (:mod:`evalcore.metrics`).
:func:`all_options` is the one list from which :func:`check_options` (the library's
validation), the CLI flags (:mod:`evalcore.cli`) and the flow parameters
(:mod:`flows.params`) are generated.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass

import numpy as np

from evalcore.bootstrap import BOOTSTRAP_UNITS, pool_id
from evalcore.config import DEFAULT_PARTITION_SIZE_M, DEFAULT_TILE_KM
from evalcore.groups import SizeClasses, size_classes
from evalcore.metrics.registry import FAMILIES, enabled_families, family_options
from evalcore.metrics.base import Option
from evalcore.sites import layer_input
from evalcore.metrics.checks import any_value, choice, non_negative_int, optional_text, positive, positive_int
from evalcore.pixels import PIXEL_OPTIONS, window_bytes
from evalcore.study import STUDY_OPTIONS, check_study_options

__all__ = [
    "CORE_OPTIONS",
    "EvalOptions",
    "all_options",
    "check_options",
    "RunPlan",
    "make_run_plan",
    "base_threshold",
]


def _km(value: object) -> float:
    return float(value) * 1000.0


MIN_PARTITION_SIZE_M = 50.0
"""The smallest partition tile side (metres). Partition indices are ``floor(x / size)`` in
int64: a tiny size overflows them (``--partition-km 1e-20``), and tiles much smaller than
a field only multiply the work. 50 m keeps the property tests' 60 m partitions, which
put many fields across partition lines on purpose."""


def _partition_size(name: str, value: object) -> float:
    try:
        size = positive(name, value)
    except ValueError:
        size = None
    if size is None or size < MIN_PARTITION_SIZE_M:
        raise ValueError(
            f"{name} (--partition-km) must be a finite length of at least {MIN_PARTITION_SIZE_M:g} m "
            f"({MIN_PARTITION_SIZE_M / 1000:g} km), but got {value!r} m."
        )
    return size


CORE_OPTIONS: tuple[Option, ...] = (
    Option(
        "bootstrap", 0, "number of bootstrap resamples for 95 % percentile intervals (default 0: none)",
        non_negative_int, parse=int, annotation=int,
    ),
    Option("bootstrap_seed", 42, "seed of the bootstrap draws (default 42)", non_negative_int, parse=int, annotation=int),
    Option(
        "bootstrap_unit", "field",
        "what a resample draws: field (reference fields within strata), tile (reporting tiles, a block bootstrap) "
        "or aoi (AOIs) (default field)",
        lambda name, value: choice(name, value, BOOTSTRAP_UNITS), annotation=str, choices=BOOTSTRAP_UNITS,
    ),
    Option(
        "equal_area_crs", None, "equal-area CRS for areas and IoU, metres (default EPSG:6933)",
        any_value, annotation=str | None,
    ),
    Option(
        "min_support", 30,
        "a group with fewer reference fields is marked insufficient_support and never the worst group (default 30)",
        positive_int, parse=int, annotation=int,
    ),
    Option(
        "partition_size_m", DEFAULT_PARTITION_SIZE_M,
        "side of the partition tiles in kilometres; changes no point estimate (default 50)",
        _partition_size, parse=float, flag="--partition-km", cli_default=DEFAULT_PARTITION_SIZE_M / 1000.0, to_option=_km, annotation=float,
    ),
    Option(
        "tile_km", DEFAULT_TILE_KM,
        "side of the reporting tiles (per-tile metrics, docs/metrics.md \"Tiles and AOIs\") in kilometres, in each UTM zone (default 10)",
        positive, parse=float, annotation=float,
    ),
    Option(
        "aoi", None, "AOI layer (polygons; any format the readers take): metrics per AOI (default: none)",
        layer_input, annotation=str | None,
    ),
    Option("aoi_id_column", None, "column of unique AOI ids (required with --aoi)", optional_text, annotation=str | None),
    Option("aoi_layer", None, "layer name inside the AOI file (default: its only layer)", optional_text, annotation=str | None),
)

RENAMED_OPTIONS: dict[str, str] = {"tile_size_m": "partition_size_m"}
"""Options of earlier versions under their new name (accepted with a DeprecationWarning)."""


def all_options() -> tuple[Option, ...]:
    """Every option: the engine's, the pixel metrics', the study area's, then each registered family's, in registry order."""
    return CORE_OPTIONS + PIXEL_OPTIONS + STUDY_OPTIONS + family_options()


class EvalOptions:
    """Validated evaluation options, read as attributes (``options.iou_threshold``).

    Immutable and picklable; made by :func:`check_options`.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, object]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> object:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no evaluation option {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to option {name!r}")

    def __reduce__(self) -> tuple:
        return (EvalOptions, (self._values,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EvalOptions) and self._values == other._values

    def __hash__(self) -> int:
        return hash(repr(sorted(self._values.items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        return "EvalOptions(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def as_dict(self) -> dict[str, object]:
        return dict(self._values)



def check_options(**kwargs: object) -> EvalOptions:
    """Validate evaluation options; missing ones take their defaults.

    Raises
    ------
    ValueError
        Names the option, its rule and the value.
    TypeError
        For an option no family declares.
    """
    declared = {option.name: option for option in all_options()}
    for old, new in RENAMED_OPTIONS.items():
        if old in kwargs:
            if new in kwargs:
                raise TypeError(f"{old!r} is the old name of {new!r}; give only {new!r}.")
            warnings.warn(f"the option {old!r} is now {new!r} (the partition size, not the reporting tiles)", DeprecationWarning, stacklevel=3)
            kwargs[new] = kwargs.pop(old)
    unknown = sorted(set(kwargs) - set(declared))
    if unknown:
        raise TypeError(f"unknown evaluation option(s) {', '.join(map(repr, unknown))}; valid: {', '.join(declared)}.")
    values = {}
    for name, option in declared.items():
        value = kwargs.get(name, option.default)
        values[name] = option.check(name, value)
    if values["pixel_gsd_m"] is not None:
        # A GSD that makes one tile (or its halo) too large is refused before any work.
        window_bytes(values["pixel_gsd_m"], values["tile_km"] * 1000.0, values["pixel_tolerance_px"])
    check_study_options(values)
    for family in FAMILIES:
        family.check_options(values)
    if values["bootstrap_unit"] == "aoi" and values["aoi"] is None:
        raise ValueError("bootstrap_unit='aoi' (--bootstrap-unit aoi) draws AOIs: give an AOI layer (--aoi PATH --aoi-id-column C).")
    return EvalOptions(values)


def base_threshold(options: EvalOptions) -> float:
    """The lowest IoU threshold the run's matching must serve (the main one and any family's)."""
    lows = [f.lowest_threshold(options) for f in enabled_families(options)]
    return min([options.iou_threshold] + [t for t in lows if t is not None])


@dataclass(frozen=True, slots=True)
class RunPlan:
    """Run-wide decisions taken after preparation, shared by every partition.

    The groupings are data: ``strata`` and ``size classes`` are lists of group keys, and
    every reference row gets one code per grouping (:meth:`group_codes`). Group 0 of the
    flat group axis is the overall group; then the strata, then the size classes.

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
    def groupings(self) -> list[tuple[str, list[str]]]:
        """``(output key, group keys)`` of each grouping besides the overall one."""
        out = []
        if self.strata_names is not None:
            out.append(("per_stratum", list(self.strata_names)))
        if self.sizes is not None:
            out.append(("per_size_class", list(self.sizes.keys)))
        return out

    @property
    def n_groups(self) -> int:
        """Length of the flat group axis: overall, then every group of every grouping."""
        return 1 + sum(len(keys) for _, keys in self.groupings)

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

    def flat_groups(self, strata_codes: np.ndarray, size_codes: np.ndarray) -> np.ndarray:
        """Each field's index on the flat group axis in every grouping, shape (n, n_groupings); -1: in none."""
        columns = []
        offset = 1
        if self.strata_names is not None:
            columns.append(np.where(strata_codes >= 0, strata_codes + offset, -1))
            offset += self.n_strata
        if self.sizes is not None:
            columns.append(np.where(size_codes >= 0, size_codes + offset, -1))
        if not columns:
            return np.empty((len(strata_codes), 0), dtype=np.int64)
        return np.ascontiguousarray(np.stack(columns, axis=1), dtype=np.int64)


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
    # The bootstrap draws are made in the resolve phase, keyed by reporting tile or unit
    # (evalcore.bootstrap.RunDraws), so that they do not depend on the partitions.
    return RunPlan(names, sizes, {})
