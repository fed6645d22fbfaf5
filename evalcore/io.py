"""Reading layers, with clear errors.

Readers accept any format pyogrio reads (GeoPackage, FlatGeobuf, Shapefile,
GeoJSON, ...), GeoParquet files and directories of GeoParquet parts. Writing outputs
(atomically) and the JSON conversion are :mod:`evalcore.writers`.

Bad input is refused here, at the boundary, with one line that names the file, the
layer and the row or column (docs/reliability.md has the whole list): a missing,
empty, truncated or corrupt file, a multi-layer file without a layer name, a layer
that does not exist, a table without geometry, GeoParquet parts that disagree on
their columns, types or CRS, a layer without a CRS, and curved geometries in
GeoParquet. Curved geometries from GDAL formats (CurvePolygon, MultiSurface, ...)
are linearized by GDAL while they are read; their rows are recorded in
``frame.attrs[LINEARIZED_ROWS_ATTR]`` and counted as repaired by
:func:`evalcore.prepare.prepare_layer`. Every frame a reader returns names its source
in ``frame.attrs[SOURCE_ATTR]`` so later errors can name the file too.

The module stays whole at about 600 lines: every check above is made on the way into
a frame, by the readers of one format or of all, and they share the same naming of a
file, a layer and a row in their messages.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd

from evalcore import remote
from evalcore.arrays import binary_buffers
from evalcore.errors import CRSError, EvalInputError, first_line

__all__ = [
    "read_layer",
    "location",
    "is_parquet_layer",
    "check_source",
    "check_file_name",
    "describe_source",
    "parquet_parts",
    "check_parquet_parts",
    "check_layer_name",
    "check_unique_columns",
    "check_layer_crs",
    "read_ogr_frame",
    "layer_columns",
    "read_columns",
    "iter_column_chunks",
    "COLUMN_CHUNK_ROWS",
    "geometry_column_names",
    "SOURCE_ATTR",
    "LINEARIZED_ROWS_ATTR",
]

_PARQUET_SUFFIXES = {".parquet", ".geoparquet", ".pq"}

SOURCE_ATTR = "evalcore_source"
"""``frame.attrs`` key: where the rows came from, e.g. ``"predicted file 'p.gpkg' layer 'fields'"``."""

LINEARIZED_ROWS_ATTR = "evalcore_linearized_rows"
"""``frame.attrs`` key: tuple of the (0-based) rows of the frame whose curved geometry GDAL linearized."""

_LAYER_OPTION = {"reference": "--ref-layer", "predicted": "--pred-layer"}

# ISO WKB geometry type codes (modulo 1000) of curved geometries.
_CURVED_WKB = {8: "CircularString", 9: "CompoundCurve", 10: "CurvePolygon", 11: "MultiCurve", 12: "MultiSurface"}
_COLLECTION_WKB = 7

# Shapely warns about NaN coordinates while it decodes WKB; evalcore reports those rows itself.
_NAN_WARNING = "invalid value encountered"


def describe_source(path: str | os.PathLike, layer: str | None, role: str) -> str:
    """``"predicted file 'p.gpkg' layer 'fields'"``: how messages name a layer on storage."""
    return f"{role} file {str(path)!r}" + (f" layer {layer!r}" if layer else "")


def location(path: str | os.PathLike) -> Path | str:
    """A layer's location: a local ``Path``, or a normalised URL (``file://`` becomes a local path).

    Raises
    ------
    EvalInputError
        For a URL evalcore cannot use or that carries a credential (:func:`evalcore.remote.check_url`).
    """
    if isinstance(path, str) and remote.is_url(path):
        url = remote.check_url(path)
        return url if remote.is_url(url) else Path(url)
    return path if isinstance(path, Path) else Path(path)


def _is_dir(p: Path | str) -> bool:
    if isinstance(p, str):
        info = remote.stat(p)
        return info is not None and info.get("type") == "directory"
    return p.is_dir()


def _suffix(p: Path | str) -> str:
    return Path(remote.name(p)).suffix.lower() if isinstance(p, str) else p.suffix.lower()


def _is_parquet(p: Path | str) -> bool:
    return _suffix(p) in _PARQUET_SUFFIXES or _is_dir(p)


def is_parquet_layer(path: str | os.PathLike) -> bool:
    """Whether a layer (a path or a URL) is GeoParquet: a ``.parquet`` file or a directory of parts."""
    return _is_parquet(location(path))


def _special_kind(p: Path) -> str | None:
    """What a path is when it is neither a regular file nor a directory (a FIFO, ...); None otherwise."""
    mode = p.stat().st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((text for test, text in kinds if test(mode)), "a special file")


def check_file_name(path: str | os.PathLike, role: str) -> None:
    """Refuse a file name that is not valid UTF-8, saying so (the readers would report a corrupt file).

    A name read from the command line keeps its undecodable bytes as surrogates; the
    GeoParquet and GDAL readers take UTF-8 text only and cannot open it.
    """
    text = os.fspath(path)
    if isinstance(text, bytes):
        raw = text
    else:
        try:
            text.encode("utf-8")
            return
        except UnicodeEncodeError:
            raw = os.fsencode(text)
    try:
        raw.decode("utf-8")
        return
    except UnicodeDecodeError as exc:
        shown = raw.decode("utf-8", "backslashreplace")
        raise EvalInputError(
            f"The {role} file name '{shown}' is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at position {exc.start}), "
            "which the GeoParquet and GDAL readers cannot open; rename the file to a UTF-8 name (e.g. convmv -f latin1 -t utf8)."
        ) from None


def check_source(p: Path | str, layer: str | None, where: str) -> None:
    """The checks every reader makes first: the name is UTF-8, the path exists and is a
    regular file or directory (a FIFO would block the reader forever), the file is not
    empty, and a layer name is given only for formats that have layers.

    ``p`` is a local path or a URL (:func:`location`); for a URL the store is asked.
    """
    if isinstance(p, str):
        info = remote.stat(p, where.partition(" file ")[0] + " file")
        if info is None:
            raise EvalInputError(f"The {where} does not exist; check the URL.")
        if info.get("type") != "directory" and not info.get("size"):
            raise EvalInputError(f"The {where} is empty (0 bytes); it was probably not written completely.")
        if layer and (info.get("type") == "directory" or _suffix(p) in _PARQUET_SUFFIXES):
            raise EvalInputError(f"The {where}: GeoParquet has no layers; drop the layer option.")
        return
    check_file_name(p, where.partition(" file ")[0])  # the role: where begins "predicted file '...'"
    if not p.exists():
        raise EvalInputError(f"The {where} does not exist; check the path.")
    special = _special_kind(p)
    if special is not None:
        raise EvalInputError(f"The {where} is not a regular file or directory but {special}; give the layer's file itself.")
    if p.is_file() and p.stat().st_size == 0:
        raise EvalInputError(f"The {where} is empty (0 bytes); it was probably not written completely.")
    if layer and _is_parquet(p):
        raise EvalInputError(f"The {where}: GeoParquet has no layers; drop the layer option.")


def parquet_parts(path: str | os.PathLike, role: str) -> list[Path] | list[str]:
    """The GeoParquet files of a layer: the file itself, or a directory's ``*.parquet`` files (sorted, recursive).

    Both the single-process reader and the chunked reader of a distributed run read
    exactly these files in this order, so row positions agree. A URL's parts are URLs.
    """
    p = location(path)
    if isinstance(p, str):
        return remote.parquet_parts(p, role) if _is_dir(p) else [p]
    if not p.is_dir():
        return [p]
    files = sorted(f for f in p.rglob("*.parquet") if not any(part.startswith((".", "_")) for part in f.relative_to(p).parts))
    for f in files:
        special = _special_kind(f)
        if special is not None:
            raise EvalInputError(f"The {role} GeoParquet part {str(f)!r} is not a regular file but {special}; remove it from {str(path)!r}.")
    if not files:
        raise EvalInputError(
            f"The {role} directory {str(path)!r} holds no .parquet files; give a GeoParquet file, "
            "a directory of GeoParquet parts, or a file GDAL reads."
        )
    return files


def _geo_metadata(schema: object) -> dict:
    raw = (schema.metadata or {}).get(b"geo")  # type: ignore[attr-defined]
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return {}


def _part_crs(geo: dict) -> object:
    """The CRS of a part's primary geometry column as comparable text (None: unknown)."""
    column = geo.get("columns", {}).get(geo.get("primary_column", "geometry"), {})
    if "crs" not in column:
        return "OGC:CRS84"
    if column["crs"] is None:
        return None
    from pyproj import CRS

    try:
        return CRS.from_user_input(column["crs"]).to_wkt()
    except Exception:
        return json.dumps(column["crs"], sort_keys=True)


def check_parquet_parts(files: list[Path] | list[str], role: str) -> list[object]:
    """Check that GeoParquet parts agree on columns, column types and CRS; return their schemas.

    Raises
    ------
    EvalInputError
        Naming the part that cannot be read, or the first part that disagrees with the
        first one (which column is missing or extra, which type or CRS differs).
    """
    import pyarrow.parquet as pq

    schemas = []
    first = None
    for path in files:
        try:
            schema = remote.parquet_file(path).schema_arrow if isinstance(path, str) else pq.read_schema(path)
        except Exception as exc:
            raise EvalInputError(
                f"Cannot read the {role} file {str(path)!r}: {first_line(exc)} "
                "(it is truncated, corrupt or not GeoParquet)."
            ) from exc
        names = [n for n in schema.names if n != "__index_level_0__"]
        check_unique_columns(names, f"{role} file {str(path)!r}")
        types = {n: str(schema.field(n).type) for n in names}
        geo = _geo_metadata(schema)
        crs = _part_crs(geo) if geo else "(no geo metadata)"
        if first is None:
            first = (path, names, types, crs)
        else:
            p0, names0, types0, crs0 = first
            problem = None
            if names != names0:
                missing = [n for n in names0 if n not in names]
                extra = [n for n in names if n not in names0]
                problem = (
                    f"lacks columns {missing}" if missing and not extra else
                    f"has extra columns {extra}" if extra and not missing else
                    f"has columns {names}" if not missing and not extra else
                    f"lacks columns {missing} and has extra columns {extra}"
                )
                problem += f" (the first part {str(p0)!r} has {names0})"
            else:
                diff = [n for n in names if types[n] != types0[n]]
                if diff:
                    n = diff[0]
                    problem = f"stores column {n!r} as {types[n]}, the first part {str(p0)!r} as {types0[n]}"
                elif crs != crs0:
                    problem = f"has another CRS than the first part {str(p0)!r}"
            if problem:
                raise EvalInputError(
                    f"The {role} GeoParquet parts disagree: {str(path)!r} {problem}; "
                    "write every part with the same columns, types and CRS."
                )
        schemas.append(schema)
    return schemas


def check_unique_columns(names: list[str], where: str) -> None:
    """Refuse a layer with two columns of the same name (a column could not be chosen by its name)."""
    seen: set[str] = set()
    for name in map(str, names):
        if name in seen:
            raise EvalInputError(f"The {where} has two columns named {name!r}; rename one so that every column name is unique.")
        seen.add(name)


def check_layer_name(path: str | os.PathLike, layer: str | None, role: str) -> None:
    """Check the layer choice of a file GDAL reads: it exists, or the file has only one layer.

    Raises
    ------
    EvalInputError
        When ``layer`` is not in the file (the message lists its layers), or when
        ``layer`` is None and the file has several layers.
    """
    import pyogrio

    where = describe_source(path, None, role)
    try:
        layers = [str(name) for name in pyogrio.list_layers(remote.gdal_path(location(path)))[:, 0]]
    except Exception as exc:
        raise EvalInputError(f"Cannot read the {where}: {first_line(exc)} (it is truncated, corrupt or not a vector file).") from exc
    shown = ", ".join(repr(n) for n in layers[:10]) + (f" and {len(layers) - 10} more" if len(layers) > 10 else "")
    option = _LAYER_OPTION.get(role, "the layer option")
    if layer is None and len(layers) > 1:
        raise EvalInputError(
            f"The {where} has {len(layers)} layers ({shown}); name the one to evaluate with {option}."
        )
    if layer is not None and layer not in layers:
        raise EvalInputError(f"The {where} has no layer {layer!r}; its layers are: {shown or '(none)'}. Fix {option}.")


def check_layer_crs(frame: geopandas.GeoDataFrame, where: str) -> None:
    """Refuse a layer that has geometries but no CRS, or a CRS not on the Earth, naming the file.

    Raises
    ------
    CRSError
    """
    if frame.crs is not None:
        from evalcore.crs import check_earth_crs

        check_earth_crs(frame.crs, where)
        return
    if len(frame) == 0:
        return
    geoms = np.asarray(frame.geometry.array, dtype=object)
    import shapely

    present = ~shapely.is_missing(geoms)
    present[present] = ~shapely.is_empty(geoms[present])
    if present.any():
        raise CRSError(
            f"The {where} has {int(present.sum())} geometries but no CRS. Set one (e.g. "
            "ogr2ogr -a_srs EPSG:4326 out.gpkg in.gpkg, or GeoDataFrame.set_crs) or fix the file's metadata."
        )


def _wkb_has_curve(buf: bytes, pos: int = 0, depth: int = 0) -> tuple[bool, int]:
    """Whether a WKB geometry (ISO or EWKB) holds a curved part; and where it ends."""
    if depth > 32 or pos + 5 > len(buf):
        return False, len(buf)
    order = "<" if buf[pos] == 1 else ">"
    (code,) = struct.unpack_from(order + "I", buf, pos + 1)
    pos += 5
    flags = code & 0xF0000000
    code &= 0x0FFFFFFF
    base, dims = code % 1000, code // 1000
    n_dims = 2 + (dims in (1, 3)) + (dims in (2, 3)) + bool(flags & 0x80000000) + bool(flags & 0x40000000)
    if flags & 0x20000000:  # EWKB SRID
        pos += 4
    if base in _CURVED_WKB:
        return True, len(buf)
    if base == 1:  # Point
        return False, pos + 8 * n_dims
    (n,) = struct.unpack_from(order + "I", buf, pos)
    pos += 4
    if base == 2:  # LineString
        return False, pos + 8 * n_dims * n
    if base == 3:  # Polygon
        for _ in range(n):
            (m,) = struct.unpack_from(order + "I", buf, pos)
            pos += 4 + 8 * n_dims * m
        return False, pos
    for _ in range(n):  # multi-geometries and collections
        curved, pos = _wkb_has_curve(buf, pos, depth + 1)
        if curved:
            return True, len(buf)
    return False, pos


def _curved_mask(wkb: object) -> np.ndarray:
    """True for each WKB value (a pyarrow binary array) that holds a curved geometry."""
    import pyarrow as pa

    arr = wkb.combine_chunks() if isinstance(wkb, pa.ChunkedArray) else wkb
    n = len(arr)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    data, offsets = binary_buffers(arr)
    start = offsets[:-1]
    long_enough = (offsets[1:] - offsets[:-1]) >= 5
    if arr.null_count:
        long_enough &= ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
    rows = np.flatnonzero(long_enough)
    if len(rows) == 0:
        return out
    b = start[rows]
    little = data[b] == 1
    bytes4 = np.stack([data[b + k] for k in range(1, 5)], axis=1).astype(np.uint32)
    code_le = bytes4[:, 0] | (bytes4[:, 1] << 8) | (bytes4[:, 2] << 16) | (bytes4[:, 3] << 24)
    code_be = bytes4[:, 3] | (bytes4[:, 2] << 8) | (bytes4[:, 1] << 16) | (bytes4[:, 0] << 24)
    base = (np.where(little, code_le, code_be) & 0x0FFFFFFF) % 1000
    out[rows[np.isin(base, list(_CURVED_WKB))]] = True
    for i in rows[base == _COLLECTION_WKB]:  # collections: look inside (rare)
        try:
            out[i] = _wkb_has_curve(arr[int(i)].as_py())[0]
        except struct.error:  # malformed WKB: the geometry reader reports it
            pass
    return out


def _ogr_curved_rows(path: str | os.PathLike, layer: str | None, skip_features: int, max_features: int | None) -> np.ndarray:
    """Rows (0-based in the slice read) whose stored geometry is curved, read without linearization."""
    import pyogrio

    try:
        _, table = pyogrio.read_arrow(remote.gdal_path(location(path)), layer=layer, columns=[], skip_features=skip_features, max_features=max_features)
    except Exception:  # the main read succeeded; a driver without Arrow support is not an error
        return np.empty(0, dtype=np.int64)
    geometry = [name for name in table.column_names if name not in ("OGC_FID", "fid")]
    if not geometry:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(_curved_mask(table.column(geometry[-1])))


def read_ogr_frame(
    path: str | os.PathLike,
    layer: str | None,
    role: str,
    *,
    skip_features: int = 0,
    max_features: int | None = None,
) -> geopandas.GeoDataFrame:
    """Read (a slice of) a layer GDAL reads, linearizing curved geometries, with a CRS check.

    Curved geometries (CurvePolygon, MultiSurface, CompoundCurve rings, ...) are
    linearized by GDAL (``OGR_G_GetLinearGeometry`` with its default step of 4 degrees);
    their rows go to ``frame.attrs[LINEARIZED_ROWS_ATTR]``. Z and M values are dropped
    later, by :func:`evalcore.prepare.prepare_layer`.

    Raises
    ------
    EvalInputError
        Naming the file and layer when it cannot be read, has no geometry column, or
        has geometries but no CRS.
    """
    import pyogrio

    where = describe_source(path, layer, role)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NAN_WARNING, category=RuntimeWarning)
            frame = pyogrio.read_dataframe(
                remote.gdal_path(location(path)), layer=layer, use_arrow=False, skip_features=skip_features, max_features=max_features
            )
    except Exception as exc:
        raise EvalInputError(f"Cannot read the {where}: {first_line(exc)} (it is truncated, corrupt or not a vector file).") from exc
    if not isinstance(frame, geopandas.GeoDataFrame):
        raise EvalInputError(
            f"The {where} is a table without geometry (columns: {', '.join(map(repr, frame.columns)) or '(none)'}); "
            "give a polygon layer."
        )
    check_unique_columns(list(frame.columns), where)
    check_layer_crs(frame, where)
    curved = _ogr_curved_rows(path, layer, skip_features, max_features)
    frame.attrs[SOURCE_ATTR] = where
    if len(curved):
        frame.attrs[LINEARIZED_ROWS_ATTR] = tuple(int(i) for i in curved)
    return frame


def _curved_parquet_error(files: list[Path] | list[str], role: str, exc: BaseException) -> EvalInputError:
    """The error for GeoParquet rows holding curved geometries (which shapely cannot read)."""
    import pyarrow.parquet as pq

    rows: list[int] = []
    start = 0
    where = f"{role} file {str(files[0])!r}"
    for path in files:
        parquet = remote.parquet_file(path)
        geo = _geo_metadata(parquet.schema_arrow)
        column = geo.get("primary_column", "geometry")
        table = parquet.read(columns=[column])
        found = np.flatnonzero(_curved_mask(table.column(column)))
        if len(found) and not rows:
            where = f"{role} file {str(path)!r}"
        rows.extend(int(i) + start for i in found)
        start += table.num_rows
    shown = ", ".join(map(str, rows[:5])) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
    return EvalInputError(
        f"The {where} holds curved geometries (CurvePolygon, MultiSurface, ...) at rows {shown or '?'} (0-based), "
        "which evalcore reads only from GDAL formats; write the layer as GeoPackage, or linearize it "
        "(ogr2ogr -nlt CONVERT_TO_LINEAR out.parquet in.parquet)."
    )


def _read_parquet(p: Path | str, role: str) -> geopandas.GeoDataFrame:
    files = parquet_parts(p, role)
    check_parquet_parts(files, role)
    frames = []
    for path in files:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_NAN_WARNING, category=RuntimeWarning)
                frames.append(remote.read_geoparquet(path))
        except NotImplementedError as exc:
            if "onlinear" in str(exc):
                raise _curved_parquet_error(files, role, exc) from exc
            raise
        except Exception as exc:
            raise EvalInputError(
                f"Cannot read the {role} file {str(path)!r}: {first_line(exc)} (it is truncated, corrupt or not GeoParquet)."
            ) from exc
    if len(frames) == 1 and not _is_dir(p):
        return frames[0]
    frame = pd.concat(frames, ignore_index=True)  # positions, as the chunked reader numbers them
    return geopandas.GeoDataFrame(frame, geometry=frames[0].geometry.name, crs=frames[0].crs)


def read_layer(path: str | os.PathLike, *, layer: str | None = None, role: str = "layer") -> geopandas.GeoDataFrame:
    """Read a vector layer.

    Parameters
    ----------
    path : str or path-like
        A file any pyogrio driver reads, a GeoParquet file, or a directory of
        GeoParquet parts (its ``*.parquet`` files, sorted, rows numbered across parts).
    layer : str, optional
        Layer name inside a multi-layer file (GeoPackage); required when the file has
        several layers.
    role : str
        ``"reference"`` or ``"predicted"``; named in error messages.

    Returns
    -------
    geopandas.GeoDataFrame
        With ``attrs[SOURCE_ATTR]`` naming the file, and ``attrs[LINEARIZED_ROWS_ATTR]``
        listing the rows whose curved geometry was linearized (when there are any).

    Raises
    ------
    EvalInputError
        Naming the path (and layer) when the file is missing, empty, unreadable or
        not a vector layer, when the layer is ambiguous or missing, when GeoParquet
        parts disagree, or when the layer has geometries but no CRS (CRSError).
    """
    p = location(path)
    where = describe_source(path, layer, role)
    check_source(p, layer, where)
    if _is_parquet(p):
        try:
            frame = _read_parquet(p, role)
        except EvalInputError:
            raise
        except Exception as exc:  # every reader error becomes one clear line
            raise EvalInputError(f"Cannot read the {where}: {first_line(exc)}") from exc
        check_layer_crs(frame, where)
        frame.attrs[SOURCE_ATTR] = where
        return frame
    check_layer_name(p, layer, role)
    return read_ogr_frame(p, layer, role)


def layer_columns(path: str | os.PathLike, *, layer: str | None = None, role: str = "layer") -> dict[str, str]:
    """The attribute columns of a layer and their types, read from its header only.

    Checks what the readers check before any row is read: the file exists, is not
    empty, its header is readable, the layer choice is valid and GeoParquet parts agree.

    Returns
    -------
    dict
        Column name to a type name (pyarrow's for GeoParquet, pyogrio's otherwise),
        without the geometry column.
    """
    p = location(path)
    where = describe_source(path, layer, role)
    check_source(p, layer, where)
    if _is_parquet(p):
        schema = check_parquet_parts(parquet_parts(p, role), role)[0]
        geo = _geo_metadata(schema)
        if not geo:
            raise EvalInputError(f"The {where} has no GeoParquet metadata ('geo'); it is a plain Parquet file, not a layer.")
        geometry = set(geo.get("columns", {})) | {geo.get("primary_column", "geometry")}
        return {n: str(schema.field(n).type) for n in schema.names if n not in geometry and n != "__index_level_0__"}
    import pyogrio

    check_layer_name(p, layer, role)
    try:
        info = pyogrio.read_info(remote.gdal_path(p), layer=layer)
    except Exception as exc:
        raise EvalInputError(f"Cannot read the {where}: {first_line(exc)} (it is truncated, corrupt or not a vector file).") from exc
    return {str(n): str(t) for n, t in zip(info["fields"], info["dtypes"])}


def geometry_column_names(path: str | os.PathLike, *, layer: str | None = None, role: str = "layer") -> set[str]:
    """The names a layer's geometry column goes by: as stored in the file, and ``"geometry"``
    (what the GDAL reader calls it in a frame). Read from the header only."""
    p = location(path)
    if _is_parquet(p):
        geo = _geo_metadata(check_parquet_parts(parquet_parts(p, role), role)[0])
        return set(geo.get("columns", {})) | {geo.get("primary_column", "geometry")}
    import pyogrio

    try:
        name = pyogrio.read_info(remote.gdal_path(p), layer=layer).get("geometry_name") or ""
    except Exception:  # the header was read before: a failure here names nothing new
        name = ""
    return {"geometry", name} - {""}


COLUMN_CHUNK_ROWS = 262_144
"""Rows of a column chunk (:func:`iter_column_chunks`): 2 MiB of a float64 column."""


def iter_column_chunks(path: str | os.PathLike, columns: list[str], *, layer: str | None = None, role: str = "layer",
                       rows: int = COLUMN_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """Some attribute columns of a layer, ``rows`` rows at a time, without geometry.

    Each chunk's index is a ``RangeIndex`` of its rows' positions in the layer (counted
    from 0 across a directory's parts), so a check of a chunk names the row in the file.
    The client checks a country's score or class column this way with one chunk in memory
    (reading the whole column held 16 MB of values and Arrow's buffers for 2 million
    predictions, and grew with the country).

    Raises
    ------
    EvalInputError
        Naming the layer and the columns when they cannot be read.
    """
    if rows < 1:
        raise ValueError(f"iter_column_chunks: rows must be at least 1, not {rows}")
    p = location(path)
    where = describe_source(path, layer, role)
    offset = 0
    try:
        if _is_parquet(p):
            for part in parquet_parts(p, role):
                parquet = remote.parquet_file(part)
                absent = [c for c in columns if c not in parquet.schema_arrow.names]
                if absent:  # iter_batches would leave them out without a word
                    raise EvalInputError(f"Cannot read columns {columns} of the {where}: {str(part)!r} has no column {absent[0]!r}")
                for batch in parquet.iter_batches(batch_size=rows, columns=columns):
                    frame = batch.to_pandas()
                    frame.index = pd.RangeIndex(offset, offset + len(frame))
                    offset += len(frame)
                    yield frame
            return
        import pyogrio

        total = int(pyogrio.read_info(remote.gdal_path(p), layer=layer, force_feature_count=True)["features"])
        while offset < total:
            frame = pd.DataFrame(pyogrio.read_dataframe(remote.gdal_path(p), layer=layer, columns=columns, read_geometry=False,
                                                        use_arrow=False, skip_features=offset, max_features=rows))
            if len(frame) == 0:  # the file shrank since it was counted: what is left is not read
                raise EvalInputError(f"the {where} ended at row {offset} of the {total} it counted")
            frame.index = pd.RangeIndex(offset, offset + len(frame))
            offset += len(frame)
            yield frame
    except EvalInputError:
        raise
    except Exception as exc:
        raise EvalInputError(f"Cannot read columns {columns} of the {where} (at row {offset}): {first_line(exc)}") from exc


def read_columns(path: str | os.PathLike, columns: list[str], *, layer: str | None = None, role: str = "layer") -> pd.DataFrame:
    """Some attribute columns of a layer, without geometry (rows numbered from 0 across parts)."""
    p = location(path)
    where = describe_source(path, layer, role)
    try:
        if _is_parquet(p):
            import pyarrow as pa
            import pyarrow.parquet as pq

            tables = [remote.parquet_file(f).read(columns=columns) for f in parquet_parts(p, role)]
            return pa.concat_tables(tables).to_pandas() if tables else pd.DataFrame(columns=columns)
        import pyogrio

        return pd.DataFrame(pyogrio.read_dataframe(remote.gdal_path(p), layer=layer, columns=columns, read_geometry=False, use_arrow=False))
    except EvalInputError:
        raise
    except Exception as exc:
        raise EvalInputError(f"Cannot read columns {columns} of the {where}: {first_line(exc)}") from exc
