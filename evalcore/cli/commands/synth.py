"""``evalcore synth``: write a generated dataset into a new or empty directory."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from evalcore.cli.checks import check_output_dir
from evalcore.errors import EvalInputError
from evalcore.outputs import OutputSet, check_new_directory

__all__ = ["MIN_PART_ROWS", "synth_command"]

#: The smallest ``--part-rows``.
MIN_PART_ROWS = 1_000


def synth_command(args: argparse.Namespace) -> int:
    """``evalcore synth``: the reference, predicted, AOI and annotated-area layers of a generated dataset.

    Up to ``STREAM_ABOVE`` (200,000) fields without ``--part-rows`` each layer is one
    file, made whole in memory (:func:`evalcore.synth.write_layers`). Above, or with
    ``--part-rows``, the fields are made block by block and the predicted and
    reference layers are directories of GeoParquet parts, ``predicted.parquet/`` and
    ``reference.parquet/`` (:mod:`evalcore.synth.stream`), so the same paths name the
    layers either way. A failed write removes the directory this command created, so
    nothing is left behind.
    """
    from evalcore.synth import write_layers
    from evalcore.synth.stream import STREAM_ABOVE

    if args.n_ref <= 0:
        raise EvalInputError(f"--n-ref must be positive, but got {args.n_ref}.")
    if args.seed < 0:
        raise EvalInputError(f"--seed must be 0 or more, but got {args.seed}.")
    check_output_dir(args.out, "--out")
    check_new_directory(args.out, "--out", force=args.force)
    if args.score_decimals is not None and args.score_decimals < 0:
        raise EvalInputError(f"--score-decimals must be 0 or more, but got {args.score_decimals}.")
    # Parts must agree on column types for the readers (evalcore.io.check_parquet_parts): a
    # tiny part of only bad rows could hold a column of nulls only, of another type.
    if args.part_rows is not None and args.part_rows < MIN_PART_ROWS:
        raise EvalInputError(f"--part-rows must be at least {MIN_PART_ROWS:,}, but got {args.part_rows}.")
    streamed = args.part_rows is not None or args.n_ref > STREAM_ABOVE
    if streamed and args.format != "parquet":
        raise EvalInputError(
            f"--format {args.format} writes each layer whole in memory, so only up to {STREAM_ABOVE:,} fields "
            "and without --part-rows; use --format parquet (directories of parts) for larger layers."
        )
    created = not Path(args.out).exists()
    try:
        if streamed:
            pred_path, ref_path = _write_streamed(args)
        else:
            pred_path, ref_path = write_layers(args.out, args.n_ref, args.seed, fmt=args.format, score_decimals=args.score_decimals)
    except BaseException:
        if created:  # the directory this command made, left empty by the failed write (its staged files are gone)
            with contextlib.suppress(OSError):
                Path(args.out).rmdir()
        raise
    print(f"wrote {ref_path}, {pred_path} and the AOI and annotated-area layers beside them")
    return 0


def _write_streamed(args: argparse.Namespace) -> tuple[Path, Path]:
    """Make the layers block by block into staged part directories and files, then rename them all into place.

    Memory holds one block and the rows waiting for their part, whatever ``--n-ref``.
    """
    from evalcore.logs import PhaseProgress
    from evalcore.synth import LAYER_NAMES
    from evalcore.synth.layers import _site_layers
    from evalcore.synth.stream import DEFAULT_PART_ROWS, PartWriter, block_sites, block_sizes, concat_sites, iter_blocks

    out = Path(args.out)
    out.mkdir(exist_ok=True)
    targets = {name: out / f"{name}.parquet" for name in LAYER_NAMES}
    part_rows = args.part_rows or DEFAULT_PART_ROWS
    n_blocks = len(block_sizes(args.n_ref))
    # Enough digits that name order is row order: at most ~1.1 rows per field plus the bad rows.
    digits = max(5, len(str((2 * args.n_ref + 100) // part_rows)))
    progress = PhaseProgress(unit="blocks")
    for name in ("predicted", "reference"):
        if args.force and targets[name].is_file():  # an earlier synth's single file, replaced by --force
            targets[name].unlink()
    with OutputSet() as outputs:
        writers = {name: PartWriter(outputs.directory(targets[name], "--out"), part_rows, digits) for name in ("predicted", "reference")}
        sites = []
        progress("synth", 0, n_blocks)
        blocks = iter_blocks(args.n_ref, args.seed, score_decimals=args.score_decimals)
        for done, (pred, ref) in enumerate(blocks, start=1):
            sites.append(block_sites(pred, ref))
            writers["predicted"].add(pred)
            writers["reference"].add(ref)
            del pred, ref  # the writers keep only the rows of unfinished parts
            progress("synth", done, n_blocks)
        for writer in writers.values():
            writer.close()
        aoi, annotated = _site_layers(concat_sites(sites), args.seed)
        for name, layer in (("aoi", aoi), ("annotated", annotated)):
            layer.to_parquet(outputs.file(targets[name]), index=False, write_covering_bbox=True)
        outputs.commit()
    return targets["predicted"], targets["reference"]
