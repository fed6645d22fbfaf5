"""The report's figures and tables as Prefect artifacts, so the Prefect UI shows them.

:func:`publish_report_artifacts` reads a run directory after :func:`evalcore.html_report.build_report`
has written ``figures/``: markdown artifacts that embed the PNGs as ``data:image/png;base64``
URIs, and table artifacts for the per-stratum, per-size-class and worst-tile tables.

Both Prefect 3 UIs render such images. The default UI (``ui-v2``, React) passes markdown
through react-markdown with a ``urlTransform`` that keeps ``src`` values matching
``^data:image/`` on ``img`` and a rehype-sanitize schema whose ``src`` protocols add
``data`` (``prefect/server/ui-v2/assets/lazy-markdown-*.js`` in prefect 3.9); the classic UI
sanitises with DOMPurify, whose defaults allow ``data:`` URIs on ``img``. A PNG larger than
:data:`MAX_EMBED_BYTES` is not embedded (the artifact names its file instead), which keeps
each artifact well below what the API stores comfortably.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from evalcore.html_report import FIGURES, group_rows, worst_tile_rows
from evalcore.report import markdown_text

__all__ = ["publish_report_artifacts", "artifact_key", "MAX_EMBED_BYTES", "FIGURE_GROUPS"]

MAX_EMBED_BYTES = 1_500_000
"""A PNG above this size is named, not embedded."""

FIGURE_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("metrics", "Metrics: IoU curve, groups, scores, quality, classes",
     ("iou_curve", "per_stratum", "per_size_class", "pr_curve", "reliability", "paired", "iou_distribution",
      "class_confusion", "class_bars")),
    ("maps", "Where it fails: per-tile maps", ("tile_f1_map", "tile_count_ratio_map")),
    ("overlays", "Overlays: reference (purple) and predictions (orange)", ("overlay_worst_tiles", "overlay_errors")),
)
"""One markdown artifact per group: (key part, heading, figure names). Every figure of
:data:`evalcore.html_report.figures.FIGURES` is in one group (tests/flows/test_report_artifact_groups.py)."""

_TITLES = dict(FIGURES)


def artifact_key(prefix: str, key_suffix: str) -> str:
    """``<prefix>-<suffix>`` reduced to what Prefect keys allow (a-z, 0-9, dashes), at most 100 characters.

    Examples
    --------
    >>> artifact_key("evalcore-figures-maps", "Runs/2026-11-30 Fields_v3")
    'evalcore-figures-maps-runs-2026-11-30-fields-v3'
    >>> artifact_key("evalcore-worst-tiles", "")
    'evalcore-worst-tiles'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", key_suffix.lower()).strip("-")
    key = f"{prefix}-{slug}" if slug else prefix
    return key[:100].rstrip("-")


def _figure_markdown(path: Path, title: str) -> str:
    data = path.read_bytes()
    if len(data) > MAX_EMBED_BYTES:
        return f"### {title}\n\n`{path.name}` ({len(data) / 1e6:.1f} MB) is too large to embed; it is in the run directory's figures/ and in report.html.\n"
    return f"### {title}\n\n![{title}](data:image/png;base64,{base64.b64encode(data).decode('ascii')})\n"


def publish_report_artifacts(run_dir: Path, key_suffix: str) -> None:
    """Publish the report's figures (markdown artifacts) and tables (table artifacts) of a run directory.

    Parameters
    ----------
    run_dir : Path
        A run directory on which :func:`evalcore.html_report.build_report` has run
        (``figures/*.png``); figures that are absent are left out, and a group without
        any figure publishes no artifact.
    key_suffix : str
        Appended to every key (e.g. the run directory's name); reduced to a-z, 0-9 and
        dashes by :func:`artifact_key`.

    Must run inside a flow or task run (Prefect attaches the artifacts to it).
    """
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    run_dir = Path(run_dir)
    figures = run_dir / "figures"
    name = run_dir.resolve().name
    for part, heading, names in FIGURE_GROUPS:
        found = [(n, figures / f"{n}.png") for n in names if (figures / f"{n}.png").is_file()]
        if not found:
            continue
        markdown = f"## {heading} ({markdown_text(name)})\n\n" + "\n".join(_figure_markdown(p, _TITLES.get(n, n)) for n, p in found)
        markdown += "\nThe whole report, offline: `report.html` in the run directory.\n"
        create_markdown_artifact(markdown, key=artifact_key(f"evalcore-figures-{part}", key_suffix), description=f"{heading}: figures of report.html")
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    for grouping, label in (("per_stratum", "stratum"), ("per_size_class", "size-class")):
        rows = group_rows(metrics, grouping)
        if rows:
            create_table_artifact([{label.replace("-", "_"): r.pop("group"), **r} for r in rows],
                                  key=artifact_key(f"evalcore-report-{label}", key_suffix),
                                  description=f"Precision, recall and F1 with 95 % intervals and support, per {label.replace('-', ' ')}")
    tiles_path = run_dir / "tiles.parquet"
    if tiles_path.is_file():
        import geopandas

        worst = worst_tile_rows(geopandas.read_parquet(tiles_path))
        if worst:
            create_table_artifact(worst, key=artifact_key("evalcore-worst-tiles", key_suffix),
                                  description="The tiles with the lowest F1 among those with sufficient support")
