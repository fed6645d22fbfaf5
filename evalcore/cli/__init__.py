"""The ``evalcore`` command line.

``evalcore evaluate`` compares two layer files and writes the metrics as JSON;
``evalcore synth`` writes a generated dataset. Every user error (a bad argument, a
missing, unreadable or corrupt file, a bad column, an output path that cannot be
written) ends with exit status 2 and one line on standard error naming the path,
argument, row or column; no output file is left behind. Anything else that goes wrong
ends with exit status 1 and one line (``EVALCORE_DEBUG=1`` shows the traceback).
Arguments, columns and output locations are checked before any evaluation starts
(docs/reliability.md).

The package, by idea: :mod:`~evalcore.cli.parser` (the argument tree, a flag per
registered option), :mod:`~evalcore.cli.checks` (what is checked before any work),
:mod:`~evalcore.cli.text` (what the commands print), :mod:`~evalcore.cli.cluster`
(starting or reaching a Dask cluster) and :mod:`~evalcore.cli.commands` (one module
per group of commands). This module runs a command and turns every failure into its
one line and exit status.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from evalcore.cli.allocator import arrow_on_system_allocator, return_freed_memory

# Before the imports below, which load pyarrow (evalcore.cli.allocator).
arrow_on_system_allocator()

from evalcore.cli.checks import check_columns_up_front, check_output_dir, check_site_layers
from evalcore.cli.cluster import dashboard_address
from evalcore.cli.commands import COMMANDS
from evalcore.cli.parser import UsageError, build_parser, metric_options
from evalcore.cli.text import format_comparison, format_summary, level_lines, unassigned_note
from evalcore.errors import EvalInputError
from evalcore.logs import DEBUG_ENV, configure_logging, debug_enabled

__all__ = [
    "build_parser",
    "command",
    "check_columns_up_front",
    "check_output_dir",
    "check_site_layers",
    "dashboard_address",
    "format_comparison",
    "format_summary",
    "level_lines",
    "main",
    "metric_options",
    "run",
    "unassigned_note",
]

EXIT_USAGE = 2
EXIT_FAILURE = 1


def _one_line_warning(message: object, category: type, filename: str, lineno: int, file: object = None, line: object = None) -> None:
    """Print a Python warning as one line on standard error (no source line, no traceback)."""
    text = str(message).strip().replace("\n", " ")
    print(f"evalcore: warning: {category.__name__}: {text}", file=sys.stderr)


def _input_error_in_chain(exc: BaseException) -> EvalInputError | None:
    """The first :class:`EvalInputError` in ``exc``'s chain of causes and contexts.

    A bad input found inside a Dask task can make the code that collects the task's
    result fail in turn; the user must still see the input error, which names the file.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EvalInputError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    0: success. 2: a user error (bad argument, file, layer, row, column or output
    location), one line on standard error. 1: any other failure, one line on standard
    error (the traceback only with ``EVALCORE_DEBUG=1``). 130: interrupted.
    """
    return run(argv)[0]


def command() -> NoReturn:
    """The ``evalcore`` console command: :func:`main`, then the process ends at once.

    The exit handlers run (the log files are closed, the temporary files removed) and the
    streams are flushed; the interpreter's own teardown of every loaded module (Prefect,
    Dask, pandas, matplotlib) is skipped: after a run it took 1.3-1.4 s (py-spy, a
    1,000-field run, 2026-12-06), with nothing left to do. An exception that escapes
    :func:`main` (``EVALCORE_DEBUG=1``) ends the process the usual way, with its traceback.
    """
    status = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more to say
            stream.flush()
    os._exit(status)


def run(argv: Sequence[str] | None = None) -> tuple[int, str | None]:
    """:func:`main`, also returning the reason of a failure (the error line, without its
    ``evalcore: error:`` prefix), for callers that report it again (the demo)."""

    def fail(status: int, message: str) -> tuple[int, str]:
        print(f"evalcore: error: {message}", file=sys.stderr)
        return status, message

    return_freed_memory()  # the process is the command's: its client memory does not stay at its peaks (evalcore.cli.allocator)
    # Once before parsing (warnings while parsing), again with the -v of the command.
    configure_logging(0)
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else list(argv)):
        # A bare `evalcore`: what it is and its commands, one line each (not a usage error).
        print(parser.format_help(), end="")
        return 0, None
    debug = debug_enabled()
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        try:
            args = parser.parse_args(argv)
            configure_logging(getattr(args, "verbose", 0))
            return COMMANDS[args.command](args), None
        except (UsageError, EvalInputError, ValueError, TypeError, ImportError, OSError) as exc:
            if debug:
                raise
            exc = _input_error_in_chain(exc) or exc
            return fail(EXIT_USAGE, str(exc).strip().replace("\n", " ") or type(exc).__name__)
        except KeyboardInterrupt:
            print("evalcore: interrupted", file=sys.stderr)
            return 130, "interrupted"
        except Exception as exc:  # never a traceback on the terminal: one line, exit status 1
            if debug:
                raise
            cause = _input_error_in_chain(exc)
            if cause is not None:  # a bad input that made something else fail: report the input
                return fail(EXIT_USAGE, str(cause).strip().replace("\n", " "))
            message = str(exc).strip().replace("\n", " ") or "(no message)"
            return fail(EXIT_FAILURE, f"{type(exc).__name__}: {message} (set {DEBUG_ENV}=1 for the traceback)")

