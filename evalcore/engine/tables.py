"""The output tables of an evaluation: one row per reference field (:func:`field_table`)
and one per prediction (:func:`prediction_table`), labelled with the input layers' own
labels, from the columns the sums and resolve phases computed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalcore.metrics.taxonomy import PREDICTION_CODES, REFERENCE_CODES, code_labels

__all__ = ["ID_COLUMN_NAMES", "field_table", "output_table", "prediction_table"]

ID_COLUMN_NAMES: dict[str, dict[str, str]] = {
    "fields": {"pred_index": "pred_id", "max_overlap_pred_index": "max_overlap_pred_id"},
    "predictions": {"home_ref_index": "home_ref_id"},
}
"""Per table, the columns that hold the *other* layer's labels, and their names when that
layer's labels are ids from an id column (``--pred-id-column`` for the per-field table,
``--ref-id-column`` for the per-prediction table) rather than row positions."""


def _labels_at(pred_labels: pd.Series, positions: np.ndarray) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """Prediction labels at the given positions (-1: none), nullable for integer labels."""
    found = positions >= 0
    values = pred_labels.reindex(positions[found]).to_numpy()
    if pd.api.types.is_integer_dtype(pred_labels.dtype):
        out = pd.array(np.zeros(len(positions), dtype=np.int64), dtype="Int64")
        out[found] = values
        out[~found] = pd.NA
        return out
    obj = np.full(len(positions), None, dtype=object)
    obj[found] = values
    return obj


def _label_column(values: np.ndarray) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """Labels (None: none) as a nullable integer column when every label is an integer."""
    present = np.array([v is not None for v in values], dtype=bool)
    if present.any() and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values[present]):
        out = pd.array(np.zeros(len(values), dtype=np.int64), dtype="Int64")
        out[present] = np.asarray(values[present].tolist(), dtype=np.int64)
        out[~present] = pd.NA
        return out
    return values


def _aoi_column(codes: np.ndarray, aoi_keys: list[str] | None) -> pd.api.extensions.ExtensionArray:
    keys = np.array(list(aoi_keys or []) + [None], dtype=object)
    return pd.array(keys[np.where(codes >= 0, codes, len(keys) - 1)], dtype="string")


def output_table(table: pd.DataFrame, kind: str, *, ref_id_column: str | None, pred_id_column: str | None) -> pd.DataFrame:
    """The per-field or per-prediction table as the outputs write it.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`field_table` (``kind="fields"``) or :func:`prediction_table`
        (``kind="predictions"``), indexed by the layer's labels.
    kind : {"fields", "predictions"}
    ref_id_column, pred_id_column : str or None
        The id columns the layers were read with (``--ref-id-column``,
        ``--pred-id-column``); None: the labels are row positions.

    Returns
    -------
    pandas.DataFrame
        The labels as a named first column (the id column's name, else ``ref_index`` /
        ``pred_index``: an unnamed index would be ``__index_level_0__`` in a file), and
        the columns of :data:`ID_COLUMN_NAMES` renamed when they hold the other layer's
        ids (``pred_index`` -> ``pred_id`` with ``pred_id_column``), so that a column
        named ``*_index`` always holds a row position. A new name that is already a
        column (an id column called ``pred_id``) leaves the old one.
    """
    own, other = (ref_id_column, pred_id_column) if kind == "fields" else (pred_id_column, ref_id_column)
    id_name = own or ("ref_index" if kind == "fields" else "pred_index")
    out = table.drop(columns=[id_name], errors="ignore").rename_axis(id_name).reset_index()
    if other:
        out = out.rename(columns={old: new for old, new in ID_COLUMN_NAMES[kind].items() if new not in out.columns})
    return out


def _class_column(values: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """Classes (str; anything else is null) as a string column (SPEC 6.10)."""
    return pd.array([v if isinstance(v, str) else None for v in np.asarray(values, dtype=object).tolist()], dtype="string")


def prediction_table(
    preds: pd.DataFrame, *, aoi_keys: list[str] | None, annotated: bool, scored: bool = False,
    boundary_iou: bool = False, classed: bool = False,
) -> pd.DataFrame:
    """The per-prediction table (issue 13) from the resolve phase's prediction rows.

    Parameters
    ----------
    preds : pandas.DataFrame
        :attr:`~evalcore.engine.resolve.Resolved.preds` (or some of its rows), indexed by prediction position.
    aoi_keys : list of str, optional
        The AOI keys (None: no AOI layer; the ``aoi`` column is left out).
    annotated : bool
        An annotated area was given (``annotated_fraction`` is written).
    scored : bool
        A score column was given (``score`` is written).
    boundary_iou : bool
        A boundary-IoU band width was given (``boundary_iou`` of the match is written).
    classed : bool
        Class columns were given (``class``, the prediction's class, and
        ``home_ref_class``, its home reference's, are written; SPEC 6.10).

    Returns
    -------
    pandas.DataFrame
        Indexed by the predicted layer's labels: ``area_m2``, ``area_ha``,
        ``home_ref_index`` (the home reference's label, null without a home),
        ``matched``, ``iou`` (of its match, NaN when unmatched), ``best_iou`` (0 without
        a candidate pair), ``utm_epsg`` (its own zone), ``tile_epsg``, ``tile_x``,
        ``tile_y`` and ``aoi`` (the tile and AOI it counts in: its home's, else its own).
    """
    out = pd.DataFrame(index=pd.Index(_label_column(preds["label"].to_numpy(object)), name="pred_index"))
    area = preds["area_m2"].to_numpy(np.float64)
    out["area_m2"] = area
    out["area_ha"] = area / 1e4
    out["home_ref_index"] = _label_column(preds["home_ref_label"].to_numpy(object))
    out["matched"] = preds["matched"].to_numpy(bool)
    out["iou"] = preds["iou"].to_numpy(np.float64)
    out["best_iou"] = preds["best_iou"].to_numpy(np.float64)
    if boundary_iou:
        out["boundary_iou"] = preds["boundary_iou"].to_numpy(np.float64)
    out["utm_epsg"] = preds["utm_epsg"].to_numpy(np.int64)
    out["tile_epsg"] = preds["tile_epsg"].to_numpy(np.int64)
    out["tile_x"] = preds["tile_x"].to_numpy(np.int64)
    out["tile_y"] = preds["tile_y"].to_numpy(np.int64)
    if aoi_keys is not None:
        out["aoi"] = _aoi_column(preds["aoi"].to_numpy(np.int64), aoi_keys)
    if annotated:
        out["annotated_fraction"] = preds["annotated_fraction"].to_numpy(np.float64)
    if scored:
        out["score"] = preds["score"].to_numpy(np.float64)
    if classed:
        out["class"] = _class_column(preds["class"].to_numpy(object))
        out["home_ref_class"] = _class_column(preds["home_ref_class"].to_numpy(object))
    _add_code_columns(out, preds, PREDICTION_CODES)
    return out


def _add_code_columns(out: pd.DataFrame, rows: pd.DataFrame, names: tuple[str, ...]) -> None:
    """``error_code`` (string) and the boolean flags of the taxonomy, when computed."""
    if "error_code" not in rows.columns:
        return
    out["error_code"] = code_labels(rows["error_code"].to_numpy(np.int8), names)
    for flag in ("merge", "split", "boundary_error"):
        if flag in rows.columns:
            out[flag] = rows[flag].to_numpy(bool)


def field_table(
    fields: pd.DataFrame,
    ref_labels: pd.Index,
    pred_labels: pd.Series,
    *,
    strata_names: list[str] | None,
    strata_codes: np.ndarray,
    size_keys: list[str] | None,
    size_codes: np.ndarray,
    tolerance_m: float | None,
    aoi_keys: list[str] | None = None,
    boundary_iou: bool = False,
    ref_class: np.ndarray | None = None,
) -> pd.DataFrame:
    """The per-field table of seed 000 from the per-field columns, with each field's
    reporting tile (``tile_x``, ``tile_y`` in zone ``utm_epsg``) and AOI.

    Parameters
    ----------
    fields : pandas.DataFrame
        :func:`~evalcore.engine.sums.summarize_partition`'s per-field columns, indexed by position.
    ref_labels : pandas.Index
        Input label of each of those fields (same order).
    pred_labels : pandas.Series
        Input label of predictions, indexed by prediction position (at least those
        the fields refer to).
    strata_codes, size_codes : ndarray of int64
        Group codes of the fields (-1: none).
    boundary_iou : bool
        A boundary-IoU band width was given (``boundary_iou`` of the matched pair is written).
    ref_class : ndarray of object, optional
        Class of each field (SPEC 6.10; None: null), written as ``class``.
    """
    matched = fields["matched"].to_numpy(bool)
    out = pd.DataFrame(index=ref_labels)
    out["area_m2"] = fields["area_m2"].to_numpy()
    out["area_ha"] = fields["area_m2"].to_numpy() / 1e4
    out["perimeter_m"] = fields["perimeter_m"].to_numpy()
    out["utm_epsg"] = fields["utm_epsg"].to_numpy(np.int64)
    out["matched"] = matched
    out["pred_index"] = _labels_at(pred_labels, fields["matched_pred_pos"].to_numpy(np.int64))
    out["iou"] = fields["iou"].to_numpy()
    out["pred_area_m2"] = fields["pred_area_m2"].to_numpy()
    out["best_iou"] = fields["best_iou"].to_numpy()
    out["n_overlapping_pred"] = fields["n_overlapping_pred"].to_numpy(np.int64)
    out["max_overlap_pred_index"] = _labels_at(pred_labels, fields["max_overlap_pred_pos"].to_numpy(np.int64))
    out["oversegmentation"] = fields["oversegmentation"].to_numpy()
    out["undersegmentation"] = fields["undersegmentation"].to_numpy()
    out["hausdorff_m"] = fields["hausdorff_m"].to_numpy()
    out["boundary_mean_distance_m"] = fields["boundary_mean_distance_m"].to_numpy()
    out["boundary_sample_spacing_m"] = fields["boundary_sample_spacing_m"].to_numpy()
    if boundary_iou:
        out["boundary_iou"] = fields["boundary_iou"].to_numpy()
    out["tile_x"] = fields["tile_x"].to_numpy(np.int64)
    out["tile_y"] = fields["tile_y"].to_numpy(np.int64)
    _add_code_columns(out, fields, REFERENCE_CODES)
    if aoi_keys is not None:
        out["aoi"] = _aoi_column(fields["aoi"].to_numpy(np.int64), aoi_keys)
    if strata_names is not None:
        names = np.array(list(strata_names) + [None], dtype=object)
        out["stratum"] = pd.array(names[strata_codes], dtype="string")
    if ref_class is not None:
        out["class"] = _class_column(ref_class)
    if size_keys is not None:
        keys = np.array(list(size_keys) + [None], dtype=object)
        out["size_class"] = pd.array(keys[size_codes], dtype="string")
    if tolerance_m is not None:
        within = fields["boundary_within_tolerance_m"].to_numpy()
        perimeter = fields["perimeter_m"].to_numpy()
        out["boundary_within_tolerance_m"] = within
        with np.errstate(divide="ignore", invalid="ignore"):
            out["boundary_recall"] = np.where(perimeter > 0, within / perimeter, np.nan)
        out["within_tolerance"] = matched & (fields["boundary_mean_distance_m"].to_numpy() <= tolerance_m)
    return out
