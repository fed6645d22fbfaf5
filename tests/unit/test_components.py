"""The resolve by connected components (evalcore.engine.components).

The property: resolving the union of some connected components of the candidate-pair
graph gives their pairs, predictions and reference fields exactly the values (to the last
bit) that resolving the whole run gives them, under every matcher; and the seam union
finds the components that cross partitions, with one owner each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.engine.components import NO_REFERENCE, component_results, label_partition, own_connectors, seam_plan
from evalcore.engine.pairing import PairResults
from evalcore.engine.resolve import homeless_sums, resolve_run
from evalcore.options import check_options
from evalcore.pairtable import PairTable


def synthetic_results(n_ref: int, n_pred: int, edges: list[tuple[int, int, float]], seed: int) -> PairResults:
    """A run's pairs with consistent areas: each pair's intersection is a share of its smaller polygon."""
    rng = np.random.default_rng(seed)
    ref_area = rng.uniform(50.0, 150.0, n_ref)
    pred_area = rng.uniform(50.0, 150.0, n_pred)
    seen = {}
    for r, p, share in edges:
        seen.setdefault((r, p), share)
    keys = sorted(seen)
    ref_pos = np.array([r for r, _ in keys], dtype=np.int64)
    pred_pos = np.array([p for _, p in keys], dtype=np.int64)
    share = np.array([seen[k] for k in keys])
    inter = share * np.minimum(ref_area[ref_pos], pred_area[pred_pos]) if keys else np.empty(0)
    iou = inter / (ref_area[ref_pos] + pred_area[pred_pos] - inter) if keys else np.empty(0)
    # Ties on purpose: a few IoUs equal, so the tie-breaks by position are exercised.
    if len(iou) > 3:
        iou[1] = iou[0]
    n = len(keys)
    ints = lambda m, hi: rng.integers(0, hi, m).astype(np.int64)  # noqa: E731
    return PairResults(
        pairs=PairTable(ref_pos, pred_pos, inter, iou),
        pred_area_of_pair=pred_area[pred_pos], ref_area_of_pair=ref_area[ref_pos],
        hausdorff_m=rng.uniform(0, 5, n), mean_distance_m=rng.uniform(0, 3, n), spacing_m=np.full(n, 1.0),
        boundary_iou=np.full(n, np.nan), pred_label_of_pair=pred_pos.astype(object),
        ref_pos=np.arange(n_ref, dtype=np.int64), ref_within_tol_m=np.full(n_ref, np.nan),
        ref_label=np.arange(n_ref).astype(object), ref_utm_epsg=np.full(n_ref, 32631, np.int64), ref_tile_x=ints(n_ref, 3),
        ref_tile_y=ints(n_ref, 3), ref_aoi=np.full(n_ref, -1, np.int64), ref_pool=np.zeros(n_ref, np.int64),
        ref_class=np.full(n_ref, None, dtype=object),
        pred_pos=np.arange(n_pred, dtype=np.int64), pred_area_m2=pred_area, pred_perimeter_m=4 * np.sqrt(pred_area),
        pred_within_tol_m=np.full(n_pred, np.nan), pred_label=np.arange(n_pred).astype(object),
        pred_utm_epsg=np.full(n_pred, 32631, np.int64), pred_tile_x=ints(n_pred, 3), pred_tile_y=ints(n_pred, 3),
        pred_aoi=np.full(n_pred, -1, np.int64), pred_annotated_fraction=np.full(n_pred, np.nan),
        pred_score=np.full(n_pred, np.nan), pred_class=np.full(n_pred, None, dtype=object),
    )


@st.composite
def runs(draw):
    n_ref = draw(st.integers(1, 12))
    n_pred = draw(st.integers(1, 12))
    shares = st.sampled_from([0.3, 0.55, 0.7, 0.9, 1.0])
    edges = draw(st.lists(st.tuples(st.integers(0, n_ref - 1), st.integers(0, n_pred - 1), shares), max_size=30))
    seed = draw(st.integers(0, 2**16))
    chosen_seed = draw(st.integers(0, 2**16))
    return synthetic_results(n_ref, n_pred, edges, seed), chosen_seed


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))
    return a.shape == b.shape and list(a.tolist()) == list(b.tolist())


@pytest.mark.parametrize("matching", ["one_to_one", "many_to_one", "max_weight"])
@settings(max_examples=40, deadline=None)
@given(run=runs())
def test_resolving_some_components_equals_resolving_everything(matching, run):
    results, chosen_seed = run
    options = check_options(matching=matching, iou_threshold=0.5)
    whole = resolve_run(results, options)
    labels = label_partition(results, np.empty(0, np.int64))
    # A random union of components (each prediction without a pair is a component too).
    chosen = np.flatnonzero(np.random.default_rng(chosen_seed).random(labels.n_labels) < 0.5)
    sub, _, _ = component_results([(results, labels.pair_label, labels.pred_label, chosen)])
    part = resolve_run(sub, options)

    # Per pair: every pair value of the chosen components' pairs.
    rows = np.flatnonzero(np.isin(labels.pair_label, chosen))
    assert np.array_equal(sub.pairs.ref_pos, results.pairs.ref_pos[rows])
    assert np.array_equal(sub.pairs.pred_pos, results.pairs.pred_pos[rows])
    assert set(part.pair_values) == set(whole.pair_values)
    for name, values in whole.pair_values.items():
        assert _same(part.pair_values[name], values[rows]), name
    # Per prediction: every column of the per-prediction frame.
    expected = whole.preds.loc[sub.pred_pos]
    assert list(part.preds.columns) == list(expected.columns)
    for column in expected.columns:
        assert _same(part.preds[column].to_numpy(), expected[column].to_numpy()), column
    # Per reference field: what the predictions add to it, the same bits.
    assert part.contributions.columns == whole.contributions.columns
    refs = np.isin(whole.contributions.ref_pos, sub.ref_pos)
    assert np.array_equal(part.contributions.ref_pos, whole.contributions.ref_pos[refs])
    assert _same(part.contributions.values, whole.contributions.values[refs])
    # The predictions without a pair: their rows, in position order.
    homeless = whole.homeless_pos
    kept = np.isin(homeless, sub.pred_pos)
    assert np.array_equal(part.homeless_pos, homeless[kept])
    assert _same(part.homeless_rows, whole.homeless_rows[kept])
    # Their sums, from the rows of two resolves (the chosen components and the others) in
    # any order, equal the whole run's to the last bit.
    rest, _, _ = component_results([(results, labels.pair_label, labels.pred_label, np.setdiff1d(np.arange(labels.n_labels), chosen))])
    other = resolve_run(rest, options)
    pos = np.concatenate([other.homeless_pos, part.homeless_pos])
    rows = np.concatenate([other.homeless_rows, part.homeless_rows])
    at = np.searchsorted(results.pred_pos, pos)
    tiles = np.stack([results.pred_utm_epsg, results.pred_tile_x, results.pred_tile_y], axis=1)[at]
    unassigned, homeless_tiles, homeless_aois, replicates, units = homeless_sums(
        pos, rows, whole.columns, tiles, results.pred_aoi[at], options
    )
    assert replicates is None and units is None  # no bootstrap
    assert list(unassigned) == list(whole.unassigned)
    assert all(_same(np.array(unassigned[c]), np.array(whole.unassigned[c])) for c in unassigned)
    assert np.array_equal(homeless_tiles.keys, whole.homeless_tiles.keys)
    assert _same(homeless_tiles.digits, whole.homeless_tiles.digits)
    assert _same(homeless_aois.digits, whole.homeless_aois.digits)


def test_label_partition_names_halo_and_read_predictions():
    # Partition A owns refs 0, 1 and preds 10, 11; its pairs hold a neighbour's prediction 20.
    results = synthetic_results(2, 25, [(0, 10, 0.9), (1, 20, 0.9)], 0)
    own = results.restrict(np.arange(len(results.pairs)), np.arange(2), np.array([10, 11]))
    labels = label_partition(own, np.array([11, 12]))  # 12 is not A's: ignored
    assert labels.connector_pos.tolist() == [11, 20]
    assert labels.pair_label[0] != labels.pair_label[1]
    assert labels.connector_label[1] == labels.pair_label[1]
    assert labels.connector_min_ref.tolist() == [NO_REFERENCE, 1]
    # Pred 11 has no pair here: a component of its own.
    assert labels.pred_label[1] not in labels.pair_label.tolist()


def test_own_connectors_answer_for_own_predictions_only():
    # A owns preds 10, 11 (11 without a pair here); a neighbour asks about 11, 12 and 20.
    results = synthetic_results(2, 25, [(0, 10, 0.9), (1, 20, 0.9)], 0)
    own = results.restrict(np.arange(len(results.pairs)), np.arange(2), np.array([10, 11]))
    labels = label_partition(own)
    assert labels.connector_pos.tolist() == [20]  # the halo side only
    pos, label, min_ref = own_connectors(own.pred_pos, labels.pred_label, labels.label_min_ref, np.array([20, 12, 11]))
    assert pos.tolist() == [11] and label.tolist() == [labels.pred_label[1]] and min_ref.tolist() == [NO_REFERENCE]
    pos, label, min_ref = own_connectors(own.pred_pos, labels.pred_label, labels.label_min_ref, np.array([10]))
    assert label.tolist() == [labels.pair_label[0]] and min_ref.tolist() == [0]


def test_seam_plan_unions_a_chain_across_three_partitions():
    # Component a of A (refs from 5) meets b of B through pred 100; b meets c of C through pred 200.
    plan = seam_plan({
        ("A",): (np.array([100]), np.array([3]), np.array([5])),
        ("B",): (np.array([100, 200]), np.array([0, 0]), np.array([2, 2])),
        ("C",): (np.array([200, 300]), np.array([7, 8]), np.array([9, NO_REFERENCE])),
    })
    assert plan.n_seam_components == 1
    # The smallest reference position (2) is B's: B resolves it, borrowing A's 3 and C's 7.
    assert set(plan.borrowed) == {("B",)}
    assert {k: v.tolist() for k, v in plan.borrowed[("B",)].items()} == {("A",): [3], ("C",): [7]}
    assert {k: v.tolist() for k, v in plan.given_away.items()} == {("A",): [3], ("C",): [7]}
    # C's label 8 meets nobody: C keeps it.


def test_seam_plan_without_connectors_is_empty():
    assert seam_plan({}).n_seam_components == 0
    assert seam_plan({("A",): (np.empty(0, np.int64),) * 3}).given_away == {}


def _seam_plan_by_hand(connectors: dict) -> tuple[dict, dict, int]:
    """The seam union the obvious way: nodes (partition, label) joined while two share a
    prediction, until nothing changes; the owner by (smallest reference, partition order)."""
    keys = sorted(connectors)
    node_ref: dict = {}
    preds: dict = {}
    for k in keys:
        for p, lab, r in zip(*(np.asarray(a).tolist() for a in connectors[k])):
            node = (k, lab)
            node_ref[node] = min(node_ref.get(node, NO_REFERENCE), r)
            preds.setdefault(p, set()).add(node)
    group = {node: {node} for node in node_ref}
    changed = True
    while changed:
        changed = False
        for nodes in preds.values():
            union = set().union(*(group[n] for n in nodes))
            for n in union:
                if group[n] != union:
                    group[n], changed = union, True
    given, borrowed, n_seam = {}, {}, 0
    for members in {frozenset(g) for g in group.values() if len(g) > 1}:
        owner = min(members, key=lambda n: (node_ref[n], keys.index(n[0])))[0]
        n_seam += 1
        for source, lab in members:
            if source != owner:
                given.setdefault(source, set()).add(lab)
                borrowed.setdefault(owner, {}).setdefault(source, set()).add(lab)
    return ({k: sorted(v) for k, v in given.items()},
            {k: {s: sorted(v) for s, v in b.items()} for k, b in borrowed.items()}, n_seam)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_seam_plan_equals_the_union_made_by_hand(data):
    n_parts = data.draw(st.integers(1, 5))
    connectors = {}
    for i in range(n_parts):
        n = data.draw(st.integers(0, 8))
        pos = data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
        label = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        ref = data.draw(st.lists(st.one_of(st.integers(0, 30), st.just(NO_REFERENCE)), min_size=n, max_size=n))
        connectors[(f"P{i}",)] = (np.array(pos, np.int64), np.array(label, np.int64), np.array(ref, np.int64))
    plan = seam_plan(connectors)
    given_away, borrowed, n_seam = _seam_plan_by_hand(connectors)
    assert plan.n_seam_components == n_seam
    assert {k: v.tolist() for k, v in plan.given_away.items()} == given_away
    assert {k: {s: v.tolist() for s, v in b.items()} for k, b in plan.borrowed.items()} == borrowed
