"""The embedded cluster's dashboard listens on loopback unless the user asks otherwise.

Each test starts a real cluster (``evalcore evaluate --cluster local``, ``evalcore run``,
or :func:`evalcore.distributed.cluster.local_cluster`) and, while it runs, reads the
listening sockets of the process and its children (psutil): the dashboard's port is
bound to 127.0.0.1 only, never to 0.0.0.0 or ``::``, and so is every other listening
socket of the tree (the scheduler's and the workers' comms, LocalCluster's default host).
A dashboard address that cannot be used is refused before any cluster starts (those
cases call the command line in this process).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import geopandas
import psutil
import pytest
from shapely.geometry import box

from tests.common import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
X0, Y0 = 500_000.0, 4_400_000.0
LOOPBACK = {"127.0.0.1", "::1"}
LINK = re.compile(r"Dask dashboard: https?://[^\s/]+:(\d+)/")


def _layers(tmp: Path, n: int = 100) -> tuple[Path, Path]:
    """``n`` 100 m squares on a 10 x 10 grid, and predictions 3 m larger."""
    squares = [box(X0 + 200 * (i % 10), Y0 + 200 * (i // 10), X0 + 200 * (i % 10) + 100, Y0 + 200 * (i // 10) + 100) for i in range(n)]
    ref = geopandas.GeoDataFrame(geometry=squares, crs="EPSG:32613")
    pred = geopandas.GeoDataFrame(geometry=[g.buffer(3, join_style="mitre") for g in squares], crs="EPSG:32613")
    tmp.mkdir(parents=True, exist_ok=True)
    ref.to_parquet(tmp / "reference.parquet")
    pred.to_parquet(tmp / "predicted.parquet")
    return tmp / "predicted.parquet", tmp / "reference.parquet"


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of ``pid`` and its descendants."""
    out = []
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for proc in tree:
        try:
            out += [(c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sockets_during_the_run(args: list[str], env: dict | None = None, timeout: float = 300) -> tuple[int, list[tuple[str, int]], subprocess.CompletedProcess]:
    """Start an evalcore command; when it prints the dashboard link, read the tree's listening sockets.

    Returns the dashboard's port (from the printed link), the sockets found on it and
    every listening socket of the tree at that moment, then waits for the command.
    """
    proc = subprocess.Popen([sys.executable, "-m", "evalcore.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=env)
    seen: list[str] = []
    port, sockets = None, []
    try:
        deadline = time.monotonic() + timeout
        for line in proc.stdout:
            seen.append(line)
            found = LINK.search(line)
            if found and port is None:
                port = int(found[1])
                # The link is printed once the cluster runs; its sockets are already open.
                while time.monotonic() < deadline and not any(p == port for _, p in sockets):
                    sockets = _listening(proc.pid)
                    if not any(p == port for _, p in sockets):
                        time.sleep(0.05)
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(seen)
    assert port is not None, f"no dashboard link printed:\n{output[-3000:]}"
    return port, sockets, subprocess.CompletedProcess(args, proc.returncode, output, "")


def _assert_loopback_only(port: int, sockets: list[tuple[str, int]], output: str, *, others: bool = True) -> None:
    """The dashboard's port is bound, to loopback only; with ``others`` every other socket too."""
    on_port = [ip for ip, p in sockets if p == port]
    assert on_port, f"nothing listens on the dashboard's port {port}: {sockets}\n{output[-2000:]}"
    assert set(on_port) <= LOOPBACK, f"the dashboard (port {port}) listens on {on_port}, not loopback only"
    exposed = [(ip, p) for ip, p in sockets if ip not in LOOPBACK]
    assert not others or not exposed, f"listening beyond loopback: {exposed}"


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_evaluate_on_a_local_cluster_binds_the_dashboard_to_loopback(tmp_path):
    pred, ref = _layers(tmp_path / "in")
    port, sockets, done = _sockets_during_the_run(
        ["evaluate", "-p", str(pred), "-r", str(ref), "--cluster", "local", "--workers", "1", "--in-process-below", "0",
         "-q", "-o", str(tmp_path / "metrics.json")]
    )
    assert done.returncode == 0, done.stdout[-3000:]
    _assert_loopback_only(port, sockets, done.stdout)


@pytest.mark.cluster
@pytest.mark.timeout(300)
@pytest.mark.slow  # make slow (CI time): make test keeps the default address's run above; the flag's parsing is tested below
def test_evaluate_dashboard_address_flag_is_used(tmp_path):
    pred, ref = _layers(tmp_path / "in")
    wanted = _free_port()
    port, sockets, done = _sockets_during_the_run(
        ["evaluate", "-p", str(pred), "-r", str(ref), "--cluster", "local", "--workers", "1", "--in-process-below", "0",
         "--dashboard-address", f"127.0.0.1:{wanted}", "-q", "-o", str(tmp_path / "metrics.json")]
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert port == wanted
    _assert_loopback_only(port, sockets, done.stdout)


@pytest.mark.timeout(600)
@pytest.mark.slow  # make slow (CI time): a whole run end to end; make test keeps cheaper cases of this mechanism
def test_run_passes_the_dashboard_address_to_its_cluster(tmp_path, prefect_server):
    pred, ref = _layers(tmp_path / "in")
    wanted = _free_port()
    env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_API_URL=prefect_server)
    port, sockets, done = _sockets_during_the_run(
        ["run", "-p", str(pred), "-r", str(ref), "--workers", "1", "--dashboard-address", f"127.0.0.1:{wanted}", "-o", str(tmp_path / "run")],
        env=env, timeout=500,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert port == wanted
    _assert_loopback_only(port, sockets, done.stdout)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args, says", [
    (["--cluster", "tcp://127.0.0.1:1", "--dashboard-address", "127.0.0.1:0"], "external scheduler"),
    (["--dashboard-address", "127.0.0.1:0"], "--cluster local"),
    (["--cluster", "local", "--dashboard-address", "localhost"], "HOST:PORT"),
    (["--cluster", "local", "--dashboard-address", "127.0.0.1:99999"], "HOST:PORT"),
])
def test_a_dashboard_address_without_an_embedded_cluster_or_malformed_is_refused(tmp_path, args, says):
    pred, ref = _layers(tmp_path / "in", n=4)
    # In this process (no subprocess's imports to pay): refused before any cluster starts,
    # which EVALCORE_CHECK_MARKERS=1 checks, as the test has no cluster marker.
    proc = cli_in_process("evaluate", "-p", pred, "-r", ref, *args, "-o", tmp_path / "m.json")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_local_cluster_default_dashboard_is_loopback():
    from distributed import Client

    from evalcore.distributed.cluster import local_cluster

    with local_cluster(1, memory_limit=0, preload=[]) as cluster, Client(cluster) as client:
        port = int(re.search(r":(\d+)/", client.dashboard_link)[1])
        scheduler = int(cluster.scheduler_address.rsplit(":", 1)[1])
        # Only this cluster's sockets: the test process may hold others (a Prefect server).
        sockets = [(ip, p) for ip, p in _listening(os.getpid()) if p in (port, scheduler)]
        _assert_loopback_only(port, sockets, client.dashboard_link)
        assert {p for _, p in sockets} == {port, scheduler}
