"""Flow tests: one temporary Prefect server (``prefect_test_harness``) for the session.

The harness points Prefect at a throwaway SQLite database served on a free port, so
flow runs, logs and artifacts are real and can be read back with the client.
"""

from __future__ import annotations

import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session", autouse=True)
def prefect_harness():
    """Run every flow test against a temporary Prefect server."""
    with prefect_test_harness(server_startup_timeout=120):
        yield
