"""report.html from a run directory: its numbers are the run's, its figures are all there, absent families say why."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evalcore.errors import EvalInputError
from evalcore.html_report import FIGURES, build_report

ALWAYS = {"iou_curve", "tile_f1_map", "tile_count_ratio_map", "overlay_worst_tiles", "overlay_errors", "iou_distribution"}
WITH_OPTIONS = ALWAYS | {"per_stratum", "per_size_class", "pr_curve", "reliability", "class_confusion", "class_bars"}


class _Page(HTMLParser):
    """The values (``span.v``: data-key, data-value, text), figures, notes and every src/href of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, tuple[str, str]] = {}
        self.figures: list[str] = []
        self.notes: list[str] = []
        self.links: list[tuple[str, str, str]] = []
        self.tags: set[str] = set()
        self._open: list[tuple[str, str | None, str]] = []  # (kind, key, text so far)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        for name in ("src", "href", "srcset", "poster", "data", "action"):
            if a.get(name):
                self.links.append((tag, name, a[name]))
        if tag == "figure" and a.get("data-figure"):
            self.figures.append(a["data-figure"])
        if tag == "span" and "v" in (a.get("class") or "").split():
            self._open.append(("v", a.get("data-key"), ""))
            self.values[a["data-key"]] = (a["data-value"], "")
        elif tag == "p" and "absent" in (a.get("class") or "").split():
            self._open.append(("note", None, ""))

    def handle_data(self, data: str) -> None:
        if self._open:
            kind, key, text = self._open[-1]
            self._open[-1] = (kind, key, text + data)

    def handle_endtag(self, tag: str) -> None:
        if self._open and ((tag == "span" and self._open[-1][0] == "v") or (tag == "p" and self._open[-1][0] == "note")):
            kind, key, text = self._open.pop()
            if kind == "v":
                self.values[key] = (self.values[key][0], text)
            else:
                self.notes.append(text)
            if self._open:  # a value inside a note or another value: its text belongs to the outer one too
                k, kk, t = self._open[-1]
                self._open[-1] = (k, kk, t + text)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _number(raw: str) -> float | int | None:
    return None if raw == "null" else (int(raw) if raw.lstrip("-").isdigit() else float(raw))


def test_headline_values_are_the_runs(run_dirs, reports):
    run = run_dirs["full"]
    metrics = json.loads((run / "metrics.json").read_text())
    page = _parse(reports["full"])
    ci = metrics["bootstrap"]["ci"]
    for key in ("precision", "recall", "f1", "iou_mean", "ap50", "ap75", "ap50_95", "count_ratio"):
        raw, text = page.values[key]
        assert _number(raw) == metrics[key], key  # exact: repr() round-trips a float
        assert text == f"{metrics[key]:.3f}"
        lo, hi = ci[key]
        assert _number(page.values[f"{key}.ci_lower"][0]) == lo
        assert _number(page.values[f"{key}.ci_upper"][0]) == hi
    for key in ("count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "count_merges", "count_splits"):
        raw, text = page.values[key]
        assert _number(raw) == metrics[key], key
        assert text == f"{metrics[key]:,}"
    assert page.values["iou_threshold"][0] == repr(metrics["iou_threshold"])
    assert page.values["bootstrap.unit"][0] == metrics["bootstrap"]["unit"] == "field"
    assert _number(page.values["bootstrap.n_resamples"][0]) == metrics["bootstrap"]["n_resamples"] == 20
    gates = json.loads((run / "acceptance-gates.json").read_text())
    assert page.values["gates.decision"][0] == gates["decision"] == "pass"
    taxonomy_path = run / "error-taxonomy.json"
    if taxonomy_path.is_file() and "overall" in json.loads(taxonomy_path.read_text()):
        for code, n in json.loads(taxonomy_path.read_text())["overall"].items():
            if isinstance(n, int):
                assert _number(page.values[f"taxonomy.{code}"][0]) == n, code
    worst = metrics["worst"]["per_stratum"]["f1"]
    assert _number(page.values["worst.per_stratum.f1"][0]) == worst["value"]
    assert worst["group"] in reports["full"].read_text()


def test_every_figure_is_in_the_page_and_saved(run_dirs, reports):
    page = _parse(reports["full"])
    assert set(page.figures) == WITH_OPTIONS
    assert len(page.figures) == len(set(page.figures))
    imgs = [v for tag, attr, v in page.links if tag == "img"]
    assert len(imgs) == len(page.figures) and all(v.startswith("data:image/png;base64,") for v in imgs)
    saved = {p.stem for p in (run_dirs["full"] / "figures").glob("*.png")}
    assert saved == WITH_OPTIONS
    assert saved <= {name for name, _ in FIGURES}
    for p in (run_dirs["full"] / "figures").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_is_self_contained(reports):
    for path in reports.values():
        page = _parse(path)
        assert not page.tags & {"script", "link", "iframe", "object", "embed", "video", "audio", "source", "base"}
        for tag, attr, value in page.links:
            assert value.startswith(("data:", "#")), (tag, attr, value[:80])
        text = path.read_text(encoding="utf-8")
        assert "url(" not in text.split("</style>")[0]  # no CSS resource
        assert "default-src 'none'" in text  # and the policy forbids any other source


def test_a_run_without_optional_families_says_why(run_dirs, reports):
    page = _parse(reports["minimal"])
    assert set(page.figures) == ALWAYS
    notes = " ".join(page.notes)
    for why in ("--score-column", "--aoi", "--strata-column", "--size-bins", "--pixel-gsd-m", "paired.json", "acceptance-gates",
                "--class-column"):
        assert why in notes, why
    assert "No intervals: the run had no bootstrap resamples" in reports["minimal"].read_text()
    assert {p.stem for p in (run_dirs["minimal"] / "figures").glob("*.png")} == ALWAYS
    metrics = json.loads((run_dirs["minimal"] / "metrics.json").read_text())
    assert _number(page.values["f1"][0]) == metrics["f1"]
    assert "f1.ci_lower" not in page.values


def test_rebuild_replaces_atomically_and_drops_stale_figures(run_dirs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dirs["minimal"], run)
    (run / "figures").mkdir(exist_ok=True)
    (run / "figures" / "pr_curve.png").write_bytes(b"stale")  # from an earlier build of another run
    (run / "figures" / "mine.png").write_bytes(b"kept")  # not ours: left alone
    out = build_report(run)
    assert out == run / "report.html" and out.stat().st_size > 10_000
    assert not (run / "figures" / "pr_curve.png").exists()
    assert (run / "figures" / "mine.png").read_bytes() == b"kept"
    assert not [p for p in run.rglob("*.tmp")]


def test_not_a_run_directory(tmp_path):
    with pytest.raises(EvalInputError, match=r"not a run directory \(no metrics.json\)") as info:
        build_report(tmp_path)
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("metrics.json", "{not json", r"metrics.json: not valid JSON"),
        ("metrics.json", json.dumps({"precision": 1.0}), r"metrics.json: not an evalcore summary"),
        ("manifest.json", "[1, 2]", r"manifest.json: expected a JSON object"),
        ("tiles.parquet", "PAR1 not really", r"tiles.parquet: cannot be read as GeoParquet"),
    ],
)
def test_a_malformed_file_is_named(run_dirs, tmp_path, name, content, match):
    run = tmp_path / "run"
    shutil.copytree(run_dirs["minimal"], run)
    (run / "report.html").unlink(missing_ok=True)
    (run / name).write_text(content, encoding="utf-8")
    with pytest.raises(EvalInputError, match=match) as info:
        build_report(run)
    assert str(run / name) in str(info.value) and "\n" not in str(info.value)
    assert not (run / "report.html").exists()


def test_pixel_metrics_and_a_paired_comparison_are_shown(run_dirs, tmp_path):
    """The pixel block (docs/metrics.md's example) and a paired.json of the reevaluate flow's layout."""
    run = tmp_path / "run"
    shutil.copytree(run_dirs["minimal"], run)
    metrics = json.loads((run / "metrics.json").read_text())
    micro = {"precision": 0.975609756097561, "recall": 1.0, "f1": 0.9876543209876543, "iou": 0.975609756097561, "mcc": 0.9877246560130001, "tversky": 0.9876543209876543}
    metrics["pixel"] = {"gsd_m": 10.0, "count_pixels": 1000000, "count_tp": 400, "count_fp": 10, "count_fn": 0, "count_tn": 999590, "micro": micro,
                        "macro": {k: {"value": v, "n_units": 1} for k, v in micro.items()},
                        "boundary_f1": {"precision": 1.0, "recall": 0.9285714285714286, "f1": 0.962962962962963, "tolerance_px": 2},
                        "tversky_alpha": 0.5, "tversky_beta": 0.5}
    (run / "metrics.json").write_text(json.dumps(metrics))
    entry = lambda c, i, lo, hi: {"candidate": c, "incumbent": i, "delta": c - i, "ci": [lo, hi]}  # noqa: E731
    paired = {"candidate": "new.parquet", "incumbent": "old.parquet", "bootstrap": {"unit": "tile", "n_resamples": 100},
              "overall": {"precision": entry(0.80, 0.85, -0.07, -0.03), "recall": entry(0.82, 0.81, -0.01, 0.03), "f1": entry(0.81, 0.83, -0.04, 0.0)},
              "worse_units": [{"level": "per_tile", "unit": "32614_58_403", "metric": "f1", "delta": -0.1, "ci": [-0.2, -0.01], "support": 40}],
              "regression": True}
    (run / "paired.json").write_text(json.dumps(paired))
    page = _parse(build_report(run))
    assert "paired" in page.figures and (run / "figures" / "paired.png").is_file()
    for key, value in micro.items():
        assert _number(page.values[f"pixel.micro.{key}"][0]) == value
    text = (run / "report.html").read_text()
    assert "32614_58_403" in text and "regression: yes" in text
    assert not any("--pixel-gsd-m" in n or "paired.json" in n for n in page.notes)


def test_overlays_find_the_objects_when_the_tables_are_labelled_by_ids(run_dirs, tmp_path):
    # With --ref-id-column / --pred-id-column the tables' first column is the id column
    # (engine.tables.output_table), not ref_index / pred_index: the overlays must follow it.
    import geopandas

    run = tmp_path / "run"
    shutil.copytree(run_dirs["full"], run)
    for table, old, new in (("fields", "ref_index", "field_code"), ("predictions", "pred_index", "detection_code")):
        for part in sorted((run / table).glob("*.parquet")):
            frame = geopandas.read_parquet(part)
            assert frame.columns[0] == old
            frame.rename(columns={old: new}).to_parquet(part)
    for stale in (run / "figures").glob("overlay_*.png"):
        stale.unlink()
    build_report(run)
    assert (run / "figures" / "overlay_errors.png").is_file()
    assert (run / "figures" / "overlay_worst_tiles.png").is_file()
