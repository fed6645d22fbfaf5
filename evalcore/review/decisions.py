"""Reading reviewers' decisions and adjudications, every row checked before any is kept.

A decisions file is the review page's export, ``decisions-<reviewer>.csv``, with the
columns :data:`DECISION_COLUMNS`. A bad row is reported by file and line, and then
nothing of any file is imported: the checks (:func:`read_decisions`) come before every
write.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from evalcore.errors import EvalInputError
from evalcore.review.layout import REVIEWER_PATTERN
from evalcore.review.sample import REVIEW_CODES, SEVERITIES

__all__ = ["DECISION_COLUMNS", "ADJUDICATION_COLUMNS", "read_decisions", "read_adjudication", "decisions_csv", "adjudication_csv"]

DECISION_COLUMNS: tuple[str, ...] = ("item_id", "reviewer", "code", "severity", "agrees", "comment", "decided_at")
"""The columns of a decisions file, in the order the page writes them."""
ADJUDICATION_COLUMNS: tuple[str, ...] = ("item_id", "final_code", "adjudicator", "comment")
"""The columns of an adjudication file; ``adjudicator`` and ``comment`` may be empty."""

_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


def _rows(path: Path, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV file whose header has exactly ``columns`` (any order)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise EvalInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise EvalInputError(f"{path}: not UTF-8 text; export the decisions again from the review page") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in columns if c not in header]
    if missing:
        raise EvalInputError(f"{path}, line 1: no column {missing[0]!r}; a file needs the columns {', '.join(columns)}")
    extra = [c for c in header if c not in columns]
    if extra:
        raise EvalInputError(f"{path}, line 1: unknown column {extra[0]!r}; a file has only the columns {', '.join(columns)}")
    out = []
    line = reader.line_num
    for row in reader:
        start = line + 1  # a quoted comment may span lines: the row starts after the previous one ended
        line = reader.line_num
        if None in row or any(v is None for v in row.values()):
            raise EvalInputError(f"{path}, line {start}: {len(header)} values expected, the row has another number")
        if not any(v.strip() for v in row.values()):
            continue  # a blank line
        out.append((start, {k: v.strip() for k, v in row.items()}))
    if not out:
        raise EvalInputError(f"{path}: holds no rows")
    return out


def _timestamp(text: str) -> bool:
    try:
        dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def read_decisions(paths: Sequence[str | Path], automatic: Mapping[str, str]) -> pd.DataFrame:
    """Every decision of the files, checked row by row.

    Parameters
    ----------
    paths : sequence of path
        Decisions files (the review page's ``decisions-<reviewer>.csv``).
    automatic : mapping of str to str
        The sample: each item id and its automatic code.

    Returns
    -------
    DataFrame
        The columns :data:`DECISION_COLUMNS` (``agrees`` as bool), file order.

    Raises
    ------
    EvalInputError
        The first bad row, named by file and line: an item not in the sample, a code not
        in :data:`~evalcore.review.sample.REVIEW_CODES`, a severity not in
        :data:`~evalcore.review.sample.SEVERITIES` (or empty), ``agrees`` not
        true/false or saying otherwise than the codes do, a reviewer name that is not a
        file name, a time that is not ISO 8601, a second decision of one reviewer on one
        item (in any of the files).
    """
    if not paths:
        raise EvalInputError("review import: give at least one decisions file (decisions-<reviewer>.csv)")
    seen: dict[tuple[str, str], str] = {}
    kept: list[dict] = []
    for raw in paths:
        path = Path(raw)
        for line, row in _rows(path, DECISION_COLUMNS):
            where = f"{path}, line {line}"
            reviewer, item, code, severity, agrees = row["reviewer"], row["item_id"], row["code"], row["severity"], row["agrees"].lower()
            if not re.fullmatch(REVIEWER_PATTERN, reviewer):
                raise EvalInputError(f"{where}: reviewer {reviewer[:40]!r} is not a name of letters, digits, '_' and '-' (at most 64)")
            if item not in automatic:
                raise EvalInputError(f"{where}: item {item[:40]!r} is not in the sample")
            if code not in REVIEW_CODES:
                raise EvalInputError(f"{where}: code {code[:40]!r} is not one of {', '.join(REVIEW_CODES)}")
            if severity and severity not in SEVERITIES:
                raise EvalInputError(f"{where}: severity {severity[:40]!r} is not one of {', '.join(SEVERITIES)} (or empty)")
            if agrees not in _TRUE | _FALSE:
                raise EvalInputError(f"{where}: agrees {row['agrees'][:40]!r} is not true or false")
            confirmed = code == automatic[item]
            if (agrees in _TRUE) != confirmed:
                raise EvalInputError(
                    f"{where}: agrees is {row['agrees']} but the code {code} {'equals' if confirmed else 'differs from'} "
                    f"the automatic code {automatic[item]}"
                )
            if not _timestamp(row["decided_at"]):
                raise EvalInputError(f"{where}: decided_at {row['decided_at'][:40]!r} is not an ISO 8601 time")
            key = (reviewer, item)
            if key in seen:
                raise EvalInputError(f"{where}: a second decision of {reviewer} on {item} (the first: {seen[key]})")
            seen[key] = where
            kept.append({**row, "agrees": confirmed})
    return pd.DataFrame(kept, columns=list(DECISION_COLUMNS))


def read_adjudication(path: str | Path, automatic: Mapping[str, str]) -> pd.DataFrame:
    """The final codes of an adjudication file, checked row by row (as :func:`read_decisions`)."""
    path = Path(path)
    seen: dict[str, int] = {}
    kept = []
    for line, row in _rows(path, ADJUDICATION_COLUMNS):
        where = f"{path}, line {line}"
        if row["item_id"] not in automatic:
            raise EvalInputError(f"{where}: item {row['item_id'][:40]!r} is not in the sample")
        if row["final_code"] not in REVIEW_CODES:
            raise EvalInputError(f"{where}: final_code {row['final_code'][:40]!r} is not one of {', '.join(REVIEW_CODES)}")
        if row["item_id"] in seen:
            raise EvalInputError(f"{where}: a second final code for {row['item_id']} (the first: line {seen[row['item_id']]})")
        seen[row["item_id"]] = line
        kept.append(row)
    return pd.DataFrame(kept, columns=list(ADJUDICATION_COLUMNS))


def _csv(frame: pd.DataFrame, columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in frame[list(columns)].itertuples(index=False):
        writer.writerow(["true" if v is True else "false" if v is False else v for v in row])
    return buffer.getvalue()


def decisions_csv(frame: pd.DataFrame) -> str:
    """Decisions as the text of a decisions file (``agrees`` as true/false)."""
    return _csv(frame, DECISION_COLUMNS)


def adjudication_csv(frame: pd.DataFrame) -> str:
    """Final codes as the text of an adjudication file."""
    return _csv(frame, ADJUDICATION_COLUMNS)
