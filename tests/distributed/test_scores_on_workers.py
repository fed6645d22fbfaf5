"""The scores' run-level values on the workers (issue 29): the distributed run equals the single process to the bit.

The scores' AP, PR curves, best F1, operating point and risk-coverage
are computed by score ranges on the workers (``evalcore.distributed.runner._scores_on_workers``):
the COCO true positives per connected component in the resolves, the curves per score
range from the counts of the ranges ahead. On the seam-heavy layers (components crossing
partitions and UTM zones, strata with a missing value), with scores rounded to two
decimals so that many predictions tie across partitions, every scores key must equal the
single-process run's exactly, for 1, 2 and 3 workers and two partition sides, and the
exact PR curve file too. With a bootstrap (field and block units) the replicates' AP and
aurc are computed by score ranges too, each prediction weighed as drawn: the intervals
(percentile and bias-corrected, per stratum) equal the single process's to the bit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import evalcore
from evalcore.api import check_options
from evalcore.distributed.runner import resolves_on_workers

from .seams import seam_layers

OPTIONS = dict(strata="stratum", size_bins="auto", score_column="score", score_threshold=0.55, precision_targets=[0.6, 0.8],
               calibration_bins=8, boundary_tolerance_m=10.0)
PARTITIONS = [2_000.0, 10_000.0]
SCORE_KEYS = ("ap50", "ap75", "ap50_95", "ap_per_threshold", "ap_iou_thresholds", "pr_curve", "best_f1", "operating_point",
              "aurc", "risk_coverage", "calibration")


@pytest.fixture(scope="module")
def layers():
    predicted, reference = seam_layers(seed=3)
    rng = np.random.default_rng(29)
    return predicted.assign(score=np.round(rng.random(len(predicted)), 2)), reference


@pytest.fixture(scope="module")
def expected(layers):
    predicted, reference = layers
    return {p: evalcore.evaluate_tables(predicted, reference, partition_size_m=p, **OPTIONS) for p in PARTITIONS}


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"{n}workers")
def client(request, local_clients):
    """A real LocalCluster of 1, 2 or 3 worker processes (the session's, tests/conftest.py)."""
    return local_clients.get(request.param)


def test_scores_resolve_on_the_workers_with_or_without_a_bootstrap():
    options = {k: v for k, v in OPTIONS.items() if k not in ("strata", "size_bins")}
    assert resolves_on_workers(check_options(**options))
    assert resolves_on_workers(check_options(**options, bootstrap=10))
    assert resolves_on_workers(check_options(**options, bootstrap=10, bootstrap_unit="tile"))
    assert not resolves_on_workers(check_options(**options, class_column="klass"))  # the classes stay on the client


def test_the_data_exercises_the_score_keys(layers, expected):
    predicted, _ = layers
    assert len(np.unique(predicted["score"])) < len(predicted) / 2  # many ties
    for tables in expected.values():
        m = tables.summary
        assert 0.0 < m["ap50"] < 1.0 and m["risk_coverage"]["per_stratum"] and m["operating_point"]
        assert len(tables.pr_curve) > 20


@pytest.mark.parametrize("partition_size_m", PARTITIONS, ids=lambda t: f"tile{int(t)}m")
def test_scores_on_the_workers_equal_single_process(layers, expected, client, partition_size_m, tmp_path):
    from evalcore.distributed.runner import run_distributed

    predicted, reference = layers
    options = {k: v for k, v in OPTIONS.items() if k not in ("strata", "size_bins")}
    curve_path = tmp_path / "pr.parquet"
    work = tmp_path / "work"
    result = run_distributed(predicted, reference, client, check_options(partition_size_m=partition_size_m, **options),
                             strata=reference["stratum"], size_bins="auto", workdir=work, pr_curve_out=curve_path)
    single = expected[partition_size_m]
    # Several score ranges computed it: their PR curve parts are in the work directory (the
    # ranges' own files are removed once read).
    assert len(list((work / "resolve" / "scores").glob("pr-0-*.parquet"))) >= 2
    assert not list((work / "resolve" / "scores").glob("range-*.arrays"))
    for key in SCORE_KEYS:
        assert key in result, key
        assert result[key] == single.summary[key], key
    for name, entry in single.summary["per_stratum"].items():
        assert result["per_stratum"][name]["calibration"] == entry["calibration"], name
    curve = pd.read_parquet(curve_path)
    pd.testing.assert_frame_equal(curve, single.pr_curve.reset_index(drop=True), check_exact=True)


@pytest.mark.parametrize("client", [2], indirect=True, ids=["2workers"])
def test_a_rerun_reusing_the_resolves_gives_the_same_scores(layers, expected, client, tmp_path):
    """A second run into the same work directory reuses the finished resolves (their score rows
    included) and computes the score ranges anew: the same keys."""
    predicted, reference = layers
    options = {**OPTIONS, "partition_size_m": PARTITIONS[0]}
    first = evalcore.evaluate(predicted, reference, client=client, workdir=tmp_path / "work", **options)
    listing = next((tmp_path / "work" / "resolve").glob("by-*/listing.json"))
    stamp = listing.stat().st_mtime_ns
    again = evalcore.evaluate(predicted, reference, client=client, workdir=tmp_path / "work", **options)
    assert listing.stat().st_mtime_ns == stamp  # reused, not rewritten
    for key in SCORE_KEYS:
        assert again[key] == first[key] == expected[PARTITIONS[0]].summary[key], key


BOOTSTRAP_CASES = [dict(bootstrap=50, ap_interval="bc"), dict(bootstrap=50, bootstrap_unit="tile", tile_km=2.0)]
INTERVAL_KEYS = ("ap50", "ap75", "ap50_95", "aurc")


@pytest.fixture(scope="module")
def single_bootstrap(layers):
    """The single process's summary of each bootstrap case (made once for both clients)."""
    made = {}

    def of(i: int) -> dict:
        if i not in made:
            made[i] = evalcore.evaluate_tables(*layers, **OPTIONS, **BOOTSTRAP_CASES[i], partition_size_m=PARTITIONS[0]).summary
        return made[i]

    return of


@pytest.mark.parametrize("client", [pytest.param(1, id="1worker", marks=pytest.mark.slow), pytest.param(2, id="2workers")], indirect=True)  # 1 worker: make slow
@pytest.mark.parametrize("case", [0, 1], ids=["field", "tile"])
def test_bootstrap_intervals_on_the_workers_equal_single_process(layers, single_bootstrap, client, case, tmp_path):
    predicted, reference = layers
    options = {**OPTIONS, **BOOTSTRAP_CASES[case], "partition_size_m": PARTITIONS[0]}
    single = single_bootstrap(case)
    work = tmp_path / "work"
    result = evalcore.evaluate(predicted, reference, client=client, workdir=work, **options)
    # Resolved on the workers, the replicates by two score ranges or more; their
    # intermediates (split, homed, weight, range and replicate files) are removed once read,
    # the PR curve's parts stay for the publication.
    assert list((work / "resolve").glob("by-*/run-level-scores.arrays"))
    scores_dir = work / "resolve" / "scores"
    assert len(list(scores_dir.glob("pr-0-*.parquet"))) >= 2
    assert {p.name.split("-")[0] for p in scores_dir.iterdir()} == {"pr"}
    ci = single["bootstrap"]["ci"]
    assert ci["ap50"][0] < ci["ap50"][1] and ci["aurc"][0] < ci["aurc"][1] and single["risk_coverage"]["per_stratum"]
    for key in (*SCORE_KEYS, "ap_interval"):
        assert result.get(key) == single.get(key), key
    for key in INTERVAL_KEYS:
        assert result["bootstrap"]["ci"][key] == ci[key], key
        assert result["bootstrap"]["n_undefined"].get(key) == single["bootstrap"]["n_undefined"].get(key), key
    for name, entry in single["risk_coverage"]["per_stratum"].items():
        assert "ci" in entry and result["risk_coverage"]["per_stratum"][name] == entry, name
