"""The bias-corrected AP interval (``ap_interval="bc"``, issue 33 item 12): by hand, against scipy's BCa, and in a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evalcore
from evalcore.bootstrap import bias_corrected_intervals, percentile_intervals, point_quantile
from evalcore.synth import make_layers


def _linear_quantile(sorted_values: np.ndarray, level: float) -> float:
    """The slow obvious linear interpolation between order statistics (numpy's default, written out)."""
    pos = level * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo]))


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_point_quantile_by_hand():
    reps = np.array([1.0, 2.0, 3.0, 3.0, 4.0, np.nan])
    # Below 3: two; equal: two, counting half; five finite replicates: (2 + 1) / 5.
    assert point_quantile(reps, 3.0) == pytest.approx(0.6)
    assert point_quantile(reps, 0.5) == 0.0 and point_quantile(reps, 9.0) == 1.0
    assert math.isnan(point_quantile(reps, float("nan"))) and math.isnan(point_quantile(np.array([np.nan]), 1.0))


def test_a_centred_point_gives_the_percentile_interval():
    reps = np.arange(1.0, 11.0)  # five below 5.5, five above: q = 0.5, z0 = 0
    values = {"ap50": (reps, np.ones(10, bool))}
    bc, _, q = bias_corrected_intervals(values, {"ap50": 5.5})
    pc, _ = percentile_intervals(values)
    assert q["ap50"] == 0.5 and bc["ap50"] == pytest.approx(pc["ap50"], abs=1e-12)


def test_an_off_centre_point_by_hand():
    reps = np.arange(1.0, 11.0)
    # Point 3: two below, one equal: q = 2.5 / 10 = 0.25, z0 = Φ⁻¹(0.25) = -0.6744897501960817.
    z0, z = -0.6744897501960817, 1.959963984540054
    levels = (_phi(2 * z0 - z), _phi(2 * z0 + z))  # 0.000468..., 0.7294...
    bc, n_undefined, q = bias_corrected_intervals({"ap50": (reps, np.ones(10, bool))}, {"ap50": 3.0})
    assert q["ap50"] == 0.25 and n_undefined["ap50"] == 0
    assert bc["ap50"] == pytest.approx([_linear_quantile(reps, levels[0]), _linear_quantile(reps, levels[1])], abs=1e-9)
    # Both ends moved down from the percentile interval [1.225, 9.775].
    assert bc["ap50"][0] < 1.225 and bc["ap50"][1] < 9.775


def test_a_point_outside_its_resamples_and_undefined_cases():
    reps = np.array([2.0, 3.0, 4.0, np.nan])
    bc, n_undefined, q = bias_corrected_intervals({"k": (reps, np.array([True, True, True, False]))}, {"k": 1.0})
    # q = 0 is held at 1/(2n) = 1/6: finite bounds, both within the resamples' range.
    assert q["k"] == 0.0 and n_undefined["k"] == 1 and 2.0 <= bc["k"][0] <= bc["k"][1] <= 4.0
    bc, _, _ = bias_corrected_intervals({"k": (reps, np.zeros(4, bool))}, {"k": 1.0})
    assert all(math.isnan(b) for b in bc["k"])
    bc, _, _ = bias_corrected_intervals({"k": (reps, np.ones(4, bool))}, {"k": None})
    assert all(math.isnan(b) for b in bc["k"])


def test_equals_scipys_bca_where_the_acceleration_is_zero():
    """scipy.stats.bootstrap's BCa on the mean of data symmetric about its mean: the jackknife
    acceleration is Σ(x̄ − x_(i))³ / (6 (Σ(x̄ − x_(i))²)^1.5) = 0, so BCa is BC on scipy's own resamples."""
    from scipy import stats

    half = np.random.default_rng(3).gamma(2.0, 1.0, 20)
    data = np.concatenate([5 + half, 5 - half, [5.0]])  # symmetric about 5
    res = stats.bootstrap((data,), np.mean, method="BCa", n_resamples=1999, confidence_level=0.95, rng=np.random.default_rng(7))
    reps = res.bootstrap_distribution
    assert np.count_nonzero(reps == data.mean()) == 0  # scipy counts only strictly below; no tie to count half
    bc, _, _ = bias_corrected_intervals({"m": (reps, np.ones(len(reps), bool))}, {"m": float(np.mean(data))})
    assert bc["m"] == pytest.approx([res.confidence_interval.low, res.confidence_interval.high], rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 100), min_size=5, max_size=60), st.integers(0, 100))
def test_bc_bounds_are_ordered_and_within_the_resamples(steps, point):
    """A step function (values on a grid of 0.01, like AP's): the bounds are resample quantiles, ordered."""
    reps = np.array(steps, dtype=float) / 100
    bc, _, q = bias_corrected_intervals({"k": (reps, np.ones(len(reps), bool))}, {"k": point / 100})
    lo, hi = bc["k"]
    assert reps.min() <= lo <= hi <= reps.max()
    assert 0.0 <= q["k"] <= 1.0


def test_the_option_in_a_run_keeps_the_point_and_the_default():
    pred, ref = make_layers(300, 4, bad_rows=False)
    common = dict(score_column="score", bootstrap=40, iou_sweep_thresholds=None, boundary_sample_spacing_m=None)
    default = evalcore.evaluate(pred, ref, **common)
    bc = evalcore.evaluate(pred, ref, ap_interval="bc", **common)
    assert "ap_interval" not in default
    block = bc["ap_interval"]
    assert block["method"] == "bc"
    for key in ("ap50", "ap75", "ap50_95"):
        assert bc[key] == default[key]
        assert block["percentile"][key] == default["bootstrap"]["ci"][key]  # the percentile bounds kept
        assert 0.0 <= block["point_quantile"][key] <= 1.0
        # bootstrap.ci holds the bias-corrected bounds: with the point above (below) the
        # resamples' median, both levels and so both bounds move up (down) from the percentile ones.
        ci, pc, q = bc["bootstrap"]["ci"][key], block["percentile"][key], block["point_quantile"][key]
        if q > 0.5:
            assert ci[0] >= pc[0] and ci[1] >= pc[1], (key, q, ci, pc)
        elif q < 0.5:
            assert ci[0] <= pc[0] and ci[1] <= pc[1], (key, q, ci, pc)
    assert any(bc["bootstrap"]["ci"][k] != block["percentile"][k] for k in ("ap50", "ap75", "ap50_95"))
    # Every other interval is the default run's.
    others = {k: v for k, v in default["bootstrap"]["ci"].items() if k not in ("ap50", "ap75", "ap50_95")}
    assert others == {k: bc["bootstrap"]["ci"][k] for k in others}
    with pytest.raises(ValueError, match="ap_interval"):
        evalcore.evaluate(pred, ref, ap_interval="bca", **common)


def test_the_coverage_studys_ap_equals_the_evaluators():
    """benchmarks.coverage.ap_of_steps (its pooled-truth AP, written out) against evalcore's coco_ap on the same flags."""
    from benchmarks.coverage import ap_of_steps
    from evalcore.metrics.scores import coco_ap

    rng = np.random.default_rng(11)
    for n_pred, n_ref in ((1, 1), (50, 40), (300, 250), (200, 400)):
        tp = rng.random(n_pred) < 0.7
        score = np.sort(rng.random(n_pred))[::-1]  # distinct, descending: one prediction per step
        expected = coco_ap(tp[None, :], n_ref)[0]
        assert ap_of_steps(score, tp.astype(int), (~tp).astype(int), n_ref) == pytest.approx(expected, abs=1e-12)
    # By hand: TP, FP, TP with 2 fields: precision 1, 1/2, 2/3 at recall 1/2, 1/2, 1; envelope 1, 2/3, 2/3.
    # Recall levels 0-0.5 (51) read 1, 0.51-1 (50) read 2/3: (51 + 50 * 2/3) / 101.
    assert ap_of_steps(np.array([0.9, 0.8, 0.7]), np.array([1, 0, 1]), np.array([0, 1, 0]), 2) == pytest.approx((51 + 100 / 3) / 101)


@pytest.mark.cli
def test_the_flag_through_the_cli(tmp_path):
    """``evalcore evaluate --ap-interval bc``: the block in metrics.json and the summary line says the intervals are BC."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from evalcore.synth import write_layers

    exe = Path(sys.executable).parent / "evalcore"
    pred, ref = write_layers(tmp_path / "data", n_ref=200, seed=3)
    out = tmp_path / "metrics.json"
    done = subprocess.run([str(exe) if exe.exists() else "evalcore", "evaluate", "-p", str(pred), "-r", str(ref), "--score-column", "score",
                           "--bootstrap", "30", "--ap-interval", "bc", "--iou-sweep-thresholds", "none", "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads(out.read_text())
    assert metrics["ap_interval"]["method"] == "bc" and set(metrics["ap_interval"]["point_quantile"]) == {"ap50", "ap75", "ap50_95"}
    assert "(bias-corrected intervals)" in done.stdout


def test_paired_ap_deltas_get_the_bias_corrected_interval():
    """``compare(..., ap_interval="bc")``: each AP delta's interval is BC about the point delta, its percentile bounds kept."""
    from evalcore.compare import compare

    pred, ref = make_layers(250, 6, bad_rows=False)
    rng = np.random.default_rng(2)
    worse = pred.assign(score=np.clip(pred["score"].to_numpy() + rng.normal(0, 0.2, len(pred)), 0, 1))  # scores scrambled a little
    common = dict(score_column="score", bootstrap=40, iou_sweep_thresholds=None, boundary_sample_spacing_m=None)
    default = compare(worse, pred, ref, **common)["overall"]
    bc = compare(worse, pred, ref, ap_interval="bc", **common)["overall"]
    for key in ("ap50", "ap75", "ap50_95"):
        assert bc[key]["delta"] == default[key]["delta"]
        assert bc[key]["ci_percentile"] == default[key]["ci"] and 0.0 <= bc[key]["point_quantile"] <= 1.0
        assert "point_quantile" not in default[key]
    for key in ("precision", "recall", "f1"):
        assert bc[key] == default[key]  # only AP changes
