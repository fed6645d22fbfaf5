"""Classes (SPEC 6.10) on a real LocalCluster of processes equal the single-process run, bit for bit.

The classes block is computed centrally from the pairs, the matching and one class per
row, like AP: every key (the confusion matrix in counts and hectares, accuracies,
kappa, the per-class and macro keys, per-class AP) and every interval must equal what
``evalcore.evaluate`` returns in one process with the same ``partition_size_m``. The
layers come from ``evalcore synth``'s generator, whose predictions carry a predicted
crop confused between similar crops, with some classes blanked on both sides.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import evalcore
from evalcore.synth import make_layers

from .per_workers import TWO_WORKERS_UNLESS_SLOW, WORKERS, cluster_run, single_process_runs

OPTIONS = {"class_column": "crop", "score_column": "score", "bootstrap": 20, "strata": "stratum"}


@pytest.fixture(scope="module")
def layers():
    predicted, reference = make_layers(300, seed=5)
    rng = np.random.default_rng(0)
    reference = reference.assign(crop=reference["crop"].where(rng.uniform(size=len(reference)) > 0.05, None))
    predicted = predicted.assign(
        crop=predicted["crop"].where(rng.uniform(size=len(predicted)) > 0.05, None),
        score=np.round(predicted["score"].to_numpy(), 2),
    )
    return predicted, reference


@pytest.fixture(scope="module")
def expected(layers):
    predicted, reference = layers
    return single_process_runs(predicted, reference, OPTIONS)


@pytest.fixture(scope="module", params=WORKERS, ids=lambda n: f"{n}workers")
def client(request, local_clients):
    return local_clients.get(request.param)


def test_the_data_exercises_the_class_keys(expected):
    for r in expected.values():
        c = r["classes"]
        assert len(c["classes"]) >= 3
        assert c["count_reference_unclassified"] > 0 and c["count_predicted_unclassified"] > 0
        counts = np.array(c["confusion"]["counts"])
        assert counts.trace() < counts.sum()  # some confusion
        assert 0.0 < c["kappa"] < 1.0
        assert all("ci" in e for e in c["per_class"].values()) and "ap50_95" in c["macro"]["ci"]


@pytest.mark.parametrize("client", TWO_WORKERS_UNLESS_SLOW, indirect=True)  # the classes resolve on the client: one cluster in make test
def test_distributed_classes_equal_single_process(layers, expected, client, tmp_path):
    predicted, reference = layers
    result, partition = cluster_run(client, predicted, reference, OPTIONS, tmp_path / "work")
    single = expected[partition]
    assert result["classes"] == single["classes"]  # computed centrally from the same pairs and draws: to the bit
    assert (result["class_column"], result["pred_class_column"]) == ("crop", "crop")


@pytest.mark.parametrize("client", [2], indirect=True, ids=["2workers"])
def test_distributed_from_files_with_another_predicted_column(layers, client, tmp_path):
    """Layer files read in chunks on the workers, the predictions' classes in their own column."""
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    predicted, reference = layers
    predicted = predicted.rename(columns={"crop": "crop_pred"})
    pred_path, ref_path = tmp_path / "pred.parquet", tmp_path / "ref.parquet"
    predicted.to_parquet(pred_path)
    reference.to_parquet(ref_path)
    options = {**{k: v for k, v in OPTIONS.items() if k != "strata"}, "pred_class_column": "crop_pred"}
    result = run_distributed(
        str(pred_path), str(ref_path), client, check_options(partition_size_m=20_000.0, **options),
        strata="stratum", workdir=tmp_path / "work", chunk_rows=64, frame_dir=tmp_path / "fields", predictions_dir=tmp_path / "preds",
    )
    tables = evalcore.evaluate_tables(pred_path, ref_path, partition_size_m=20_000.0, strata="stratum", **options)
    assert result["classes"] == tables.summary["classes"]
    assert result["pred_class_column"] == "crop_pred"
    # the tables' class columns, written by the workers
    fields = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "fields").glob("*.parquet"))]).set_index("ref_index").sort_index()
    preds = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "preds").glob("*.parquet"))]).set_index("pred_index").sort_index()
    assert fields["class"].equals(tables.fields["class"].loc[fields.index])
    for column in ("class", "home_ref_class"):
        assert preds[column].equals(tables.predictions[column].loc[preds.index]), column
    assert fields["class"].notna().sum() > 0.9 * len(fields) and preds["home_ref_class"].notna().any()
