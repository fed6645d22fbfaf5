"""``evalcore review``: a human review of a sample of a run's objects (SPEC 6.12).

``review sample RUN_DIR --size N [--seed S] [--force]`` draws the sample and writes
``review/sample.parquet`` and ``review/index.html``; ``review import RUN_DIR
decisions-*.csv`` checks and stores the reviewers' decisions and writes
``review/review.json``; ``review import RUN_DIR --adjudicate FILE.csv`` records final
codes. Each adds its files to the evidence (:mod:`evalcore.review.store`).
"""

from __future__ import annotations

import argparse
import sys

from evalcore.errors import EvalInputError

__all__ = ["review_command"]


def _ask(question: str) -> bool:
    """Ask on the terminal (only when there is one); anything but y/yes is no."""
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def review_command(args: argparse.Namespace) -> int:
    """Run ``evalcore review sample`` or ``evalcore review import``."""
    from evalcore.present import number, with_interval
    from evalcore.review.store import import_adjudication, import_decisions, make_sample

    if args.review_command == "sample":
        result = make_sample(args.run_dir, args.size, args.seed, force=args.force, confirm=_ask)
        if not result.written:
            print(f"the sample in {result.sample_dir} is already this one ({result.n_items} items, seed {args.seed}); nothing written")
            return 0
        sealed = f"; sealed by {result.manifest.name}" if result.manifest else ""
        print(f"wrote {result.sample_dir / 'sample.parquet'} and {result.sample_dir / 'index.html'}: "
              f"{result.n_items} items in {result.n_cells} cells{sealed}")
        return 0
    if args.adjudicate:
        if args.decisions:
            raise EvalInputError("review import: give decisions files or --adjudicate FILE.csv, not both")
        result = import_adjudication(args.run_dir, args.adjudicate)
    else:
        result = import_decisions(args.run_dir, args.decisions)
    review = result.review
    agreement = review["agreement"]

    def share(key: str) -> str:
        return with_interval(review, key, 3, "–", defined_only=True)

    print(f"completion {review['reviewed']}/{review['drawn']}; confirmed share {share('confirmed_share')}; "
          f"critical {share('critical_share')}; major or worse {share('major_or_worse_share')}; "
          f"{agreement['kappa_method']} kappa {number(agreement.get('kappa'), 3, '–')}; "
          f"{review['n_disagreements']} disagreements")
    sealed = f"; sealed by {result.manifest.name}" if result.manifest else ""
    print(f"wrote {', '.join(str(p) for p in result.files)}{sealed}")
    return 0
