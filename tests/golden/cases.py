"""Golden outputs: what evalcore wrote before a change that must not change a number.

Each case is one ``evalcore evaluate`` (or ``compare``) command line on a generated layer
pair (600 fields, seed 7, 3 UTM zones), run in this process. ``python -m
tests.golden.cases`` writes the outputs of every case into ``tests/golden/<case>/``;
``tests/unit/test_golden.py`` runs the same commands and compares every output exactly
(metrics to the last bit, tables cell by cell). Regenerate only when a number is meant to
change, and say which in the commit.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
N_REF, SEED = 600, 7

#: Table outputs (flag, file name) a case may ask for.
TABLES = {"--frame-out": "fields.parquet", "--predictions-out": "predictions.parquet", "--tiles-out": "tiles.parquet",
          "--aois-out": "aois.parquet", "--pr-curve-out": "pr_curve.parquet"}


def cases(data: Path) -> dict[str, list[str]]:
    """Every case's arguments (without the outputs), on the layers in ``data``."""
    p, r = str(data / "predicted.parquet"), str(data / "reference.parquet")
    aoi, annotated = str(data / "aoi.parquet"), str(data / "annotated.parquet")
    layers = ["-p", p, "-r", r]
    return {
        "default": ["evaluate", *layers, "--frame-out", "--predictions-out", "--tiles-out"],
        "full": ["evaluate", *layers, "--strata-column", "stratum", "--size-bins", "auto", "--bootstrap", "20",
                 "--boundary-tolerance-m", "10", "--score-column", "score", "--score-threshold", "0.5",
                 "--precision-targets", "0.8,0.9", "--aoi", aoi, "--aoi-id-column", "aoi_id", "--annotated-area", annotated,
                 "--pixel-gsd-m", "10", "--ref-id-column", "field_id", "--pred-id-column", "pred_id",
                 "--frame-out", "--predictions-out", "--tiles-out", "--aois-out", "--pr-curve-out"],
        "many_to_one_tiles": ["evaluate", *layers, "--matching", "many_to_one", "--bootstrap", "20", "--bootstrap-unit", "tile",
                              "--size-bins", "0,0.5,1,2,5,10,inf", "--iou-threshold", "0.4", "--frame-out", "--tiles-out"],
        "study": ["evaluate", *layers, "--study-area", aoi, "--study-area-rule", "centroid", "--training-area", annotated,
                  "--leakage-buffer-m", "100", "--strata-column", "stratum", "--frame-out"],
        "compare": ["compare", "-p", p, "-i", p, "-r", r, "--strata-column", "stratum", "--bootstrap", "20"],
    }


def command(args: list[str], out: Path) -> list[str]:
    """``args`` with every output flag given its path in ``out`` and ``-o out/metrics.json``."""
    full = []
    for a in args:
        full.append(a)
        if a in TABLES:
            full.append(str(out / TABLES[a]))
    return [*full, "-q", "-o", str(out / "metrics.json")]


def data_dir(root: Path) -> Path:
    """The generated layers, written into ``root/data`` (the same files for the same seed)."""
    from evalcore.synth import write_layers

    data = root / "data"
    if not (data / "reference.parquet").exists():
        write_layers(data, N_REF, SEED)
    return data


def main() -> int:
    import tempfile

    from evalcore.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        data = data_dir(Path(tmp))
        for name, args in cases(data).items():
            out = HERE / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            status = cli(command(args, out))
            if status:
                print(f"case {name}: exit status {status}", file=sys.stderr)
                return status
            metrics = out / "metrics.json"  # the layers' temporary directory named alike in every run
            metrics.write_text(metrics.read_text(encoding="utf-8").replace(str(data), "<data>"), encoding="utf-8")
            print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
