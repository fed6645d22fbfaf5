"""``report.md`` (also the Prefect markdown artifact) shows user strings as text, one table row each.

One ``evalcore run`` (a real LocalCluster and the session's temporary Prefect server)
on layers whose strata, AOI ids, AOI id column, score column and input directory are
hostile: HTML (``<script>``, ``<img onerror>``), Markdown (a link to ``javascript:``,
emphasis, code, a ``|``), entities, a newline, a NUL, a tab. The report is rendered with
a CommonMark renderer that passes raw HTML through (markdown-it with tables), and the
test checks that it holds no HTML, link, image, emphasis or code made from those
strings, that the per-stratum table has one row per stratum, and that each row's first
cell shows the stratum's text (control characters as their visible pictures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import geopandas
import numpy as np
import pytest
from markdown_it import MarkdownIt
from shapely.geometry import box

ROOT = Path(__file__).resolve().parents[2]
X0, Y0 = 500_000.0, 4_400_000.0

STRATA = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "a|b",
    "line\nbreak",
    "nul\x00byte",
    "`tick` *star* _under_ ~~gone~~",
    "[link](javascript:alert(1))",
    "back\\slash &amp; &lt;b&gt;",
    "tab\there\r\n",
]
# What a reader must see in the stratum's cell, worked out by hand: the same text, the
# control characters shown as their pictures (U+2400 + code: NUL ␀, TAB ␉, LF ␊, CR ␍).
SHOWN = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "a|b",
    "line␊break",
    "nul␀byte",
    "`tick` *star* _under_ ~~gone~~",
    "[link](javascript:alert(1))",
    "back\\slash &amp; &lt;b&gt;",
    "tab␉here␍␊",
]
AOI_IDS = ["<b>aoi</b>|1", "aoi\n<i>2</i>"]
AOI_COLUMN = "aoi`id`<u>"
SCORE_COLUMN = "score|<em>x</em>"
INPUT_DIR = "in <b>bold</b> |x| [l](javascript:alert(1))"
PER = 6  # fields per stratum


def _layers(tmp: Path) -> tuple[Path, Path, Path]:
    """9 strata of 6 squares in a row each; one prediction in six missing; two AOIs (west, east)."""
    ref_geoms, strata = [], []
    for s, name in enumerate(STRATA):
        for k in range(PER):
            ref_geoms.append(box(X0 + 200 * k, Y0 + 200 * s, X0 + 200 * k + 100, Y0 + 200 * s + 100))
            strata.append(name)
    ref = geopandas.GeoDataFrame({"stratum": strata}, geometry=ref_geoms, crs="EPSG:32613")
    keep = [i for i in range(len(ref_geoms)) if i % PER != 5]
    pred = geopandas.GeoDataFrame({SCORE_COLUMN: np.linspace(0.1, 0.9, len(keep))},
                                  geometry=[ref_geoms[i].buffer(4, join_style="mitre") for i in keep], crs="EPSG:32613")
    height = 200 * len(STRATA)
    aoi = geopandas.GeoDataFrame({AOI_COLUMN: AOI_IDS},
                                 geometry=[box(X0 - 50, Y0 - 50, X0 + 550, Y0 + height), box(X0 + 550, Y0 - 50, X0 + 1250, Y0 + height)],
                                 crs="EPSG:32613")
    folder = tmp / INPUT_DIR
    folder.mkdir(parents=True)
    paths = folder / "predicted.parquet", folder / "reference.parquet", folder / "aoi.parquet"
    for frame, path in zip((pred, ref, aoi), paths):
        frame.to_parquet(path)
    return paths


def _inline_text(token) -> str:
    """The text an inline token shows; fails on anything but plain text inside it."""
    kinds = {child.type for child in token.children}
    assert kinds <= {"text"}, (kinds, token.content)
    return "".join(child.content for child in token.children)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, prefect_server) -> Path:
    tmp = tmp_path_factory.mktemp("md-escape")
    pred, ref, aoi = _layers(tmp)
    out = tmp / "run"
    env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_API_URL=prefect_server)
    proc = subprocess.run(
        [sys.executable, "-m", "evalcore.cli", "run", "-p", str(pred), "-r", str(ref), "--workers", "1",
         "--strata-column", "stratum", "--aoi", str(aoi), "--aoi-id-column", AOI_COLUMN, "--score-column", SCORE_COLUMN,
         "--min-support", "1", "--bootstrap", "10", "-o", str(out)],
        capture_output=True, text=True, timeout=500, cwd=ROOT, env=env,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return out


@pytest.mark.timeout(600)
def test_report_md_shows_user_strings_as_text(run_dir):
    text = (run_dir / "report.md").read_text(encoding="utf-8")
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    assert sorted(metrics["per_stratum"]) == sorted(STRATA)  # the run kept the strata as given

    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)
    inline = [t for t in tokens if t.type == "inline"]
    made = {child.type for t in inline for child in t.children} | {t.type for t in tokens}
    # No HTML, link, image or emphasis anywhere; code only for the two sha256 prefixes and
    # evalcore's own flag names in its fixed text (the AP intervals' note names its option).
    for kind in ("html_inline", "html_block", "link_open", "image", "em_open", "strong_open", "s_open"):
        assert kind not in made, (kind, text[:3000])
    codes = [child.content for t in inline for child in t.children if child.type == "code_inline"]
    hashes = [c for c in codes if c.endswith("…") and all(ch in "0123456789abcdef" for ch in c[:-1])]
    assert len(hashes) == 2, codes
    assert set(codes) - set(hashes) <= {"--ap-interval bc"}, codes

    # The per-stratum table: one body row per stratum, 7 cells each, the first showing the stratum.
    start = next(i for i, t in enumerate(tokens) if t.type == "inline" and t.content == "Per stratum")
    table_open = next(i for i in range(start, len(tokens)) if tokens[i].type == "table_open")
    table_close = next(i for i in range(table_open, len(tokens)) if tokens[i].type == "table_close")
    rows, row = [], None
    for t in tokens[table_open:table_close]:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(t)
        elif t.type == "tr_close":
            rows.append(row)
    header, body = rows[0], rows[1:]
    assert len(header) == 7 and all(len(r) == 7 for r in body), [len(r) for r in rows]
    assert sorted(_inline_text(r[0]) for r in body) == sorted(SHOWN)
    for r in body:
        assert _inline_text(r[1]) == str(PER)  # reference fields of the stratum

    # The input paths and the column names read as themselves.
    plain = " ".join(child.content for t in inline for child in t.children if child.type == "text")
    assert f"{INPUT_DIR}/predicted.parquet" in plain and f"{INPUT_DIR}/reference.parquet" in plain
    assert f"the column {SCORE_COLUMN}" in plain and f"the column {AOI_COLUMN}" in plain


@pytest.mark.timeout(120)
def test_the_markdown_artifact_is_the_escaped_report(run_dir):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["evalcore-report-run"])))
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert any(a.type == "markdown" and a.data == report for a in found)
    assert "<script>" not in report and "\\<script\\>" in report
