"""Test configuration: hypothesis profiles, and tests/ on sys.path for ``tests.common``.

Profiles
--------
``ci`` (default): 50 examples per property, no deadline (the first call of a numba
kernel compiles). ``slow``: 10 000 examples; select it with
``HYPOTHESIS_PROFILE=slow``.

Tests marked ``slow`` (pyproject.toml) are skipped unless ``EVALCORE_SLOW=1``.

Markers ``cluster``, ``prefect``, ``browser`` and ``cli`` (tests/markers.py) say what
a test needs beyond this process; ``make quick`` runs the tests that need none. A
test using ``local_clients``, ``prefect_server`` or ``chromium`` (even through another
fixture) gets the marker here; a test that starts its own says so (a mark, or its
module's ``pytestmark``). With ``EVALCORE_CHECK_MARKERS=1`` (``make quick``) an unmarked test
that starts a LocalCluster, a Prefect flow, chromium or an ``evalcore`` subprocess
fails, naming the marker it lacks.

Shared set-up
-------------
``local_clients``: real LocalClusters of 1, 2 and 3 one-thread worker processes,
each started the first time a test asks for it and kept for the session (a start and
the workers' first imports cost about 10 s on 2 cores). Tests that compare a cluster
run with a single-process run share them; a test that kills workers or changes their
environment starts its own. ``prefect_server``: one temporary Prefect server
(``prefect_test_harness``) for the session, for in-process flow runs (tests/flows) and
for ``evalcore run`` subprocesses pointed at it with ``PREFECT_API_URL`` (tests/report).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.markers import FIXTURE_MARKERS, MARKERS, subprocess_needs  # noqa: E402 (needs the path above)

settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "slow",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class ClusterPool:
    """Real LocalClusters by number of workers, started on first use, closed at the end."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[object, object]] = {}

    def get(self, n_workers: int):
        """A ``distributed.Client`` of a LocalCluster of ``n_workers`` one-thread worker processes.

        The client is made this process's default client, as the only client of a test
        that starts its own cluster is (``distributed.as_completed`` and
        ``distributed.default_client`` find it).
        """
        from distributed import Client, LocalCluster
        from distributed.client import _set_global_client

        if n_workers not in self._open:
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0")
            self._open[n_workers] = (cluster, Client(cluster))
        client = self._open[n_workers][1]
        client.wait_for_workers(n_workers, timeout=120)
        _set_global_client(client)
        return client

    def close(self) -> None:
        for cluster, client in self._open.values():
            client.close()
            cluster.close()
        self._open.clear()


@pytest.fixture(scope="session")
def local_clients():
    pool = ClusterPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def prefect_server():
    """A temporary Prefect server for the session; yields its API URL.

    The server is a subprocess that creates its database before it answers; with
    both cores busy that can take minutes, so the wait is generous (300 s).
    """
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    # Read by the server subprocess at its start: its telemetry heartbeat otherwise fails
    # with "database is locked" and prints a long traceback into the test output.
    analytics = os.environ.get("PREFECT_SERVER_ANALYTICS_ENABLED")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    try:
        with prefect_test_harness(server_startup_timeout=300):
            yield PREFECT_API_URL.value()
    finally:
        if analytics is None:
            os.environ.pop("PREFECT_SERVER_ANALYTICS_ENABLED", None)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in FIXTURE_MARKERS.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(FIXTURE_MARKERS[fixture])
    if os.environ.get("EVALCORE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set EVALCORE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


_UNMARKED = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Fail an unmarked test that starts a cluster, a flow, a browser or evalcore (``EVALCORE_CHECK_MARKERS=1``).

    For the test's setup (module and session fixtures set up for it included), call and
    teardown, ``LocalCluster.__init__``, ``prefect.Flow.__call__`` and
    ``subprocess.Popen.__init__`` are wrapped. ``pytest.fail`` raises a
    ``BaseException``, which the command line's ``except Exception`` does not catch;
    :func:`pytest_runtest_makereport` fails the test again in case something caught it.
    """
    watch = set(MARKERS) - {m.name for m in item.iter_markers()}
    if os.environ.get("EVALCORE_CHECK_MARKERS") != "1" or not watch:
        yield
        return
    from distributed import LocalCluster
    from prefect import Flow

    found = item.stash.setdefault(_UNMARKED, [])

    def check(needs: set[str], what: str) -> None:
        missing = sorted(needs & watch)
        if missing:
            found.append(f"{item.nodeid} starts {what} but is not marked {' / '.join(missing)} (tests/markers.py)")
            pytest.fail(found[-1], pytrace=False)

    def wrap(cls: type, name: str, needs) -> None:
        original = getattr(cls, name)

        def wrapped(self, *args, **kwargs):
            check(*needs(self, args[0] if args else kwargs.get("args")))
            return original(self, *args, **kwargs)

        patch.setattr(cls, name, wrapped)

    with pytest.MonkeyPatch.context() as patch:
        wrap(LocalCluster, "__init__", lambda self, first: ({"cluster"}, "a LocalCluster"))
        wrap(Flow, "__call__", lambda self, first: ({"prefect"}, f"the Prefect flow {self.name!r}"))
        wrap(subprocess.Popen, "__init__", lambda self, argv: (subprocess_needs(argv or ()), f"the subprocess {str(argv)[:200]}"))
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Fail a test whose start of something unmarked was caught by the code under test."""
    outcome = yield
    report = outcome.get_result()
    found = item.stash.get(_UNMARKED, None)
    if found and report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = found[0]
