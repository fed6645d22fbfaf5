"""``evalcore verify`` is not fooled (issue 27, item 9).

One run directory is built once: ``evalcore synth`` (300 reference fields), ``evalcore
evaluate`` with the per-field table as a directory of parts, the tile table and the
metrics, then the evidence bundle sealed by :func:`evalcore.evidence.write_bundle` (what
the flow's ``evidence`` and ``seal_evidence`` tasks do, without a Prefect server). Each
test tampers with a copy the way the issue did and runs ``evalcore verify`` as a user
would: exit status 1 ("NOT intact") and a line naming the file, quickly, every time.
The commands run in this process (:func:`tests.common.cli_in_process`, what they print
captured); one case runs ``evalcore verify`` in a subprocess, for the real exit status.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from evalcore.evidence import BundleInputs, InputLayer, write_bundle
from tests.common import cli_in_process, naive_sha256, run_cli

FIRST = "evidence-manifest.json"
GATES = "gates:\n  - id: G-F1\n    metric: f1\n    op: '>='\n    threshold: 0.1\n"


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> Path:
    """A sealed run directory (never tampered with: tests work on copies)."""
    tmp = tmp_path_factory.mktemp("verify-tamper")
    made = cli_in_process("synth", "--n-ref", "300", "--seed", "3", "--out", tmp / "data")
    assert made.returncode == 0, made.stderr
    out = tmp / "run"
    out.mkdir()
    data = tmp / "data"
    done = cli_in_process("evaluate", "-p", data / "predicted.parquet", "-r", data / "reference.parquet",
                          "--frame-out", f"{out / 'fields'}/", "--tiles-out", out / "tiles.parquet", "-o", out / "metrics.json")
    assert done.returncode == 0, done.stderr
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    given = BundleInputs(
        inputs=[InputLayer("reference", str(data / "reference.parquet")), InputLayer("predicted", str(data / "predicted.parquet"))],
        parameters={"iou_threshold": 0.5}, metric_parameters={"iou_threshold": 0.5}, run_id="tamper-1",
    )
    write_bundle(out, metrics, given)
    (out / "logs").mkdir()
    (out / "logs" / "run.log").write_text("a line of the run\n", encoding="utf-8")
    return out


@pytest.fixture()
def run(sealed, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(sealed, copy)
    return copy


def _verify(run: Path, *extra: str, real: bool = False):
    """``evalcore verify RUN --skip-inputs EXTRA``, in this process unless ``real`` (a subprocess).

    A verify that loops must fail the test, not hang it: each test has a timeout (the
    subprocess, 60 s of its own), and a verify that takes 60 s fails too.
    """
    if real:
        return run_cli("verify", str(run), "--skip-inputs", *extra, timeout=60)
    started = time.monotonic()
    result = cli_in_process("verify", run, "--skip-inputs", *extra)
    assert time.monotonic() - started < 60, "verify took over 60 s"
    return result


def _not_intact(result, *needles: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "NOT intact" in result.stdout, result.stdout
    for needle in needles:
        assert needle in result.stdout, (needle, result.stdout)


def _rows(run: Path) -> int:
    return len(pd.read_parquet(run / "fields"))


def _amend(run: Path, tmp_path: Path) -> None:
    """A real amendment: ``evalcore gate`` on the sealed run (acceptance-gates.vN.json, evidence-manifest.vN.json)."""
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES, encoding="utf-8")
    result = cli_in_process("gate", run, gates)
    assert result.returncode == 0, result.stderr


@pytest.mark.timeout(120)
def test_the_untouched_run_is_intact_and_prints_the_first_manifest_hash(run):
    result = _verify(run)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "intact" in result.stdout and "NOT" not in result.stdout
    assert naive_sha256(run / FIRST) in result.stdout  # so the user can store it


@pytest.mark.cli  # one verify in a subprocess
@pytest.mark.timeout(120)
def test_an_added_part_file_is_an_error(run):
    assert _rows(run) == 301  # synth's 300 fields and one more (see evalcore.synth)
    first = pd.read_parquet(run / "fields" / "part-0.parquet")
    first.iloc[:149].to_parquet(run / "fields" / "part-1.parquet")
    assert _rows(run) == 301 + 149  # what a reader of fields/ now gets
    _not_intact(_verify(run), "fields/part-1.parquet")
    # The same through the real command: its process's exit status and output.
    _not_intact(_verify(run, real=True), "fields/part-1.parquet")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["fields/part-1.tmp.parquet", "metrics.json.tmp", ".report.md.x.tmp"])
def test_an_added_file_with_tmp_in_its_name_is_an_error(run, name):
    source = run / "fields" / "part-0.parquet"
    shutil.copyfile(source, run / name)
    _not_intact(_verify(run), name)


@pytest.mark.timeout(120)
def test_a_file_edited_after_its_entry_was_removed_is_an_error(run):
    manifest = json.loads((run / FIRST).read_text(encoding="utf-8"))
    manifest["files"] = [e for e in manifest["files"] if e["path"] != "metrics.json"]
    (run / FIRST).write_text(json.dumps(manifest), encoding="utf-8")
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    metrics["f1"] = 0.99
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    _not_intact(_verify(run), "metrics.json")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("declared", [False, True], ids=["rehashing-every-file", "declaring-metrics-as-a-change"])
def test_a_forged_amendment_rehashing_an_edited_metrics_file_is_an_error(run, declared):
    first_sha = naive_sha256(run / FIRST)
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    metrics["f1"] = 0.99
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    forged = json.loads((run / FIRST).read_text(encoding="utf-8"))
    entry = {"path": "metrics.json", "sha256": naive_sha256(run / "metrics.json"), "bytes": (run / "metrics.json").stat().st_size}
    forged["files"] = [entry if e["path"] == "metrics.json" else e for e in forged["files"]] + [
        {"path": FIRST, "sha256": first_sha, "bytes": (run / FIRST).stat().st_size}]
    forged.update(version=2, reason="gates amendment", amends={"file": FIRST, "sha256": first_sha})
    if declared:
        forged["changes"] = [entry]
    (run / "evidence-manifest.v2.json").write_text(json.dumps(forged), encoding="utf-8")
    # The first manifest is untouched: metrics.json is still checked against it.
    _not_intact(_verify(run), "changed: metrics.json")


@pytest.mark.timeout(120)
def test_a_self_referencing_amendment_ends_quickly_with_an_error(run, tmp_path):
    _amend(run, tmp_path)
    path = run / "evidence-manifest.v2.json"
    amendment = json.loads(path.read_text(encoding="utf-8"))
    amendment["amends"] = {"file": "evidence-manifest.v2.json", "sha256": naive_sha256(path)}
    path.write_text(json.dumps(amendment), encoding="utf-8")
    _not_intact(_verify(run), "chain: evidence-manifest.v2.json")


@pytest.mark.timeout(120)
def test_a_gap_in_the_chain_is_an_error(run, tmp_path):
    _amend(run, tmp_path)
    # v2 renamed v3: it names and hashes the first manifest correctly, but v2 is gone.
    (run / "evidence-manifest.v2.json").rename(run / "evidence-manifest.v3.json")
    _not_intact(_verify(run), "chain: evidence-manifest.v3.json")


@pytest.mark.timeout(120)
def test_a_far_version_ends_quickly_with_an_error(run, tmp_path):
    _amend(run, tmp_path)
    (run / "evidence-manifest.v2.json").rename(run / "evidence-manifest.v999999999.json")
    _not_intact(_verify(run), "chain: evidence-manifest.v2.json to evidence-manifest.v999999998.json gone")


@pytest.mark.timeout(120)
def test_gate_refuses_to_amend_a_sealed_file(run, tmp_path):
    (run / "acceptance-gates.json").unlink()  # the next gates file would be acceptance-gates.json again
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES, encoding="utf-8")
    result = cli_in_process("gate", run, gates)
    assert result.returncode == 2 and "acceptance-gates.json is sealed by evidence-manifest.json" in result.stderr
    assert not (run / "acceptance-gates.json").exists() and not (run / "evidence-manifest.v2.json").exists()


@pytest.mark.timeout(120)
def test_an_amendment_of_the_wrong_file_is_an_error(run, tmp_path):
    _amend(run, tmp_path)
    path = run / "evidence-manifest.v2.json"
    amendment = json.loads(path.read_text(encoding="utf-8"))
    amendment["amends"] = {"file": "metrics.json", "sha256": naive_sha256(run / "metrics.json")}
    path.write_text(json.dumps(amendment), encoding="utf-8")
    _not_intact(_verify(run), "chain: evidence-manifest.v2.json")


@pytest.mark.timeout(120)
def test_a_real_amendment_is_intact_and_its_gate_file_is_checked(run, tmp_path):
    _amend(run, tmp_path)
    assert _verify(run).returncode == 0
    path = run / "acceptance-gates.v2.json"
    gates = json.loads(path.read_text(encoding="utf-8"))
    gates["decision"] = "fail"
    path.write_text(json.dumps(gates), encoding="utf-8")
    _not_intact(_verify(run), "changed: acceptance-gates.v2.json")


@pytest.mark.timeout(120)
def test_expect_sha256_right_and_wrong(run):
    stored = naive_sha256(run / FIRST)  # what the user stored when the run was sealed
    assert _verify(run, "--expect-sha256", stored).returncode == 0
    assert _verify(run, "--expect-sha256", stored.upper()).returncode == 0  # hex is hex
    wrong = "0" * 64
    _not_intact(_verify(run, "--expect-sha256", wrong), stored, wrong)
    # Someone rewrites metrics.json and re-hashes it in the first manifest: consistent
    # files, so only the stored hash can tell.
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    metrics["f1"] = 0.99
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    manifest = json.loads((run / FIRST).read_text(encoding="utf-8"))
    for entry in manifest["files"]:
        if entry["path"] == "metrics.json":
            entry.update(sha256=naive_sha256(run / "metrics.json"), bytes=(run / "metrics.json").stat().st_size)
    (run / FIRST).write_text(json.dumps(manifest), encoding="utf-8")
    assert _verify(run).returncode == 0
    _not_intact(_verify(run, "--expect-sha256", stored), stored)


@pytest.mark.timeout(120)
def test_expect_sha256_that_is_not_a_hash_is_a_usage_error(run):
    result = _verify(run, "--expect-sha256", "abc")
    assert result.returncode == 2 and "--expect-sha256" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(120)
def test_only_the_run_log_and_the_run_state_may_change_after_sealing(run):
    with open(run / "logs" / "run.log", "a", encoding="utf-8") as handle:
        handle.write("a line appended by a rerun\n")
    (run / "status.json").write_text('{"status": "succeeded"}\n', encoding="utf-8")  # written after the seal
    (run / ".evalcore-run.lock").write_text("{}\n", encoding="utf-8")
    assert _verify(run).returncode == 0
    (run / "logs" / "notes.txt").write_text("not evidence", encoding="utf-8")
    (run / "work").mkdir()
    (run / "work" / "x.parquet").write_bytes(b"scratch")
    _not_intact(_verify(run), "logs/notes.txt", "work/x.parquet")
