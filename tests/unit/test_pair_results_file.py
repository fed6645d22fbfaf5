"""A partition's pairs output written and read back (evalcore.distributed.storage): the same
arrays, labels of every kind as the Python values they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from evalcore.distributed import storage
from evalcore.engine.pairing import PAIR_ARRAYS, PRED_ARRAYS, REF_ARRAYS, PairResults
from evalcore.pairtable import PairTable


def _results(ref_labels: list, pred_labels: list, classes: list) -> PairResults:
    n_ref, n_pred = len(ref_labels), len(pred_labels)
    pairs = PairTable(np.array([0, 1]), np.array([0, 0]), np.array([2.5, 1.0]), np.array([0.5, 0.25]))
    arrays = {}
    for name in PAIR_ARRAYS + REF_ARRAYS + PRED_ARRAYS:
        n = 2 if name in PAIR_ARRAYS else n_ref if name in REF_ARRAYS else n_pred
        arrays[name] = np.arange(n, dtype=np.int64) + 7 if name.endswith(("_pos", "epsg", "tile_x", "tile_y", "aoi", "pool")) else np.linspace(0.1, 0.9, n)
    arrays["ref_label"] = np.asarray(ref_labels, dtype=object)
    arrays["pred_label"] = np.asarray(pred_labels, dtype=object)
    arrays["pred_label_of_pair"] = np.asarray([pred_labels[0]] * 2, dtype=object)
    arrays["ref_class"] = np.asarray(classes[:n_ref], dtype=object)
    arrays["pred_class"] = np.asarray(classes[:n_pred], dtype=object)
    return PairResults(pairs=pairs, **arrays)


@pytest.mark.parametrize("ref_labels, pred_labels, classes", [
    ([10, 20], [5], [None, None]),  # integer labels, no class column
    (["a", "b"], ["p"], ["wheat", None]),  # string labels, classes with a null
    ([2**62, -3], [0], ["x", "y"]),
])
def test_written_and_read_back(tmp_path, ref_labels, pred_labels, classes):
    results = _results(ref_labels, pred_labels, classes)
    storage.write_pair_results(tmp_path, (32633, 1, 2), results, "sig")
    back = storage.read_pair_results(tmp_path, (32633, 1, 2), "sig")
    for name in PAIR_ARRAYS + REF_ARRAYS + PRED_ARRAYS:
        got, want = getattr(back, name), getattr(results, name)
        if want.dtype == object:
            assert got.dtype == object and [type(v) for v in got] == [type(v) for v in want] and list(got) == list(want), name
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    np.testing.assert_array_equal(back.pairs.iou, results.pairs.iou)
    assert storage.read_pair_results(tmp_path, (32633, 1, 2), "another signature") is None


def test_objects_are_to_pylist_values():
    columns = [pa.chunked_array([pa.array([1, 2])]), pa.chunked_array([pa.array(["a", None])]), pa.chunked_array([pa.array([1, None])]),
               pa.chunked_array([pa.array([1.5])]), pa.chunked_array([pa.array(["x"]), pa.array([None], type=pa.string())]),
               pa.chunked_array([pa.array(pd.to_datetime(["2020-01-01"]))])]
    for column in columns:
        got = storage._objects(column)
        want = column.to_pylist()
        assert got.dtype == object and [type(v) for v in got] == [type(v) for v in want] and list(got) == want
