"""Input layers read in chunks: GeoParquet row groups, or pyogrio feature slices.

A :class:`LayerSource` names a file (or a directory of GeoParquet parts) and cuts it
into :class:`Chunk` s of whole rows; every chunk knows the input position of its first
row, so positions are the same as reading the whole layer at once.
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import shapely
from pyproj import CRS

from evalcore import remote
from evalcore.errors import EvalInputError, first_line
from evalcore.io import (
    SOURCE_ATTR,
    is_parquet_layer,
    location,
    check_layer_crs,
    check_layer_name,
    check_parquet_parts,
    check_source,
    parquet_parts,
    read_ogr_frame,
)

__all__ = ["LayerSource", "Chunk", "plan_chunks", "read_chunk", "LABEL_COLUMN", "DEFAULT_CHUNK_ROWS"]

DEFAULT_CHUNK_ROWS = 50_000
LABEL_COLUMN = "__evalcore_label__"


@dataclass(frozen=True, slots=True)
class LayerSource:
    """A layer on storage.

    Attributes
    ----------
    path : str
        A file any pyogrio driver reads, a GeoParquet file, or a directory of parts.
    layer : str or None
        Layer name inside a multi-layer file.
    role : str
        ``"reference"`` or ``"predicted"`` (named in errors).
    id_column : str, optional
        Column of row ids, used as the rows' labels instead of their positions.
    """

    path: str
    layer: str | None
    role: str
    id_column: str | None = None

    @property
    def is_parquet(self) -> bool:
        return is_parquet_layer(self.path)

    def describe(self) -> str:
        return f"{self.role} file {self.path!r}" + (f" layer {self.layer!r}" if self.layer else "")


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows ``[start, start + n_rows)`` of a layer.

    For GeoParquet, ``file`` and ``row_groups`` say where they are; a row group larger
    than a chunk is cut into equal slices, the chunk then being rows
    ``[slice_index * n_slice, ...)`` of its single row group (``n_slice`` > 0). Otherwise
    the rows are a pyogrio slice (``skip_features=start``).
    """

    index: int
    start: int
    n_rows: int
    file: str | None = None
    row_groups: tuple[int, ...] = ()
    n_slice: int = 0
    slice_index: int = 0
    weight: int = 0
    """Estimated cost: uncompressed bytes for GeoParquet (vertices dominate), else rows."""


def _parquet_files(source: LayerSource) -> list[Path] | list[str]:
    """The layer's GeoParquet files, in the order :func:`evalcore.io.read_layer` reads them."""
    return parquet_parts(source.path, source.role)


def plan_chunks(source: LayerSource, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> list[Chunk]:
    """Cut a layer into chunks of about ``chunk_rows`` rows (whole row groups for GeoParquet).

    Raises
    ------
    EvalInputError
        Naming the file when it is missing, empty or unreadable, or when the parts of a
        GeoParquet directory disagree on their schema.
    """
    check_source(location(source.path), source.layer, source.describe())
    chunks: list[Chunk] = []
    start = 0
    if source.is_parquet:
        files = _parquet_files(source)
        check_parquet_parts(files, source.role)  # columns, types and CRS agree
        for path in files:
            try:
                meta = remote.parquet_file(path).metadata
            except Exception as exc:
                raise EvalInputError(f"Cannot read the {source.role} file {str(path)!r}: {_first_line(exc)}") from exc
            groups: list[int] = []
            rows = 0
            size = 0
            for g in range(meta.num_row_groups):
                group_rows = meta.row_group(g).num_rows
                group_size = meta.row_group(g).total_byte_size
                if group_rows > chunk_rows:
                    # A large row group (pyarrow writes up to 1Mi rows in one by default)
                    # is cut into equal slices so the chunks keep every worker busy.
                    if groups:
                        chunks.append(Chunk(len(chunks), start, rows, str(path), tuple(groups), weight=size))
                        start += rows
                        groups, rows, size = [], 0, 0
                    n_pieces = -(-group_rows // chunk_rows)
                    n_slice = -(-group_rows // n_pieces)
                    for k in range(n_pieces):
                        n = min(n_slice, group_rows - k * n_slice)
                        chunks.append(Chunk(len(chunks), start, n, str(path), (g,), n_slice, k, group_size * n // group_rows))
                        start += n
                    continue
                groups.append(g)
                rows += group_rows
                size += group_size
                if rows >= chunk_rows:
                    chunks.append(Chunk(len(chunks), start, rows, str(path), tuple(groups), weight=size))
                    start += rows
                    groups, rows, size = [], 0, 0
            if groups:
                chunks.append(Chunk(len(chunks), start, rows, str(path), tuple(groups), weight=size))
                start += rows
        return chunks
    import pyogrio

    check_layer_name(source.path, source.layer, source.role)
    try:
        info = pyogrio.read_info(source.path, layer=source.layer, force_feature_count=True)
    except Exception as exc:
        raise EvalInputError(f"Cannot read the {source.describe()}: {_first_line(exc)}") from exc
    total = int(info["features"])
    for begin in range(0, total, chunk_rows):
        chunks.append(Chunk(len(chunks), begin, min(chunk_rows, total - begin), weight=min(chunk_rows, total - begin)))
    if not chunks:
        chunks.append(Chunk(0, 0, 0))
    return chunks


_first_line = first_line


def _read_slice(parquet: pq.ParquetFile, chunk: Chunk) -> pa.Table:
    """One slice of a row group, streamed in batches of the slice size.

    The batches before the slice are decoded and dropped, which keeps memory at about
    one slice instead of the whole row group.
    """
    first = chunk.slice_index * chunk.n_slice
    last = first + chunk.n_rows
    pieces = []
    seen = 0
    for batch in parquet.iter_batches(batch_size=chunk.n_slice, row_groups=list(chunk.row_groups)):
        begin, seen = seen, seen + batch.num_rows
        if seen <= first:
            continue
        pieces.append(batch.slice(max(first - begin, 0), min(last, seen) - max(first, begin)))
        if seen >= last:
            break
    return pa.Table.from_batches(pieces, schema=parquet.schema_arrow) if pieces else parquet.schema_arrow.empty_table()


def _geoparquet_crs(metadata: dict, column: str) -> CRS | None:
    """The CRS of a GeoParquet column: PROJJSON, absent (OGC:CRS84) or null (unknown)."""
    column_meta = metadata.get("columns", {}).get(column, {})
    if "crs" not in column_meta:
        return CRS.from_user_input("OGC:CRS84")
    if column_meta["crs"] is None:
        return None
    return _crs_of(json.dumps(column_meta["crs"], sort_keys=True))


@functools.lru_cache(maxsize=16)
def _crs_of(projjson: str) -> CRS:
    """A CRS from its PROJJSON text, made once per worker process: every chunk of a layer
    names the same (14 ms each, 2 of a profiled 2M-field run's 223 preparation task-seconds)."""
    return CRS.from_user_input(json.loads(projjson))


def read_chunk(source: LayerSource, chunk: Chunk) -> geopandas.GeoDataFrame:
    """Read one chunk as a GeoDataFrame (a RangeIndex starting at the chunk's first position).

    The frame's ``attrs`` name the source and, for GDAL formats, the rows whose curved
    geometry was linearized (see :func:`evalcore.io.read_ogr_frame`).

    Raises
    ------
    EvalInputError
        Naming the file (and the rows) when it cannot be read, has changed since it was
        planned, holds curved geometries in GeoParquet, or has geometries but no CRS.
    """
    rows = f"rows {chunk.start}-{chunk.start + chunk.n_rows}"
    try:
        if source.is_parquet:
            # A URL is read with ranged requests: the footer, then only this chunk's row groups.
            parquet = remote.parquet_file(chunk.file)
            if chunk.n_slice:
                table = _read_slice(parquet, chunk)
            elif chunk.row_groups:
                table = parquet.read_row_groups(list(chunk.row_groups))
            else:
                table = parquet.schema_arrow.empty_table()
            geo = json.loads((parquet.schema_arrow.metadata or {}).get(b"geo", b"{}") or b"{}")
            column = geo.get("primary_column", "geometry")
            if column not in table.column_names:
                raise EvalInputError(f"The {source.role} file {chunk.file!r} has no geometry column {column!r}.")
            # The pandas metadata of a file written with an index names it; without its
            # column, the frame keeps positions (the geometries below are positional too).
            frame = table.drop_columns([c for c in (column, "__index_level_0__") if c in table.column_names]).to_pandas()
            frame.index = pd.RangeIndex(len(frame))
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="invalid value encountered", category=RuntimeWarning)
                    geoms = shapely.from_wkb(table[column].to_numpy(zero_copy_only=False))
            except NotImplementedError as exc:
                from evalcore.io import _curved_mask

                first = chunk.start
                if chunk.n_slice:  # name every curved row of the row group, not only this slice's
                    table = parquet.read_row_groups(list(chunk.row_groups), columns=[column])
                    first -= chunk.slice_index * chunk.n_slice
                curved = np.flatnonzero(_curved_mask(table[column])) + first
                shown = ", ".join(map(str, curved[:5].tolist())) + (f" and {len(curved) - 5} more" if len(curved) > 5 else "")
                raise EvalInputError(
                    f"The {source.role} file {chunk.file!r} holds curved geometries (CurvePolygon, MultiSurface, ...) at rows "
                    f"{shown or '?'} (0-based), which evalcore reads only from GDAL formats; write the layer as GeoPackage, "
                    "or linearize it (ogr2ogr -nlt CONVERT_TO_LINEAR out.parquet in.parquet)."
                ) from exc
            crs = _geoparquet_crs(geo, column) if geo else None
            gdf = geopandas.GeoDataFrame(frame, geometry=geopandas.GeoSeries(geoms, index=frame.index), crs=crs)
            if LABEL_COLUMN not in gdf.columns:  # a user's file, not an in-memory layer staged by evalcore
                check_layer_crs(gdf, f"{source.role} file {chunk.file!r}")
                gdf.attrs[SOURCE_ATTR] = f"{source.role} file {chunk.file!r}"
        else:
            gdf = read_ogr_frame(source.path, source.layer, source.role, skip_features=chunk.start, max_features=chunk.n_rows)
    except EvalInputError:
        raise
    except Exception as exc:
        raise EvalInputError(f"Cannot read {rows} of the {source.describe()}: {_first_line(exc)}") from exc
    if len(gdf) != chunk.n_rows:
        raise EvalInputError(
            f"The {source.describe()} returned {len(gdf)} rows for {rows}; "
            "the file changed or is truncated."
        )
    if source.id_column is not None:
        if source.id_column not in gdf.columns:
            shown = ", ".join(repr(c) for c in gdf.columns if c != gdf.geometry.name) or "(none)"
            raise EvalInputError(f"The id column {source.id_column!r} is not in the {source.describe()}; its columns are: {shown}.")
        gdf = gdf.set_index(source.id_column, drop=False)
        gdf.index.name = None
    elif LABEL_COLUMN in gdf.columns:  # an in-memory layer written by evalcore keeps its index here
        gdf = gdf.set_index(LABEL_COLUMN)
        gdf.index.name = None
    else:
        gdf.index = np.arange(chunk.start, chunk.start + chunk.n_rows)
    return gdf
