"""The stratified random sample of a run's objects for human review (SPEC 6.12).

The objects are every evaluated reference field (a matched one is reviewed together with
its matched prediction) and every unmatched prediction. Cells partition them by primary
error code (SPEC 6.8), crossed with the stratum when the run has strata; with scores,
``TP-LOW-SCORE`` and ``FP-HIGH-SCORE`` are taken out of ``TP`` and the ``M-FP-*`` cells.
:func:`allocate` shares the sample size equally over the non-empty cells and
:func:`draw_sample` draws a simple random sample without replacement in each, so each
item's inclusion probability is its cell's sample size over its cell's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from evalcore.engine.tables import ID_COLUMN_NAMES
from evalcore.errors import EvalInputError
from evalcore.metrics.taxonomy import PREDICTION_CODES, REFERENCE_CODES

__all__ = [
    "REVIEW_CODES",
    "SEVERITIES",
    "LOW_SCORE_CELL",
    "HIGH_SCORE_CELL",
    "NO_STRATUM",
    "load_objects",
    "review_cells",
    "allocate",
    "draw_sample",
]

REVIEW_CODES: tuple[str, ...] = (*REFERENCE_CODES, *PREDICTION_CODES[1:], "L-REFERENCE-WRONG")
"""The codes a reviewer may give: the taxonomy's primary codes (SPEC 6.8;
:data:`~evalcore.metrics.taxonomy.REFERENCE_CODES`, then the prediction codes but ``TP``),
and ``L-REFERENCE-WRONG`` for an item whose reference is wrong. A digit key 1-7 picks
them in this order on the review page."""

SEVERITIES: tuple[str, ...] = ("minor", "major", "critical")
"""Severities of an error, mildest first; empty means no error."""

LOW_SCORE_CELL = "TP-LOW-SCORE"
HIGH_SCORE_CELL = "FP-HIGH-SCORE"
NO_STRATUM = "none"
LOW_QUANTILE = 0.10
HIGH_QUANTILE = 0.90

_KIND_ORDER = {"reference": 0, "prediction": 1}


def _id_text(values: pd.Series) -> pd.Series:
    """Ids as text: integers without a decimal point, missing as ''."""
    return values.astype("string").fillna("")


def _table(run_dir: Path, name: str) -> Path | None:
    for candidate in (run_dir / name, run_dir / f"{name}.parquet"):
        if candidate.exists():
            return candidate
    return None


def load_objects(run_dir: str | Path) -> tuple[pd.DataFrame, dict, pd.DataFrame, pd.DataFrame]:
    """The review objects of a run directory, one row each, with what the sample needs.

    Reads ``metrics.json`` and the per-field and per-prediction tables (``fields/`` and
    ``predictions/``).

    Returns
    -------
    objects : GeoDataFrame
        Columns ``kind`` (``reference`` or ``prediction``), ``position`` (the object's
        row in its input layer: the table's ``ref_index`` / ``pred_index``), ``object_id``
        (text), ``counterpart_id`` (the matched prediction of a matched field, else ''),
        ``code`` (the primary error code), ``stratum`` (text, ``none`` when null or
        homeless; only with strata), ``score`` (the item's or its matched
        prediction's score; only with scores), ``class`` and ``counterpart_class`` (the
        matched prediction's; only when the run has a class column in its tables), ``tile_x``, ``tile_y``, ``utm_epsg`` and ``geometry``
        (EPSG:4326), in no particular order.
    facts : dict
        ``strata_column``, ``score_column``, ``class_column`` (None when absent) and the
        score quantiles ``score_q10`` and ``score_q90`` (None without scores).
    ref, pred : GeoDataFrame
        Every reference field and every prediction (``object_id``, geometry in
        EPSG:4326): the neighbourhoods the review page draws.

    Raises
    ------
    EvalInputError
        Not a run directory, or its tables are missing or lack a needed column (named).
    """
    from evalcore.html_report.loading import load_run, read_parquet

    run = load_run(run_dir)
    root = Path(run_dir)
    metrics = run.metrics
    fields_path, preds_path = _table(root, "fields"), _table(root, "predictions")
    if fields_path is None or preds_path is None:
        raise EvalInputError(f"{root}: a review sample needs the run's per-field and per-prediction tables (fields/ and predictions/), and one is missing")
    fields = read_parquet(fields_path)
    preds = read_parquet(preds_path)
    # The tables start with their labels: row positions (ref_index, pred_index), or ids
    # under the id column's name, the other layer's labels then in *_id columns
    # (engine.tables.output_table).
    for table, path, needed in ((fields, fields_path, ("matched", "error_code")), (preds, preds_path, ("matched", "error_code"))):
        missing = [c for c in needed if c not in table.columns]
        if missing or len(table.columns) == 0:
            raise EvalInputError(f"{path}: no column {(missing or ['labels'])[0]!r}; the run directory was not written by this evalcore")
    ref_label, pred_label = fields.columns[0], preds.columns[0]
    counterpart = _first_present(fields, "pred_index", ID_COLUMN_NAMES["fields"]["pred_index"])
    home = _first_present(preds, "home_ref_index", ID_COLUMN_NAMES["predictions"]["home_ref_index"])

    strata_column = metrics.get("strata_column") if isinstance(metrics.get("strata_column"), str) else None
    if strata_column is not None and strata_column not in fields.columns:
        strata_column = "stratum" if "stratum" in fields.columns else None
    score_column = metrics.get("score_column") if isinstance(metrics.get("score_column"), str) else None
    if score_column is not None and score_column not in preds.columns:
        score_column = "score" if "score" in preds.columns else None
    # The run's tables write both layers' classes as ``class`` (engine.tables), whatever
    # the input columns were called; metrics.json names the input columns.
    class_column = metrics.get("class_column") if isinstance(metrics.get("class_column"), str) else None
    ref_class = "class" if "class" in fields.columns else class_column
    pred_class = "class" if "class" in preds.columns else (
        metrics.get("pred_class_column") if isinstance(metrics.get("pred_class_column"), str) else class_column)
    if class_column is not None and ref_class not in fields.columns and pred_class not in preds.columns:
        class_column = None

    ref_ids = _id_text(fields[ref_label])
    pred_ids = _id_text(preds[pred_label])
    pred_matched = preds["matched"].to_numpy(bool)
    unmatched = preds.loc[~pred_matched]

    ref = pd.DataFrame({
        "kind": "reference",
        "position": _positions(fields[ref_label], ref_label == "ref_index"),
        "object_id": ref_ids.to_numpy(),
        "counterpart_id": np.where(fields["matched"].to_numpy(bool), _id_text(fields[counterpart]).to_numpy() if counterpart else "", ""),
        "code": fields["error_code"].astype(str).to_numpy(),
    })
    pred = pd.DataFrame({
        "kind": "prediction",
        "position": _positions(unmatched[pred_label], pred_label == "pred_index"),
        "object_id": pred_ids[~pred_matched].to_numpy(),
        "counterpart_id": "",
        "code": unmatched["error_code"].astype(str).to_numpy(),
    })
    facts: dict = {"strata_column": strata_column, "score_column": score_column, "class_column": class_column,
                   "score_q10": None, "score_q90": None}
    if strata_column is not None:
        ref_strata = fields[strata_column].astype("string")
        ref["stratum"] = ref_strata.fillna(NO_STRATUM).to_numpy()
        by_ref = dict(zip(ref_ids, ref_strata.fillna(NO_STRATUM)))
        homes = _id_text(unmatched[home]) if home else pd.Series([""] * len(unmatched))
        pred["stratum"] = [by_ref.get(h, NO_STRATUM) if h else NO_STRATUM for h in homes]
    if score_column is not None:
        scores = preds[score_column].astype("float64")
        score_by_pred = dict(zip(pred_ids, scores))
        ref["score"] = [score_by_pred.get(c, np.nan) if c else np.nan for c in ref["counterpart_id"]]
        pred["score"] = scores[~pred_matched].to_numpy()
        finite = scores.to_numpy()[~np.isnan(scores.to_numpy())]
        if len(finite):
            facts["score_q10"] = float(np.quantile(finite, LOW_QUANTILE))
            facts["score_q90"] = float(np.quantile(finite, HIGH_QUANTILE))
    if class_column is not None:
        ref["class"] = fields[ref_class].astype("string").to_numpy() if ref_class in fields else pd.NA
        pc = pred_class if pred_class in preds.columns else None
        pred["class"] = unmatched[pc].astype("string").to_numpy() if pc else pd.NA
        # A matched field is reviewed with its prediction: the reviewer sees both classes.
        class_by_pred = dict(zip(pred_ids, preds[pc].astype("string"))) if pc else {}
        ref["counterpart_class"] = pd.array([class_by_pred.get(c, pd.NA) if c else pd.NA for c in ref["counterpart_id"]], dtype="string")
        pred["counterpart_class"] = pd.array([pd.NA] * len(pred), dtype="string")
    for column in ("tile_x", "tile_y", "utm_epsg"):
        ref[column] = fields[column].to_numpy() if column in fields else -1
        pred[column] = unmatched[column].to_numpy() if column in unmatched else -1
    import geopandas

    ref_geom = geopandas.GeoSeries(fields.geometry.to_numpy(), crs=fields.crs).to_crs(4326) if fields.crs else fields.geometry
    pred_geom = geopandas.GeoSeries(unmatched.geometry.to_numpy(), crs=preds.crs).to_crs(4326) if preds.crs else unmatched.geometry
    objects = pd.concat([ref, pred], ignore_index=True)
    objects = geopandas.GeoDataFrame(objects, geometry=np.concatenate([np.asarray(ref_geom), np.asarray(pred_geom)]), crs=4326)
    all_preds = geopandas.GeoSeries(preds.geometry.to_numpy(), crs=preds.crs).to_crs(4326) if preds.crs else preds.geometry
    ref_layer = geopandas.GeoDataFrame({"object_id": ref_ids.to_numpy()}, geometry=np.asarray(ref_geom), crs=4326)
    pred_layer = geopandas.GeoDataFrame({"object_id": pred_ids.to_numpy()}, geometry=np.asarray(all_preds), crs=4326)
    return objects, facts, ref_layer, pred_layer


def _first_present(table: pd.DataFrame, *names: str) -> str | None:
    return next((c for c in names if c in table.columns), None)


def _positions(labels: pd.Series, are_positions: bool) -> pd.api.extensions.ExtensionArray:
    """Input row positions from a table's labels: the labels themselves when they are
    positions, else unknown (a run with an id column writes ids, not positions)."""
    if are_positions:
        return pd.array(labels.astype("int64").to_numpy(), dtype="Int64")
    return pd.array([pd.NA] * len(labels), dtype="Int64")


def review_cells(code: np.ndarray, *, kind: np.ndarray, stratum: np.ndarray | None = None,
                 score: np.ndarray | None = None, score_q10: float | None = None, score_q90: float | None = None) -> np.ndarray:
    """The cell of each object: its code (or ``TP-LOW-SCORE`` / ``FP-HIGH-SCORE``), with
    ``/stratum`` when strata are given.

    Parameters
    ----------
    code : (n,) str array
        Primary error codes.
    kind : (n,) str array
        ``reference`` or ``prediction``.
    stratum : (n,) str array or None
        The stratum of each object (``none`` for none); None: the run has no strata.
    score, score_q10, score_q90 : (n,) float array and floats, or None
        The object's (or its matched prediction's) score and the 10 % and 90 % quantiles
        of every evaluated prediction's score; None: no scores.

    Examples
    --------
    >>> review_cells(np.array(["TP", "M-FP-BACKGROUND"]), kind=np.array(["reference", "prediction"]),
    ...              score=np.array([0.1, 0.95]), score_q10=0.1, score_q90=0.9).tolist()
    ['TP-LOW-SCORE', 'FP-HIGH-SCORE']
    """
    cells = np.asarray(code, dtype=object).copy()
    if score is not None and score_q10 is not None and score_q90 is not None:
        s = np.asarray(score, dtype=float)
        with np.errstate(invalid="ignore"):  # NaN scores compare False: they keep their code
            low = (cells == "TP") & (np.asarray(kind) == "reference") & (s <= score_q10)
            high = (np.asarray(kind) == "prediction") & (s >= score_q90)
        cells[low] = LOW_SCORE_CELL
        cells[high] = HIGH_SCORE_CELL
    if stratum is not None:
        cells = np.array([f"{c}/{s}" for c, s in zip(cells, stratum)], dtype=object)
    return cells


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """Share ``n`` items equally over the non-empty cells (SPEC 6.12).

    Visiting the cells by (size, name) ascending, each takes min(size, ⌊remaining / cells
    not yet visited⌋): a cell smaller than its share gives all it has and the rest is
    shared again.

    Parameters
    ----------
    sizes : mapping of str to int
        Number of objects in each cell (empty cells take 0).
    n : int
        Sample size asked for (0 or more).

    Returns
    -------
    dict of str to int
        Items drawn from each cell, in the order of ``sizes``.

    Examples
    --------
    >>> allocate({"a": 2, "b": 10, "c": 10}, 10)
    {'a': 2, 'b': 4, 'c': 4}
    >>> allocate({}, 5)
    {}
    """
    if n < 0:
        raise ValueError(f"the sample size must be 0 or more, got {n}")
    taken = {name: 0 for name in sizes}
    order = sorted((size, name) for name, size in sizes.items() if size > 0)
    remaining = n
    for visited, (size, name) in enumerate(order):
        take = min(size, remaining // (len(order) - visited))
        taken[name] = take
        remaining -= take
    return taken


def draw_sample(objects: pd.DataFrame, cells: np.ndarray, n: int, seed: int) -> pd.DataFrame:
    """The sample: ``n`` items allocated over the cells, drawn without replacement in each.

    One ``rng = numpy.random.default_rng(seed)``; cells in sorted order of their names, each
    draws ``rng.choice(size, taken, replace=False)`` over its objects sorted by kind
    (reference first) then input position.

    Parameters
    ----------
    objects : DataFrame
        One row per object with ``kind`` and ``position`` (see :func:`load_objects`).
    cells : (n_objects,) str array
        The cell of each object (:func:`review_cells`).
    n : int
        Sample size asked for.
    seed : int
        Seed of the generator.

    Returns
    -------
    DataFrame
        The drawn rows of ``objects`` (cells in name order, each in draw order) with
        ``cell``, ``cell_size``, ``cell_sample_size`` and ``inclusion_probability``.
    """
    frame = objects.assign(cell=np.asarray(cells, dtype=object), _kind=objects["kind"].map(_KIND_ORDER))
    frame = frame.sort_values(["_kind", "position"], kind="stable")
    groups = {name: group for name, group in frame.groupby("cell", sort=True)}
    taken = allocate({name: len(group) for name, group in groups.items()}, n)
    rng = np.random.default_rng(seed)
    drawn = []
    for name in sorted(groups):
        group = groups[name]
        chosen = rng.choice(len(group), taken[name], replace=False)
        rows = group.iloc[chosen].copy()
        rows["cell_size"] = len(group)
        rows["cell_sample_size"] = taken[name]
        rows["inclusion_probability"] = taken[name] / len(group)
        drawn.append(rows)
    if not drawn:
        return frame.iloc[:0].drop(columns="_kind").assign(cell_size=0, cell_sample_size=0, inclusion_probability=0.0)
    out = pd.concat(drawn).drop(columns="_kind")
    return out.reset_index(drop=True)
