"""Flow tests: one temporary Prefect server (``prefect_test_harness``) for the session.

The harness points Prefect at a throwaway SQLite database served on a free port, so
flow runs, logs and artifacts are real and can be read back with the client. The
server is the session's ``prefect_server`` (tests/conftest.py), which tests/report
shares with its ``evalcore run`` subprocesses.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def prefect_harness(prefect_server):
    """Run every flow test against the session's temporary Prefect server."""
    yield
