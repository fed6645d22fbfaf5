"""report.html in a real headless browser (Debian's chromium): it renders, shows every figure and requests nothing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from tests.report.browser import open_page


def _outside_requests(visit, page) -> list[str]:
    """Every request but the page itself and its data: URIs (an inline image is decoded, not fetched)."""
    return [u for u in visit.requests if not u.startswith("data:") and u != page.resolve().as_uri()]


def _not_blank(png: bytes) -> tuple[float, float]:
    grey = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    return float(grey.std()), float((grey < 250).mean())


@pytest.mark.parametrize("name", ["full", "minimal"])
def test_report_renders_offline_with_every_figure(chromium, reports, run_dirs, name, tmp_path):
    page = reports[name]
    visit = open_page(chromium, page)
    assert _outside_requests(visit, page) == []
    assert visit.requests[0] == page.resolve().as_uri()
    figures = [i["figure"] for i in visit.images]
    expected = sorted(p.stem for p in (run_dirs[name] / "figures").glob("*.png"))
    assert sorted(figures) == expected and None not in figures
    assert all(i["complete"] and i["width"] > 100 and i["height"] > 100 for i in visit.images), visit.images
    (tmp_path / f"{name}.png").write_bytes(visit.screenshot)
    spread, inked = _not_blank(visit.screenshot)
    width, height = Image.open(io.BytesIO(visit.screenshot)).size
    assert width >= 1000 and height > 3000  # the whole page, not one screen
    assert spread > 20 and inked > 0.03, (spread, inked)
    assert visit.console_errors == []


def test_the_request_check_sees_a_request(chromium, tmp_path):
    """The check above would fail on a page that fetches anything (here an image from a closed port on 127.0.0.1)."""
    page = tmp_path / "fetches.html"
    page.write_text('<!DOCTYPE html><html><body><p>one image</p><img src="http://127.0.0.1:9/x.png"></body></html>', encoding="utf-8")
    visit = open_page(chromium, page)
    assert _outside_requests(visit, page) == ["http://127.0.0.1:9/x.png"]


_READS = {
    "headline": """(() => { const cell = document.querySelector('table.headline tbody tr td:nth-child(2)');
        const style = e => { const s = getComputedStyle(e); return [s.fontWeight, s.fontSize]; };
        return {value: style(cell.querySelector(':scope > .v')), lower: style(cell.querySelector('.ci .v:first-child')),
                upper: style(cell.querySelector('.ci .v:last-child'))}; })()""",
    "figures": """Object.fromEntries(Array.from(document.querySelectorAll('figure')).map(f => { const r = f.querySelector('img').getBoundingClientRect();
        return [f.dataset.figure, {attrs: Object.assign({}, f.dataset), caption: f.querySelector('figcaption').textContent,
                x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height}]; }))""",
    "identity": """Array.from(document.querySelectorAll('table.identity tr')).map(r => Array.from(r.cells).map(c => c.textContent))""",
    "swatch": """getComputedStyle(document.querySelector('#overlays .swatch')).backgroundColor""",
    "size_header": """document.querySelector('#per-size-class table:not(.headline) th').textContent""",
    "size_rows": """Array.from(document.querySelectorAll('#per-size-class table tbody tr td:first-child')).map(c => c.textContent)""",
}


def test_the_report_reads_as_a_scientist_reads_it(chromium, reports, run_dirs):
    """Issue 33, items 7-11, on the rendered page: computed styles, figure facts and the screenshot's pixels."""
    import geopandas

    visit = open_page(chromium, reports["full"], evaluate=_READS)
    v = visit.values
    # 7: the value bold and large, both bounds of its interval alike and plain.
    head = v["headline"]
    assert head["lower"] == head["upper"] and head["lower"][0] == "400" and head["value"][0] == "600", head
    # 8: the IoU curve's F1 line visible in the screenshot, the bands drawn, the y-axis fitted to the sweep.
    shot = np.asarray(Image.open(io.BytesIO(visit.screenshot)).convert("RGB"), dtype=np.int64)
    fig = v["figures"]["iou_curve"]
    crop = shot[int(fig["y"]):int(fig["y"] + fig["h"]), int(fig["x"]):int(fig["x"] + fig["w"])]
    assert int((crop == [27, 27, 27]).all(axis=2).sum()) > 400  # #1b1b1b, F1's colour, drawn last
    metrics = json.loads((run_dirs["full"] / "metrics.json").read_text())
    bounds = [b for e in metrics["iou_sweep"] for m in ("precision", "recall", "f1") for b in e["ci"][m]]
    lo, hi = (float(x) for x in fig["attrs"]["ylim"].split(","))
    assert fig["attrs"]["bands"] == "yes" and lo <= min(bounds) and hi >= max(bounds) and lo > 0.0
    # 9: each tile map's colour scale is the 2-98 % range of the tiles with sufficient support.
    tiles = geopandas.read_parquet(run_dirs["full"] / "tiles.parquet")
    supported = ~tiles["insufficient_support"].astype(bool)
    f1 = tiles.loc[supported, "f1"].dropna().to_numpy(dtype=float)
    attrs = v["figures"]["tile_f1_map"]["attrs"]
    assert (float(attrs["vmin"]), float(attrs["vmax"])) == pytest.approx(tuple(np.quantile(f1, [0.02, 0.98])))
    assert "sufficient support" in v["figures"]["tile_f1_map"]["caption"]
    ratio = tiles.loc[supported, "count_ratio"].dropna().to_numpy(dtype=float)
    r = 2 ** max(0.1, *np.abs(np.log2(np.quantile(ratio[ratio > 0], [0.02, 0.98]))))
    attrs = v["figures"]["tile_count_ratio_map"]["attrs"]
    assert (float(attrs["vmin"]), float(attrs["vmax"])) == pytest.approx((1 / r, r))
    # 10: the PR axes zoomed to the curves.
    p_lo = float(v["figures"]["pr_curve"]["attrs"]["ylim"].split(",")[0])
    assert p_lo > 0.0 and p_lo <= min(min(c["precision"]) for c in metrics["pr_curve"].values())
    # 11: the identity table as text, each fact once; size classes in ha; the overlap colour explained.
    firsts = [row[0] for row in v["identity"]]
    assert firsts.count("evaluator") == 1 and firsts.count("started") == 1
    text = " ".join(c for row in v["identity"] for c in row)
    assert not {"None", "True", "False", "`"} & set(text.replace(",", " ").replace(";", " ").split()) and "`" not in text
    assert v["size_header"] == "size class" and "hectares" in v["figures"]["per_size_class"]["caption"]
    assert v["size_rows"] and all(c.endswith(" ha") and "inf" not in c for c in v["size_rows"]), v["size_rows"]
    assert v["swatch"] == "rgb(218, 169, 163)"
