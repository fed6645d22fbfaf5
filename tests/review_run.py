"""A small run directory written in this process, for the review tests (no flow, no subprocess).

It has what ``evalcore review`` reads of a run made by ``evalcore run``: ``metrics.json``
(with ``strata_column`` and ``score_column``), ``fields/`` and ``predictions/`` with the
columns of the per-field and per-prediction tables, and, sealed, ``evidence-manifest.json``.
Reference fields are 100 m squares on a grid near 45° N (EPSG:4326); predictions are in
EPSG:3857, as a prediction layer in another CRS than the reference is in a real run.
"""

from __future__ import annotations

import json
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import shapely

__all__ = ["write_review_run"]


def write_review_run(root: Path, n_ref: int = 60, *, strata: bool = True, scores: bool = True, class_column: str | None = None,
                     ids: bool = False, seal: bool = True, seed: int = 0) -> Path:
    """Write a run directory under ``root`` and return it.

    Reference field i is TP (i % 5 in 0, 1, 2), M-FN-LOCALISATION (3) or M-FN-MISSED (4);
    a TP field has a matched prediction, a localisation one an unmatched prediction
    (M-FP-LOCALISATION) beside it, and every tenth field a background prediction
    (M-FP-BACKGROUND) to the east of the grid.

    The tables are named as a run writes them (engine.tables): both layers' classes in
    ``class`` (``class_column`` is only the input column metrics.json names), and with
    ``ids`` the labels are ids (``F<i>``, ``P<k>``) under the id columns ``field_id`` /
    ``detection_id``, the other layer's labels in ``pred_id`` / ``home_ref_id``.
    """
    rng = np.random.default_rng(seed)
    run = root / "run"
    (run / "fields").mkdir(parents=True)
    (run / "predictions").mkdir()
    d_lat = 100 / 110_540.0
    d_lon = 100 / (111_320.0 * np.cos(np.radians(45.0)))
    side = int(np.ceil(np.sqrt(n_ref)))
    ref_geoms, pred_rows = [], []
    codes = []
    for i in range(n_ref):
        x0, y0 = 10.0 + (i % side) * 2 * d_lon, 45.0 + (i // side) * 2 * d_lat
        ref_geoms.append(shapely.box(x0, y0, x0 + d_lon, y0 + d_lat))
        kind = i % 5
        codes.append("TP" if kind < 3 else "M-FN-LOCALISATION" if kind == 3 else "M-FN-MISSED")
        if kind < 3:
            pred_rows.append((shapely.box(x0 + 0.05 * d_lon, y0, x0 + 1.05 * d_lon, y0 + d_lat), i, True, "TP"))
        elif kind == 3:
            pred_rows.append((shapely.box(x0 + 0.6 * d_lon, y0, x0 + 1.6 * d_lon, y0 + d_lat), i, False, "M-FP-LOCALISATION"))
        if i % 10 == 9:
            pred_rows.append((shapely.box(x0 + 40 * d_lon, y0, x0 + 41 * d_lon, y0 + d_lat), None, False, "M-FP-BACKGROUND"))
    pred_index = np.arange(len(pred_rows))
    matched_pred = {home: k for k, (_, home, matched, _) in enumerate(pred_rows) if matched}
    fields = geopandas.GeoDataFrame({
        "ref_index": np.arange(n_ref, dtype=np.int64),
        "matched": [i in matched_pred for i in range(n_ref)],
        "pred_index": pd.array([matched_pred.get(i) for i in range(n_ref)], dtype="Int64"),
        "utm_epsg": np.full(n_ref, 32632, dtype=np.int64),
        "tile_x": np.arange(n_ref, dtype=np.int64) % 3,
        "tile_y": np.zeros(n_ref, dtype=np.int64),
        "error_code": pd.array(codes, dtype="string"),
    }, geometry=ref_geoms, crs=4326)
    if strata:
        fields["stratum"] = pd.array([None if i % 7 == 6 else ("north" if i % 2 else "south") for i in range(n_ref)], dtype="string")
    if class_column:
        fields["class"] = pd.array(["wheat" if i % 3 else "maize" for i in range(n_ref)], dtype="string")
    preds = geopandas.GeoDataFrame({
        "pred_index": pd.array(pred_index, dtype="Int64"),
        "home_ref_index": pd.array([home for _, home, _, _ in pred_rows], dtype="Int64"),
        "matched": [m for _, _, m, _ in pred_rows],
        "utm_epsg": np.full(len(pred_rows), 32632, dtype=np.int64),
        "tile_x": np.array([(home or 0) % 3 for _, home, _, _ in pred_rows], dtype=np.int64),
        "tile_y": np.zeros(len(pred_rows), dtype=np.int64),
        "error_code": pd.array([c for _, _, _, c in pred_rows], dtype="string"),
    }, geometry=[g for g, _, _, _ in pred_rows], crs=4326).to_crs(3857)
    if scores:
        preds["score"] = np.round(rng.uniform(0, 1, len(preds)), 3)
    if class_column:
        preds["class"] = pd.array(["wheat" if k % 4 else "maize" for k in range(len(preds))], dtype="string")
    if ids:
        def _ids(values: pd.Series, prefix: str) -> pd.Series:
            return pd.Series([None if pd.isna(v) else f"{prefix}{int(v)}" for v in values], dtype="string")

        fields = fields.assign(ref_index=_ids(fields["ref_index"], "F"), pred_index=_ids(fields["pred_index"], "P")).rename(
            columns={"ref_index": "field_id", "pred_index": "pred_id"})
        preds = preds.assign(pred_index=_ids(preds["pred_index"], "P"), home_ref_index=_ids(preds["home_ref_index"], "F")).rename(
            columns={"pred_index": "detection_id", "home_ref_index": "home_ref_id"})
    fields.to_parquet(run / "fields" / "part-0.parquet", index=False)
    preds.to_parquet(run / "predictions" / "part-0.parquet", index=False)
    metrics = {"count_reference": n_ref, "count_predicted": len(preds), "f1": 0.5,
               "strata_column": "stratum" if strata else None, "score_column": "score" if scores else None}
    if class_column:
        metrics["class_column"] = class_column
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    if seal:
        from evalcore.evidence import write_evidence_manifest

        write_evidence_manifest(run)
    return run
