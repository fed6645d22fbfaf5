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
    "write_geoparquet_wkb",
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


GEOPARQUET_VERSION = "1.1.0"
"""The GeoParquet version :func:`write_geoparquet_wkb` writes (geopandas 1.x's default)."""

_TYPE_NAMES = {3: "Polygon", 6: "MultiPolygon"}


def write_geoparquet_wkb(path: str | os.PathLike, frame: pd.DataFrame, wkb: object, crs: object) -> Path:
    """Write a table and a column of WKB polygons as GeoParquet, atomically, without
    building the geometries.

    The file is the one :func:`write_geoparquet` writes for ``GeoDataFrame(frame,
    geometry=shapely.from_wkb(wkb), crs=crs)`` (the same columns, field and file metadata,
    the geometry last), except that the ``geo`` metadata names evalcore as its creator:
    the geometry types and the bounding box are read from the bytes
    (:func:`evalcore._wkb_kernels._wkb_polygon_extent`), so a partition's stored
    geometries reach the output as they are instead of being decoded and encoded again.

    Parameters
    ----------
    frame : pandas.DataFrame
        The attribute columns, without a ``geometry`` column.
    wkb : pyarrow.BinaryArray or ChunkedArray, shape (len(frame),)
        2D WKB Polygons or MultiPolygons (little-endian, as shapely writes them); null or
        empty values are missing geometries. Anything else is decoded and written through
        geopandas instead.
    crs : pyproj.CRS or None
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalcore._wkb_kernels import _wkb_polygon_extent
    from evalcore.arrays import binary_buffers

    if "geometry" in frame.columns:
        raise ValueError("write_geoparquet_wkb: the frame already has a geometry column")
    values = wkb.combine_chunks() if isinstance(wkb, pa.ChunkedArray) else wkb
    values = values.cast(pa.binary())
    if len(values) != len(frame):
        raise ValueError(f"write_geoparquet_wkb: {len(values)} geometries for {len(frame)} rows")
    data, offsets = binary_buffers(values)
    types = np.empty(len(values), dtype=np.int64)
    box = np.empty(4, dtype=np.float64)
    if values.null_count or not _wkb_polygon_extent(data, offsets, types, box):
        import shapely

        geoms = shapely.from_wkb(values.to_numpy(zero_copy_only=False))
        return write_geoparquet(path, geopandas.GeoDataFrame(frame, geometry=geoms, crs=crs))

    attributes = pd.DataFrame(frame.copy(deep=False))
    attributes["geometry"] = None  # geopandas' placeholder: an Arrow null column, replaced below
    table = pa.Table.from_pandas(attributes, preserve_index=None)
    crs_json = crs.to_json_dict() if crs is not None else None
    extension = {"ARROW:extension:name": "geoarrow.wkb",
                 "ARROW:extension:metadata": json.dumps({"crs": crs_json}) if crs_json is not None else "{}"}
    field = pa.field("geometry", type=pa.binary(), nullable=True, metadata=extension)
    table = table.set_column(table.schema.get_field_index("geometry"), field, values)
    column: dict = {"encoding": "WKB", "crs": _without_member_ids(crs_json), "geometry_types": sorted(_TYPE_NAMES[t] for t in np.unique(types[types >= 0]))}
    if np.isfinite(box).all():
        column["bbox"] = box.tolist()
    geo = {"primary_column": "geometry", "columns": {"geometry": column}, "version": GEOPARQUET_VERSION,
           "creator": {"library": "evalcore", "version": _evalcore_version()}}
    metadata = dict(table.schema.metadata or {})
    metadata[b"geo"] = json.dumps(geo).encode("utf-8")
    if frame.attrs:
        metadata["PANDAS_ATTRS"] = json.dumps(frame.attrs)
    table = table.replace_schema_metadata(metadata)
    return atomic_path(path, lambda tmp: pq.write_table(table, tmp, compression="snappy"))


def _without_member_ids(crs_json: dict | None) -> dict | None:
    """A PROJJSON CRS without the ids of its datum ensemble's members, as geopandas and GDAL
    write it (older PROJ databases do not know the newer members' ids)."""
    if crs_json is None:
        return None

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: (([{kk: vv for kk, vv in m.items() if kk != "id"} if isinstance(m, dict) else m for m in v])
                        if k == "members" and isinstance(v, list) else strip(v)) for k, v in value.items()}
        return value

    return strip(crs_json)


def _evalcore_version() -> str:
    from evalcore._version import __version__

    return __version__


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
