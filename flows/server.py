"""A temporary Prefect server for one ``evalcore run``, which never outlives the run.

With no ``PREFECT_API_URL`` configured, Prefect starts a temporary API server (a uvicorn
process) on first use and stops it at interpreter exit. A run killed with SIGKILL or
SIGTERM never reaches that exit, and the server (a uvicorn process of a few hundred MB) stayed alive for good.
Here the server is started before the flow, and a small watchdog process, told the
server's process id the moment it is started, holds a pipe to this process: when this
process ends, however it ends, the kernel closes the pipe, the watchdog reads end-of-file
and stops the server.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["run_api"]

# The watchdog: read the server's process ids, one a line, until the parent's end of the
# pipe closes; then stop each (SIGTERM, and SIGKILL after 5 s). It ignores SIGINT and
# SIGTERM, so a Ctrl-C or a `kill` of the whole process group still leaves it to clean up.
_WATCHDOG = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pids = [int(line) for line in sys.stdin if line.strip()]
def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
for pid in pids:
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
for _ in range(50):
    if not any(alive(pid) for pid in pids):
        break
    time.sleep(0.1)
for pid in pids:
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
"""


def _configured_api() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


@contextlib.contextmanager
def run_api() -> Iterator[str | None]:
    """The Prefect API for this run: the configured one, or a temporary server tied to this process.

    Yields the API URL (None when one was configured: Prefect uses it as it is).
    """
    if _configured_api():
        yield None
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # Started before the server, so no moment passes with a server nobody will stop.
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, text=True,
    )

    def tell(pid: int) -> None:
        watchdog.stdin.write(f"{pid}\n")
        watchdog.stdin.flush()

    class TiedServer(SubprocessASGIServer):
        """Prefect's temporary server, each process of it reported to the watchdog as soon as it exists."""

        def _run_uvicorn_command(self) -> subprocess.Popen:
            process = super()._run_uvicorn_command()
            tell(process.pid)
            return process

    server = TiedServer(port=_free_port())
    try:
        server.start()
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        _drain_prefect_queues()  # what the run logged reaches the server before it stops
        server.stop()
        watchdog.stdin.close()  # the server is stopped: the watchdog finds nothing alive and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=10)


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server retries another if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _drain_prefect_queues() -> None:
    """Send the log records and events Prefect still holds to the API, waiting at most 5 s each.

    Prefect sends them from background workers, and at interpreter exit; by then this
    run's server is gone, and each unsent batch printed "Error logging to API".
    """
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):  # a worker that never started has nothing to send
            worker.drain_all(timeout=5)
