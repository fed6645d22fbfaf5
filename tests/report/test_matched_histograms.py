"""The report's matched-IoU histograms are counted one part of fields/ at a time
(evalcore.html_report.sections.matched_histograms): the counts of the whole columns, by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalcore.html_report.figures import IOU_BINS, iou_distribution
from evalcore.html_report.sections import matched_histograms


def _write_parts(directory, parts):
    directory.mkdir()
    for i, frame in enumerate(parts):
        frame.to_parquet(directory / f"part-{i:03d}.parquet", index=False)


def test_counts_over_parts_are_those_of_the_matched_fields(tmp_path):
    fields = tmp_path / "fields"
    _write_parts(fields, [
        pd.DataFrame({"matched": [True, True, False], "iou": [0.01, 0.5, 0.9], "boundary_iou": [0.2, np.nan, 0.3]}),
        pd.DataFrame({"matched": [True, True], "iou": [1.0, 0.5], "boundary_iou": [0.2, 0.99]}),
    ])
    iou, band = matched_histograms(fields, with_band=True)
    # Matched IoU 0.01, 0.5, 1.0, 0.5: bins of 0.025, the last one closed; 0.9 is unmatched.
    expected = np.zeros(40, np.int64)
    expected[[0, 20, 39]] = [1, 2, 1]
    assert iou.tolist() == expected.tolist()
    # Matched boundary IoU 0.2, NaN (left out), 0.2, 0.99.
    expected_band = np.zeros(40, np.int64)
    expected_band[[8, 39]] = [2, 1]
    assert band.tolist() == expected_band.tolist()


def test_without_a_boundary_column_or_band_there_are_no_boundary_counts(tmp_path):
    fields = tmp_path / "fields"
    _write_parts(fields, [pd.DataFrame({"matched": [True], "iou": [0.7]})])
    iou, band = matched_histograms(fields, with_band=True)
    assert iou.sum() == 1 and band is None
    _, band = matched_histograms(fields, with_band=False)
    assert band is None


def test_the_figure_draws_the_counts(monkeypatch):
    # The bars matplotlib draws (the heights Axes.hist returns) are the counts given, bin by bin.
    from matplotlib.axes import Axes

    drawn = []
    hist = Axes.hist

    def recording_hist(self, *args, **kwargs):
        heights, edges, bars = hist(self, *args, **kwargs)
        drawn.append((np.asarray(heights).tolist(), np.asarray(edges).tolist()))
        return heights, edges, bars

    monkeypatch.setattr(Axes, "hist", recording_hist)
    counts = np.zeros(len(IOU_BINS) - 1, np.int64)
    counts[[0, 30, 39]] = [2, 7, 1]
    band = np.zeros(len(IOU_BINS) - 1, np.int64)
    band[8] = 3
    fig = iou_distribution(counts, {"count": 10, "median": 0.76}, band, {"mean": 0.2, "median": 0.2, "width_m": 2.0})
    assert fig.name == "iou_distribution" and fig.png.startswith(b"\x89PNG") and "10 matched pairs" in fig.caption
    assert [d[0] for d in drawn] == [counts.astype(float).tolist(), band.astype(float).tolist()]
    assert all(d[1] == IOU_BINS.tolist() for d in drawn)
