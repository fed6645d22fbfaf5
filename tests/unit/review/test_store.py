"""The review's files in a run directory: sample, import (every bad row refused), evidence, gates."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import geopandas
import pandas as pd
import pytest

from evalcore.cli import run as cli_run
from evalcore.errors import EvalInputError
from evalcore.evidence import gate_metrics, verify
from evalcore.gates import evaluate_gates, parse_gates
from evalcore.review.store import import_adjudication, import_decisions, make_sample
from tests.review_run import write_review_run

HEADER = "item_id,reviewer,code,severity,agrees,comment,decided_at\n"
WHEN = "2026-12-02T10:00:00Z"


def _snapshot(run: Path) -> dict[str, str]:
    return {p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture
def sampled(tmp_path):
    run = write_review_run(tmp_path)
    make_sample(run, 20, seed=3)
    return run, geopandas.read_parquet(run / "review" / "sample.parquet")


def _row(item, code, reviewer="alice", severity="", agrees=None, comment="", when=WHEN, auto=None):
    if agrees is None:
        agrees = "true" if code == auto else "false"
    return f"{item},{reviewer},{code},{severity},{agrees},{comment},{when}\n"


def _file(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(rows), encoding="utf-8")
    return path


def test_sample_files_sealed_and_same_seed_writes_nothing(tmp_path):
    run = write_review_run(tmp_path)
    first = make_sample(run, 20, seed=3)
    assert first.written and first.manifest.name == "evidence-manifest.v2.json"
    sample = geopandas.read_parquet(run / "review" / "sample.parquet")
    assert len(sample) == 20 and sample.crs.to_epsg() == 4326
    assert {"item_id", "kind", "position", "object_id", "cell", "inclusion_probability", "code", "score", "stratum"} <= set(sample.columns)
    assert "class" not in sample.columns
    assert sample.groupby("cell")["inclusion_probability"].first().mul(sample.groupby("cell")["cell_size"].first()).sum() == pytest.approx(20)
    again = make_sample(run, 20, seed=3)
    assert not again.written
    found = verify(run, check_inputs=False)
    assert found.ok, found
    page = (run / "review" / "index.html").read_text(encoding="utf-8")
    assert page.count('class="card"') == 20 and "http://" not in page and "https://" not in page


def test_class_shown_when_the_run_has_a_class_column(tmp_path):
    run = write_review_run(tmp_path, class_column="crop")
    make_sample(run, 10, seed=1)
    sample = geopandas.read_parquet(run / "review" / "sample.parquet")
    assert set(sample["class"].dropna()) <= {"wheat", "maize"} and sample["class"].notna().any()
    page = (run / "review" / "index.html").read_text(encoding="utf-8")
    assert "<th>class</th>" in page
    matched = sample[sample["counterpart_id"] != ""]
    assert len(matched) and matched["counterpart_class"].notna().all()
    assert f"(prediction: {matched['counterpart_class'].iloc[0]})" in page


def test_a_run_labelled_by_ids_is_sampled_by_its_ids(tmp_path):
    # With --ref-id-column / --pred-id-column the tables' labels are ids (engine.tables.output_table).
    run = write_review_run(tmp_path, ids=True, class_column="crop")
    make_sample(run, 15, seed=2)
    sample = geopandas.read_parquet(run / "review" / "sample.parquet")
    assert len(sample) == 15 and sample["position"].isna().all()  # ids, not row positions
    refs, preds = sample[sample["kind"] == "reference"], sample[sample["kind"] == "prediction"]
    assert len(refs) and refs["object_id"].str.fullmatch(r"F\d+").all()
    assert len(preds) and preds["object_id"].str.fullmatch(r"P\d+").all()
    matched = refs[refs["counterpart_id"] != ""]
    assert len(matched) and matched["counterpart_id"].str.fullmatch(r"P\d+").all()
    assert sample["stratum"].notna().all() and sample["class"].notna().any()


def test_import_writes_statistics_and_amends_the_evidence(sampled):
    run, sample = sampled
    auto = dict(zip(sample["item_id"], sample["code"]))
    items = list(auto)
    alice = _file(run.parent / "decisions-alice.csv", [_row(i, auto[i], auto=auto[i]) for i in items[:10]])
    bob = _file(run.parent / "decisions-bob.csv", [_row(i, "L-REFERENCE-WRONG", "bob", "critical", comment='"a, quoted ""comment"""', auto=auto[i]) for i in items[:4]])
    result = import_decisions(run, [alice, bob])
    review = json.loads((run / "review" / "review.json").read_text())
    assert review == json.loads(json.dumps(result.review, allow_nan=True).replace("NaN", "null"))
    assert review["state"] == "reviewed" and review["reviewed"] == 10 and review["confirmed_share"] == 1.0
    assert review["agreement"]["n_items_two_reviewers"] == 4 and review["agreement"]["raw_agreement"] == 0.0
    stored = pd.read_csv(run / "review" / "decisions-bob.csv", keep_default_na=False)
    assert stored["comment"].tolist() == ['a, quoted "comment"'] * 4
    assert verify(run, check_inputs=False).ok
    # The same reviewer again: a new version that supersedes the first, nothing overwritten.
    before = _snapshot(run)
    import_decisions(run, [_file(run.parent / "decisions-alice.csv", [_row(i, auto[i], auto=auto[i]) for i in items[:15]])])
    after = _snapshot(run)
    assert all(after[k] == v for k, v in before.items())
    assert "review/decisions-alice.v2.csv" in after and "review/review.v2.json" in after
    assert json.loads((run / "review" / "review.v2.json").read_text())["reviewed"] == 15
    adjudication = run.parent / "adjudication.csv"
    adjudication.write_text("item_id,final_code,adjudicator,comment\n" + "".join(f"{i},{auto[i]},carol,\n" for i in items[:4]))
    final = import_adjudication(run, adjudication).review
    assert final["confirmed_share_final"] == 1.0
    assert verify(run, check_inputs=False).ok
    # verify covers the review: a changed decision and an added file are both found.
    stored = run / "review" / "decisions-bob.csv"
    stored.write_text(stored.read_text().replace("critical", "minor"))
    (run / "review" / "decisions-eve.csv").write_text(HEADER)
    found = verify(run, check_inputs=False)
    assert not found.ok and "review/decisions-bob.csv" in str(found.changed) and "review/decisions-eve.csv" in str(found.unlisted)


@pytest.mark.parametrize("kind, rows, message", [
    ("item", lambda a, i: [_row("ref-99999", "TP", auto="TP")], "item 'ref-99999' is not in the sample"),
    ("code", lambda a, i: [_row(i[0], "M-FP-WRONG", agrees="false")], "code 'M-FP-WRONG' is not one of TP"),
    ("severity", lambda a, i: [_row(i[0], a[i[0]], severity="huge", auto=a[i[0]])], "severity 'huge' is not one of minor, major, critical"),
    ("agrees", lambda a, i: [_row(i[0], a[i[0]], agrees="maybe")], "agrees 'maybe' is not true or false"),
    ("contradiction", lambda a, i: [_row(i[0], a[i[0]], agrees="false")], "agrees is false but the code"),
    ("reviewer", lambda a, i: [_row(i[0], a[i[0]], reviewer="al ice", auto=a[i[0]])], "reviewer 'al ice' is not a name"),
    ("time", lambda a, i: [_row(i[0], a[i[0]], when="yesterday", auto=a[i[0]])], "decided_at 'yesterday' is not an ISO 8601 time"),
    ("duplicate", lambda a, i: [_row(i[0], a[i[0]], auto=a[i[0]]), _row(i[1], a[i[1]], auto=a[i[1]]), _row(i[0], a[i[0]], auto=a[i[0]])],
     "a second decision of alice on"),
    ("width", lambda a, i: [f"{i[0]},alice,TP\n"], "values expected"),
])
def test_every_bad_row_refused_by_file_and_line_and_nothing_imported(sampled, kind, rows, message):
    run, sample = sampled
    auto = dict(zip(sample["item_id"], sample["code"]))
    items = list(auto)
    good = _file(run.parent / "decisions-good.csv", [_row(i, auto[i], "good", auto=auto[i]) for i in items[:3]])
    bad = _file(run.parent / "decisions-bad.csv", [_row(items[5], auto[items[5]], auto=auto[items[5]])] + rows(auto, items[6:]))
    before = _snapshot(run)
    with pytest.raises(EvalInputError, match=message) as caught:
        import_decisions(run, [good, bad])
    bad_line = 3 + (2 if kind == "duplicate" else 0)
    assert f"decisions-bad.csv, line {bad_line}:" in str(caught.value)
    assert _snapshot(run) == before
    status, text = cli_run(["review", "import", str(run), str(good), str(bad)])
    assert status == 2 and f"line {bad_line}" in text and "\n" not in text.strip()
    assert _snapshot(run) == before


def test_a_failed_write_leaves_the_run_directory_as_it_was(tmp_path, sampled, monkeypatch):
    import evalcore.review.store as store

    def full_disk(path, obj):
        raise OSError(28, "No space left on device")

    run, sample = sampled
    auto = dict(zip(sample["item_id"], sample["code"]))
    item = next(iter(auto))
    decisions = _file(run.parent / "decisions-alice.csv", [_row(item, auto[item], auto=auto[item])])
    before = _snapshot(run)
    monkeypatch.setattr(store, "write_json", full_disk)  # review.json, written after the decisions file
    with pytest.raises(OSError):
        import_decisions(run, [decisions])
    assert _snapshot(run) == before  # no decisions file without its statistics
    fresh = write_review_run(tmp_path / "fresh")
    before = _snapshot(fresh)
    monkeypatch.setattr(store, "atomic_path", lambda path, write: full_disk(path, None))  # index.html, after sample.parquet
    with pytest.raises(OSError):
        make_sample(fresh, 5, seed=1)
    assert _snapshot(fresh) == before  # no sample without its page


def test_bad_header_and_empty_file(sampled):
    run, _ = sampled
    header = run.parent / "decisions-x.csv"
    header.write_text("item_id,reviewer,code\nref-1,x,TP\n")
    with pytest.raises(EvalInputError, match=r"line 1: no column 'severity'"):
        import_decisions(run, [header])
    empty = run.parent / "decisions-y.csv"
    empty.write_text(HEADER)
    with pytest.raises(EvalInputError, match="holds no rows"):
        import_decisions(run, [empty])


def test_another_seed_refused_while_decisions_exist_unless_forced(sampled):
    run, sample = sampled
    item, code = sample["item_id"].iloc[0], sample["code"].iloc[0]
    import_decisions(run, [_file(run.parent / "decisions-alice.csv", [_row(item, code, auto=code)])])
    before = _snapshot(run)
    with pytest.raises(EvalInputError, match="only with --force"):
        make_sample(run, 20, seed=4)
    assert _snapshot(run) == before
    asked = []
    with pytest.raises(EvalInputError, match="only with --force"):
        make_sample(run, 20, seed=4, confirm=lambda question: asked.append(question) or False)
    assert asked == ["review/ (seed 3, size 20) has decisions; start a new sample (seed 4, size 20) in review/v2/?"]
    forced = make_sample(run, 20, seed=4, force=True)
    assert forced.sample_dir == run / "review" / "v2" and verify(run, check_inputs=False).ok


def test_review_gates_unreviewed_until_decisions_then_judged(sampled):
    run, sample = sampled
    gates = parse_gates({"gates": [{"id": "R", "metric": "review.confirmed_share", "op": ">=", "threshold": 0.0},
                                   {"id": "C", "metric": "review.per_cell.*.completion", "op": ">=", "threshold": 0.0}]})
    metrics = json.loads((run / "metrics.json").read_text())
    before = evaluate_gates(gate_metrics(run, metrics), gates)
    assert before["decision"] == "not_evaluable" and {r["reason"] for r in before["rules"]} == {"unreviewed"}
    item, code = sample["item_id"].iloc[0], sample["code"].iloc[0]
    import_decisions(run, [_file(run.parent / "decisions-alice.csv", [_row(item, code, auto=code)])])
    after = evaluate_gates(gate_metrics(run, metrics), gates)
    assert after["rules"][0]["state"] == "pass" and after["rules"][0]["observed"] == 1.0
    assert len(after["rules"]) == 1 + sample["cell"].nunique()


def test_cli_sample_and_import_in_process(tmp_path, capsys):
    from evalcore.cli import main

    run = write_review_run(tmp_path, strata=False, scores=False)
    assert main(["review", "sample", str(run), "--size", "0"]) == 2
    assert "--size" in capsys.readouterr().err
    assert main(["review", "sample", str(run), "--size", "8", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "8 items in" in out and "evidence-manifest.v2.json" in out
    assert main(["review", "sample", str(run), "--size", "8", "--seed", "1"]) == 0
    assert "nothing written" in capsys.readouterr().out
    sample = geopandas.read_parquet(run / "review" / "sample.parquet")
    assert set(sample["cell"]) <= {"TP", "M-FN-MISSED", "M-FN-LOCALISATION", "M-FP-BACKGROUND", "M-FP-LOCALISATION"}
    decisions = _file(tmp_path / "decisions-ann.csv", [_row(i, c, "ann", auto=c) for i, c in zip(sample["item_id"], sample["code"])])
    assert main(["review", "import", str(run), str(decisions)]) == 0
    assert "completion 8/8; confirmed share 1.000" in capsys.readouterr().out
    assert main(["review", "import", str(run)]) == 2
    assert "at least one decisions file" in capsys.readouterr().err


def test_a_size_above_the_objects_takes_them_all(tmp_path):
    run = write_review_run(tmp_path, n_ref=10, strata=False, scores=False)
    result = make_sample(run, 500, seed=0)
    sample = geopandas.read_parquet(run / "review" / "sample.parquet")
    # 10 fields (6 TP, 2 localisation, 2 missed) and 3 unmatched predictions (2 localisation, 1 background).
    assert result.n_items == len(sample) == 13 and (sample["inclusion_probability"] == 1.0).all()


def test_report_review_section_once_decisions_exist(sampled):
    from evalcore.html_report.loading import load_run
    from evalcore.html_report.markup import Page
    from evalcore.html_report.sections import review_section

    run, sample = sampled
    page = Page()
    assert review_section(load_run(run), page) is False and page.parts == []
    auto = dict(zip(sample["item_id"], sample["code"]))
    items = list(auto)
    rows = [_row(i, auto[i], auto=auto[i]) for i in items[:3]] + [_row(items[3], "L-REFERENCE-WRONG", severity="critical", comment="wrong")]
    import_decisions(run, [_file(run.parent / "decisions-alice.csv", rows)])
    review = json.loads((run / "review" / "review.json").read_text())
    assert review_section(load_run(run), page) is True
    html = page.parts[0]
    assert f'data-key="review.confirmed_share" data-value="{review["confirmed_share"]!r}"' in html
    assert 'data-key="review.completion" data-value="0.2"' in html  # 4 of 20 items
    assert items[3] in html and "L-REFERENCE-WRONG" in html  # the disagreement listed
