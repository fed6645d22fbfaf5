"""Streamed layers: a large dataset made block by block and written as GeoParquet parts.

:func:`make_layers` holds every field and all its working arrays at once (4 million
fields took 14.5 GiB). Above :data:`STREAM_ABOVE` fields, :func:`iter_blocks` makes the
layers one cluster at a time instead: block ``b`` is one cluster of about
:data:`~evalcore.synth.FIELDS_PER_CLUSTER` fields, drawn by the same code as
:func:`make_layers` (with ``n_clusters=1``) from generators of its own,
``numpy.random.SeedSequence(seed, spawn_key=(b + 1,))`` and, for the clustered errors
and the predicted crops, ``spawn_key=(b + 1, 2)`` and ``(b + 1, 3)``. Its cluster sits on
lattice slot ``b``, the slots drawn once from ``spawn_key=(0,)`` (the first four are
the fixed slots, two of them on UTM zone boundaries). So a block depends on ``(seed,
n_ref, options, b)`` only, never on how the blocks are written: any part size gives
the same rows in the same order. Memory is that of one block (a few hundred MiB)
plus the rows waiting for their part.

Up to :data:`STREAM_ABOVE` fields :func:`iter_blocks` yields :func:`make_layers`'s
layers whole, so small datasets (the tests', the goldens') are exactly as before.

How a streamed layer differs from :func:`make_layers` at the same size
    * Each block has ``round(0.05 n_b)`` false positives of its own, so the total can
      differ from ``round(0.05 n_ref)`` by up to half the number of blocks.
    * ``field_id`` and ``pred_id`` are unique over the layer and are a permutation
      within each block (block ``b``'s ids follow block ``b - 1``'s), not over the
      whole layer.
    * The bad rows (with ``bad_rows=True``) are in block 0.
    * The site layers are laid over the clusters found block by block
      (:func:`block_sites`), which are the clusters :func:`make_site_layers` would
      find over the whole layers (slots are 143 km apart, far more than the 5 km that
      joins two clusters), possibly in
      another order.

:class:`PartWriter` cuts the stream of rows into ``part-00000.parquet``,
``part-00001.parquet``, ... of exactly ``part_rows`` rows (the last one shorter), which
the readers of ``evalcore evaluate`` and ``evalcore run`` take in name order as one
layer. Staging and renaming the outputs into place is the caller's (the ``synth``
command uses :class:`evalcore.outputs.OutputSet`).
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Callable, Iterator

import geopandas
import numpy as np
import pandas as pd

from evalcore.synth.constants import FIELDS_PER_CLUSTER
from evalcore.synth.layers import _build_layers, make_layers
from evalcore.synth.layout import _lattice_slots
from evalcore.synth.predictions import _check_correlation_km
from evalcore.synth.shapes import _check_count
from evalcore.synth.sites import _find_sites, _Sites

STREAM_ABOVE: int = 4 * FIELDS_PER_CLUSTER
"""Fields up to which :func:`iter_blocks` yields :func:`make_layers`'s layers whole (200,000: four default clusters)."""

DEFAULT_PART_ROWS: int = 200_000
"""Rows per GeoParquet part of a streamed layer (``evalcore synth --part-rows``)."""

_ROW_GROUP = 65_536  # as write_layers: bbox reads skip row groups


def block_sizes(n_ref: int, block_fields: int = FIELDS_PER_CLUSTER, stream_above: int = STREAM_ABOVE) -> list[int]:
    """Fields of each block of a streamed layer of ``n_ref`` fields: ``ceil(n_ref / block_fields)`` near-equal blocks.

    The first ``n_ref % n_blocks`` blocks have one field more. Up to ``stream_above``
    fields the layer is one block. ``block_fields`` and ``stream_above`` are part of the
    layer's definition (the ``synth`` command keeps the defaults; tests make small blocks).

    >>> block_sizes(200_000), block_sizes(200_001)[:2], len(block_sizes(10_000_000))
    ([200000], [40001, 40000], 200)
    """
    n_ref = _check_count("n_ref", n_ref, minimum=0)
    block_fields = _check_count("block_fields", block_fields, minimum=1)
    if n_ref <= stream_above:
        return [n_ref]
    n_blocks = math.ceil(n_ref / block_fields)
    base, extra = divmod(n_ref, n_blocks)
    return [base + (b < extra) for b in range(n_blocks)]


def iter_blocks(
    n_ref: int,
    seed: int = 0,
    *,
    bad_rows: bool = True,
    score_decimals: int | None = None,
    error_correlation_km: float | None = None,
    block_fields: int = FIELDS_PER_CLUSTER,
    stream_above: int = STREAM_ABOVE,
) -> Iterator[tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]]:
    """Yield (predicted, reference) blocks whose concatenation is the layers of ``n_ref`` fields.

    See the module docstring. Up to :data:`STREAM_ABOVE` fields the one block is
    ``make_layers(n_ref, seed, ...)``; above, block ``b`` is one cluster from
    generators spawned from ``seed`` (a non-negative integer).

    Parameters
    ----------
    n_ref : int
        Number of reference fields (not counting bad rows), >= 0.
    seed : int
        Non-negative seed; the same ``(n_ref, seed, options)`` always gives the same blocks.
    bad_rows, score_decimals, error_correlation_km
        As in :func:`make_layers`.
    block_fields, stream_above : int
        See :func:`block_sizes`.

    Yields
    ------
    predicted, reference : geopandas.GeoDataFrame
        One block of each layer, with the columns of :func:`make_layers` and a
        RangeIndex from 0; ids continue from the previous block's.
    """
    sizes = block_sizes(n_ref, block_fields, stream_above)
    if len(sizes) == 1:
        yield make_layers(n_ref, seed, bad_rows=bad_rows, score_decimals=score_decimals,
                          error_correlation_km=error_correlation_km)  # fmt: skip
        return
    correlation_m = _check_correlation_km(error_correlation_km)
    lon, lat = _lattice_slots(np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,))), len(sizes), 1)
    pred_offset = ref_offset = 0
    for b, n_block in enumerate(sizes):
        pred, ref = _build_layers(
            n_block,
            np.random.SeedSequence(seed, spawn_key=(b + 1,)),
            _spawned(seed, b + 1),
            n_clusters=1,
            bad_rows=bad_rows and b == 0,
            score_decimals=score_decimals,
            correlation_m=correlation_m,
            slots=(lon[b : b + 1], lat[b : b + 1]),
        )
        ref["field_id"] += ref_offset
        pred["pred_id"] += pred_offset
        ref_offset += len(ref)
        pred_offset += len(pred)
        yield pred, ref


def _spawned(seed: int, block: int) -> Callable[[int], np.random.SeedSequence]:
    """The seeds of a block's generators of their own (section ``k``: 2 clustered errors, 3 crops)."""
    return lambda k: np.random.SeedSequence(seed, spawn_key=(block, k))


def block_sites(pred: geopandas.GeoDataFrame, ref: geopandas.GeoDataFrame) -> _Sites:
    """The clusters of one block (a few numbers each), to lay the site layers over the whole layer later."""
    return _find_sites(ref, pred)


def concat_sites(parts: list[_Sites]) -> _Sites:
    """The clusters of every block, in block order."""
    return _Sites(
        np.concatenate([p.extent for p in parts]),
        np.concatenate([p.core for p in parts]),
        np.concatenate([p.n_ref for p in parts]),
        np.concatenate([p.pred_beyond for p in parts]),
    )


class PartWriter:
    """Write a stream of GeoDataFrame blocks to ``directory`` as GeoParquet parts of ``part_rows`` rows.

    Parts are ``part-00000.parquet``, ``part-00001.parquet``, ... (five digits or more,
    so name order is row order); each holds exactly ``part_rows`` rows but the last,
    which holds the rest (an empty layer is one empty part, so the directory is a
    layer). Rows wait in memory only until their part is full.

    Parameters
    ----------
    directory : str or os.PathLike
        An existing directory (the caller's staging directory).
    part_rows : int
        Rows per part, >= 1.
    digits : int
        Digits of the part number (enough for the expected number of parts).
    """

    def __init__(self, directory: str | os.PathLike, part_rows: int, digits: int = 5) -> None:
        self.directory = pathlib.Path(directory)
        self.part_rows = _check_count("part_rows", part_rows, minimum=1)
        self.digits = digits
        self.rows = 0
        self.parts = 0
        self._pending: list[geopandas.GeoDataFrame] = []
        self._pending_rows = 0
        self._template: geopandas.GeoDataFrame | None = None  # the columns, for an empty layer's one part

    def add(self, block: geopandas.GeoDataFrame) -> None:
        """Queue ``block``'s rows and write every part they fill."""
        if self._template is None:
            self._template = block.iloc[:0]
        self._pending.append(block)
        self._pending_rows += len(block)
        self.rows += len(block)
        if self._pending_rows < self.part_rows:
            return
        # Every full part is a slice of the rows waiting, concatenated once; only the
        # rest is kept (not copied again per part written).
        frame = self._pending[0] if len(self._pending) == 1 else pd.concat(self._pending, ignore_index=True)
        start = 0
        while len(frame) - start >= self.part_rows:
            self._write(frame.iloc[start : start + self.part_rows])
            start += self.part_rows
        self._pending = [frame.iloc[start:]] if start < len(frame) else []
        self._pending_rows = len(frame) - start

    def close(self) -> int:
        """Write the last part (the rest, or an empty part if nothing was written); return the number of parts."""
        if self._pending_rows:
            self._write(self._pending[0] if len(self._pending) == 1 else pd.concat(self._pending, ignore_index=True))
        elif self.parts == 0 and self._template is not None:
            self._write(self._template)
        self._pending = []
        self._pending_rows = 0
        return self.parts

    def _write(self, frame: geopandas.GeoDataFrame) -> None:
        path = self.directory / f"part-{self.parts:0{self.digits}d}.parquet"
        frame.reset_index(drop=True).to_parquet(path, index=False, write_covering_bbox=True, row_group_size=_ROW_GROUP)
        self.parts += 1
