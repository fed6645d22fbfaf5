"""Several models against one reference (SPEC 6.9; seed 000, example 20).

* Three models compared equal three separate runs, key for key (every model's summary
  in the comparison is :func:`evalcore.evaluate` of that layer), and the table's rows
  are those summaries' values and intervals.
* The deltas are paired: each model against the baseline equals the two-model paired
  comparison (:func:`evalcore.compare.compare`) of the same two layers, entry for entry;
  a model against itself has every delta 0 with the interval [0, 0].
* The block bootstrap draws over the union of every model's units.
* The command line: ``-p NAME=PATH`` repeated and ``--baseline``; two models with the
  same name, an unknown baseline, one model alone: exit status 2 and one line naming
  the option.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import evalcore
from evalcore.cli import main
from evalcore.compare import compare, compare_models
from evalcore.synth import make_layers, make_site_layers
from tests.common import assert_metrics_equal, cli_in_process

N_RESAMPLES = 40
OPTIONS = {"strata": "stratum", "size_bins": "auto", "bootstrap": N_RESAMPLES, "score_column": "score",
           "precision_targets": [0.9], "aoi_id_column": "aoi_id"}
LEVELS = ("per_stratum", "per_size_class", "per_tile", "per_aoi")


def perturbed(pred, seed: int, *, drop: float, shrink: float):
    """A second model: some predictions dropped, the rest shrunk about their centroid, scores jittered."""
    rng = np.random.default_rng(seed)
    keep = rng.random(len(pred)) >= drop
    out = pred[keep].copy()
    out["geometry"] = out.geometry.scale(shrink, shrink, origin="centroid")
    out["score"] = np.clip(out["score"].to_numpy() + rng.normal(0.0, 0.1, len(out)), 0.0, 1.0)
    return out


@pytest.fixture(scope="module")
def layers():
    pred, ref = make_layers(400, seed=7)
    aoi, _ = make_site_layers(ref, pred, seed=7)
    models = {"a": pred, "b": perturbed(pred, 1, drop=0.1, shrink=0.9), "c": perturbed(pred, 2, drop=0.25, shrink=0.8)}
    return models, ref, aoi


@pytest.fixture(scope="module")
def result(layers):
    models, ref, aoi = layers
    return compare_models(models, ref, baseline="a", aoi=aoi, **OPTIONS)


def test_three_models_equal_three_separate_runs(layers, result):
    models, ref, aoi = layers
    assert list(result["summaries"]) == ["a", "b", "c"]
    for name, layer in models.items():
        alone = evalcore.evaluate(layer, ref, aoi=aoi, **OPTIONS)
        assert_metrics_equal(result["summaries"][name], alone, rel=0.0)


def test_the_models_differ(result):
    f1 = {name: row["f1"]["value"] for name, row in result["table"].items()}
    assert f1["a"] > f1["b"] > f1["c"]
    assert result["deltas"]["c"]["overall"]["recall"]["ci"][1] < 0


def test_the_table_rows_are_the_summaries(result):
    assert result["baseline"] == "a" and list(result["table"]) == ["a", "b", "c"]
    assert result["metrics"] == ["precision", "recall", "f1", "iou_mean", "pq", "sq", "rq", "dice_mean", "area_bias",
                                 "matched_area_bias", "ap50", "ap75", "ap50_95", "aurc"]
    for name, row in result["table"].items():
        summary = result["summaries"][name]
        assert row["count_predicted"] == summary["count_predicted"]
        for m in result["metrics"]:
            assert row[m]["value"] == summary[m]
            assert row[m]["ci"] == summary["bootstrap"]["ci"][m]
        assert row["worst_f1"]["per_stratum"] == summary["worst"]["per_stratum"]["f1"]
        assert row["worst_f1"]["tiles"] == summary["tiles"]["worst"]["f1"]
        assert row["worst_f1"]["aois"] == summary["aois"]["worst"]["f1"]


def _rename(entry: object) -> object:
    """A two-model delta entry with the names of the several-model layout."""
    if isinstance(entry, dict):
        names = {"candidate": "model", "incumbent": "baseline"}
        return {names.get(k, k): _rename(v) for k, v in entry.items()}
    if isinstance(entry, list):
        return [_rename(v) for v in entry]
    return entry


@pytest.mark.parametrize("name", ["b", "c"])
def test_deltas_against_the_baseline_are_the_paired_comparison(layers, result, name):
    models, ref, aoi = layers
    pair = compare(models[name], models["a"], ref, aoi=aoi, **OPTIONS)
    deltas = result["deltas"][name]
    assert set(deltas) == {"overall", *LEVELS, "worse_units"}
    for key in deltas:
        assert deltas[key] == _rename(pair[key]), key


def test_no_delta_of_the_baseline_with_itself(result):
    assert set(result["deltas"]) == {"b", "c"}


def _entries(deltas: dict):
    for metric, entry in deltas["overall"].items():
        yield "overall", None, metric, entry
    for level in LEVELS:
        for unit, group in deltas.get(level, {}).items():
            for metric, entry in group.items():
                if isinstance(entry, dict):
                    yield level, unit, metric, entry


@pytest.mark.parametrize("unit", ["field", "tile"])
def test_a_model_against_itself_has_zero_deltas_with_zero_width_intervals(layers, unit):
    models, ref, aoi = layers
    result = compare_models({"a": models["a"], "b": models["b"], "a again": models["a"].copy()}, ref, aoi=aoi,
                            bootstrap_unit=unit, **OPTIONS)
    deltas = result["deltas"]["a again"]
    n_defined = 0
    for level, key, metric, entry in _entries(deltas):
        where = (level, key, metric)
        assert entry["model"] == entry["baseline"], where
        if entry["model"] is None:
            assert entry["delta"] is None, where
            continue
        n_defined += 1
        assert entry["delta"] == 0.0, where
        drawn = {"tile": "per_tile"}.get(unit)
        assert entry["ci"] == ([None, None] if level == drawn else [0.0, 0.0]), where
    assert n_defined > 100 and deltas["worse_units"] == []
    assert {"ap50", "aurc"} <= set(deltas["overall"])


def test_block_units_are_the_union_of_every_model(layers):
    models, ref, _ = layers
    # A model with predictions in a tile none of the others reach adds a unit.
    far = models["a"].copy()
    far["geometry"] = far.geometry.translate(0.0, -600_000.0)  # EPSG:5070 metres: well away from every reference field
    options = {k: v for k, v in OPTIONS.items() if k != "aoi_id_column"}
    without = compare_models({"a": models["a"], "b": models["b"]}, ref, bootstrap_unit="tile", **options)
    with_far = compare_models({"a": models["a"], "b": models["b"], "far": far}, ref, bootstrap_unit="tile", **options)
    assert with_far["bootstrap"]["n_units"] > without["bootstrap"]["n_units"]
    for name in ("a", "b"):
        assert with_far["summaries"][name]["bootstrap"]["n_units"] == with_far["bootstrap"]["n_units"]


@pytest.mark.parametrize(
    ("models", "kwargs", "message"),
    [
        ([("a", 0), ("a", 1)], {}, "two models are named 'a'"),
        ([("a", 0)], {}, "at least two models"),
        ({"a": 0, "b": 1}, {"baseline": "z"}, "baseline 'z' is not one of the models"),
        ({"a": 0, "": 1}, {}, "non-empty name"),
    ],
)
def test_library_refuses_bad_models(models, kwargs, message):
    with pytest.raises(ValueError, match=message):
        compare_models(models, None, bootstrap=10, **kwargs)


def test_library_needs_resamples(layers):
    models, ref, _ = layers
    with pytest.raises(ValueError, match="bootstrap"):
        compare_models({"a": models["a"], "b": models["b"]}, ref)


# --------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(layers, tmp_path_factory):
    models, ref, _ = layers
    d = tmp_path_factory.mktemp("models")
    out = {"ref": str(d / "ref.parquet"), "dir": d}
    ref.to_parquet(out["ref"])
    for name, layer in models.items():
        out[name] = str(d / f"{name}.parquet")
        layer.to_parquet(out[name])
    return out


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalcore: error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_cli_three_models(files, layers, capsys):
    out = files["dir"] / "models.json"
    status = main(["compare", "-p", f"a={files['a']}", "-p", f"b={files['b']}", "-p", f"c={files['c']}", "--baseline", "b",
                   "-r", files["ref"], "--strata-column", "stratum", "--bootstrap", "20", "--score-column", "score", "-o", str(out)])
    printed = capsys.readouterr().out
    assert status == 0
    result = json.loads(out.read_text())
    assert result["baseline"] == "b" and set(result["deltas"]) == {"a", "c"}
    assert list(result["models"]) == ["a", "b", "c"] and all(files[n] in result["models"][n] for n in "abc")
    # The library call on the same files gives the same numbers.
    models, ref, _ = layers
    lib = compare_models({n: files[n] for n in "abc"}, files["ref"], baseline="b", strata="stratum", bootstrap=20, score_column="score")
    assert json.loads(json.dumps(lib["table"], allow_nan=False)) == result["table"]
    assert "3 models against one reference, baseline b" in printed and "a − b:" in printed and "c − b:" in printed


def test_cli_a_bare_path_is_named_by_itself(files):
    out = files["dir"] / "bare.json"
    proc = cli_in_process("compare", "-p", files["a"], "-p", files["b"], "-r", files["ref"], "--bootstrap", "10", "-o", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert list(result["table"]) == [files["a"], files["b"]] and result["baseline"] == files["a"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["-p", "x=A", "-p", "x=B"], ["-p/--predicted", "two models are named 'x'"]),
        (["-p", "x=A"], ["-p/--predicted", "two or more models"]),
        (["-p", "x=A", "-p", "y=B", "--baseline", "z"], ["--baseline 'z'", "'x', 'y'"]),
        (["-p", "x=A", "-p", "y=B", "-i", "B"], ["-i/--incumbent", "one -p"]),
        (["-p", "x=A", "-p", "y=B", "--pred-layer", "z=L"], ["--pred-layer", "'z'"]),
        (["-p", "x="], ["names no path"]),
    ],
)
def test_cli_bad_models(files, argv, words):
    paths = {"A": files["a"], "B": files["b"]}
    argv = [next((a.replace(k, v) for k, v in paths.items() if a.endswith(k)), a) for a in argv]
    out = files["dir"] / "bad.json"
    proc = cli_in_process("compare", *argv, "-r", files["ref"], "--bootstrap", "10", "-o", str(out))
    line = _one_line_error(proc)
    for word in words:
        assert word in line, (word, line)
    assert not out.exists()


def test_cli_bad_precision_targets_in_compare(files):
    out = files["dir"] / "bad.json"
    proc = cli_in_process("compare", "-p", f"a={files['a']}", "-p", f"b={files['b']}", "-r", files["ref"], "--bootstrap", "10",
                   "--score-column", "score", "--precision-targets", "0.9,0.8", "-o", str(out))
    assert "precision-targets" in _one_line_error(proc)
    assert not out.exists()
