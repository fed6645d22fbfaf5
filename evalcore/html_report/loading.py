"""Reading a run directory into what the page needs.

The page shows only what the run's files hold: :func:`load_run` parses the JSON files
(``metrics.json`` and, when present, the manifest, the gates, the contract, the error
taxonomy, the paired comparison and the status), :func:`load_tiles` the tile table, and
:func:`group_rows` and :func:`worst_tile_rows` turn a grouping and the tile table into
the rows the page and the flows' artifacts list. Every malformed file is an
:class:`~evalcore.errors.EvalInputError` naming it. The overlays read the per-field and
per-prediction parts themselves, window by window (:mod:`evalcore.html_report.overlays`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalcore.errors import EvalInputError

__all__ = [
    "RunFiles",
    "load_run",
    "load_tiles",
    "parquet_dataset",
    "unreadable",
    "read_parquet",
    "read_columns",
    "read_part",
    "group_rows",
    "worst_tile_rows",
    "tile_side_m",
    "finite",
    "float_or_nan",
    "N_WORST_TILES",
]

N_WORST_TILES = 5
"""Worst tiles labelled on the map and listed in the table (by F1, sufficient support)."""


@dataclass(frozen=True)
class RunFiles:
    """The parsed JSON files of a run directory (None where a file is absent)."""

    run_dir: Path
    metrics: dict
    manifest: dict | None = None
    gates: dict | None = None
    contract: dict | None = None
    taxonomy: dict | None = None
    paired: dict | None = None
    status: dict | None = None


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvalInputError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalInputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc


def _optional_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    value = _read_json(path)
    if not isinstance(value, dict):
        raise EvalInputError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def load_run(run_dir: str | Path) -> RunFiles:
    """Read the JSON files of a run directory.

    Raises
    ------
    EvalInputError
        ``run_dir`` has no ``metrics.json`` (not a run directory), or a file is not valid
        JSON, or ``metrics.json`` is not an evalcore summary; the message names the file.
    """
    root = Path(run_dir)
    metrics_path = root / "metrics.json"
    if not metrics_path.is_file():
        raise EvalInputError(f"{root}: not a run directory (no metrics.json); give the output directory of `evalcore run`")
    metrics = _read_json(metrics_path)
    if not isinstance(metrics, dict) or "count_reference" not in metrics or "f1" not in metrics:
        raise EvalInputError(f"{metrics_path}: not an evalcore summary (no 'count_reference' and 'f1' keys)")
    return RunFiles(
        run_dir=root,
        metrics=metrics,
        manifest=_optional_json(root / "manifest.json"),
        gates=_optional_json(root / "acceptance-gates.json"),
        contract=_optional_json(root / "evaluation-contract.json"),
        taxonomy=_optional_json(root / "error-taxonomy.json"),
        paired=_optional_json(root / "paired.json"),
        status=_optional_json(root / "status.json"),
    )


def unreadable(path: Path, what: str, exc: Exception) -> EvalInputError:
    """The error for a run file or parts directory that cannot be read as ``what``: it names
    the path, the exception's kind and its first line (pyarrow and geopandas raise many kinds)."""
    return EvalInputError(f"{path}: cannot be read as {what} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")


def read_parquet(path: Path, **kwargs: Any) -> Any:
    """A GeoParquet file or directory of parts as a GeoDataFrame; EvalInputError naming it when unreadable."""
    import geopandas

    try:
        return geopandas.read_parquet(path, **kwargs)
    except Exception as exc:
        raise unreadable(path, "GeoParquet", exc) from exc


def parquet_dataset(path: Path) -> Any:
    """A parquet file or directory of parts as a ``pyarrow.dataset.Dataset``; EvalInputError naming it when unreadable."""
    import pyarrow.dataset as ds

    try:
        return ds.dataset(path, format="parquet")
    except Exception as exc:
        raise unreadable(path, "parquet", exc) from exc


def read_part(file: str | Path, columns: list[str]) -> Any:
    """Some columns of one parquet part as a ``pyarrow.Table`` without the file's metadata, read
    on this thread (a column the part lacks reads as nulls).

    The report reads a run's ``fields/`` and ``predictions/`` a part at a time this way: a
    dataset scan's threads kept the buffers they decoded, and the process grew with the
    number of parts (the report's section drawing the histograms raised it by 106 MiB that
    way on a 2M-field run, 45 MiB this way).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(file)
    have = [c for c in columns if c in parquet.schema_arrow.names]
    table = parquet.read(columns=have, use_threads=False)
    for c in columns:
        if c not in have:
            table = table.append_column(c, pa.nulls(table.num_rows))
    return table.select(columns).replace_schema_metadata(None)  # parts differ in their pandas index metadata


def read_columns(path: Path, wanted: tuple[str, ...]) -> Any:
    """The columns of ``wanted`` that a parquet file or directory holds, as a pandas DataFrame (no geometry)."""
    dataset = parquet_dataset(path)
    try:
        return dataset.to_table(columns=[c for c in wanted if c in dataset.schema.names]).to_pandas()
    except Exception as exc:
        raise unreadable(path, "parquet", exc) from exc


def label_column(path: Path, default: str) -> str:
    """The name of a per-field or per-prediction table's first column: its rows' labels.

    The tables start with the layer's labels (engine.tables.output_table): the id column's
    name with ``--ref-id-column`` / ``--pred-id-column``, else ``ref_index`` /
    ``pred_index``. ``default`` when the table has no column.
    """
    names = parquet_dataset(path).schema.names
    return names[0] if names else default


def load_tiles(run: RunFiles) -> Any:
    """The tile table (``tiles.parquet``) as a GeoDataFrame, or None when the run has none.

    Raises
    ------
    EvalInputError
        The file is unreadable or lacks a column the maps need; the message names it.
    """
    path = run.run_dir / "tiles.parquet"
    if not path.is_file():
        return None
    tiles = read_parquet(path)
    needed = {"epsg", "tile_x", "tile_y", "f1", "count_reference", "count_fp"}
    if not needed <= set(tiles.columns):
        raise EvalInputError(f"{path}: not a tile table (missing columns {sorted(needed - set(tiles.columns))})")
    return tiles


def tile_side_m(metrics: dict) -> float:
    """The side of a reporting tile in metres (from the tiles or the bootstrap block; 10 km when neither says)."""
    return float((metrics.get("tiles") or {}).get("tile_km") or (metrics.get("bootstrap") or {}).get("tile_km") or 10.0) * 1000.0


def finite(value: object) -> float | None:
    """A finite number read from a file as float; None for anything else (booleans included)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def float_or_nan(value: object) -> float:
    """A finite number as float, anything else as NaN (for arrays to plot)."""
    v = finite(value)
    return np.nan if v is None else v


def group_rows(metrics: dict, grouping: str) -> list[dict]:
    """One row per group of ``per_stratum`` or ``per_size_class``: the group, its support, P/R/F1 with intervals.

    Rows come in the summary's order; values are ``None`` where undefined.
    """
    out = []
    for key, g in (metrics.get(grouping) or {}).items():
        ci = g.get("ci") or {}
        row = {"group": key, "support": g.get("support", g.get("n")), "insufficient_support": bool(g.get("insufficient_support", False))}
        for m in ("precision", "recall", "f1"):
            row[m] = finite(g.get(m))
            lo_hi = ci.get(m) if isinstance(ci.get(m), (list, tuple)) else [None, None]
            row[f"{m}_ci_lower"], row[f"{m}_ci_upper"] = finite(lo_hi[0]), finite(lo_hi[1])
        row["count_ratio"] = finite(g.get("count_ratio"))
        out.append(row)
    return out


def worst_tile_rows(tiles: Any, n: int = N_WORST_TILES) -> list[dict]:
    """The ``n`` tiles with the lowest F1 among those with sufficient support (ties by key), as dicts.

    ``tiles`` is the tile table (``tiles.parquet``); each row has ``tile`` (``epsg_x_y``,
    the key of ``metrics.json``'s ``tiles.worst``) and the tile's counts and rates.
    """
    if tiles is None or len(tiles) == 0 or "f1" not in tiles:
        return []
    ok = tiles[~tiles["insufficient_support"].astype(bool) & tiles["f1"].notna()] if "insufficient_support" in tiles else tiles[tiles["f1"].notna()]
    ok = ok.sort_values(["f1", "epsg", "tile_x", "tile_y"], kind="mergesort").head(n)
    rows = []
    for _, t in ok.iterrows():
        row = {"tile": f"{int(t['epsg'])}_{int(t['tile_x'])}_{int(t['tile_y'])}"}
        for c in ("count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "support"):
            if c in t:
                row[c] = int(t[c])
        for c in ("precision", "recall", "f1", "count_ratio", "f1_ci_lower", "f1_ci_upper"):
            if c in t:
                row[c] = finite(t[c])
        rows.append(row)
    return rows
