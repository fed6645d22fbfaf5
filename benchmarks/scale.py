"""The scale benchmark: ``evalcore synth`` and ``evalcore run`` at national sizes, measured from outside.

``.venv/bin/python -m benchmarks.scale --sizes 250000,1000000`` (``make bench``'s ``scale``
section calls :func:`run_sizes`). For each size:

1. ``evalcore synth --n-ref N --seed 3`` in a subprocess (streamed to GeoParquet parts
   above 200,000 fields), its peak memory sampled;
2. a real ``dask scheduler`` and 2 one-thread ``dask worker`` processes
   (:func:`tests.dask_processes.dask_processes`), the scheduler keeping a long task stream;
3. ``evalcore run`` against that scheduler in a subprocess, with full options (strata, six
   size classes, 1000 field-bootstrap resamples, 10 m boundary tolerance) and the families
   (scores, AOIs, annotated area);
4. a sampler thread reading ``VmRSS`` and ``VmHWM`` from ``/proc/<pid>/status`` every
   0.5 s for the client (the ``evalcore run`` process) and each worker (the nanny and
   the worker process it started, with any children): memory is measured from
   ``/proc``, never from what a process reports about itself at exit;
5. the phase times from the run's ``manifest.json`` (``timings_s``), and the cluster's
   task stream: per-phase task-seconds and per-partition costs, a picture of it
   (``benchmarks/results/scale-taskstream-<N>-<timestamp>.png``, matplotlib);
6. the targets of the national runs printed PASS / FAIL (ratios from sizes measured in
   the same run; a target whose sizes were not run is "not measured"), and a projection
   of the time at 16M and 50M fields on 32 and 128 workers from the per-partition costs
   (:func:`project`; a model, labelled as such);
7. the machine's pace before the first size and after each (:func:`machine_pace`: a
   fixed GEOS + numpy job alone and two at once, the same work whatever evalcore's code),
   so that walls measured hours apart can be read against how fast the machine was running.

Everything goes to ``benchmarks/results/scale-<sizes>-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
BIN = Path(sys.executable).parent
SEED = 3
PHASES: tuple[str, ...] = ("prepare", "pairs", "resolve", "sums", "merge")
"""The run's phases, in order, as ``manifest.json``'s ``timings_s`` names them."""
RESOLVE_STEPS: tuple[str, ...] = ("components", "seams", "group", "homeless", "score")
"""Task prefixes of the resolve phase's steps on the workers besides ``resolve-<key>`` (the
components and seams, the field bootstrap's ``group-draws``, the homeless rows, the scores'
ranges): their task-seconds count in the resolve phase's cost."""
OTHER = "other"
"""Everything of the wall time outside the phases: start, reading the inputs' metadata, publishing."""
FULL_OPTIONS: tuple[str, ...] = (
    "--strata-column", "stratum", "--size-bins", "0,0.5,1,2,5,10,inf", "--bootstrap", "1000",
    "--boundary-tolerance-m", "10", "--score-column", "score", "--aoi-id-column", "aoi_id",
)
GIB = 1024.0  # MiB
TASK_STREAM_LENGTH = 2_000_000
"""Tasks the scheduler keeps for the task stream (its default, 1000, holds a few seconds of a large run)."""


# --------------------------------------------------------------------------------------
# /proc parsing and the sampler


@dataclasses.dataclass(frozen=True)
class ProcMemory:
    """One process's memory from ``/proc/<pid>/status``.

    Attributes
    ----------
    rss_kib : int
        ``VmRSS``, resident set size now, KiB (0 for a zombie or a kernel thread).
    hwm_kib : int
        ``VmHWM``, the process's peak resident set size so far, KiB.
    """

    rss_kib: int
    hwm_kib: int


def parse_status(text: str) -> ProcMemory:
    """``VmRSS`` and ``VmHWM`` of a ``/proc/<pid>/status`` text (KiB; 0 when a line is absent).

    Parameters
    ----------
    text : str
        The file's content: ``Name:\\tpython\\n...\\nVmHWM:\\t  123456 kB\\n...``.

    Returns
    -------
    ProcMemory
    """
    values = {"VmRSS": 0, "VmHWM": 0}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in values:
            fields = rest.split()
            if not fields:
                continue
            unit = fields[1].lower() if len(fields) > 1 else "kb"
            # The kernel writes kB; the others are accepted so a malformed line cannot mislead silently.
            scale = {"kb": 1, "mb": 1024, "gb": 1024 * 1024, "b": 1 / 1024}.get(unit)
            if scale is None:
                raise ValueError(f"unknown unit {unit!r} in /proc status line {line!r}")
            values[name] = int(int(fields[0]) * scale)
    return ProcMemory(values["VmRSS"], values["VmHWM"])


def parse_stat_ppid(text: str) -> int:
    """The parent pid in a ``/proc/<pid>/stat`` text.

    The command name (field 2, in parentheses) may hold spaces and parentheses, so the
    fields are counted from the last ``)``: state, then ppid.
    """
    return int(text[text.rindex(")") + 2:].split()[1])


def children_of(parents: Mapping[int, int], root: int) -> list[int]:
    """``root`` and every descendant of it, from a ``pid -> ppid`` map; in increasing pid order."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    tree, todo = {root}, [root]
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return sorted(tree)


def _ppids() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                out[int(entry)] = parse_stat_ppid(Path(f"/proc/{entry}/stat").read_text())
    return out


def _memory(pid: int) -> ProcMemory | None:
    try:
        return parse_status(Path(f"/proc/{pid}/status").read_text())
    except OSError:  # ended between the listing and the read
        return None


class Sampler(threading.Thread):
    """Samples the memory of process trees every ``interval_s`` seconds until :meth:`stop`.

    For each role (``client``, ``w0`` ...) a root pid. ``hwm_mib`` is the largest ``VmHWM``
    of one process of the root's tree (the worker process under its nanny, the client
    itself), which also catches a peak between two samples: the role's peak, what the
    targets are checked against. ``tree_peak_rss_mib`` is the largest sum of ``VmRSS``
    over the whole tree at one sample (with the nanny, or a helper process the client
    starts). Roles can be added while it runs. With ``disk_path``, the free space of its
    file system is sampled too (``disk_free_start``, ``disk_free_min``, bytes).

    When each peak was reached: ``peak_at_s`` (seconds since the first sample at which a
    role's ``VmHWM`` last rose; ``peak_window_s``, the previous sample's time and that one:
    the peak came between them; ``t0_epoch``, the first sample's time since the epoch, to
    find the tasks then running, :func:`tasks_at`), a ``timeline`` of every role's resident memory every
    ``timeline_s`` seconds (``[seconds, {role: MiB}]``), and with ``log`` (an ``evalcore run``'s
    output) the seconds at which each phase line first appeared in it (``phases_at_s``):
    together they tell in which phase a peak came.
    """

    def __init__(self, interval_s: float = 0.5, disk_path: Path | None = None, timeline_s: float = 5.0,
                 log: Path | None = None):
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.roots: dict[str, int] = {}
        self.peak_mib: dict[str, float] = {}
        self.hwm_mib: dict[str, float] = {}
        self.peak_at_s: dict[str, float] = {}
        self.peak_window_s: dict[str, tuple[float, float]] = {}
        self.t0_epoch: float | None = None
        self._previous_at = 0.0
        self.timeline_s = timeline_s
        self.timeline: list[list] = []
        self.log = log
        self.phases_at_s: dict[str, float] = {}
        self._log_offset = 0
        self._t0: float | None = None
        self.samples = 0
        # With disk_path: the free space of its file system at the first sample and the
        # smallest seen, bytes (a run's peak disk use: a finished run removes its work directory).
        self.disk_path = disk_path
        self.disk_free_start: int | None = None
        self.disk_free_min: int | None = None
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def watch(self, role: str, pid: int) -> None:
        with self._lock:
            self.roots[role] = pid
        self.sample()

    def sample(self) -> None:
        with self._lock:
            roots = dict(self.roots)
        if not roots:
            return
        if self.disk_path is not None:
            with contextlib.suppress(OSError):
                free = shutil.disk_usage(self.disk_path).free
                if self.disk_free_start is None:
                    self.disk_free_start = self.disk_free_min = free
                self.disk_free_min = min(self.disk_free_min, free)
        now = time.monotonic()
        if self._t0 is None:
            self._t0, self.t0_epoch = now, time.time()
        at = round(now - self._t0, 1)
        parents = _ppids()
        resident = {}
        for role, root in roots.items():
            mems = [m for m in map(_memory, children_of(parents, root)) if m is not None]
            if not mems:
                continue
            rss = sum(m.rss_kib for m in mems) / 1024.0
            hwm = max(max(m.hwm_kib, m.rss_kib) for m in mems) / 1024.0
            resident[role] = round(rss, 1)
            self.peak_mib[role] = max(self.peak_mib.get(role, 0.0), rss)
            if hwm > self.hwm_mib.get(role, 0.0):
                self.hwm_mib[role] = hwm
                self.peak_at_s[role] = at
                self.peak_window_s[role] = (self._previous_at, round(now - self._t0, 3))
        if not self.timeline or at - self.timeline[-1][0] >= self.timeline_s:
            self.timeline.append([at, resident])
        self._read_phase_lines(at)
        self._previous_at = round(now - self._t0, 3)
        self.samples += 1

    def _read_phase_lines(self, at: float) -> None:
        """Note the time of each phase line new in the log since the last sample."""
        if self.log is None:
            return
        with contextlib.suppress(OSError):
            with open(self.log, "rb") as f:
                f.seek(self._log_offset)
                text = f.read()
            end = text.rfind(b"\n") + 1  # whole lines only; the rest is read next time
            self._log_offset += end
            for line in text[:end].decode(errors="replace").splitlines():
                match = _PHASE_LINE.match(line.strip())
                if match and match.group(1) not in self.phases_at_s:
                    self.phases_at_s[match.group(1)] = at

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            self.sample()

    def stop(self) -> dict[str, dict[str, float]]:
        """Stop (after one last sample) and return ``{role: {"peak_mib", "tree_peak_rss_mib"}}``, MiB.

        ``peak_mib`` is the largest process's peak (``VmHWM``, or a sampled ``VmRSS`` if larger).
        """
        self.sample()
        self._halt.set()
        if self.is_alive():
            self.join()
        return {
            role: {"peak_mib": self.hwm_mib.get(role, 0.0), "tree_peak_rss_mib": self.peak_mib.get(role, 0.0),
                   "peak_at_s": self.peak_at_s.get(role), "peak_window_s": self.peak_window_s.get(role)}
            for role in self.roots
        }


def _run_sampled(argv: Sequence[str], roles: Mapping[str, int], log: Path, sampler_role: str = "client",
                 interval_s: float = 0.5) -> tuple[float, dict, int]:
    """Run ``argv`` with its memory sampled (and the ``roles`` already running): wall s, memory, exit code.

    The memory holds a ``"disk"`` entry besides the roles: the free space of the file system
    of ``log``'s directory at the start and at its lowest, and their difference, MiB
    (what the command wrote at its peak, if nothing else wrote there meanwhile).
    """
    sampler = Sampler(interval_s, disk_path=log.parent, log=log)
    for role, pid in roles.items():
        sampler.watch(role, pid)
    sampler.start()
    # VmHWM only grows, so a peak is missed only in the last interval before the process
    # ends (a zombie's status has no memory lines; nothing is taken from the exit status).
    started = time.perf_counter()
    with open(log, "w") as out:
        # This checkout's code, whatever the installed evalcore points at (an editable install of another copy).
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=_env(sampler_role, log.parent))
        try:
            sampler.watch(sampler_role, proc.pid)
            code = proc.wait()
        finally:  # interrupted (Ctrl-C): the run does not outlive the benchmark
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    wall = time.perf_counter() - started
    mem = sampler.stop()
    if sampler.disk_free_start is not None:
        mem["disk"] = {"free_start_mib": sampler.disk_free_start / 2**20, "free_min_mib": sampler.disk_free_min / 2**20,
                       "peak_written_mib": (sampler.disk_free_start - sampler.disk_free_min) / 2**20}
    # When: each phase line's first sight in the output and every role's memory every few seconds.
    mem["phases_at_s"] = dict(sampler.phases_at_s)
    mem["timeline"] = sampler.timeline
    mem["t0_epoch"] = sampler.t0_epoch
    return wall, mem, code


# --------------------------------------------------------------------------------------
# Task stream: per-phase task-seconds, per-partition costs, the picture


def phase_of(key: str) -> str:
    """The phase a task belongs to from its key (``pairs-32612-11-77-<token>`` -> ``pairs``).

    Tasks of no phase of :data:`PHASES` (the per-partition predictions, the selection of the
    medians) are counted as :data:`OTHER` in the projection but keep their prefix here. The
    scores' tasks keep their step (``score-weights``, ``score-range``, ...): they are
    several kinds of work of one resolve step, each worth its own line.
    """
    parts = str(key).split("-", 2)
    return "-".join(parts[:2]) if parts[0] == "score" and len(parts) > 1 else parts[0]


def task_costs(stream: Iterable[Mapping]) -> dict[str, dict[str, float]]:
    """Per task prefix: ``tasks``, ``task_s`` (compute seconds summed), ``max_task_s``, ``mean_task_s``.

    Parameters
    ----------
    stream : iterable of dict
        The scheduler's task stream records (``key``, ``startstops`` with ``action``,
        ``start`` and ``stop`` in seconds since the epoch).
    """
    out: dict[str, dict[str, float]] = {}
    for record in stream:
        compute = sum(s["stop"] - s["start"] for s in record["startstops"] if s["action"] == "compute")
        row = out.setdefault(phase_of(record["key"]), {"tasks": 0, "task_s": 0.0, "max_task_s": 0.0})
        row["tasks"] += 1
        row["task_s"] += compute
        row["max_task_s"] = max(row["max_task_s"], compute)
    for row in out.values():
        row["mean_task_s"] = row["task_s"] / row["tasks"]
    return out


def tasks_at(stream: Iterable[Mapping], worker: str, start: float, stop: float) -> dict[str, int]:
    """The tasks ``worker`` computed at some time between ``start`` and ``stop`` (seconds
    since the epoch), counted by :func:`phase_of`: what ran when a worker's memory peaked
    (:attr:`Sampler.peak_window_s`)."""
    out: dict[str, int] = {}
    for record in stream:
        if record.get("worker") != worker:
            continue
        if any(s["action"] == "compute" and s["start"] <= stop and s["stop"] >= start for s in record["startstops"]):
            name = phase_of(record["key"])
            out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def _computes(stream: Iterable[Mapping]) -> Iterator[tuple[float, float, str]]:
    """``(start, stop, phase)`` of every stretch of computing in the task stream records."""
    for record in stream:
        for s in record["startstops"]:
            if s["action"] == "compute" and s["stop"] > s["start"]:
                yield s["start"], s["stop"], phase_of(record["key"])


def busy_seconds(stream: Iterable[Mapping], workers: int) -> dict[str, float]:
    """How long at least one worker, and how long every worker, was computing a task, s.

    The difference between a run's wall time and ``any_s`` is when only the client and the
    scheduler worked (start, the client's phases, publication); ``any_s - all_s`` is when
    part of the workers waited (the end of a phase, too few tasks).
    """
    events = sorted(e for start, stop, _ in _computes(stream) for e in ((start, 1), (stop, -1)))
    any_s = all_s = 0.0
    running, last = 0, None
    for t, step in events:
        if last is not None:
            any_s += (t - last) if running > 0 else 0.0
            all_s += (t - last) if running >= workers else 0.0
        running += step
        last = t
    return {"any_s": any_s, "all_s": all_s}


def idle_gaps(stream: Iterable[Mapping], min_s: float = 1.0) -> list[dict]:
    """The stretches, at least ``min_s`` long, when no worker computed a task: where the
    client's serial steps are (the rest of the wall time with no worker computing is
    before the first task and after the last).

    Returns
    -------
    list of dict
        ``{"at_s": seconds from the first task's start, "seconds", "before": the phase of
        the last task to end before it, "after": that of the first to start after}``,
        in time order.
    """
    spans = sorted(_computes(stream))
    if not spans:
        return []
    first = spans[0][0]
    out = []
    end, last = spans[0][1], spans[0][2]
    for start, stop, name in spans[1:]:
        if start - end >= min_s:
            out.append({"at_s": end - first, "seconds": start - end, "before": last, "after": name})
        if stop > end:
            end, last = stop, name
    return out


def phase_colours(prefixes: Sequence[str], palette: Sequence[tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
    """A colour per task prefix from ``palette`` (tab20: more prefixes than tab10 has
    colours), leaving out its greys, which are the transfers' colour (the 2M picture of
    2026-12-03 drew score-values in that grey); repeats beyond the palette's length."""
    colours = [c for c in palette if not (c[0] == c[1] == c[2])]
    return {p: colours[i % len(colours)] for i, p in enumerate(prefixes)}


def plot_task_stream(stream: Sequence[Mapping], path: Path, title: str) -> Path | None:
    """The task stream as a picture (one row per worker, a bar per task coloured by phase); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not stream:
        return None
    t0 = min(s["start"] for r in stream for s in r["startstops"])
    workers = sorted({r["worker"] for r in stream})
    prefixes = sorted({phase_of(r["key"]) for r in stream}, key=lambda p: (PHASES + (p,)).index(p))
    colours = phase_colours(prefixes, plt.get_cmap("tab20").colors)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.9 * len(workers)))
    for p in prefixes:
        for w_index, w in enumerate(workers):
            bars = [(s["start"] - t0, s["stop"] - s["start"]) for r in stream if r["worker"] == w and phase_of(r["key"]) == p
                    for s in r["startstops"] if s["action"] == "compute"]
            if bars:
                ax.broken_barh(bars, (w_index - 0.4, 0.8), facecolors=colours[p], edgecolor="white", linewidth=0.3, label=p)
        transfers = [(s["start"] - t0, s["stop"] - s["start"], workers.index(r["worker"])) for r in stream
                     if phase_of(r["key"]) == p for s in r["startstops"] if s["action"] != "compute"]
        for start, width, w_index in transfers:
            ax.broken_barh([(start, width)], (w_index - 0.4, 0.8), facecolors="black", alpha=0.5, label="transfer / disk")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one legend entry per phase, not per worker
    ax.legend(unique.values(), unique.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(len(unique), 7), frameon=False)
    ax.set_yticks(range(len(workers)), [f"worker {k}" for k in range(len(workers))])
    ax.set_xlabel("seconds since the first task (grey: transfers / disk)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------
# Projection and targets (pure)


@dataclasses.dataclass(frozen=True)
class PhaseCost:
    """What one phase of a measured run cost.

    Attributes
    ----------
    wall_s : float
        The phase's wall time, s.
    task_s : float
        Compute seconds of the phase's tasks on the workers, summed.
    max_task_s : float
        The longest of those tasks, s (a partition's cost does not grow with the country:
        the partitions are tiles of a fixed size).
    """

    wall_s: float
    task_s: float
    max_task_s: float


def _serial(c: PhaseCost, workers: int) -> float:
    """The part of a phase's wall time its tasks, spread over ``workers``, do not explain, s."""
    return max(c.wall_s - c.task_s / workers, 0.0)


def project(phases: Mapping[str, PhaseCost], n_ref: int, workers: int, target_n_ref: int, target_workers: int,
            smaller: tuple[Mapping[str, PhaseCost], int] | None = None) -> dict:
    """Projected wall time of a run of ``target_n_ref`` fields on ``target_workers`` workers.

    A model, not a measurement. Per phase, the measured wall time splits into the tasks'
    share, ``task_s / workers``, and the rest, ``wall_s - task_s / workers`` (the client,
    scheduling, the phase's last tasks' imbalance: "serial").

    * The tasks' share grows linearly with the fields (the partitions are fixed-size
      tiles, so their number grows with the country) and is spread over
      ``target_workers``, but never below the longest task.
    * The serial rest is ``a + b * fields`` with ``a, b >= 0``: from two measured sizes
      (``smaller``, measured on the same number of workers) when given; otherwise
      proportional to the fields for the phases and constant for :data:`OTHER` (start
      and publication). Keeping it serial overstates the scheduling and the imbalance,
      which more workers also spread: an upper bound.

    Parameters
    ----------
    phases : mapping of str to PhaseCost
        The measured phases (with :data:`OTHER` for the wall time outside them).
    n_ref, workers : int
        The measured run's reference fields and workers.
    target_n_ref, target_workers : int
        The projected run's.
    smaller : (mapping of str to PhaseCost, int), optional
        The phases and reference fields of a smaller measured run, to fit ``a`` and ``b``.

    Returns
    -------
    dict
        ``{"n_ref", "workers", "phases_s": {phase: s}, "wall_s", "spread_s", "serial_s"}``.
    """
    if n_ref <= 0 or workers <= 0 or target_n_ref <= 0 or target_workers <= 0:
        raise ValueError("sizes and worker counts must be positive")
    if smaller is not None and not 0 < smaller[1] < n_ref:
        raise ValueError(f"the smaller run's size must be in (0, {n_ref}), not {smaller[1]}")
    k = target_n_ref / n_ref
    out, spread_total, serial_total = {}, 0.0, 0.0
    for name, c in phases.items():
        spread = max(c.task_s * k / target_workers, c.max_task_s) if c.task_s > 0 else 0.0
        s_big = _serial(c, workers)
        if smaller is not None and name in smaller[0]:
            s_small = _serial(smaller[0][name], workers)
            b = max((s_big - s_small) / (n_ref - smaller[1]), 0.0)
            a = max(s_big - b * n_ref, 0.0)
        elif name == OTHER:
            a, b = s_big, 0.0
        else:
            a, b = 0.0, s_big / n_ref
        serial = a + b * target_n_ref
        out[name] = spread + serial
        spread_total += spread
        serial_total += serial
    return {"n_ref": target_n_ref, "workers": target_workers, "phases_s": out,
            "wall_s": sum(out.values()), "spread_s": spread_total, "serial_s": serial_total}


def phase_costs(row: Mapping) -> dict[str, PhaseCost]:
    """:class:`PhaseCost` per phase of a measured size's record (:func:`measure_size`); the rest is :data:`OTHER`."""
    tasks: dict[str, dict[str, float]] = {}
    for prefix, t in row.get("tasks", {}).items():
        name = "resolve" if prefix.split("-", 1)[0] in RESOLVE_STEPS else prefix
        held = tasks.setdefault(name, {"task_s": 0.0, "max_task_s": 0.0})
        held["task_s"] += t["task_s"]
        held["max_task_s"] = max(held["max_task_s"], t["max_task_s"])
    out = {}
    for name, wall in row["phases_s"].items():
        t = tasks.get(name, {})
        out[name] = PhaseCost(wall, t.get("task_s", 0.0), t.get("max_task_s", 0.0))
    other = [t for name, t in tasks.items() if name not in row["phases_s"]]
    out[OTHER] = PhaseCost(max(row["wall_s"] - sum(row["phases_s"].values()), 0.0),
                           sum(t["task_s"] for t in other), max((t["max_task_s"] for t in other), default=0.0))
    return out


@dataclasses.dataclass(frozen=True)
class Target:
    """One target of the national runs.

    Attributes
    ----------
    name : str
        What is checked, as printed.
    measured : float or None
        The value (s, a ratio or MiB); None when the sizes it needs were not run.
    limit : str
        The limit, as printed.
    passed : bool or None
        None when not measured.
    """

    name: str
    measured: float | None
    limit: str
    passed: bool | None

    @property
    def verdict(self) -> str:
        return "not measured" if self.passed is None else ("PASS" if self.passed else "FAIL")


def targets(rows: Sequence[Mapping]) -> list[Target]:
    """The targets (issue 29) checked on the sizes of one run; a target needing a size not run is not measured.

    Parameters
    ----------
    rows : sequence of dict
        One per size: ``n_ref``, ``wall_s``, ``client_mib``, ``worker_mib`` (list, MiB),
        ``synth_mib`` (MiB).
    """
    by = {r["n_ref"]: r for r in rows}

    def ratio(a: int, b: int) -> float | None:
        return by[a]["wall_s"] / by[b]["wall_s"] if a in by and b in by else None

    def check(name: str, value: float | None, limit: str, ok) -> Target:
        return Target(name, value, limit, None if value is None else bool(ok(value)))

    out = [
        check("2M fields, wall", by[2_000_000]["wall_s"] if 2_000_000 in by else None, "<= 360 s", lambda v: v <= 360),
        check("time(2M) / time(250k)", ratio(2_000_000, 250_000), "<= 8.8", lambda v: v <= 8.8),
        check("time(4M) / time(1M)", ratio(4_000_000, 1_000_000), "<= 4.2", lambda v: v <= 4.2),
    ]
    for n in (2_000_000, 4_000_000):
        label = f"{n // 1_000_000}M"
        value = by[n]["client_mib"] / by[250_000]["client_mib"] if n in by and 250_000 in by else None
        out.append(check(f"client peak {label} / client peak 250k", value, "<= 1.10", lambda v: v <= 1.10))
        out.append(check(f"client peak {label}, MiB", by[n]["client_mib"] if n in by else None, "<= 1,229 MiB (1.2 GiB)",
                         lambda v: v <= 1.2 * GIB))
    worst = max((max(r["worker_mib"]) for r in rows), default=None)
    out.append(check("each worker, any size, MiB", worst, "<= 2,048 MiB (2 GiB)", lambda v: v <= 2 * GIB))
    out.append(check("synth of 2M, MiB", by[2_000_000]["synth_mib"] if 2_000_000 in by else None, "<= 2,048 MiB (2 GiB)",
                     lambda v: v <= 2 * GIB))
    return out


def targets_table(found: Sequence[Target]) -> str:
    """The targets as printed lines: name, measured value, limit, verdict."""
    lines = [f"  {'target':<40} {'measured':>10}  {'limit':<24} verdict"]
    for t in found:
        value = "-" if t.measured is None else (f"{t.measured:,.2f}" if t.measured < 100 else f"{t.measured:,.0f}")
        lines.append(f"  {t.name:<40} {value:>10}  {t.limit:<24} {t.verdict}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# One size


def _env(name: str, cwd: Path) -> dict:
    """The environment of the processes the benchmark starts: this checkout first on the path; the scheduler keeps a long task stream."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
    if name == "scheduler":
        env["DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TASKS__TASK_STREAM_LENGTH"] = str(TASK_STREAM_LENGTH)
    return env


def _tail(path: Path, n: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    return ""


def disk_mib(directory: Path) -> dict[str, float]:
    """Disk space used under ``directory``, MiB (allocated blocks, as ``du``), per entry and in all (``"total"``).

    A run's work directory holds every phase's intermediates until the run ends: at 10M
    fields it outgrew the 70 GiB this machine had free (the run failed in its sums).
    """
    def used(path: Path) -> int:
        if path.is_symlink() or not path.is_dir():
            with contextlib.suppress(OSError):
                return path.lstat().st_blocks * 512
            return 0
        total = 0
        for root, _, files in os.walk(path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
        return total

    if not directory.is_dir():
        return {}
    sizes = {entry.name: used(entry) / 2**20 for entry in sorted(directory.iterdir())}
    return sizes | {"total": sum(sizes.values())}


_PHASE_LINE = re.compile(r"^([a-z]+)\s+\d+ [a-z]+ in ([0-9.]+) s$")


def phases_logged(log: Path) -> dict[str, float]:
    """The phase lines of an ``evalcore run`` printed to a pipe (``pairs       1258 partitions in 1061.7 s``): phase -> s.

    What a failed run leaves of its phase times (a finished one has them in its manifest).
    """
    found = {}
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            match = _PHASE_LINE.match(line.strip())
            if match:
                found[match.group(1)] = float(match.group(2))
    return found


def phase_at(seconds: float | None, phases_at_s: Mapping[str, float]) -> str | None:
    """Where ``seconds`` after the run's start lies among its phase lines (each printed when
    its phase ends): ``"before the prepare line"``, ``"between the pairs and sums lines"``,
    ``"after the predictions line"``. Not every phase prints a line (the resolve and the
    merge do not), so a time between two lines is named by both, not by the later one
    alone. None when ``seconds`` is."""
    if seconds is None:
        return None
    previous = None
    for name, at in sorted(phases_at_s.items(), key=lambda kv: kv[1]):
        if at >= seconds:
            return f"before the {name} line" if previous is None else f"between the {previous} and {name} lines"
        previous = name
    return f"after the {previous} line" if previous is not None else "before any phase line"


class SizeFailed(RuntimeError):
    """A size whose ``evalcore synth`` or ``evalcore run`` failed; ``row`` holds what was measured until then."""

    def __init__(self, message: str, row: dict):
        super().__init__(message)
        self.row = row


def measure_size(n_ref: int, base: Path, stamp: str, workers: int = 2, interval_s: float = 0.5, data: Path | None = None,
                 picture: bool = True) -> dict:
    """Synth (unless ``data`` is given), cluster, ``evalcore run``: the record of one size.

    Parameters
    ----------
    n_ref : int
        Reference fields to generate.
    base : Path
        An empty directory for the data, the cluster's working directories and the run.
    stamp : str
        Timestamp in the names of the files written to ``benchmarks/results/``.
    workers : int
        One-thread worker processes.
    interval_s : float
        Sampling period of ``/proc``, s.
    data : Path, optional
        An existing ``evalcore synth`` directory to use instead of generating one.
    picture : bool
        Save the task stream as a PNG.
    """
    from distributed import Client

    from tests.dask_processes import dask_processes

    row: dict = {"n_ref": n_ref, "workers": workers, "seed": SEED}
    if data is None:
        data = base / "data"
        wall, mem, code = _run_sampled([str(BIN / "evalcore"), "synth", "--n-ref", str(n_ref), "--seed", str(SEED), "--out", str(data)],
                                       {}, base / "synth.log", "synth", interval_s)
        row["synth_s"], row["synth_mib"], row["synth_memory"] = wall, mem["synth"]["peak_mib"], mem["synth"]
        row["data_disk_mib"] = disk_mib(data)
        if code:
            raise SizeFailed(f"evalcore synth --n-ref {n_ref} failed (exit {code}); its output, {base / 'synth.log'}:\n{_tail(base / 'synth.log')}",
                             row | {"error": _tail(base / "synth.log", 5)})
    else:
        row["synth_s"] = row["synth_mib"] = None
    layer = {name: (data / f"{name}.parquet") for name in ("predicted", "reference", "aoi", "annotated")}
    missing = [str(p) for p in layer.values() if not p.exists()]
    if missing:
        raise FileNotFoundError(f"the data directory {data} lacks {', '.join(missing)} (an evalcore synth directory is expected)")
    run_dir = base / "run"
    argv = [str(BIN / "evalcore"), "run", "-p", str(layer["predicted"]), "-r", str(layer["reference"]), *FULL_OPTIONS,
            "--aoi", str(layer["aoi"]), "--annotated-area", str(layer["annotated"]), "-o", str(run_dir)]
    with dask_processes(base / "cluster", workers, _env) as (address, dashboard), Client(address, timeout="60s") as client:
        # The worker processes run under their nannies: the nanny's tree (nanny, worker, children) is the worker's memory.
        nannies = client.run(os.getppid)
        addresses = {f"w{k}": a for k, a in enumerate(sorted(nannies))}
        roots = {role: nannies[a] for role, a in addresses.items()}
        client.get_task_stream(start=time.time())  # the scheduler's task-stream plugin exists before the run
        started_epoch = time.time()
        wall, mem, code = _run_sampled([*argv, "--cluster", address], roots, base / "run.log", "client", interval_s)
        stream = client.get_task_stream(start=started_epoch)
    # The run directory's space by entry, and its work directory's by phase (a failed run's
    # intermediates; a finished run removes them, so its peak is the sampled one).
    row["run_disk_mib"], row["work_disk_mib"] = disk_mib(run_dir), disk_mib(run_dir / "work")
    row["disk_peak_written_mib"] = mem.get("disk", {}).get("peak_written_mib")
    if code:
        # What was measured until the failure is kept (a 10M run fails after an hour or more).
        row.update({"wall_s": wall, "phases_s": phases_logged(base / "run.log"), "client_mib": mem["client"]["peak_mib"],
                    "worker_mib": [mem[f"w{k}"]["peak_mib"] for k in range(workers)], "memory": mem, "tasks": task_costs(stream),
                    "error": _tail(base / "run.log", 5)})
        raise SizeFailed(f"evalcore run at {n_ref} fields failed (exit {code}); its output, {base / 'run.log'}:\n{_tail(base / 'run.log')}", row)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    row.update({
        "wall_s": wall, "fields_per_s": n_ref / wall, "count_reference": metrics.get("count_reference"),
        "phases_s": {k: v for k, v in manifest["timings_s"].items() if v is not None},
        "partitions": len(manifest["partitions"]),
        "client_mib": mem["client"]["peak_mib"], "worker_mib": [mem[f"w{k}"]["peak_mib"] for k in range(workers)],
        "memory": mem, "dashboard": dashboard, "task_stream_tasks": len(stream),
        "tasks": task_costs(stream), "busy_s": busy_seconds(stream, workers), "idle_gaps": idle_gaps(stream),
    })
    row["tasks_complete"] = len(stream) < TASK_STREAM_LENGTH
    row["peak_phase"] = {role: phase_at(mem[role].get("peak_at_s"), mem["phases_at_s"])
                         for role in ["client"] + [f"w{k}" for k in range(workers)]}
    # The tasks each worker computed between the sample before its peak and the sample that saw it.
    row["peak_tasks"] = {role: tasks_at(stream, address, mem["t0_epoch"] + mem[role]["peak_window_s"][0],
                                        mem["t0_epoch"] + mem[role]["peak_window_s"][1])
                         for role, address in addresses.items()
                         if mem.get("t0_epoch") is not None and mem[role].get("peak_window_s")}
    if picture:
        png = plot_task_stream(stream, RESULTS / f"scale-taskstream-{n_ref}-{stamp}.png",
                               f"evalcore run, {n_ref:,} reference fields, {workers} workers: task stream")
        row["task_stream_png"] = None if png is None else str(png.relative_to(RESULTS.parent.parent))
    return row


# --------------------------------------------------------------------------------------
# Several sizes, printing


def projections(rows: Sequence[Mapping], sizes: Sequence[int] = (16_000_000, 50_000_000), workers: Sequence[int] = (32, 128)) -> list[dict]:
    """:func:`project` from the largest measured size (and the smallest, when another was run) to ``sizes`` x ``workers``."""
    if not rows:
        return []
    big, small = max(rows, key=lambda r: r["n_ref"]), min(rows, key=lambda r: r["n_ref"])
    smaller = (phase_costs(small), small["n_ref"]) if small["n_ref"] < big["n_ref"] else None
    costs = phase_costs(big)
    return [project(costs, big["n_ref"], big["workers"], n, w, smaller) | {"from_n_ref": [small["n_ref"], big["n_ref"]] if smaller else [big["n_ref"]]}
            for n in sizes for w in workers]


def print_rows(rows: Sequence[Mapping]) -> None:
    print(f"\nscale (evalcore run, full options, scores and AOIs, {rows[0]['workers'] if rows else 2} one-thread workers; memory from /proc)")
    names = list(PHASES)
    print(f"  {'fields':>10} {'wall s':>8} {'fields/s':>9} " + " ".join(f"{p:>8}" for p in names)
          + f" {'parts':>6} {'client MiB':>11} {'workers MiB':>14} {'synth s':>8} {'synth MiB':>10}")
    for r in rows:
        p = r["phases_s"]
        synth = (f"{r['synth_s']:>8.1f} {r['synth_mib']:>10.0f}" if r.get("synth_s") is not None else f"{'-':>8} {'-':>10}")
        workers = " / ".join(f"{m:,.0f}" for m in r["worker_mib"])
        print(f"  {r['n_ref']:>10,} {r['wall_s']:>8.1f} {r['fields_per_s']:>9.0f} " + " ".join(f"{p.get(n, float('nan')):>8.1f}" for n in names)
              + f" {r['partitions']:>6} {r['client_mib']:>11,.0f} {workers:>14} {synth}")
    for r in rows:
        print(f"\n  per-partition costs at {r['n_ref']:,} fields ({r['partitions']} partitions; compute seconds from the task stream):")
        for name, t in sorted(r["tasks"].items(), key=lambda kv: (PHASES + (kv[0],)).index(kv[0])):
            print(f"    {name:<12} {t['tasks']:>6} tasks  {t['task_s']:>9.1f} task-s  mean {t['mean_task_s']:>7.2f} s  max {t['max_task_s']:>7.2f} s")
        if r.get("peak_phase"):
            print("    peak memory reached: " + "; ".join(f"{role} {phase}" for role, phase in r["peak_phase"].items()))
        if r.get("peak_tasks"):
            print("    tasks computing at the workers' peaks: " + "; ".join(
                f"{role} " + (", ".join(f"{n} {name}" for name, n in tasks.items()) or "none")
                for role, tasks in r["peak_tasks"].items()))
        if "busy_s" in r:
            b = r["busy_s"]
            print(f"    no worker computing {r['wall_s'] - b['any_s']:.1f} s of the {r['wall_s']:.1f} s (client, scheduler, start, publication); "
                  f"some but not all {b['any_s'] - b['all_s']:.1f} s")
        if r.get("idle_gaps"):
            gaps = r["idle_gaps"]
            print(f"    between tasks, {sum(g['seconds'] for g in gaps):.1f} s in {len(gaps)} gaps of 1 s or more: " + "; ".join(
                f"{g['seconds']:.1f} s at {g['at_s']:.0f} s ({g['before']} -> {g['after']})" for g in gaps))
    print("\ntargets (ratios from sizes of this run)")
    print(targets_table(targets(rows)))
    if rows:
        found = projections(rows)
        print(f"\nprojection (a model, not a measurement: benchmarks.scale.project, from the runs of "
              f"{' and '.join(f'{n:,}' for n in found[0]['from_n_ref'])} fields; the serial part is an upper bound)")
        for p in found:
            print(f"  {p['n_ref']:>11,} fields on {p['workers']:>3} workers: {p['wall_s']:>8.0f} s "
                  f"(spread over workers {p['spread_s']:.0f} s, serial {p['serial_s']:.0f} s)")


def compile_kernels() -> float:
    """Compile the numba kernels into the checkout's cache before any size is measured; seconds.

    A worker that finds the cache empty compiles every kernel on its first tasks (about a
    minute each on this machine, docs/performance.md), a one-off cost of a new installation
    that ``make`` pays (:mod:`evalcore.distributed.warm`); the sizes are measured with the
    kernels loaded, whether or not the checkout had run ``make`` since its last kernel change.
    """
    started = time.perf_counter()
    subprocess.run([str(BIN / "python"), "-m", "evalcore.distributed.warm"], check=True, env=_env("warm", Path.cwd()),
                   stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    print(f"  kernels compiled or loaded in {seconds:.1f} s", file=sys.stderr, flush=True)
    return seconds


def machine_pace() -> dict:
    """The machine's pace now: a fixed GEOS + numpy job alone, then two at once in two
    processes (:func:`benchmarks.bench_cpu_ceiling.measure`; seconds and their ratio).

    The same work whatever evalcore's code: measured before the first size and after each,
    it tells how fast the machine was running at the time, for one process and for two
    (what the two workers get: on this VM two at once ran 1.42-1.79x one's throughput within
    minutes, 2026-12-07, against 1.76-2.03x in round 1), so that walls measured hours apart
    can be read against the machine's state, not only against each other.
    """
    from benchmarks.bench_cpu_ceiling import measure

    return measure()


def _pace_line(pace: Mapping) -> str:
    return f"one job alone {pace['alone_s']:.2f} s, two at once {pace['both_s']:.2f} s ({pace['ratio']:.2f}x)"


def run_sizes(sizes: Sequence[int], workers: int = 2, tmp: str | None = None, interval_s: float = 0.5, data: str | None = None,
              keep: bool = False, picture: bool = True) -> dict:
    """Measure every size (the smallest first); returns the record, also written to ``benchmarks/results/``."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_start": os.getloadavg(), "sizes": list(sizes), "rows": [],
    }
    out = RESULTS / f"scale-{'-'.join(str(n) for n in sizes)}-{stamp}.json"
    record["kernels_s"] = compile_kernels()
    record["pace_start"] = machine_pace()
    print(f"  machine pace: {_pace_line(record['pace_start'])}", file=sys.stderr, flush=True)
    for n in sorted(sizes):
        base = Path(tempfile.mkdtemp(prefix=f"evalcore-scale-{n}-", dir=tmp))
        try:
            print(f"  scale {n:,}: {base}", file=sys.stderr, flush=True)
            try:
                row = measure_size(n, base, stamp, workers, interval_s, Path(data) if data else None, picture)
            except SizeFailed as failed:
                # Written before stopping: its memory, phases, task costs and disk use until the failure.
                record.setdefault("failed", []).append(failed.row | {"load_average_end": os.getloadavg()})
                out.write_text(json.dumps(record, indent=2) + "\n")
                print(f"  scale {n:,}: failed; what was measured until then is in {out}", file=sys.stderr, flush=True)
                raise
            row["load_average_end"] = os.getloadavg()
            row["pace_after"] = machine_pace()
            record["rows"].append(row)
            print(f"  scale {n:,}: {row['wall_s']:.1f} s, client {row['client_mib']:,.0f} MiB; machine pace after it: {_pace_line(row['pace_after'])}",
                  file=sys.stderr, flush=True)
        finally:
            if not keep:
                shutil.rmtree(base, ignore_errors=True)
        record["targets"] = [dataclasses.asdict(t) | {"verdict": t.verdict} for t in targets(record["rows"])]
        record["projections"] = projections(record["rows"])
        out.write_text(json.dumps(record, indent=2) + "\n")  # after each size: a long study stopped midway keeps its sizes
    record["load_average_end"] = os.getloadavg()
    out.write_text(json.dumps(record, indent=2) + "\n")
    record["path"] = str(out)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="250000", help="comma-separated reference field counts (default 250000)")
    parser.add_argument("--workers", type=int, default=2, help="one-thread dask worker processes (default 2)")
    parser.add_argument("--tmp", help="directory for the data and the runs (default: the system's temporary directory; "
                        "the 10M data take several GiB)")
    parser.add_argument("--data", help="an existing evalcore synth directory to run on instead of generating one (one size)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between two /proc samples (default 0.5)")
    parser.add_argument("--keep", action="store_true", help="keep the data, the cluster's logs and the run directory")
    parser.add_argument("--no-picture", action="store_true", help="do not draw the task stream")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.data and len(sizes) != 1:
        parser.error("--data takes one size")
    record = run_sizes(sizes, args.workers, args.tmp, args.interval, args.data, args.keep, not args.no_picture)
    print_rows(record["rows"])
    print(f"\nresults written to {record['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
