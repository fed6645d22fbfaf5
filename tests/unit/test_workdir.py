"""evalcore.distributed.workdir: which object a work-directory path names, in any process."""

from __future__ import annotations

import os
from pathlib import Path

from evalcore.distributed import workdir as wd


def test_a_local_work_directory_is_used_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "work" / "pairs" / "1_2_3.done.json"
    assert wd.root(tmp_path / "work") == tmp_path / "work"
    assert wd.local(path) == path and wd.fetch(path) == path and wd.publish(path) == path
    assert wd.url_of(path) is None and not wd.is_remote(path)
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    wd.discard(tmp_path / "work")  # nothing of a local work directory is removed
    assert path.read_text() == "{}"


def test_a_url_is_used_through_this_processs_mirror(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALCORE_SCRATCH", str(tmp_path))
    root = wd.root("s3a://bucket//runs/work/")
    assert root == tmp_path / f"evalcore-store-{os.getpid()}" / "s3%3A%2F%2Fbucket%2Fruns%2Fwork"
    assert wd.url_of(root) == "s3://bucket/runs/work"
    assert wd.url_of(root / "pairs" / "1_2_3.pairs.parquet") == "s3://bucket/runs/work/pairs/1_2_3.pairs.parquet"
    assert wd.is_remote(root / "sums")


def test_another_processs_mirror_path_names_the_same_object_here(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALCORE_SCRATCH", str(tmp_path / "mine"))
    theirs = "/elsewhere/tmp/evalcore-store-4242/gs%3A%2F%2Fb%2Fw/resolve/by-1_2_3/to-1_2_4.npz"
    assert wd.url_of(theirs) == "gs://b/w/resolve/by-1_2_3/to-1_2_4.npz"
    assert wd.local(theirs) == tmp_path / "mine" / f"evalcore-store-{os.getpid()}" / "gs%3A%2F%2Fb%2Fw" / "resolve/by-1_2_3/to-1_2_4.npz"
    assert wd.local(Path(theirs)) == wd.local(theirs)


def test_discard_removes_only_this_processs_mirror(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALCORE_SCRATCH", str(tmp_path))
    root = wd.root("s3://bucket/work")
    (root / "pairs").mkdir(parents=True)
    (root / "pairs" / "x.parquet").write_bytes(b"1")
    other = tmp_path / "evalcore-store-1" / "keep"
    other.mkdir(parents=True)
    wd.discard("s3://bucket/work")
    assert not root.exists() and not root.parent.exists() and other.is_dir()


def test_remove_files_removes_the_matching_files_of_the_directory_only(tmp_path: Path) -> None:
    scores = tmp_path / "resolve" / "scores"
    (scores / "sub").mkdir(parents=True)
    for name in ("split-a-0.npz", "weights-a-1.npz", "range-0.npz", "pr-0-0.parquet", "sub/split-b-0.npz"):
        (scores / name).write_bytes(b"x")
    wd.remove_files(scores, "split-*.npz", "weights-*.npz")
    assert sorted(p.relative_to(scores).as_posix() for p in scores.rglob("*") if p.is_file()) == [
        "pr-0-0.parquet", "range-0.npz", "sub/split-b-0.npz"]
    wd.remove_files(tmp_path / "absent", "*.npz")  # nothing there: nothing to do
