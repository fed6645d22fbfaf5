"""A paired comparison on a cluster resolves on the workers and equals the single process's.

The two models' block units differ (each has predictions moved away from every reference
field, into tiles of its own), so the draws are made over the union of both runs' units:
on the workers each run's resolve is made once by connected components, and only its
``homeless-paired`` task draws again over the union. Every entry equals the in-process
:func:`evalcore.compare.compare` to the last bit.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from evalcore.compare import compare, compare_on_cluster

from .seams import seam_layers
from .test_differential import differences

OPTIONS = dict(strata="stratum", size_bins="auto", boundary_tolerance_m=10.0, bootstrap=30, bootstrap_unit="tile", tile_km=1.0,
               partition_size_m=2_000.0)


def _moved(predicted, rows: slice, dlat: float):
    """The layer with ``rows`` moved ``dlat`` degrees north (about 5.5 km per 0.05): homeless, in tiles of no field."""
    out = predicted.copy()
    out.loc[out.index[rows], "geometry"] = out.geometry.iloc[rows].translate(0.0, dlat)
    return out


def _paired_layers(tmp_path) -> dict[str, str]:
    """The seam layers as a reference and two models, each with predictions moved into tiles of its own."""
    predicted, reference = seam_layers(seed=3)
    paths = {}
    for name, frame in (("cand", _moved(predicted, slice(0, 12), 0.05)), ("inc", _moved(predicted, slice(40, 50), -0.05)),
                        ("ref", reference)):
        paths[name] = str(tmp_path / f"{name}.parquet")
        frame.to_parquet(paths[name])
    return paths


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_tile_bootstrap_comparison_resolves_on_the_workers_and_equals_single_process(local_clients, tmp_path, caplog):
    paths = _paired_layers(tmp_path)
    single = compare(paths["cand"], paths["inc"], paths["ref"], **OPTIONS)
    work = tmp_path / "work"
    with caplog.at_level(logging.INFO, logger="evalcore.distributed.runner"):
        result = compare_on_cluster(paths["cand"], paths["inc"], paths["ref"], local_clients.get(2), workdir=work, **OPTIONS)
    # The union has units neither run has alone: both runs drew again, on the workers.
    n_units = single["bootstrap"]["n_units"]
    own = [s["bootstrap"]["n_units"] for s in (single["candidate_summary"], single["incumbent_summary"])]
    assert own == [n_units, n_units] and n_units > 10
    redrawn = [r.getMessage() for r in caplog.records if "drawn again over the" in r.getMessage()]
    assert len(redrawn) == 2 and all(f"over the {n_units} units" in m for m in redrawn), redrawn
    for model in ("candidate", "incumbent"):
        assert list(work.glob(f"{model}/resolve/by-*.done.json")), model  # resolved on the workers
    assert not list(work.glob("*/resolved/*.arrays"))  # no client resolve's sums inputs
    # Every entry but the models' labels (a path on the cluster, the layer's source in process).
    assert differences(*({k: v for k, v in r.items() if k not in ("candidate", "incumbent")} for r in (result, single)), rtol=0.0) == []
    assert result["overall"]["f1"]["ci"][0] < result["overall"]["f1"]["ci"][1]
    assert np.isfinite(result["overall"]["recall"]["delta"])


def test_tile_bootstrap_comparison_with_scores_equals_single_process(local_clients, tmp_path, caplog):
    """With scores, each prediction's weight in a resample is its unit's count in the union of
    units: the whole resolve on the workers is made again over the union (its finished
    resolve tasks reused), not only the homeless task; the AP deltas and intervals to the bit."""
    paths = _paired_layers(tmp_path)
    options = {**OPTIONS, "score_column": "score", "size_bins": None}
    single = compare(paths["cand"], paths["inc"], paths["ref"], **options)
    work = tmp_path / "work"
    with caplog.at_level(logging.INFO, logger="evalcore.distributed.runner"):
        result = compare_on_cluster(paths["cand"], paths["inc"], paths["ref"], local_clients.get(2), workdir=work, **options)
    assert not [r for r in caplog.records if "drawn again over the" in r.getMessage()]  # not the homeless task alone
    assert not list(work.glob("*/resolved/*.arrays"))  # resolved on the workers, no client resolve's sums inputs
    assert single["overall"]["ap50"]["ci"] is not None and single["overall"]["ap50"]["ci"][0] is not None
    assert differences(*({k: v for k, v in r.items() if k not in ("candidate", "incumbent")} for r in (result, single)), rtol=0.0) == []


def test_field_bootstrap_comparison_per_tile_intervals_equal_single_process(local_clients, tmp_path, monkeypatch):
    """With ``bootstrap_unit="field"`` every tile's delta has an interval, made from each run's
    tiles' replicates, which a run on a cluster holds a block of tiles at a time (blocks of 3
    tiles here, so the blocks and the comparison's blocks of the union cut across each other):
    every entry to the bit."""
    monkeypatch.setattr("evalcore.levels.UNITS_PER_BLOCK", 3)
    monkeypatch.setattr("evalcore.compare.UNITS_PER_BLOCK", 3)
    paths = _paired_layers(tmp_path)
    options = {**OPTIONS, "bootstrap_unit": "field", "tile_km": 0.5}
    single = compare(paths["cand"], paths["inc"], paths["ref"], **options)
    result = compare_on_cluster(paths["cand"], paths["inc"], paths["ref"], local_clients.get(2), workdir=tmp_path / "work", **options)
    with_ci = [u for u, entry in single["per_tile"].items() if entry["f1"].get("ci", [None])[0] is not None]
    assert len(single["per_tile"]) > 10 and len(with_ci) > 5, (len(single["per_tile"]), len(with_ci))
    assert differences(*({k: v for k, v in r.items() if k not in ("candidate", "incumbent")} for r in (result, single)), rtol=0.0) == []
