"""The report's figures and pieces as a scientist reads them (issue 33, items 7-11), without a run directory.

Each figure function is called on hand-made values; ``png`` is replaced by a function that
keeps the matplotlib figure, so the test can read what was drawn (line order, colours,
axis ranges, the colour scale) and, where the defect was visual, the PNG's pixels.
Expected values are computed by hand in the comments, not read from the code.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from evalcore.html_report import figures
from evalcore.html_report.figures import colour_scale, fitted_range, group_bars, iou_curve, pr_curves
from evalcore.html_report.loading import RunFiles
from evalcore.html_report.markup import Page, group_label, note, plain
from evalcore.html_report.overlays import BOTH_UNMATCHED_COLOUR
from evalcore.html_report.sections import _gates_html, _identity_html, pixel_paired_section


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures drawn, in order (their PNG is still made, and returned)."""
    kept: list = []
    real = figures.png

    def keep(fig):
        kept.append(fig)
        return real(fig)

    monkeypatch.setattr(figures, "png", keep)
    return kept


def _rgb(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int64)


def _count(img: np.ndarray, hex_colour: str) -> int:
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return int((img == rgb).all(axis=2).sum())


def _sweep(same: bool) -> list[dict]:
    """Ten thresholds; with ``same`` precision = recall = F1 (the case where F1 was hidden)."""
    out = []
    for i, t in enumerate(np.round(np.arange(0.5, 0.96, 0.05), 2)):
        f1 = 0.85 - 0.003 * i
        p, r = (f1, f1) if same else (f1 + 0.01, f1 - 0.01)
        out.append({"iou_threshold": float(t), "precision": p, "recall": r, "f1": f1,
                    "ci": {"precision": [p - 0.02, p + 0.015], "recall": [r - 0.02, r + 0.015], "f1": [f1 - 0.02, f1 + 0.015]}})
    return out


# ---------------------------------------------------------------- item 8: IoU curve, groups


def test_iou_curve_draws_f1_on_top_with_its_bands_on_a_fitted_axis(drawn):
    sweep = _sweep(same=True)
    fig_ = iou_curve(sweep)
    ax = drawn[-1].axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert lines["F1"].get_zorder() > max(lines["precision"].get_zorder(), lines["recall"].get_zorder())
    bands = [c for c in ax.collections if c.get_label().endswith("95 % band")]
    assert len(bands) == 3
    ys = np.concatenate([b.get_paths()[0].vertices[:, 1] for b in bands])
    # F1 runs 0.85 down to 0.85 - 0.027 = 0.823; bands reach 0.823 - 0.02 = 0.803 and 0.865.
    assert ys.min() == pytest.approx(0.803) and ys.max() == pytest.approx(0.865)
    lo, hi = ax.get_ylim()
    assert 0.7 < lo <= 0.803 and 0.865 <= hi < 0.95, (lo, hi)  # fitted, not 0-1
    assert fig_.attrs["bands"] == "yes" and "bands" in fig_.caption
    # Pixels: where the three curves coincide, the F1 colour is what shows; recall's red does not.
    img = _rgb(fig_.png)
    assert _count(img, "#1b1b1b") > 400
    assert _count(img, "#d62728") < 0.05 * _count(img, "#1b1b1b")


def test_iou_curve_without_intervals_says_so(drawn):
    sweep = [{k: v for k, v in e.items() if k != "ci"} for e in _sweep(same=False)]
    fig_ = iou_curve(sweep)
    assert fig_.attrs["bands"] == "no" and "no intervals" in fig_.caption
    assert not [c for c in drawn[-1].axes[0].collections if c.get_label().endswith("band")]


def test_fitted_range_by_hand():
    # 0.82-0.85: span 0.03 < 0.1, so a margin of (0.1 - 0.03) / 2 = 0.035 each side: 0.785-0.885, outward to 0.01.
    assert fitted_range(np.array([0.82, 0.85, np.nan])) == pytest.approx((0.78, 0.89))
    # 0.2-0.9: margin 0.08 * 0.7 = 0.056: 0.144-0.956 -> 0.14-0.96.
    assert fitted_range(np.array([0.2, 0.9])) == pytest.approx((0.14, 0.96))
    assert fitted_range(np.array([0.0, 1.0])) == (0.0, 1.0)  # clipped to the floor and ceiling
    assert fitted_range(np.array([np.nan])) == (0.0, 1.0)


def _group(name, f1, lo, hi, support=100, thin=False):
    return {"group": name, "support": support, "insufficient_support": thin, "f1": f1, "f1_ci_lower": lo, "f1_ci_upper": hi,
            "precision": None, "recall": None, "precision_ci_lower": None, "precision_ci_upper": None,
            "recall_ci_lower": None, "recall_ci_upper": None, "count_ratio": None}


def test_group_dots_and_whiskers_on_a_range_that_separates_them(drawn):
    rows = [_group("a", 0.82, 0.80, 0.84), _group("b", 0.835, 0.81, 0.86), _group("c", 0.85, 0.83, 0.87), _group("d", None, None, None, 5, True)]
    fig_ = group_bars(rows, "per_stratum", {"group": "a", "value": 0.82, "support": 100}, "Per stratum", "per_stratum")
    ax = drawn[-1].axes[0]
    x0, x1 = ax.get_xlim()
    # Values and bounds span 0.80-0.87 (0.07 < 0.1): margin 0.015 -> 0.785-0.885 -> 0.78-0.89.
    assert (x0, x1) == pytest.approx((0.78, 0.89))
    assert fig_.attrs["xlim"] == "0.78,0.89"
    whiskers = [c for c in ax.collections if c.get_segments()]
    spans = sorted((float(s[:, 0].min()), float(s[:, 0].max())) for c in whiskers for s in c.get_segments() if np.ptp(s[:, 0]) > 0)
    assert np.array(spans) == pytest.approx(np.array([(0.80, 0.84), (0.81, 0.86), (0.83, 0.87)]))
    assert "F1 undefined" in [t.get_text() for t in ax.texts]


def test_size_classes_are_in_hectares_with_an_infinite_last_edge(drawn):
    rows = [_group("0-10", 0.8, 0.7, 0.9), _group("10-inf", 0.9, 0.85, 0.95)]
    group_bars(rows, "per_size_class", None, "Per size class", "per_size_class")
    labels = [t.get_text() for t in drawn[-1].axes[0].get_yticklabels()]
    assert labels == ["0-10 ha", "10-∞ ha"]
    assert group_label("10-inf", "per_size_class") == "10-∞ ha" and group_label("Texas", "per_stratum") == "Texas"


# ---------------------------------------------------------------- item 9: colour scales


def test_colour_scale_from_the_supported_tiles_only():
    tiles = pd.DataFrame({"f1": [0.70, 0.75, 0.80, 0.85, 0.90, 0.10, np.nan],
                          "insufficient_support": [False] * 5 + [True, False]})
    vmin, vmax, text = colour_scale(tiles, "f1")
    # numpy's linear quantile of the five supported values: position 0.02 * 4 = 0.08, 0.98 * 4 = 3.92.
    assert vmin == pytest.approx(0.70 + 0.08 * 0.05) and vmax == pytest.approx(0.85 + 0.92 * 0.05)
    assert vmax < 1.0 and "5 tiles with sufficient support" in text


def test_count_ratio_scale_ignores_a_thin_outlier_and_is_symmetric_about_one():
    # The case: one hatched tile at 3.0 (and one at 0.33) must not set the scale.
    tiles = pd.DataFrame({"count_ratio": [0.5, 1.0, 1.0, 2.0, 0.33, 3.0, 0.0], "insufficient_support": [False] * 4 + [True, True, False]})
    vmin, vmax, _ = colour_scale(tiles, "count_ratio")
    # Supported, > 0: 0.5, 1, 1, 2. q02: 0.5 + 0.06 * 0.5 = 0.53; q98: 1 + 0.94 * 1 = 1.94; |log2 0.53| = 0.916 < log2 1.94 = 0.956.
    assert vmax == pytest.approx(1.94) and vmin == pytest.approx(1 / 1.94)


def test_without_supported_tiles_the_scale_says_it_uses_all():
    tiles = pd.DataFrame({"f1": [0.4, 0.6], "insufficient_support": [True, True]})
    vmin, vmax, text = colour_scale(tiles, "f1")
    assert (vmin, vmax) == pytest.approx((0.404, 0.596)) and "none has sufficient support" in text


def test_a_single_f1_value_gets_a_scale_of_some_width():
    tiles = pd.DataFrame({"f1": [1.0, 1.0], "insufficient_support": [False, False]})
    assert colour_scale(tiles, "f1")[:2] == pytest.approx((0.95, 1.0))


# ---------------------------------------------------------------- item 10: PR curves


def test_best_f1_labels_in_their_curves_colour_next_to_their_dot(drawn):
    r = np.linspace(0.0, 0.8, 81)
    m = {"ap50": 0.8, "ap75": 0.7,
         "pr_curve": {"0.5": {"recall": r.tolist(), "precision": (1 - 0.15 * r).tolist()},
                      "0.75": {"recall": (0.9 * r).tolist(), "precision": (1 - 0.2 * r).tolist()}},
         "best_f1": {"0.5": {"recall": 0.8, "precision": 0.88, "f1": 0.838, "score": 0.4},
                     "0.75": {"recall": 0.72, "precision": 0.856, "f1": 0.782, "score": 0.45}}}
    fig_ = pr_curves(m)
    fig = drawn[-1]
    ax = fig.axes[0]
    curve = {ln.get_label().split()[1]: ln.get_color() for ln in ax.get_lines() if ln.get_label().startswith("IoU")}
    renderer = FigureCanvasAgg(fig).get_renderer()
    for key in ("0.5", "0.75"):
        label = next(t for t in ax.texts if t.get_gid() == f"label-{key}")
        assert label.get_color() == curve[key]
        assert label.arrow_patch.get_edgecolor()[:3] == pytest.approx(tuple(int(curve[key][i:i + 2], 16) / 255 for i in (1, 3, 5)))
        assert label.xy == (m["best_f1"][key]["recall"], m["best_f1"][key]["precision"])
        # The label's box is within 30 points (46 px at 110 dpi) of its dot.
        box = label.get_window_extent(renderer)
        dot = ax.transData.transform(label.xy)
        gap = np.hypot(max(box.x0 - dot[0], 0, dot[0] - box.x1), max(box.y0 - dot[1], 0, dot[1] - box.y1))
        assert gap < 30 * figures.DPI / 72, (key, gap)
    # Axes zoomed: precision runs 0.84-1.0 (span 0.16, margin 0.0064 -> 0.83-1.01).
    assert ax.get_ylim() == pytest.approx((0.83, 1.01)) and fig_.attrs["ylim"] == "0.83,1.01"


# ---------------------------------------------------------------- item 11: identity, overlays, pixels


def _run(tmp_path: Path, **files) -> RunFiles:
    return RunFiles(run_dir=tmp_path, metrics={"count_reference": 1, "f1": 1.0}, **files)


def test_identity_table_reads_as_text(tmp_path):
    contract = {"schema_version": 1, "started": "2026-11-30T10:00:00+00:00", "seed": 42, "labels": {}, "publishable": True,
                "not_publishable_because": None, "evaluator": {"name": "evalcore", "version": "0.1.0", "git_commit": "abc123", "git_dirty": False}}
    manifest = {"started": "2026-11-30T10:00:00+00:00", "finished": "2026-11-30T10:01:00+00:00", "status": "succeeded",
                "versions": {"python": "3.11.7", "evalcore": "0.1.0", "prefect": "3.9.1"},
                "parameters": {"size_bins": [0, 0.5, 1, 2, 5, 10, None], "exclude_training_area": False, "keep_workdir": True, "bootstrap": 20}}
    html = _identity_html(_run(tmp_path, contract=contract, manifest=manifest))
    cells = [re.sub("<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", html)]
    firsts = cells[0::2]
    assert firsts.count("evaluator") == 1 and firsts.count("started") == 1
    text = " ".join(cells)
    for raw in ("None", "True", "False", "`"):
        assert raw not in text, raw
    assert "size_bins = 0, 0.5, 1, 2, 5, 10, ∞ ha" in text
    assert "exclude_training_area = no" in text and "keep_workdir = yes" in text
    row = dict(zip(firsts, cells[1::2]))
    assert row["publishable"] == "yes" and row["not publishable because"] == "—"
    assert "abc123" in row["evaluator"] and "prefect 3.9.1" in row["evaluator"]


def test_markdown_code_is_html_code(tmp_path):
    assert note("give `evalcore gate RUN FILE` <now>") == '<p class="absent">give <code>evalcore gate RUN FILE</code> &lt;now&gt;</p>'
    assert "`" not in _gates_html(_run(tmp_path))
    assert plain({"a": None, "b": [1.5, True]}) == "a: —, b: 1.5, yes"


def test_the_overlap_colour_is_the_mixed_fill():
    # On white: reference at 0.08, again at 0.30 (unmatched), then the prediction at 0.30, by hand:
    # #7b2cbf = (123, 44, 191), #f28e00 = (242, 142, 0); R: 255*0.92 + 123*0.08 = 244.44;
    # 0.7*244.44 + 0.3*123 = 208.008; 0.7*208.008 + 0.3*242 = 218.2 -> da. G: 238.12, 179.884, 168.52 -> a9.
    # B: 249.88, 232.216, 162.55 -> a3.
    assert BOTH_UNMATCHED_COLOUR == "#daa9a3"


def test_the_page_says_why_macro_pixel_precision_and_recall_cover_different_tiles(tmp_path):
    rates = ("precision", "recall", "f1", "iou", "mcc", "tversky")
    units = {"precision": 54, "recall": 45, "f1": 54, "iou": 54, "mcc": 45, "tversky": 54}
    pixel = {"gsd_m": 10.0, "count_pixels": 10, "micro": {k: 0.5 for k in rates}, "macro": {k: {"value": 0.5, "n_units": units[k]} for k in rates}}
    run = RunFiles(run_dir=tmp_path, metrics={"count_reference": 1, "f1": 1.0, "pixel": pixel})
    page = Page()
    pixel_paired_section(run, page)
    text = re.sub("<[^>]+>", "", "".join(page.parts))
    assert "precision over the 54 tiles with predicted pixels" in text and "recall over the 45 with reference pixels" in text


# ---------------------------------------------------------------- item 12: AP intervals explained


def _ap_metrics(bc: bool) -> dict:
    m = {"count_reference": 10, "f1": 0.8, "ap50": 0.792, "ap75": 0.7, "ap50_95": 0.6,
         "bootstrap": {"n_resamples": 100, "ci": {"ap50": [0.791, 0.802], "ap75": [0.69, 0.72], "ap50_95": [0.59, 0.62]}}}
    if bc:
        m["ap_interval"] = {"method": "bc", "percentile": {"ap50": [0.7916, 0.805], "ap75": [0.695, 0.73], "ap50_95": [0.595, 0.63]},
                            "point_quantile": {"ap50": 0.04, "ap75": 0.3, "ap50_95": 0.2}}
    return m


def test_the_headline_explains_lopsided_ap_intervals(tmp_path):
    from evalcore.html_report.sections import headline

    html = headline(RunFiles(run_dir=tmp_path, metrics=_ap_metrics(False)))
    note_ = re.search(r'<p class="ap-note">(.*?)</p>', html).group(1)
    assert "101 fixed recall levels" in note_ and "<code>--ap-interval bc</code>" in note_
    assert "AP at IoU 0.5*" in html
    html = headline(RunFiles(run_dir=tmp_path, metrics=_ap_metrics(True)))
    # The point's quantile (0.04 -> 4 %) and the percentile interval stand next to the BC one.
    assert 'data-key="ap_interval.point_quantile.ap50" data-value="4.0">4</span> % quantile' in html
    assert "percentile interval [0.792, 0.805]" in html and "bias-corrected" in re.search(r'<p class="ap-note">(.*?)</p>', html).group(1)
    no_boot = {k: v for k, v in _ap_metrics(False).items() if k != "bootstrap"}
    assert "ap-note" not in headline(RunFiles(run_dir=tmp_path, metrics=no_boot))


def test_a_thin_group_does_not_stretch_the_axis(drawn):
    """A size class of three fields (F1 0.33 [0.0, 0.93]) no longer puts every other group on 0-1."""
    rows = [_group("0-1", 0.333, 0.0, 0.93, 3, True), _group("1-2", 0.85, 0.80, 0.89), _group("2-5", 0.83, 0.80, 0.87)]
    fig_ = group_bars(rows, "per_size_class", None, "Per size class", "per_size_class")
    ax = drawn[-1].axes[0]
    # Supported: 0.80-0.89, margin max(0.08 * 0.09, (0.1 - 0.09) / 2) = 0.0072 -> 0.7928-0.8972 -> 0.79-0.90.
    assert ax.get_xlim() == pytest.approx((0.79, 0.90))
    assert "F1 0.333" in [t.get_text() for t in ax.texts] and "arrow at the edge" in fig_.caption
