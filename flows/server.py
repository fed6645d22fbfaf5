"""A temporary Prefect server for one ``evalcore run``, which never outlives the run.

With no ``PREFECT_API_URL`` configured, Prefect starts a temporary API server (a uvicorn
process) on first use and stops it at interpreter exit. A run killed with SIGKILL or
SIGTERM never reaches that exit, and the server (about 230 MB) stayed alive for good.
Here the server is started before the flow, and a small watchdog process holds a pipe to
this process: when this process ends, however it ends, the kernel closes the pipe, the
watchdog reads end-of-file and stops the server.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["run_api"]

# The watchdog: wait until the parent's end of the pipe closes, then stop the server
# (SIGTERM, and SIGKILL after 5 s). It ignores SIGINT and SIGTERM, so a Ctrl-C or a
# `kill` of the whole process group still leaves it to clean up.
_WATCHDOG = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pid = int(sys.argv[1])
sys.stdin.buffer.read()
def alive():
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
if alive():
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        time.sleep(0.1)
        if not alive():
            break
    else:
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

    server = SubprocessASGIServer()
    server.start()
    watchdog = None
    try:
        if server.server_process is not None:
            # A stdin pipe the watchdog reads until this process closes it by ending.
            watchdog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, str(server.server_process.pid)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        server.stop()
        if watchdog is not None:
            watchdog.stdin.close()  # the server is already stopped: the watchdog just exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(timeout=10)
