"""report.html in a real headless browser (Debian's chromium): it renders, shows every figure and requests nothing."""

from __future__ import annotations

import io

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
