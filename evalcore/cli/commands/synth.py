"""``evalcore synth``: write a generated dataset into a new or empty directory."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from evalcore.cli.checks import check_output_dir
from evalcore.errors import EvalInputError
from evalcore.outputs import check_new_directory

__all__ = ["synth_command"]


def synth_command(args: argparse.Namespace) -> int:
    """``evalcore synth``: the reference, predicted, AOI and annotated-area layers of a generated dataset.

    A failed write removes the directory this command created, so nothing is left behind.
    """
    from evalcore.synth import write_layers

    if args.n_ref <= 0:
        raise EvalInputError(f"--n-ref must be positive, but got {args.n_ref}.")
    check_output_dir(args.out, "--out")
    check_new_directory(args.out, "--out", force=args.force)
    if args.score_decimals is not None and args.score_decimals < 0:
        raise EvalInputError(f"--score-decimals must be 0 or more, but got {args.score_decimals}.")
    created = not Path(args.out).exists()
    try:
        pred_path, ref_path = write_layers(args.out, args.n_ref, args.seed, fmt=args.format, score_decimals=args.score_decimals)
    except BaseException:
        if created:  # the directory this command made, left empty by the failed write (its temporary files are gone)
            with contextlib.suppress(OSError):
                Path(args.out).rmdir()
        raise
    print(f"wrote {ref_path}, {pred_path} and the AOI and annotated-area layers beside them")
    return 0
