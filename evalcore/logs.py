"""What the command line prints while it works, and where the rest of the log goes.

:func:`configure_logging` is called by :func:`evalcore.cli.main` before the arguments
are parsed and again, with the command's ``-v``, after. It decides what reaches the
terminal:

======================  ==========================  ===============================  =====================
records from            default                     ``-v``                           ``-vv``
======================  ==========================  ===============================  =====================
any logger              WARNING and above           WARNING and above                WARNING and above
``evalcore.progress``   a line per phase            a line per phase                 a line per phase
``prefect.flow_runs``   (warnings only)             INFO (flow run, phases, keys)    INFO
other ``prefect.*``     (warnings only)             INFO (task states, server)       INFO
``evalcore``, ``flows`` (warnings only)             INFO (a line per partition)      DEBUG
Dask, Bokeh, Tornado    (warnings only)             (warnings only)                  INFO
======================  ==========================  ===============================  =====================

The progress lines (:data:`PROGRESS`, :class:`PhaseProgress`): on a terminal, one line
per phase redrawn in place as its partitions finish (``pairs  [#####.....] 3/8
partitions``) and left as ``pairs  8 partitions in 2.1 s``; when standard error is not a
terminal (a file, a pipe, CI), only that last plain line, once per phase. From ``-v`` on
they are plain lines too, between the per-partition lines. A run's log file keeps the
plain lines only.

At the default verbosity the terminal also leaves out Prefect's exit-time "Still
processing items" note, and, while :func:`failures_reported_once` is open (``evalcore
run``), Prefect's echoes of a failure: the command prints the failure once, as its one
error line.

:func:`run_log` copies the whole log of a run (DEBUG lines of evalcore and of the
flows, Prefect's INFO lines, every library's warnings) to a file for as long as the
run lasts, without changing what any terminal shows. The flow ``evaluate-layers``
writes ``<output_dir>/logs/run.log`` with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "DEBUG_ENV",
    "PROGRESS",
    "PhaseProgress",
    "TerminalHandler",
    "configure_logging",
    "debug_enabled",
    "failures_reported_once",
    "library_level",
    "run_log",
    "terminal_line",
]

#: Libraries whose INFO lines are only for ``-vv``.
LIBRARIES = ("distributed", "bokeh", "tornado")
#: Our own namespaces: their DEBUG lines go to a run's log file.
OWN = ("evalcore", "flows")
#: Set to anything but "" or "0": tracebacks and every library's INFO lines.
DEBUG_ENV = "EVALCORE_DEBUG"

_FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s%(run_name)s: %(message)s"
_TERMINAL_FORMAT = "%(levelname)s %(name)s: %(message)s"

_verbosity = 0  # set by configure_logging; read by library_level

PROGRESS = "evalcore.progress"
"""The logger of the lines a command shows at the default verbosity: a phase's progress
(:class:`PhaseProgress`) and a few single lines (:func:`terminal_line`)."""

# The ``extra`` key a progress record carries: "update" (redrawn in place on a terminal,
# dropped elsewhere), "phase" (a phase done) or "line" (a one-off line for the terminal).
_KIND = "evalcore_progress"
_BAR_WIDTH = 30


class PhaseProgress:
    """A progress callback ``(phase, done, total)`` that logs on :data:`PROGRESS`.

    ``done`` counts the finished units (input chunks for ``prepare``, partitions
    otherwise) out of ``total``; the call with ``done == 0`` starts the phase's clock and
    the call with ``done == total`` gives the phase's one plain line, with its wall time
    in seconds. The terminal handler draws the updates in place on a terminal and leaves
    them out elsewhere (module docstring).
    """

    def __init__(self, unit: str | None = None) -> None:
        self._started: dict[str, float] = {}
        self._logger = logging.getLogger(PROGRESS)
        self._unit = unit  # what ``done`` counts in every phase (``evalcore synth``: blocks); None: as above

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0 or phase not in self._started:
            self._started[phase] = now
        unit = self._unit or ("chunks" if phase == "prepare" else "partitions")
        if done >= total:
            self._logger.info("%-11s %d %s in %.1f s", phase, total, unit, now - self._started[phase], extra={_KIND: "phase"})
            return
        filled = _BAR_WIDTH * done // total if total else _BAR_WIDTH
        self._logger.info("%-11s [%s%s] %d/%d %s", phase, "#" * filled, "." * (_BAR_WIDTH - filled), done, total, unit,
                          extra={_KIND: "update"})


def terminal_line(text: str) -> None:
    """One line a command shows at the default verbosity (the Dask dashboard's address), not in a run's log file."""
    logging.getLogger(PROGRESS).info("%s", text, extra={_KIND: "line"})


def _under(name: str, roots: tuple[str, ...]) -> bool:
    """Whether logger ``name`` is one of ``roots`` or a descendant of one."""
    return any(name == root or name.startswith(root + ".") for root in roots)


class _TerminalFilter(logging.Filter):
    """The table of the module docstring, as a handler filter.

    A handler filter rather than logger levels: Prefect's run loggers must keep
    sending INFO to the Prefect API (its UI shows them), and a run's log file must
    get DEBUG lines, whatever the terminal shows.
    """

    def __init__(self, verbosity: int) -> None:
        super().__init__()
        self.verbosity = verbosity

    def filter(self, record: logging.LogRecord) -> bool:
        name, v = record.name, self.verbosity
        if record.levelno >= logging.WARNING:
            return v >= 1 or not _is_prefect_drain_note(record)
        if name == PROGRESS:
            return True
        if _under(name, ("prefect.flow_runs",)):
            return v >= 2 or (v == 1 and record.levelno >= logging.INFO)
        if _under(name, ("prefect",)):
            return v >= 1 and (record.levelno >= logging.INFO or v >= 2)
        if _under(name, OWN):
            return v >= 2 or (v == 1 and record.levelno >= logging.INFO)
        return v >= 2 and record.levelno >= logging.INFO


def _is_prefect_drain_note(record: logging.LogRecord) -> bool:
    """Prefect's "Still processing items: N items remaining..." while the process exits.

    Its queue services (events, API logs) log it under their class name (``EventsWorker``)
    at WARNING while they finish sending to the Prefect API; after a quick failure it would
    come after the command's one error line. Shown from ``-v`` on.
    """
    return record.name.endswith("Worker") and record.getMessage().startswith("Still processing items:")


class _TerminalFormatter(logging.Formatter):
    """The terminal's format; no traceback for an exception that is an expected outcome
    (its class sets ``expected_outcome = True``: gates that did not pass), which the log
    file still records whole."""

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and getattr(exc, "expected_outcome", False):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return super().format(record)


class TerminalHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record arrives.

    pytest's ``capsys`` and :func:`contextlib.redirect_stderr` replace ``sys.stderr``
    after logging is configured; a plain ``StreamHandler`` would keep the old one.
    The class name has no leading underscore on purpose: Prefect's logging setup
    keeps the root logger's handlers only when it sees a "user" handler there.
    """

    def __init__(self, verbosity: int = 0) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(_TerminalFormatter(_TERMINAL_FORMAT))
        self.addFilter(_TerminalFilter(verbosity))
        self.verbosity = verbosity
        self._open_line = False  # a progress line drawn in place, not yet ended

    def emit(self, record: logging.LogRecord) -> None:
        kind = getattr(record, _KIND, None)
        if kind is None:
            if self._open_line:  # a warning in the middle of a phase goes below its line
                self._write("\n")
            super().emit(record)
            return
        try:
            message = record.getMessage()
            stream = self.stream
            in_place = self.verbosity == 0 and bool(getattr(stream, "isatty", lambda: False)())
            if in_place and kind != "line":
                # Carriage return and erase-line: the phase's line is redrawn where it is.
                self._write(f"\r\x1b[K{message}" + ("\n" if kind == "phase" else ""))
                self._open_line = kind == "update"
            elif kind != "update":
                self._write(("\n" if self._open_line else "") + message + "\n")
        except Exception:  # noqa: BLE001  (logging's own rule: a handler never raises)
            self.handleError(record)

    def _write(self, text: str) -> None:
        stream = self.stream
        stream.write(text)  # type: ignore[attr-defined]
        stream.flush()  # type: ignore[attr-defined]
        if text.endswith("\n"):
            self._open_line = False

    @property
    def stream(self) -> object:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:  # StreamHandler.__init__ assigns it
        pass


class _FailureEchoFilter(logging.Filter):
    """Drops the records that only echo a failure the command line reports itself.

    When a flow fails, Prefect logs it several times (the task's and the flow's
    "Finished in state Failed(...)", "Encountered exception during execution" with the
    traceback); :func:`evalcore.cli.run` then prints the same error once, as the one
    line every failure gets (exit 2 for bad input, 1 otherwise). The run's log file
    keeps every record, traceback included.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _under(record.name, ("prefect",)):
            return True
        if record.levelno >= logging.ERROR:
            return False
        message = record.getMessage()
        return not (message.startswith("Finished in state") and ("Failed(" in message or "Crashed(" in message))


@contextlib.contextmanager
def failures_reported_once() -> Iterator[None]:
    """While the block runs, the terminal shows no Prefect record that echoes a failure.

    For ``evalcore run``: at the default verbosity, without EVALCORE_DEBUG, a failed run
    ends with the command line's one error line and nothing else from the failure. With
    ``-v`` or EVALCORE_DEBUG the terminal shows everything, as before.
    """
    if _verbosity >= 1 or debug_enabled():
        yield
        return
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, TerminalHandler)]
    echo = _FailureEchoFilter()
    for handler in handlers:
        handler.addFilter(echo)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(echo)


def configure_logging(verbosity: int = 0) -> None:
    """Set what evalcore and the libraries it drives print on the terminal.

    Installs one :class:`TerminalHandler` on the root logger (replacing the one of an
    earlier call), unless the application already put its own handlers there (pytest,
    a notebook): those are left alone, as :func:`logging.basicConfig` would.

    Parameters
    ----------
    verbosity : int
        0: a progress line per phase (:class:`PhaseProgress`), the dashboard's address
        and warnings; 1 (``-v``): also evalcore's lines per partition and phase,
        Prefect's flow-run, task and server lines; 2 (``-vv``): everything at INFO, and
        evalcore's DEBUG lines.
    """
    global _verbosity
    _verbosity = max(0, int(verbosity))
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, TerminalHandler)]
    if len(ours) == len(root.handlers):
        for handler in ours:
            root.removeHandler(handler)
        root.addHandler(TerminalHandler(_verbosity))
    own_level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(_verbosity, 2)]
    for name in OWN:
        logging.getLogger(name).setLevel(own_level)
    logging.getLogger(PROGRESS).setLevel(logging.INFO)  # shown at every verbosity
    # Importing distributed sets its loggers to INFO again; local_cluster re-applies this.
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(library_level())


def debug_enabled() -> bool:
    """Whether :data:`DEBUG_ENV` asks for tracebacks and every log line."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def library_level(quiet: int = logging.WARNING) -> int:
    """The level for Dask's, Bokeh's and Tornado's loggers: INFO at ``-vv`` or with
    EVALCORE_DEBUG, else ``quiet`` (WARNING; CRITICAL where errors reach the user another way)."""
    return logging.INFO if _verbosity >= 2 or debug_enabled() else quiet


class _FileFormatter(logging.Formatter):
    """:data:`_FILE_FORMAT`, naming the Prefect flow or task run a record comes from.

    Prefect's run loggers attach ``flow_run_name`` / ``task_run_name`` to their
    records; without them, six "Finished in state Completed()" lines look the same.
    """

    def format(self, record: logging.LogRecord) -> str:
        run = getattr(record, "task_run_name", None) or getattr(record, "flow_run_name", None)
        record.run_name = f" [{run}]" if run else ""
        return super().format(record)


class _AsBefore(logging.Filter):
    """Drops the records that pass only because :func:`run_log` lowered a logger's level.

    Put on the other handlers of the root logger while a run log is open, so that
    what a terminal (or pytest's capture) shows does not change.
    """

    def __init__(self, saved: dict[str, int]) -> None:
        super().__init__()
        self.saved = saved

    def filter(self, record: logging.LogRecord) -> bool:
        if not _under(record.name, OWN):  # only OWN loggers ever have their level lowered
            return True
        return record.levelno >= self._level_before(record.name)

    def _level_before(self, name: str) -> int:
        """The effective level logger ``name`` had before the run log opened."""
        while name:
            if name in self.saved:
                return self.saved[name]
            level = logging.getLogger(name).level
            if level != logging.NOTSET:
                return level
            name = name.rpartition(".")[0]
        return logging.getLogger().level


_open_lock = threading.Lock()
_open_count = 0
_saved_levels: dict[str, int] = {}
_guarded: list[tuple[logging.Handler, _AsBefore]] = []


def _open_gates() -> None:
    """Lower evalcore's and the flows' loggers to DEBUG (first open run log only)."""
    global _open_count
    with _open_lock:
        _open_count += 1
        if _open_count > 1:  # a run inside a run (a subflow): already open
            return
        for name in OWN:
            _saved_levels[name] = logging.getLogger(name).level
        guard = _AsBefore({name: logging.getLogger(name).getEffectiveLevel() for name in OWN})
        for handler in logging.getLogger().handlers:
            handler.addFilter(guard)
            _guarded.append((handler, guard))
        for name in OWN:
            logging.getLogger(name).setLevel(logging.DEBUG)


def _close_gates() -> None:
    """Undo :func:`_open_gates` when the last open run log closes."""
    global _open_count
    with _open_lock:
        _open_count -= 1
        if _open_count > 0:
            return
        for name, level in _saved_levels.items():
            logging.getLogger(name).setLevel(level)
        _saved_levels.clear()
        # Also from handlers taken off the root meanwhile (pytest's, per test), which may be reused.
        for handler, guard in _guarded:
            handler.removeFilter(guard)
        _guarded.clear()


@contextlib.contextmanager
def run_log(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Append the whole log of this process to ``path`` while the block runs.

    DEBUG and above from evalcore and the flows, and whatever the other loggers let
    through (Prefect's INFO, Dask's warnings). Records from Dask worker processes
    stay in those processes. Terminals and other handlers show what they showed
    before. Runs may nest (the outer one's file gets the inner one's lines too);
    concurrent runs in one process share each other's lines.

    Parameters
    ----------
    path : path-like
        The log file; its directory is created. An existing file is appended to,
        so a rerun after an interruption keeps the interrupted run's log.

    Yields
    ------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _RunLogHandler(path, mode="a", encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.addFilter(_plain_progress_only)
    handler.setFormatter(_FileFormatter(_FILE_FORMAT))
    _open_gates()  # before adding ours, so that it is not filtered
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        try:
            handler.close()
        except OSError as exc:  # the last buffered lines: not an error that should hide the run's own
            handler.error = handler.error or exc
        _close_gates()
    if handler.error is not None:  # the run itself went through, its log did not
        from evalcore.writers import write_error

        raise write_error(path, handler.error)


def _plain_progress_only(record: logging.LogRecord) -> bool:
    """A run log's filter: a phase's closing line stays, its in-place updates and the terminal's own lines do not."""
    return getattr(record, _KIND, "phase") == "phase"


class _RunLogHandler(logging.FileHandler):
    """A run's log file. A write that fails (a full disk) is remembered for :func:`run_log`
    to report once, with the file's name, instead of a traceback on standard error per record."""

    error: OSError | None = None

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self.error = self.error or exc
            return
        super().handleError(record)
