"""The work directory's arrays files (:func:`evalcore.distributed.storage.write_summary`):
named ``.npy`` arrays one after another behind a magic line, read back whole, by name, or
skipping some; anything else, or a file cut short, is refused."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from evalcore.distributed import storage

ARRAYS = {
    "pos": np.arange(5, dtype=np.int64),
    "weights": np.array([[0, 1, 2], [3, 255, 0]], dtype=np.uint8),
    "fortran": np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7.0),
    "columns": np.asarray(["tp", "n_ref", "été"], dtype=str),
    "key": np.asarray((32633, 1, -2)),
    "n": np.asarray(3),
    "empty": np.empty((0, 1000), dtype=np.uint16),
}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes(order="A") == b.tobytes(order="A")


def test_round_trip_of_every_kind_of_array(tmp_path):
    path = storage.write_summary(tmp_path / "a.arrays", ARRAYS)
    got = storage.read_summary(path)
    assert list(got) == list(ARRAYS)
    assert all(_same(got[name], ARRAYS[name]) for name in ARRAYS)
    assert got["fortran"].flags.f_contiguous and got["columns"].tolist() == ["tp", "n_ref", "été"]


def test_the_layout_is_a_magic_line_then_named_npy_arrays(tmp_path):
    # Built by hand from numpy's own .npy writer: 2-byte little-endian name length, name, array.
    path = storage.write_summary(tmp_path / "a.arrays", {"pos": ARRAYS["pos"], "n": ARRAYS["n"]})
    expected = io.BytesIO()
    expected.write(b"\x93EVALCORE-ARRAYS 1\n")
    for name in ("pos", "n"):
        expected.write(struct.pack("<H", len(name)) + name.encode())
        np.save(expected, ARRAYS[name], allow_pickle=False)
    assert path.read_bytes() == expected.getvalue()


def test_names_asked_for_in_their_order_and_the_skipped_not_read(tmp_path):
    path = storage.write_summary(tmp_path / "a.arrays", ARRAYS)
    got = storage.read_summary(path, ("weights", "pos"))
    assert list(got) == ["weights", "pos"] and _same(got["pos"], ARRAYS["pos"])
    assert list(storage.read_summary(path, skip=("weights", "fortran"))) == ["pos", "columns", "key", "n", "empty"]
    assert list(storage.read_summary(path, ("pos", "weights"), skip=("weights",))) == ["pos"]
    with pytest.raises(KeyError, match="'absent' is not an array of"):
        storage.read_summary(path, ("pos", "absent"))


def test_object_arrays_are_refused_and_nothing_is_left(tmp_path):
    with pytest.raises(ValueError, match="pickle"):
        storage.write_summary(tmp_path / "objects.arrays", {"pos": ARRAYS["pos"], "objects": np.array([{"a": 1}], dtype=object)})
    assert list(tmp_path.iterdir()) == []


def test_another_file_or_one_cut_short_is_refused(tmp_path):
    zipped = tmp_path / "old.npz"
    np.savez(zipped, pos=ARRAYS["pos"])
    with pytest.raises(ValueError, match="not an evalcore arrays file"):
        storage.read_summary(zipped)
    whole = storage.write_summary(tmp_path / "a.arrays", ARRAYS).read_bytes()
    for cut_at in (len(whole) - 1, len(whole) - 1000, 20, 25):
        cut = tmp_path / f"cut{cut_at}.arrays"
        cut.write_bytes(whole[:cut_at])
        with pytest.raises((ValueError, EOFError)):
            storage.read_summary(cut)
