"""Writing outputs atomically, with errors that name the output, and the JSON conversion.

Every writer writes to a temporary name beside the target and renames it when whole,
so a file that exists is complete (:func:`atomic_path`). A failed write raises an
OSError naming the output as the user knows it (:func:`write_error`), a
:class:`DiskFullError` when the disk or the quota is full. :func:`to_jsonable` turns
metrics into JSON-ready values (NaN and infinity as null). Reading layers is
:mod:`evalcore.io`.
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd

from evalcore.errors import EvalInputError, first_line

__all__ = [
    "to_jsonable",
    "atomic_path",
    "STAGING_DIR",
    "shown_path",
    "write_error",
    "DiskFullError",
    "write_json",
    "write_geoparquet",
    "TABLE_FORMATS",
    "table_format",
    "write_table",
]


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
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # name the user's path, not the temporary one
        raise OSError(exc.errno, f"cannot write {str(target)!r}: {exc.strerror}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        # mkstemp makes the file 0600; an output gets the permissions the umask implies,
        # as if it had been created by open(), so colleagues can read it.
        if tmp_path.is_file():
            os.chmod(tmp_path, 0o666 & ~_UMASK)
        os.replace(tmp_path, target)
    except BaseException as exc:
        tmp_path.unlink(missing_ok=True)
        if _disk_full(exc) is not None:
            raise write_error(target, exc) from None
        if isinstance(exc, OSError) and exc.filename is not None and str(tmp_path) in str(exc.filename):
            raise write_error(target, exc) from None
        raise
    return target


#: The hidden directory, beside each output, that holds it until it is renamed into place
#: (:mod:`evalcore.outputs`). Messages name the output, not its staged name.
STAGING_DIR = ".evalcore-partial"


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as the user knows it: a staged output (``DIR/.evalcore-partial/NAME``) as ``DIR/NAME``."""
    p = Path(path)
    return str(Path(*[part for part in p.parts if part != STAGING_DIR])) if STAGING_DIR in p.parts else str(p)


def write_error(target: str | os.PathLike, exc: BaseException) -> OSError:
    """The error to raise when writing ``target`` failed with ``exc``: one that names ``target``.

    A full disk gives a :class:`DiskFullError` that says so; any other OSError keeps its
    errno and reason. A staged output is named by its final path (:func:`shown_path`).
    """
    target = shown_path(target)
    full = _disk_full(exc)
    if full is not None:
        return DiskFullError(full, f"cannot write {str(target)!r}: {_FULL_TEXT[full]}; free some space or write elsewhere")
    if isinstance(exc, OSError):
        return OSError(exc.errno, f"cannot write {str(target)!r}: {exc.strerror or first_line(exc)}")
    return OSError(f"cannot write {str(target)!r}: {first_line(exc)}")


class DiskFullError(OSError):
    """Writing an output failed because its file system is full (or the user's quota is used up).

    The message names the output being written; the writers' own errors (Python's, Arrow's,
    GDAL's) name the temporary file or nothing at all.
    """


_FULL_TEXT = {errno.ENOSPC: "the disk is full (No space left on device)", errno.EDQUOT: "the disk quota is exceeded"}
_FULL_MARKERS = {"No space left on device": errno.ENOSPC, "database or disk is full": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT}


def _disk_full(exc: BaseException) -> int | None:
    """ENOSPC or EDQUOT when ``exc`` or an exception in its chain says the disk is full; else None.

    Arrow and GDAL wrap the error in their own exceptions, sometimes only in the message.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_TEXT:
            return current.errno
        text = str(current)
        for marker, code in _FULL_MARKERS.items():
            if marker in text:
                return code
        current = current.__cause__ or current.__context__
    return None


def _current_umask() -> int:
    mask = os.umask(0)  # the only way to read it; set back at once
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def write_json(path: str | os.PathLike, obj: object) -> Path:
    """Write ``obj`` as indented JSON (NaN and infinity as null), atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False)

    def _write(tmp: Path) -> None:
        tmp.write_text(text + "\n", encoding="utf-8")

    return atomic_path(path, _write)


def write_geoparquet(path: str | os.PathLike, frame: geopandas.GeoDataFrame) -> Path:
    """Write a GeoDataFrame as GeoParquet, atomically.

    A meaningful index is kept as a column; a plain RangeIndex is not written (it would
    become an anonymous ``__index_level_0__`` column in QGIS and pandas).
    """

    def _write(tmp: Path) -> None:
        frame.to_parquet(tmp, index=None)

    return atomic_path(path, _write)


TABLE_FORMATS: dict[str, str | None] = {
    ".parquet": None,  # GeoParquet
    ".geoparquet": None,
    ".gpkg": "GPKG",
    ".fgb": "FlatGeobuf",
}
"""Output table formats by file suffix: None is GeoParquet, else the OGR driver."""


def table_format(path: str | os.PathLike, option: str) -> str | None:
    """The format a table output path asks for (its suffix); EvalInputError for an unknown one."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        known = ", ".join(TABLE_FORMATS)
        raise EvalInputError(
            f"{option} {str(path)!r}: the file name must end in one of {known} (the format), or end with / "
            "for a directory of GeoParquet parts."
        )
    return TABLE_FORMATS[suffix]


def write_table(path: str | os.PathLike, frame: geopandas.GeoDataFrame, option: str = "output") -> Path:
    """Write a GeoDataFrame in the format its file suffix names (GeoParquet, GeoPackage, FlatGeobuf), atomically."""
    driver = table_format(path, option)
    if driver is None:
        return write_geoparquet(path, frame)
    layer = Path(path).stem

    def _write(tmp: Path) -> None:
        # GDAL checks a GeoPackage's extension; write under it, then move to the temporary name.
        named = tmp.with_name(tmp.name + Path(path).suffix)
        try:
            frame.to_file(named, driver=driver, layer=layer, engine="pyogrio")
            os.replace(named, tmp)
        finally:
            named.unlink(missing_ok=True)

    return atomic_path(path, _write)
