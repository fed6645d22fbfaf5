"""What a newcomer sees: ``python -m evalcore.demo`` and ``evalcore run``, through real subprocesses.

* A demo whose flow cannot start says that it failed, exits non-zero and points to no
  report (Prefect's ephemeral server is given 0 s to start, which fails at once with
  the same error as a server too slow to start on a busy machine).
* The default output of ``evalcore run`` is a line per phase, the dashboard link,
  warnings and the summary: no traceback, no Dask INFO lines, no Prefect flow-run
  lines, no line per partition; ``-v`` adds the partition lines; ``logs/run.log`` has
  them all.
* On a loaded machine (4 busy processes on this 2-core machine) the demo, on a
  small dataset, still succeeds (80-150 s: ``slow``, run by ``make slow``).

Every subprocess gets a clean environment: no ``PREFECT_*`` or ``EVALCORE_*``
variables from the caller (the session's test harness, a developer's settings), and
a ``PREFECT_HOME`` of its own so that its ephemeral server's SQLite database is not
shared with other Prefect processes on the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
N_REF = 300  # fields: enough for 6 partitions in 3 UTM zones, small enough for seconds of work
TIMEOUT_S = 300  # per subprocess: a hang fails the test instead of the suite
# The runner's line per partition (evalcore.distributed.runner, or the flow's copy).
PARTITION_LINE = re.compile(r"(pairs|sums|predictions): partition \S.* done \(\d+/\d+\)")
NOISE = ("Traceback", "database is locked", "docket")
# Dask's INFO lines, in this process's format ("INFO distributed.scheduler: ...") and in a
# worker process's own ("... - distributed.worker - INFO - ...").
DASK_INFO = re.compile(r"INFO distributed\.|distributed\.[\w.]+ - INFO - ")


def _env(prefect_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "EVALCORE_"))}
    return {**env, "PREFECT_HOME": str(prefect_home), **extra}


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    """Run ``python <argv>``; return its status, its stdout and stderr together, and its seconds."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S)
    return proc.returncode, proc.stdout, time.perf_counter() - started


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture(scope="module")
def layers(tmp_path_factory, prefect_home) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("newcomer") / "data"
    status, output, _ = _run(["-m", "evalcore.cli", "synth", "--n-ref", str(N_REF), "--seed", "1", "--out", str(out)],
                             _env(prefect_home))
    assert status == 0, output
    return out / "predicted.parquet", out / "reference.parquet"


@pytest.fixture(scope="module")
def default_run(layers, prefect_home, tmp_path_factory):
    """``evalcore run`` with no ``-v``: its output and run directory."""
    out = tmp_path_factory.mktemp("run-default") / "run"
    pred, ref = layers
    status, output, _ = _run(["-m", "evalcore.cli", "run", "-p", str(pred), "-r", str(ref), "-o", str(out)], _env(prefect_home))
    assert status == 0, output
    return output, out


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_failed_demo_says_so_and_points_to_no_report(prefect_home, tmp_path):
    out = tmp_path / "demo"
    env = _env(prefect_home, EVALCORE_DEMO_N_REF="50", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="0")
    status, output, _ = _run(["-m", "evalcore.demo", str(out)], env)
    lines = output.strip().splitlines()
    assert status != 0, output
    assert "Timed out while attempting to connect to ephemeral Prefect API server" in output, output
    assert lines[-1].startswith("demo failed at step 2/2"), output
    assert "Timed out" in lines[-1]  # the verdict says why
    assert sum(line.startswith("demo failed") for line in lines) == 1, output
    assert "report.md" not in output and "demo finished" not in output, output
    assert not (out / "run" / "report.md").exists()


def test_demo_with_a_bad_size_fails_before_any_work(prefect_home, tmp_path):
    status, output, _ = _run(["-m", "evalcore.demo", str(tmp_path / "demo")], _env(prefect_home, EVALCORE_DEMO_N_REF="many"))
    assert status == 2 and output.strip().splitlines() == [
        "demo failed at step 0/2 (settings): EVALCORE_DEMO_N_REF must be a positive whole number of fields, but got 'many'."
    ], output
    assert not (tmp_path / "demo" / "data").exists()


# The default run is a whole `evalcore run` with its own Prefect server (about 100 s):
# make slow. make test runs `evalcore run` through tests/report and test_evidence_flow.
@pytest.mark.slow
def test_default_run_output_is_short(default_run):
    output, out = default_run
    lines = output.splitlines()
    assert len(lines) < 40, output
    for needle in NOISE:
        assert not [line for line in lines if needle in line], (needle, output)
    assert not [line for line in lines if DASK_INFO.search(line)], output
    assert not [line for line in lines if PARTITION_LINE.search(line)], output
    assert any(line.startswith("reference fields ") for line in lines), output  # the summary
    assert any(line.startswith("precision ") for line in lines), output
    assert any(line.startswith(f"run directory {out}:") for line in lines), output
    assert any("Dask dashboard: http" in line for line in lines), output
    for phase in ("prepare", "pairs", "sums"):  # one line per phase, without the partition keys
        assert sum(re.fullmatch(rf"{phase} +\d+ (chunks|partitions) in \d+\.\d s", line) is not None for line in lines) == 1, (phase, output)
    assert not [line for line in lines if " running: " in line or "Beginning flow run" in line], output


@pytest.mark.slow
def test_run_log_has_every_partition(default_run):
    _, out = default_run
    log = (out / "logs" / "run.log").read_text(encoding="utf-8")
    partitions = [line for line in log.splitlines() if PARTITION_LINE.search(line)]
    n = int(re.search(r"pairs: (\d+) partitions running", log).group(1))
    assert len([p for p in partitions if "pairs: " in p]) == n and len([p for p in partitions if "sums: " in p]) == n, log
    assert "DEBUG" in log and "run finished" in log, log


@pytest.mark.slow  # 50 s: a whole flow run in a subprocess for its log lines (make slow)
def test_verbose_run_shows_every_partition(layers, prefect_home, tmp_path):
    pred, ref = layers
    out = tmp_path / "run"
    status, output, _ = _run(["-m", "evalcore.cli", "run", "-v", "-p", str(pred), "-r", str(ref), "-o", str(out)], _env(prefect_home))
    assert status == 0, output
    shown = [PARTITION_LINE.search(line).group(1) for line in output.splitlines() if PARTITION_LINE.search(line)]
    for phase in ("pairs", "sums", "predictions"):  # each partition of each phase once
        match = re.search(rf"{phase}: (\d+) partitions running", output)
        assert match and shown.count(phase) == int(match.group(1)), (phase, output)
    assert "Traceback" not in output and not DASK_INFO.search(output), output


@pytest.mark.slow
def test_demo_succeeds_on_a_loaded_machine(tmp_path):
    """4 busy processes on 2 cores; a Prefect home of its own, so its server also creates its database."""
    out = tmp_path / "demo"
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        status, output, seconds = _run(["-m", "evalcore.demo", str(out)],
                                       _env(tmp_path / "prefect-home", EVALCORE_DEMO_N_REF=str(N_REF)))
    finally:
        for proc in busy:
            proc.kill()
        for proc in busy:
            proc.wait()
    assert status == 0, output
    assert output.strip().splitlines()[-1].endswith(f"open {out / 'run' / 'report.md'} for the report"), output
    assert (out / "run" / "report.md").is_file()
    assert "Traceback" not in output and "demo failed" not in output, output
    print(f"demo under load: {seconds:.1f} s")
