"""Tests of the clustered-error option of evalcore.synth (``error_correlation_km``).

Without it the layers are the ones the generator always made (pinned digests of the
layers made before the option existed); with it the reference layer is unchanged, the
error mix keeps its mean, and errors are spatially clustered: a field's error
indicator correlates with its neighbours', much more at a long correlation length
than at a short one, and not at all with independent errors.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd
import pytest
import shapely

from evalcore.synth import BAD_ROW_KINDS, ERROR_MIX, make_layers, write_layers
from evalcore.synth.constants import _BAD_SHAPE, _GOOD, _MISS, _OUTCOME_NAMES
from evalcore.synth.predictions import _error_weight, _random_field, _sample_outcomes

N_REF = 5000
SEED = 1


def digest(layer, decimals: int) -> str:
    """SHA-256 of the attributes, geometry types and coordinates (rounded to ``decimals``) of a layer."""
    h = hashlib.sha256()
    h.update(layer.drop(columns="geometry").to_csv().encode())
    xy, index = shapely.get_coordinates(layer.geometry.values, return_index=True)
    h.update(np.round(xy, decimals).tobytes())
    h.update(index.astype(np.int64).tobytes())
    h.update(",".join(map(str, shapely.get_type_id(layer.geometry.values))).encode())
    return h.hexdigest()


def assert_layers_equal(a, b) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="geometry"), b.drop(columns="geometry"))
    assert a.crs == b.crs
    assert list(shapely.to_wkb(a.geometry.values)) == list(shapely.to_wkb(b.geometry.values))


def poorly_covered(pred, ref) -> tuple[np.ndarray, np.ndarray]:
    """Fields less than 45 % covered by the predictions (missed or bad shape), and their centroids (m)."""
    fields = ref.to_crs(pred.crs).geometry.values
    preds = pred.geometry.values
    r, p = shapely.STRtree(preds).query(fields, predicate="intersects")
    covered = np.zeros(len(fields))
    np.add.at(covered, r, shapely.area(shapely.intersection(fields[r], preds[p])))
    return covered / shapely.area(fields) < 0.45, shapely.get_coordinates(shapely.centroid(fields))


def neighbour_correlation(indicator: np.ndarray, xy: np.ndarray, k: int = 50) -> float:
    """Correlation of each field's indicator with the mean indicator of its ``k`` nearest fields."""
    values = indicator.astype(float)
    neighbours = np.empty(values.size)
    for start in range(0, values.size, 1000):
        block = xy[start : start + 1000]
        d = np.hypot(block[:, None, 0] - xy[None, :, 0], block[:, None, 1] - xy[None, :, 1])
        d[np.arange(len(block)), np.arange(start, start + len(block))] = np.inf
        neighbours[start : start + len(block)] = values[np.argpartition(d, k, axis=1)[:, :k]].mean(axis=1)
    return float(np.corrcoef(values, neighbours)[0, 1])


@pytest.fixture(scope="module")
def indicators() -> dict:
    """Poorly-covered indicator and centroids for independent errors and two correlation lengths."""
    out = {}
    for km in (None, 0.1, 0.3, 2.0):
        pred, ref = make_layers(N_REF, SEED, bad_rows=False, error_correlation_km=km)
        out[km] = poorly_covered(pred, ref)
    return out


# --- no option: the layers of before ----------------------------------------------


@pytest.mark.parametrize(
    ("n_ref", "seed", "kwargs", "pred_digest", "ref_digest"),
    [
        (300, 5, {}, "1809fa13f45d7e4d6c9485bbe20869b3118adcf8c103780830438d5dfb32b297",
         "4d21f8f0ea9abb8a76c0d742caeb40ab1b548b3f8dad2020f4915083d547691f"),
        (400, 2, dict(n_clusters=6, bad_rows=False, score_decimals=3),
         "ee4e2db4b98cec2d4b7f5533a0bebe7cca2bee6ae859ec1c5825705aeae41161",
         "ed66ef51c0b23ecd37cd728b23ce572615be742442bfe1963f95355ac02eb373"),
    ],
)  # fmt: skip
def test_without_the_option_the_layers_are_those_of_before(n_ref, seed, kwargs, pred_digest, ref_digest):
    # Digests of the layers of the generator before error_correlation_km existed (and before
    # the predicted crop, issue 31: drawn from a generator of its own, it is left out here).
    for extra in ({}, {"error_correlation_km": None}):
        pred, ref = make_layers(n_ref, seed, **kwargs, **extra)
        assert digest(pred.drop(columns="crop"), 3) == pred_digest
        assert digest(ref, 7) == ref_digest


def test_none_equals_the_default():
    assert_layers_equal(make_layers(250, 4)[0], make_layers(250, 4, error_correlation_km=None)[0])


# --- with the option -----------------------------------------------------------------


def test_reference_layer_is_unchanged_and_predictions_differ():
    pred0, ref0 = make_layers(600, 9)
    pred1, ref1 = make_layers(600, 9, error_correlation_km=2.0)
    assert_layers_equal(ref0, ref1)
    assert list(shapely.to_wkb(pred0.geometry.values)) != list(shapely.to_wkb(pred1.geometry.values))
    assert pred1["pred_id"].is_unique and sorted(pred1["pred_id"]) == list(range(len(pred1)))
    assert pred1["score"].between(0, 1).all()
    polygons = pred1.geometry.values[np.isin(pred1.geom_type, ["Polygon", "MultiPolygon"])]
    assert shapely.is_valid(polygons).mean() > 0.99


def test_same_seed_same_layers_and_lengths_differ():
    a = make_layers(400, 3, error_correlation_km=1.5)
    b = make_layers(400, 3, error_correlation_km=1.5)
    assert_layers_equal(a[0], b[0])
    c = make_layers(400, 3, error_correlation_km=6.0)
    assert list(shapely.to_wkb(a[0].geometry.values)) != list(shapely.to_wkb(c[0].geometry.values))


def test_global_random_state_is_untouched():
    np.random.seed(0)
    expected = np.random.random(3)
    np.random.seed(0)
    make_layers(80, 1, error_correlation_km=1.0)
    assert np.array_equal(np.random.random(3), expected)


def test_no_fields_and_one_cluster():
    pred, ref = make_layers(0, 2, bad_rows=False, error_correlation_km=1.0)
    assert len(pred) == len(ref) == 0
    pred, ref = make_layers(120, 2, n_clusters=1, error_correlation_km=0.5)
    assert len(ref) == 120 + len(BAD_ROW_KINDS)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_bad_lengths_are_refused(bad):
    with pytest.raises(ValueError, match="error_correlation_km"):
        make_layers(10, 0, error_correlation_km=bad)


@pytest.mark.parametrize("bad", ["2", True, [2.0]])
def test_non_numbers_are_refused(bad):
    with pytest.raises(TypeError, match="error_correlation_km"):
        make_layers(10, 0, error_correlation_km=bad)


def test_write_layers_passes_the_option(tmp_path):
    pred_path, ref_path = write_layers(tmp_path, 150, 6, error_correlation_km=1.0)
    pred, _ = make_layers(150, 6, error_correlation_km=1.0)
    written = pd.read_parquet(pred_path)
    assert written["pred_id"].tolist() == pred["pred_id"].tolist()
    assert np.array_equal(written["score"].to_numpy(), pred["score"].to_numpy())


# --- the error mix and its clustering ------------------------------------------------


def test_outcome_shares_keep_the_error_mix_in_the_mean():
    rng = np.random.default_rng(0)
    n = 400_000
    weight = rng.uniform(0.0, 2.0, n)  # what 2 Phi(z) is for a Gaussian field
    outcome = _sample_outcomes(np.random.default_rng(1), n, weight)
    names = _OUTCOME_NAMES[: _BAD_SHAPE + 1]
    shares = np.bincount(outcome, minlength=len(names)) / n
    scale = 1.0 - ERROR_MIX["merge"]
    for k, name in enumerate(names):
        assert shares[k] == pytest.approx(ERROR_MIX[name] / scale, abs=0.003), name
    # Where the weight is high, misses are more frequent, and "good" less.
    high = weight > 1.5
    assert (outcome[high] == _MISS).mean() > 1.5 * ERROR_MIX["miss"] / scale
    assert (outcome[high] == _GOOD).mean() < ERROR_MIX["good"] / scale


def test_random_field_has_the_stated_correlation():
    length = 2_000.0
    n = 3000
    x = np.array([0.0, length, 3 * length])
    values = np.array([
        _random_field(np.random.default_rng([7, k]), x, np.zeros(3), np.zeros(3, np.int64), 1, length)
        for k in range(n)
    ])  # fmt: skip
    assert values.mean() == pytest.approx(0.0, abs=0.06)
    assert values.var(axis=0) == pytest.approx(np.ones(3), abs=0.1)
    assert np.corrcoef(values[:, 0], values[:, 1])[0, 1] == pytest.approx(math.exp(-1.0), abs=0.06)
    assert abs(np.corrcoef(values[:, 0], values[:, 2])[0, 1]) < 0.06
    weight = _error_weight(values.ravel())
    assert weight.min() >= 0.0 and weight.max() <= 2.0
    assert weight.mean() == pytest.approx(1.0, abs=0.03)


def test_poorly_covered_share_stays_that_of_independent_errors(indicators):
    independent = indicators[None][0].mean()
    assert independent == pytest.approx(ERROR_MIX["miss"] + ERROR_MIX["bad_shape"], abs=0.015)
    for km in (0.1, 0.3):  # many independent patches: the realised share is near its mean
        assert indicators[km][0].mean() == pytest.approx(independent, abs=0.012), km


def test_errors_are_spatially_clustered(indicators):
    corr = {km: neighbour_correlation(*indicators[km]) for km in indicators}
    assert abs(corr[None]) < 0.05
    assert abs(corr[0.1]) < 0.05
    assert corr[2.0] > 0.08
    assert corr[2.0] > 3 * max(corr[0.1], 0.01)
