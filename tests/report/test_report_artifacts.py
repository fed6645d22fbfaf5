"""The report's Prefect artifacts: figures embedded as data: URIs in markdown, tables, and keys Prefect accepts."""

from __future__ import annotations

import base64
import json
import re

import pytest
from prefect.types.names import raise_on_name_alphanumeric_dashes_only

import prefect.artifacts
from flows.report_artifacts import FIGURE_GROUPS, MAX_EMBED_BYTES, artifact_key, publish_report_artifacts


@pytest.fixture
def published(monkeypatch):
    calls: dict[str, list] = {"markdown": [], "table": []}
    monkeypatch.setattr(prefect.artifacts, "create_markdown_artifact", lambda markdown, key=None, description=None: calls["markdown"].append((key, markdown, description)))
    monkeypatch.setattr(prefect.artifacts, "create_table_artifact", lambda table, key=None, description=None: calls["table"].append((key, table, description)))
    return calls


def test_figures_and_tables_are_published(run_dirs, reports, published):
    run = run_dirs["full"]
    publish_report_artifacts(run, "Runs/Full Run 2026-12-01")
    keys = [k for k, _, _ in published["markdown"]] + [k for k, _, _ in published["table"]]
    assert len(keys) == len(set(keys))
    for key in keys:
        assert raise_on_name_alphanumeric_dashes_only(key) == key and len(key) <= 100
        assert key.endswith("-runs-full-run-2026-12-01")
    embedded = {}
    for _, markdown, _ in published["markdown"]:
        for title, data in re.findall(r"!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown):
            embedded[title] = base64.b64decode(data)
    figures = {p.stem: p.read_bytes() for p in (run / "figures").glob("*.png")}
    assert len(embedded) == len(figures)
    assert sorted(embedded.values()) == sorted(figures.values())
    assert len(published["markdown"]) == len(FIGURE_GROUPS)
    tables = {k.split("-runs-")[0]: t for k, t, _ in published["table"]}
    metrics = json.loads((run / "metrics.json").read_text())
    strata = {r["stratum"]: r for r in tables["evalcore-report-stratum"]}
    assert set(strata) == set(metrics["per_stratum"])
    for name, row in strata.items():
        g = metrics["per_stratum"][name]
        assert row["f1"] == g["f1"] and row["support"] == g["support"] and row["insufficient_support"] == g["insufficient_support"]
        assert [row["f1_ci_lower"], row["f1_ci_upper"]] == g["ci"]["f1"]
    assert "evalcore-report-size-class" in tables
    worst = tables["evalcore-worst-tiles"]
    assert worst[0]["tile"] == metrics["tiles"]["worst"]["f1"]["group"]
    assert worst[0]["f1"] == metrics["tiles"]["worst"]["f1"]["value"]
    json.dumps(worst)  # what Prefect stores


def test_without_options_only_what_exists_is_published(run_dirs, reports, published):
    publish_report_artifacts(run_dirs["minimal"], "minimal")
    assert sorted(k for k, _, _ in published["table"]) == ["evalcore-worst-tiles-minimal"]
    assert all("data:image/png;base64," in m for _, m, _ in published["markdown"])


def test_a_large_figure_is_named_not_embedded(run_dirs, reports, published, tmp_path, monkeypatch):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dirs["minimal"], run)
    monkeypatch.setattr("flows.report_artifacts.MAX_EMBED_BYTES", 10)
    publish_report_artifacts(run, "x")
    text = "".join(m for _, m, _ in published["markdown"])
    assert "data:image" not in text and "too large to embed" in text
    assert MAX_EMBED_BYTES > 1_000_000


def test_artifact_key():
    assert artifact_key("evalcore-figures-maps", "Runs/2026-11-30 Fields_v3") == "evalcore-figures-maps-runs-2026-11-30-fields-v3"
    assert artifact_key("evalcore-worst-tiles", "--") == "evalcore-worst-tiles"
    long = artifact_key("evalcore-figures-overlays", "a" * 300)
    assert len(long) == 100 and raise_on_name_alphanumeric_dashes_only(long) == long
