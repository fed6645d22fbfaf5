"""The review page of a sample (``review/index.html``, SPEC 6.12): one offline HTML file.

Each item is a card: an inline SVG of the item over its neighbourhood (reference and
prediction outlines in the report's colours, the item thicker, a scale bar), its tile,
cell, automatic code, score and class, and the form: the reviewer's code, severity,
agree/disagree with the automatic code, a comment. Decisions are kept in the browser's
``localStorage`` (keyed by the sample's fingerprint) and exported as
``decisions-<reviewer>.csv`` (:data:`~evalcore.review.decisions.DECISION_COLUMNS`).

The drawings are SVG, not the report's matplotlib PNGs: the demo run's 200 cards were
written in 1.4 s and stay sharp when zoomed, where 200 small matplotlib figures drawn and
encoded as the report does took 65 s (docs/review.md). Coordinates are metres in a local equirectangular frame around
each item (error well below a pixel over a window of a few hundred metres). Cards are
rendered lazily by the browser (``content-visibility: auto``), so 200 cards load fast.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
import shapely

from evalcore.html_report.figures import scale_length
from evalcore.html_report.markup import esc, fmt
from evalcore.html_report.overlays import OBJECT_WINDOW_MIN_M, PREDICTION_COLOUR, REFERENCE_COLOUR
from evalcore.review.decisions import DECISION_COLUMNS
from evalcore.review.layout import REVIEWER_PATTERN
from evalcore.review.sample import REVIEW_CODES, SEVERITIES

__all__ = ["review_page", "sample_fingerprint", "DRAW_SIZE_PX"]

DRAW_SIZE_PX = 300
"""Side of each card's drawing on the page, in CSS pixels."""
MAX_NEIGHBOURS = 200
"""Per layer and card: beyond this, only the nearest polygons are drawn."""
_M_PER_DEG_LAT = 110_540.0
_M_PER_DEG_LON = 111_320.0


def sample_fingerprint(sample: pd.DataFrame) -> str:
    """A short hash of the sample's items, seed and size: the key of its decisions in the browser."""
    text = json.dumps([sample["item_id"].tolist(), sample["sample_seed"].tolist()[:1], sample["sample_size"].tolist()[:1]], default=int)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _path(geom: object, x0: float, y0: float, kx: float, side: float) -> str:
    """SVG path data of a (multi)polygon's rings in the card's frame (metres, y down)."""
    parts = []
    for poly in shapely.get_parts(geom):
        if poly is None or poly.is_empty:
            continue
        for ring in [poly.exterior, *poly.interiors]:
            xy = shapely.get_coordinates(ring)
            x = (xy[:, 0] - x0) * kx
            y = side - (xy[:, 1] - y0) * _M_PER_DEG_LAT
            parts.append("M" + " ".join(f"{a:.1f} {b:.1f}" for a, b in zip(x, y)) + "Z")
    return "".join(parts)


def _layer(frame: pd.DataFrame, colour: str, kind: str) -> tuple[np.ndarray, np.ndarray, shapely.STRtree, str, str]:
    """A layer as every card draws it: its ids, geometries, tree, colour and kind (built once per page)."""
    geoms = frame.geometry.to_numpy()
    return frame["object_id"].to_numpy(), geoms, shapely.STRtree(geoms), colour, kind


def _drawing(item: pd.Series, layers: list[tuple[np.ndarray, np.ndarray, shapely.STRtree, str, str]]) -> str:
    """The SVG of one item over its neighbourhood (the layers of :func:`_layer`)."""
    geom = item.geometry
    if geom is None or geom.is_empty:
        return '<p class="absent">no geometry</p>'
    minx, miny, maxx, maxy = geom.bounds
    lat0 = (miny + maxy) / 2
    kx = _M_PER_DEG_LON * math.cos(math.radians(lat0))
    w_m, h_m = (maxx - minx) * kx, (maxy - miny) * _M_PER_DEG_LAT
    side = max(3 * max(w_m, h_m), OBJECT_WINDOW_MIN_M)
    cx, cy = (minx + maxx) / 2, lat0
    x0, y0 = cx - side / 2 / kx, cy - side / 2 / _M_PER_DEG_LAT
    window = shapely.box(x0, y0, cx + side / 2 / kx, cy + side / 2 / _M_PER_DEG_LAT)
    own_id = item["object_id"]
    counterpart = item.get("counterpart_id", "")
    drawn = []
    for all_ids, all_geoms, tree, colour, layer_kind in layers:
        near = tree.query(window, predicate="intersects")
        if len(near) > MAX_NEIGHBOURS:
            dist = shapely.distance(all_geoms[near], shapely.centroid(geom))
            near = near[np.argsort(dist, kind="stable")[:MAX_NEIGHBOURS]]
        near = np.sort(near)
        ids = all_ids[near]
        geoms = all_geoms[near]
        focus = (ids == own_id) if item["kind"] == layer_kind else (ids == counterpart) if counterpart and layer_kind == "prediction" else np.zeros(len(ids), bool)
        plain = "".join(_path(g, x0, y0, kx, side) for g in geoms[~focus])
        bold = "".join(_path(g, x0, y0, kx, side) for g in geoms[focus])
        width = side / DRAW_SIZE_PX
        if plain:
            drawn.append(f'<path d="{plain}" fill="none" stroke="{colour}" stroke-width="{width:.2f}" opacity="0.75"/>')
        if bold:
            drawn.append(f'<path class="focus-{layer_kind}" d="{bold}" fill="{colour}" fill-opacity="0.12" stroke="{colour}" stroke-width="{3 * width:.2f}"/>')
    bar = scale_length(side)
    label = f"{bar / 1000:g} km" if bar >= 1000 else f"{bar:g} m"
    pad, fs = side * 0.03, side * 0.045
    scale = (f'<rect x="{pad:.1f}" y="{side - pad - fs * 1.9:.1f}" width="{bar + 2 * pad:.1f}" height="{fs * 1.9:.1f}" fill="white" opacity="0.8"/>'
             f'<rect x="{2 * pad:.1f}" y="{side - 1.6 * pad:.1f}" width="{bar:.1f}" height="{side / 120:.2f}" fill="#111"/>'
             f'<text x="{2 * pad:.1f}" y="{side - 2 * pad:.1f}" font-size="{fs:.1f}" fill="#111">{label}</text>')
    return (f'<svg class="draw" viewBox="0 0 {side:.1f} {side:.1f}" width="{DRAW_SIZE_PX}" height="{DRAW_SIZE_PX}" '
            f'role="img" aria-label="item {esc(own_id)} and its neighbours">{"".join(drawn)}{scale}</svg>')


def _card(i: int, item: pd.Series, drawing: str, has_score: bool, has_class: bool) -> str:
    facts = [
        ("cell", esc(item["cell"])),
        ("automatic code", f'<b class="auto">{esc(item["code"])}</b>'),
        ("kind", esc(item["kind"]) + (f' (with prediction {esc(item["counterpart_id"])})' if item.get("counterpart_id") else "")),
        ("id", esc(item["object_id"])),
        ("tile", f'{esc(item["tile_x"])}/{esc(item["tile_y"])} (UTM EPSG:{esc(item["utm_epsg"])})'),
        ("inclusion probability", fmt(item["inclusion_probability"])),
    ]
    if has_score:
        facts.append(("score", fmt(item["score"])))
    if has_class:
        shown = esc(item["class"]) if not pd.isna(item["class"]) else "–"
        other = item.get("counterpart_class")
        if item.get("counterpart_id") and other is not None and not pd.isna(other):
            shown += f" (prediction: {esc(other)})"
        facts.append(("class", shown))
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    codes = "".join(
        f'<label><input type="radio" name="code-{i}" value="{esc(c)}"><kbd>{n}</kbd> {esc(c)}</label>' for n, c in enumerate(REVIEW_CODES, start=1)
    )
    severities = '<option value="">no error</option>' + "".join(f'<option value="{s}">{s}</option>' for s in SEVERITIES)
    return (
        f'<article class="card" id="item-{i}" data-index="{i}" data-item="{esc(item["item_id"])}" data-auto="{esc(item["code"])}">'
        f'<header><span class="n">{i + 1}</span> <b>{esc(item["item_id"])}</b> <span class="status"></span></header>'
        f'<div class="body">{drawing}<table class="facts">{rows}</table>'
        f'<form class="decide" onsubmit="return false">'
        f'<fieldset class="codes"><legend>reviewer\'s code</legend>{codes}</fieldset>'
        f'<div class="agree"><button type="button" data-agree="1"><kbd>A</kbd> agree</button> '
        f'<button type="button" data-agree="0"><kbd>D</kbd> disagree</button> <span class="agrees"></span></div>'
        f'<label>severity <kbd>S</kbd> <select name="severity">{severities}</select></label>'
        f'<label class="comment">comment <kbd>C</kbd> <textarea name="comment" rows="2"></textarea></label>'
        f"</form></div></article>"
    )


_CSS = """
:root { --ref: %(ref)s; --pred: %(pred)s; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; margin: 0; font-size: 14px; color: #1b1b1b; }
#bar { position: sticky; top: 0; z-index: 2; background: #fafafa; border-bottom: 1px solid #ddd; padding: 0.4rem 1rem;
       display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; }
#bar h1 { font-size: 1rem; margin: 0; } progress { width: 12rem; } .keys { color: #555; font-size: 0.8rem; }
main { max-width: 1100px; margin: 0 auto; padding: 0.5rem 1rem 4rem; }
.card { border: 1px solid #ddd; border-radius: 6px; margin: 0.8rem 0; padding: 0.5rem 0.8rem;
        content-visibility: auto; contain-intrinsic-size: auto 380px; }
.card.current { border-color: #2b5797; box-shadow: 0 0 0 2px #2b579755; }
.card header { font-size: 0.95rem; } .card .n { color: #777; } .status { margin-left: 0.6rem; font-size: 0.8rem; }
.status.done { color: #1b5e20; }
.body { display: grid; grid-template-columns: auto minmax(14rem, 1fr) minmax(17rem, 1.2fr); gap: 0.4rem 1rem; align-items: start; }
@media (max-width: 900px) { .body { grid-template-columns: auto 1fr; } .body form.decide { grid-column: 1 / -1; } }
.draw { border: 1px solid #eee; background: #fff; flex: none; }
.facts th { text-align: left; color: #555; font-weight: normal; padding-right: 0.6rem; } .facts { font-size: 0.85rem; }
fieldset.codes { border: 1px solid #e3e3e3; padding: 0.2rem 0.5rem; margin: 0; }
fieldset.codes label { display: block; cursor: pointer; line-height: 1.35; } kbd { font-size: 0.7rem; border: 1px solid #bbb; border-radius: 3px; padding: 0 0.25rem; }
.agree { margin: 0.4rem 0; } .agrees { font-size: 0.85rem; } label.comment textarea { width: 100%%; display: block; }
.legend-ref { color: var(--ref); font-weight: 600; } .legend-pred { color: var(--pred); font-weight: 600; }
"""

_JS = r"""
(function () {
  const meta = JSON.parse(document.getElementById('review-meta').textContent);
  const KEY = 'evalcore-review:' + meta.fingerprint;
  const cards = Array.from(document.querySelectorAll('.card'));
  let state = {};
  try { state = JSON.parse(localStorage.getItem(KEY) || '{}'); } catch (e) { state = {}; }
  const reviewer = document.getElementById('reviewer');
  reviewer.value = localStorage.getItem('evalcore-reviewer') || '';
  reviewer.addEventListener('change', () => localStorage.setItem('evalcore-reviewer', reviewer.value.trim()));
  let current = 0;
  function save() { localStorage.setItem(KEY, JSON.stringify(state)); }
  function show(card) {
    const d = state[card.dataset.item] || {};
    card.querySelectorAll('input[type=radio]').forEach(r => { r.checked = (r.value === d.code); });
    card.querySelector('select').value = d.severity || '';
    card.querySelector('textarea').value = d.comment || '';
    const s = card.querySelector('.status');
    s.textContent = d.code ? ('decided: ' + d.code) : 'not decided';
    s.className = 'status' + (d.code ? ' done' : '');
    card.querySelector('.agrees').textContent = d.code ? (d.code === card.dataset.auto ? 'agrees with the automatic code' : 'disagrees with the automatic code') : '';
  }
  function progress() {
    const n = cards.filter(c => (state[c.dataset.item] || {}).code).length;
    document.getElementById('progress').value = n;
    document.getElementById('progress-text').textContent = n + ' / ' + cards.length + ' decided';
  }
  function update(card, change) {
    const id = card.dataset.item;
    const d = Object.assign({severity: '', comment: ''}, state[id] || {}, change);
    if (!d.code) { delete d.code; }
    d.decided_at = new Date().toISOString();
    state[id] = d; save(); show(card); progress();
  }
  function go(i) {
    current = Math.max(0, Math.min(cards.length - 1, i));
    cards.forEach((c, j) => c.classList.toggle('current', j === current));
    cards[current].scrollIntoView({block: 'start'});
    window.scrollBy(0, -document.getElementById('bar').offsetHeight - 8);
  }
  cards.forEach((card, i) => {
    show(card);
    card.addEventListener('click', () => { if (current !== i) { current = i; cards.forEach((c, j) => c.classList.toggle('current', j === i)); } });
    card.querySelectorAll('input[type=radio]').forEach(r => r.addEventListener('change', () => update(card, {code: r.value})));
    card.querySelector('select').addEventListener('change', e => update(card, {severity: e.target.value}));
    card.querySelector('textarea').addEventListener('change', e => update(card, {comment: e.target.value}));
    card.querySelectorAll('[data-agree]').forEach(b => b.addEventListener('click', () => {
      if (b.dataset.agree === '1') { update(card, {code: card.dataset.auto}); }
      else if ((state[card.dataset.item] || {}).code === card.dataset.auto) { update(card, {code: ''}); }
      const r = card.querySelector('input[type=radio]:not(:checked)'); if (b.dataset.agree === '0' && r) { r.focus(); }
    }));
  });
  document.addEventListener('keydown', e => {
    const t = e.target;
    if (t && (t.tagName === 'TEXTAREA' || (t.tagName === 'INPUT' && t.type === 'text') || t.tagName === 'SELECT')) {
      if (e.key === 'Escape') { t.blur(); }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    const card = cards[current];
    const k = e.key;
    if (k === 'j' || k === 'ArrowDown' || k === 'ArrowRight' || k === 'n') { go(current + 1); }
    else if (k === 'k' || k === 'ArrowUp' || k === 'ArrowLeft' || k === 'p') { go(current - 1); }
    else if (/^[1-9]$/.test(k) && Number(k) <= meta.codes.length) { update(card, {code: meta.codes[Number(k) - 1]}); }
    else if (k === 'a') { update(card, {code: card.dataset.auto}); }
    else if (k === 'd') { if ((state[card.dataset.item] || {}).code === card.dataset.auto) { update(card, {code: ''}); } }
    else if (k === 's') { const sv = ['', ...meta.severities]; const d = state[card.dataset.item] || {};
                          update(card, {severity: sv[(sv.indexOf(d.severity || '') + 1) % sv.length]}); }
    else if (k === 'c') { card.querySelector('textarea').focus(); }
    else { return; }
    e.preventDefault();
  });
  function csvField(v) { v = String(v == null ? '' : v); return /[",\n\r]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v; }
  function csv(name) {
    const lines = [meta.columns.join(',')];
    cards.forEach(c => {
      const d = state[c.dataset.item];
      if (!d || !d.code) { return; }
      lines.push([c.dataset.item, name, d.code, d.severity || '', d.code === c.dataset.auto ? 'true' : 'false', d.comment || '', d.decided_at]
                 .map(csvField).join(','));
    });
    return lines.join('\n') + '\n';
  }
  document.getElementById('export').addEventListener('click', () => {
    const name = reviewer.value.trim();
    if (!new RegExp('^(?:' + meta.reviewer_pattern + ')$').test(name)) {
      document.getElementById('export-note').textContent = 'type your name first (letters, digits, _ and -)'; reviewer.focus(); return;
    }
    localStorage.setItem('evalcore-reviewer', name);
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([csv(name)], {type: 'text/csv'}));
    a.download = 'decisions-' + name + '.csv';
    document.body.appendChild(a); a.click(); a.remove();
    document.getElementById('export-note').textContent = 'exported ' + a.download;
  });
  window.evalcoreReview = {csv: csv, go: go, state: () => state, current: () => current};
  progress(); go(0); window.scrollTo(0, 0);
  document.body.dataset.ready = '1';
})();
"""


def review_page(sample: pd.DataFrame, ref: pd.DataFrame, pred: pd.DataFrame, *, title: str, facts: dict) -> str:
    """The review page's HTML.

    Parameters
    ----------
    sample : GeoDataFrame
        The sample (:func:`evalcore.review.sample.draw_sample`), geometry in EPSG:4326.
    ref, pred : GeoDataFrame
        Every reference field and every prediction of the run (``object_id`` and
        geometry in EPSG:4326), drawn around the items.
    title : str
        The run's name, shown in the page's title.
    facts : dict
        From :func:`evalcore.review.sample.load_objects` (which of score and class the run has).
    """
    has_score = "score" in sample.columns
    has_class = "class" in sample.columns
    layers = [_layer(ref, REFERENCE_COLOUR, "reference"), _layer(pred, PREDICTION_COLOUR, "prediction")]
    cards = [_card(i, row, _drawing(row, layers), has_score, has_class) for i, (_, row) in enumerate(sample.iterrows())]
    meta = {"fingerprint": sample_fingerprint(sample), "codes": list(REVIEW_CODES), "severities": list(SEVERITIES), "columns": list(DECISION_COLUMNS),
            "reviewer_pattern": REVIEWER_PATTERN, "n_items": int(len(sample))}
    seed = int(sample["sample_seed"].iloc[0]) if len(sample) else None
    head = (
        f'<div id="bar"><h1>Review: {esc(title)}</h1>'
        f'<label>reviewer <input id="reviewer" type="text" size="12" placeholder="your name"></label>'
        f'<progress id="progress" max="{len(sample)}" value="0"></progress> <span id="progress-text"></span>'
        f'<button id="export" type="button">export decisions CSV</button> <span id="export-note"></span>'
        f'<span class="keys"><kbd>J</kbd>/<kbd>K</kbd> next/previous, <kbd>1</kbd>–<kbd>{len(REVIEW_CODES)}</kbd> code, '
        f"<kbd>A</kbd> agree, <kbd>D</kbd> disagree, <kbd>S</kbd> severity, <kbd>C</kbd> comment</span></div>"
    )
    intro = (
        f"<p>{len(sample)} items drawn with seed {seed} (docs/review.md): "
        f'<span class="legend-ref">reference</span> and <span class="legend-pred">predicted</span> outlines; the item (and its matched '
        "prediction) filled. Decisions stay in this browser until you export them; import them with "
        "<code>evalcore review import RUN_DIR decisions-&lt;reviewer&gt;.csv</code>.</p>"
    )
    data = json.dumps(meta).replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data: blob:\">"
        f"<title>Review: {esc(title)}</title><style>{_CSS % {'ref': REFERENCE_COLOUR, 'pred': PREDICTION_COLOUR}}</style></head><body>"
        f'{head}<main>{intro}{"".join(cards)}</main>'
        f'<script type="application/json" id="review-meta">{data}</script><script>{_JS}</script></body></html>'
    )
