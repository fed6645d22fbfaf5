"""The evidence bundle (SPEC 6.8) on a run directory built without the flow, and
``evalcore verify`` finding a tampered output, input or amendment chain."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from evalcore import evaluate_tables
from evalcore.evidence import (
    BUNDLE_FILES,
    EVIDENCE_MANIFEST,
    BundleInputs,
    InputLayer,
    verify,
    write_bundle,
    write_evidence_manifest,
)
from evalcore.writers import to_jsonable, write_json
from tests.common import cli_in_process, layer, naive_sha256, strict_json, strips

REF = [(0, 1), (2, 3), (4, 5), (6, 7)]
PRED = [(0, 1), (2.5, 3.5), (10, 11)]


@pytest.fixture()
def run_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    ref = layer(strips(REF), index=[10, 11, 12, 13], crop=["a", "a", "b", "b"])
    pred = layer(strips(PRED))
    ref.to_parquet(data / "reference.parquet")
    parts = data / "predicted"
    parts.mkdir()
    pred.iloc[:2].to_parquet(parts / "part-0.parquet")
    pred.iloc[2:].to_parquet(parts / "part-1.parquet")
    t = evaluate_tables(str(parts), str(data / "reference.parquet"), strata="crop")
    out = tmp_path / "run"
    out.mkdir()
    metrics = to_jsonable(t.summary)
    write_json(out / "metrics.json", metrics)
    t.tiles.to_parquet(out / "tiles.parquet")
    parameters = {"strata_column": "crop", "iou_threshold": 0.5, "bootstrap_seed": 42, "output_dir": str(out),
                  "size_bins": [0.0, 1.0, float("inf")]}
    given = BundleInputs(
        inputs=[InputLayer("reference", str(data / "reference.parquet")), InputLayer("predicted", str(parts))],
        parameters=parameters,
        metric_parameters={"strata_column": "crop", "iou_threshold": 0.5, "size_bins": [0.0, 1.0, float("inf")]},
        labels={"model": "sha256:abc", "imagery": "S2 2026-11"},
        run_id="run-1",
    )
    write_bundle(out, metrics, given)
    return out, data, metrics


def test_every_file_of_spec_6_8_is_there_and_valid_json_without_nan(run_dir):
    out, _, _ = run_dir
    for name in BUNDLE_FILES:
        assert isinstance(strict_json(out / name), dict), name


def test_families_not_asked_for_say_so(run_dir):
    out, _, _ = run_dir
    for name in ("aoi-metrics.json", "calibration-metrics.json", "acceptance-gates.json", "latency-and-reliability.json"):
        assert strict_json(out / name) == {"state": "not_configured"}, name
    assert strict_json(out / "stratified-metrics.json")["state"] == "computed"
    assert strict_json(out / "tile-metrics.json")["state"] == "computed"


def test_evidence_manifest_hashes_every_other_file(run_dir):
    out, _, _ = run_dir
    manifest = strict_json(out / EVIDENCE_MANIFEST)
    listed = {e["path"]: e["sha256"] for e in manifest["files"]}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {EVIDENCE_MANIFEST}
    assert set(listed) == on_disk
    for path, sha in listed.items():
        assert naive_sha256(out / path) == sha, path
    assert manifest["version"] == 1 and manifest["amends"] is None


def test_input_manifest_hashes_each_part(run_dir):
    out, data, _ = run_dir
    inputs = {e["role"]: e for e in strict_json(out / "input-manifest.json")["inputs"]}
    ref = inputs["reference"]
    assert ref["kind"] == "file" and ref["rows"] == 4 and ref["crs"] == "EPSG:32613"
    assert ref["sha256"] == naive_sha256(data / "reference.parquet")
    pred = inputs["predicted"]
    assert pred["kind"] == "directory of parts" and pred["rows"] == 3
    assert [(p["path"], p["rows"]) for p in pred["parts"]] == [("part-0.parquet", 2), ("part-1.parquet", 1)]
    for part in pred["parts"]:
        assert part["sha256"] == naive_sha256(data / "predicted" / part["path"])


def test_contract_identity(run_dir):
    out, _, metrics = run_dir
    contract = strict_json(out / "evaluation-contract.json")
    assert contract["run_id"] == "run-1" and contract["seed"] == 42
    assert contract["labels"] == {"imagery": "S2 2026-11", "model": "sha256:abc"}
    assert contract["input_manifest_sha256"] == naive_sha256(out / "input-manifest.json")
    text = '{"iou_threshold":0.5,"size_bins":[0.0,1.0,Infinity],"strata_column":"crop"}'
    assert contract["parameters_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert contract["parameters"]["size_bins"] == [0.0, 1.0, "inf"]  # JSON has no infinity
    assert contract["matching_policy"]["iou_threshold"] == metrics["iou_threshold"]
    assert contract["matching_policy"]["iou_thresholds_swept"][0] == 0.5
    assert contract["publishable"] is True
    assert contract["evaluator"]["name"] == "evalcore" and contract["versions"]["python"]


def test_error_taxonomy_file_matches_the_summary(run_dir):
    out, _, metrics = run_dir
    tax = strict_json(out / "error-taxonomy.json")
    # R0 TP; R1 overlapped by P1 (IoU 1/3); R2 and R3 missed; P2 background.
    assert tax["overall"] == {
        "TP": 1, "M-FP-BACKGROUND": 1, "M-FP-DUPLICATE": 0, "M-FP-LOCALISATION": 1, "M-FN-MISSED": 2,
        "M-FN-LOCALISATION": 1, "merge": 0, "split": 0, "M-BOUNDARY": None,
    }
    assert tax["per_stratum"]["b"]["M-FN-MISSED"] == 2 and tax["per_stratum"]["a"]["M-FP-LOCALISATION"] == 1
    (tile,) = tax["per_tile"].values()
    assert tile["M-FP-BACKGROUND"] == 1 and tile["TP"] == 1


def test_verify_intact(run_dir):
    out, _, _ = run_dir
    found = verify(out)
    assert found.ok and not found.unlisted and found.checked == len(BUNDLE_FILES) - 1 + 2
    assert cli_in_process("verify", str(out)).returncode == 0


def test_verify_finds_a_changed_output(run_dir):
    out, _, _ = run_dir
    path = out / "object-metrics.json"
    content = json.loads(path.read_text())
    content["f1"] = 0.99
    path.write_text(json.dumps(content))
    found = verify(out)
    assert not found.ok and found.changed == ["object-metrics.json"]
    result = cli_in_process("verify", str(out))
    assert result.returncode == 1 and "changed: object-metrics.json" in result.stdout


def test_verify_finds_a_changed_input_part(run_dir):
    out, data, _ = run_dir
    with open(data / "predicted" / "part-1.parquet", "ab") as handle:
        handle.write(b"\0")
    found = verify(out)
    assert not found.ok and not found.changed and len(found.inputs_changed) == 1
    assert found.inputs_changed[0].startswith("predicted ") and found.inputs_changed[0].endswith("part-1.parquet")
    assert verify(out, check_inputs=False).ok


def test_verify_finds_a_deleted_output_and_an_added_file(run_dir):
    out, _, _ = run_dir
    (out / "tiles.parquet").unlink()
    (out / "extra.txt").write_text("not evidence")
    found = verify(out)
    assert found.missing == ["tiles.parquet"] and found.unlisted == ["extra.txt"] and not found.ok


def test_an_amendment_adds_a_version_and_links_its_predecessor(run_dir):
    out, _, _ = run_dir
    first = naive_sha256(out / EVIDENCE_MANIFEST)
    write_json(out / "acceptance-gates.v2.json", {"decision": "pass"})
    second = write_evidence_manifest(out, reason="gates amendment", adds=["acceptance-gates.v2.json"])
    assert second.name == "evidence-manifest.v2.json"
    manifest = strict_json(second)
    assert manifest["amends"] == {"file": EVIDENCE_MANIFEST, "sha256": first}
    assert [e["path"] for e in manifest["changes"]] == ["acceptance-gates.v2.json"]  # only what it adds
    assert naive_sha256(out / EVIDENCE_MANIFEST) == first  # never overwritten
    assert verify(out).ok
    # Changing the first manifest breaks the chain (and leaves the files it sealed unaccounted for).
    (out / EVIDENCE_MANIFEST).write_text("{}")
    found = verify(out)
    assert any(p.endswith(f"({EVIDENCE_MANIFEST} changed)") for p in found.chain) and "metrics.json" in found.unlisted
    assert not found.ok


def test_gate_on_a_bundle_writes_an_amended_manifest(run_dir, tmp_path):
    out, _, _ = run_dir
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - id: G-F1\n    metric: f1\n    op: '>='\n    threshold: 0.1\n", encoding="utf-8")
    result = cli_in_process("gate", str(out), str(gates))
    assert result.returncode == 0, result.stderr
    assert (out / "acceptance-gates.v2.json").exists() and (out / "evidence-manifest.v2.json").exists()
    assert strict_json(out / "acceptance-gates.json") == {"state": "not_configured"}
    assert verify(out).ok


def test_verify_bad_run_directory(tmp_path):
    result = cli_in_process("verify", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "is not a run directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli_in_process("verify", str(empty))
    assert result.returncode == 2 and "evidence-manifest.json" in result.stderr


def test_an_input_changed_during_the_run_is_refused(run_dir, tmp_path):
    out, data, metrics = run_dir
    fresh = tmp_path / "again"
    shutil.copytree(out, fresh)
    for name in BUNDLE_FILES:
        (fresh / name).unlink()
    given = BundleInputs(
        inputs=[InputLayer("reference", str(data / "reference.parquet"))], parameters={}, metric_parameters={},
        expected_sha256={"reference": "0" * 64},
    )
    with pytest.raises(Exception, match="changed while the run read it"):
        write_bundle(fresh, metrics, given)
    assert not (fresh / EVIDENCE_MANIFEST).exists()


def test_gates_reach_every_tile_through_the_tile_layer(run_dir, tmp_path):
    out, _, _ = run_dir
    gates = tmp_path / "tiles.yaml"
    gates.write_text("gates:\n  - id: G-TILES\n    metric: tiles.*.recall\n    op: '>='\n    threshold: 0.2\n"
                     "  - id: G-TILES-SUPPORTED\n    metric: tiles.*.recall\n    op: '>='\n    threshold: 0.2\n    min_support: 5\n",
                     encoding="utf-8")
    # The tile below min_support is reported, not blocking (below_support: report, the default).
    assert cli_in_process("gate", str(out), str(gates)).returncode == 0
    rules = strict_json(out / "acceptance-gates.v2.json")["rules"]
    # One tile holds the four fields: recall 1/4 passes; it has 4 fields, below a minimum of 5.
    (tile,) = [r for r in rules if r["id"] == "G-TILES"]
    assert tile["state"] == "pass" and tile["observed"] == 0.25 and tile["support"] == 4
    (supported,) = [r for r in rules if r["id"] == "G-TILES-SUPPORTED"]
    assert supported["state"] == "not_evaluable" and "below the minimum" in supported["reason"] and supported["blocks"] is False
