"""The run directory's lock alone (tests/reliability/test_nothing_lost.py runs it through two
``evalcore run`` processes in make slow): one holder at a time, a refusal naming the holder,
released on release. ``flock`` locks belong to an open file, so two locks taken in this
process on the same directory conflict as two processes' would."""

from __future__ import annotations

import json
import os

import pytest

from evalcore.errors import EvalInputError
from evalcore.outputs import RunDirectoryLock


def test_a_second_claim_is_refused_naming_the_directory_and_the_holder(tmp_path):
    run_dir = tmp_path / "run"
    with RunDirectoryLock(run_dir) as first:
        holder = json.loads(first.path.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] and holder["started"]
        with pytest.raises(EvalInputError) as refused:
            RunDirectoryLock(run_dir).acquire()
        message = str(refused.value)
        assert message.count("\n") == 0
        assert f"-o/--output-dir {str(run_dir)!r} is in use by another evalcore run" in message
        assert f"process {os.getpid()} on {holder['host']}, started {holder['started']}" in message
    # Released: the next run claims it and records itself.
    with RunDirectoryLock(run_dir, option="--workdir") as again:
        assert json.loads(again.path.read_text())["pid"] == os.getpid()


def test_a_lock_file_without_a_holder_says_so(tmp_path):
    run_dir = tmp_path / "run"
    with RunDirectoryLock(run_dir) as first:
        first.path.write_text("")  # emptied while held (an older evalcore's file, a hand edit)
        with pytest.raises(EvalInputError, match=r"in use by another evalcore run \(holder unknown\)"):
            RunDirectoryLock(run_dir).acquire()
