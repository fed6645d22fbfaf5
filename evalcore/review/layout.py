"""Where a run directory keeps its review (SPEC 6.12), and which version of each file is current.

Nothing of a run directory is ever overwritten (:mod:`evalcore.evidence`: an amendment
only adds files), so every review file is versioned the way the gates outcome is:

* the first sample lives in ``review/``, a replacement sample (another ``--size`` or
  ``--seed``) in ``review/v2/``, ``review/v3/`` ...: its *sample directory*;
* a sample directory holds ``sample.parquet`` and ``index.html`` (written once),
  ``decisions-<reviewer>.csv`` (a later import of the same reviewer adds
  ``decisions-<reviewer>.v2.csv``, which supersedes it), ``adjudication[.vN].csv`` and
  ``review[.vN].json`` (the statistics after each import).

The newest version of a name is the current one. This module only names and finds
files; it imports nothing of evalcore, so the evidence, the gates and the report can
read a review without a circle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = [
    "REVIEW_DIR",
    "AMENDABLE_REVIEW",
    "REVIEWER_PATTERN",
    "sample_dirs",
    "current_sample_dir",
    "versioned_name",
    "versions",
    "current_file",
    "next_file",
    "current_review",
]

REVIEW_DIR = "review"

REVIEWER_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
"""A reviewer's name: it becomes part of a file name, so letters, digits, ``_`` and ``-``
only (no dot: ``decisions-<reviewer>.vN.csv`` must name one reviewer and one version)."""

_V = r"(?:[2-9]|[1-9]\d+)"  # a version from 2, no leading zero: one name per version
AMENDABLE_REVIEW: str = (
    rf"review/(?:v{_V}/)?(?:sample\.parquet|index\.html|review(?:\.v{_V})?\.json"
    rf"|adjudication(?:\.v{_V})?\.csv|decisions-{REVIEWER_PATTERN}(?:\.v{_V})?\.csv)"
)
"""Full-match pattern of the review files an evidence amendment may add."""


def sample_dirs(run_dir: str | Path) -> dict[int, Path]:
    """The sample directories of a run by version (``review/`` is 1, ``review/vN/`` is N)."""
    root = Path(run_dir) / REVIEW_DIR
    out: dict[int, Path] = {}
    if (root / "sample.parquet").is_file():
        out[1] = root
    if root.is_dir():
        for child in root.iterdir():
            found = re.fullmatch(rf"v({_V})", child.name)
            if found and (child / "sample.parquet").is_file():
                out[int(found.group(1))] = child
    return out


def current_sample_dir(run_dir: str | Path) -> Path | None:
    """The newest sample directory, or None when the run has no sample."""
    found = sample_dirs(run_dir)
    return found[max(found)] if found else None


def versioned_name(stem: str, suffix: str, version: int) -> str:
    """``review.json`` for version 1, ``review.v2.json`` for 2 ..."""
    return f"{stem}{suffix}" if version == 1 else f"{stem}.v{version}{suffix}"


def versions(directory: Path, stem: str, suffix: str) -> dict[int, Path]:
    """The versions of ``stem[.vN]suffix`` present in ``directory``."""
    out: dict[int, Path] = {}
    if not directory.is_dir():
        return out
    pattern = re.compile(rf"{re.escape(stem)}(?:\.v({_V}))?{re.escape(suffix)}")
    for path in directory.iterdir():
        found = pattern.fullmatch(path.name)
        if found and path.is_file():
            out[int(found.group(1)) if found.group(1) else 1] = path
    return out


def current_file(directory: Path, stem: str, suffix: str) -> Path | None:
    """The newest version of ``stem[.vN]suffix`` in ``directory`` (None: none)."""
    found = versions(directory, stem, suffix)
    return found[max(found)] if found else None


def next_file(directory: Path, stem: str, suffix: str) -> Path:
    """The name the next version of ``stem[.vN]suffix`` takes (never an existing file)."""
    found = versions(directory, stem, suffix)
    return directory / versioned_name(stem, suffix, max(found) + 1 if found else 1)


def current_review(run_dir: str | Path) -> dict | None:
    """The statistics of the current sample (its newest ``review[.vN].json``), or None
    when the run has no sample or its sample has no imported decisions."""
    sample_dir = current_sample_dir(run_dir)
    if sample_dir is None:
        return None
    path = current_file(sample_dir, "review", ".json")
    if path is None:
        return None
    try:
        review = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot be read as the review's statistics ({exc})") from None
    if not isinstance(review, dict):
        raise ValueError(f"{path}: not a JSON object, so not the review's statistics")
    return review
