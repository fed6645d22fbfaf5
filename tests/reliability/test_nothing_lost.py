"""Nothing a user owns is lost (issue 27, items 1-8), through the real command line.

Each test runs ``evalcore`` as a user would, and checks the files on disk afterwards
(the runs that do work, and a killed run, in a subprocess; the refusals, ``synth`` and
``evaluate`` in this process, :func:`tests.common.cli_in_process`, the flow of a refused
run replaced by one that fails the test): what evalcore did not create is still there byte for byte, an output is
either the old one or a whole new one, a directory output holds one run's parts, a run
directory is held by one run at a time, its ``status.json`` is written last and agrees
with the exit status and the Prefect flow's state, and the Prefect server a run started
dies with it.

A full disk is a small ``tmpfs`` mounted for the test (``tests.common.full_disk``; root
only, skipped otherwise).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import geopandas
import pytest

from evalcore.synth import write_layers
from tests.common import FILLER, cli_in_process, full_disk, naive_sha256, run_cli

pytestmark = pytest.mark.timeout(600)

N_REF = 300


@pytest.fixture(scope="module")
def layers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small generated layer pair (predicted, reference) in a directory of its own."""
    pred, ref = write_layers(tmp_path_factory.mktemp("layers"), N_REF, seed=3)
    return pred, ref


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())
    return dst


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its SHA-256 (what must survive untouched)."""
    return {p.relative_to(root).as_posix(): naive_sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("evalcore: error:")]
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _run_env(prefect_server: str | None) -> dict[str, str]:
    env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if prefect_server is None:
        env.pop("PREFECT_API_URL", None)
    else:
        env["PREFECT_API_URL"] = prefect_server
    return env


@pytest.fixture()
def no_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    """For an ``evalcore run`` that must be refused before any work: its flow fails the test if it starts."""
    import flows.evaluate

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the flow started")

    monkeypatch.setattr(flows.evaluate, "evaluate_layers", never)


def _evalcore_run(args: list[str], prefect_server: str | None, **popen: object) -> subprocess.Popen:
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen(
        [sys.executable, "-m", "evalcore.cli", "run", "--workers", "1", *args], text=True, env=_run_env(prefect_server), **popen,
    )


# --------------------------------------------------------------------------- item 1: the work directory


def test_run_refuses_a_workdir_holding_its_inputs_and_deletes_nothing(tmp_path: Path, layers: tuple[Path, Path], no_flow: None) -> None:
    proj = tmp_path / "proj"
    pred, ref = _copy(layers[0], proj / "pred.parquet"), _copy(layers[1], proj / "ref.parquet")
    (proj / "NOTES.txt").write_text("x\n")
    before = _tree(proj)
    (tmp_path / "runs").mkdir()
    result = cli_in_process("run", "-p", pred, "-r", ref, "--workdir", proj, "-o", tmp_path / "runs" / "p")
    _one_line_error(result, "workdir", "input")
    assert _tree(proj) == before
    assert not any((tmp_path / "runs").iterdir())


@pytest.mark.cli
@pytest.mark.cluster  # evalcore run in a subprocess: a flow on a LocalCluster
@pytest.mark.prefect
@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_run_removes_only_what_it_wrote_in_a_users_workdir(tmp_path: Path, layers: tuple[Path, Path], prefect_server: str) -> None:
    proj = tmp_path / "proj"
    (proj / "notes").mkdir(parents=True)
    (proj / "NOTES.txt").write_text("my notes\n")
    (proj / "notes" / "a.txt").write_text("more\n")
    before = _tree(proj)
    made = tmp_path / "scratch" / "made-by-evalcore"  # a work directory evalcore creates: removed after success
    (tmp_path / "scratch").mkdir()
    # runs/ does not exist: a run directory's missing parents are created (issue 33, item 6)
    # With an AOI layer the run also writes the site layers' pieces (workdir/sites): removed too.
    aoi = ["--aoi", str(layers[0].parent / "aoi.parquet"), "--aoi-id-column", "aoi_id"]
    # The two runs at the same time: their waits (imports, cluster start) overlap.
    runs = [(out, _evalcore_run(["-p", str(layers[0]), "-r", str(layers[1]), *aoi, "--workdir", str(workdir), "-o", str(out)],
                                prefect_server))
            for workdir, out in ((proj, tmp_path / "runs" / "a"), (made, tmp_path / "runs" / "b"))]
    for out, proc in runs:
        stdout, stderr = proc.communicate(timeout=500)
        assert proc.returncode == 0, stderr[-3000:]
        assert (out / "metrics.json").is_file()
    assert _tree(proj) == before and sorted(p.name for p in proj.iterdir()) == ["NOTES.txt", "notes"]
    assert not made.exists() and (tmp_path / "scratch").is_dir()


# --------------------------------------------------------------------------- item 2: outputs are not inputs


@pytest.mark.parametrize("case", ["aoi-inside-out", "parts-inside-out", "input-in-work-of-out", "workdir-is-input-dir"])
def test_run_refuses_outputs_that_hold_inputs_before_any_work(tmp_path: Path, layers: tuple[Path, Path], case: str, no_flow: None) -> None:
    proj = tmp_path / "proj"
    pred, ref = _copy(layers[0], tmp_path / "in" / "pred.parquet"), _copy(layers[1], tmp_path / "in" / "ref.parquet")
    args = ["-r", str(ref)]
    if case == "aoi-inside-out":
        aoi = _copy(layers[0].with_name("aoi.parquet"), proj / "aois.parquet")
        args += ["-p", str(pred), "--aoi", str(aoi), "--aoi-id-column", "aoi_id", "-o", str(proj)]
        flag = "--aoi"
    elif case == "parts-inside-out":
        _copy(layers[0], proj / "predictions" / "part-0.parquet")
        args += ["-p", str(proj / "predictions"), "-o", str(proj)]
        flag = "predicted"
    elif case == "input-in-work-of-out":
        inner = _copy(layers[0], proj / "work" / "pred.parquet")
        args += ["-p", str(inner), "-o", str(proj)]
        flag = "predicted"
    else:
        args += ["-p", str(pred), "--workdir", str(tmp_path / "in"), "-o", str(tmp_path / "out")]
        flag = "predicted"
    before = _tree(tmp_path)
    result = cli_in_process("run", *args)
    _one_line_error(result, flag)
    assert _tree(tmp_path) == before


def test_run_refuses_a_directory_that_is_not_a_run(tmp_path: Path, layers: tuple[Path, Path], no_flow: None) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.json").write_text('{"mine": true}\n')
    result = cli_in_process("run", "-p", str(layers[0]), "-r", str(layers[1]), "-o", str(out))
    _one_line_error(result, "-o/--output-dir", "not an evalcore run")
    assert (out / "metrics.json").read_text() == '{"mine": true}\n'


def test_run_refuses_to_replace_a_run_that_holds_a_human_review(tmp_path: Path, layers: tuple[Path, Path], no_flow: None) -> None:
    out = tmp_path / "reviewed"
    (out / "review").mkdir(parents=True)
    (out / "status.json").write_text('{"state": "completed"}\n')  # an earlier run's mark
    decisions = out / "review" / "decisions-ana.csv"
    decisions.write_text("item_id,reviewer,code,severity,agrees,comment,decided_at\n")
    result = cli_in_process("run", "-p", str(layers[0]), "-r", str(layers[1]), "-o", str(out))
    _one_line_error(result, "-o/--output-dir", "human review", "review/")
    assert decisions.read_text().startswith("item_id,reviewer")
    assert sorted(p.name for p in out.iterdir()) == ["review", "status.json"]


def test_synth_refuses_a_non_empty_directory_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    out.mkdir()
    (out / "part-0.parquet").write_bytes(b"PAR1 not really")
    result = cli_in_process("synth", "--n-ref", "50", "--out", out)
    _one_line_error(result, "--out", "not empty", "--force")
    assert sorted(p.name for p in out.iterdir()) == ["part-0.parquet"]
    forced = cli_in_process("synth", "--n-ref", "50", "--out", out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (out / "part-0.parquet").read_bytes() == b"PAR1 not really"  # not synth's file: left alone
    assert len(geopandas.read_parquet(out / "reference.parquet")) >= 50  # 50 fields, and the generator's few bad rows


# --------------------------------------------------------------------------- items 3, 4, 6: a full disk, reused directories


def test_failed_evaluate_keeps_the_older_outputs(tmp_path: Path, layers: tuple[Path, Path]) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    first = cli_in_process("evaluate", "-p", str(layers[0]), "-r", str(layers[1]), "--frame-out", str(keep / "fields.parquet"),
                           "--tiles-out", str(keep / "tiles.parquet"), "-o", str(keep / "metrics.json"))
    assert first.returncode == 0, first.stderr
    before = _tree(keep)
    with full_disk(tmp_path / "full") as full:
        result = cli_in_process("evaluate", "-p", str(layers[0]), "-r", str(layers[1]), "--iou-threshold", "0.6",
                                "--frame-out", str(keep / "fields.parquet"), "--tiles-out", str(keep / "tiles.parquet"),
                                "-o", str(full / "metrics.json"))
        assert result.returncode != 0
        assert sorted(p.name for p in full.iterdir()) == [FILLER]
    assert _tree(keep) == before  # the old outputs, byte for byte, and no staged leftovers


@pytest.mark.cluster
def test_directory_outputs_hold_one_run_and_a_failed_cluster_run_leaves_nothing(tmp_path: Path, layers: tuple[Path, Path]) -> None:
    fields = tmp_path / "fields"
    cluster = ["--cluster", "local", "--workers", "1", "--in-process-below", "0", "--partition-km", "5"]
    # A cluster run whose last write fails on a full disk: no fields/ parts, no tiles.parquet.
    with full_disk(tmp_path / "full") as full:
        failed = cli_in_process("evaluate", "-p", str(layers[0]), "-r", str(layers[1]), *cluster, "--frame-out", f"{fields}/",
                                "--tiles-out", str(tmp_path / "tiles.parquet"), "-o", str(full / "metrics.json"))
        assert failed.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]
    # A cluster run writes several parts; an in-process run into the same directory replaces them all.
    done = cli_in_process("evaluate", "-p", str(layers[0]), "-r", str(layers[1]), *cluster, "--frame-out", f"{fields}/", "-o", str(tmp_path / "m1.json"))
    assert done.returncode == 0, done.stderr
    assert len(list(fields.glob("part-*.parquet"))) > 1
    n_fields = len(geopandas.read_parquet(fields))
    again = cli_in_process("evaluate", "-p", str(layers[0]), "-r", str(layers[1]), "--frame-out", f"{fields}/", "-o", str(tmp_path / "m2.json"))
    assert again.returncode == 0, again.stderr
    table = geopandas.read_parquet(fields)
    assert len(table) == n_fields and table["ref_index"].is_unique
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fields", "full", "m1.json", "m2.json"]


def test_a_directory_output_with_foreign_files_is_refused(tmp_path: Path, layers: tuple[Path, Path]) -> None:
    fields = tmp_path / "fields"
    fields.mkdir()
    (fields / "README.txt").write_text("mine\n")
    result = cli_in_process("evaluate", "-p", str(layers[0]), "-r", str(layers[1]), "--frame-out", f"{fields}/", "-o", str(tmp_path / "m.json"))
    _one_line_error(result, "--frame-out", "README.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fields"] and [p.name for p in fields.iterdir()] == ["README.txt"]


def test_failed_synth_leaves_no_directory(tmp_path: Path) -> None:
    with full_disk(tmp_path / "full") as full:
        result = cli_in_process("synth", "--n-ref", "2000", "--out", full / "data")
        assert result.returncode != 0
        assert sorted(p.name for p in full.iterdir()) == [FILLER]


# --------------------------------------------------------------------------- items 5 and 7: one run at a time, a truthful state


def _lock_held(run_dir: Path) -> bool:
    lock = run_dir / ".evalcore-run.lock"
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _flow_run_states(api_url: str) -> list[tuple[str, str]]:
    import httpx

    response = httpx.post(f"{api_url}/flow_runs/filter", json={"limit": 200}, timeout=30)
    response.raise_for_status()
    return [(run["parameters"]["params"]["output_dir"], run["state_type"]) for run in response.json()
            if isinstance(run.get("parameters", {}).get("params"), dict) and "output_dir" in run["parameters"]["params"]]


@pytest.mark.cli
@pytest.mark.cluster  # evalcore run in a subprocess: a flow on a LocalCluster
@pytest.mark.prefect
@pytest.mark.slow  # make slow (CI time): a whole evalcore run with failing gates; the run directory's lock is tested alone in make test
def test_second_run_into_a_run_directory_is_refused_and_gates_end_the_run_failed(tmp_path: Path, layers: tuple[Path, Path], prefect_server: str) -> None:
    out = tmp_path / "run"
    gates = tmp_path / "gates.yaml"
    gates.write_text('gates:\n  - id: G-F1\n    metric: f1\n    op: ">="\n    threshold: 1.01\n', encoding="utf-8")
    first = _evalcore_run(["-p", str(layers[0]), "-r", str(layers[1]), "--gates", str(gates), "-o", str(out)], prefect_server)
    deadline = time.monotonic() + 300
    while not _lock_held(out):
        assert first.poll() is None and time.monotonic() < deadline, "the first run never claimed its run directory"
        time.sleep(0.2)
    second = run_cli("run", "-p", str(layers[0]), "-r", str(layers[1]), "-o", str(out))
    _one_line_error(second, str(out), "in use by another evalcore run", f"process {first.pid}")
    stdout, stderr = first.communicate(timeout=500)
    assert first.returncode == 1, (first.returncode, stderr[-3000:])  # gates: fail
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "failed" and status["failure"] == "gates" and status["gates_decision"] == "fail"
    # Written last: no file of the run directory is newer than status.json.
    # (The log is appended to until the process ends; the lock file is not part of the run.)
    newest = max((p for p in out.rglob("*") if p.is_file() and p.name != ".evalcore-run.lock" and p.parent.name != "logs"),
                 key=lambda p: p.stat().st_mtime_ns)
    assert newest.name == "status.json", newest
    assert (out / "evidence-manifest.json").is_file() and (out / "report.html").is_file()
    verified = run_cli("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    states = [state for path, state in _flow_run_states(prefect_server) if Path(path).resolve() == out.resolve()]
    assert states == ["FAILED"], states
    assert (out / "metrics.json").is_file()


# --------------------------------------------------------------------------- item 8: the Prefect server dies with the run


def _uvicorn_children(pid: int) -> list[int]:
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c.pid for c in children if any("uvicorn" in part for part in _cmdline(c))]


def _cmdline(process: object) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def _alive_after(pids: list[int] | set[int], seconds: float) -> list[int]:
    """The processes of ``pids`` still alive (not zombies) after waiting up to ``seconds``;
    they are then killed, to leave the machine clean even when the test fails."""
    import psutil

    def alive() -> list[int]:
        return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]

    deadline = time.monotonic() + seconds
    while (left := alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.cli
@pytest.mark.cluster  # evalcore run in a subprocess: a flow on a LocalCluster
@pytest.mark.prefect
@pytest.mark.parametrize("sig", [signal.SIGKILL, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])  # SIGTERM: make slow (CI time)
def test_killed_run_leaves_no_prefect_server(tmp_path: Path, layers: tuple[Path, Path], sig: signal.Signals) -> None:
    # Output to a file: a pipe would stay open in whatever the killed run left behind.
    log = open(tmp_path / "run.out", "w")  # noqa: SIM115 (closed below)
    run = _evalcore_run(["-p", str(layers[0]), "-r", str(layers[1]), "-o", str(tmp_path / "run")], None,
                        cwd=tmp_path, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    servers: list[int] = []
    while not servers:
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before its Prefect server started"
        servers = _uvicorn_children(run.pid)
        time.sleep(0.2)
    run.send_signal(sig)
    run.wait(timeout=60)
    log.close()
    alive = _alive_after(servers, 30)
    assert not alive, f"the Prefect server {alive} outlived its run ({sig.name})"


@pytest.mark.cli
@pytest.mark.prefect
def test_a_run_refused_after_its_server_started_leaves_no_prefect_server(tmp_path: Path, layers: tuple[Path, Path]) -> None:
    """The temporary server starts before the inputs' columns are checked (it boots while
    they are); a run refused there stops it."""
    import psutil

    marker = f"evalcore-test-{os.getpid()}-{time.monotonic_ns()}"

    def marked() -> list[int]:
        found = []
        for process in psutil.process_iter():
            try:
                if process.environ().get("EVALCORE_TEST_MARK") == marker and any("uvicorn" in p for p in _cmdline(process)):
                    found.append(process.pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        return found

    run = subprocess.Popen(
        [sys.executable, "-m", "evalcore.cli", "run", "-p", str(layers[0]), "-r", str(layers[1]), "--strata-column", "no_such_column",
         "-o", str(tmp_path / "run")],
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(_run_env(None), EVALCORE_TEST_MARK=marker),
    )
    seen: set[int] = set()
    while run.poll() is None:
        seen.update(marked())
        time.sleep(0.05)
    stderr = run.stderr.read()
    assert run.returncode == 2, stderr
    assert "no_such_column" in stderr
    assert seen, "no Prefect server was seen while the run checked its inputs"
    alive = _alive_after(seen, 10)
    assert not alive, f"the Prefect server {alive} outlived the refused run"


@pytest.mark.prefect
def test_the_temporary_server_is_stopped_when_its_block_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """flows.server.PrefectApi: the server started on entry answers in ``serving``, and a
    failure in the block stops it and lets its watchdog go (the server within the second
    ``close`` waits, or the watchdog's five, never left running)."""
    import httpx
    import psutil
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import PrefectApi

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}), pytest.raises(RuntimeError, match="inside the block"):
        with PrefectApi() as api:
            server, watchdog = api._server.pid, api._watchdog.pid
            with api.serving() as url:
                assert url == api.url and httpx.get(f"{url}/health").status_code == 200
                assert PREFECT_API_URL.value() == url
                raise RuntimeError("inside the block")
    assert not _alive_after([server, watchdog], 15)


@pytest.mark.prefect
def test_close_leaves_a_slow_server_to_the_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that does not stop on SIGTERM (as Prefect's took more than 5 s after a
    2M-field run): ``close`` returns after its short wait, and the watchdog kills it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows import server as server_module

    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"

    def launch(self, port):
        process = subprocess.Popen([sys.executable, "-c", stubborn])
        self._watchdog.stdin.write(f"{process.pid}\n")
        self._watchdog.stdin.flush()
        return process

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(server_module.PrefectApi, "_launch", launch)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        api = server_module.PrefectApi()
    pid, watchdog = api._server.pid, api._watchdog.pid
    time.sleep(0.5)  # the stubborn process has set its handler
    started = time.monotonic()
    api.close()
    assert time.monotonic() - started < server_module.SERVER_STOP_WAIT_S + 2
    import psutil

    assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # not stopped by SIGTERM
    assert not _alive_after([pid, watchdog], 20)
