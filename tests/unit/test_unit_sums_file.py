"""The homeless predictions' tile and AOI sums file, read back a block of units at a time
(:func:`evalcore.distributed.storage.iter_unit_sums`): the blocks are the file's units in
order, with their own digits and replicates, and a file cut short is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.distributed import storage
from evalcore.distributed.reliability import PartitionMissingError
from evalcore.exact import digits
from evalcore.levels import UnitSums

COLUMNS = ("tp", "n_ref")
REP_COLUMNS = ("tp", "n_ref")


def unit_sums(n: int, width: int, n_rep: int | None) -> UnitSums:
    keys = np.array([[32633, k, -k][:width] if width == 3 else [k] for k in range(n)], dtype=np.int64).reshape(n, width)
    values = np.arange(2 * n, dtype=float).reshape(n, 2) / 4.0
    reps = None if n_rep is None else (np.arange(n * n_rep * 2, dtype=float).reshape(n, n_rep, 2) * 0.1)
    return UnitSums(keys, digits(values), reps, COLUMNS, REP_COLUMNS)


@pytest.mark.parametrize("units", [1, 3, 256])
def test_blocks_are_the_file_in_order(tmp_path, units):
    tiles, aois = unit_sums(7, 3, 5), unit_sums(2, 1, 5)
    path = storage.write_unit_sums(tmp_path / "homeless-units.arrays", tiles, aois)
    for level, whole in (("tiles", tiles), ("aois", aois)):
        blocks = list(storage.iter_unit_sums(path, level, units))
        # 7 tiles in blocks of 3: 3, 3, 1; of 1: seven blocks; of 256: one.
        assert [len(b.keys) for b in blocks] == [min(units, len(whole.keys) - s) for s in range(0, len(whole.keys), units)]
        assert np.concatenate([b.keys for b in blocks]).tolist() == whole.keys.tolist()
        assert np.concatenate([b.digits for b in blocks]).tobytes() == whole.digits.tobytes()
        assert np.concatenate([b.replicates for b in blocks]).tobytes() == whole.replicates.tobytes()
        assert all((b.columns, b.replicate_columns) == (COLUMNS, REP_COLUMNS) for b in blocks)


def test_without_replicates_one_block(tmp_path):
    tiles, aois = unit_sums(4, 3, None), unit_sums(0, 1, None)
    path = storage.write_unit_sums(tmp_path / "homeless-units.arrays", tiles, aois)
    (block,) = storage.iter_unit_sums(path, "tiles", 2)
    assert block.replicates is None and block.keys.tolist() == tiles.keys.tolist()
    (empty,) = storage.iter_unit_sums(path, "aois", 2)
    assert len(empty.keys) == 0


def test_no_units_with_replicates_is_one_empty_block(tmp_path):
    path = storage.write_unit_sums(tmp_path / "homeless-units.arrays", unit_sums(0, 3, 4), unit_sums(0, 1, 4))
    (block,) = storage.iter_unit_sums(path, "tiles", 2)
    assert block.keys.shape == (0, 3) and block.replicates.shape == (0, 4, 2)


def test_a_file_cut_short_is_refused(tmp_path):
    tiles, aois = unit_sums(7, 3, 5), unit_sums(2, 1, 5)
    # The tiles' arrays alone, the replicates last, cut short of their last unit's bytes.
    arrays = {name: a for name, a in storage._unit_arrays(tiles, aois).items() if name.startswith("tiles_")}
    assert list(arrays)[-1] == "tiles_replicates"
    whole = storage.write_summary(tmp_path / "whole.arrays", arrays)
    cut = tmp_path / "cut.arrays"
    cut.write_bytes(whole.read_bytes()[: -5 * 2 * 8])
    with pytest.raises(PartitionMissingError, match="tiles_replicates.*ends early"):
        list(storage.iter_unit_sums(cut, "tiles", 3))


def test_fortran_ordered_sums_are_written_in_c_order_and_read_back(tmp_path):
    tiles, aois = unit_sums(5, 3, 4), unit_sums(1, 1, 4)
    fortran = UnitSums(tiles.keys, tiles.digits, np.asfortranarray(tiles.replicates), tiles.columns, tiles.replicate_columns)
    path = storage.write_unit_sums(tmp_path / "homeless-units.arrays", fortran, aois)
    got = np.concatenate([b.replicates for b in storage.iter_unit_sums(path, "tiles", 2)])
    assert got.tobytes() == np.ascontiguousarray(tiles.replicates).tobytes()


def test_a_file_the_reader_cannot_stream_is_refused_by_name(tmp_path):
    # Written another way (a Fortran-ordered array): refused, never read in a wrong order.
    tiles, aois = unit_sums(5, 3, 4), unit_sums(1, 1, 4)
    arrays = storage._unit_arrays(tiles, aois)
    arrays["tiles_replicates"] = np.asfortranarray(arrays["tiles_replicates"])
    path = storage.write_summary(tmp_path / "other.arrays", arrays)
    with pytest.raises(PartitionMissingError, match="'tiles_replicates' is not a C-ordered"):
        list(storage.iter_unit_sums(path, "tiles", 2))
