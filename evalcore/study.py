"""Study areas and the spatial leakage audit: which rows an evaluation is about (SPEC 6.9).

Two optional polygon layers decide, row by row and on both layers alike, what is
evaluated:

* a **study area** keeps the rows that satisfy one rule (``study_area_rule``), the same
  on the reference and the predicted layer, so a field crossing the outline is kept or
  dropped on both sides alike (seed 000, "In the pipeline"). The rule is decided in the
  equal-area CRS, between each row's prepared equal-area geometry and the union of the
  prepared study-area polygons:

  - ``intersects`` (default, agribound's ``"none"`` rule): the row and the study area
    share at least one point; a row that only touches the outline is kept;
  - ``within``: no point of the row lies outside the study area (a row may share the
    outline from inside);
  - ``centroid``: the row's equal-area centroid lies strictly inside the study area
    (a centroid exactly on the outline is out; the AOIs' rule).

* a **training area** (seed 004 §12.3) is audited against: a row is *within the
  buffer* when the distance between the row and the training area, both in the row's
  home UTM zone, is at most ``leakage_buffer_m`` (0: intersecting, touching included;
  a buffer below :data:`TOUCH_TOLERANCE_M` is taken as that, so that a row touching
  the training area still touches it after both are reprojected).
  The row's UTM geometry is the one every distance of the row uses (SPEC 2.4); the
  training area is reprojected into the zone from its equal-area pieces with edges
  split at 50 m, so a long edge is not a chord. With ``exclude_training_area`` the rows
  within the buffer are left out of the evaluation on both layers; otherwise they are
  only counted.

Both are per-row predicates computed in the prepare phase, on the rows SPEC 2's
preparation kept: what a row's predicate says depends only on the row and the layer
given, never on the chunk or partition it was prepared in, so the distributed run
leaves out exactly the rows the single-process run leaves out. Rows dropped as null,
empty, non-polygonal or of zero area stay in ``count_*_dropped``; the study area's
rule then leaves out ``count_*_outside_study_area``, and the leakage audit counts the
rows the study area kept.

Both layers are kept as a cell index with their boundary pieces
(:mod:`evalcore.site_cells`; in a distributed run the pieces, and the study area's union
by block, are files in the work directory read by the chunks that need them): a row in
whole or empty surroundings is answered without geometry, the others from the pieces of
their extent, with the same answer, to the bit, as from every piece held.

This module owns the options (:data:`STUDY_OPTIONS`), the prepared layers
(:func:`prepare_study`), the predicates (:func:`study_area_mask`,
:func:`within_training_buffer`) and the summary keys (:func:`study_keys`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from numbers import Real
from pathlib import Path

import numpy as np
import shapely
from pyproj import CRS

from evalcore._typing import BoolArray, F64Array, GeomArray, IdArray
from evalcore.config import DEFAULT_EQUAL_AREA_CRS, EDGE_SPLIT_M
from evalcore.crs import equal_area_crs_from, max_scale, reproject_polygons, utm_crs
from evalcore.site_cells import BLOCK_CELLS, CellPieces, NearUnion, block_groups, cell_ranges, cells_of_bounds, cut_layer, near_union
from evalcore.sites import STUDY_AREA, TRAINING_AREA, layer_input, prepare_site_layer
from evalcore.metrics.base import Option
from evalcore.metrics.checks import optional_text

__all__ = [
    "STUDY_RULES",
    "STUDY_OPTIONS",
    "StudyArea",
    "TrainingArea",
    "Study",
    "prepare_study",
    "check_study_options",
    "study_area_mask",
    "within_training_buffer",
    "study_keys",
    "LEAKAGE_DISTANCE_CRS",
    "TOUCH_TOLERANCE_M",
]

STUDY_RULES: tuple[str, ...] = ("intersects", "within", "centroid")
"""The study-area rules, in the order ``--help`` lists them."""

LEAKAGE_DISTANCE_CRS = "WGS 84 / UTM zone of each row's centroid"
"""Where the leakage distances are measured (``leakage.distance_crs``)."""

TOUCH_TOLERANCE_M = 1e-3
"""Smallest leakage distance tested, metres: a buffer of 0 means "intersecting or
touching", and two polygons sharing an edge in their source CRS are apart by up to a
few micrometres once reprojected into a UTM zone (a straight source edge is a curve
there; one 50 m piece bends by less than 0.1 mm)."""

_SCALE_SAFETY = 2.0
"""Factor on the equal-area CRS's largest local scale when selecting training pieces."""
_SIZE_MARGIN = 0.02
"""Share of a row's size added to the selection: a row's straight source edges are
chords in its UTM zone but curves in the equal-area CRS (as for the boundary candidates)."""
_MARGIN_M = 1.0
"""Fixed margin of the selection, equal-area metres."""


# --------------------------------------------------------------------------- options


def _rule(name: str, value: object) -> str:
    if value not in STUDY_RULES:
        raise ValueError(f"{name} (--study-area-rule) must be one of {', '.join(map(repr, STUDY_RULES))}, but got {value!r}.")
    return str(value)


def _buffer(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"{name} (--leakage-buffer-m) must be a non-negative finite number of metres, but got {value!r}.")
    return float(value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, but got {value!r}.")
    return bool(value)


STUDY_OPTIONS: tuple[Option, ...] = (
    Option(
        "study_area", None,
        "study-area layer (polygons): both layers keep only the rows --study-area-rule selects; "
        "what it leaves out is counted (default: none)",
        layer_input, annotation=str | None,
    ),
    Option("study_area_layer", None, "layer name inside the study-area file (default: its only layer)", optional_text, annotation=str | None),
    Option(
        "study_area_rule", "intersects",
        "which rows of both layers the study area keeps: intersects (touching included), within, or centroid "
        "(the equal-area centroid strictly inside) (default intersects)",
        _rule, annotation=str, choices=STUDY_RULES,
    ),
    Option(
        "training_area", None,
        "training-area layer (polygons): leakage audit, the rows within --leakage-buffer-m of it (default: none)",
        layer_input, annotation=str | None,
    ),
    Option("training_area_layer", None, "layer name inside the training-area file (default: its only layer)", optional_text, annotation=str | None),
    Option(
        "leakage_buffer_m", 0.0,
        "leakage audit distance to the training area, metres, in each row's UTM zone; 0: intersecting or touching (default 0)",
        _buffer, parse=float, annotation=float,
    ),
    Option(
        "exclude_training_area", False,
        "evaluate without the rows (of both layers) within the leakage buffer of the training area (default: counted, kept)",
        _flag, annotation=bool,
    ),
)
"""The study-area and leakage options (declared once; CLI flags and flow parameters follow)."""


def check_study_options(values: dict) -> None:
    """Refuse study-area and leakage options that would silently do nothing.

    Raises
    ------
    ValueError
        ``leakage_buffer_m`` or ``exclude_training_area`` without a training area;
        ``study_area_rule`` or ``study_area_layer`` without a study area.
    """
    if values["training_area"] is None:
        if values["exclude_training_area"]:
            raise ValueError("exclude_training_area (--exclude-training-area) needs a training area: add --training-area PATH.")
        if values["leakage_buffer_m"] != 0.0:
            raise ValueError("leakage_buffer_m (--leakage-buffer-m) needs a training area: add --training-area PATH.")
        if values["training_area_layer"] is not None:
            raise ValueError("training_area_layer (--training-area-layer) needs a training area: add --training-area PATH.")
    if values["study_area"] is None:
        if values["study_area_rule"] != "intersects":
            raise ValueError("study_area_rule (--study-area-rule) needs a study area: add --study-area PATH.")
        if values["study_area_layer"] is not None:
            raise ValueError("study_area_layer (--study-area-layer) needs a study area: add --study-area PATH.")


# --------------------------------------------------------------------------- prepared layers


@dataclass(frozen=True, slots=True)
class StudyArea:
    """A prepared study area.

    Attributes
    ----------
    rule : str
        One of :data:`STUDY_RULES`.
    union_ea : shapely geometry or None
        The union of the prepared polygons, equal-area CRS; None when ``near`` answers for it.
    pieces : ndarray of shapely geometries or None
        ``union_ea`` cut into grid cells (:func:`evalcore.sites.grid_pieces`); None when
        ``cells`` holds them.
    area_km2 : float
        Area of the union (overlaps counted once), km².
    n_polygons : int
        Rows of the layer.
    source : str
        What the layer is, for messages.
    cells : CellPieces, optional
        The pieces as a cell index (whole and empty cells answered without geometry) and
        boundary pieces, in memory or in the work directory (:mod:`evalcore.site_cells`).
    near : NearUnion, optional
        The union for the rows the pieces leave undecided, whole or by block.
    """

    rule: str
    union_ea: shapely.Geometry | None
    pieces: GeomArray | None
    area_km2: float
    n_polygons: int
    source: str
    cells: CellPieces | None = None
    near: NearUnion | None = None


@dataclass(frozen=True, slots=True)
class TrainingArea:
    """A prepared training area.

    Attributes
    ----------
    pieces : ndarray of shapely geometries or None
        The union of the prepared polygons cut into grid cells, equal-area CRS; None when
        ``cells`` holds them.
    buffer_m : float
        The audit distance, metres (in each row's UTM zone).
    exclude : bool
        Leave the rows within the buffer out of the evaluation.
    area_km2 : float
    n_polygons : int
    equal_area_crs : pyproj.CRS
    source : str
    cells : CellPieces, optional
        The pieces as a cell index and boundary pieces (:mod:`evalcore.site_cells`).
    """

    pieces: GeomArray | None
    buffer_m: float
    exclude: bool
    area_km2: float
    n_polygons: int
    equal_area_crs: CRS
    source: str
    cells: CellPieces | None = None


@dataclass(frozen=True, slots=True)
class Study:
    """What a run is about: its study area and training area (either may be None)."""

    study_area: StudyArea | None = None
    training: TrainingArea | None = None

    @property
    def active(self) -> bool:
        return self.study_area is not None or self.training is not None


def prepare_study(options: object, equal_area_crs: object = None, store: str | os.PathLike | None = None) -> Study:
    """The study area and training area of a run from its options, prepared (SPEC 2).

    Each is cut into grid cells and kept as a cell index with its boundary pieces
    (:mod:`evalcore.site_cells`), and the study area's union for the rows its pieces
    leave undecided (:class:`evalcore.site_cells.NearUnion`).

    Parameters
    ----------
    options : EvalOptions
        ``study_area``, ``study_area_layer``, ``study_area_rule``, ``training_area``,
        ``training_area_layer``, ``leakage_buffer_m``, ``exclude_training_area``.
    equal_area_crs : CRS-like, optional
    store : path, optional
        A directory (the distributed run's ``workdir/sites``): the boundary pieces and
        the union are then written there (``study/``, ``training/``) and each lookup
        reads those of its rows' extent; None: held in memory.

    Raises
    ------
    EvalInputError
        A layer that cannot be read, without a CRS, with no polygon or with a row that
        is not a polygon; the message names the file.
    """
    study_area = training = None
    layer = prepare_site_layer(options, STUDY_AREA, equal_area_crs)
    if layer is not None:
        union = shapely.union_all(layer.geoms_ea)
        cells = cut_layer([layer.geoms_ea])
        if store is not None:
            near = near_union(union, cells, Path(store) / "study")
            cells = cells.without_geometry(Path(store) / "study")
        else:
            near = near_union(union, cells)
        study_area = StudyArea(options.study_area_rule, None, None, float(shapely.area(union)) / 1e6, layer.n_input, layer.source,
                               cells, near)
    layer = prepare_site_layer(options, TRAINING_AREA, equal_area_crs)
    if layer is not None:
        ea_crs = equal_area_crs_from(equal_area_crs if equal_area_crs is not None else DEFAULT_EQUAL_AREA_CRS)
        area = float(shapely.area(shapely.union_all(layer.geoms_ea))) / 1e6
        cells = cut_layer([layer.geoms_ea])
        if store is not None:
            cells = cells.without_geometry(Path(store) / "training")
        training = TrainingArea(None, float(options.leakage_buffer_m), bool(options.exclude_training_area), area,
                                layer.n_input, ea_crs, layer.source, cells)
    return Study(study_area, training)


# --------------------------------------------------------------------------- per-row predicates


def _any_per_row(row_idx: IdArray, n: int) -> BoolArray:
    out = np.zeros(n, dtype=bool)
    out[row_idx] = True
    return out


def study_area_mask(study_area: StudyArea, geoms_ea: GeomArray) -> BoolArray:
    """Which rows the study area keeps (its rule), from their equal-area geometries.

    With a cell index (:attr:`StudyArea.cells`), a row whose cells and a ring of one cell
    around them are all whole cells is kept and one whose cells and ring hold no piece is
    left out, without geometry (for ``centroid``, the cells of its centroid); the others
    are decided on the pieces of their extent, read block by block. Each row is tested
    against the grid pieces (a few hundred vertices each); only what they cannot decide
    goes to the union (:class:`evalcore.site_cells.NearUnion`: the neighbourhood of the
    row's block): a row inside no single piece for ``within``, a centroid on a piece's
    edge for ``centroid``. The answer is the same, to the bit, whichever way a row goes.

    Parameters
    ----------
    study_area : StudyArea
    geoms_ea : ndarray of shapely geometries, shape (n,)
        Prepared rows in the equal-area CRS (none missing).

    Returns
    -------
    ndarray of bool, shape (n,)

    Examples
    --------
    >>> from shapely.geometry import box
    >>> area = StudyArea("intersects", box(0, 0, 10, 10), np.array([box(0, 0, 10, 10)]), 1e-4, 1, "test")
    >>> rows = np.array([box(8, 8, 12, 12), box(10, 0, 11, 1), box(20, 20, 21, 21)])
    >>> study_area_mask(area, rows).tolist()
    [True, True, False]
    >>> from dataclasses import replace
    >>> study_area_mask(replace(area, rule="within"), rows).tolist()
    [False, False, False]
    >>> study_area_mask(area, np.empty(0, dtype=object)).tolist()
    []
    """
    geoms_ea = np.asarray(geoms_ea, dtype=object)
    n = len(geoms_ea)
    if study_area.cells is not None:
        return _mask_by_cells(study_area, geoms_ea)
    if n == 0 or len(study_area.pieces) == 0:
        return np.zeros(n, dtype=bool)
    tree = shapely.STRtree(study_area.pieces)
    rule = study_area.rule
    if rule == "intersects":
        rows, _ = tree.query(geoms_ea, predicate="intersects")
        return _any_per_row(rows, n)
    if rule == "within":
        inside = _any_per_row(tree.query(geoms_ea, predicate="within")[0], n)
        touching = _any_per_row(tree.query(geoms_ea, predicate="intersects")[0], n)
        undecided = np.flatnonzero(touching & ~inside)  # across a grid line, or across the outline
        if len(undecided):
            inside[undecided] = _union_contains(study_area, geoms_ea[undecided])
        return inside
    if rule == "centroid":
        points = shapely.centroid(geoms_ea)
        inside = _any_per_row(tree.query(points, predicate="within")[0], n)
        touching = _any_per_row(tree.query(points, predicate="intersects")[0], n)
        edge = np.flatnonzero(touching & ~inside)  # on a piece's edge: a grid line or the outline
        if len(edge):
            inside[edge] = _union_contains(study_area, points[edge])
        return inside
    raise ValueError(f"study_area_rule must be one of {', '.join(map(repr, STUDY_RULES))}, but got {rule!r}.")


def _union_contains(study_area: StudyArea, geoms: GeomArray) -> BoolArray:
    """``contains(union, geoms)``: from :attr:`StudyArea.near` when the union is not held."""
    if study_area.union_ea is None:
        return study_area.near.contains(geoms)
    shapely.prepare(study_area.union_ea)
    return np.asarray(shapely.contains(study_area.union_ea, geoms), dtype=bool)


def _states(cells: CellPieces, bounds: F64Array, todo: np.ndarray) -> np.ndarray:
    """:meth:`CellPieces.range_state` of the rows ``todo`` marks (boxes ``bounds`` with a ring of one cell), block by block; -1 elsewhere."""
    state = np.full(len(bounds), -1, dtype=np.int8)
    rows = np.flatnonzero(todo)
    for group in block_groups(bounds[rows], cells.cell_m * BLOCK_CELLS):
        state[rows[group]] = cells.range_state(*cell_ranges(bounds[rows[group]], cells.cell_m))
    return state


def _by_extent(cells: CellPieces, bounds: F64Array, rows: IdArray) -> list[tuple[IdArray, GeomArray]]:
    """The rows ``rows`` in groups by block, each with the pieces of its boxes' extent (``bounds`` rows)."""
    out = []
    for group in block_groups(bounds[rows], cells.cell_m * BLOCK_CELLS):
        sel = rows[group]
        b = bounds[sel]
        extent = (b[:, 0].min(), b[:, 1].min(), b[:, 2].max(), b[:, 3].max())
        out.append((sel, cells.pieces_in(cells_of_bounds(extent, cells.cell_m))[0]))
    return out


def _mask_by_cells(study_area: StudyArea, geoms_ea: GeomArray) -> BoolArray:
    """:func:`study_area_mask` from a cell index: whole and empty surroundings without geometry, the rest by extent."""
    n = len(geoms_ea)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    tested = shapely.centroid(geoms_ea) if study_area.rule == "centroid" else geoms_ea
    bounds = shapely.bounds(tested)
    finite = np.isfinite(bounds).all(axis=1)  # an empty row is in no study area, as its pieces say
    state = _states(study_area.cells, bounds, finite)
    out[state == 1] = True
    for rows, pieces in _by_extent(study_area.cells, bounds, np.flatnonzero(finite & (state < 0))):
        out[rows] = study_area_mask(replace(study_area, pieces=pieces, cells=None), geoms_ea[rows])
    return out


def within_training_buffer(
    training: TrainingArea, geoms_ea: GeomArray, geoms_utm: GeomArray, utm_epsg: IdArray, lon: F64Array, lat: F64Array
) -> BoolArray:
    """Which rows lie within ``training.buffer_m`` of the training area, in each row's UTM zone.

    A row is within when ``distance(row, training area) <= max(buffer_m,
    TOUCH_TOLERANCE_M)`` with both in the row's home zone (the row's UTM geometry; the
    training area's equal-area pieces reprojected into the zone with edges split at
    50 m); at 0, when they intersect or touch. Pieces are first selected in the equal-area CRS by boxes grown
    by twice the buffer times the CRS's largest local scale, plus 2 % of the row's size
    and 1 m, so the selection never misses a piece the zone's distance would reach; the
    answer for a row depends only on the row and the pieces.

    With a cell index (:attr:`TrainingArea.cells`), a row whose grown box's cells (and a
    ring of one cell) hold no piece selects none and is not within; a row whose cells and
    ring are all whole cells lies inside the training area, a cell or more from its
    outline, and is within (its distance to the piece it overlaps is 0 up to the
    reprojections' sub-millimetre differences, below :data:`TOUCH_TOLERANCE_M`); the
    others are decided on the pieces of their grown boxes' extent, block by block.

    Parameters
    ----------
    training : TrainingArea
    geoms_ea, geoms_utm : ndarray of shapely geometries, shape (n,)
        The rows in the equal-area CRS and in their home zone.
    utm_epsg : ndarray of int64, shape (n,)
    lon, lat : ndarray of float64, shape (n,)
        The rows' centroids, degrees (for the equal-area CRS's local scale).

    Returns
    -------
    ndarray of bool, shape (n,)
    """
    n = len(geoms_ea)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    boxes = _selection_boxes(training, geoms_ea, lon, lat)
    if training.cells is not None:
        geoms_ea, geoms_utm = np.asarray(geoms_ea, dtype=object), np.asarray(geoms_utm, dtype=object)
        utm_epsg, lon, lat = np.asarray(utm_epsg), np.asarray(lon, np.float64), np.asarray(lat, np.float64)
        grown = shapely.bounds(boxes)
        finite = np.isfinite(grown).all(axis=1)
        near = _states(training.cells, grown, finite)
        inside = _states(training.cells, shapely.bounds(geoms_ea), finite & (near != 0))
        out[inside == 1] = True
        for rows, pieces in _by_extent(training.cells, grown, np.flatnonzero(finite & (near != 0) & (inside != 1))):
            out[rows] = within_training_buffer(replace(training, pieces=pieces, cells=None), geoms_ea[rows], geoms_utm[rows],
                                               utm_epsg[rows], lon[rows], lat[rows])
        return out
    if len(training.pieces) == 0:
        return out
    distance = max(training.buffer_m, TOUCH_TOLERANCE_M)
    row, piece = shapely.STRtree(training.pieces).query(boxes)
    if len(row) == 0:
        return out
    hit = np.zeros(len(row), dtype=bool)
    zone_of_pair = np.asarray(utm_epsg, dtype=np.int64)[row]
    for code in np.unique(zone_of_pair):
        sel = np.flatnonzero(zone_of_pair == code)
        used, inverse = np.unique(piece[sel], return_inverse=True)
        in_zone = reproject_polygons(training.pieces[used], training.equal_area_crs, utm_crs(int(code)), split=EDGE_SPLIT_M)
        hit[sel] = shapely.dwithin(geoms_utm[row[sel]], in_zone[np.asarray(inverse).ravel()], distance)
    out[row[hit]] = True
    return out


def _selection_boxes(training: TrainingArea, geoms_ea: GeomArray, lon: F64Array, lat: F64Array) -> GeomArray:
    """Each row's box grown by twice the buffer times the equal-area CRS's largest local scale, plus 2 % of its size and 1 m."""
    scale = max_scale(training.equal_area_crs, np.asarray(lon, np.float64), np.asarray(lat, np.float64))
    b = shapely.bounds(geoms_ea)
    size = np.hypot(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
    distance = max(training.buffer_m, TOUCH_TOLERANCE_M)
    grow = _SCALE_SAFETY * scale * distance + _SIZE_MARGIN * size + _MARGIN_M
    return shapely.box(b[:, 0] - grow, b[:, 1] - grow, b[:, 2] + grow, b[:, 3] + grow)


# --------------------------------------------------------------------------- summary


def _share(part: int, whole: int) -> float:
    return part / whole if whole > 0 else float("nan")


def study_keys(study: Study | None, counts: dict[str, int]) -> dict[str, object]:
    """The run-level keys of the study area and the leakage audit (none without them).

    Parameters
    ----------
    study : Study or None
    counts : dict
        Per role (``reference``, ``predicted``): ``outside_{role}`` (rows the study
        area left out), ``within_{role}`` (rows within the training buffer) and
        ``kept_{role}`` (rows evaluated).

    Returns
    -------
    dict
        ``count_reference_outside_study_area``, ``count_predicted_outside_study_area``
        and ``study_area`` (``rule``, ``area_km2``, ``count_polygons``) with a study
        area; ``leakage`` with a training area: ``buffer_m``, ``distance_crs``,
        ``count_reference_within_buffer``, ``count_predicted_within_buffer``, the rows
        audited (``count_*_audited``: those the study area kept), ``fraction`` and
        ``fraction_predicted`` (within / audited; null when nothing was audited),
        ``excluded``, ``training_area_km2``, ``count_polygons`` and, when excluded, a
        ``note``.
    """
    out: dict[str, object] = {}
    if study is None:
        return out
    if study.study_area is not None:
        s = study.study_area
        out["count_reference_outside_study_area"] = int(counts["outside_reference"])
        out["count_predicted_outside_study_area"] = int(counts["outside_predicted"])
        out["study_area"] = {"rule": s.rule, "area_km2": s.area_km2, "count_polygons": s.n_polygons}
    if study.training is not None:
        t = study.training
        within = {role: int(counts[f"within_{role}"]) for role in ("reference", "predicted")}
        audited = {role: int(counts[f"kept_{role}"]) + (within[role] if t.exclude else 0) for role in within}
        block: dict[str, object] = {
            "buffer_m": t.buffer_m,
            "distance_crs": LEAKAGE_DISTANCE_CRS,
            "count_reference_within_buffer": within["reference"],
            "count_predicted_within_buffer": within["predicted"],
            "count_reference_audited": audited["reference"],
            "count_predicted_audited": audited["predicted"],
            "fraction": _share(within["reference"], audited["reference"]),
            "fraction_predicted": _share(within["predicted"], audited["predicted"]),
            "excluded": t.exclude,
            "training_area_km2": t.area_km2,
            "count_polygons": t.n_polygons,
        }
        if t.exclude:
            block["note"] = (
                f"the {within['reference']} reference fields and {within['predicted']} predictions within "
                f"{t.buffer_m:g} m of the training area are excluded from every metric"
            )
        out["leakage"] = block
    return out
