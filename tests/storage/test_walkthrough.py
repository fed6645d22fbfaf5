"""The S3 walkthrough of docs/national-run.md, run as written (deploy/object-store/walkthrough-s3.sh)
against the local S3 server (moto on 127.0.0.1, tests/storage/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(900), pytest.mark.cli, pytest.mark.cluster, pytest.mark.prefect]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "object-store" / "walkthrough-s3.sh"


# The walkthrough repeats what test_remote_workdir checks with a whole `evalcore run` (about 45 s):
# make slow.
@pytest.mark.slow
def test_the_s3_walkthrough_runs_as_written(tmp_path: Path, s3_store, prefect_server: str) -> None:
    env = s3_store.env(BUCKET=s3_store.bucket, PREFIX="walkthrough", N_REF="400", TMPDIR=str(tmp_path), PREFECT_API_URL=prefect_server,
                       PYTHONPATH=str(ROOT), PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    result = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    assert "intact" in result.stdout, result.stdout[-3000:]
    fs = s3_store.fs()
    status = json.loads(fs.cat_file(f"{s3_store.bucket}/walkthrough/runs/r1/status.json"))
    assert status["status"] == "succeeded"
    assert not fs.find(f"{s3_store.bucket}/walkthrough/runs/r1/work")  # the work directory went after the success
    # The script's scratch directory is gone, and the client's copy of the store work directory with it.
    assert [p.name for p in tmp_path.iterdir() if p.name != "dask-scratch-space"] == []
