"""``evalcore run``: the flow ``evaluate-layers``, which the flows package runs (flows/cli.py)."""

from __future__ import annotations

import argparse

from evalcore.errors import EvalInputError

__all__ = ["run_command"]


def run_command(args: argparse.Namespace) -> int:
    """``evalcore run``: the Prefect flow, found through the ``evalcore.commands`` entry point.

    The flows package builds on the engine, never the other way round: the engine finds
    the command the flows package registers (pyproject.toml) instead of importing it.
    """
    from importlib.metadata import entry_points

    from evalcore.cli.checks import check_run_arguments

    check_run_arguments(args)  # before the flows package and Prefect are imported (seconds)
    found = entry_points(group="evalcore.commands", name="run")
    if not found:
        raise EvalInputError("evalcore run needs the flows package installed (pip install evalcore, which registers it).")
    command = next(iter(found)).load()
    return command(args)
