"""Flow tests: one temporary Prefect server (``prefect_test_harness``) for the session.

The harness points Prefect at a throwaway SQLite database served on a free port, so
flow runs, logs and artifacts are real and can be read back with the client.
"""

from __future__ import annotations

import os

import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session", autouse=True)
def prefect_harness():
    """Run every flow test against a temporary Prefect server.

    The server is a subprocess that creates its database before it answers; with
    both cores busy that can take minutes, so the wait is generous (300 s).
    """
    # Read by the server subprocess at its start: its telemetry heartbeat otherwise fails
    # with "database is locked" and prints a long traceback into the test output.
    analytics = os.environ.get("PREFECT_SERVER_ANALYTICS_ENABLED")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    try:
        with prefect_test_harness(server_startup_timeout=300):
            yield
    finally:
        if analytics is None:
            os.environ.pop("PREFECT_SERVER_ANALYTICS_ENABLED", None)
