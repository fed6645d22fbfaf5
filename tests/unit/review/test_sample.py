"""The review sample (SPEC 6.12): cells, the allocation worked by hand, the draw, its seed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.review.sample import allocate, draw_sample, review_cells


def test_allocation_hand_worked_with_unequal_cells_and_a_remainder():
    # Cells by (size, name): A 1, B 3, C 3, D 10, E 40; n = 14.
    # A: min(1, 14 // 5 = 2) = 1, 13 left; B: min(3, 13 // 4 = 3) = 3, 10 left;
    # C: min(3, 10 // 3 = 3) = 3, 7 left; D: min(10, 7 // 2 = 3) = 3, 4 left;
    # E: min(40, 4 // 1) = 4: the remainder of the shares lands on the last, largest cell.
    assert allocate({"E": 40, "C": 3, "A": 1, "D": 10, "B": 3}, 14) == {"E": 4, "C": 3, "A": 1, "D": 3, "B": 3}


def test_allocation_small_sample_and_ties_by_name():
    # n = 3 over five cells: A 3 // 5 = 0, B 3 // 4 = 0, C 3 // 3 = 1, D 2 // 2 = 1, E 1 // 1 = 1.
    assert allocate({"A": 1, "B": 3, "C": 3, "D": 10, "E": 40}, 3) == {"A": 0, "B": 0, "C": 1, "D": 1, "E": 1}
    # Equal sizes: visited by name, so the later name gets the remainder.
    assert allocate({"y": 5, "x": 5}, 3) == {"y": 2, "x": 1}


def test_allocation_more_than_there_is_and_empty_cells():
    assert allocate({"A": 1, "B": 3, "C": 0}, 60) == {"A": 1, "B": 3, "C": 0}
    assert allocate({}, 5) == {}
    with pytest.raises(ValueError, match="0 or more"):
        allocate({"A": 1}, -1)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=8), n=st.integers(0, 120))
def test_inclusion_probabilities_sum_to_the_sample_size(sizes, n):
    named = {f"c{k}": s for k, s in enumerate(sizes)}
    taken = allocate(named, n)
    total = sum(sizes)
    assert sum(taken.values()) == min(n, total)
    assert all(0 <= taken[c] <= named[c] for c in named)
    # Every object's inclusion probability, as draw_sample records it, summed over all
    # objects (its cell's probability times the cell's size) is the number of items drawn.
    objects = pd.DataFrame({"kind": "reference", "position": np.arange(total)})
    cells = np.repeat(list(named), sizes)
    drawn = draw_sample(objects, cells, n, seed=0)
    assert len(drawn) == min(n, total)
    per_cell = drawn.groupby("cell")[["inclusion_probability", "cell_size"]].first()
    assert (per_cell["inclusion_probability"] * per_cell["cell_size"]).sum() == pytest.approx(min(n, total))
    # Equal shares: two cells that can both give more differ by at most one item.
    open_cells = [taken[c] for c in named if taken[c] < named[c]]
    assert not open_cells or max(open_cells) - min(open_cells) <= 1


def _objects(n_ref: int, n_pred: int, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    objects = pd.DataFrame({
        "kind": ["reference"] * n_ref + ["prediction"] * n_pred,
        "position": np.r_[np.arange(n_ref), np.arange(n_pred)],
        "object_id": [str(i) for i in range(n_ref)] + [str(i) for i in range(n_pred)],
    })
    cells = np.where(objects["kind"] == "reference", np.where(objects["position"] % 3 == 0, "M-FN-MISSED", "TP"), "M-FP-BACKGROUND")
    return objects, cells


def test_draw_follows_the_contract_step_by_step():
    objects, cells = _objects(12, 5, np.random.default_rng(0))
    got = draw_sample(objects, cells, 7, seed=11)
    # Cells: M-FN-MISSED 4 (positions 0, 3, 6, 9), M-FP-BACKGROUND 5, TP 8; n = 7:
    # by size: MISSED min(4, 7 // 3 = 2) = 2, BACKGROUND min(5, 5 // 2 = 2) = 2, TP 3.
    rng = np.random.default_rng(11)
    expected = []
    for name, members, k in (("M-FN-MISSED", [0, 3, 6, 9], 2), ("M-FP-BACKGROUND", [0, 1, 2, 3, 4], 2),
                             ("TP", [1, 2, 4, 5, 7, 8, 10, 11], 3)):  # cells in name order
        expected += [(name, members[i]) for i in rng.choice(len(members), k, replace=False)]
    assert list(zip(got["cell"], got["position"])) == expected
    probability = {"M-FN-MISSED": 2 / 4, "M-FP-BACKGROUND": 2 / 5, "TP": 3 / 8}
    assert got["inclusion_probability"].tolist() == [probability[c] for c in got["cell"]]
    assert got["inclusion_probability"].groupby(got["cell"]).first().mul(got["cell_size"].groupby(got["cell"]).first()).sum() == 7


def test_same_seed_same_sample_whatever_the_row_order():
    rng = np.random.default_rng(1)
    objects, cells = _objects(40, 15, rng)
    first = draw_sample(objects, cells, 12, seed=5)
    order = rng.permutation(len(objects))
    shuffled = draw_sample(objects.iloc[order].reset_index(drop=True), cells[order], 12, seed=5)
    assert first[["kind", "position", "cell"]].equals(shuffled[["kind", "position", "cell"]])
    other = draw_sample(objects, cells, 12, seed=6)
    assert not first[["kind", "position"]].equals(other[["kind", "position"]])


def test_cells_take_out_low_and_high_scores_and_cross_strata():
    code = np.array(["TP", "TP", "M-FP-BACKGROUND", "M-FP-DUPLICATE", "M-FN-MISSED", "TP"])
    kind = np.array(["reference", "reference", "prediction", "prediction", "reference", "reference"])
    score = np.array([0.1, 0.5, 0.9, 0.5, np.nan, np.nan])
    stratum = np.array(["a", "b", "none", "a", "a", "none"])
    got = review_cells(code, kind=kind, stratum=stratum, score=score, score_q10=0.1, score_q90=0.9)
    assert got.tolist() == ["TP-LOW-SCORE/a", "TP/b", "FP-HIGH-SCORE/none", "M-FP-DUPLICATE/a", "M-FN-MISSED/a", "TP/none"]
    assert review_cells(code, kind=kind).tolist() == code.tolist()
