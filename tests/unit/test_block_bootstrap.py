"""Block bootstrap (SPEC 6.6): draws independent of the partitioning, and the definition.

* Every interval of every bootstrap unit (field, tile, AOI), with strata and size
  classes, is the same for any partition size (the draws are made centrally from the
  seed over fixed keys), and the same on a cluster of two worker processes.
* With one reference field per reporting tile, a tile bootstrap draws n tiles
  uniformly with replacement, which is the field bootstrap's n fields uniformly with
  replacement: the engine's weights per replicate are multinomial(n, 1/n), and its
  intervals are the percentile intervals of the metric recomputed by hand from those
  weights and the known per-field outcomes ("same draws given the same units").
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalcore import evaluate, evaluate_frame
from evalcore.bootstrap import block_counts, block_draws, field_draws, pool_id
from evalcore.synth import make_layers, make_site_layers
from tests.common import X0, Y0, assert_metrics_equal, layer, square, without_partition_size

N_RESAMPLES = 60
PARTITION_SIZES_M = (1_000.0, 7_000.0, 50_000.0)


@pytest.fixture(scope="module")
def synth():
    """400 realistic fields over three UTM zones, with strata, scores and an AOI layer."""
    pred, ref = make_layers(400, seed=3)
    aoi, _ = make_site_layers(ref, pred, seed=3)
    return pred, ref, aoi


def _options(aoi, unit: str) -> dict:
    return {
        "strata": "stratum", "size_bins": "auto", "bootstrap": N_RESAMPLES, "bootstrap_unit": unit, "tile_km": 10.0,
        "aoi": aoi, "aoi_id_column": "aoi_id",
    }


def _interval_count(entry: object) -> int:
    """How many [lower, upper] intervals a result holds under ``ci`` keys (anywhere)."""
    if isinstance(entry, dict):
        n = 0
        for key, value in entry.items():
            if key == "ci" and isinstance(value, dict):
                n += len(value)
            else:
                n += _interval_count(value)
        return n
    if isinstance(entry, list):
        return sum(_interval_count(v) for v in entry)
    return 0


# --------------------------------------------------------------------------------------
# 1. Partition size and worker count change no draw


@pytest.mark.parametrize("unit", ["field", "tile", "aoi"])
def test_every_interval_is_independent_of_the_partition_size(synth, unit):
    pred, ref, aoi = synth
    results = {size: evaluate(pred, ref, partition_size_m=size, **_options(aoi, unit)) for size in PARTITION_SIZES_M}
    base = results[PARTITION_SIZES_M[-1]]
    block = base["bootstrap"]
    assert block["unit"] == unit and block["n_resamples"] == N_RESAMPLES
    # The units: reference fields (field), or the distinct tiles / AOIs holding something.
    if unit == "field":
        assert block["n_units"] == base["count_reference"]
    else:
        assert 2 <= block["n_units"] < base["count_reference"]
        assert "note" not in block
    # There is something to compare: intervals overall, per stratum, per size class, per AOI.
    assert _interval_count(base) > 50
    assert base["per_stratum"] and base["per_size_class"] and base["aois"]["per_aoi"]
    lo, hi = block["ci"]["recall"]
    assert lo < base["recall"] < hi
    for size, result in results.items():
        assert result["bootstrap"]["partition_size_m"] == size
        assert_metrics_equal(without_partition_size(result), without_partition_size(base), rel=1e-12)


def test_tile_bootstrap_is_the_same_on_two_worker_processes(synth, local_clients):
    pytest.importorskip("distributed")
    pred, ref, _ = synth
    options = {"strata": "stratum", "size_bins": "auto", "bootstrap": N_RESAMPLES, "bootstrap_unit": "tile",
               "tile_km": 10.0, "partition_size_m": 20_000.0}
    local = evaluate(pred, ref, **options)
    client = local_clients.get(2)  # a real LocalCluster of 2 worker processes (the session's, tests/conftest.py)
    remote = evaluate(pred, ref, client=client, **options)
    assert remote["bootstrap"]["unit"] == "tile" and remote["bootstrap"]["n_units"] == local["bootstrap"]["n_units"]
    assert_metrics_equal(remote, local, rel=1e-9)
    # The same draws: the intervals to the last bits.
    assert_metrics_equal(remote["bootstrap"], local["bootstrap"], rel=1e-12)
    for key, entry in local["per_stratum"].items():
        assert_metrics_equal(remote["per_stratum"][key]["ci"], entry["ci"], rel=1e-12)


# --------------------------------------------------------------------------------------
# 2. One field per tile: the tile bootstrap is the field bootstrap's definition

N_FIELDS = 40
N_DRAWS = 2_000
SEED = 42
TILE_KM = 10.0
SPACING_M = 20_000.0
SIDE_M = 100.0


@pytest.fixture(scope="module")
def one_field_per_tile():
    """40 fields 20 km apart (each in the middle of its own 10 km tile, UTM 13N), and
    predictions only on their own field, by field i % 4:

    0. an exact prediction (TP; one prediction);
    1. a prediction shifted by 60 m (IoU 0.25: FN, and an FP whose home is the field);
    2. no prediction (FN);
    3. a prediction shifted by 10 m (IoU 9000 / 11000: TP) and a duplicate shifted by
       50 m in x and y (IoU 2500 / 17500: an FP whose home is the field).
    """
    refs, preds, tp, n_pred, tiles = [], [], [], [], []
    for i in range(N_FIELDS):
        x = X0 - 80_000.0 + 5_000.0 + SPACING_M * (i % 8)
        y = Y0 + 5_000.0 + SPACING_M * (i // 8)
        refs.append(square(x, y, SIDE_M))
        tiles.append((32613, math.floor(x / (TILE_KM * 1000)), math.floor(y / (TILE_KM * 1000))))
        kind = i % 4
        if kind == 0:
            preds.append(square(x, y, SIDE_M))
        elif kind == 1:
            preds.append(square(x + 60.0, y, SIDE_M))
        elif kind == 3:
            preds.append(square(x + 10.0, y, SIDE_M))
            preds.append(square(x + 50.0, y + 50.0, SIDE_M))
        tp.append(1.0 if kind in (0, 3) else 0.0)
        n_pred.append({0: 1.0, 1: 1.0, 2: 0.0, 3: 2.0}[kind])
    return layer(preds), layer(refs), np.array(tp), np.array(n_pred), np.array(tiles, dtype=np.int64)


@pytest.fixture(scope="module")
def both_bootstraps(one_field_per_tile):
    pred, ref, *_ = one_field_per_tile
    common = {"bootstrap": N_DRAWS, "bootstrap_seed": SEED, "tile_km": TILE_KM}
    return evaluate(pred, ref, bootstrap_unit="tile", **common), evaluate(pred, ref, bootstrap_unit="field", **common)


def _unit_index(tiles: np.ndarray) -> np.ndarray:
    """Each field's index among the sorted distinct tile keys."""
    keys = np.unique(tiles, axis=0)
    return np.array([int(np.flatnonzero((keys == t).all(axis=1))[0]) for t in tiles])


def _by_hand(weights: np.ndarray, tp: np.ndarray, n_pred: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall, F1 of every replicate from the per-field draw counts."""
    w_tp, w_ref, w_pred = weights @ tp, weights.sum(axis=1), weights @ n_pred
    precision, recall = w_tp / w_pred, w_tp / w_ref
    f1 = 2 * w_tp / (w_ref + w_pred)  # 2 TP / (2 TP + FP + FN)
    return {"precision": precision, "recall": recall, "f1": f1}


def _percentile(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.quantile(values, [0.025, 0.975])]


def _binomial_chi2(weights: np.ndarray, n: int) -> float:
    """Chi-square of the pooled per-unit counts against Binomial(n, 1/n): 0, 1, 2, 3, >= 4."""
    pmf = [math.comb(n, k) * (1 / n) ** k * (1 - 1 / n) ** (n - k) for k in range(4)]
    expected = np.array(pmf + [1 - sum(pmf)]) * weights.size
    observed = np.array([(weights == k).sum() for k in range(4)] + [(weights >= 4).sum()])
    return float(((observed - expected) ** 2 / expected).sum())


def test_layout_puts_one_field_in_each_tile(one_field_per_tile, both_bootstraps):
    pred, ref, tp, n_pred, tiles = one_field_per_tile
    frame = evaluate_frame(pred, ref, tile_km=TILE_KM)
    engine_tiles = frame[["utm_epsg", "tile_x", "tile_y"]].to_numpy(np.int64)
    np.testing.assert_array_equal(engine_tiles, tiles)
    assert len(np.unique(tiles, axis=0)) == N_FIELDS
    np.testing.assert_array_equal(frame["matched"].to_numpy(bool), tp.astype(bool))
    tile_run, field_run = both_bootstraps
    for run in both_bootstraps:
        assert run["count_reference"] == N_FIELDS and run["count_predicted"] == n_pred.sum()
        assert run["count_tp"] == tp.sum() and run["count_fp_unassigned"] == 0
    assert tile_run["bootstrap"]["n_units"] == N_FIELDS and tile_run["tiles"]["count_tiles"] == N_FIELDS
    assert field_run["bootstrap"]["n_units"] == N_FIELDS


def test_tile_draws_are_n_tiles_uniformly_with_replacement(one_field_per_tile):
    *_, tiles = one_field_per_tile
    units = _unit_index(tiles)
    draws = block_draws("tile", np.unique(tiles, axis=0), units, N_DRAWS, SEED)
    counts = draws.counts
    assert counts.shape == (N_DRAWS, N_FIELDS) and draws.n_units == N_FIELDS
    np.testing.assert_array_equal(counts, block_counts(N_FIELDS, N_DRAWS, SEED, "tile"))
    # multinomial(n, 1/n): every replicate draws n units, each unit Binomial(n, 1/n).
    np.testing.assert_array_equal(counts.sum(axis=1), np.full(N_DRAWS, N_FIELDS))
    assert np.all(counts == np.round(counts)) and counts.min() >= 0
    assert counts.mean() == pytest.approx(1.0)
    assert counts.var() == pytest.approx(1 - 1 / N_FIELDS, rel=0.05)
    assert _binomial_chi2(counts, N_FIELDS) < 25.0  # df 4: p ~ 5e-5
    # Distinct units are negatively correlated, as in a multinomial: cov = -1/n.
    cov = np.cov(counts[:, 0], counts[:, 1])[0, 1]
    assert cov == pytest.approx(-1 / N_FIELDS, abs=0.05)
    # Every unit is drawn about as often (B draws of mean 1 each, sd sqrt(B (1 - 1/n))).
    per_unit = counts.sum(axis=0)
    assert np.all(np.abs(per_unit - N_DRAWS) < 5 * math.sqrt(N_DRAWS))
    # The field bootstrap of the same fields: multinomial(n, 1/n) too (one field per tile).
    fdraws = field_draws(np.arange(N_FIELDS), np.full(N_FIELDS, pool_id(None, False)), tiles, N_DRAWS, SEED)
    fweights = np.array(list(fdraws.ref_weights()))
    np.testing.assert_array_equal(fweights.sum(axis=1), np.full(N_DRAWS, N_FIELDS))
    assert _binomial_chi2(fweights, N_FIELDS) < 25.0
    # ... from another random stream.
    assert not np.array_equal(fweights, counts)


def test_tile_intervals_are_the_percentile_intervals_of_the_tile_draws(one_field_per_tile, both_bootstraps):
    *_, tp, n_pred, tiles = one_field_per_tile
    tile_run, _ = both_bootstraps
    weights = block_counts(N_FIELDS, N_DRAWS, SEED, "tile")[:, _unit_index(tiles)]
    replicates = _by_hand(weights, tp, n_pred)
    for metric, values in replicates.items():
        assert not np.isnan(values).any()
        assert tile_run["bootstrap"]["ci"][metric] == pytest.approx(_percentile(values), rel=1e-12, abs=1e-15), metric
    assert not set(replicates) & set(tile_run["bootstrap"]["n_undefined"])
    assert tile_run["recall"] == pytest.approx(tp.mean())


def test_field_intervals_are_the_percentile_intervals_of_the_field_draws(one_field_per_tile, both_bootstraps):
    *_, tp, n_pred, tiles = one_field_per_tile
    _, field_run = both_bootstraps
    draws = field_draws(np.arange(N_FIELDS), np.full(N_FIELDS, pool_id(None, False)), tiles, N_DRAWS, SEED)
    weights = np.array(list(draws.ref_weights()))
    for metric, values in _by_hand(weights, tp, n_pred).items():
        assert field_run["bootstrap"]["ci"][metric] == pytest.approx(_percentile(values), rel=1e-12, abs=1e-15), metric


def test_tile_and_field_bootstraps_agree_in_distribution(both_bootstraps):
    # Same definition, different random streams: the intervals agree to Monte Carlo
    # error (recall moves in steps of 1/40 = 0.025; the quantiles' error is ~0.005).
    tile_run, field_run = both_bootstraps
    for metric in ("precision", "recall", "f1"):
        t, f = tile_run["bootstrap"]["ci"][metric], field_run["bootstrap"]["ci"][metric]
        assert t != f, metric
        assert t == pytest.approx(f, abs=0.03), (metric, t, f)
