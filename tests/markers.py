"""Which resource a test needs, for the markers ``cluster``, ``prefect``, ``browser`` and ``cli``.

``make quick`` runs the tests that need none of them (and are not ``slow``): the tests
that run in its own process. ``cli`` marks a test that runs the ``evalcore`` command
in a subprocess: each start pays 1-2 s of imports, and the tests that do it (over a
hundred, most starting several) took over half of the quick run's time. A test is
marked in one of two ways:

* by the session fixture it uses, directly or through another fixture
  (:data:`FIXTURE_MARKERS`: ``local_clients`` starts LocalClusters, ``prefect_server``
  a Prefect server, ``chromium`` is the browser); tests/conftest.py adds the marker;
* by an explicit ``pytestmark`` or ``@pytest.mark.cluster`` where a test starts its
  own (a ``LocalCluster``, an ``evalcore ... --cluster local`` or ``evalcore run``
  subprocess, a flow called in this process), and ``cli`` where it runs ``evalcore``.

A test of what a command prints, writes or refuses calls it in this process
(:func:`tests.common.cli_in_process`: ``main(argv)``, its exit status and streams)
and needs no marker; a subprocess is kept where the process itself is under test
(its exit status, a signal, the sockets of its tree, what it reads from its
environment) and for ``evalcore run``, once per distinct mechanism.

With ``EVALCORE_CHECK_MARKERS=1`` (set by ``make quick``) tests/conftest.py watches
every test that lacks a marker and fails it when it starts what the marker stands for:
a ``LocalCluster`` in this process (``cluster``), a Prefect flow in this process
(``prefect``), or a subprocess that :func:`subprocess_needs` names. So a new test
that starts a cluster without its marker fails in ``make quick`` rather than slowing it.
"""

from __future__ import annotations

from collections.abc import Sequence

FIXTURE_MARKERS: dict[str, str] = {
    "local_clients": "cluster",
    "prefect_server": "prefect",
    "chromium": "browser",
}
"""Session fixtures (tests/conftest.py, tests/report/conftest.py) and the marker a test using one, even indirectly, gets."""

MARKERS: tuple[str, ...] = ("cluster", "prefect", "browser", "cli")
"""What a test may need beyond its own process."""

QUICK = "not cluster and not prefect and not browser and not cli and not slow"
"""The ``-m`` expression of ``make quick``."""

# Text in a ``python -c`` script that starts a cluster or a flow in the child process.
_SCRIPT_NEEDS = (("LocalCluster", "cluster"), ("evaluate_layers(", "prefect"), ("prefect_test_harness", "prefect"))


def _cli_args(argv: Sequence[str]) -> list[str] | None:
    """The arguments after the ``evalcore`` program in ``argv``, or None when it runs something else."""
    for k, arg in enumerate(argv):
        if arg == "-m" and k + 1 < len(argv) and argv[k + 1] in ("evalcore", "evalcore.cli"):
            return list(argv[k + 2 :])
        if arg.rsplit("/", 1)[-1] == "evalcore":
            return list(argv[k + 1 :])
    return None


def subprocess_needs(argv: Sequence[str] | str) -> set[str]:
    """Markers a test needs that starts a subprocess with this command line.

    Parameters
    ----------
    argv : sequence of str, or str
        The command (``subprocess.Popen``'s ``args``; a string is split on spaces).

    Returns
    -------
    set of str
        ``browser`` for chromium; for an ``evalcore`` command: ``cli``, and (unless
        it asks for ``--help``) ``prefect`` for ``run`` (a Prefect flow on an embedded
        LocalCluster: ``cluster`` too), ``cluster`` for ``--cluster local``; and ``cluster`` for a ``dask scheduler`` or ``dask worker``;
        for a ``python -c`` script, the markers of what it names (``LocalCluster``,
        the flow ``evaluate_layers``, ``prefect_test_harness``); an empty set otherwise.

    Examples
    --------
    >>> sorted(subprocess_needs(["python", "-m", "evalcore.cli", "run", "-p", "a", "-r", "b"]))
    ['cli', 'cluster', 'prefect']
    >>> sorted(subprocess_needs("/venv/bin/evalcore evaluate -p a -r b --cluster local"))
    ['cli', 'cluster']
    >>> sorted(subprocess_needs(["/venv/bin/evalcore", "synth", "--n-ref", "10"]))
    ['cli']
    >>> sorted(subprocess_needs(["bash", "-n", "start.sh"]))
    []
    """
    argv = [str(a) for a in (argv.split() if isinstance(argv, str) else argv)]
    needs: set[str] = set()
    programs = [a.rsplit("/", 1)[-1] for a in argv]
    if any(p.startswith("chromium") for p in programs):
        needs.add("browser")
    if programs[:2] in (["dask", "scheduler"], ["dask", "worker"]) or programs[:1] in (["dask-scheduler"], ["dask-worker"]):
        needs.add("cluster")
    if "-c" in argv[:-1]:
        script = argv[argv.index("-c") + 1]
        needs.update(marker for word, marker in _SCRIPT_NEEDS if word in script)
    cli = _cli_args(argv)
    if cli is not None:
        needs.add("cli")
    if cli is not None and not {"-h", "--help"} & set(cli):
        command = next((a for a in cli if not a.startswith("-")), None)
        if command == "run":
            needs.update(("prefect", "cluster"))
        if any(a == "--cluster" and b == "local" for a, b in zip(cli, cli[1:])) or "--cluster=local" in cli:
            needs.add("cluster")
    return needs


def pytest_collection_finish(session) -> None:
    """With ``-p tests.markers`` and ``EVALCORE_MARKERS_REPORT=PATH``: write the selected tests' fixtures and markers.

    tests/unit/test_markers.py collects ``make quick``'s selection this way to check
    that none of the tests it keeps uses a fixture of :data:`FIXTURE_MARKERS`.
    """
    import json
    import os

    path = os.environ.get("EVALCORE_MARKERS_REPORT")
    if path:
        report = {
            item.nodeid: {"fixtures": sorted(getattr(item, "fixturenames", ())), "markers": sorted({m.name for m in item.iter_markers()})}
            for item in session.items
        }
        with open(path, "w", encoding="utf-8") as out:
            json.dump(report, out)
