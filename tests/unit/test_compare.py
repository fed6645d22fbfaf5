"""Paired comparison (SPEC 6.6): a candidate and an incumbent on the same resamples.

* A layer compared with itself: every delta exactly 0 with the interval [0, 0] (overall,
  per stratum, per size class, per tile, per AOI), for every bootstrap unit, and no
  worse unit.
* A candidate that drops every prediction of one AOI: that AOI is worse (recall; F1
  when the candidate keeps a few of its predictions), no other AOI is.
* Bad input through ``evalcore compare`` (and ``evaluate``): one line, exit status 2,
  never a traceback; too few block units leave the intervals undefined; layers in
  different CRSs give the result of layers in one CRS.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from pyproj import CRS

from evalcore import evaluate_frame
from evalcore.cli import main
from evalcore.compare import compare
from evalcore.synth import make_layers, make_site_layers
from tests.common import grid_layers, cli_in_process

N_RESAMPLES = 60
LEVELS = ("per_stratum", "per_size_class", "per_tile", "per_aoi")
EA = "EPSG:6933"


def _entries(result: dict):
    """(level, unit, metric, entry) of every delta of a comparison."""
    for metric, entry in result["overall"].items():
        yield "overall", None, metric, entry
    for level in LEVELS:
        for unit, entry in result.get(level, {}).items():
            for metric, value in entry.items():
                if isinstance(value, dict):
                    yield level, unit, metric, value


def _worse(result: dict, level: str) -> set[tuple[str, str]]:
    return {(w["unit"], w["metric"]) for w in result["worse_units"] if w["level"] == level}


def _first_aoi(frame, aoi) -> np.ndarray:
    """The first AOI (by position) containing each row's equal-area centroid, else None."""
    centroids = frame.geometry.to_crs(EA).centroid
    areas = aoi.to_crs(EA)
    out = np.full(len(frame), None, dtype=object)
    for geom, key in zip(areas.geometry, areas["aoi_id"]):
        hit = centroids.within(geom).to_numpy() & np.array([v is None for v in out])
        out[hit] = key
    return out


# --------------------------------------------------------------------------------------
# 3. A layer against itself


@pytest.fixture(scope="module")
def synth():
    pred, ref = make_layers(400, seed=3)
    aoi, _ = make_site_layers(ref, pred, seed=3)
    return pred, ref, aoi


@pytest.mark.parametrize("unit", ["field", "tile", "aoi"])
def test_a_layer_against_itself_has_zero_deltas_with_zero_width_intervals(synth, unit):
    pred, ref, aoi = synth
    result = compare(
        pred, pred.copy(), ref, strata="stratum", size_bins="auto", bootstrap=N_RESAMPLES, bootstrap_unit=unit,
        aoi=aoi, aoi_id_column="aoi_id", score_column="score",
    )
    assert result["bootstrap"]["unit"] == unit and result["bootstrap"]["paired"] is True
    assert result["bootstrap"]["n_units"] >= 2
    for level in LEVELS:
        assert result[level], level
    assert {"precision", "recall", "f1", "iou_mean", "ap50", "ap75", "ap50_95"} <= set(result["overall"])
    n_defined = 0
    for level, key, metric, entry in _entries(result):
        where = (level, key, metric, entry)
        assert entry["candidate"] == entry["incumbent"], where
        if entry["candidate"] is None:
            assert entry["delta"] is None, where
            assert entry["ci"] in ([None, None], [0.0, 0.0]), where
        else:
            n_defined += 1
            assert entry["delta"] == 0.0, where
            # The drawn unit's own intervals are undefined under a block bootstrap (it comes whole).
            drawn = {"tile": "per_tile", "aoi": "per_aoi"}.get(unit)
            assert entry["ci"] == ([None, None] if level == drawn else [0.0, 0.0]), where
    assert n_defined > 100
    assert result["worse_units"] == []
    # Both runs are the same run.
    assert json.dumps(result["candidate_summary"], sort_keys=True, default=str) == json.dumps(
        result["incumbent_summary"], sort_keys=True, default=str
    )


# --------------------------------------------------------------------------------------
# 4. worse_units: the candidate drops one AOI


@pytest.fixture(scope="module")
def one_aoi_dropped():
    """600 fields; X is the AOI with the most fields; the candidate is the incumbent
    without the predictions whose equal-area centroid lies in X."""
    pred, ref = make_layers(600, seed=5)
    aoi, _ = make_site_layers(ref, pred, seed=5)
    ref_aoi, pred_aoi = _first_aoi(ref, aoi), _first_aoi(pred, aoi)
    x, n_x = Counter(a for a in ref_aoi if a is not None).most_common(1)[0]
    assert n_x >= 50
    candidate = pred[pred_aoi != x]
    assert 50 <= len(pred) - len(candidate) < len(pred) / 4
    frame = evaluate_frame(pred, ref, aoi=aoi, aoi_id_column="aoi_id", tile_km=10.0)
    return SimpleNamespace(pred=pred, ref=ref, aoi=aoi, candidate=candidate, x=x, pred_aoi=pred_aoi, frame=frame)


OPTIONS = {"strata": "stratum", "bootstrap": 200, "bootstrap_unit": "field", "tile_km": 10.0, "aoi_id_column": "aoi_id"}


@pytest.fixture(scope="module")
def dropped_result(one_aoi_dropped):
    case = one_aoi_dropped
    return compare(case.candidate, case.pred, case.ref, aoi=case.aoi, **OPTIONS)


def test_the_dropped_aoi_is_worse_in_recall(one_aoi_dropped, dropped_result):
    x, frame = one_aoi_dropped.x, one_aoi_dropped.frame
    result = dropped_result
    entry = result["per_aoi"][x]
    assert entry["support"] == int((frame["aoi"] == x).sum())
    recall = entry["recall"]
    assert recall["candidate"] == 0.0 and recall["incumbent"] > 0.5
    assert recall["delta"] == pytest.approx(-recall["incumbent"])
    assert recall["ci"][0] <= recall["delta"] <= recall["ci"][1] < 0
    assert (x, "recall") in _worse(result, "per_aoi")
    # No prediction is left in X: the candidate's precision there is undefined.
    assert entry["precision"]["candidate"] is None and entry["precision"]["delta"] is None
    # Overall the candidate is worse too.
    assert result["overall"]["recall"]["ci"][1] < 0


def test_no_other_aoi_is_worse(one_aoi_dropped, dropped_result):
    x = one_aoi_dropped.x
    result = dropped_result
    assert {unit for unit, _ in _worse(result, "per_aoi")} == {x}
    others = [key for key in result["per_aoi"] if key != x]
    assert len(others) >= 4
    for key in others:
        for metric in ("precision", "recall", "f1"):
            e = result["per_aoi"][key][metric]
            assert e["candidate"] == e["incumbent"], (key, metric)
            if e["delta"] is not None:
                assert e["delta"] == 0.0 and e["ci"] == [0.0, 0.0], (key, metric, e)


def test_worse_tiles_and_strata_hold_fields_of_the_dropped_aoi(one_aoi_dropped, dropped_result):
    ref, x, frame = one_aoi_dropped.ref, one_aoi_dropped.x, one_aoi_dropped.frame
    in_x = frame["aoi"] == x
    tiles_of_x = {f"{e}_{tx}_{ty}" for e, tx, ty in frame.loc[in_x, ["utm_epsg", "tile_x", "tile_y"]].itertuples(index=False)}
    worse_tiles = {unit for unit, _ in _worse(dropped_result, "per_tile")}
    assert worse_tiles and worse_tiles <= tiles_of_x
    strata_of_x = set(ref.loc[frame.index[in_x], "stratum"].dropna())
    worse_strata = {unit for unit, _ in _worse(dropped_result, "per_stratum")}
    assert worse_strata <= strata_of_x
    for w in dropped_result["worse_units"]:
        assert w["ci"][1] < 0 and w["delta"] < 0 and w["metric"] in ("precision", "recall", "f1"), w


def test_the_dropped_aoi_has_no_f1_delta(one_aoi_dropped, dropped_result):
    # SPEC 6.3 (issue 13): a unit's F1 is null when its precision and recall are both 0 or
    # undefined; the candidate has nothing in X (precision undefined, recall 0), so its F1
    # there is null and so is the delta: X is worse in recall, not listed for F1.
    x = one_aoi_dropped.x
    assert dropped_result["per_aoi"][x]["f1"]["candidate"] is None
    assert dropped_result["per_aoi"][x]["f1"]["delta"] is None
    assert (x, "f1") not in _worse(dropped_result, "per_aoi")
    assert (x, "recall") in _worse(dropped_result, "per_aoi")


def test_a_candidate_keeping_a_few_predictions_of_the_aoi_is_worse_in_f1(one_aoi_dropped):
    pred, ref, aoi, x, pred_aoi = (getattr(one_aoi_dropped, k) for k in ("pred", "ref", "aoi", "x", "pred_aoi"))
    in_x = np.flatnonzero(pred_aoi == x)
    keep = np.ones(len(pred), dtype=bool)
    keep[in_x] = False
    keep[in_x[::6]] = True  # every sixth prediction of X stays
    result = compare(pred[keep], pred, ref, aoi=aoi, **OPTIONS)
    entry = result["per_aoi"][x]
    assert 0 < entry["recall"]["candidate"] < entry["recall"]["incumbent"] / 3
    f1 = entry["f1"]
    assert f1["candidate"] is not None and f1["delta"] < 0 and f1["ci"][1] < 0
    assert {(x, "recall"), (x, "f1")} <= _worse(result, "per_aoi")
    assert {unit for unit, _ in _worse(result, "per_aoi")} == {x}


def test_one_missed_field_of_a_large_tile_is_not_significant_with_the_tile_unit():
    pred, ref = grid_layers(120, shifts=(0.0,), spacing_m=300.0, n_cols=12)  # 120 exact matches, 3.6 km x 3 km
    far_pred, far_ref = grid_layers(60, shifts=(0.0,), spacing_m=300.0, n_cols=10)
    shift = 40_000.0  # a second block of 60 fields in other tiles
    far_ref = far_ref.set_geometry(far_ref.translate(shift, 0.0))
    far_pred = far_pred.set_geometry(far_pred.translate(shift, 0.0))
    reference = pd.concat([ref, far_ref], ignore_index=True)
    incumbent = pd.concat([pred, far_pred], ignore_index=True)
    candidate = incumbent.drop(index=len(pred))  # the first field of the far block is missed
    result = compare(candidate, incumbent, reference, bootstrap=N_RESAMPLES, bootstrap_unit="tile", tile_km=10.0)
    assert result["bootstrap"]["n_units"] >= 2
    assert result["overall"]["recall"]["delta"] == pytest.approx(-1 / 180)
    assert _worse(result, "per_tile") == set()


# --------------------------------------------------------------------------------------
# 6. Bad input through the command line

SHIFTED_ALBERS = CRS.from_proj4(
    "+proj=aea +lat_0=23 +lon_0=-96 +lat_1=29.5 +lat_2=45.5 +x_0=3000000 +y_0=1000000 +datum=NAD83 +units=m +no_defs"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Layer files: the synthetic layers (predictions in EPSG:5070), a candidate with
    half of the predictions, the incumbent in other CRSs, one without scores, and a
    grid whose 40 fields all lie in one 10 km tile."""
    d = tmp_path_factory.mktemp("compare-cli")
    pred, ref = make_layers(150, seed=2, bad_rows=False)
    aoi, _ = make_site_layers(ref, pred, seed=2)
    out = {name: str(d / f"{name}.gpkg") for name in (
        "pred", "ref", "aoi", "cand", "pred_shifted", "pred_4326", "no_score", "one_tile_pred", "one_tile_ref", "one_tile_cand"
    )}
    pred.to_file(out["pred"])
    ref.to_file(out["ref"])
    aoi.to_file(out["aoi"])
    pred.iloc[::2].to_file(out["cand"])
    pred.to_crs(SHIFTED_ALBERS).to_file(out["pred_shifted"])
    pred.to_crs("EPSG:4326").to_file(out["pred_4326"])
    pred.drop(columns="score").to_file(out["no_score"])
    g_pred, g_ref = grid_layers(40)  # 40 fields within 6 km x 600 m: one 10 km tile
    g_pred.to_file(out["one_tile_pred"])
    g_ref.to_file(out["one_tile_ref"])
    g_pred.iloc[5:].to_file(out["one_tile_cand"])
    out["dir"] = str(d)
    return out


def _one_line_error(status: int, stderr: str) -> str:
    assert status == 2, (status, stderr)
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalcore: error: "), stderr
    return lines[0]


def _main(capsys, *argv: str) -> tuple[int, str]:
    """``evalcore ARGV`` in this process: the exit status and what went to standard error."""
    capsys.readouterr()
    status = main(list(argv))
    return status, capsys.readouterr().err


def test_cli_aoi_unit_without_an_aoi_layer(files, tmp_path, capsys):
    out = tmp_path / "out.json"
    # What a user sees: a process of its own.
    proc = cli_in_process("compare", "-p", files["cand"], "-i", files["pred"], "-r", files["ref"], "--bootstrap", "20",
                   "--bootstrap-unit", "aoi", "-o", str(out))
    line = _one_line_error(proc.returncode, proc.stderr)
    assert "aoi" in line.lower() and "AOI layer" in line
    assert not out.exists()
    status, err = _main(capsys, "evaluate", "-p", files["pred"], "-r", files["ref"], "--bootstrap", "20",
                        "--bootstrap-unit", "aoi", "-o", str(out))
    assert "AOI layer" in _one_line_error(status, err)
    assert not out.exists()


def test_cli_compare_without_resamples(files, tmp_path, capsys):
    out = tmp_path / "delta.json"
    status, err = _main(capsys, "compare", "-p", files["cand"], "-i", files["pred"], "-r", files["ref"], "-o", str(out))
    line = _one_line_error(status, err)
    assert "resamples" in line and "--bootstrap" in line
    assert not out.exists()


def test_cli_incumbent_without_the_score_column(files, tmp_path, capsys):
    out = tmp_path / "delta.json"
    status, err = _main(capsys, "compare", "-p", files["pred"], "-i", files["no_score"], "-r", files["ref"],
                        "--bootstrap", "20", "--score-column", "score", "-o", str(out))
    line = _one_line_error(status, err)
    assert files["no_score"] in line and "'score'" in line and "incumbent" in line
    assert not out.exists()


def _all_intervals(entry: object, path: str = ""):
    """(path, [lower, upper]) of every interval under a ``ci`` key."""
    if isinstance(entry, dict):
        for key, value in entry.items():
            if key == "ci" and isinstance(value, dict):
                for metric, bounds in value.items():
                    yield f"{path}.ci.{metric}", bounds
            elif key == "ci" and isinstance(value, list):
                yield f"{path}.ci", value
            else:
                yield from _all_intervals(value, f"{path}.{key}")
    elif isinstance(entry, list):
        for i, value in enumerate(entry):
            yield from _all_intervals(value, f"{path}[{i}]")


def test_cli_tile_unit_with_one_tile_leaves_the_intervals_undefined(files, tmp_path):
    out = tmp_path / "metrics.json"
    proc = cli_in_process("evaluate", "-p", files["one_tile_pred"], "-r", files["one_tile_ref"], "--bootstrap", "20",
                   "--bootstrap-unit", "tile", "--tile-km", "10", "-o", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads(out.read_text())
    block = result["bootstrap"]
    assert block["unit"] == "tile" and block["n_units"] == 1
    assert "only 1 tile unit" in block["note"] and "undefined" in block["note"]
    intervals = list(_all_intervals(result))
    assert len(intervals) > 20 and any(p.startswith(".bootstrap.ci.") for p, _ in intervals)
    for path, bounds in intervals:
        assert bounds == [None, None], (path, bounds)
    assert result["recall"] == pytest.approx(0.6)  # the point estimates are still there


def test_cli_compare_with_one_tile_leaves_the_intervals_undefined(files, tmp_path, capsys):
    out = tmp_path / "delta.json"
    status, err = _main(capsys, "compare", "-p", files["one_tile_cand"], "-i", files["one_tile_pred"], "-r",
                        files["one_tile_ref"], "--bootstrap", "20", "--bootstrap-unit", "tile", "--tile-km", "10",
                        "-o", str(out), "-q")
    assert status == 0, err
    result = json.loads(out.read_text())
    assert result["bootstrap"]["n_units"] == 1
    assert result["candidate_summary"]["bootstrap"]["note"]  # each run's own summary says so
    assert result["overall"]["recall"]["delta"] < 0
    assert "note" in result["bootstrap"]
    assert result["overall"]["recall"]["ci"] == [None, None]
    assert result["worse_units"] == []


def _close(a: object, b: object, path: str = "", *, rel: float = 1e-9, abs_: float = 1e-9) -> list[str]:
    """Every place two JSON values differ (floats to rel or abs)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _close(a[k], b[k], f"{path}.{k}", rel=rel, abs_=abs_)]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{path}[{i}]", rel=rel, abs_=abs_)]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=rel, abs_tol=abs_) else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b and type(a) is type(b) else [f"{path}: {a!r} != {b!r}"]


DELTA_KEYS = ("bootstrap", "metrics", "overall", "per_stratum", "per_size_class", "per_tile", "per_aoi", "worse_units")


def _cli_compare(files, candidate: str, incumbent: str, name: str) -> dict:
    """``evalcore compare`` (in this process) with strata, size classes and AOIs; its delta.json."""
    out = f"{files['dir']}/{name}.json"
    status = main(["compare", "-p", candidate, "-i", incumbent, "-r", files["ref"], "--bootstrap", "40",
                   "--strata-column", "stratum", "--size-bins", "auto", "--aoi", files["aoi"], "--aoi-id-column", "aoi_id",
                   "-o", out, "-q"])
    assert status == 0
    with open(out) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def one_crs_result(files):
    return _cli_compare(files, files["cand"], files["pred"], "one-crs")


def test_cli_incumbent_in_a_shifted_crs_gives_the_one_crs_result(files, one_crs_result):
    # The same polygons in an Albers projection with other false easting and northing:
    # a translation, so every value must come out the same (to rounding at 1e6 m).
    mixed = _cli_compare(files, files["cand"], files["pred_shifted"], "shifted")
    base = one_crs_result
    assert base["overall"]["recall"]["delta"] < 0 and base["per_tile"] and base["per_aoi"]
    differences = _close({k: mixed[k] for k in DELTA_KEYS}, {k: base[k] for k in DELTA_KEYS})
    for run in ("candidate_summary", "incumbent_summary"):
        differences += _close(mixed[run], base[run], run, rel=1e-9, abs_=1e-6)
    assert not differences, differences[:10]


_AREA_BASED = frozenset({"iou_mean", "pq", "sq", "dice_mean", "area_bias", "matched_area_bias"})
"""Compared metrics whose value moves with the areas (the counts-only ones do not)."""


def test_cli_incumbent_in_wgs84_gives_the_same_matching(files, one_crs_result):
    # EPSG:4326 edges are other lines than EPSG:5070 edges (areas move by ~1e-7): the
    # counts and every count-based rate and interval are the same; IoU, and what is made
    # of IoU or areas (pq, sq, Dice, the area biases), to 1e-6.
    mixed = _cli_compare(files, files["cand"], files["pred_4326"], "wgs84")
    base = one_crs_result
    differences = []
    for level, key, metric, entry in _entries(base):
        other = mixed["overall"][metric] if level == "overall" else mixed[level][key][metric]
        tol = 1e-6 if metric in _AREA_BASED else 1e-12
        differences += _close(other, entry, f"{level}.{key}.{metric}", rel=tol, abs_=tol)
    differences += _close(mixed["worse_units"], base["worse_units"], "worse_units", rel=1e-6, abs_=1e-6)
    summary = {k: v for k, v in base["incumbent_summary"].items() if k.startswith("count_")}
    assert summary and summary == {k: mixed["incumbent_summary"][k] for k in summary}
    assert not differences, differences[:10]
