"""A family is one module, presentation included (issue 28, item 3).

The toy family below is declared in this file only and registered through the public
registry (:func:`evalcore.metrics.registry.registered`, undone when the block ends). With no
other file changed it must show up everywhere a family's numbers are read: its key in
``metrics.json``, its option on the command line, its line in the terminal summary, its
row in ``report.md``'s headline table, its section in ``report.html`` and its row in
``compare``'s delta table.

Its number, ``toy_score = toy_weight * TP / n_ref`` (a weighted recall), is computed
from the detection family's sums, so it needs no per-field column of its own.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalcore.cli import main
from evalcore.metrics.registry import FAMILIES, registered
from evalcore.metrics.base import MEAN, GroupView, MetricFamily, Option, ratio
from evalcore.present import GROUPS, Shown
from evalcore.synth import make_layers

N_RESAMPLES = 20


def _positive(name: str, value: object) -> float:
    value = float(value)
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


class Toy(MetricFamily):
    """A weighted recall: the smallest family that has an option, an interval and a section."""

    name = "toy"
    options = (Option("toy_weight", 1.0, "weight of the toy score (default 1)", _positive, parse=float, annotation=float),)
    shown = (Shown("toy_score", "Toy score (weighted recall)", "toy score", compared=GROUPS),)
    section = "Toy family"

    def finalize(self, s, options):
        return {"toy_score": ratio(options.toy_weight * s["tp"], s["n_ref"])}

    def interval_keys(self, options):
        return ("toy_score",)

    def summarize(self, g: GroupView) -> dict[str, object]:
        return {"toy_score": g.point("toy_score", MEAN)}


@pytest.fixture(scope="module")
def layers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    pred, ref = make_layers(120, seed=11, bad_rows=False)
    d = tmp_path_factory.mktemp("toy")
    paths = {"pred": str(d / "pred.parquet"), "other": str(d / "other.parquet"), "ref": str(d / "ref.parquet"), "dir": d}
    pred.to_parquet(paths["pred"])
    pred.iloc[: len(pred) * 3 // 4].to_parquet(paths["other"])  # a candidate that misses a quarter of the predictions
    ref.to_parquet(paths["ref"])
    return paths


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


def test_a_registered_family_shows_everywhere(layers, capsys, tmp_path: Path) -> None:
    from evalcore.html_report import build_report
    from evalcore.report import render_report

    with registered(Toy()):
        # The option on the command line.
        with pytest.raises(SystemExit):
            main(["evaluate", "--help"])
        assert "--toy-weight" in capsys.readouterr().out

        # The number in metrics.json, with its interval, and the line in the terminal summary.
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        status, out = _main(capsys, "evaluate", "-p", layers["pred"], "-r", layers["ref"], "--toy-weight", "2",
                            "--bootstrap", str(N_RESAMPLES), "-o", str(run_dir / "metrics.json"))
        assert status == 0
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert math.isclose(metrics["toy_score"], 2 * metrics["count_tp"] / metrics["count_reference"])
        assert "toy_score" in metrics["bootstrap"]["ci"]
        toy_line = [line for line in out.splitlines() if line.startswith("toy: toy score ")]
        assert len(toy_line) == 1 and f"{metrics['toy_score']:.3f} [" in toy_line[0], out

        # Its row in report.md's headline table.
        assert f"| Toy score (weighted recall) | {metrics['toy_score']:.3f} [" in render_report(metrics)

        # Its section in report.html, built from the declaration.
        html = build_report(run_dir).read_text(encoding="utf-8")
        assert '<section id="family-toy" data-family="toy"><h2>Toy family</h2>' in html
        assert f'data-key="toy_score" data-value="{metrics["toy_score"]!r}"' in html
        assert 'href="#family-toy"' in html

        # Its row in compare's delta table, paired like the other headline metrics.
        status, out = _main(capsys, "compare", "-p", layers["other"], "-i", layers["pred"], "-r", layers["ref"],
                            "--bootstrap", str(N_RESAMPLES), "-o", str(tmp_path / "compare.json"))
        assert status == 0
        result = json.loads((tmp_path / "compare.json").read_text())
        entry = result["overall"]["toy_score"]
        assert "toy_score" in result["metrics"]
        assert math.isclose(entry["delta"], entry["candidate"] - entry["incumbent"])
        assert entry["ci"][0] is not None and entry["ci"][0] <= entry["delta"] <= entry["ci"][1]
        assert any(line.strip().startswith("toy_score ") and "delta" in line for line in out.splitlines()), out

    # The registration is undone: the family, its flag and its key are gone.
    assert not any(isinstance(f, Toy) for f in FAMILIES)
    assert main(["evaluate", "-p", layers["pred"], "-r", layers["ref"], "--toy-weight", "2", "-q",
                 "-o", str(tmp_path / "after.json")]) == 2
