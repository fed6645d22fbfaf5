"""The commands of ``evalcore``, one module per group, and the table that names them.

Each command takes the parsed arguments and returns the exit status; a user error is
raised as :class:`~evalcore.errors.EvalInputError` and reported by :func:`evalcore.cli.run`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from evalcore.cli.commands.compare import compare_command
from evalcore.cli.commands.evaluate import evaluate_command
from evalcore.cli.commands.review import review_command
from evalcore.cli.commands.run import run_command
from evalcore.cli.commands.rundir import gate_command, report_command, verify_command
from evalcore.cli.commands.synth import synth_command

__all__ = [
    "COMMANDS",
    "compare_command",
    "evaluate_command",
    "gate_command",
    "report_command",
    "review_command",
    "run_command",
    "synth_command",
    "verify_command",
]

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "evaluate": evaluate_command,
    "run": run_command,
    "synth": synth_command,
    "compare": compare_command,
    "gate": gate_command,
    "verify": verify_command,
    "report": report_command,
    "review": review_command,
}
"""Each subcommand of :func:`evalcore.cli.parser.build_parser` and the function that runs it."""
