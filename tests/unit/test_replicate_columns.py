"""The bootstrap sums only the columns the intervals read (:func:`evalcore.metrics.registry.replicate_columns`).

Each family declares which of its columns its intervals read
(:meth:`~evalcore.metrics.base.MetricFamily.replicate_columns`); the others are summed once,
not once per replicate. If a declaration left out a column an interval reads, that
interval would silently become undefined: these tests finalize random sums with every
column, then with the columns left out set to NaN, and require the interval keys and the
compared keys to come out with the same bits, for several sets of options.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.compare import headline_metrics, overall_metrics
from evalcore.metrics.registry import finalize_all, finalize_replicates, interval_keys, quantity_columns, replicate_columns
from evalcore.options import EvalOptions, check_options

OPTION_SETS = {
    "default": {"bootstrap": 20},
    "full": {"bootstrap": 20, "boundary_tolerance_m": 10.0, "score_column": "score", "aoi": "aoi.gpkg",
             "aoi_id_column": "aoi_id", "annotated_area": "annotated.gpkg"},
    "band": {"bootstrap": 20, "boundary_iou_width_m": 2.0, "iou_sweep_thresholds": (0.3, 0.5, 0.9)},
    "many_to_one": {"bootstrap": 20, "matching": "many_to_one", "score_column": "score", "calibration_bins": 4},
    "classes": {"bootstrap": 20, "class_column": "crop", "pred_class_column": "crop"},
}


def _options(name: str) -> EvalOptions:
    return check_options(**OPTION_SETS[name])


def _keys_read(options: EvalOptions, values: dict) -> tuple[str, ...]:
    compared = [k for k in headline_metrics() + overall_metrics() if k in values]
    return tuple(dict.fromkeys(interval_keys(options) + tuple(compared)))


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_the_intervals_read_only_the_replicate_columns(name):
    options = _options(name)
    columns = quantity_columns(options)
    summed = replicate_columns(options)
    assert set(summed) <= set(columns)
    rng = np.random.default_rng(7)
    n_rep = 50
    # Counts and areas of a plausible size; every column positive, so a ratio is defined.
    sums = {c: rng.integers(1, 400, n_rep).astype(np.float64) * rng.choice([1.0, 37.25]) for c in columns}
    full = finalize_all(sums, options)
    keys = _keys_read(options, full)
    assert keys, "no interval keys: the test would check nothing"
    narrowed = finalize_replicates(np.stack([sums[c] for c in summed], axis=1), options)
    for key in keys:
        value, defined = full[key]
        got_value, got_defined = narrowed[key]
        assert np.asarray(got_value).tobytes() == np.asarray(value).tobytes(), key
        assert np.asarray(got_defined).tobytes() == np.asarray(defined).tobytes(), key


def test_full_options_leave_out_what_no_interval_reads():
    # The full options' 112 columns: the sweep's IoU sums (10), the topology family's
    # merge and split counts (6), the error taxonomy's (6) and the count of false
    # positives outside the annotated area are read by no interval.
    options = _options("full")
    left_out = set(quantity_columns(options)) - set(replicate_columns(options))
    assert {f"sweep_iou@{t}" for t in ("0.5", "0.75", "0.95")} <= left_out
    assert {"merges", "splits", "fn_missed", "fp_duplicate", "n_pred_fp_outside"} <= left_out
    assert not {"tp", "n_ref", "n_pred", "iou_matched", "sweep_tp@0.5", "n_pred_fp_annotated", "cal_brier"} & left_out


def test_finalize_replicates_refuses_the_wrong_width():
    options = check_options(bootstrap=5)
    with pytest.raises(ValueError, match="replicate columns"):
        finalize_replicates(np.zeros((5, len(replicate_columns(options)) + 1)), options)
