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
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PrefectApi"]

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


SERVER_STOP_WAIT_S = 1.0
"""How long :meth:`PrefectApi.close` waits for the stopped server before leaving it to the watchdog."""

PORT_TAKEN_STATUS = 3
"""uvicorn's exit status when its port was taken meanwhile: the server is started again on another."""


class PrefectApi:
    """The Prefect API of one run: the configured one, or a temporary server tied to this process.

    Made at the start of ``evalcore run``: the temporary server's process (a uvicorn of
    Prefect's API, 3.5-3.7 s from its launch to its first answer, timed alone) starts at
    once, and boots while the run imports the flow and checks its inputs (a 1,000-field
    run's flow began 2.7 s sooner than when the server was started after them);
    :meth:`serving` waits for it. Use it as a context manager: the server is stopped
    when the block ends, however it ends (by :meth:`close`, or by the watchdog within 5 s
    when it is slow to stop).

    The server is the one Prefect itself would start (``prefect.server.api.server``'s
    ``create_app`` under uvicorn, the UI off), launched here without importing that
    module, which takes this process 1.6 s and which the run does not need.
    """

    def __init__(self) -> None:
        self.url: str | None = None
        self._server: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        if _configured_api():
            return  # Prefect uses it as it is
        # Started before the server, so no moment passes with a server nobody will stop.
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, text=True,
        )
        try:
            self._server = self._launch(_free_port())
        except BaseException:
            self.close()
            raise

    def _launch(self, port: int) -> subprocess.Popen:
        """Start the server's process on ``port`` and tell the watchdog its process id."""
        import prefect
        from prefect.settings import get_current_settings

        self.url = f"http://127.0.0.1:{port}/api"
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent),
             "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "error", "--lifespan", "on"],
            env={**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
                 **get_current_settings().to_environment_variables(exclude_unset=True)},
        )
        self._watchdog.stdin.write(f"{process.pid}\n")
        self._watchdog.stdin.flush()
        return process

    def _wait_until_answering(self) -> None:
        """Wait until the server answers its health check (at most Prefect's startup timeout)."""
        import httpx
        from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

        deadline = time.monotonic() + PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
        with httpx.Client() as http:
            while time.monotonic() < deadline:
                status = self._server.poll()
                if status == PORT_TAKEN_STATUS:
                    self._server = self._launch(_free_port())
                    continue
                if status is not None:
                    raise RuntimeError(f"the temporary Prefect server exited with status {status} before it answered "
                                       "(its error is printed above); set PREFECT_API_URL to use a running server")
                with contextlib.suppress(httpx.TransportError):
                    if http.get(f"{self.url}/health").status_code == 200:
                        return
                time.sleep(0.1)
        raise RuntimeError(f"the temporary Prefect server did not answer at {self.url} within "
                           f"{PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()} s; set PREFECT_API_URL to use a running server")

    @contextlib.contextmanager
    def serving(self) -> Iterator[str | None]:
        """The block runs with Prefect pointed at this API, once the server answers.

        Yields the API URL (None when one was configured: Prefect uses it as it is).
        """
        if self._server is None:
            yield None
            return
        from prefect.settings import PREFECT_API_URL, temporary_settings

        self._wait_until_answering()
        try:
            with temporary_settings(updates={PREFECT_API_URL: self.url}):
                yield self.url
        finally:
            _drain_prefect_queues()  # what the run logged reaches the server before it stops

    def close(self) -> None:
        """Stop the temporary server: SIGTERM, a short wait, then the watchdog's care.

        A server that has not stopped within :data:`SERVER_STOP_WAIT_S` is left to the
        watchdog, which stops it as it does when this process dies (SIGTERM again, SIGKILL
        after 5 s), instead of this process waiting for it: after a 2M-field run the
        server took more than 5 s to stop (it was killed), 5.1 s of the run's wall time
        spent in this wait after every output was written (py-spy, 2026-12-07).
        """
        server, self._server = self._server, None
        stopped = True
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=SERVER_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                stopped = False
        if self._watchdog is not None:
            self._watchdog.stdin.close()  # the watchdog stops whatever is still alive, then exits
            if stopped:  # nothing left for it to stop: it exits at once
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._watchdog.wait(timeout=10)
            self._watchdog = None

    def __enter__(self) -> PrefectApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
