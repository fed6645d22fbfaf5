"""Real ``dask scheduler`` and ``dask worker`` processes for the end-to-end tests.

One place starts them, waits for the workers and stops them (and checks they are gone),
for the tests that run evalcore against a cluster of separate processes: each process
in a working directory of its own, with the environment the test gives it.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dask_processes(base: Path, n_workers: int, env_of: Callable[[str, Path], dict]) -> Iterator[tuple[str, str]]:
    """A scheduler and ``n_workers`` one-thread workers (``w0``, ``w1``, ...), each run in
    ``base/<name>`` with the environment ``env_of(name, cwd)``; logs in ``base/<name>.log``.

    Yields ``(scheduler address, dashboard URL)`` once every worker has joined; stops the
    processes afterwards (SIGTERM, then SIGKILL after 30 s) and checks none is left.
    """
    port, dash = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    commands = [("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", f"127.0.0.1:{dash}"])]
    commands += [(f"w{k}", ["worker", address, "--nthreads", "1", "--host", "127.0.0.1", "--name", f"w{k}"]) for k in range(n_workers)]
    procs = []
    try:
        for name, argv in commands:
            cwd = base / name
            cwd.mkdir(parents=True, exist_ok=True)
            procs.append(subprocess.Popen([str(BIN / "dask"), *argv], cwd=cwd, env=env_of(name, cwd), stdout=subprocess.DEVNULL,
                                          stderr=open(base / f"{name}.log", "w")))
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(n_workers, timeout=120)
        yield address, f"http://127.0.0.1:{dash}"
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert all(p.poll() is not None for p in procs)
