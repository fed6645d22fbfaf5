"""The terminal's line per phase (evalcore.logs, issue 33 item 3), in this process.

What a terminal and a pipe receive from :class:`evalcore.logs.PhaseProgress` through
:class:`evalcore.logs.TerminalHandler`, what ``-v`` changes, what a run's log file keeps,
and that Prefect's flow-run lines wait for ``-v``. The real command line is tested in
tests/unit/test_terminal_quiet.py.
"""

from __future__ import annotations

import io
import logging
import re
import sys

import pytest

from evalcore.logs import PROGRESS, PhaseProgress, TerminalHandler, run_log, terminal_line


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def terminal(monkeypatch):
    """A TerminalHandler on the progress logger writing to a fake standard error; yields a function (tty, verbosity) -> stream."""
    handlers: list[logging.Handler] = []
    names = (PROGRESS, "prefect.flow_runs.evalcore_test", "evalcore.test_other")
    saved = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate) for name in names}

    def remove() -> None:
        for handler in handlers:
            for name in names:
                logging.getLogger(name).removeHandler(handler)
        handlers.clear()

    def make(tty: bool, verbosity: int = 0) -> _Stream:
        remove()  # one terminal at a time
        stream = _Stream(tty)
        monkeypatch.setattr(sys, "stderr", stream)
        handler = TerminalHandler(verbosity)
        for name in names:
            logging.getLogger(name).addHandler(handler)
        handlers.append(handler)
        return stream

    for name in names:
        logging.getLogger(name).setLevel(logging.INFO)  # the handler's filter decides, as on the command line
        logging.getLogger(name).propagate = False  # pytest's own handlers need not see the lines
    yield make
    remove()
    for name, (level, propagate) in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).propagate = propagate


def _phase(progress: PhaseProgress, phase: str, total: int) -> None:
    for done in range(total + 1):
        progress(phase, done, total)


def test_a_pipe_gets_one_plain_line_per_phase(terminal):
    stream = terminal(tty=False)
    progress = PhaseProgress()
    _phase(progress, "prepare", 2)
    _phase(progress, "pairs", 8)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue() and "[" not in stream.getvalue()
    assert re.fullmatch(r"prepare     2 chunks in \d+\.\d s", lines[0]), lines
    assert re.fullmatch(r"pairs       8 partitions in \d+\.\d s", lines[1]), lines


def test_a_terminal_gets_the_line_redrawn_in_place(terminal):
    stream = terminal(tty=True)
    _phase(PhaseProgress(), "sums", 4)
    text = stream.getvalue()
    # Five redraws (0/4 ... the final line), each from the line's start; one newline, at the end.
    assert text.count("\r\x1b[K") == 5 and text.count("\n") == 1 and text.endswith(" s\n")
    assert "\r\x1b[Ksums        [###############...............] 2/4 partitions" in text
    shown = text.rsplit("\r\x1b[K", 1)[1]
    assert re.fullmatch(r"sums        4 partitions in \d+\.\d s\n", shown)


def test_a_warning_in_the_middle_of_a_phase_starts_its_own_line(terminal):
    stream = terminal(tty=True)
    progress = PhaseProgress()
    progress("pairs", 0, 2)
    progress("pairs", 1, 2)
    logging.getLogger("evalcore.test_other").warning("disk almost full")
    progress("pairs", 2, 2)
    text = stream.getvalue()
    assert "1/2 partitions\nWARNING evalcore.test_other: disk almost full\n\r\x1b[Kpairs" in text, repr(text)


def test_from_v_on_a_terminal_gets_plain_lines(terminal):
    stream = terminal(tty=True, verbosity=1)
    _phase(PhaseProgress(), "pairs", 3)
    assert "\r" not in stream.getvalue() and len(stream.getvalue().splitlines()) == 1


def test_a_terminal_line_is_shown_once_everywhere(terminal):
    for tty in (False, True):
        stream = terminal(tty=tty)
        terminal_line("Dask dashboard: http://127.0.0.1:1/status")
        assert stream.getvalue() == "Dask dashboard: http://127.0.0.1:1/status\n"


def test_prefect_flow_run_lines_wait_for_v(terminal):
    # A child of prefect.flow_runs (the same rule; not Prefect's own logger, whose API handler wants a flow run).
    stream = terminal(tty=False, verbosity=0)
    logging.getLogger("prefect.flow_runs.evalcore_test").info("Beginning flow run 'x' for flow 'evaluate-layers'")
    logging.getLogger("prefect.flow_runs.evalcore_test").warning("a warning still shows")
    assert stream.getvalue() == "WARNING prefect.flow_runs.evalcore_test: a warning still shows\n"
    stream = terminal(tty=False, verbosity=1)
    logging.getLogger("prefect.flow_runs.evalcore_test").info("Finished in state Completed()")
    assert "Finished in state Completed()" in stream.getvalue()


def test_the_run_log_keeps_the_phase_lines_only(tmp_path, terminal):
    terminal(tty=True)
    logging.getLogger(PROGRESS).propagate = True  # to the run log's handler on the root logger
    path = tmp_path / "run.log"
    with run_log(path):
        _phase(PhaseProgress(), "pairs", 5)
        terminal_line("Dask dashboard: http://127.0.0.1:1/status")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and re.search(r"evalcore\.progress: pairs +5 partitions in \d+\.\d s$", lines[0]), lines
