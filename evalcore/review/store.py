"""The review's files in a run directory: drawing a sample, importing decisions and
adjudications, each written whole and sealed into the evidence (SPEC 6.12).

Every write adds new files only (:mod:`evalcore.review.layout` names them), so a sealed
run directory gets an evidence amendment (:func:`evalcore.evidence.write_evidence_manifest`)
hashing exactly those files; a run directory without a manifest gets none. Every check
comes before the first write: a refused import leaves the run directory as it was, and the
files of one step are staged and put in place together (:class:`evalcore.outputs.OutputSet`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from evalcore.errors import EvalInputError
from evalcore.outputs import OutputSet
from evalcore.evidence import check_amendment, latest_manifest, write_evidence_manifest
from evalcore.review.decisions import adjudication_csv, decisions_csv, read_adjudication, read_decisions
from evalcore.review.layout import REVIEW_DIR, REVIEWER_PATTERN, current_file, current_sample_dir, next_file, sample_dirs
from evalcore.review.page import review_page
from evalcore.review.sample import draw_sample, load_objects, review_cells
from evalcore.review.statistics import review_statistics
from evalcore.writers import atomic_path, write_geoparquet, write_json

__all__ = ["SampleResult", "ImportResult", "make_sample", "import_decisions", "import_adjudication", "read_sample", "stored_decisions", "review_json_path"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SampleResult:
    """What :func:`make_sample` did: the sample directory, whether it wrote one, the
    number of items and cells, and the evidence manifest it wrote (None: none)."""

    sample_dir: Path
    written: bool
    n_items: int
    n_cells: int
    manifest: Path | None


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote: the files added, the statistics and the manifest (None: none)."""

    files: list[Path]
    review: dict
    manifest: Path | None


def _rel(run_dir: Path, path: Path) -> str:
    return path.relative_to(run_dir).as_posix()


def _seal(run_dir: Path, added: list[Path], reason: str) -> Path | None:
    if latest_manifest(run_dir) is None:
        return None
    return write_evidence_manifest(run_dir, reason=reason, adds=[_rel(run_dir, p) for p in added])


def read_sample(sample_dir: Path) -> pd.DataFrame:
    """A sample's ``sample.parquet`` (EvalInputError naming it when unreadable)."""
    from evalcore.html_report.loading import read_parquet

    return read_parquet(sample_dir / "sample.parquet")


def stored_decisions(sample_dir: Path) -> dict[str, Path]:
    """Each reviewer's current decisions file in a sample directory."""
    out: dict[str, Path] = {}
    names = {found.group(1) for p in sample_dir.glob("decisions-*.csv")
             if (found := re.fullmatch(rf"decisions-({REVIEWER_PATTERN})(?:\.v\d+)?\.csv", p.name))}
    for reviewer in sorted(names):
        path = current_file(sample_dir, f"decisions-{reviewer}", ".csv")
        if path is not None:
            out[reviewer] = path
    return out


def _has_decisions(sample_dir: Path) -> bool:
    return bool(list(sample_dir.glob("decisions-*.csv")))


def make_sample(run_dir: str | Path, size: int, seed: int = 0, *, force: bool = False, confirm: object = None) -> SampleResult:
    """Draw the review sample of a run and write ``sample.parquet`` and ``index.html``.

    Parameters
    ----------
    run_dir : str or Path
        A run directory (``evalcore run``'s output).
    size : int
        Items asked for (1 or more; a run with fewer objects gives all it has).
    seed : int, default 0
        Seed of the draw; the same seed and size give the same sample.
    force : bool
        Start a new sample although the current one, drawn with another size or seed,
        has decisions (they stay where they are, with their sample).
    confirm : callable or None
        Asked (with the question) before replacing a sample that has decisions when
        ``force`` is not given; None refuses.

    Returns
    -------
    SampleResult
        ``written`` is False when the current sample already is this one.

    Raises
    ------
    EvalInputError
        A bad size or seed, not a run directory, a sample with decisions that would be
        replaced without ``force``, or evidence that cannot be amended.
    """
    run_dir = Path(run_dir)
    if size < 1:
        raise EvalInputError(f"--size must be 1 or more items, got {size}")
    if seed < 0:
        raise EvalInputError(f"--seed must be 0 or more, got {seed}")
    objects, facts, ref, pred = load_objects(run_dir)
    cells = review_cells(
        objects["code"].to_numpy(), kind=objects["kind"].to_numpy(),
        stratum=objects["stratum"].to_numpy() if "stratum" in objects else None,
        score=objects["score"].to_numpy() if "score" in objects else None, score_q10=facts["score_q10"], score_q90=facts["score_q90"],
    )
    sample = draw_sample(objects, cells, size, seed)
    sample.insert(0, "item_id", [f"{'ref' if k == 'reference' else 'pred'}-{i}" for k, i in zip(sample["kind"], sample["object_id"])])
    sample["sample_seed"] = np.int64(seed)
    sample["sample_size"] = np.int64(size)
    existing = sample_dirs(run_dir)
    if existing:
        current = existing[max(existing)]
        old = read_sample(current)
        same = len(old) and int(old["sample_seed"].iloc[0]) == seed and int(old["sample_size"].iloc[0]) == size
        if same and old["item_id"].tolist() == sample["item_id"].tolist():
            return SampleResult(current, False, len(old), int(old["cell"].nunique()), None)
        if _has_decisions(current) and not force:
            held = f"{_rel(run_dir, current)}/ (seed {int(old['sample_seed'].iloc[0])}, size {int(old['sample_size'].iloc[0])}) has decisions"
            fresh = f"a new sample (seed {seed}, size {size}) in review/v{max(existing) + 1}/"
            if confirm is None or not confirm(f"{held}; start {fresh}?"):
                raise EvalInputError(f"{held}: {fresh} is started only with --force (the decisions stay with their sample).")
        target = run_dir / REVIEW_DIR / f"v{max(existing) + 1}"
    else:
        target = run_dir / REVIEW_DIR
    added = [target / "sample.parquet", target / "index.html"]
    for path in added:
        if path.exists():  # not a file evalcore wrote as part of a sample: never replaced
            raise EvalInputError(f"{path} exists already and was not written by a review sample; move it away first")
    if latest_manifest(run_dir) is not None:
        check_amendment(run_dir, [_rel(run_dir, p) for p in added])
    import geopandas

    frame = geopandas.GeoDataFrame(sample.reset_index(drop=True), geometry="geometry", crs=4326)
    for column in ("object_id", "counterpart_id", "cell", "code", "kind"):
        frame[column] = frame[column].astype(str)
    html = review_page(frame, ref, pred, title=run_dir.resolve().name, facts=facts)

    with OutputSet() as outputs:  # both files or neither: a sample without its page would count as drawn
        write_geoparquet(outputs.file(added[0]), frame)
        atomic_path(outputs.file(added[1]), lambda tmp: tmp.write_text(html, encoding="utf-8"))
        outputs.commit()
    manifest = _seal(run_dir, added, f"review sample: {_rel(run_dir, target)}/")
    return SampleResult(target, True, len(frame), int(frame["cell"].nunique()), manifest)


def _current_sample(run_dir: Path) -> tuple[Path, pd.DataFrame]:
    if not (run_dir / "metrics.json").is_file():
        raise EvalInputError(f"{run_dir}: not a run directory (no metrics.json)")
    sample_dir = current_sample_dir(run_dir)
    if sample_dir is None:
        raise EvalInputError(f"{run_dir} has no review sample: draw one with `evalcore review sample {run_dir} --size N` first")
    return sample_dir, read_sample(sample_dir)


def _all_decisions(sample_dir: Path, automatic: dict[str, str], replacing: set[str] = frozenset()) -> pd.DataFrame:
    stored = [p for reviewer, p in stored_decisions(sample_dir).items() if reviewer not in replacing]
    return read_decisions(stored, automatic) if stored else pd.DataFrame(columns=["item_id", "reviewer", "code", "severity", "agrees", "comment", "decided_at"])


def _statistics(run_dir: Path, sample_dir: Path, sample: pd.DataFrame, decisions: pd.DataFrame, adjudication: pd.DataFrame | None,
                files: dict[str, Path], new_files: list[tuple[Path, str]]) -> dict:
    """The content of ``review.json``, with the hashes of the files about to be written taken from their text."""
    import hashlib

    from evalcore.report import sha256_path

    stats = review_statistics(sample, decisions, adjudication)
    pending = {p: hashlib.sha256(text.encode("utf-8")).hexdigest() for p, text in new_files}
    return {
        "schema_version": SCHEMA_VERSION,
        "sample": {"file": _rel(run_dir, sample_dir / "sample.parquet"), "sha256": sha256_path(sample_dir / "sample.parquet"),
                   "seed": int(sample["sample_seed"].iloc[0]), "size": int(sample["sample_size"].iloc[0]), "n_items": int(len(sample)),
                   "cells": {c: {"size": int(g["cell_size"].iloc[0]), "drawn": int(len(g))} for c, g in sample.groupby("cell", sort=True)}},
        "files": [{"file": _rel(run_dir, p), "sha256": pending[p] if p in pending else sha256_path(p), "role": role}
                  for role, p in sorted(files.items())],
        **stats,
    }


def _write_review(run_dir: Path, sample_dir: Path, review: dict, new_files: list[tuple[Path, str]], reason: str) -> ImportResult:
    target = next_file(sample_dir, "review", ".json")
    added = [p for p, _ in new_files] + [target]
    if latest_manifest(run_dir) is not None:
        check_amendment(run_dir, [_rel(run_dir, p) for p in added])
    with OutputSet() as outputs:  # the decisions and their statistics together, or nothing
        for path, text in new_files:
            atomic_path(outputs.file(path), lambda tmp, text=text: tmp.write_text(text, encoding="utf-8"))
        write_json(outputs.file(target), review)
        outputs.commit()
    return ImportResult(added, review, _seal(run_dir, added, reason))


def _adjudication(sample_dir: Path, automatic: dict[str, str]) -> pd.DataFrame | None:
    path = current_file(sample_dir, "adjudication", ".csv")
    return read_adjudication(path, automatic) if path is not None else None


def import_decisions(run_dir: str | Path, paths: list[str | Path]) -> ImportResult:
    """Check every row of the decisions files, then store them and write ``review.json``.

    A reviewer's decisions are stored as ``decisions-<reviewer>.csv`` in the current
    sample's directory; importing the same reviewer again adds ``.v2`` (the page's
    export holds all of a reviewer's decisions, so the newer file supersedes the older).

    Raises
    ------
    EvalInputError
        The first bad row (file and line), no sample, or evidence that cannot be amended;
        then nothing is written.
    """
    run_dir = Path(run_dir)
    sample_dir, sample = _current_sample(run_dir)
    automatic = dict(zip(sample["item_id"], sample["code"]))
    new = read_decisions(paths, automatic)
    reviewers = sorted(new["reviewer"].unique())
    decisions = pd.concat([_all_decisions(sample_dir, automatic, set(reviewers)), new], ignore_index=True)
    new_files = [(next_file(sample_dir, f"decisions-{r}", ".csv"), decisions_csv(new[new["reviewer"] == r])) for r in reviewers]
    adjudication = _adjudication(sample_dir, automatic)
    files = {f"decisions {r}": p for r, p in stored_decisions(sample_dir).items() if r not in reviewers}
    files.update({f"decisions {r}": p for r, (p, _) in zip(reviewers, new_files)})
    review = _statistics(run_dir, sample_dir, sample, decisions, adjudication, files, new_files)
    return _write_review(run_dir, sample_dir, review, new_files, f"review decisions: {', '.join(reviewers)}")


def import_adjudication(run_dir: str | Path, path: str | Path) -> ImportResult:
    """Check an adjudication file (``item_id, final_code, adjudicator, comment``), store it
    as ``adjudication[.vN].csv`` and write ``review.json`` with the final codes."""
    run_dir = Path(run_dir)
    sample_dir, sample = _current_sample(run_dir)
    automatic = dict(zip(sample["item_id"], sample["code"]))
    adjudication = read_adjudication(path, automatic)
    decisions = _all_decisions(sample_dir, automatic)
    if decisions.empty:
        raise EvalInputError(f"{path}: the sample in {_rel(run_dir, sample_dir)}/ has no decisions to adjudicate; import them first")
    target = next_file(sample_dir, "adjudication", ".csv")
    text = adjudication_csv(adjudication)
    files = {f"decisions {r}": p for r, p in stored_decisions(sample_dir).items()}
    files["adjudication"] = target
    review = _statistics(run_dir, sample_dir, sample, decisions, adjudication, files, [(target, text)])
    return _write_review(run_dir, sample_dir, review, [(target, text)], f"review adjudication: {target.name}")


def review_json_path(run_dir: str | Path) -> Path | None:
    """The current sample's newest ``review[.vN].json`` (None: none)."""
    sample_dir = current_sample_dir(run_dir)
    return None if sample_dir is None else current_file(sample_dir, "review", ".json")
