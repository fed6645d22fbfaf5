"""The score tasks' files (issue 29): what a missing or broken one does.

The scores' run-level values are computed on the workers by score ranges: each resolve's
score rows are split into the ranges' files (``score_split_task``), each range gathers its
files (``score_range_task``), each range computes its share and writes its rows of the PR
curve (``score_values_task``), and the client joins those parts (``storage.TableParts``).
Here the tasks run as plain functions on files in a temporary directory: their outputs
together give the one-range computation's bits, and every missing, truncated or short file
stops them with a ``PartitionMissingError`` naming the partition or range and the file,
never curves from part of the predictions. The PR-curve file is whole or absent.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalcore.distributed import storage
from evalcore.distributed.reliability import FAULT_ENV, FAULT_PHASES, InjectedFault, PartitionMissingError, inject_fault
from evalcore.distributed.tasks import score_range_task, score_split_task, score_values_task
from evalcore.metrics.score_ranges import AP_THRESHOLDS, PR_THRESHOLDS, ScoreRows, prefix_counts, range_values

_ROOT = Path(__file__).resolve().parents[2]
N_GROUPS = 2  # every prediction, and one stratum


def _rows(n: int, seed: int, first_pos: int) -> ScoreRows:
    rng = np.random.default_rng(seed)
    base = rng.random(n)
    tp = np.stack([base < 0.8 - 0.05 * k for k in range(len(AP_THRESHOLDS))])
    return ScoreRows(np.arange(first_pos, first_pos + n, dtype=np.int64), np.round(rng.random(n), 1), tp, rng.random(n) < 0.4,
                     rng.integers(-1, 1, n).astype(np.int64))


@pytest.fixture()
def resolves(tmp_path):
    """Two resolves' score rows, as resolve_task writes them: ``{partition: path}``."""
    out = tmp_path / "resolve"
    return {name: storage.write_summary(out / f"by-{name}" / "run-level-scores.arrays", _rows(40, seed, 100 * seed).as_arrays())
            for seed, name in enumerate(["32633_0_0", "32633_1_0"], start=1)}


CUTS = np.array([0.7, 0.3])


def _splits(resolves: dict, out: Path) -> dict[str, list[int]]:
    return {name: score_split_task(str(path), CUTS, str(out), name) for name, path in resolves.items()}


def _range_inputs(split: dict, out: Path, k: int) -> list[tuple[str, str, int]]:
    return [(name, str(out / f"split-{name}-{k}.arrays"), split[name][k]) for name in sorted(split) if split[name][k] > 0]


def _through_the_tasks(resolves: dict, out: Path) -> tuple[list, storage.TableParts]:
    split = _splits(resolves, out)
    n_ranges = len(CUTS) + 1
    counts = [score_range_task(_range_inputs(split, out, k), str(out / f"range-{k}.arrays"), N_GROUPS, k) for k in range(n_ranges)]
    before, total = prefix_counts(counts, N_GROUPS)
    shares = [score_values_task(str(out / f"range-{k}.arrays"), counts[k].n, before[k], total, 50, 0.5, (0.6,), str(out), k)
              for k in range(n_ranges)]
    parts = storage.TableParts([shares[k][1][i] for i in range(len(PR_THRESHOLDS)) for k in range(n_ranges)],
                               [f"PR curve of score range {k} at IoU {t}" for t in PR_THRESHOLDS for k in range(n_ranges)])
    return shares, parts


@pytest.mark.parametrize("batch_rows", [7, 65_536])
def test_the_tasks_files_give_the_one_range_computation(resolves, tmp_path, monkeypatch, batch_rows):
    # The parts are copied into the whole file 7 rows at a time (cutting every part), or whole.
    monkeypatch.setattr(storage, "TABLE_BATCH_ROWS", batch_rows)
    out = tmp_path / "scores"
    shares, parts = _through_the_tasks(resolves, out)
    whole = ScoreRows.concat([ScoreRows.from_arrays(storage.read_summary(p)) for p in resolves.values()]).in_score_order()
    from evalcore.metrics.score_ranges import range_counts

    total = range_counts(whole, N_GROUPS)
    _, pr_whole, _ = range_values(whole, prefix_counts([total], N_GROUPS)[0][0], total, 50, 0.5, (0.6,))
    target = tmp_path / "pr.parquet"
    parts.to_parquet(target)
    pd.testing.assert_frame_equal(pd.read_parquet(target), pd.concat(pr_whole, ignore_index=True), check_exact=True)
    pd.testing.assert_frame_equal(parts.to_pandas(), pd.concat(pr_whole, ignore_index=True), check_exact=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pr.parquet", "resolve", "scores"]  # no temporary file left


def test_a_missing_resolve_score_file_names_the_partition_and_the_file(resolves, tmp_path):
    resolves["32633_1_0"].unlink()
    with pytest.raises(PartitionMissingError, match=r"partition 32633_1_0: the score file of its resolve \(.*by-32633_1_0/run-level-scores\.arrays\) is missing"):
        score_split_task(str(resolves["32633_1_0"]), CUTS, str(tmp_path / "scores"), "32633_1_0")


def test_a_truncated_resolve_score_file_cannot_be_read(resolves, tmp_path):
    path = resolves["32633_0_0"]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(PartitionMissingError, match=r"partition 32633_0_0: the score file of its resolve \(.*run-level-scores\.arrays\) cannot be read"):
        score_split_task(str(path), CUTS, str(tmp_path / "scores"), "32633_0_0")


def test_a_score_file_whose_columns_differ_in_length_is_not_whole(tmp_path):
    rows = _rows(10, 5, 0).as_arrays()
    rows["error"] = rows["error"][:7]
    path = storage.write_summary(tmp_path / "run-level-scores.arrays", rows)
    with pytest.raises(PartitionMissingError, match=r"partition 1_2_3: .*\) is not whole"):
        score_split_task(str(path), CUTS, str(tmp_path / "scores"), "1_2_3")


def test_a_missing_split_names_the_range_the_partition_and_the_file(resolves, tmp_path):
    out = tmp_path / "scores"
    split = _splits(resolves, out)
    inputs = _range_inputs(split, out, 1)
    Path(inputs[-1][1]).unlink()
    with pytest.raises(PartitionMissingError, match=rf"score range 1: the split file of partition 32633_1_0 \(.*split-32633_1_0-1\.arrays\) is missing"):
        score_range_task(inputs, str(out / "range-1.arrays"), N_GROUPS, 1)
    assert not (out / "range-1.arrays").exists()


def test_a_split_holding_other_rows_than_its_task_wrote_is_refused(resolves, tmp_path):
    out = tmp_path / "scores"
    split = _splits(resolves, out)
    inputs = _range_inputs(split, out, 2)
    name, path, n = inputs[0]
    storage.write_summary(Path(path), ScoreRows.from_arrays(storage.read_summary(Path(path))).take(np.arange(n - 1)).as_arrays())
    with pytest.raises(PartitionMissingError, match=rf"score range 2: the split file of partition {name} \(.*\) holds {n - 1} predictions but {n} were written there"):
        score_range_task(inputs, str(out / "range-2.arrays"), N_GROUPS, 2)


def test_a_missing_or_short_range_file_names_the_range(resolves, tmp_path):
    out = tmp_path / "scores"
    split = _splits(resolves, out)
    counts = [score_range_task(_range_inputs(split, out, k), str(out / f"range-{k}.arrays"), N_GROUPS, k) for k in range(3)]
    before, total = prefix_counts(counts, N_GROUPS)
    with pytest.raises(PartitionMissingError, match=rf"score range 1: its rows file \(.*range-1\.arrays\) holds {counts[1].n} predictions but {counts[1].n + 1} were"):
        score_values_task(str(out / "range-1.arrays"), counts[1].n + 1, before[1], total, 50, None, None, str(out), 1)
    (out / "range-0.arrays").unlink()
    with pytest.raises(PartitionMissingError, match=r"score range 0: its rows file \(.*range-0\.arrays\) is missing"):
        score_values_task(str(out / "range-0.arrays"), counts[0].n, before[0], total, 50, None, None, str(out), 0)
    assert not list(out.glob("pr-*"))  # nothing written by the failed tasks


def test_a_missing_pr_part_leaves_no_curve_file_and_names_the_part(resolves, tmp_path):
    _, parts = _through_the_tasks(resolves, tmp_path / "scores")
    missing = parts.paths[4]  # score range 1 at IoU 0.75
    Path(missing).unlink()
    target = tmp_path / "out" / "pr.parquet"
    with pytest.raises(PartitionMissingError, match=rf"PR curve of score range 1 at IoU 0.75: its table part {missing} is missing"):
        parts.to_parquet(target)
    assert not target.parent.exists() or not list(target.parent.iterdir())  # neither the file nor a temporary one
    # An earlier curve file stays as it was.
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(b"the old curve")
    with pytest.raises(PartitionMissingError, match="score range 1 at IoU 0.75"):
        parts.to_parquet(target)
    assert target.read_bytes() == b"the old curve" and [p.name for p in target.parent.iterdir()] == ["pr.parquet"]
    with pytest.raises(PartitionMissingError, match="score range 1 at IoU 0.75"):
        parts.to_pandas()


def test_a_broken_or_different_pr_part_names_the_part(resolves, tmp_path):
    _, parts = _through_the_tasks(resolves, tmp_path / "scores")
    Path(parts.paths[2]).write_bytes(b"not parquet")
    with pytest.raises(PartitionMissingError, match=rf"PR curve of score range 2 at IoU 0.5: its table part {parts.paths[2]} cannot be read"):
        parts.to_parquet(tmp_path / "pr.parquet")
    storage.write_table_part(Path(parts.paths[2]), pd.DataFrame({"score": ["a"]}))
    with pytest.raises(PartitionMissingError, match=r"score range 2 at IoU 0.5: its table part .* has columns \['score'\]"):
        parts.to_parquet(tmp_path / "pr.parquet")
    assert not (tmp_path / "pr.parquet").exists()
    with pytest.raises(ValueError, match="2 parts but 1 labels"):
        storage.TableParts(["a", "b"], ["one"])
    assert storage.TableParts(["a", "b"]).labels == ["part 0", "part 1"]


# --------------------------------------------------------------------------- fault injection


def test_the_score_tasks_inject_faults_by_range_and_partition(resolves, tmp_path, monkeypatch):
    out = tmp_path / "scores"
    monkeypatch.setenv(FAULT_ENV, json.dumps({"phase": "score-split", "partition": "32633_1_0", "mode": "always"}))
    score_split_task(str(resolves["32633_0_0"]), CUTS, str(out), "32633_0_0")  # another partition: no fault
    with pytest.raises(InjectedFault, match="score-split of partition 32633_1_0"):
        score_split_task(str(resolves["32633_1_0"]), CUTS, str(out), "32633_1_0")
    assert not list(out.glob("split-32633_1_0-*"))  # the fault comes before any write
    marker = tmp_path / "marker"
    monkeypatch.setenv(FAULT_ENV, json.dumps({"phase": "score-range", "partition": "range-1", "mode": "once", "marker": str(marker)}))
    with pytest.raises(InjectedFault, match="score-range of partition range-1"):
        score_range_task([], str(out / "range-1.arrays"), N_GROUPS, 1)
    assert marker.exists() and score_range_task([], str(out / "range-1.arrays"), N_GROUPS, 1).n == 0  # once
    monkeypatch.setenv(FAULT_ENV, json.dumps({"phase": "score-values", "partition": "range-1", "mode": "always"}))
    with pytest.raises(InjectedFault, match="score-values of partition range-1"):
        score_values_task(str(out / "range-1.arrays"), 0, None, None, 0, None, None, str(out), 1)


def test_a_fault_in_an_unknown_phase_is_refused(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, json.dumps({"phase": "score_range", "partition": "range-1", "mode": "always"}))
    with pytest.raises(ValueError, match=r"no worker task injects faults in phase 'score_range'; the phases are .*score-range"):
        inject_fault("score-range", "range-1")
    monkeypatch.delenv(FAULT_ENV)
    inject_fault("no-such-phase", "x")  # no fault asked for: nothing is checked, nothing costs


def _injected_phases(path: Path) -> set[str]:
    calls = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) == "inject_fault"]
    return {call.args[0].value for call in calls}


def test_the_declared_phases_are_the_tasks_and_the_documented_ones():
    assert set(FAULT_PHASES) == _injected_phases(_ROOT / "evalcore" / "distributed" / "tasks.py")
    docs = (_ROOT / "docs" / "reliability.md").read_text()
    table = docs[docs.index("## Faults on the workers"):]
    for phase in FAULT_PHASES:
        assert f"| `{phase}` |" in table, phase
    assert os.environ.get(FAULT_ENV) is None


def test_a_range_whose_homed_rows_lack_their_weights_is_refused(tmp_path):
    """With a field bootstrap a range reads its homed rows' weights from their homes' partitions:
    the weights given it back in its rows file; one partition's file lost names the range and
    the partition; no range file from part of the weights."""
    from evalcore.api import check_options

    rows = _rows(30, 9, 0)
    home = np.where(np.arange(30) % 3 == 0, -1, 1000 + np.arange(30))
    extra = {"home": home, "home_key": np.where(home[:, None] >= 0, np.array([[32633, 0, 0]]), 0), "unit": np.zeros((30, 0), np.int64)}
    path = storage.write_summary(tmp_path / "run-level-scores.arrays", {**rows.as_arrays(), **extra})
    out = tmp_path / "scores"
    counts, homed = score_split_task(str(path), np.empty(0), str(out), "32633_0_0", True)
    assert counts == [30] and homed == {(32633, 0, 0): 20}
    options = check_options(bootstrap=4, score_column="s")
    a = storage.read_summary(out / "homed-32633_0_0-32633_0_0.arrays")
    weights = np.arange(20 * 4, dtype=np.uint8).reshape(20, 4) % 5
    halves = [(f"32633_0_{i}", str(storage.write_summary(out / f"weights-32633_0_{i}-0.arrays", {"pos": a["pos"][s], "weights": weights[s]})),
               len(a["pos"][s])) for i, s in enumerate([slice(0, 12), slice(12, 20)])]
    splits = [("32633_0_0", str(out / "split-32633_0_0-0.arrays"), 30)]
    score_range_task(splits, str(out / "range-0.arrays"), N_GROUPS, 0, halves, options)
    got = storage.read_summary(out / "range-0.arrays")
    by_pos = dict(zip(a["pos"].tolist(), weights.tolist()))
    assert [by_pos.get(p, [1] * 4) for p in got["pos"].tolist()] == got["weights"].tolist()  # homeless: 1
    Path(halves[1][1]).unlink()
    with pytest.raises(PartitionMissingError, match=r"score range 0: the weights file of partition 32633_0_1 \(.*weights-32633_0_1-0\.arrays\) cannot be read"):
        score_range_task(splits, str(out / "range-1.arrays"), N_GROUPS, 0, halves, options)
    with pytest.raises(PartitionMissingError, match=r"score range 0: 20 predictions with a home but 12 weighed"):
        score_range_task(splits, str(out / "range-1.arrays"), N_GROUPS, 0, halves[:1], options)
    assert not (out / "range-1.arrays").exists()


def test_a_weights_file_weighing_a_row_twice_or_a_homeless_row_is_refused(tmp_path):
    """The weights files' rows must add up to the range's homed rows, each weighed once:
    two files sharing rows (as many rows in all) or a file weighing a homeless prediction
    are refused, naming the range, the partition and the file."""
    from evalcore.api import check_options

    rows = _rows(30, 9, 0)
    home = np.where(np.arange(30) % 3 == 0, -1, 1000 + np.arange(30))
    extra = {"home": home, "home_key": np.where(home[:, None] >= 0, np.array([[32633, 0, 0]]), 0), "unit": np.zeros((30, 0), np.int64)}
    path = storage.write_summary(tmp_path / "run-level-scores.arrays", {**rows.as_arrays(), **extra})
    out = tmp_path / "scores"
    score_split_task(str(path), np.empty(0), str(out), "32633_0_0", True)
    options = check_options(bootstrap=4, score_column="s")
    homed_pos = storage.read_summary(out / "homed-32633_0_0-32633_0_0.arrays")["pos"]
    homeless_pos = rows.pos[home < 0]
    splits = [("32633_0_0", str(out / "split-32633_0_0-0.arrays"), 30)]

    def files(*parts):
        return [(f"32633_0_{i}", str(storage.write_summary(out / f"w-{len(parts)}-{i}.arrays",
                                                          {"pos": p, "weights": np.ones((len(p), 4), np.uint8)})), len(p))
                for i, p in enumerate(parts)]

    twice = files(homed_pos[:12], homed_pos[4:12])  # 20 rows in all, 8 of them twice
    with pytest.raises(PartitionMissingError, match=r"score range 0: the weights file of partition 32633_0_1 \(.*w-2-1\.arrays\) weighs predictions"):
        score_range_task(splits, str(out / "range-0.arrays"), N_GROUPS, 0, twice, options)
    homeless = files(np.concatenate([homed_pos[:19], homeless_pos[:1]]))
    with pytest.raises(PartitionMissingError, match=r"score range 0: the weights file of partition 32633_0_0 .* weighs predictions"):
        score_range_task(splits, str(out / "range-0.arrays"), N_GROUPS, 0, homeless, options)
    assert not (out / "range-0.arrays").exists()
