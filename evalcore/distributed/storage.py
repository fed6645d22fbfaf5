"""The work directory: prepared layers partitioned by key, and partition outputs.

Layout under ``workdir``::

    prepared/<layer>/<epsg>_<tx>_<ty>/chunk-<i>.parquet   prepared rows (GeoParquet)
    prepared/index.json                                   the run index (rows and boxes per partition)
    sums/<epsg>_<tx>_<ty>.arrays                          sums phase output of a partition (an arrays file)
    sums/<epsg>_<tx>_<ty>.values.arrays                   its gathered values, sorted per group and column
    select/<call>-<round>.arrays                          a selection round's queries (removed after the round)
    fields/<epsg>_<tx>_<ty>.parquet                       per-field table part (GeoParquet)

Prepared rows keep their input position, label, areas, home zone, tile, boundary
length, the equal-area box (for halo selection without decoding geometries) and three
WKB geometries: the repaired source geometry (the GeoParquet primary column, in the
layer's CRS), the equal-area geometry and the UTM geometry. WKB stores doubles as they
are, so a partition read back is bit-identical to the rows prepared.

Every file is written to a temporary name and renamed when whole. Every read and write
goes through :mod:`evalcore.distributed.workdir` (``wd.fetch`` before a read,
``wd.publish`` after a write), so a work directory on an object store works the same.
"""

from __future__ import annotations

import bisect
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import shapely
from pyproj import CRS

from evalcore._typing import F64Array, IdArray
from evalcore.bootstrap import PartitionKey, ReplicateSums, RowDraws
from evalcore.engine.pairing import PAIR_ARRAYS, PRED_ARRAYS, REF_ARRAYS, PairResults
from evalcore.distributed import workdir as wd
from evalcore.distributed.reliability import PartitionMissingError
from evalcore.engine.sums import PartitionSummary
from evalcore.remote import file_sha256
from evalcore.rings import Rings
from evalcore.writers import atomic_path
from evalcore.layer import PreparedLayer
from evalcore.levels import UnitSums
from evalcore.pairtable import PairTable
from evalcore.quantities import Contributions
from evalcore.selection import Queries, SortedValues
from evalcore.stats import GroupSums

__all__ = [
    "TILE_REPLICATES",
    "key_name",
    "parse_key_name",
    "index_to_json",
    "index_from_json",
    "write_prepared_chunk",
    "read_partition",
    "read_source_wkb",
    "partition_files",
    "write_summary",
    "read_summary",
    "write_sums_input",
    "read_sums_input",
    "values_path",
    "write_sorted_values",
    "read_sorted_values",
    "write_queries",
    "read_queries",
    "write_table_part",
    "TableParts",
]


def key_name(key: PartitionKey) -> str:
    """File-system name of a partition key, e.g. ``32613_7_41``.

    Examples
    --------
    >>> key_name((32613, 7, -1))
    '32613_7_-1'
    """
    return f"{int(key[0])}_{int(key[1])}_{int(key[2])}"


def parse_key_name(name: str) -> PartitionKey:
    epsg, tx, ty = name.split("_")
    return int(epsg), int(tx), int(ty)


# The index codec: the prepare phase's index of partitions, written once and read on resume.


def index_to_json(index: dict) -> dict:
    """The run index (``RunIndex.layers``) as JSON values, for ``prepared/index.json``.

    Partition keys become their :func:`key_name`; a partition's strata counts become
    ``[name, n]`` pairs, since a stratum name can be None, which JSON keys cannot hold.
    """
    out = {}
    for role, entry in index.items():
        e = dict(entry)
        e["partitions"] = {
            key_name(k): {**p, "strata": [[name, n] for name, n in p["strata"].items()]}
            for k, p in entry["partitions"].items()
        }
        out[role] = e
    return out


def index_from_json(data: dict) -> dict:
    """The run index read back from :func:`index_to_json`'s JSON: keys, boxes and strata as they were."""
    out = {}
    for role, entry in data.items():
        e = dict(entry)
        e["partitions"] = {
            parse_key_name(k): {
                **p,
                "box": tuple(p["box"]),
                "reach_box": tuple(p["reach_box"]),
                "strata": {name: n for name, n in p["strata"]},
            }
            for k, p in entry["partitions"].items()
        }
        out[role] = e
    return out


def _geo_metadata(crs: CRS | None) -> bytes:
    column = {"encoding": "WKB", "geometry_types": ["Polygon", "MultiPolygon"]}
    if crs is not None:
        column["crs"] = crs.to_json_dict()
    return json.dumps({"version": "1.0.0", "primary_column": "geometry", "columns": {"geometry": column}}).encode()


def _labels_array(labels: pd.Index) -> pa.Array:
    try:
        return pa.array(labels.to_numpy())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed-type labels: keep them as text
        return pa.array([str(v) for v in labels])


GEOMETRY_COLUMNS = ("geometry", "geom_ea", "geom_utm")
"""The WKB columns of a prepared partition: source, equal-area and UTM geometry."""

BOX_COLUMNS = ("ea_minx", "ea_miny", "ea_maxx", "ea_maxy")
"""A prepared partition's candidate box columns (:func:`evalcore.boundary.candidate_boxes`
when the chunk was prepared): the halo reads' windows, and the boxes the pairs phase
selects tolerance candidates by, without decoding the source geometry they came from."""


_WKB_WRITE_OPTIONS = {
    "use_dictionary": ["label", "stratum"],
    "write_statistics": ["position", *BOX_COLUMNS],
    "compression": {name: "NONE" for name in GEOMETRY_COLUMNS},
}
"""Parquet options for prepared partitions. WKB neither compresses nor repeats: with
pyarrow's defaults (a dictionary attempted, min/max statistics of every blob, snappy)
reading the geometry columns back took about 7x longer (0.066 s against 0.0097 s for
12,000 predictions), and the pairs phase reads every partition and its halo."""


def write_prepared_chunk(
    directory: Path,
    layer: PreparedLayer,
    rows: np.ndarray,
    reach_m: F64Array,
    strata: np.ndarray | None,
    boxes: F64Array,
) -> Path:
    """Write some rows of a prepared layer as one GeoParquet file.

    Parameters
    ----------
    directory : Path
        The partition's directory; the file is named after the first position.
    layer : PreparedLayer
    rows : ndarray of int64
        Local rows to write.
    reach_m : ndarray of float64, shape (len(layer),)
        How far (equal-area CRS units) each row's box must grow to find every polygon
        of the other layer within the tolerance.
    strata : ndarray of object or None
        Stratum (str or None) of every row of ``layer``.
    boxes : ndarray of float64, shape (len(layer), 4)
        Equal-area box of every row (:func:`evalcore.boundary.candidate_boxes`).
    """
    bounds = boxes[rows]
    columns = {
        "position": pa.array(layer.positions[rows]),
        "label": _labels_array(layer.labels[rows]),
        "area_m2": pa.array(layer.area_m2[rows]),
        "lon": pa.array(layer.lon[rows]),
        "lat": pa.array(layer.lat[rows]),
        "utm_epsg": pa.array(layer.utm_epsg[rows]),
        "partition_x": pa.array(layer.partition_x[rows]),
        "partition_y": pa.array(layer.partition_y[rows]),
        "tile_x": pa.array(layer.tile_x[rows]),
        "tile_y": pa.array(layer.tile_y[rows]),
        "aoi": pa.array(layer.aoi[rows]),
        "annotated_fraction": pa.array(layer.annotated_fraction[rows]),
        "score": pa.array(layer.score[rows]),
        "class": pa.array(layer.class_value[rows].tolist() if layer.class_value is not None else [None] * len(rows), type=pa.string()),
        "perimeter_m": pa.array(layer.perimeter_m[rows]),
        **{name: pa.array(bounds[:, k]) for k, name in enumerate(BOX_COLUMNS)},
        "reach": pa.array(reach_m[rows]),
        "stratum": pa.array(strata[rows] if strata is not None else [None] * len(rows), type=pa.string()),
        "geom_ea": pa.array(shapely.to_wkb(layer.geoms_ea[rows]), type=pa.binary()),
        "geom_utm": _home_wkb(layer, rows),
        "geometry": pa.array(shapely.to_wkb(layer.geoms_source[rows]), type=pa.binary()),
    }
    table = pa.table(columns)
    table = table.replace_schema_metadata({b"geo": _geo_metadata(layer.crs)})
    target = wd.local(directory) / f"chunk-{int(layer.positions[rows[0]]):012d}.parquet"
    atomic_path(target, lambda tmp: pq.write_table(table, tmp, row_group_size=16_384, **_WKB_WRITE_OPTIONS))
    return wd.publish(target)


def _home_wkb(layer: PreparedLayer, rows: IdArray) -> pa.BinaryArray:
    """The rows' home-zone geometry as WKB: written from the layer's rings when it carries
    them (the bytes ``shapely.to_wkb`` writes, the source's types kept), else encoded by GEOS."""
    if layer.rings_utm is None:
        return pa.array(shapely.to_wkb(layer.geoms_utm[rows]), type=pa.binary())
    return layer.rings_utm.take(rows).to_wkb(shapely.get_type_id(layer.geoms_source[rows]))


def partition_files(workdir: Path, layer_name: str, key: PartitionKey) -> list[Path]:
    return wd.files(Path(workdir) / "prepared" / layer_name / key_name(key), "chunk-*.parquet")


def _geometries(table: pa.Table, column: str, decoded: tuple[str, ...]) -> np.ndarray:
    """A geometry column decoded, or None for each row when it is not among ``decoded`` (or not read)."""
    if column not in decoded or column not in table.column_names:
        return np.full(table.num_rows, None, dtype=object)
    return np.asarray(shapely.from_wkb(table[column].to_numpy(zero_copy_only=False)), dtype=object)


def _in_window(boxes: pa.Table, window: tuple[float, float, float, float], grow_by_reach: bool) -> np.ndarray:
    """Rows whose equal-area box (grown by its reach when ``grow_by_reach``) intersects ``window``.

    The rule of a halo read (:func:`read_partition`).
    """
    minx, miny, maxx, maxy = window
    grow = boxes["reach"].to_numpy() if grow_by_reach else 0.0
    return (
        (boxes["ea_maxx"].to_numpy() + grow >= minx)
        & (boxes["ea_minx"].to_numpy() - grow <= maxx)
        & (boxes["ea_maxy"].to_numpy() + grow >= miny)
        & (boxes["ea_miny"].to_numpy() - grow <= maxy)
    )


def _fetched_files(workdir: Path, layer_name: str, key: PartitionKey) -> list[Path]:
    files = partition_files(workdir, layer_name, key)
    if not files:
        raise FileNotFoundError(f"partition {key_name(key)} of the {layer_name} layer has no prepared rows in {workdir}")
    return [wd.fetch(f) for f in files]


def _partition_table(files: list[Path], columns: list[str], window: tuple[float, float, float, float] | None,
                     grow_by_reach: bool) -> pa.Table:
    """Some columns of a partition's chunk files, rows in position order (those in ``window`` only, when given).

    The files are memory-mapped (they are local, and never rewritten in place: a write
    is a rename), which saves the copy of every byte into a read buffer: a prepared
    partition of 10,000 predictions read in 3.6 ms instead of 5.6 ms.
    """
    tables = []
    for path in files:
        if window is None:
            tables.append(pq.read_table(path, columns=columns, memory_map=True))
            continue
        # A halo read: the boxes first, the geometries only when some row is in the window.
        parquet = pq.ParquetFile(path, memory_map=True)
        keep = _in_window(parquet.read(columns=[*BOX_COLUMNS, "reach"]), window, grow_by_reach)
        if keep.any():
            tables.append(parquet.read(columns=columns).filter(pa.array(keep)))
    if not tables:  # no row of this partition reaches the window
        tables.append(pq.read_schema(files[0]).empty_table().select(columns))
    table = pa.concat_tables(tables)
    positions = table["position"].to_numpy()
    # The chunk files (named by their first position, taken in name order) hold disjoint
    # ranges of rows in position order, so the rows almost always come in order already;
    # reordering a table copies every column, geometry included.
    if len(positions) > 1 and not np.all(positions[1:] > positions[:-1]):
        table = table.take(pa.array(np.argsort(positions, kind="stable")))
    return table


def read_source_wkb(workdir: Path, layer_name: str, key: PartitionKey) -> tuple[np.ndarray, pa.ChunkedArray]:
    """A partition's positions and its rows' source geometries as the WKB they were stored as.

    For writing them out again (:func:`evalcore.writers.write_geoparquet_wkb`) without
    decoding them; rows in position order, as :func:`read_partition` gives them.
    """
    table = _partition_table(_fetched_files(workdir, layer_name, key), ["position", "geometry"], None, False)
    return table["position"].to_numpy().astype(np.int64), table["geometry"]


def read_partition(
    workdir: Path,
    layer_name: str,
    key: PartitionKey,
    *,
    crs: CRS | None,
    equal_area_crs: CRS,
    partition_size_m: float,
    window: tuple[float, float, float, float] | None = None,
    grow_by_reach: bool = False,
    geometries: tuple[str, ...] = GEOMETRY_COLUMNS,
    return_wkb: bool = False,
    utm_as_rings: bool = False,
    ea_rings: bool = False,
) -> tuple[PreparedLayer, np.ndarray, F64Array] | tuple[PreparedLayer, np.ndarray, F64Array, pa.ChunkedArray]:
    """Read a partition's prepared rows back, optionally only those in a window.

    Parameters
    ----------
    window : (minx, miny, maxx, maxy), optional
        Keep only rows whose equal-area box (grown by its ``reach`` when
        ``grow_by_reach``) intersects this box.
    geometries : tuple of str
        Which of :data:`GEOMETRY_COLUMNS` to read and decode; the others are left
        out of the read and come back as arrays of None (the sums phase decodes none).
        The layer carries the stored candidate boxes (``candidate_box``) whatever is decoded.
    return_wkb : bool
        Also return the source geometry as it is stored (its WKB, undecoded, in the
        layer's row order): what the field table's part is written from
        (:func:`evalcore.writers.write_geoparquet_wkb`).
    utm_as_rings : bool
        Read the home-zone geometry (when among ``geometries``) as flat rings
        (``layer.rings_utm``, :meth:`evalcore.rings.Rings.from_wkb`) instead of shapely
        geometries: what the boundary kernels take, without building a geometry only to
        flatten it again (``geoms_utm`` then holds None).
    ea_rings : bool
        Also read the equal-area geometry (when among ``geometries``) as flat rings
        (``layer.rings_ea``), beside its shapely geometries.

    Returns
    -------
    layer : PreparedLayer
        Rows in position order (counts fields are 0: they live in the run index).
    strata : ndarray of object
        Stratum of each row (None: missing).
    reach : ndarray of float64
    wkb : pyarrow.ChunkedArray
        With ``return_wkb`` only.
    """
    files = _fetched_files(workdir, layer_name, key)
    columns = [c for c in pq.read_schema(files[0]).names if c not in GEOMETRY_COLUMNS or c in geometries or (return_wkb and c == "geometry")]
    table = _partition_table(files, columns, window, grow_by_reach)
    layer = PreparedLayer(
        name=layer_name,
        positions=table["position"].to_numpy().astype(np.int64),
        labels=pd.Index(table["label"].to_pandas()),
        crs=crs,
        geoms_source=_geometries(table, "geometry", geometries),
        geoms_ea=_geometries(table, "geom_ea", geometries),
        area_m2=table["area_m2"].to_numpy().astype(np.float64),
        lon=table["lon"].to_numpy().astype(np.float64),
        lat=table["lat"].to_numpy().astype(np.float64),
        utm_epsg=table["utm_epsg"].to_numpy().astype(np.int64),
        geoms_utm=_geometries(table, "geom_utm", () if utm_as_rings else geometries),
        perimeter_m=table["perimeter_m"].to_numpy().astype(np.float64),
        partition_x=table["partition_x"].to_numpy().astype(np.int64),
        partition_y=table["partition_y"].to_numpy().astype(np.int64),
        tile_x=table["tile_x"].to_numpy().astype(np.int64),
        tile_y=table["tile_y"].to_numpy().astype(np.int64),
        aoi=table["aoi"].to_numpy().astype(np.int64),
        annotated_fraction=table["annotated_fraction"].to_numpy().astype(np.float64),
        score=table["score"].to_numpy().astype(np.float64),
        class_value=np.asarray(table["class"].to_pylist(), dtype=object) if "class" in table.column_names else None,
        n_input=0,
        n_dropped=0,
        n_repaired=0,
        equal_area_crs=equal_area_crs,
        partition_size_m=partition_size_m,
        candidate_box=np.stack([table[c].to_numpy().astype(np.float64) for c in BOX_COLUMNS], axis=1).reshape(-1, 4),
        rings_utm=Rings.from_wkb(table["geom_utm"]) if utm_as_rings and "geom_utm" in geometries else None,
        rings_ea=Rings.from_wkb(table["geom_ea"]) if ea_rings and "geom_ea" in geometries else None,
    )
    strata = np.asarray(table["stratum"].to_pylist(), dtype=object)
    reach = table["reach"].to_numpy().astype(np.float64)
    return (layer, strata, reach, table["geometry"]) if return_wkb else (layer, strata, reach)


_ARRAYS_MAGIC = b"\x93EVALCORE-ARRAYS 1\n"
_NAME_LENGTH = struct.Struct("<H")


def write_summary(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write named plain arrays (no pickle) to an arrays file, atomically.

    The file is a magic line, then for each array its name (a 2-byte little-endian length
    and UTF-8) and the array in ``.npy`` format (its header, then its bytes). Not an
    ``.npz``: a zip member's CRC-32 and the copies of numpy's zip writer and reader took
    the workers about 48 s of a 2M-field run (py-spy, 2026-12-06), the bootstrap's weights
    files being 2 GB a pass; these are written and read at the speed of the disk cache.
    A file cut short is refused by :func:`read_summary`; a partition's resumable outputs
    are checked by their SHA-256 besides (:func:`write_done_record`).
    """

    def _write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            handle.write(_ARRAYS_MAGIC)
            for name, value in arrays.items():
                encoded = name.encode()
                handle.write(_NAME_LENGTH.pack(len(encoded)) + encoded)
                np.lib.format.write_array(handle, np.asanyarray(value), allow_pickle=False)

    atomic_path(wd.local(path), _write)
    return wd.publish(path)


@dataclass(frozen=True, slots=True)
class _ArrayEntry:
    """Where one array of an arrays file is: its ``.npy`` magic (``offset``), its bytes
    (``data_start``), and its header."""

    offset: int
    data_start: int
    shape: tuple
    fortran: bool
    dtype: np.dtype


def _array_index(handle: BinaryIO, path: object) -> dict[str, _ArrayEntry]:
    """Every array of an arrays file by name, in the file's order, from its headers alone
    (each array's bytes are skipped over, not read)."""
    if handle.read(len(_ARRAYS_MAGIC)) != _ARRAYS_MAGIC:
        raise ValueError(f"{path} is not an evalcore arrays file (its first bytes are not {_ARRAYS_MAGIC!r})")
    index: dict[str, _ArrayEntry] = {}
    while length := handle.read(_NAME_LENGTH.size):
        if len(length) < _NAME_LENGTH.size:
            raise EOFError(f"{path} ends inside an array's name")
        (n,) = _NAME_LENGTH.unpack(length)
        name = handle.read(n).decode()
        offset = handle.tell()
        version = np.lib.format.read_magic(handle)
        header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if header is None:
            raise ValueError(f"{path}: its array {name!r} is in .npy format {version}, not 1.0 or 2.0")
        shape, fortran, dtype = header(handle)
        index[name] = _ArrayEntry(offset, handle.tell(), shape, fortran, dtype)
        handle.seek(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, os.SEEK_CUR)
    return index


def read_summary(path: Path, names: tuple[str, ...] | None = None, skip: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The arrays of an arrays file (:func:`write_summary`): all of them, or only ``names``,
    but those in ``skip`` (the others are skipped over, not read).

    Raises
    ------
    KeyError
        A name asked for is not in the file.
    ValueError, EOFError
        The file is not an arrays file, or is cut short.
    """
    with open(wd.fetch(path), "rb") as handle:
        index = _array_index(handle, path)
        out: dict[str, np.ndarray] = {}
        for name in (index if names is None else names):
            if name in skip:
                continue
            if name not in index:
                raise KeyError(f"{name!r} is not an array of {path}")
            handle.seek(index[name].offset)
            out[name] = np.lib.format.read_array(handle, allow_pickle=False)
    return out


# ----------------------------------------------------------------------------- resume
# A partition's output counts as done only when its record names the run signature
# (inputs' checksums and every parameter) and the SHA-256 of each file it wrote still
# matches: presence alone proves nothing after an interrupted or changed run.


def write_done_record(
    record_path: Path, signature: str, files: list[Path], base: Path | None = None, checksums: dict[str, str] | None = None
) -> Path:
    """Record that ``files`` are the complete output of a step for ``signature``.

    File names are stored relative to ``base`` (default: the record's directory).
    ``checksums`` maps ``str(path)`` to a SHA-256 already computed by the worker that
    wrote the file (in parallel, while the file is still in the page cache); the others
    are computed here.
    """
    # Paths another process wrote (a worker's, in a store work directory's mirror) are this
    # process's paths of the same objects (wd.local); base is kept relative to the record,
    # so a record read by another process, or in a moved work directory, finds its files.
    record_path = wd.local(record_path)
    base = record_path.parent if base is None else wd.local(base)
    known = {str(wd.local(k)): v for k, v in (checksums or {}).items()}
    files = [wd.local(f) for f in files]
    record = {
        "signature": signature,
        "base": os.path.relpath(base, record_path.parent),
        "files": {os.path.relpath(f, base): known.get(str(f)) or file_sha256(f) for f in files},
    }
    if wd.is_remote(record_path):
        # On a store the files' version tags prove them unchanged without downloading them.
        record["etags"] = {os.path.relpath(f, base): wd.etag(f) for f in files if wd.is_remote(f)}
    text = json.dumps(record, indent=1)
    atomic_path(record_path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return wd.publish(record_path)  # last: the files it names are on the store already


def done_record_valid(record_path: Path, signature: str) -> bool:
    """True when the record exists, names ``signature`` and every file still has its checksum."""
    try:
        record = json.loads(wd.fetch(record_path, fresh=True).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if record.get("signature") != signature:
        return False
    base = wd.local(record_path).parent / record.get("base", ".")
    etags = record.get("etags")
    for name, sha in record.get("files", {}).items():
        path = Path(os.path.normpath(base / name))
        if etags is not None and etags.get(name) is not None:
            if wd.etag(path) != etags[name]:
                return False
        elif not path.is_file() or file_sha256(path) != sha:
            return False
    return True


_LABEL_ARRAYS = ("pred_label_of_pair", "ref_label", "pred_label")
_TEXT_ARRAYS = ("ref_class", "pred_class")
"""Arrays of str or None (classes, SPEC 6.10)."""


def write_pair_results(directory: Path, key: PartitionKey, results: object, signature: str) -> None:
    """Persist a partition's :class:`~evalcore.engine.pairing.PairResults` as three Parquet tables
    (per pair, per reference row, per prediction row)."""
    name = key_name(key)
    directory = wd.local(directory)
    p = results.pairs

    def column(array_name: str) -> pa.Array:
        values = getattr(results, array_name)
        if array_name in _TEXT_ARRAYS:
            return pa.array(list(values), type=pa.string())
        return _labels_array(pd.Index(values)) if array_name in _LABEL_ARRAYS else pa.array(values)

    pairs = pa.table(
        {"ref_pos": p.ref_pos, "pred_pos": p.pred_pos, "inter_m2": p.inter_m2, "iou": p.iou, **{c: column(c) for c in PAIR_ARRAYS}}
    )
    refs = pa.table({c: column(c) for c in REF_ARRAYS})
    preds = pa.table({c: column(c) for c in PRED_ARRAYS})
    files = []
    for part, table in (("pairs", pairs), ("refs", refs), ("preds", preds)):
        # Uncompressed: three phases read every partition's tables back (1.9 ms against
        # 3.2 ms for the 31,254 pairs of a 2M run's largest partition, memory-mapped).
        atomic_path(directory / f"{name}.{part}.parquet", lambda tmp, t=table: pq.write_table(t, tmp, compression="NONE"))
        files.append(wd.publish(directory / f"{name}.{part}.parquet"))
    write_done_record(directory / f"{name}.done.json", signature, files)


def _objects(values: pa.ChunkedArray) -> np.ndarray:
    """A column as an object array of Python values, None where null (``to_pylist``'s values).

    Strings, and integers without nulls, by numpy's conversion (strings and None, Python
    ints): a half or a tenth of ``to_pylist``'s time; anything else by ``to_pylist``.
    """
    kind = values.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or (pa.types.is_integer(kind) and values.null_count == 0):
        return values.to_numpy(zero_copy_only=False).astype(object)
    return np.asarray(values.to_pylist(), dtype=object)


def read_pair_results(directory: Path, key: PartitionKey, signature: str) -> object | None:
    """A partition's persisted pairs phase output, or None when it is absent or not valid."""
    name = key_name(key)
    if not done_record_valid(directory / f"{name}.done.json", signature):
        return None
    tables = {part: pq.read_table(wd.fetch(Path(directory) / f"{name}.{part}.parquet"), memory_map=True) for part in ("pairs", "refs", "preds")}

    def col(table: pa.Table, column: str, dtype: type | None = None) -> np.ndarray:
        if column in _LABEL_ARRAYS or column in _TEXT_ARRAYS:
            return _objects(table[column])
        values = table[column].to_numpy()
        return values.astype(dtype) if dtype is not None else values

    pairs = tables["pairs"]
    arrays = {c: col(pairs, c) for c in PAIR_ARRAYS}
    arrays |= {c: col(tables["refs"], c) for c in REF_ARRAYS}
    arrays |= {c: col(tables["preds"], c) for c in PRED_ARRAYS}
    return PairResults(
        pairs=PairTable(col(pairs, "ref_pos", np.int64), col(pairs, "pred_pos", np.int64), col(pairs, "inter_m2", np.float64), col(pairs, "iou", np.float64)),
        **arrays,
    )


TILE_REPLICATES = "tiles_replicates"
"""The tiles' bootstrap replicate sums in a partition's sums file (``<level>_replicates`` of :func:`summary_to_arrays`)."""


def summary_to_arrays(summary: object) -> dict[str, np.ndarray]:
    """A :class:`~evalcore.engine.sums.PartitionSummary` as plain arrays for :func:`write_summary`.

    The column names travel with the sums, so a merge refuses sums made with other
    options (or another version's families) instead of adding the wrong columns.
    """
    s = summary
    arrays = {
        "key": np.asarray(s.key, dtype=np.int64),
        "n_ref": np.asarray(s.n_ref),
        "n_pred": np.asarray(s.n_pred),
        "columns": np.asarray(s.sums.columns, dtype=str),
        "max_columns": np.asarray(s.sums.max_columns, dtype=str),
        "sum_digits": s.sums.digits,
        "maxima": s.sums.maxima,
        "n_ungrouped": np.asarray(s.n_ungrouped, dtype=np.int64),
    }
    if s.replicates is not None:
        arrays["replicates"] = s.replicates.groups
    return arrays | _unit_arrays(s.tiles, s.aois)


def _unit_arrays(tiles: UnitSums, aois: UnitSums) -> dict[str, np.ndarray]:
    """The arrays of tile and AOI sums, ``tiles_keys`` ... ``aois_replicates``."""
    arrays = {}
    for level, units in (("tiles", tiles), ("aois", aois)):
        arrays[f"{level}_keys"] = units.keys
        arrays[f"{level}_digits"] = units.digits
        arrays[f"{level}_columns"] = np.asarray(units.columns, dtype=str)
        arrays[f"{level}_replicate_columns"] = np.asarray(units.replicate_columns, dtype=str)
        if units.replicates is not None:
            arrays[f"{level}_replicates"] = units.replicates
    return arrays


def _unit_sums_of(a: dict[str, np.ndarray], level: str) -> UnitSums:
    """The inverse of :func:`_unit_arrays` for one level."""
    names = tuple(str(c) for c in a[f"{level}_columns"]), tuple(str(c) for c in a[f"{level}_replicate_columns"])
    return UnitSums(a[f"{level}_keys"], a[f"{level}_digits"], a.get(f"{level}_replicates"), *names)


def write_unit_sums(path: Path, tiles: UnitSums, aois: UnitSums) -> Path:
    """Tile and AOI sums (the homeless predictions') as an arrays file, atomically: the merge
    reads them when it adds them (:func:`iter_unit_sums`), so the client does not hold them
    from the resolve on. Arrays are stored in C order, which the reader streams."""
    return write_summary(path, {name: np.ascontiguousarray(a) for name, a in _unit_arrays(tiles, aois).items()})


def _npy_rows(handle: BinaryIO, path: object, name: str, entry: _ArrayEntry, rows: int) -> Iterator[np.ndarray]:
    """The array ``name`` of an arrays file (C order, as :func:`write_unit_sums` stores it),
    ``rows`` leading rows at a time, read from ``handle`` (at the array's bytes) as it streams."""
    shape, dtype = entry.shape, entry.dtype
    if entry.fortran or dtype.hasobject or not shape:
        raise PartitionMissingError(f"{path}: its array {name!r} is not a C-ordered numeric array with rows")
    row_shape = tuple(shape[1:])
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    if shape[0] == 0:
        yield np.empty(shape, dtype)
    for start in range(0, shape[0], rows):
        n = min(rows, shape[0] - start)
        data = handle.read(n * row_bytes)
        if len(data) != n * row_bytes:
            raise PartitionMissingError(f"{path}: its array {name!r} ends early (row {start} of {shape[0]})")
        yield np.frombuffer(data, dtype=dtype).reshape((n,) + row_shape).copy()


def iter_unit_sums(path: Path, level: str, units: int = 256) -> Iterator[UnitSums]:
    """The tile (``level`` "tiles") or AOI sums of :func:`write_unit_sums`'s file, ``units``
    units at a time, in the file's order: the merge adds them block by block, so a
    country's replicates (up to every tile x 1000 resamples x 4 columns: the file was
    85.7 MB in a 2M-field run of 2,606 tiles, about what all of them take) are never held
    a second time."""
    with open(wd.fetch(path), "rb") as handle:
        arrays = _array_index(handle, path)

        def small(name: str) -> np.ndarray:
            if f"{level}_{name}" not in arrays:
                raise PartitionMissingError(f"{path}: it has no array {level}_{name!r}")
            handle.seek(arrays[f"{level}_{name}"].offset)
            return np.lib.format.read_array(handle, allow_pickle=False)

        # Everything but the replicates: a few numbers per unit.
        head = _unit_sums_of({f"{level}_{name}": small(name) for name in ("keys", "digits", "columns", "replicate_columns")}, level)
        if f"{level}_replicates" not in arrays:
            yield head
            return
        replicates = arrays[f"{level}_replicates"]
        handle.seek(replicates.data_start)
        start = 0
        for reps in _npy_rows(handle, path, f"{level}_replicates", replicates, units):
            n = len(reps)
            yield UnitSums(head.keys[start : start + n], head.digits[start : start + n], reps, head.columns, head.replicate_columns)
            start += n
        if start != len(head.keys):
            raise PartitionMissingError(f"{path}: {len(head.keys)} {level} but replicates for {start}")


def summary_from_arrays(a: dict[str, np.ndarray]) -> object:
    """The inverse of :func:`summary_to_arrays`, without the sorted values (they stay in
    their own file, :func:`read_sorted_values`)."""
    sums = GroupSums(tuple(str(c) for c in a["columns"]), tuple(str(c) for c in a["max_columns"]), a["sum_digits"], a["maxima"])
    return PartitionSummary(
        key=tuple(int(v) for v in a["key"]),
        n_ref=int(a["n_ref"]),
        n_pred=int(a["n_pred"]),
        sums=sums,
        replicates=ReplicateSums(a["replicates"]) if "replicates" in a else None,
        values=None,
        n_ungrouped=a["n_ungrouped"],
        tiles=_unit_sums_of(a, "tiles"),
        aois=_unit_sums_of(a, "aois"),
    )


def values_path(sums_path: Path) -> Path:
    """The sorted values' file beside a partition's sums output (``<key>.values.arrays``)."""
    return Path(sums_path).with_suffix(".values.arrays")


def write_sorted_values(path: Path, values: SortedValues) -> Path:
    """A partition's :class:`~evalcore.selection.SortedValues` as an arrays file (:func:`write_summary`), atomically."""
    return write_summary(path, {
        "columns": np.asarray(values.columns, dtype=str),
        "n_groups": np.asarray(values.n_groups, dtype=np.int64),
        "offsets": values.offsets,
        "values": values.values,
    })


def read_sorted_values(path: Path) -> SortedValues:
    """The inverse of :func:`write_sorted_values`."""
    a = read_summary(path)
    return SortedValues(tuple(str(c) for c in a["columns"]), int(a["n_groups"]), a["offsets"], a["values"])


def write_queries(path: Path, queries: Queries) -> Path:
    """One selection round's :class:`~evalcore.selection.Queries`, for every partition's task to read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_summary(path, {
        "series": queries.series, "lo": queries.lo, "hi": queries.hi, "has_lo": queries.has_lo, "has_hi": queries.has_hi,
        "force": queries.force, "sizes": np.asarray([queries.samples, queries.limit], dtype=np.int64),
    })


def read_queries(path: Path) -> Queries:
    """The inverse of :func:`write_queries`."""
    a = read_summary(path)
    samples, limit = (int(v) for v in a["sizes"])
    return Queries(a["series"], a["lo"], a["hi"], a["has_lo"], a["has_hi"], a["force"], samples, limit)


def write_sums_input(path: Path, pair_values: dict[str, np.ndarray], contributions: object, draws: object | None) -> Path:
    """What the resolve phase hands one partition's sums task, as an arrays file (:func:`write_summary`).

    These travel through the work directory, not the task graph: in the graph they sat
    in the scheduler's memory (the client's process on the embedded cluster) until every
    sums task had run, about 0.5 KiB per reference field.

    Parameters
    ----------
    pair_values : dict of str to ndarray
        The families' per-pair values of the partition's pairs.
    contributions : evalcore.quantities.Contributions
    draws : evalcore.bootstrap.RowDraws, optional
    """
    arrays = {f"pv__{name}": np.asarray(v) for name, v in pair_values.items()}
    arrays["c__ref_pos"] = contributions.ref_pos
    arrays["c__columns"] = np.asarray(contributions.columns, dtype=str)
    arrays["c__values"] = contributions.values
    if draws is not None:
        arrays["d__unit"] = np.asarray([draws.unit], dtype=str)
        arrays["d__sizes"] = np.asarray([draws.n_replicates, draws.seed], dtype=np.int64)
        if draws.unit == "field":
            keys = sorted(draws.groups)
            arrays["d__pools"], arrays["d__ranks"], arrays["d__tiles"] = draws.pools, draws.ranks, draws.tiles
            arrays["d__group_keys"] = np.asarray([[pool, *tile] for pool, tile in keys], dtype=np.int64).reshape(len(keys), 4)
            arrays["d__group_sizes"] = np.asarray([draws.groups[k][0] for k in keys], dtype=np.int64)
            arrays["d__group_counts"] = np.asarray([draws.groups[k][1] for k in keys], dtype=np.int64).reshape(len(keys), draws.n_replicates)
        else:
            units = sorted(draws.unit_counts)
            arrays["d__units"] = draws.units
            arrays["d__unit_ids"] = np.asarray(units, dtype=np.int64)
            arrays["d__unit_counts"] = np.asarray([draws.unit_counts[u] for u in units], dtype=np.float64).reshape(len(units), draws.n_replicates)
    return write_summary(path, arrays)


def read_sums_input(path: Path) -> tuple[dict[str, np.ndarray], object, object | None]:
    """The inverse of :func:`write_sums_input`: ``(pair_values, contributions, draws)``."""
    a = read_summary(path)
    pair_values = {name[4:]: v for name, v in a.items() if name.startswith("pv__")}
    contributions = Contributions(a["c__ref_pos"], tuple(str(c) for c in a["c__columns"]), a["c__values"])
    draws = None
    if "d__unit" in a:
        unit = str(a["d__unit"][0])
        n_replicates, seed = (int(v) for v in a["d__sizes"])
        if unit == "field":
            groups = {
                (int(k[0]), (int(k[1]), int(k[2]), int(k[3]))): (int(size), counts)
                for k, size, counts in zip(a["d__group_keys"], a["d__group_sizes"], a["d__group_counts"])
            }
            draws = RowDraws(unit, n_replicates, seed, pools=a["d__pools"], ranks=a["d__ranks"], tiles=a["d__tiles"], groups=groups)
        else:
            unit_counts = {int(u): c for u, c in zip(a["d__unit_ids"], a["d__unit_counts"])}
            draws = RowDraws(unit, n_replicates, seed, units=a["d__units"], unit_counts=unit_counts)
    return pair_values, contributions, draws


def write_labels(directory: Path, key: PartitionKey, labels: object, pred_pos: np.ndarray, signature: str) -> Path:
    """A partition's component labels (:class:`~evalcore.engine.components.PartitionLabels`) and its own
    predictions' positions, with a done record."""
    path = directory / f"{key_name(key)}.arrays"
    write_summary(path, {"pair_label": labels.pair_label, "pred_label": labels.pred_label, "pred_pos": pred_pos,
                         "label_min_ref": labels.label_min_ref})
    write_done_record(path.with_suffix(".done.json"), signature, [path])
    return path


def ref_positions_path(workdir: Path, key: PartitionKey) -> Path:
    """Where a partition's reference fields' (pool, reporting tile, position) are written for a field bootstrap."""
    return workdir / "resolve" / "positions" / f"{key_name(key)}.arrays"


def write_ref_positions(workdir: Path, key: PartitionKey, pos: np.ndarray, pools: np.ndarray, tiles: np.ndarray,
                        signature: str) -> Path:
    """A partition's reference fields' positions, pools and reporting tiles (n, 3), with a done record:
    the other partitions holding fields of the same (pool, tile) groups rank theirs among them."""
    path = ref_positions_path(workdir, key)
    write_summary(path, {"pos": np.asarray(pos, np.int64), "pool": np.asarray(pools, np.int64),
                         "tile": np.asarray(tiles, np.int64).reshape(-1, 3)})
    write_done_record(path.with_suffix(".done.json"), signature, [path])
    return path


def read_ref_positions(workdir: Path, key: PartitionKey, signature: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(positions, pools, tiles)`` of :func:`write_ref_positions`; a file missing, changed or of
    another run raises :class:`PartitionMissingError` naming the partition."""
    path = ref_positions_path(workdir, key)
    if not done_record_valid(path.with_suffix(".done.json"), signature):
        raise PartitionMissingError(
            f"partition {key_name(key)}: its reference positions (field bootstrap) are missing or do not match "
            f"their checksums in {path.parent}; rerun to recompute them."
        )
    a = read_summary(path)
    return a["pos"], a["pool"], a["tile"]


GROUP_SHARD_TILES = 1024
"""Reporting tiles per file of a pool's counts (4 MiB of int32 at 1000 replicates). A sums or
score-weights task reads and checks only the files holding its own tiles: with one file per
pool every task read the whole pool, whose tiles grow with the country's extent."""


def group_draws_path(workdir: Path, pool: int) -> Path:
    """The directory of a field bootstrap pool's per-replicate counts of its reporting tiles:
    ``index.arrays`` (each file's first tile) and ``tiles-<i>.arrays``, each with a done record."""
    return workdir / "resolve" / "groups" / str(int(pool))


def count_dtype(total: int) -> np.dtype:
    """int32 when no count can exceed it (a count is at most the pool's size), else int64."""
    return np.dtype(np.int32) if int(total) <= np.iinfo(np.int32).max else np.dtype(np.int64)


def write_group_draws(workdir: Path, pool: int, tiles: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
                      signature: str, shard_tiles: int | None = None) -> Path:
    """A pool's reporting tiles (n, 3, sorted), their sizes (n,) and each replicate's draws per
    tile (n_replicates, n), in files of ``shard_tiles`` consecutive tiles
    (:data:`GROUP_SHARD_TILES`), each with a done record; the index, naming each file's first
    tile, is written last. The sums tasks read their groups' columns from the files holding them.

    The counts are stored as int32 when the pool's size allows it (half the bytes).
    Returns the pool's directory."""
    directory = group_draws_path(workdir, pool)
    step = GROUP_SHARD_TILES if shard_tiles is None else int(shard_tiles)
    tiles = np.asarray(tiles, np.int64).reshape(-1, 3)
    sizes = np.asarray(sizes, np.int64)
    counts = np.asarray(counts).astype(count_dtype(sizes.sum()), copy=False)
    starts = range(0, len(tiles), step)
    for i, start in enumerate(starts):
        path = directory / f"tiles-{i}.arrays"
        write_summary(path, {"tile": tiles[start:start + step], "size": sizes[start:start + step],
                             "counts": np.ascontiguousarray(counts[:, start:start + step])})
        write_done_record(path.with_suffix(".done.json"), signature, [path])
    index = directory / "index.arrays"
    write_summary(index, {"first_tile": tiles[list(starts)].reshape(-1, 3), "n_replicates": np.int64(counts.shape[0])})
    write_done_record(index.with_suffix(".done.json"), signature, [index])
    return directory


def read_group_draws(workdir: Path, pool: int, signature: str,
                     tiles: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(tiles, sizes, counts)`` of :func:`write_group_draws`'s files that hold ``tiles``
    (only those files are read), or None when the pool's index or one of those files is
    missing, changed or of another run (the caller names the partition that needed it).
    A tile the pool does not hold is absent from what is returned."""
    directory = group_draws_path(workdir, pool)
    index = directory / "index.arrays"
    if not done_record_valid(index.with_suffix(".done.json"), signature):
        return None
    a = read_summary(index)
    first = [tuple(t) for t in a["first_tile"].tolist()]
    wanted = sorted({max(bisect.bisect_right(first, tuple(t)) - 1, 0) for t in tiles}) if first else []
    parts = []
    for i in wanted:
        path = directory / f"tiles-{i}.arrays"
        if not done_record_valid(path.with_suffix(".done.json"), signature):
            return None
        parts.append(read_summary(path))
    if not parts:
        return np.empty((0, 3), np.int64), np.empty(0, np.int64), np.empty((int(a["n_replicates"]), 0), np.int32)
    return (np.concatenate([p["tile"] for p in parts]), np.concatenate([p["size"] for p in parts]),
            np.concatenate([p["counts"] for p in parts], axis=1))


def read_labels(directory: Path, key: PartitionKey, signature: str, own: bool = False) -> tuple | None:
    """``(pair_label, pred_label)`` of :func:`write_labels` (``own``: ``(pred_pos, pred_label,
    label_min_ref)``), or None when absent or not valid."""
    path = directory / f"{key_name(key)}.arrays"
    if not done_record_valid(path.with_suffix(".done.json"), signature):
        return None
    a = read_summary(path)
    return (a["pred_pos"], a["pred_label"], a["label_min_ref"]) if own else (a["pair_label"], a["pred_label"])


def write_share(path: Path, pair_ref_pos: np.ndarray, pair_pred_pos: np.ndarray, pair_values: dict[str, np.ndarray],
                contributions: object) -> Path:
    """What one partition's resolve decided for another partition's pairs and fields (or its own).

    Parameters
    ----------
    pair_ref_pos, pair_pred_pos : ndarray of int64
        The pairs, by (reference, prediction) position.
    pair_values : dict of str to ndarray
        Their per-pair values.
    contributions : evalcore.quantities.Contributions
        What the predictions add to the partition's reference fields.
    """
    arrays = {f"pv__{name}": np.asarray(v) for name, v in pair_values.items()}
    arrays |= {"p__ref_pos": pair_ref_pos, "p__pred_pos": pair_pred_pos, "c__ref_pos": contributions.ref_pos,
               "c__columns": np.asarray(contributions.columns, dtype=str), "c__values": contributions.values}
    return write_summary(path, arrays)


def read_shares(paths: list[Path], pairs: PairTable, template: tuple[dict[str, np.ndarray], object]) -> tuple[dict[str, np.ndarray], object]:
    """A partition's per-pair values and contributions, assembled from the shares its resolves wrote.

    Parameters
    ----------
    paths : list of path
        The :func:`write_share` files addressed to the partition.
    pairs : PairTable
        The partition's pairs (its pairs phase output): the values come back in their order.
    template : (pair_values, contributions)
        The names and dtypes of an empty resolve (what a partition without shares gets).

    Raises
    ------
    PartitionMissingError
        When a pair of the partition has no value in any share.
    """
    empty_values, empty_contributions = template
    columns = empty_contributions.columns
    shares = [read_summary(path) for path in paths]
    # Each value's dtype is the resolves' (an empty resolve's only when there is no share).
    dtypes = {name: (shares[0].get(f"pv__{name}", v) if shares else v).dtype for name, v in empty_values.items()}
    values = {name: np.zeros(len(pairs), dtype=dtype) for name, dtype in dtypes.items()}
    covered = np.zeros(len(pairs), dtype=bool)
    c_pos, c_values = [empty_contributions.ref_pos], [empty_contributions.values]
    for path, a in zip(paths, shares):
        names = {n[4:] for n in a if n.startswith("pv__")}
        if tuple(str(c) for c in a["c__columns"]) != columns or names != set(values) or any(a[f"pv__{n}"].dtype != dtypes[n] for n in names):
            raise PartitionMissingError(f"{path}: its columns are not this run's; rerun to recompute it.")
        rows = _pair_rows(pairs, a["p__ref_pos"], a["p__pred_pos"], path)
        covered[rows] = True
        for name in values:
            values[name][rows] = a[f"pv__{name}"]
        c_pos.append(a["c__ref_pos"])
        c_values.append(a["c__values"].reshape(len(a["c__ref_pos"]), len(columns)))
    if not covered.all():
        raise PartitionMissingError(f"{int((~covered).sum())} of its {len(pairs)} pairs have no resolve output")
    ref_pos = np.concatenate(c_pos)
    order = np.argsort(ref_pos, kind="stable")
    if len(order) > 1 and (np.diff(ref_pos[order]) == 0).any():
        raise PartitionMissingError("a reference field got contributions from two resolves")
    return values, Contributions(ref_pos[order], columns, np.concatenate(c_values)[order])


_PAIR_KEY = 2**31
"""Positions are below this: ``ref_pos * _PAIR_KEY + pred_pos`` is one int64 per pair."""


def _pair_rows(pairs: PairTable, ref_pos: np.ndarray, pred_pos: np.ndarray, path: Path) -> np.ndarray:
    """Rows of ``pairs`` holding the given (reference, prediction) pairs."""
    if len(pairs) and max(int(pairs.ref_pos.max()), int(pairs.pred_pos.max())) >= _PAIR_KEY:
        raise ValueError(f"positions from {_PAIR_KEY} on are not supported")
    have = pairs.ref_pos.astype(np.int64) * _PAIR_KEY + pairs.pred_pos.astype(np.int64)
    want = np.asarray(ref_pos, np.int64) * _PAIR_KEY + np.asarray(pred_pos, np.int64)
    order = np.argsort(have, kind="stable")
    at = np.minimum(np.searchsorted(have[order], want), max(len(have) - 1, 0))
    if len(want) and (len(have) == 0 or (have[order][at] != want).any()):
        raise PartitionMissingError(f"{path}: holds pairs that are not the partition's; rerun to recompute it.")
    return order[at]


def write_homeless(path: Path, pos: np.ndarray, rows: np.ndarray, columns: tuple[str, ...], tile_keys: np.ndarray,
                   aoi: np.ndarray) -> Path:
    """The predictions without a candidate pair that a resolve met: positions, rows, tiles and AOIs."""
    return write_summary(path, {"pos": pos, "rows": rows, "columns": np.asarray(columns, dtype=str), "tiles": tile_keys, "aoi": aoi})


def read_homeless(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray, np.ndarray]:
    """The inverse of :func:`write_homeless`."""
    a = read_summary(path)
    columns = tuple(str(c) for c in a["columns"])
    return a["pos"], a["rows"].reshape(len(a["pos"]), len(columns)), columns, a["tiles"].reshape(len(a["pos"]), 3), a["aoi"]


def write_frame(path: Path, frame: pd.DataFrame) -> Path:
    """A frame of plain columns (numbers, booleans, text, labels) as Parquet, its index as ``__index``.

    Object columns are written as :func:`_labels_array` writes labels (mixed types as
    text, as the prepared partitions hold them) and read back as object arrays.
    """
    objects = [c for c in frame.columns if frame[c].dtype == object]
    arrays = {"__index": pa.array(frame.index.to_numpy(np.int64))}
    for c in frame.columns:
        arrays[str(c)] = _labels_array(pd.Index(frame[c].to_numpy())) if c in objects else pa.array(frame[c].to_numpy())
    table = pa.table(arrays).replace_schema_metadata({b"evalcore_objects": json.dumps(objects).encode()})
    # Uncompressed and memory-mapped when read, as the pairs outputs: a work file read once.
    atomic_path(wd.local(path), lambda tmp: pq.write_table(table, tmp, compression="NONE"))
    return wd.publish(path)


def read_frame(path: Path) -> pd.DataFrame:
    """The inverse of :func:`write_frame`."""
    table = pq.read_table(wd.fetch(path), memory_map=True)
    objects = set(json.loads(table.schema.metadata[b"evalcore_objects"]))
    columns = {
        c: _objects(table[c]) if c in objects else table[c].to_numpy(zero_copy_only=False)
        for c in table.column_names if c != "__index"
    }
    return pd.DataFrame(columns, index=pd.Index(table["__index"].to_numpy(), dtype=np.int64))


# ----------------------------------------------------------------------------- table parts
# A run-level table too long for the client (the exact PR curve: a row per distinct score)
# is written by the tasks that compute it, a part each, and joined where it is published.


def write_table_part(path: Path, frame: pd.DataFrame) -> Path:
    """One part of a table as Parquet (plain columns, no index), atomically."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    atomic_path(wd.local(path), lambda tmp: pq.write_table(table, tmp))
    return wd.publish(path)


TABLE_BATCH_ROWS = 65_536
"""Rows copied at a time from a table part into the whole table (:meth:`TableParts.to_parquet`): each is a row group of the output."""


class TableParts:
    """A table as its parts in the work directory, in order (:func:`write_table_part`).

    ``labels`` say what each part is (``PR curve of score range 3 at IoU 0.5``): a part missing,
    unreadable or with other columns than the first is a :class:`PartitionMissingError`
    naming its label and file. ``to_parquet`` writes them as one file, a batch of
    :data:`TABLE_BATCH_ROWS` rows at a time (the client never holds more than one batch),
    under a temporary name renamed to
    ``path`` when every part is in it: a failure leaves no file, or the old one, there.
    """

    def __init__(self, paths: list[str], labels: list[str] | None = None):
        self.paths = [str(p) for p in paths]
        self.labels = [str(v) for v in labels] if labels is not None else [f"part {i}" for i in range(len(self.paths))]
        if len(self.labels) != len(self.paths):
            raise ValueError(f"TableParts: {len(self.paths)} parts but {len(self.labels)} labels")

    def _read(self, i: int, schema: pa.Schema | None = None) -> pa.Table:
        part = self._open(i, schema)
        try:
            return part.read()
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise self._unreadable(i, exc) from None

    def _unreadable(self, i: int, exc: BaseException) -> PartitionMissingError:
        return PartitionMissingError(f"{self.labels[i]}: its table part {self.paths[i]} cannot be read ({type(exc).__name__}: {exc})")

    def _open(self, i: int, schema: pa.Schema | None = None) -> pq.ParquetFile:
        label, path = self.labels[i], self.paths[i]
        try:
            part = pq.ParquetFile(wd.fetch(path))
        except FileNotFoundError:
            raise PartitionMissingError(f"{label}: its table part {path} is missing") from None
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise self._unreadable(i, exc) from None
        if schema is not None and not part.schema_arrow.equals(schema, check_metadata=False):
            raise PartitionMissingError(f"{label}: its table part {path} has columns {part.schema_arrow.names} "
                                        f"({', '.join(map(str, part.schema_arrow.types))}), not the first part's "
                                        f"{schema.names} ({', '.join(map(str, schema.types))})")
        return part

    def to_parquet(self, path: str | os.PathLike, index: bool = False) -> None:
        # A part is copied TABLE_BATCH_ROWS rows at a time, on this thread: a whole part (a
        # score range's PR curve, about 248k rows at 2M predictions) read and written at once
        # raised the client's peak by 0.1 GiB, and grew with the country.
        def _write(tmp: Path) -> None:
            writer = None
            try:
                for i in range(len(self.paths)):
                    part = self._open(i, writer.schema if writer is not None else None)
                    if writer is None:
                        writer = pq.ParquetWriter(str(tmp), part.schema_arrow)
                    try:
                        for batch in part.iter_batches(batch_size=TABLE_BATCH_ROWS, use_threads=False):
                            writer.write_batch(batch)
                    except (OSError, ValueError, pa.ArrowException) as exc:
                        raise self._unreadable(i, exc) from None
                    pa.default_memory_pool().release_unused()
            finally:
                if writer is not None:
                    writer.close()

        atomic_path(path, _write)

    def to_pandas(self) -> pd.DataFrame:
        """Every part at once (tests and small runs)."""
        first = self._read(0) if self.paths else None
        tables = [first, *(self._read(i, first.schema) for i in range(1, len(self.paths)))] if first is not None else []
        return pd.concat([t.to_pandas() for t in tables], ignore_index=True)
