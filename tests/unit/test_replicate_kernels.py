"""The bootstrap's fast replicate paths against the slow obvious ones they replace.

* :meth:`RunDraws.ref_weights` and :func:`draw_field_counts` draw a chunk of replicates per generator call; the
  reference is :func:`field_count_stream`, one call per replicate and group, assembled
  row by row (the previous implementation). The values must be identical, whatever
  the chunk size.
* :func:`replicate_ap_and_aurc` must give the bits of :func:`coco_ap` per replicate, and
  of ``_weighted_curve``'s aurc (both sum the steps' terms exactly).
* The premise of the chunking: numpy's bounded integers continue one stream across calls.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.bootstrap import _field_groups, field_count_stream, field_draws
from evalcore.metrics.scores import _RiskGroups, _weighted_curve, coco_ap, replicate_ap_and_aurc


def _slow_ref_weights(draws):
    streams = []
    for pool, tile, members in _field_groups(draws.ref_pools, draws.ref_tiles):
        size, counts = draws.groups[(pool, tile)]
        streams.append((members, draws.ref_ranks[members], field_count_stream(counts, size, draws.seed, pool, tile)))
    for _ in range(draws.n_replicates):
        weights = np.zeros(len(draws.ref_pools))
        for members, ranks, stream in streams:
            weights[members] = next(stream)[ranks]
        yield weights


@pytest.mark.parametrize("n_fields", [0, 1, 7, 400])
@pytest.mark.parametrize("chunk_bytes", [1, 8 * 400 * 3, 2**30])
def test_chunked_field_weights_equal_one_replicate_at_a_time(n_fields, chunk_bytes):
    rng = np.random.default_rng(n_fields)
    positions = np.sort(rng.choice(10 * n_fields + 1, n_fields, replace=False)).astype(np.int64)
    pools = rng.integers(0, 3, n_fields).astype(np.int64)
    tiles = np.column_stack([np.full(n_fields, 32613), rng.integers(-2, 3, n_fields), rng.integers(0, 4, n_fields)]).astype(np.int64)
    draws = field_draws(positions, pools, tiles, 37, seed=5)
    fast = list(draws.ref_weights(chunk_bytes))
    slow = list(_slow_ref_weights(draws))
    assert len(fast) == len(slow) == 37
    for a, b in zip(fast, slow):
        assert np.array_equal(a, b)
    if n_fields:
        assert sum(w.sum() for w in fast) == 37 * n_fields  # every replicate draws the run's size


@pytest.mark.parametrize("n_fields", [0, 1, 7, 400])
@pytest.mark.parametrize("chunk_bytes", [1, 8 * 400 * 3, 2**30])
def test_one_groups_chunked_counts_equal_one_replicate_at_a_time(n_fields, chunk_bytes, monkeypatch):
    """:func:`draw_field_counts` (a partition's and RowDraws' weights) against the stream."""
    from evalcore import bootstrap

    monkeypatch.setattr(bootstrap, "WEIGHT_CHUNK_BYTES", chunk_bytes)
    m = np.random.default_rng(n_fields).integers(0, 2 * n_fields + 2, 41) * (n_fields > 0)  # none from an empty group
    m[[3, 4, 20]] = 0  # replicates that draw none of the group: no generator call in the stream
    fast = bootstrap.draw_field_counts(m, n_fields, 11, 123, (32613, -1, 2))
    slow = np.array([hits for hits in field_count_stream(m, n_fields, 11, 123, (32613, -1, 2))]).reshape(41, n_fields)
    assert fast.shape == (41, n_fields)
    assert np.array_equal(fast, slow)
    if n_fields:
        assert np.array_equal(fast.sum(axis=1), m)


@pytest.mark.parametrize("n", [1, 2, 5, 100, 2**31 + 7])
def test_bounded_integers_continue_across_calls(n):
    sizes = [3, 0, 5, 1, 1, 8, 2]
    one_by_one = np.random.default_rng(9)
    split = np.concatenate([one_by_one.integers(0, n, size=k) for k in sizes])
    whole = np.random.default_rng(9).integers(0, n, size=sum(sizes))
    assert np.array_equal(split, whole)


def test_replicate_ap_and_aurc_equal_the_per_replicate_functions():
    rng = np.random.default_rng(3)
    n = 3_000
    tp = rng.random((10, n)) < 0.6
    tp[:, :40] = np.sort(tp[:, :40], axis=0)  # flags that nest like real thresholds' for some rows
    score = np.round(rng.random(n), 2)  # many tied scores
    matched = rng.random(n) < 0.7
    home = rng.integers(-1, 80, n)
    strata = np.array([None if i % 7 == 0 else f"s{i % 3}" for i in range(80)], dtype=object)
    groups = _RiskGroups.of(score, matched, home, strata)
    weights = [rng.poisson(1.0, n).astype(np.float64) for _ in range(45)]
    weights[4][:] = 0.0  # a replicate that draws nothing: AP and every aurc undefined
    n_refs = [float(v) for v in rng.integers(0, 3, 45) * 50]  # some replicates without reference fields

    def stream():
        yield from zip(weights, n_refs)

    ap, per_group = replicate_ap_and_aurc(stream, tp, groups.order, groups, True)
    expected_ap = np.array([coco_ap(tp, r, w[groups.order]) for w, r in zip(weights, n_refs)])
    assert np.array_equal(ap, expected_ap, equal_nan=True)
    assert np.isnan(ap).any() and np.isfinite(ap).any()
    expected_aurc = np.array([
        [_weighted_curve(groups.error[m], w[groups.order][m], last)[2] for m, last in zip(groups.members, groups.last)]
        for w in weights
    ])
    assert per_group.shape == (45, groups.n_groups) == expected_aurc.shape
    assert np.array_equal(np.isnan(per_group), np.isnan(expected_aurc))
    assert np.array_equal(per_group, expected_aurc, equal_nan=True)

    ap_none, _ = replicate_ap_and_aurc(stream, tp, groups.order, groups, False)
    assert ap_none.shape == (0, 10)


@pytest.mark.parametrize("chunk_bytes", [1, 8 * 400 * 3, 2**30])
def test_a_partitions_row_draws_are_its_rows_of_the_runs(chunk_bytes, monkeypatch):
    """:meth:`RowDraws.weights` (a partition's rows, sharing groups with other partitions)
    equals those rows' columns of the slow run-wide weights."""
    from evalcore import bootstrap

    monkeypatch.setattr(bootstrap, "WEIGHT_CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(17)
    n_fields = 400
    positions = np.arange(n_fields, dtype=np.int64) * 3
    pools = rng.integers(0, 2, n_fields).astype(np.int64)
    tiles = np.column_stack([np.full(n_fields, 32613), rng.integers(0, 2, n_fields), rng.integers(0, 3, n_fields)]).astype(np.int64)
    draws = field_draws(positions, pools, tiles, 29, seed=8)
    slow = np.array(list(_slow_ref_weights(draws)))
    for rows in (np.arange(n_fields), np.sort(rng.choice(n_fields, 150, replace=False)), np.array([5])):
        assert np.array_equal(draws.rows(rows).weights(), slow[:, rows])
        counts = draws.rows(rows).draw_counts()
        # Bytes, each row's replicates contiguous, the same whole numbers.
        assert counts.dtype == np.uint8 and counts.T.flags.c_contiguous
        assert np.array_equal(counts, slow[:, rows])


def test_draw_counts_past_a_byte_take_a_wider_type():
    """A field drawn 300 times in one replicate (its group of one field draws 300 times
    there): the byte would wrap round to 44; the counts come in uint16, all of them right."""
    from evalcore.bootstrap import RowDraws

    draws = RowDraws("field", 3, 5, pools=np.array([0, 0]), ranks=np.array([0, 0]),
                     tiles=np.array([[32613, 0, 0], [32613, 0, 1]]),
                     groups={(0, (32613, 0, 0)): (1, np.array([1, 300, 0])), (0, (32613, 0, 1)): (1, np.array([2, 0, 255]))})
    counts = draws.draw_counts()
    assert counts.dtype == np.uint16
    assert counts.tolist() == [[1, 2], [300, 0], [0, 255]]
    assert counts.tolist() == draws.weights().tolist()
