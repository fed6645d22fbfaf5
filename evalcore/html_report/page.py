"""The page: its skeleton, its style, the order of its sections, and :func:`build_report`.

The page is one file that opens offline: the figures are ``data:`` URIs
(:func:`~evalcore.html_report.figures.figure_html`), the CSS is inline, there is no
script, and the Content-Security-Policy forbids every other source. The same PNGs are
written into ``figures/`` for whoever wants them alone.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from evalcore.html_report.figures import FIGURES
from evalcore.html_report.loading import RunFiles, load_run
from evalcore.html_report.markup import Figure, Page, esc
from evalcore.html_report.overlays import PREDICTION_COLOUR, REFERENCE_COLOUR, overlays_section
from evalcore.html_report.sections import (
    classes_section, family_sections, group_section, headline, iou_section, pixel_paired_section, review_section, scores_section,
    tiles_section,
)
from evalcore.writers import atomic_path

__all__ = ["build_report"]

_log = logging.getLogger(__name__)

_CSS = """
:root { --ref: %(ref)s; --pred: %(pred)s; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1b1b1b;
       max-width: 1120px; margin: 0 auto; padding: 1rem 1.5rem 3rem; line-height: 1.45; font-size: 15px; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.25rem; border-bottom: 2px solid #e0e0e0; padding-bottom: 0.2rem; margin-top: 2rem; }
h3 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
nav { font-size: 0.9rem; margin: 0.4rem 0 1rem; } nav a { margin-right: 0.9rem; color: #2b5797; }
table { border-collapse: collapse; margin: 0.4rem 0 0.8rem; font-size: 0.86rem; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 0.22rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } table.identity td:first-child { white-space: nowrap; color: #555; }
.cols { display: flex; flex-wrap: wrap; gap: 1.5rem; }
/* ">": the value itself, not the first bound of its interval (a .v inside .ci) */
.headline td:nth-child(2) > .v:first-child { font-weight: 600; font-size: 1.05rem; }
.ci { color: #555; } .absent { color: #6b6b6b; font-style: italic; background: #fafafa; border-left: 3px solid #d0d0d0; padding: 0.3rem 0.6rem; }
.gate { font-weight: 600; } .gate-pass { color: #1b5e20; } .gate-fail { color: #b71c1c; } .gate-not_evaluable { color: #8d6e00; }
figure { margin: 0.6rem 0 1rem; break-inside: avoid; page-break-inside: avoid; } figure img { max-width: 100%%; height: auto; display: block; }
figcaption { font-size: 0.85rem; color: #444; max-width: 60rem; } code { font-size: 0.82rem; word-break: break-all; }
.worst b { color: #b71c1c; } .swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em; border: 1px solid #777; } footer { margin-top: 2.5rem; font-size: 0.8rem; color: #777; }
@media print { body { max-width: none; font-size: 11pt; padding: 0; } nav { display: none; } h2 { break-after: avoid; }
               section { break-inside: auto; } details > * { display: block; } a { color: inherit; text-decoration: none; } }
""" % {"ref": REFERENCE_COLOUR, "pred": PREDICTION_COLOUR}


def _title(run: RunFiles) -> str:
    man = run.manifest or {}
    pred = ((man.get("inputs") or {}).get("predicted") or {}).get("path")
    run_id = (run.contract or {}).get("run_id")
    parts = ["evalcore evaluation"]
    if pred:
        parts.append(Path(str(pred)).name)
    if run_id:
        parts.append(f"run {run_id}")
    return " · ".join(parts)


def _render(run: RunFiles) -> tuple[str, list[Figure]]:
    page = Page()
    page.parts.append(headline(run))
    iou_section(run, page)
    group_section(run, page, "per_stratum", "Per stratum", "per_stratum", "No strata: the run was made without --strata-column.")
    group_section(run, page, "per_size_class", "Per size class", "per_size_class", "No size classes: the run was made without --size-bins.")
    tiles, worst = tiles_section(run, page)
    scores_section(run, page)
    classes_section(run, page)
    families = family_sections(run, page)
    overlays_section(run, page, tiles, worst)
    pixel_paired_section(run, page)
    reviewed = review_section(run, page)
    title = _title(run)
    status = (run.status or {}).get("status")
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in (("headline", "Headline"), ("iou-curve", "IoU curve"), ("per-stratum", "Strata"),
                                                               ("per-size-class", "Size classes"), ("tiles", "Tiles and AOIs"), ("scores", "Scores"),
                                                               ("classes", "Classes"),
                                                               *families, ("overlays", "Overlays"), ("pixel-paired", "Pixels, paired"),
                                                               *((("review", "Review"),) if reviewed else ())))
    doc = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        # No request of any kind: images are data: URIs, and the policy forbids every other source.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><p>{esc(run.run_dir.resolve().name)}"
        + (f" · status {esc(status)}" if status else "")
        + (f" · finished {esc((run.manifest or {}).get('finished'))}" if (run.manifest or {}).get("finished") else "")
        + f"</p><nav>{nav}</nav></header>\n"
        + "\n".join(page.parts)
        + "\n<footer>Built by evalcore.html_report from the files of this run directory alone; figures are also in figures/ as PNG. "
        "Every number is read from metrics.json and the run's tables (definitions: docs/metrics.md).</footer></body></html>\n"
    )
    return doc, page.figures


def build_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` (and ``figures/*.png``) into a run directory from its files alone.

    Parameters
    ----------
    run_dir : str or Path
        The output directory of ``evalcore run`` (it must hold ``metrics.json``).

    Returns
    -------
    Path
        ``run_dir / "report.html"``, written under a temporary name and renamed when whole.

    Raises
    ------
    EvalInputError
        ``run_dir`` is not a run directory, or one of its files is malformed; the message
        names the file.
    """
    started = time.perf_counter()
    run = load_run(run_dir)
    doc, figures = _render(run)
    fig_dir = run.run_dir / "figures"
    fig_dir.mkdir(exist_ok=True)
    drawn = {f.name for f in figures}
    for f in figures:
        atomic_path(fig_dir / f"{f.name}.png", lambda tmp, png=f.png: tmp.write_bytes(png))
    for name, _ in FIGURES:  # a figure of an earlier build that this build did not draw
        if name not in drawn:
            (fig_dir / f"{name}.png").unlink(missing_ok=True)
    out = run.run_dir / "report.html"
    atomic_path(out, lambda tmp: tmp.write_bytes(doc.encode("utf-8")))
    _log.info("wrote %s (%d figures, %.0f KB) in %.1f s", out, len(figures), out.stat().st_size / 1024, time.perf_counter() - started)
    return out
