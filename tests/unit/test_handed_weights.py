"""A score weights task hands its partition's field draws' weights to the sums task
(:func:`evalcore.distributed.tasks._hand_weights`, :func:`~evalcore.distributed.tasks._handed_weights`).

The sums task uses them only when they are whole and of its own fields; otherwise it draws
them again (the same numbers), so a lost, stale or damaged file costs time, never bits.
That the handed weights are the ones used, and right, is checked end to end by
tests/distributed/test_scores_distributed.py (a shift of the weights by one field fails it).
"""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.bootstrap import HandedWeights, whole_counts
from evalcore.distributed.tasks import HANDED_WEIGHTS_DIR, _hand_weights, _handed_weights


def _weights(n_rep: int = 7, n: int = 13, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).poisson(1.0, size=(n_rep, n)).astype(np.float64)


def test_handed_weights_come_back_as_the_same_numbers_and_the_file_goes(tmp_path):
    weights, positions = _weights(), np.arange(100, 113)
    path = _hand_weights(str(tmp_path), "32631_1_2", positions, whole_counts(weights, "p"))
    assert path == str(tmp_path / HANDED_WEIGHTS_DIR / "32631_1_2.arrays")
    got = _handed_weights(path, positions, 7)
    assert isinstance(got, HandedWeights)
    assert got.draw_counts().dtype == np.uint8
    assert got.draw_counts().astype(np.float64).tobytes() == weights.tobytes()
    assert got.weights_rows().tolist() == list(range(13))
    assert not (tmp_path / HANDED_WEIGHTS_DIR / "32631_1_2.arrays").exists()
    assert _handed_weights(path, positions, 7) is None  # read once


def test_weights_of_other_fields_or_replicates_are_not_used(tmp_path):
    weights, positions = whole_counts(_weights(), "p"), np.arange(13)
    path = _hand_weights(str(tmp_path), "a", positions, weights)
    assert _handed_weights(path, positions + 1, 7) is None
    path = _hand_weights(str(tmp_path), "a", positions, weights)
    assert _handed_weights(path, positions, 8) is None
    path = _hand_weights(str(tmp_path), "a", positions, weights)
    assert _handed_weights(path, positions[:-1], 7) is None


def test_a_missing_or_damaged_file_means_drawing_again(tmp_path):
    assert _handed_weights(str(tmp_path / "none.arrays"), np.arange(3), 2) is None
    bad = tmp_path / "bad.arrays"
    bad.write_bytes(b"PK\x03\x04 not an arrays file")
    assert _handed_weights(str(bad), np.arange(3), 2) is None
    assert not bad.exists()


def test_weights_above_a_byte_or_a_store_work_directory_are_not_handed(tmp_path):
    weights = _weights()
    weights[3, 4] = 256.0
    counts = whole_counts(weights, "p")
    assert counts.dtype == np.uint16
    assert _hand_weights(str(tmp_path), "a", np.arange(13), counts) is None
    assert not (tmp_path / HANDED_WEIGHTS_DIR / "a.arrays").exists()
    assert _hand_weights("s3://bucket/run/work", "a", np.arange(13), whole_counts(_weights(), "p")) is None


def test_whole_counts_keep_whole_numbers_and_refuse_the_rest():
    weights = np.array([[0.0, 3.0], [255.0, 1.0]])
    got = whole_counts(weights, "p")
    assert got.dtype == np.uint8 and got.tolist() == [[0, 3], [255, 1]]
    assert whole_counts(np.array([[256.0, 0.0]]), "p").dtype == np.uint16
    assert whole_counts(np.array([[70000.0]]), "p").dtype == np.uint32
    for bad in (-1.0, 2.5, np.nan, -0.5, 2.0**33):
        with pytest.raises(ValueError, match="partition 7: replicate weights are not small whole numbers"):
            whole_counts(np.array([[1.0, bad]]), "partition 7")
