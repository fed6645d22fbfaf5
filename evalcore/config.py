"""Defaults and public constants of the evaluation contract (SPEC.md)."""

from __future__ import annotations

MATCHING_METHODS: tuple[str, ...] = ("one_to_one", "many_to_one", "max_weight")
"""Valid values of the ``matching`` argument (``max_weight``: the optimal one-to-one matcher of SPEC 6.11)."""

BOUNDARY_SAMPLE_SPACING_M: float = 1.0
"""Default spacing of boundary samples, metres."""

BOUNDARY_MAX_SAMPLES: int = 1000
"""With spacing ``None`` a boundary is sampled at ``max(1 m, perimeter / 1000)``."""

BOOTSTRAP_CONFIDENCE_LEVEL: float = 0.95
"""Coverage of the percentile bootstrap intervals."""

DEFAULT_EQUAL_AREA_CRS: str = "EPSG:6933"
"""Areas and IoU are computed in this CRS unless the caller gives another."""

EDGE_SPLIT_M: float = 50.0
"""Edges are split into pieces of at most this length (metres) before reprojection."""

AREA_WARNING_RTOL: float = 1e-4
"""A user-given equal-area CRS that changes an area by more than 0.01 % is warned about."""

IOU_MATCH_RTOL: float = 1e-9
"""A pair can match when ``IoU >= iou_threshold * (1 - IOU_MATCH_RTOL)``."""

DEFAULT_PARTITION_SIZE_M: float = 50_000.0
"""Side of the square partition tiles in each UTM zone, metres (the work, not the report)."""

DEFAULT_TILE_KM: float = 10.0
"""Side of the square reporting tiles in each UTM zone, kilometres (SPEC 6.3)."""

METRES_PER_DEGREE: float = 111_320.0
"""Length of one degree of latitude (and of longitude at the equator), metres, rounded up.

Used only to express the 50 m edge split in degrees for geographic CRSs: a degree of
longitude away from the equator is shorter, so pieces stay below 50 m.
"""

NUMBA_OPTIONS: dict[str, bool] = {"cache": True, "nogil": True}
"""Options of every numba kernel. No ``fastmath``: reassociation would break the
equality of distributed and single-process results."""

__all__ = [
    "MATCHING_METHODS",
    "BOUNDARY_SAMPLE_SPACING_M",
    "BOUNDARY_MAX_SAMPLES",
    "BOOTSTRAP_CONFIDENCE_LEVEL",
    "DEFAULT_EQUAL_AREA_CRS",
    "EDGE_SPLIT_M",
    "AREA_WARNING_RTOL",
    "IOU_MATCH_RTOL",
    "DEFAULT_PARTITION_SIZE_M",
    "DEFAULT_TILE_KM",
    "METRES_PER_DEGREE",
    "NUMBA_OPTIONS",
]

IOU_SWEEP_THRESHOLDS: tuple[float, ...] = tuple(round(0.5 + 0.05 * k, 2) for k in range(10))
"""Default thresholds of the IoU sweep (SPEC 6): 0.50, 0.55, ..., 0.95."""

MAJORITY_FRACTION: float = 0.5
"""A cover or a hold needs strictly more than this share of a polygon (SPEC 6.2)."""

__all__ += ["IOU_SWEEP_THRESHOLDS", "MAJORITY_FRACTION"]
