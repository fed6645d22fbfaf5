"""The commands on a finished run directory: ``gate``, ``report`` and ``verify``.

Each reads only the run directory's own files; ``gate`` adds a gates file beside the
metrics (never overwriting one) and seals it into the evidence when the run is sealed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from evalcore.cli.text import gate_lines
from evalcore.errors import EvalInputError

__all__ = ["gate_command", "report_command", "verify_command"]


def gate_command(args: argparse.Namespace) -> int:
    """``evalcore gate RUN_DIR gates.yaml``: write the gates' outcome beside the metrics.

    A first check writes ``acceptance-gates.json``; a later one adds
    ``acceptance-gates.vN.json`` linking its predecessor (never overwrites).
    """
    from evalcore.remote import run_directory

    # A run directory in an object store is fetched, gated here, and what the gates add put back.
    with run_directory(args.run_dir, write=True) as run_dir:
        status, lines = _gate(run_dir, args)
    for line in lines:
        print(line)
    return status


def _gate(run_dir: Path, args: argparse.Namespace) -> tuple[int, list[str]]:
    """:func:`gate_command` on a local run directory: the exit status and the lines to print."""
    import json

    from evalcore.evidence import check_amendment, gate_metrics, latest_manifest, write_evidence_manifest
    from evalcore.gates import counts_text, evaluate_gates, exit_status, load_gates
    from evalcore.report import sha256_path
    from evalcore.writers import write_json

    metrics_path = run_dir / "metrics.json"
    if not run_dir.is_dir() or not metrics_path.is_file():
        raise EvalInputError(f"{args.run_dir!r} is not a run directory: it holds no metrics.json.")
    gates = load_gates(args.gates)
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EvalInputError(f"{str(metrics_path)!r} is not valid JSON: {exc}") from None
    result = evaluate_gates(gate_metrics(run_dir, metrics), gates, evidence_file="metrics.json", evidence_sha256=sha256_path(metrics_path))
    result["gates_file"] = {"path": str(Path(args.gates).resolve()), "sha256": sha256_path(args.gates)}
    target = run_dir / "acceptance-gates.json"
    version = 1
    while target.exists():
        previous = target
        version += 1
        target = run_dir / f"acceptance-gates.v{version}.json"
    if version > 1:
        result["amends"] = {"file": previous.name, "sha256": sha256_path(previous)}
    sealed = latest_manifest(run_dir) is not None
    if sealed:
        check_amendment(run_dir, [target.name])  # refused before anything is written
    write_json(target, result)
    amended = write_evidence_manifest(run_dir, reason=f"gates amendment: {target.name}", adds=[target.name]) if sealed else None
    lines = []
    if not args.quiet:
        lines = list(gate_lines(result))
        shown = f"{args.run_dir.rstrip('/')}/{target.name}" if "://" in args.run_dir else str(target)
        lines.append(f"decision: {result['decision']} ({counts_text(result)}); wrote {shown}" + (f" and {amended.name}" if amended else ""))
    return exit_status(result), lines


def report_command(args: argparse.Namespace) -> int:
    """``evalcore report RUN_DIR``: the self-contained HTML page of a run, rebuilt from its files."""
    from evalcore.html_report import build_report
    from evalcore.remote import run_directory

    started = time.perf_counter()
    with run_directory(args.run_dir, write=True) as run_dir:
        path = build_report(run_dir)
        size = path.stat().st_size
        shown = f"{args.run_dir.rstrip('/')}/{path.relative_to(run_dir).as_posix()}" if "://" in args.run_dir else str(path)
    print(f"wrote {shown} ({size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s)")
    return 0


def verify_command(args: argparse.Namespace) -> int:
    """``evalcore verify RUN_DIR``: account for every file of the run with its evidence (0: intact, 1: not)."""
    from evalcore.evidence import EVIDENCE_MANIFEST, verify
    from evalcore.remote import run_directory

    with run_directory(args.run_dir) as run_dir:  # a URL's objects are fetched and checked here
        found = verify(run_dir, check_inputs=not args.skip_inputs, expect_sha256=args.expect_sha256)
    for label, items in (("chain", found.chain), ("changed", found.changed), ("missing", found.missing),
                         ("not accounted for", found.unlisted), ("input changed", found.inputs_changed),
                         ("input not found", found.inputs_missing)):
        for item in items:
            print(f"{label}: {item}")
    if found.expected_differs:
        print(f"expected: {EVIDENCE_MANIFEST} should have SHA-256 {found.expected_sha256}, "
              + (f"it has {found.first_sha256}" if found.first_sha256 else "it is gone"))
    elif found.first_sha256:
        print(f"{EVIDENCE_MANIFEST} SHA-256 {found.first_sha256}"
              + (" (as expected)" if found.expected_sha256 else " (store it; check it later with --expect-sha256)"))
    verdict = "intact" if found.ok else "NOT intact"
    against = EVIDENCE_MANIFEST if found.manifest == EVIDENCE_MANIFEST else f"{EVIDENCE_MANIFEST} to {found.manifest}"
    print(f"{args.run_dir}: {verdict} ({found.checked} files checked against {against}"
          + ("" if args.skip_inputs else "; inputs rechecked") + ")")
    return 0 if found.ok else 1

