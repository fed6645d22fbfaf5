"""Every figure the report can draw is published in one of the Prefect artifact groups."""

from __future__ import annotations

from collections import Counter

from evalcore.html_report.figures import FIGURES
from flows.report_artifacts import FIGURE_GROUPS


def test_every_figure_is_in_exactly_one_group():
    grouped = Counter(name for _, _, names in FIGURE_GROUPS for name in names)
    drawn = {name for name, _ in FIGURES}
    assert set(grouped) == drawn, (sorted(drawn - set(grouped)), sorted(set(grouped) - drawn))
    assert max(grouped.values()) == 1
