"""Distributed == single-process on seam-heavy data, on a real LocalCluster of processes.

Counts and keys must be equal, floats equal to 1e-9 relative, and the bootstrap
intervals identical to the last bit (the same draws, summed in the same order).
"""

from __future__ import annotations

import copy
import math

import pytest

import evalcore
from evalcore.api import check_options
from evalcore.distributed import storage
from evalcore.distributed.reliability import PartitionMissingError
from evalcore.distributed.runner import (
    merge_phase,
    pairs_phase,
    plan_phase,
    prepare_phase,
    resolve_phase,
    sums_phase,
)
from evalcore.distributed.staging import stage_layer, start_run

from .per_workers import TWO_WORKERS_UNLESS_SLOW
from .seams import seam_layers, strip_layers

OPTIONS = dict(strata="stratum", size_bins="auto", bootstrap=40, boundary_tolerance_m=10.0)
TILE_SIZES = [2_000.0, 10_000.0, 10_000_000.0]


def differences(a: object, b: object, path: str = "", rtol: float = 1e-9) -> list[str]:
    """Every place where two metric dicts differ beyond ``rtol`` (NaN equals NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys differ: {sorted(set(a) ^ set(b))}"]
        out: list[str] = []
        for k in a:
            # Bootstrap intervals are the same draws: hold them to a tighter tolerance.
            out += differences(a[k], b[k], f"{path}.{k}", 0.0 if k == "ci" else rtol)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{path}[{i}]", rtol)
        return out
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return []
        close = a == b if rtol == 0.0 else math.isclose(a, b, rel_tol=rtol, abs_tol=1e-12)
        return [] if close else [f"{path}: {a!r} != {b!r}"]
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r} != {b!r}"]
    return []


@pytest.fixture(scope="module")
def layers():
    return seam_layers(seed=3)


@pytest.fixture(scope="module")
def expected(layers):
    predicted, reference = layers
    return {tile: evalcore.evaluate(predicted, reference, partition_size_m=tile, **OPTIONS) for tile in TILE_SIZES}


@pytest.fixture(scope="module")
def single_process():
    """``evalcore.evaluate`` in this process, each distinct call made once per module.

    The cluster tests run once per cluster size; the single-process result they are
    compared with does not depend on it. Called as ``single_process(name, layers, **options)``
    with ``name`` naming the layers (they are not hashable).
    """
    cache: dict[tuple, dict] = {}

    def evaluate(name: str, layers: tuple, **options: object) -> dict:
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = evalcore.evaluate(*layers, **options)
        return copy.deepcopy(cache[key])  # a test may change what it is given

    return evaluate


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"{n}workers")
def client(request, local_clients):
    """A real LocalCluster of 1, 2 or 3 worker processes (the session's, tests/conftest.py)."""
    return local_clients.get(request.param)


@pytest.mark.parametrize("partition_size_m", TILE_SIZES, ids=lambda t: f"tile{int(t)}m")
def test_distributed_equals_single_process(layers, expected, client, partition_size_m, tmp_path):
    predicted, reference = layers
    result = evalcore.evaluate(
        predicted, reference, partition_size_m=partition_size_m, client=client, workdir=tmp_path / "work", **OPTIONS
    )
    assert differences(result, expected[partition_size_m]) == []
    # The medians and quantiles are selected over the partitions' sorted files: the same
    # elements as the single process's, so equal to the last bit, overall and per group.
    assert differences(order_statistics(result), order_statistics(expected[partition_size_m]), rtol=0.0) == []


ORDER_KEYS = ("median_area_ha", "hausdorff_median_m", "boundary_distance_median_m", "iou_distribution", "boundary_iou_median")
"""The summary keys that are order statistics of per-field values (not sums)."""


def order_statistics(metrics: dict) -> dict:
    """The :data:`ORDER_KEYS` of the overall entry and of every stratum and size class."""
    entries = {"overall": metrics, **{f"{g}.{k}": e for g in ("per_stratum", "per_size_class") for k, e in metrics.get(g, {}).items()}}
    out = {name: {k: e[k] for k in ORDER_KEYS if k in e} for name, e in entries.items()}
    assert out["overall"].keys() >= {"median_area_ha", "hausdorff_median_m", "iou_distribution"}
    return out


WORKER_OPTIONS = dict(strata="stratum", size_bins="auto", boundary_tolerance_m=10.0, matching="one_to_one")
"""Options the resolve runs on the workers with (no bootstrap, no run-level family)."""


@pytest.fixture(scope="module")
def expected_worker_resolve(layers):
    predicted, reference = layers
    return {tile: evalcore.evaluate(predicted, reference, partition_size_m=tile, **WORKER_OPTIONS) for tile in TILE_SIZES}


# make test: 2 workers (the matrix above already resolves on 1, 2 and 3 workers: its field bootstrap runs there).
@pytest.mark.parametrize("client", TWO_WORKERS_UNLESS_SLOW, indirect=True)
@pytest.mark.parametrize("partition_size_m", TILE_SIZES, ids=lambda t: f"tile{int(t)}m")
def test_resolve_on_the_workers_equals_single_process_exactly(layers, expected_worker_resolve, client, partition_size_m, tmp_path):
    """The resolve by connected components on the workers: every key to the last bit."""
    from evalcore.distributed.runner import resolves_on_workers

    assert resolves_on_workers(check_options(**{k: v for k, v in WORKER_OPTIONS.items() if k not in ("strata", "size_bins")}))
    predicted, reference = layers
    result = evalcore.evaluate(
        predicted, reference, partition_size_m=partition_size_m, client=client, workdir=tmp_path / "work", **WORKER_OPTIONS
    )
    assert differences(result, expected_worker_resolve[partition_size_m], rtol=0.0) == []
    # The phase ran on the workers: every partition wrote its resolve output.
    assert len(list((tmp_path / "work" / "resolve").glob("by-*.done.json"))) >= (8 if partition_size_m == 2_000.0 else 1)


@pytest.mark.parametrize("client", TWO_WORKERS_UNLESS_SLOW, indirect=True)
def test_block_bootstrap_resolved_on_the_workers_equals_single_process_exactly(layers, single_process, client, tmp_path):
    """A tile bootstrap: the resolves make no draws, the homeless task and the sums tasks draw
    from the run's units and the seed; intervals and every key to the last bit."""
    predicted, reference = layers
    options = dict(WORKER_OPTIONS, bootstrap=40, bootstrap_unit="tile")
    expected = single_process("seams", layers, partition_size_m=2_000.0, **options)
    work = tmp_path / "work"
    result = evalcore.evaluate(predicted, reference, partition_size_m=2_000.0, client=client, workdir=work, **options)
    assert list(work.glob("resolve/by-*.done.json"))  # resolved on the workers
    assert differences(result, expected, rtol=0.0) == []
    assert result["bootstrap"]["ci"]


@pytest.mark.parametrize("client", TWO_WORKERS_UNLESS_SLOW, indirect=True)
@pytest.mark.parametrize("partition_size_m", [2_000.0, 1_000.0], ids=lambda t: f"tile{int(t)}m")
def test_field_bootstrap_resolved_on_the_workers_equals_single_process_exactly(layers, client, partition_size_m, tmp_path):
    """The field bootstrap (the default unit): the components tasks report their (pool,
    reporting tile) groups' sizes, the client makes each group's counts, each sums task
    ranks its fields among the positions of the partitions sharing its groups. Several
    pools (strata), groups spanning 3+ partitions; intervals and every key to the last bit."""
    import numpy as np

    from evalcore.distributed.runner import resolves_on_workers

    predicted, reference = layers
    options = dict(WORKER_OPTIONS, bootstrap=40)
    assert resolves_on_workers(check_options(bootstrap=40, boundary_tolerance_m=10.0))
    expected = evalcore.evaluate(predicted, reference, partition_size_m=partition_size_m, **options)
    work = tmp_path / "work"
    result = evalcore.evaluate(predicted, reference, partition_size_m=partition_size_m, client=client, workdir=work, **options)
    assert list(work.glob("resolve/by-*.done.json"))  # resolved on the workers
    assert differences(result, expected, rtol=0.0) == []
    assert result["bootstrap"]["ci"] and len(result["per_stratum"]) >= 2
    # The groups really span partitions: some (pool, tile) is held by 3 or more of them.
    holders: dict = {}
    for path in work.glob("resolve/positions/*.arrays"):
        a = storage.read_summary(path, ("pool", "tile"))
        for group in set(map(tuple, np.column_stack([a["pool"], a["tile"]]).tolist())):
            holders[group] = holders.get(group, 0) + 1
    assert len({p for p, *_ in holders}) >= 2 and max(holders.values()) >= 3


@pytest.mark.parametrize("client", TWO_WORKERS_UNLESS_SLOW, indirect=True)
@pytest.mark.parametrize("matching", ["many_to_one", "max_weight"])
@pytest.mark.parametrize("partition_size_m", [2_000.0, 1_000.0], ids=lambda t: f"tile{int(t)}m")
def test_components_spanning_many_partitions_resolve_exactly(single_process, client, partition_size_m, matching, tmp_path):
    """Long thin predictions chained over rows of fields: components across 3+ partitions,
    resolved once by their owner from every partition's pairs; every key to the last bit."""
    from evalcore.engine.components import seam_plan  # noqa: F401  (the union under test)

    predicted, reference = strip_layers(seed=5)
    options = dict(WORKER_OPTIONS, matching=matching)
    expected = single_process("strips-5", (predicted, reference), partition_size_m=partition_size_m, **options)
    work = tmp_path / "work"
    result = evalcore.evaluate(predicted, reference, partition_size_m=partition_size_m, client=client, workdir=work, **options)
    assert differences(result, expected, rtol=0.0) == []
    # Some resolve borrowed pairs from 2+ other partitions: a component spanning 3+ partitions.
    import json

    spans = [len(json.loads(p.read_text())["shares"]) for p in work.glob("resolve/by-*/listing.json")]
    assert max(spans) >= 3


def test_per_prediction_table_from_the_workers_resolve_equals_the_clients(tmp_path, local_clients, monkeypatch):
    """--predictions-out: the resolves write the per-prediction frame's parts; the table equals
    the one of the resolve on the client (a bootstrap of 0 on both, the routing forced)."""
    import geopandas
    import pandas as pd

    from evalcore.distributed import runner

    predicted, reference = strip_layers(seed=2, n_x=30, n_y=4)
    pred_path, ref_path = tmp_path / "pred.parquet", tmp_path / "ref.parquet"
    predicted.to_parquet(pred_path)
    reference.to_parquet(ref_path)
    options = check_options(partition_size_m=1_000.0, boundary_tolerance_m=10.0)
    tables = {}
    for where in ("workers", "client"):
        if where == "client":
            monkeypatch.setattr(runner, "resolves_on_workers", lambda *a, **k: False)
        runner.run_distributed(str(pred_path), str(ref_path), local_clients.get(2), options, workdir=tmp_path / where,
                               predictions_dir=tmp_path / f"preds-{where}")
        parts = sorted((tmp_path / f"preds-{where}").glob("*.parquet"))
        tables[where] = pd.concat([pd.DataFrame(geopandas.read_parquet(p)) for p in parts]).set_index("pred_index").sort_index()
    assert (tmp_path / "workers" / "resolve").exists() and not (tmp_path / "client" / "resolve").exists()
    pd.testing.assert_frame_equal(tables["workers"], tables["client"], check_exact=True)


def _point_estimates(metrics: object) -> object:
    """The metrics without what the bootstrap draws decide (the draws depend on the partitions)."""
    if isinstance(metrics, dict):
        return {k: _point_estimates(v) for k, v in metrics.items() if k not in ("ci", "ci_n_undefined", "bootstrap")}
    if isinstance(metrics, list):
        return [_point_estimates(v) for v in metrics]
    return metrics


def test_tile_size_changes_no_point_estimate(expected):
    # Sums are exact (evalcore.exact), so every point estimate, the IoU sweep's included,
    # is the same to the last bit however the fields are split into partitions.
    whole = _point_estimates(expected[10_000_000.0])
    for tile in (2_000.0, 10_000.0):
        assert differences(_point_estimates(expected[tile]), whole, rtol=0.0) == []
    assert expected[2_000.0]["bootstrap"]["ci"] != expected[10_000_000.0]["bootstrap"]["ci"]  # other partitions, other draws


def test_seams_are_present(layers):
    """The data really has the seams the differential test is about."""
    from evalcore.prepare import prepare_layer

    predicted, reference = layers
    ref = prepare_layer(reference, "reference", partition_size_m=2_000.0)
    pred = prepare_layer(predicted, "predicted", partition_size_m=2_000.0)
    assert set(ref.utm_epsg) == {32612, 32613}
    ref_keys = set(zip(ref.utm_epsg, ref.partition_x, ref.partition_y))
    assert len(ref_keys) >= 8
    # A prediction that overlaps reference fields of three partitions.
    import shapely

    tree = shapely.STRtree(ref.geoms_ea)
    i_pred, i_ref = tree.query(pred.geoms_ea, predicate="intersects")
    keys_per_pred: dict[int, set] = {}
    for p, r in zip(i_pred, i_ref):
        keys_per_pred.setdefault(int(p), set()).add((ref.utm_epsg[r], ref.partition_x[r], ref.partition_y[r]))
    assert max(len(k) for k in keys_per_pred.values()) >= 3


@pytest.fixture(scope="module")
def phases_before_merge(layers, client, tmp_path_factory):
    """The phases up to the merge, run once per cluster; each missing-partition case takes one output away and puts it back."""
    predicted, reference = layers
    work = tmp_path_factory.mktemp("work")
    options = check_options(bootstrap=0, partition_size_m=2_000.0)
    setup = start_run(stage_layer(predicted, "predicted", work), stage_layer(reference, "reference", work), options, work)
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    resolved = resolve_phase(setup, index, pairs_phase(client, setup, index))
    sums = sums_phase(client, setup, index, plan, resolved)
    return work, (setup, index, plan, resolved, sums)


@pytest.mark.parametrize("output", ["sums", "sorted values"])
def test_missing_partition_fails_the_merge(phases_before_merge, tmp_path, output):
    import shutil

    work, (setup, index, plan, resolved, sums) = phases_before_merge
    pattern = "*.values.arrays" if output == "sorted values" else "*_*_*[0-9].arrays"
    victim = sorted((work / "sums").glob(pattern))[3]
    aside = shutil.move(victim, tmp_path / victim.name)
    try:
        with pytest.raises(PartitionMissingError, match=victim.name.split(".")[0]):
            merge_phase(setup, index, plan, resolved, sums)
    finally:
        shutil.move(aside, victim)  # whole again for the other case


def test_a_client_that_is_not_the_default_runs_the_phases(layers, expected, local_clients, tmp_path, monkeypatch):
    """``evaluate(client=Client(..., set_as_default=False))``: the phases wait on that
    client's loop, not on a default client (there is none here)."""
    import weakref

    import distributed.client
    from distributed import Client

    predicted, reference = layers
    address = local_clients.get(2).scheduler.address
    # The session's pooled clients hidden: no default client to fall back on.
    monkeypatch.setattr(distributed.client, "_global_clients", weakref.WeakValueDictionary())
    with Client(address, set_as_default=False) as own:
        assert distributed.client._get_global_client() is None
        result = evalcore.evaluate(
            predicted, reference, partition_size_m=2_000.0, client=own, workdir=tmp_path / "work", **OPTIONS
        )
    assert differences(result, expected[2_000.0]) == []
