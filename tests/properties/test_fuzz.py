"""Fuzzing: random valid, invalid and degenerate polygons never make ``evaluate`` raise.

Layers mix valid polygons (boxes, star-shaped and convex polygons, polygons with holes,
multipolygons) with invalid ones (self-crossing rings, bow-ties, spikes, overlapping
multipolygon parts, holes outside or across their shell) and degenerate ones (collinear
rings, repeated vertices, slivers a micrometre wide, tiny polygons), plus null, empty,
point, line and collection rows, in EPSG:32613 with finite coordinates. (NaN and
infinite coordinates are refused with an error by design: tests/reliability.)

Invariants: rates in [0, 1]; TP + FN = count_reference; one-to-one TP + FP =
count_predicted; kept + dropped rows = input rows; every tolerance length is at most
its perimeter; and partial sums of a random split of both layers into two partitions
(pairs computed per partition against the whole other layer, matching resolved
globally, as the distributed runner does) equal the sums of the whole.

Example counts come from the hypothesis profile (tests/conftest.py): each test runs
the profile's examples, so 50 per test in ``make test`` (profile "ci") and 10 000 per
test with ``HYPOTHESIS_PROFILE=slow`` (``make fuzz``).
"""

from __future__ import annotations

import dataclasses

import math

import geopandas
import numpy as np
import pandas as pd
import shapely
from hypothesis import given, note, settings
from hypothesis import strategies as st
from shapely.geometry import GeometryCollection, LineString, MultiPolygon, Point, Polygon, box

from evalcore.api import evaluate_with_frame
from evalcore.engine.pairing import compute_pairs, concat_pair_results
from evalcore.engine.resolve import resolve_run, route
from evalcore.engine.sums import RefRows, merge_partitions, summarize_partition
from evalcore.options import RunPlan, check_options
from evalcore.prepare import prepare_layer

X0, Y0 = 500_000.0, 4_400_000.0
CRS = "EPSG:32613"
SPAN = 1_500.0
MAX_ROWS = 8
EXAMPLES = settings.default.max_examples
FUZZ = settings(max_examples=EXAMPLES)

RATE_KEYS = (
    "precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision", "area_weighted_recall",
    "area_weighted_f1", "over_segmentation", "under_segmentation", "boundary_precision", "boundary_recall",
    "boundary_f1", "coverage_within_tolerance", "coverage_within_tolerance_area",
)
TOPOLOGY_COLUMNS = ("merges", "merged_reference", "splits", "split_predictions")
COUNT_COLUMNS = ("n_ref", "tp", "n_ref_with_overlap", "n_ref_overseg", "n_within_tol", "n_pred", "n_pred_matched", "n_pred_underseg")

# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------

coord = st.floats(0.0, SPAN, allow_nan=False, allow_infinity=False)
size = st.floats(1.0, 400.0)


def _xy(x: float, y: float) -> tuple[float, float]:
    return (X0 + x, Y0 + y)


@st.composite
def boxes(draw: st.DrawFn) -> Polygon:
    x, y, w, h = draw(coord), draw(coord), draw(size), draw(size)
    return box(*_xy(x, y), *_xy(x + w, y + h))


@st.composite
def star_polygons(draw: st.DrawFn) -> Polygon:
    """Vertices sorted by angle around a centre: simple, may have collinear or repeated vertices."""
    cx, cy = draw(coord), draw(coord)
    n = draw(st.integers(3, 10))
    angles = sorted(draw(st.lists(st.floats(0.0, 2 * math.pi, exclude_max=True), min_size=n, max_size=n)))
    radii = draw(st.lists(st.floats(0.5, 200.0), min_size=n, max_size=n))
    return Polygon([_xy(cx + r * math.cos(a), cy + r * math.sin(a)) for a, r in zip(angles, radii)])


@st.composite
def convex_polygons(draw: st.DrawFn) -> object:
    """Convex hull of a few points (a point or a line when they coincide or are collinear)."""
    pts = draw(st.lists(st.tuples(coord, coord), min_size=1, max_size=8))
    return shapely.convex_hull(shapely.multipoints([_xy(x, y) for x, y in pts]))


@st.composite
def polygons_with_holes(draw: st.DrawFn) -> Polygon:
    """A box with holes: inside (valid), touching or crossing the shell, overlapping, outside."""
    x, y, w, h = draw(coord), draw(coord), draw(st.floats(20.0, 400.0)), draw(st.floats(20.0, 400.0))
    holes = []
    for _ in range(draw(st.integers(1, 3))):
        hx, hy = draw(st.floats(-0.3, 1.1)), draw(st.floats(-0.3, 1.1))
        hw, hh = draw(st.floats(0.01, 0.6)), draw(st.floats(0.01, 0.6))
        holes.append(box(*_xy(x + hx * w, y + hy * h), *_xy(x + (hx + hw) * w, y + (hy + hh) * h)).exterior.coords)
    return Polygon(box(*_xy(x, y), *_xy(x + w, y + h)).exterior.coords, holes)


@st.composite
def random_rings(draw: st.DrawFn) -> Polygon:
    """Random vertices in a small window: usually self-crossing, sometimes repeated or collinear."""
    cx, cy, r = draw(coord), draw(coord), draw(st.floats(1.0, 300.0))
    grid = st.integers(-4, 4)  # a coarse grid makes coincident and collinear vertices common
    pts = draw(st.lists(st.tuples(grid, grid), min_size=3, max_size=9))
    return Polygon([_xy(cx + r * a / 4, cy + r * b / 4) for a, b in pts])


@st.composite
def bow_ties(draw: st.DrawFn) -> Polygon:
    x, y, w, h = draw(coord), draw(coord), draw(size), draw(size)
    return Polygon([_xy(x, y), _xy(x + w, y + h), _xy(x + w, y), _xy(x, y + h)])


@st.composite
def spikes(draw: st.DrawFn) -> Polygon:
    """A box with an out-and-back spike (a self-touching ring)."""
    x, y, w, h = draw(coord), draw(coord), draw(size), draw(size)
    reach = draw(st.floats(0.0, 300.0))
    return Polygon([_xy(x, y), _xy(x + w, y), _xy(x + w, y + h / 2), _xy(x + w + reach, y + h / 2),
                    _xy(x + w, y + h / 2), _xy(x + w, y + h), _xy(x, y + h)])


@st.composite
def collinear_rings(draw: st.DrawFn) -> Polygon:
    x, y, dx, dy = draw(coord), draw(coord), draw(st.floats(-100, 100)), draw(st.floats(-100, 100))
    ts = draw(st.lists(st.floats(0.0, 3.0), min_size=3, max_size=6))
    return Polygon([_xy(x + t * dx, y + t * dy) for t in ts])


@st.composite
def repeated_vertices(draw: st.DrawFn) -> Polygon:
    base = draw(st.one_of(boxes(), star_polygons()))
    coords = list(base.exterior.coords)[:-1]
    reps = draw(st.lists(st.integers(1, 4), min_size=len(coords), max_size=len(coords)))
    return Polygon([c for c, k in zip(coords, reps) for _ in range(k)])


@st.composite
def slivers(draw: st.DrawFn) -> object:
    """A long rectangle a micrometre to a centimetre wide, at any angle."""
    x, y, length = draw(coord), draw(coord), draw(st.floats(1.0, 500.0))
    width, angle = draw(st.sampled_from([1e-6, 1e-4, 1e-3, 1e-2])), draw(st.floats(0.0, 180.0))
    return shapely.affinity.rotate(box(*_xy(x, y), *_xy(x + length, y + width)), angle, origin=_xy(x, y))


@st.composite
def tiny(draw: st.DrawFn) -> Polygon:
    x, y, side = draw(coord), draw(coord), draw(st.sampled_from([1e-4, 1e-2, 0.1]))
    return box(*_xy(x, y), *_xy(x + side, y + side))


@st.composite
def multipolygons(draw: st.DrawFn) -> MultiPolygon:
    """Two or three parts; they may overlap or touch (invalid) or be apart (valid); some have holes."""
    parts = draw(st.lists(st.one_of(boxes(), star_polygons(), polygons_with_holes()), min_size=2, max_size=3))
    return MultiPolygon([p for p in parts if isinstance(p, Polygon) and not p.is_empty] or [box(X0, Y0, X0 + 1, Y0 + 1)])


@st.composite
def other_rows(draw: st.DrawFn) -> object:
    """Rows that are not polygons: null, empty, points, lines, collections with or without a polygon."""
    x, y = draw(coord), draw(coord)
    return draw(st.sampled_from([
        None, Polygon(), Point(*_xy(x, y)), LineString([_xy(x, y), _xy(x + 50, y + 20)]),
        GeometryCollection([box(*_xy(x, y), *_xy(x + 60, y + 40)), Point(*_xy(x, y)), LineString([_xy(x, y), _xy(x + 9, y)])]),
        GeometryCollection([Point(*_xy(x, y))]),
    ]))


VALID = st.one_of(boxes(), star_polygons(), convex_polygons(), polygons_with_holes(), multipolygons())
INVALID = st.one_of(random_rings(), bow_ties(), spikes(), polygons_with_holes(), multipolygons())
DEGENERATE = st.one_of(collinear_rings(), repeated_vertices(), slivers(), tiny())
ANY_ROW = st.one_of(VALID, VALID, INVALID, DEGENERATE, other_rows())


@st.composite
def layer_pairs(draw: st.DrawFn) -> tuple[list, list]:
    """(predicted, reference): the predictions are moved, scaled copies of some reference rows plus random rows."""
    ref = draw(st.lists(ANY_ROW, max_size=MAX_ROWS))
    pred = []
    for g in ref:
        if g is not None and draw(st.booleans()):
            dx, dy, f = draw(st.floats(-30, 30)), draw(st.floats(-30, 30)), draw(st.floats(0.7, 1.3))
            pred.append(shapely.affinity.translate(shapely.affinity.scale(g, f, f), dx, dy))
    pred += draw(st.lists(ANY_ROW, max_size=MAX_ROWS - min(len(pred), MAX_ROWS)))
    return draw(st.permutations(pred[:MAX_ROWS])), ref


def _note_wkt(pred: list, ref: list) -> None:
    """Full WKT in the report of a failing example (shapely's repr is cut short)."""
    note(f"predicted = {[None if g is None else g.wkt for g in pred]!r}")
    note(f"reference = {[None if g is None else g.wkt for g in ref]!r}")


def _layer(geoms: list) -> geopandas.GeoDataFrame:
    return geopandas.GeoDataFrame(geometry=geopandas.GeoSeries(np.array(geoms, dtype=object), crs=CRS), crs=CRS)


# --------------------------------------------------------------------------------------
# evaluate never raises, and the invariants hold
# --------------------------------------------------------------------------------------


@FUZZ
@given(
    pair=layer_pairs(),
    thr=st.sampled_from([0.1, 0.5, 0.75, 1.0]),
    matching=st.sampled_from(["one_to_one", "many_to_one", "max_weight"]),
    tol=st.sampled_from([None, 0.5, 5.0]),
    spacing=st.sampled_from([None, 10.0]),
)
def test_evaluate_never_raises_and_invariants_hold(pair, thr, matching, tol, spacing):
    pred_geoms, ref_geoms = pair
    _note_wkt(pred_geoms, ref_geoms)
    pred, ref = _layer(pred_geoms), _layer(ref_geoms)
    m, frame = evaluate_with_frame(pred, ref, iou_threshold=thr, matching=matching, boundary_tolerance_m=tol,
                                   boundary_sample_spacing_m=spacing)

    for key in RATE_KEYS:
        if key in m:
            assert 0.0 <= m[key] <= 1.0, (key, m[key])
    assert m["count_tp"] + m["count_fn"] == m["count_reference"]
    assert m["count_reference"] + m["count_reference_dropped"] == len(ref)
    assert m["count_predicted"] + m["count_predicted_dropped"] == len(pred)
    assert 0 <= m["count_reference_repaired"] <= m["count_reference"]
    assert 0 <= m["count_predicted_repaired"] <= m["count_predicted"]
    assert 0 <= m["count_fp_unassigned"] <= m["count_fp"]
    if matching == "one_to_one":
        assert m["count_tp"] + m["count_fp"] == m["count_predicted"]
    else:
        assert m["count_tp"] + m["count_fp"] >= m["count_predicted"]
    for key in ("oversegmentation_mean", "undersegmentation_mean"):
        assert math.isnan(m[key]) or -1e-12 <= m[key] <= 1.0 + 1e-12, key
    for key in ("hausdorff_mean_m", "boundary_distance_mean_m", "area_error_mean_m2"):
        assert math.isnan(m[key]) or m[key] >= 0.0, key

    assert len(frame) == m["count_reference"]
    assert (frame["area_m2"] > 0).all() and (frame["perimeter_m"] > 0).all()
    assert ((frame["iou"].isna()) | frame["iou"].between(0.0, 1.0)).all()
    if tol is not None:
        within, perimeter = frame["boundary_within_tolerance_m"].to_numpy(), frame["perimeter_m"].to_numpy()
        assert (within >= 0.0).all() and (within <= perimeter).all(), np.c_[within, perimeter]
        assert m["coverage_within_tolerance"] <= 1.0


@FUZZ
@given(geoms=st.lists(ANY_ROW, max_size=2 * MAX_ROWS))
def test_prepare_keeps_only_valid_polygons_with_positive_area(geoms):
    prep = prepare_layer(_layer(geoms), "reference")
    assert len(prep) + prep.n_dropped == prep.n_input == len(geoms)
    assert 0 <= prep.n_repaired <= len(prep)
    assert np.all(np.diff(prep.positions) > 0)
    if len(prep):
        assert shapely.is_valid(prep.geoms_source).all() and shapely.is_valid(prep.geoms_ea).all()
        assert np.isin(shapely.get_type_id(prep.geoms_source), [3, 6]).all()
        assert (prep.area_m2 > 0).all() and np.isfinite(prep.area_m2).all()
        assert (prep.perimeter_m > 0).all() and np.isfinite(prep.perimeter_m).all()


# --------------------------------------------------------------------------------------
# A random split into partitions gives the sums of the whole
# --------------------------------------------------------------------------------------


def _same_order(a: dict, b: dict) -> bool:
    """Equal order statistics, NaN equal to NaN and every float to the bit."""
    def bits(x):
        return ("nan",) if isinstance(x, float) and x != x else (type(x).__name__, repr(x))
    flat = lambda o: {(g, c, k): bits(v) for g, cols in o.items() for c, st in cols.items() for k, v in st.items()}
    return flat(a) == flat(b)


def _partitioned_sums(ref, pred, ref_part: np.ndarray, pred_part: np.ndarray, thr: float, tol: float | None, matching: str):
    """Phases 2-4 as the distributed runner runs them, with the given partition of each row.

    Each partition computes the pairs of its own reference fields against every
    prediction (a complete halo) and the tolerance lengths of its own rows; the matching
    is resolved over all pairs (:func:`resolve_run`) and routed with the engine's one
    :func:`route`; each partition sums its fields and their home predictions.
    """
    options = check_options(iou_threshold=thr, matching=matching, boundary_tolerance_m=tol)
    keys = sorted(set(ref_part.tolist()) | set(pred_part.tolist()))
    results = []
    for k in keys:
        own_ref, own_pred = ref.take(np.flatnonzero(ref_part == k)), pred.take(np.flatnonzero(pred_part == k))
        results.append(compute_pairs(own_ref, pred, pred_own=own_pred, ref_near=ref, iou_threshold=thr,
                                     boundary_tolerance_m=tol, boundary_sample_spacing_m=None))
    everything, part_of_ref = concat_pair_results(results)
    resolved = resolve_run(everything, options)
    routing = route(everything.ref_pos, part_of_ref, len(keys), everything.pairs.ref_pos, resolved.contributions.ref_pos)
    plan = RunPlan(None, None, {})
    parts = []
    for i, k in enumerate(keys):
        rows = routing.ref_rows[i]
        own = ref.take(np.searchsorted(ref.positions, everything.ref_pos[rows]))
        refs = RefRows.of_layer(own, None, plan)
        pair_rows = routing.pair_rows[i]
        summary, _ = summarize_partition(
            (0, 0, k), refs, everything.restrict(pair_rows, rows),
            {name: values[pair_rows] for name, values in resolved.pair_values.items()},
            resolved.contributions.take(routing.contribution_rows[i]), options, plan,
        )
        parts.append(summary)
    return merge_partitions(parts, resolved.unassigned, options, plan)


@FUZZ
@given(
    pair=layer_pairs(),
    data=st.data(),
    thr=st.sampled_from([0.1, 0.5, 1.0]),
    matching=st.sampled_from(["one_to_one", "many_to_one", "max_weight"]),
    tol=st.sampled_from([None, 2.0]),
)
def test_a_random_split_into_partitions_gives_the_sums_of_the_whole(pair, data, thr, matching, tol):
    _note_wkt(*pair)
    ref = prepare_layer(_layer(pair[1]), "reference")
    pred = prepare_layer(_layer(pair[0]), "predicted")
    n_parts = data.draw(st.integers(2, 3), label="partitions")
    ref_part = np.array(data.draw(st.lists(st.integers(0, n_parts - 1), min_size=len(ref), max_size=len(ref)), label="ref split"), dtype=np.int64)
    pred_part = np.array(data.draw(st.lists(st.integers(0, n_parts - 1), min_size=len(pred), max_size=len(pred)), label="pred split"), dtype=np.int64)

    whole = _partitioned_sums(ref, pred, np.zeros(len(ref), np.int64), np.zeros(len(pred), np.int64), thr, tol, matching)
    split = _partitioned_sums(ref, pred, ref_part, pred_part, thr, tol, matching)

    columns = whole.sums.columns
    counts = [columns.index(c) for c in COUNT_COLUMNS if c in columns] + [
        k for k, c in enumerate(columns) if (c.startswith("sweep_") and not c.startswith("sweep_iou")) or c in TOPOLOGY_COLUMNS
    ]
    assert np.array_equal(split.sums.sums[0, counts], whole.sums.sums[0, counts])
    np.testing.assert_allclose(split.sums.sums, whole.sums.sums, rtol=1e-9, atol=1e-6)
    np.testing.assert_array_equal(split.sums.maxima, whole.sums.maxima)
    assert split.unassigned == whole.unassigned
    assert _same_order(split.order, whole.order)  # the selected medians and quantiles, to the bit
    assert split.n_ungrouped == whole.n_ungrouped
    n = dict(zip(columns, whole.sums.sums[0]))
    assert n["n_ref"] == len(ref) and n["n_pred"] == len(pred)


def test_a_tolerance_length_never_exceeds_its_perimeter():
    """Found by the fuzzer (slow profile): a bow-tie prediction inside a 1 m reference square had a
    length within the tolerance one ulp longer than its perimeter, so boundary_precision was
    1.0000000000000002 (fixed in evalcore/boundary.py by clipping to the perimeter)."""
    from evalcore import evaluate

    pred = _layer([shapely.from_wkt("POLYGON ((500000 4400000, 500001 4400001, 500001 4400000, 500000 4400001, 500000 4400000))")])
    ref = _layer([box(X0, Y0, X0 + 1, Y0 + 1)])
    m = evaluate(pred, ref, iou_threshold=0.1, boundary_tolerance_m=5.0, boundary_sample_spacing_m=None)
    assert m["boundary_precision"] <= 1.0 and m["boundary_recall"] <= 1.0


SLIVER = f"POLYGON (({X0} {Y0}, {X0 + 98.66237309197} {Y0 + 17}, {X0 + 147.9935596379} {Y0 + 25.5}, {X0} {Y0}))"


def test_a_tolerance_length_does_not_depend_on_the_other_rows_of_its_partition():
    """Found by the fuzzer (slow profile, the random-split property): distributed != single-process.

    Then, shapely.segmentize's own repair (GEOS's densifier buffers an invalid result) shrank
    this sliver's equal-area geometry away from its source box and hid its tolerance
    candidates; evalcore now splits the edges itself and repairs only with make_valid after
    reprojection (SPEC 2.3), and candidate boxes also hold the source box's image."""
    from evalcore.boundary import candidate_boxes, tolerance_lengths
    from evalcore.crs import transform_xy

    pred = prepare_layer(_layer([box(X0, Y0, X0 + 1, Y0 + 1)]), "predicted")
    sliver = prepare_layer(_layer([shapely.from_wkt(SLIVER)]), "reference")
    # The mechanism: shrink the equal-area geometry to a speck at one end, as that repair
    # did; the candidate box must still hold the source box's image.
    ea = sliver.geoms_ea[0]
    speck = np.array([box(ea.bounds[0], ea.bounds[1], ea.bounds[0] + 1e-3, ea.bounds[1] + 1e-3)], dtype=object)
    boxes = candidate_boxes(dataclasses.replace(sliver, geoms_ea=speck))
    s = shapely.bounds(sliver.geoms_source)
    x, y = transform_xy(s[:, [0, 2, 0, 2]].ravel(), s[:, [1, 1, 3, 3]].ravel(), sliver.crs, sliver.equal_area_crs)
    assert x.max() - x.min() > 100.0  # the speck's own box misses most of it
    assert boxes[0, 0] <= x.min() and boxes[0, 2] >= x.max() and boxes[0, 1] <= y.min() and boxes[0, 3] >= y.max()
    alone = tolerance_lengths(prepare_layer(_layer([shapely.from_wkt(SLIVER)]), "reference"), pred, 2.0)
    with_a_neighbour = tolerance_lengths(prepare_layer(_layer([box(X0, Y0, X0 + 1, Y0 + 1), shapely.from_wkt(SLIVER)]), "reference"), pred, 2.0)
    assert with_a_neighbour[1] > 6.0
    assert alone[0] == with_a_neighbour[1]


def test_a_ring_along_an_edge_twice_and_overlapping_collection_parts_are_repaired():
    """Found by the fuzzer: GEOS 3.14.1 make_valid(method="structure") returns two triangles sharing
    an edge (an invalid MultiPolygon) for this ring; and a collection's polygons may overlap. Both
    are repaired again, so the kept geometry is valid and an overlap is not counted twice."""
    twice = shapely.from_wkt(f"POLYGON (({X0} {Y0}, {X0} {Y0 + 1}, {X0 + 1} {Y0}, {X0} {Y0}, {X0} {Y0 - 1}, {X0 + 1} {Y0}, {X0} {Y0}))")
    overlapping = GeometryCollection([box(X0 + 10, Y0, X0 + 12, Y0 + 2), box(X0 + 11, Y0 + 1, X0 + 13, Y0 + 3)])
    prep = prepare_layer(_layer([twice, overlapping]), "reference")
    assert len(prep) == 2 and prep.n_repaired == 2
    assert shapely.is_valid(prep.geoms_source).all()
    np.testing.assert_allclose(shapely.area(prep.geoms_source), [1.0, 7.0])


def test_the_strategies_reach_every_kind_of_row():
    """The mix is what the module docstring says: valid, invalid, degenerate and other rows."""
    from hypothesis import find

    find(VALID, lambda g: g is not None and g.is_valid and g.area > 0)
    find(INVALID, lambda g: not g.is_valid)
    find(DEGENERATE, lambda g: g.area == 0.0)
    find(DEGENERATE, lambda g: g.is_valid and 0 < g.area < 1.0)
    find(other_rows(), lambda g: g is None)
    find(polygons_with_holes(), lambda g: g.is_valid and len(g.interiors) > 0)
    find(polygons_with_holes(), lambda g: not g.is_valid)
