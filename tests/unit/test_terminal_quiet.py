"""The terminal after a successful run (issue 33, item 3), through the real command line.

* ``evaluate --cluster local`` with standard error not a terminal (a pipe): the
  dashboard's address and one plain line per phase, no progress bars; on a terminal
  (a pseudo-terminal) one line per phase redrawn in place.
* ``evalcore run``: no Prefect "Beginning flow run"/"Finished in state" lines, no line
  listing partition keys; one line per phase; ``-v`` brings the rest back.
* Closing the embedded cluster waits for a worker that is slow to exit instead of
  killing it with "Worker process still alive after 4.0 seconds, killing".
"""

from __future__ import annotations

import logging
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_BIN = Path(sys.executable).parent
# A phase's one plain line: "pairs       8 partitions in 1.2 s".
PHASE_LINE = re.compile(r"^(prepare|pairs|sums|predictions) +\d+ (chunks|partitions) in \d+\.\d s$")
STILL_ALIVE = "still alive after"


def _evalcore() -> str:
    exe = _BIN / "evalcore"
    return str(exe) if exe.exists() else "evalcore"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALCORE_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture(scope="module")
def layers(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("quiet") / "data"
    done = subprocess.run([_evalcore(), "synth", "--n-ref", "400", "--seed", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return out / "predicted.parquet", out / "reference.parquet"


def _evaluate_args(layers: tuple[Path, Path], out: Path) -> list[str]:
    pred, ref = layers
    return [_evalcore(), "evaluate", "-p", str(pred), "-r", str(ref), "--cluster", "local", "--workers", "2",
            "--in-process-below", "0", "-o", str(out)]


@pytest.mark.cli
@pytest.mark.cluster
def test_evaluate_on_a_cluster_to_a_pipe_prints_a_line_per_phase(layers, tmp_path):
    done = subprocess.run(_evaluate_args(layers, tmp_path / "m.json"), capture_output=True, text=True, timeout=600, env=_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("Dask dashboard: http"), done.stderr
    # Nothing else: one plain line per phase, in order, no bar, no carriage return.
    assert [PHASE_LINE.match(line).group(1) if PHASE_LINE.match(line) else line for line in lines[1:]] == ["prepare", "pairs", "sums"], done.stderr
    assert "[#" not in done.stderr and "[." not in done.stderr and "\r" not in done.stderr, done.stderr
    assert STILL_ALIVE not in done.stderr
    assert done.stdout.splitlines()[0].startswith("reference fields "), done.stdout


def _run_on_a_terminal(argv: list[str], timeout: float = 600) -> tuple[int, str]:
    """Run ``argv`` with standard output and error on a pseudo-terminal; its status and what it wrote."""
    parent, child = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=_env(), cwd=ROOT, close_fds=True)
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 1.0)
        if ready:
            try:
                data = os.read(parent, 65536)
            except OSError:  # the child closed the terminal (Linux: EIO)
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(parent)
    status = proc.wait(timeout=60)
    return status, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.cli
@pytest.mark.cluster
@pytest.mark.slow  # make slow (CI time): the same phases' lines to a pipe are in make test
def test_evaluate_on_a_cluster_on_a_terminal_redraws_one_line_per_phase(layers, tmp_path):
    status, text = _run_on_a_terminal(_evaluate_args(layers, tmp_path / "m.json"))
    assert status == 0, text
    # Each redraw starts with a carriage return and erase-line; the phase ends on its plain line.
    for phase in ("prepare", "pairs", "sums"):
        assert re.search(rf"\r\x1b\[K{phase} +\[[#.]{{30}}\] 0/\d+ ", text), (phase, text)
        assert re.search(rf"\r\x1b\[K{phase} +\d+ (chunks|partitions) in \d+\.\d s\r?\n", text), (phase, text)
    # Once the escapes are applied, the terminal shows one line per phase.
    shown = [line.rsplit("\r\x1b[K", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")]
    assert sum(bool(PHASE_LINE.match(line)) for line in shown) == 3, shown
    assert STILL_ALIVE not in text


@pytest.mark.cli
@pytest.mark.cluster
@pytest.mark.prefect
@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_run_prints_no_prefect_lines_and_no_partition_keys(layers, tmp_path, prefect_server):
    pred, ref = layers
    env = _env(PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_API_URL=prefect_server)
    out = tmp_path / "run"
    done = subprocess.run([_evalcore(), "run", "-p", str(pred), "-r", str(ref), "--workers", "2", "-o", str(out)],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    for needle in ("Beginning flow run", "Finished in state", "View at", " running: ", "prefect.flow_runs", STILL_ALIVE, "Traceback"):
        assert needle not in done.stderr, (needle, done.stderr)
    assert lines[0].startswith("Dask dashboard: http"), done.stderr
    assert [PHASE_LINE.match(line).group(1) if PHASE_LINE.match(line) else line for line in lines[1:]] == [
        "prepare", "pairs", "sums", "predictions"], done.stderr
    assert all(len(line) < 100 for line in lines), done.stderr
    assert any(line.startswith(f"run directory {out}:") for line in done.stdout.splitlines()), done.stdout
    # The run's log keeps what the terminal leaves out, and no redrawn bar.
    log = (out / "logs" / "run.log").read_text(encoding="utf-8")
    assert "pairs: " in log and " partitions running: " in log and "Finished in state" in log, log
    assert "[#" not in log and "[...." not in log, log


@pytest.mark.cli
@pytest.mark.cluster
@pytest.mark.prefect
@pytest.mark.slow
def test_run_verbose_prints_prefect_lines_and_partition_keys(layers, tmp_path, prefect_server):
    """``-v`` brings Prefect's flow-run lines and the partition keys back (``make slow``: a
    second whole ``evalcore run``; the quiet run above is in ``make test``)."""
    pred, ref = layers
    env = _env(PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_API_URL=prefect_server)
    verbose = subprocess.run([_evalcore(), "run", "-v", "-p", str(pred), "-r", str(ref), "--workers", "2", "-o", str(tmp_path / "run-v")],
                             capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert verbose.returncode == 0, verbose.stderr
    assert "Beginning flow run" in verbose.stderr and " partitions running: " in verbose.stderr, verbose.stderr
    assert sum(bool(PHASE_LINE.match(line)) for line in verbose.stderr.splitlines()) == 4, verbose.stderr


@pytest.mark.cluster
def test_closing_waits_for_a_worker_slow_to_exit(caplog):
    """A worker whose process takes 6 s to exit (tests/slow_exit.py) is closed, not killed after 4 s."""
    from distributed import Client

    from evalcore.distributed.cluster import WORKER_CLOSE_SECONDS, local_cluster

    assert WORKER_CLOSE_SECONDS > 6
    with caplog.at_level(logging.WARNING, logger="distributed"):
        with local_cluster(1, preload=["tests.slow_exit"], silence_logs=logging.WARNING) as cluster, Client(cluster) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            started = time.perf_counter()
        seconds = time.perf_counter() - started
    assert not [r for r in caplog.records if STILL_ALIVE in r.getMessage()], caplog.text
    assert seconds >= 5.5, seconds  # it did wait for the slow exit


def test_national_run_shows_the_lines_the_tool_prints():
    """docs/national-run.md, "Follow it": every line of its terminal examples is one the commands print now."""
    text = (ROOT / "docs" / "national-run.md").read_text(encoding="utf-8")
    section = text.split("## 4. Follow it", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, blocks
    for block in blocks:
        lines = block.strip().splitlines()
        assert re.fullmatch(r"Dask dashboard: http://127\.0\.0\.1:\d+/status", lines[0]), lines
        assert [PHASE_LINE.match(line).group(1) if PHASE_LINE.match(line) else line for line in lines[1:]][:3] == ["prepare", "pairs", "sums"], lines
        assert all(PHASE_LINE.match(line) for line in lines[1:]), lines
