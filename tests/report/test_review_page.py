"""The review page (SPEC 6.12) in a real headless chromium: offline, three items decided
with the keyboard and the mouse, kept across a reload, exported as CSV and imported."""

from __future__ import annotations

import json

import geopandas

from evalcore.review.store import import_decisions, make_sample
from tests.report.review_driver import ReviewBrowser
from tests.review_run import write_review_run


def test_review_page_offline_keyboard_mouse_reload_export_import(chromium, tmp_path):
    run = write_review_run(tmp_path, class_column="crop")
    make_sample(run, 24, seed=2)
    page = run / "review" / "index.html"
    sample = geopandas.read_parquet(run / "review" / "sample.parquet")
    ids, auto = sample["item_id"].tolist(), sample["code"].tolist()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with ReviewBrowser(chromium, downloads) as b:
        b.open(page)
        assert [u for u in b.requests() if u != page.resolve().as_uri()] == []  # nothing leaves the page
        assert b.js("document.querySelectorAll('.card').length") == 24
        assert b.js("document.querySelectorAll('svg.draw path').length") >= 24
        # Keyboard: agree with item 0, go to item 1, code 7 (L-REFERENCE-WRONG), severity twice (major).
        b.key("a")
        b.key("j")
        b.key("7")
        b.key("s")
        b.key("s")
        # Mouse: item 2's M-FN-MISSED radio, then a comment typed into its box.
        b.click('#item-2 input[value="M-FN-MISSED"]')
        b.click("#item-2 textarea")
        b.type_text("boundary, not a field")
        b.key("Escape")
        state = b.js("JSON.stringify(window.evalcoreReview.state())")
        decided = json.loads(state)
        assert decided[ids[0]]["code"] == auto[0]
        assert (decided[ids[1]]["code"], decided[ids[1]]["severity"]) == ("L-REFERENCE-WRONG", "major")
        assert (decided[ids[2]]["code"], decided[ids[2]]["comment"]) == ("M-FN-MISSED", "boundary, not a field")
        assert b.js("document.getElementById('progress-text').textContent") == "3 / 24 decided"
        b.reload()
        assert b.js("document.getElementById('progress-text').textContent") == "3 / 24 decided"
        assert b.js("document.querySelector('#item-1 input[value=\"L-REFERENCE-WRONG\"]').checked") is True
        assert b.js("document.querySelector('#item-1 select').value") == "major"
        assert b.js("document.querySelector('#item-2 textarea').value") == "boundary, not a field"
        b.click("#reviewer")
        b.type_text("al.ice")  # not a reviewer name (REVIEWER_PATTERN): no export
        b.click("#export")
        assert b.js("document.getElementById('export-note').textContent").startswith("type your name first")
        b.js("document.getElementById('reviewer').value = ''")
        b.click("#reviewer")
        b.type_text("alice")
        b.click("#export")
        exported = b.wait_download("decisions-alice.csv")
        assert [u for u in b.requests() if not u.startswith(("blob:", "data:")) and u != page.resolve().as_uri()] == []
    review = import_decisions(run, [exported]).review
    assert review["reviewed"] == 3 and review["reviewers"] == ["alice"]
    stored = (run / "review" / "decisions-alice.csv").read_text(encoding="utf-8").splitlines()
    assert stored[0] == "item_id,reviewer,code,severity,agrees,comment,decided_at" and len(stored) == 4
