"""The local stack of ``deploy/local``: real processes on 127.0.0.1, started and stopped
by the scripts, with a temporary state directory and free ports.

``start.sh`` brings up a Prefect server, a Dask scheduler, two Dask workers and a
Prefect process worker; the ``evaluate-layers`` flow runs against that scheduler
(and reports to that server) and must equal the single-process ``evalcore.evaluate``;
the scheduler's dashboard answers during the run and its ``/metrics`` then names the
phases' task prefixes; ``stop.sh`` leaves no process behind. The tests share one
stack (module scope) and run in file order: the last one stops it.

Another test deploys ``deploy/prefect.yaml`` on the stack's server with the real
``prefect deploy``, runs ``national-evaluation`` through the Prefect worker (pull step,
``EVALCORE_ROOT``, a flow-run subprocess), and checks that ``prefect event emit
imagery.prediction.available`` makes the server create a ``reevaluate-new-imagery``
run with parameters rendered from the event. The module takes about 50 s.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

import evalcore
from evalcore.synth import write_layers

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "deploy" / "local"
BIN = Path(sys.executable).parent
SERVICES = {"prefect-server", "dask-scheduler", "dask-worker-1", "dask-worker-2", "prefect-worker"}
OPTIONS = {"partition_size_m": 5_000.0, "boundary_tolerance_m": 2.0, "bootstrap": 20}

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="bash scripts, POSIX sessions"),
    pytest.mark.cluster,  # start.sh starts a Prefect server, a Dask scheduler and workers
    pytest.mark.prefect,
]


@pytest.fixture(autouse=True)
def prefect_harness():
    """Override tests/flows/conftest.py's temporary server: these tests use the stack's."""
    yield


def _free_ports(n: int) -> list[int]:
    """Free loopback ports below the ephemeral range (32768+ on Linux), so that the
    random ports other processes bind meanwhile cannot take them before start.sh does."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(20_000, 32_000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


@dataclass
class Stack:
    env: dict
    state: Path
    api: str
    scheduler: str
    dashboard: str
    start_output: str

    def script(self, name: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(LOCAL / name), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def pids(self) -> dict[str, int]:
        return {f.stem: int(f.read_text()) for f in self.state.glob("*.pid")}

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in sorted(self.state.glob("*.log")))


def _stack(state: Path) -> Stack:
    """The stack's scripts' environment for a state directory, on free loopback ports; nothing started."""
    prefect_port, dask_port, dashboard_port, health_port = _free_ports(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DASK_"))}
    env.update(
        EVALCORE_STATE_DIR=str(state),
        EVALCORE_BIN=str(BIN),
        EVALCORE_PREFECT_PORT=str(prefect_port),
        EVALCORE_DASK_PORT=str(dask_port),
        EVALCORE_DASK_DASHBOARD_PORT=str(dashboard_port),
        EVALCORE_PREFECT_WORKER_HEALTH_PORT=str(health_port),
        EVALCORE_DASK_WORKERS="2",
        EVALCORE_WORKER_QUERY_SECONDS="2",
        EVALCORE_START_TIMEOUT="150",
    )
    return Stack(
        env=env,
        state=state,
        api=f"http://127.0.0.1:{prefect_port}/api",
        scheduler=f"tcp://127.0.0.1:{dask_port}",
        dashboard=f"http://127.0.0.1:{dashboard_port}",
        start_output="",
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = _stack(tmp_path_factory.mktemp("local-stack") / "state")
    started = time.perf_counter()
    proc = stack.script("start.sh", timeout=240)
    if proc.returncode != 0:
        output = f"start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{stack.logs()}"
        stack.script("stop.sh")
        pytest.fail(output)
    stack.start_output = proc.stdout
    print(f"local stack up in {time.perf_counter() - started:.1f} s")
    pids = stack.pids()
    try:
        yield stack
    finally:
        stack.script("stop.sh")  # idempotent: normally the last test has stopped it
        for name, pid in pids.items():  # a safety net for a failed stop; only our pids
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()
            except psutil.NoSuchProcess:
                pass


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_start_brings_up_every_service_on_loopback(stack):
    pids = stack.pids()
    assert set(pids) == SERVICES
    assert all(_alive(psutil.Process(pid)) for pid in pids.values())
    for line in (f"Prefect UI:             {stack.api.removesuffix('/api')}", stack.scheduler, f"{stack.dashboard}/status"):
        assert line in stack.start_output
    env_file = (stack.state / "stack.env").read_text()
    assert f"PREFECT_API_URL={stack.api}" in env_file and f"DASK_SCHEDULER_ADDRESS={stack.scheduler}" in env_file

    # Every listening socket of every service (and of the nannies' worker processes)
    # is on 127.0.0.1.
    listening = []
    for pid in pids.values():
        for proc in _tree(pid):
            listening += [c.laddr for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening and {addr.ip for addr in listening} == {"127.0.0.1"}

    # The Prefect worker created and polls the process pool.
    status, body = _get(f"{stack.api}/work_pools/evalcore-process")
    assert status == 200 and json.loads(body)["type"] == "process"

    # Starting again changes nothing.
    again = stack.script("start.sh")
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("already running") == len(SERVICES)
    assert stack.pids() == pids


def _same(actual: object, expected: object, path: str = "") -> list[str]:
    """Differences: counts and strings exactly, floats to 1e-9 relative, NaN == NaN."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return [f"{path}: keys {sorted(actual) if isinstance(actual, dict) else actual} != {sorted(expected)}"]
        return [d for k in expected for d in _same(actual[k], expected[k], f"{path}.{k}")]
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            return [f"{path}: {actual!r} != {expected!r}"]
        return [d for i, (a, e) in enumerate(zip(actual, expected)) for d in _same(a, e, f"{path}[{i}]")]
    if isinstance(expected, float) or isinstance(actual, float):
        if actual is None or expected is None:
            return [] if actual is expected else [f"{path}: {actual!r} != {expected!r}"]
        if math.isnan(expected) and math.isnan(actual):
            return []
        return [] if math.isclose(actual, expected, rel_tol=1e-9, abs_tol=0.0) else [f"{path}: {actual!r} != {expected!r}"]
    return [] if actual == expected else [f"{path}: {actual!r} != {expected!r}"]


@pytest.mark.slow  # 2 min: a deployment run through the stack's worker (make slow, with the stack's start and stop)
def test_flow_on_the_stack_equals_single_process(stack, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.evaluate import evaluate_layers
    from flows.params import EvaluateParams

    pred_path, ref_path = write_layers(tmp_path / "data", 1500, seed=2)
    expected = evalcore.evaluate(pred_path, ref_path, strata="stratum", **OPTIONS)
    out = tmp_path / "run"
    params = EvaluateParams(
        predicted=str(pred_path), reference=str(ref_path), output_dir=str(out), strata_column="stratum", cluster=stack.scheduler, **OPTIONS
    )

    # Poll the dashboard's task stream page while the flow runs.
    codes: list[int] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                codes.append(_get(f"{stack.dashboard}/status", timeout=2.0)[0])
            except OSError:
                codes.append(0)
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    with temporary_settings({PREFECT_API_URL: stack.api}):
        poller.start()
        started = time.perf_counter()
        try:
            state = evaluate_layers(params, return_state=True)
        finally:
            done.set()
            poller.join(timeout=10)
        print(f"flow run on the stack: {time.perf_counter() - started:.1f} s, {len(codes)} dashboard polls")
        assert state.is_completed(), state
        result = state.result()
        with get_client(sync_client=True) as client:  # recorded by the stack's server
            flow_run = client.read_flow_run(state.state_details.flow_run_id)
    assert flow_run.state.is_completed() and flow_run.parameters["params"]["cluster"] == stack.scheduler

    assert 200 in codes, f"the dashboard never answered 200 during the run: {codes[:20]}"
    assert _same(result, expected) == []
    for key in ("count_reference", "count_predicted", "tp", "fp", "fn"):
        if key in expected:
            assert result[key] == expected[key], key
    for key in ("precision", "recall", "f1", "iou_mean"):
        if key in expected:
            assert math.isclose(result[key], expected[key], rel_tol=1e-9), key

    metrics_json = json.loads((out / "metrics.json").read_text())
    assert metrics_json["count_reference"] == expected["count_reference"]
    assert math.isclose(metrics_json["f1"], expected["f1"], rel_tol=1e-9)
    assert json.loads((out / "status.json").read_text())["status"] == "succeeded"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dask_dashboard"].startswith(stack.dashboard)
    assert all(p["status"] == "done" for p in manifest["partitions"])

    # The scheduler's Prometheus endpoint has seen the phases' task prefixes.
    status, body = _get(f"{stack.dashboard}/metrics")
    text = body.decode()
    assert status == 200
    assert 'dask_scheduler_workers{state="idle"}' in text or 'dask_scheduler_workers{state="partially_saturated"}' in text
    for prefix in ("pairs", "sums"):
        assert f'dask_scheduler_tasks_compute_seconds_total{{task_prefix_name="{prefix}"}}' in text, prefix
    assert 'dask_scheduler_prefix_state_totals_total{state="memory",task_prefix_name="prepare' in text


def _wait(predicate, timeout: float, what: str, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.slow  # a flow run through a deployment, a Prefect worker and an event trigger: make slow (~30 s)
def test_deployments_worker_and_event_trigger_on_the_stack(stack, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolUpdate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    cli_env = dict(stack.env, PREFECT_API_URL=stack.api, PREFECT_HOME=str(tmp_path / "prefect-home"))
    prefect = str(BIN / "prefect")

    # The documented command, from the repository root.
    deploy = subprocess.run(
        [prefect, "deploy", "--prefect-file", "deploy/prefect.yaml", "--all"], cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=180
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr

    pred_path, ref_path = write_layers(tmp_path / "data", 400, seed=5)
    out = tmp_path / "deployed-run"
    params = {"predicted": str(pred_path), "reference": str(ref_path), "output_dir": str(out), "partition_size_m": 5_000.0, "cluster": stack.scheduler}
    with temporary_settings({PREFECT_API_URL: stack.api}), get_client(sync_client=True) as client:
        reevaluate = client.read_deployment_by_name("reevaluate-new-imagery/reevaluate-new-imagery")
        assert [s.schedule.cron for s in reevaluate.schedules] == ["0 2 * * *"]
        assert reevaluate.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $EVALCORE_ROOT }}"}}]

        # national-evaluation through the Prefect worker: pull step into EVALCORE_ROOT,
        # a flow-run subprocess, the stack's Dask cluster.
        flow_run = run_deployment("evaluate-layers/national-evaluation", parameters={"params": params}, timeout=240, poll_interval=1)
        assert flow_run.state.is_completed(), (flow_run.state, (stack.state / "prefect-worker.log").read_text()[-4000:])
        expected = evalcore.evaluate(pred_path, ref_path, partition_size_m=5_000.0)
        metrics_json = json.loads((out / "metrics.json").read_text())
        assert metrics_json["count_reference"] == expected["count_reference"]
        assert math.isclose(metrics_json["f1"], expected["f1"], rel_tol=1e-9)

        # The event trigger. Pause the pool first so the worker leaves the triggered run
        # alone (its /data paths are placeholders); emit as a storage notifier would.
        client.update_work_pool("evalcore-process", WorkPoolUpdate(is_paused=True))
        emit = subprocess.run(
            [prefect, "event", "emit", "imagery.prediction.available", "--resource-id", "evalcore.predictions.fields-v9",
             "--payload", json.dumps({"predictions": "memory://preds/fields-v9"})],
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert emit.returncode == 0, emit.stdout + emit.stderr

        def triggered():
            runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[reevaluate.id])))
            return [r for r in runs if r.parameters["params"].get("product") == "fields-v9"]

        (event_run,) = _wait(triggered, 60, "the flow run created by the event trigger", interval=0.5)
        assert event_run.parameters["params"]["predictions"] == "memory://preds/fields-v9"
        assert event_run.parameters["params"]["reference"] == "/data/reference/fields-2026.parquet"
        client.delete_flow_run(event_run.id)


@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_stop_kills_exactly_the_recorded_processes(stack):
    pids = stack.pids()
    assert set(pids) == SERVICES
    processes = [proc for pid in pids.values() for proc in _tree(pid)]  # with the nannies' workers
    started = time.perf_counter()
    proc = stack.script("stop.sh")
    print(f"stop.sh: {time.perf_counter() - started:.1f} s")
    assert proc.returncode == 0, proc.stderr
    assert [p.pid for p in processes if _alive(p)] == []
    assert list(stack.state.glob("*.pid")) == []
    for url in (stack.api + "/health", stack.dashboard + "/health"):
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)
    # Logs and the Prefect database stay; a second stop has nothing to do.
    assert (stack.state / "dask-scheduler.log").exists()
    again = stack.script("stop.sh")
    assert again.returncode == 0 and "nothing to stop" in again.stderr


def test_stop_skips_a_stale_pid_file_without_signalling(tmp_path):
    """A pid file whose pid now belongs to another program is removed, the program lives
    (stop.sh on a state directory holding only that file: no stack need run)."""
    stack = _stack(tmp_path / "state")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stack.state.mkdir(parents=True, exist_ok=True)
        (stack.state / "dask-worker-7.pid").write_text(f"{other.pid}\n")
        proc = stack.script("stop.sh")
        assert proc.returncode == 0, proc.stderr
        assert "stale pid file" in proc.stderr
        assert other.poll() is None
        assert not (stack.state / "dask-worker-7.pid").exists()
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=10)
