"""Reading layers and writing results, with clear errors and atomic writes.

Readers accept any format pyogrio reads (GeoPackage, FlatGeobuf, Shapefile,
GeoJSON, ...), GeoParquet files and directories of GeoParquet parts. Every writer
writes to a temporary name beside the target and renames it when whole, so a file
that exists is complete.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd

from evalcore.errors import EvalInputError

__all__ = ["read_layer", "to_jsonable", "write_json", "write_geoparquet", "atomic_path"]

_PARQUET_SUFFIXES = {".parquet", ".geoparquet", ".pq"}


def read_layer(path: str | os.PathLike, *, layer: str | None = None, role: str = "layer") -> geopandas.GeoDataFrame:
    """Read a vector layer.

    Parameters
    ----------
    path : str or path-like
        A file any pyogrio driver reads, a GeoParquet file, or a directory of
        GeoParquet parts.
    layer : str, optional
        Layer name inside a multi-layer file (GeoPackage).
    role : str
        ``"reference"`` or ``"predicted"``; named in error messages.

    Raises
    ------
    EvalInputError
        Naming the path (and layer) when the file is missing, empty, unreadable or
        not a vector layer.
    """
    p = Path(path)
    where = f"{role} file {str(path)!r}" + (f" layer {layer!r}" if layer else "")
    if not p.exists():
        raise EvalInputError(f"The {where} does not exist.")
    if p.is_file() and p.stat().st_size == 0:
        raise EvalInputError(f"The {where} is empty (0 bytes).")
    try:
        if p.is_dir() or p.suffix.lower() in _PARQUET_SUFFIXES:
            if layer:
                raise EvalInputError(f"The {where}: GeoParquet has no layers; drop the layer option.")
            return geopandas.read_parquet(p)
        import pyogrio

        return pyogrio.read_dataframe(p, layer=layer)
    except EvalInputError:
        raise
    except Exception as exc:  # every reader error becomes one clear line
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EvalInputError(f"Cannot read the {where}: {message}") from exc


def to_jsonable(value: object) -> object:
    """Convert metrics to JSON-ready values: NaN and infinity become None, numpy to Python."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    if value is pd.NA:
        return None
    return str(value)


def atomic_path(target: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` for a temporary path beside ``target``, then rename it to ``target``.

    The temporary file is removed if ``write`` fails, so ``target`` is either the old
    file, absent, or whole.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.replace(tmp_path, target)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return target


def write_json(path: str | os.PathLike, obj: object) -> Path:
    """Write ``obj`` as indented JSON (NaN and infinity as null), atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False)

    def _write(tmp: Path) -> None:
        tmp.write_text(text + "\n", encoding="utf-8")

    return atomic_path(path, _write)


def write_geoparquet(path: str | os.PathLike, frame: geopandas.GeoDataFrame) -> Path:
    """Write a GeoDataFrame as GeoParquet, atomically."""

    def _write(tmp: Path) -> None:
        frame.to_parquet(tmp, index=True)

    return atomic_path(path, _write)
