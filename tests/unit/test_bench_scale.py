"""The pure parts of the scale benchmark (benchmarks/scale.py): /proc parsing, task costs, projection, targets.

The benchmark itself starts a cluster and runs for minutes; it is run by hand and in
``make bench`` (docs/performance.md), not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks import scale
from benchmarks.scale import (
    OTHER,
    PhaseCost,
    Sampler,
    busy_seconds,
    children_of,
    parse_stat_ppid,
    parse_status,
    phase_colours,
    phase_costs,
    phase_of,
    plot_task_stream,
    project,
    targets,
    targets_table,
    task_costs,
)

STATUS = """Name:\tpython
Umask:\t0022
State:\tS (sleeping)
Pid:\t4242
PPid:\t4200
VmPeak:\t 3154944 kB
VmSize:\t 3086336 kB
VmHWM:\t 1234567 kB
VmRSS:\t  987654 kB
RssAnon:\t  900000 kB
Threads:\t12
"""


def test_parse_status_reads_rss_and_hwm_in_kib():
    m = parse_status(STATUS)
    assert (m.rss_kib, m.hwm_kib) == (987_654, 1_234_567)


def test_parse_status_of_a_zombie_or_kernel_thread_is_zero():
    # A zombie's status has no Vm lines at all.
    assert parse_status("Name:\tpython\nState:\tZ (zombie)\nPid:\t7\n") == parse_status("")
    assert parse_status("").rss_kib == 0 and parse_status("").hwm_kib == 0


def test_parse_status_rejects_an_unknown_unit():
    with pytest.raises(ValueError, match="unknown unit"):
        parse_status("VmRSS:\t 12 parsecs\n")


def test_parse_stat_ppid_with_spaces_and_parentheses_in_the_name():
    assert parse_stat_ppid("4242 (python) S 4200 4242 4200 0 -1") == 4200
    assert parse_stat_ppid("4243 (dask worker (x) 1) R 17 4243 17 0 -1") == 17


def test_children_of_walks_the_whole_tree():
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert children_of(parents, 10) == [10, 11, 12, 13]
    assert children_of(parents, 21) == [21]
    assert children_of(parents, 99) == [99]  # ended: itself only, its status read fails later


def test_sampler_reads_this_process_from_proc():
    sampler = Sampler(0.05)
    sampler.watch("me", os.getpid())
    sampler.start()
    found = sampler.stop()["me"]
    # This process's own view of its peak, for comparison only.
    with open(f"/proc/{os.getpid()}/status") as f:
        hwm = parse_status(f.read()).hwm_kib / 1024
    assert 0 < found["peak_mib"] <= hwm + 1
    assert found["tree_peak_rss_mib"] > 0


def _record(key, start, stop, action="compute", worker="tcp://w0"):
    return {"key": key, "worker": worker, "startstops": ({"action": action, "start": start, "stop": stop},)}


def test_task_costs_by_phase_compute_only():
    stream = [
        _record("pairs-32612-11-77-abc", 0.0, 2.0),
        _record("pairs-32612-11-78-abc", 2.0, 5.0),
        {"key": "sums-32612-11-77-abc", "worker": "tcp://w1",
         "startstops": ({"action": "transfer", "start": 5.0, "stop": 6.0}, {"action": "compute", "start": 6.0, "stop": 6.5})},
        _record("select-5da8-1-32612-11-77-abc", 7.0, 7.25),
    ]
    costs = task_costs(stream)
    assert costs["pairs"] == {"tasks": 2, "task_s": 5.0, "max_task_s": 3.0, "mean_task_s": 2.5}
    assert costs["sums"]["task_s"] == 0.5  # the transfer is not the task's cost
    assert costs["select"]["tasks"] == 1


def test_projection_spreads_tasks_keeps_the_rest_serial():
    # 100 s of wall on 2 workers: 160 task-seconds (80 s of it spread), 20 s serial.
    phases = {"pairs": PhaseCost(wall_s=100.0, task_s=160.0, max_task_s=2.0)}
    same = project(phases, 1_000_000, 2, 1_000_000, 2)
    assert same["wall_s"] == pytest.approx(100.0)  # the measured run is reproduced
    p = project(phases, 1_000_000, 2, 16_000_000, 32)
    assert p["spread_s"] == pytest.approx(160.0 * 16 / 32)
    assert p["serial_s"] == pytest.approx(20.0 * 16)
    assert p["wall_s"] == pytest.approx(80.0 + 320.0)
    assert (p["n_ref"], p["workers"]) == (16_000_000, 32)


def test_projection_never_below_the_longest_task():
    phases = {"prepare": PhaseCost(wall_s=10.0, task_s=20.0, max_task_s=9.0)}
    p = project(phases, 100_000, 2, 200_000, 1000)
    assert p["phases_s"]["prepare"] == pytest.approx(9.0)  # 40 task-s over 1000 workers is less than one task


def test_projection_rejects_non_positive_sizes():
    with pytest.raises(ValueError):
        project({}, 0, 2, 1, 1)
    with pytest.raises(ValueError, match="smaller run"):
        project({}, 100, 2, 1000, 2, smaller=({}, 100))


def test_projection_of_one_size_keeps_the_time_outside_the_phases_fixed():
    phases = {"pairs": PhaseCost(100.0, 160.0, 2.0), OTHER: PhaseCost(30.0, 0.0, 0.0)}
    p = project(phases, 1_000_000, 2, 4_000_000, 2)
    assert p["phases_s"][OTHER] == pytest.approx(30.0)  # start and publication: not per field
    assert p["phases_s"]["pairs"] == pytest.approx(4 * 100.0)


def test_projection_from_two_sizes_fits_a_fixed_and_a_per_field_serial_part():
    # Serial rest: 25 s at 250k, 40 s at 1M -> 20 s + 20 s per million fields.
    small = {"resolve": PhaseCost(wall_s=25.0 + 5.0, task_s=10.0, max_task_s=1.0)}
    big = {"resolve": PhaseCost(wall_s=40.0 + 20.0, task_s=40.0, max_task_s=1.0)}
    again = project(big, 1_000_000, 2, 1_000_000, 2, smaller=(small, 250_000))
    assert again["wall_s"] == pytest.approx(60.0)
    p = project(big, 1_000_000, 2, 16_000_000, 32, smaller=(small, 250_000))
    assert p["serial_s"] == pytest.approx(20.0 + 20.0 * 16)
    assert p["spread_s"] == pytest.approx(40.0 * 16 / 32)
    # A serial part that shrank with the size (noise) is not extrapolated downwards.
    shrinking = project(small, 250_000, 2, 16_000_000, 2, smaller=({"resolve": PhaseCost(100.0, 0.0, 0.0)}, 100_000))
    assert shrinking["serial_s"] == pytest.approx(25.0)


def test_phase_costs_puts_the_rest_of_the_wall_in_other():
    row = {
        "wall_s": 50.0,
        "phases_s": {"prepare": 10.0, "pairs": 20.0},
        "tasks": {"prepare": {"task_s": 15.0, "max_task_s": 5.0}, "pairs": {"task_s": 30.0, "max_task_s": 4.0},
                  "predictions": {"task_s": 6.0, "max_task_s": 1.0}, "select": {"task_s": 2.0, "max_task_s": 0.5}},
    }
    costs = phase_costs(row)
    assert costs["prepare"] == PhaseCost(10.0, 15.0, 5.0)
    assert costs[OTHER] == PhaseCost(20.0, 8.0, 1.0)


def test_phase_costs_counts_the_resolve_steps_on_the_workers_in_the_resolve():
    row = {
        "wall_s": 40.0,
        "phases_s": {"resolve": 30.0},
        "tasks": {"components": {"task_s": 4.0, "max_task_s": 1.0}, "seams": {"task_s": 1.0, "max_task_s": 0.25},
                  "resolve": {"task_s": 10.0, "max_task_s": 2.0}, "score": {"task_s": 6.0, "max_task_s": 3.0},
                  "sums": {"task_s": 5.0, "max_task_s": 0.5}},
    }
    costs = phase_costs(row)
    assert costs["resolve"] == PhaseCost(30.0, 21.0, 3.0)
    assert costs[OTHER] == PhaseCost(10.0, 5.0, 0.5)  # no sums phase measured: its tasks are the rest's


def test_score_tasks_keep_their_step_and_count_in_the_resolve():
    assert phase_of("pairs-32612-11-77-0a1b") == "pairs"
    assert phase_of("score-weights-32612-11-77-0a1b") == "score-weights"
    assert phase_of("score-replicates-0a1b") == "score-replicates"
    assert phase_of("score") == "score"
    row = {"wall_s": 12.0, "phases_s": {"resolve": 10.0},
           "tasks": {"score-weights": {"task_s": 4.0, "max_task_s": 1.0}, "score-range": {"task_s": 2.0, "max_task_s": 1.5},
                     "select": {"task_s": 0.5, "max_task_s": 0.25}}}
    costs = phase_costs(row)
    assert costs["resolve"] == PhaseCost(10.0, 6.0, 1.5)
    assert costs[OTHER] == PhaseCost(2.0, 0.5, 0.25)


def test_no_phase_gets_the_transfers_grey():
    grey, light = (0.5, 0.5, 0.5), (0.78, 0.78, 0.78)
    palette = [(0.1, 0.2, 0.3), grey, (0.3, 0.2, 0.1), light]
    colours = phase_colours(["a", "b", "c", "d"], palette)
    assert colours == {"a": (0.1, 0.2, 0.3), "b": (0.3, 0.2, 0.1), "c": (0.1, 0.2, 0.3), "d": (0.3, 0.2, 0.1)}


def test_task_stream_picture_with_more_phases_than_ten_colours(tmp_path):
    pytest.importorskip("matplotlib")
    prefixes = ["prepare", "pairs", "components", "seams", "group-draws", "resolve", "homeless", "score-split", "score-range",
                "score-values", "sums", "select", "predictions"]
    stream = [{"key": f"{p}-{k}", "worker": f"tcp://w{k % 2}",
               "startstops": [{"action": "compute", "start": 10.0 + i + k / 4, "stop": 10.2 + i + k / 4}]}
              for i, p in enumerate(prefixes) for k in range(2)]
    path = plot_task_stream(stream, tmp_path / "stream.png", "13 phases")
    assert path == tmp_path / "stream.png" and path.stat().st_size > 1000


def _row(n, wall, client=1000.0, workers=(1500.0, 1600.0), synth=800.0):
    return {"n_ref": n, "wall_s": wall, "client_mib": client, "worker_mib": list(workers), "synth_mib": synth}


def test_targets_all_sizes():
    rows = [_row(250_000, 40.0, 1000.0), _row(1_000_000, 80.0), _row(2_000_000, 300.0, 1090.0, synth=1900.0),
            _row(4_000_000, 400.0, 1200.0, workers=(1800.0, 2100.0))]
    found = {t.name: t for t in targets(rows)}
    assert found["2M fields, wall"].passed and found["2M fields, wall"].measured == 300.0
    assert found["time(2M) / time(250k)"].measured == pytest.approx(7.5) and found["time(2M) / time(250k)"].passed
    assert found["time(4M) / time(1M)"].measured == pytest.approx(5.0) and found["time(4M) / time(1M)"].passed is False
    assert found["client peak 2M / client peak 250k"].passed
    assert found["client peak 4M / client peak 250k"].measured == pytest.approx(1.2) and not found["client peak 4M / client peak 250k"].passed
    assert found["client peak 4M, MiB"].passed  # 1200 MiB <= 1.2 GiB
    assert found["each worker, any size, MiB"].measured == 2100.0 and found["each worker, any size, MiB"].verdict == "FAIL"
    assert found["synth of 2M, MiB"].verdict == "PASS"


def test_targets_of_sizes_not_run_are_not_measured():
    found = {t.name: t for t in targets([_row(20_000, 30.0)])}
    assert found["2M fields, wall"].passed is None and found["2M fields, wall"].verdict == "not measured"
    assert found["time(2M) / time(250k)"].measured is None
    assert found["each worker, any size, MiB"].verdict == "PASS"
    table = targets_table(list(found.values()))
    assert "not measured" in table and "PASS" in table and table.count("\n") == len(found)


def test_busy_seconds_any_and_all_workers():
    stream = [
        _record("pairs-a", 0.0, 4.0, worker="w0"),
        _record("pairs-b", 1.0, 3.0, worker="w1"),
        _record("sums-a", 6.0, 7.0, worker="w1"),
        {"key": "sums-b", "worker": "w0", "startstops": ({"action": "transfer", "start": 7.0, "stop": 9.0},)},
    ]
    assert busy_seconds(stream, 2) == {"any_s": 5.0, "all_s": 2.0}
    assert busy_seconds([], 2) == {"any_s": 0.0, "all_s": 0.0}


def test_idle_gaps_are_the_stretches_without_a_computing_worker():
    stream = [
        _record("pairs-a", 10.0, 14.0, worker="w0"),
        _record("pairs-b", 11.0, 12.0, worker="w1"),   # ends inside pairs-a: no gap after it
        _record("components-a", 15.5, 16.0, worker="w1"),  # 1.5 s after pairs-a
        _record("sums-a", 16.5, 17.0, worker="w0"),  # 0.5 s: under the 1 s kept
        _record("score-values-3", 20.0, 21.0, worker="w0"),
        {"key": "select-x", "worker": "w1", "startstops": ({"action": "transfer", "start": 17.0, "stop": 19.5},)},
    ]
    assert scale.idle_gaps(stream) == [
        {"at_s": 4.0, "seconds": 1.5, "before": "pairs", "after": "components"},
        {"at_s": 7.0, "seconds": 3.0, "before": "sums", "after": "score-values"},
    ]
    assert scale.idle_gaps(stream, min_s=0.4)[1] == {"at_s": 6.0, "seconds": 0.5, "before": "components", "after": "sums"}
    assert scale.idle_gaps([]) == []


def test_disk_mib_counts_allocated_blocks_per_entry(tmp_path):
    (tmp_path / "work" / "sums").mkdir(parents=True)
    (tmp_path / "work" / "sums" / "a.npz").write_bytes(b"x" * 3 * 2**20)
    (tmp_path / "work" / "pairs.npz").write_bytes(b"y" * 2**20)
    (tmp_path / "metrics.json").write_bytes(b"{}")
    sizes = scale.disk_mib(tmp_path)
    assert sizes["work"] >= 4.0 and sizes["work"] < 4.1  # allocated blocks: whole 4 KiB pages at most above the bytes
    assert sizes["metrics.json"] < 0.01
    assert sizes["total"] == sum(v for k, v in sizes.items() if k != "total")
    assert scale.disk_mib(tmp_path / "absent") == {}


def test_phases_logged_reads_the_phase_lines_of_a_failed_run(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("Dask dashboard: http://127.0.0.1:45911/status\nprepare     699 chunks in 1316.4 s\n"
                   "pairs       1258 partitions in 1061.7 s\nevalcore: error: RuntimeError: sums failed for partition 32611_14_74\n")
    assert scale.phases_logged(log) == {"prepare": 1316.4, "pairs": 1061.7}
    assert scale.phases_logged(tmp_path / "absent.log") == {}


def test_a_failed_size_is_written_with_what_was_measured_before_it_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(scale, "RESULTS", tmp_path / "results")

    def failing(n_ref, base, *args):
        raise scale.SizeFailed("evalcore run at 10 fields failed (exit 1)", {"n_ref": n_ref, "phases_s": {"prepare": 1.5}, "client_mib": 900.0})

    monkeypatch.setattr(scale, "measure_size", failing)
    monkeypatch.setattr(scale, "compile_kernels", lambda: 0.0)
    pace = {"alone_s": 2.0, "both_s": 2.5, "each_s": [2.4, 2.5], "ratio": 1.6}
    monkeypatch.setattr(scale, "machine_pace", lambda: pace)
    with pytest.raises(scale.SizeFailed, match="failed"):
        scale.run_sizes([10], tmp=str(tmp_path))
    (written,) = (tmp_path / "results").glob("scale-10-*.json")
    record = json.loads(written.read_text())
    assert record["rows"] == []
    assert record["failed"][0]["phases_s"] == {"prepare": 1.5} and record["failed"][0]["client_mib"] == 900.0
    assert "load_average_end" in record["failed"][0]
    assert record["pace_start"] == pace


def test_sampler_keeps_the_first_and_the_lowest_free_space_of_the_disk_path(tmp_path, monkeypatch):
    free = iter([100, 70, 90])
    monkeypatch.setattr(scale.shutil, "disk_usage", lambda path: type("Usage", (), {"free": next(free)}))
    sampler = Sampler(0.05, disk_path=tmp_path)
    sampler.watch("me", os.getpid())  # the first sample
    sampler.sample()
    sampler.sample()
    assert (sampler.disk_free_start, sampler.disk_free_min) == (100, 70)


def test_sampler_times_the_peak_and_the_phase_lines_of_the_log(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("Dask dashboard: http://127.0.0.1:1/status\nprepare     17 chunks in 19.8 s\npairs       34 partit")
    sampler = Sampler(0.05, timeline_s=0.0, log=log)
    sampler.watch("me", os.getpid())
    assert sampler.phases_at_s == {"prepare": 0.0}  # the unfinished line is not read yet
    time.sleep(0.2)
    with open(log, "a") as out:
        out.write("ions in 17.7 s\n")
    sampler.sample()
    assert set(sampler.phases_at_s) == {"prepare", "pairs"} and sampler.phases_at_s["pairs"] >= 0.2
    assert sampler.peak_at_s["me"] in (0.0, sampler.timeline[-1][0])  # set by the first sample, or raised by the last
    assert len(sampler.timeline) == 2 and sampler.timeline[0][1]["me"] > 0


def test_sampler_gives_the_window_of_each_peak_and_the_epoch_of_its_start():
    # A child whose memory grows by 128 MiB after 0.4 s (this process's own high-water mark
    # may already be above anything it would allocate here); it says when it has grown.
    grow = ("import sys, time; time.sleep(0.4); b = bytearray(128 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
            "print('grown', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", grow], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        before = time.time()
        sampler = Sampler(0.05)
        sampler.watch("child", child.pid)
        sampler.start()
        assert child.stdout.readline().strip() == "grown"
        time.sleep(0.3)
        found = sampler.stop()["child"]
    finally:
        child.communicate("")
    lo, hi = found["peak_window_s"]
    assert before <= sampler.t0_epoch <= before + 0.5
    assert found["peak_mib"] >= 128
    # Raised by a sample after the growth: the window runs from the sample before it.
    assert 0.3 <= hi and lo < hi and hi - lo < 1.0 and abs(found["peak_at_s"] - hi) <= 0.05


def test_tasks_at_counts_the_tasks_one_worker_computed_in_a_window():
    stream = [
        _record("homeless-abc", 10.0, 20.0, worker="tcp://w1"),
        _record("score-range-3-abc", 19.5, 25.0, worker="tcp://w1"),
        _record("score-range-4-abc", 12.0, 18.0, worker="tcp://w0"),  # another worker
        _record("sums-32631-1-2-abc", 21.0, 22.0, worker="tcp://w1"),  # after the window
        _record("pairs-32631-1-2-abc", 8.0, 9.0, worker="tcp://w1"),  # before it
        _record("resolve-32631-1-2-abc", 14.0, 16.0, action="transfer", worker="tcp://w1"),  # not computing
    ]
    assert scale.tasks_at(stream, "tcp://w1", 15.0, 20.0) == {"homeless": 1, "score-range": 1}
    assert scale.tasks_at(stream, "tcp://w0", 15.0, 20.0) == {"score-range": 1}
    assert scale.tasks_at(stream, "tcp://w1", 30.0, 31.0) == {}


def test_phase_at_names_the_lines_around_a_time():
    lines = {"prepare": 20.0, "pairs": 40.0, "sums": 90.0}
    assert scale.phase_at(5.0, lines) == "before the prepare line"
    assert scale.phase_at(20.0, lines) == "before the prepare line"
    # The resolve prints no line: a time after pairs' line is not called the sums.
    assert scale.phase_at(41.0, lines) == "between the pairs and sums lines"
    assert scale.phase_at(95.0, lines) == "after the sums line"
    assert scale.phase_at(95.0, {}) == "before any phase line"
    assert scale.phase_at(None, lines) is None
