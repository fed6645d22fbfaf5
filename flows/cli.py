"""The ``evalcore run`` command: the flow ``evaluate-layers`` from the command line.

Registered as the entry point ``evalcore.commands:run`` (pyproject.toml), which
:mod:`evalcore.cli` looks up, so the engine never imports the flows package.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from evalcore.cli import (
    check_columns_up_front,
    check_site_layers,
    dashboard_address,
    metric_options,
    format_summary,
)
from evalcore.errors import EvalInputError
from flows.server import PrefectApi

__all__ = ["run_command"]


def _labels(pairs: list[tuple[str, str]]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in pairs:
        if key in labels:
            raise EvalInputError(f"--label {key}= is given twice.")
        labels[key] = value
    return labels


def run_command(args: argparse.Namespace) -> int:
    """``evalcore run``: validate the arguments, run the flow ``evaluate-layers``, print the summary.

    What the terminal shows is set by :func:`evalcore.logs.configure_logging` (``-v``);
    the whole log goes to ``<output_dir>/logs/run.log``.
    """
    # The temporary Prefect server boots while the flow is imported and the inputs checked.
    with PrefectApi() as api:
        return _run(args, api)


def _hash_ahead(paths: list[str]) -> threading.Thread:
    """Hash the local input layers on a thread while the temporary Prefect server boots.

    The run's signature hashes them first thing (1.8 s of a 2M-field run's client, 1.4 GB);
    :func:`evalcore.remote.file_sha256` keeps what it hashed, so the signature then reads
    nothing again. A file it cannot read is left to the signature, which reports it; a
    layer on a store is not read here.
    """
    from evalcore import remote
    from evalcore.report import sha256_path

    def run() -> None:
        for path in paths:
            if remote.is_url(str(path)):
                continue
            try:
                sha256_path(path)
            except Exception:  # noqa: BLE001 - the signature hashes it again and says why it cannot
                continue

    thread = threading.Thread(target=run, name="evalcore-hash-ahead", daemon=True)
    thread.start()
    return thread


def _run(args: argparse.Namespace, api: PrefectApi) -> int:
    """:func:`run_command` with its Prefect API started."""
    from pydantic import ValidationError

    from flows.evaluate import RUN_LOG, evaluate_layers
    from flows.params import EvaluateParams

    # What needs no data (outputs, inputs, the run directory's claim) was checked by
    # evalcore.cli.checks.check_run_arguments before this package was imported.
    try:
        params = EvaluateParams(
            predicted=args.predicted,
            reference=args.reference,
            pred_layer=args.pred_layer,
            ref_layer=args.ref_layer,
            output_dir=args.output_dir,
            strata_column=args.strata_column,
            size_bins=args.size_bins,
            **metric_options(args),
            cluster=args.cluster,
            n_workers=args.workers,
            dashboard_address=dashboard_address(args),
            workdir=args.workdir,
            gates=args.gates,
            labels=_labels(args.label),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["loc"]:
            message = f"--{str(first['loc'][0]).replace('_', '-')}: {message}"
        raise EvalInputError(message) from None
    hashing = _hash_ahead([args.reference, args.predicted])
    check_columns_up_front(args)
    check_site_layers(args)
    if args.gates is not None:
        from evalcore.gates import load_gates

        load_gates(args.gates)  # a bad gates file fails before any work
    started = time.perf_counter()
    from flows.evaluate import GatesNotPassed

    from evalcore.logs import failures_reported_once

    try:
        with api.serving(), failures_reported_once():  # the failure's one line comes from evalcore.cli.run
            hashing.join()
            metrics = evaluate_layers(params)
    except GatesNotPassed as exc:
        # A decision, not a crash: the whole run is written, so it is shown as a passed
        # run is, then the rules that did not pass, as evalcore gate prints them.
        from evalcore.cli.text import gate_lines
        from evalcore.gates import exit_status

        _print_run(getattr(exc, "metrics", None) or _read_metrics(args.output_dir), args.output_dir, started, RUN_LOG)
        print("acceptance gates not passed:")
        for line in gate_lines(exc.result, not_passed_only=True):
            print(f"  {line}")
        print(f"{exc}", flush=True)
        return exit_status(exc.result)
    _print_run(metrics, args.output_dir, started, RUN_LOG)
    return 0


def _read_metrics(output_dir: str) -> dict:
    import json

    return json.loads((Path(output_dir) / "metrics.json").read_text(encoding="utf-8"))


def _print_run(metrics: dict, output_dir: str, started: float, run_log: Path) -> None:
    """The summary of a finished run and what its directory holds."""
    print(format_summary(metrics))
    from evalcore import remote

    if remote.is_url(output_dir) and remote.is_url(remote.normalise(output_dir)):  # a run directory on a store: what it holds
        held = set(remote.list_files(remote.normalise(output_dir)))
        held |= {rel.split("/", 1)[0] for rel in held if "/" in rel}
        exists, is_dir = (lambda name: name in held), (lambda name: name in held)
    else:
        out = Path(output_dir)
        exists, is_dir = (lambda name: (out / name).exists()), (lambda name: (out / name).is_dir())
    written = [name for name in ("metrics.json", "report.html", "report.md", "manifest.json", "tiles.parquet", "aois.parquet", "pr_curve.parquet") if exists(name)]
    written += [f"{name}/" for name in ("fields", "predictions") if is_dir(name)]
    if exists("evidence-manifest.json"):
        written.append("the evidence bundle (evidence-manifest.json; check it with evalcore verify)")
    print(f"run directory {output_dir}: {', '.join(written)}, {run_log.as_posix()} ({time.perf_counter() - started:.1f} s)")
