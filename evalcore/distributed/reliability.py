"""What a run on a Dask cluster cost and survived: ``latency-and-reliability.json``.

Read from the cluster itself while the client is still connected: the scheduler's task
stream (every task execution since the run started, failed attempts included), the
workers there at the start and gone at the end (lost workers), and each worker
process's peak resident memory (``getrusage``: the peak of the process's life, which
for the embedded ``LocalCluster`` is the run; for a long-lived external cluster it can
include earlier work, and the file says which).

Also what a run does when something goes wrong: :class:`PartitionMissingError`, the
failure naming a partition whose output is missing or incomplete, and the fault
injection the reliability tests use to make a worker task fail (:data:`FAULT_ENV`,
docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Recording",
    "start_recording",
    "run_reliability",
    "peak_rss_mib",
    "PartitionMissingError",
    "FAULT_ENV",
    "FAULT_PHASES",
    "InjectedFault",
    "inject_fault",
]


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, MiB (Linux ``ru_maxrss`` is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass(frozen=True)
class Recording:
    """When the recording started (epoch seconds) and the workers there then."""

    started: float
    workers: tuple[str, ...]


def start_recording(client: object) -> Recording:
    """Start the scheduler's task stream (if it is not running); note the time and the workers."""
    started = time.time()
    client.get_task_stream(start=started)  # registers the scheduler plugin on first use
    return Recording(started, tuple(sorted(client.scheduler_info(n_workers=-1)["workers"])))


def _phase_of(key: object) -> str:
    text = key if isinstance(key, str) else str(key[0] if isinstance(key, tuple) and key else key)
    return text.split("-", 1)[0]


def run_reliability(client: object, recording: Recording, timings_s: dict[str, float], client_peak_mib: dict[str, float],
                    *, embedded: bool) -> dict[str, object]:
    """The run's per-phase costs and failures.

    Parameters
    ----------
    client : distributed.Client
    recording : Recording
        :func:`start_recording`'s output.
    timings_s : dict of str to float
        Wall seconds of each phase.
    client_peak_mib : dict of str to float
        This process's peak resident memory after each phase, MiB.
    embedded : bool
        The cluster was started for this run (so the workers' peaks are the run's).

    Returns
    -------
    dict
        ``phases``: per phase ``wall_s``, ``tasks`` (distinct Dask tasks), ``attempts``
        (executions), ``retries`` (failed executions that were tried again),
        ``client_peak_rss_mib``; ``lost_workers`` (there at the start, gone at the end)
        with their addresses; ``workers``;
        ``peak_rss_mib`` of the client and of each worker.
    """
    records = client.get_task_stream(start=recording.started)
    workers_at_start = recording.workers
    keys: dict[str, set] = defaultdict(set)
    attempts: dict[str, int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    for record in records:
        phase = _phase_of(record.get("key"))
        keys[phase].add(str(record.get("key")))
        attempts[phase] += 1
        if record.get("status") != "OK":
            failed[phase] += 1
    phases = {}
    for name in list(timings_s) + sorted(set(keys) - set(timings_s)):
        phases[name] = {
            "wall_s": timings_s.get(name),
            "tasks": len(keys.get(name, ())),
            "attempts": attempts.get(name, 0),
            "retries": failed.get(name, 0),
            "client_peak_rss_mib": client_peak_mib.get(name),
        }
    # A worker there at the start and gone now was lost (a nanny's replacement has a new address).
    now = set(client.scheduler_info(n_workers=-1)["workers"])
    lost = sorted(set(workers_at_start) - now)
    workers = client.run(peak_rss_mib)
    return {
        "total_wall_s": sum(v for v in timings_s.values() if v is not None),
        "phases": phases,
        "tasks": sum(p["tasks"] for p in phases.values()),
        "retries": sum(p["retries"] for p in phases.values()),
        "lost_workers": len(lost),
        "lost_worker_addresses": lost,
        "workers": len(workers),
        "peak_rss_mib": {
            "client": peak_rss_mib(),
            "workers": {str(address): value for address, value in sorted(workers.items())},
            "workers_scope": "this run (embedded cluster)" if embedded else "each worker process's life (external cluster)",
        },
    }


class PartitionMissingError(RuntimeError):
    """A partition's output is missing or incomplete at the merge."""


# --------------------------------------------------------------------------- fault injection

FAULT_ENV = "EVALCORE_INJECT_FAULT"
"""Test hook: JSON ``{"phase", "partition", "mode": "once"|"always"|"die", "marker"}``.

When set in a worker's environment, the named phase raises in the named partition:
once (the marker file records that it did) or every time; ``die``: the worker process
kills itself once (the marker records it), as a lost worker. docs/reliability.md."""


FAULT_PHASES = (
    "prepare", "pairs", "components", "seams", "group-draws", "resolve", "sums", "select", "predictions", "pixels",
    "score-split", "score-weights", "score-range", "score-values", "score-replicates",
)
"""The worker tasks that call :func:`inject_fault`, by the phase name a fault names.

What each one's ``partition`` is (a partition key ``32633_4_51``, a prepare chunk
``reference-0``, a score range ``range-3``) is in docs/reliability.md's fault table."""


class InjectedFault(RuntimeError):
    """The failure a test asked for through :data:`FAULT_ENV`."""


def inject_fault(phase: str, partition: str) -> None:
    """Raise :class:`InjectedFault` when :data:`FAULT_ENV` names this phase and partition.

    Called by every worker task before it writes anything; a no-op when the variable
    is not set. A fault that names no phase of :data:`FAULT_PHASES` (or a task that calls
    with one) is a ``ValueError``: a misspelt phase would otherwise never fire, and the
    test asking for it would pass without a fault.
    """
    spec_text = os.environ.get(FAULT_ENV)
    if not spec_text:
        return
    spec = json.loads(spec_text)
    for asked in (phase, spec.get("phase")):
        if asked not in FAULT_PHASES:
            raise ValueError(f"{FAULT_ENV}: no worker task injects faults in phase {asked!r}; the phases are {', '.join(FAULT_PHASES)}")
    if spec.get("phase") != phase or spec.get("partition") != partition:
        return
    if spec.get("mode") in ("once", "die"):
        marker = Path(spec["marker"])
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return
    if spec.get("mode") == "die":  # a worker lost mid-task: no exception, no cleanup
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected {spec.get('mode')} fault in {phase} of partition {partition}")
