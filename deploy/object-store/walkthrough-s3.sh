#!/usr/bin/env bash
# The S3 walkthrough of docs/national-run.md ("Object storage: a walkthrough"), command
# for command. tests/storage/test_walkthrough.py runs this script against a local S3
# server (moto on 127.0.0.1); against AWS S3, MinIO or another S3-compatible store it
# runs unchanged.
#
# The store comes from the standard variables only, which the client and every worker
# read from their own environment:
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION
#   AWS_ENDPOINT_URL            only for an S3-compatible store (MinIO, a local server)
# and from this script's own variables:
#   BUCKET                      an existing bucket you may write in
#   PREFIX                      where under it (default evalcore-walkthrough)
#   N_REF                       reference fields of the example layers (default 2000)
set -euo pipefail
: "${BUCKET:?set BUCKET to an existing bucket}"
PREFIX=${PREFIX:-evalcore-walkthrough}
N_REF=${N_REF:-2000}
STORE="s3://$BUCKET/$PREFIX"
HERE=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$HERE"' EXIT

# 1. Example layers, put on the store (aws s3 cp --recursive does the same).
evalcore synth --n-ref "$N_REF" --seed 1 --out "$HERE/layers"
python - "$HERE/layers" "$STORE/in" <<'PY'
import sys, fsspec
local, url = sys.argv[1], sys.argv[2]
fs = fsspec.filesystem("s3")
for name in ("predicted.parquet", "reference.parquet", "aoi.parquet"):
    fs.put_file(f"{local}/{name}", f"{url[5:]}/{name}")
PY

# 2. A scheduler and two workers, each in a directory of its own: no file system is
#    shared with the client; each worker has the store's variables in its environment.
PORT=${PORT:-$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
for role in scheduler w0 w1; do mkdir -p "$HERE/$role/tmp"; done
(cd "$HERE/scheduler" && exec dask scheduler --host 127.0.0.1 --port "$PORT" --dashboard-address 127.0.0.1:0) 2>"$HERE/scheduler.log" &
for w in w0 w1; do
  (cd "$HERE/$w" && TMPDIR="$HERE/$w/tmp" exec dask worker "tcp://127.0.0.1:$PORT" --nthreads 1 --name "$w" --host 127.0.0.1) 2>"$HERE/$w.log" &
done
python -c "from distributed import Client; Client('tcp://127.0.0.1:$PORT', timeout='60s').wait_for_workers(2, timeout=120)"

# 3. The run: inputs, work directory (RUN_DIR/work, removed after success) and run
#    directory on the store.
evalcore run -p "$STORE/in/predicted.parquet" -r "$STORE/in/reference.parquet" \
  --aoi "$STORE/in/aoi.parquet" --aoi-id-column aoi_id --score-column score \
  --cluster "tcp://127.0.0.1:$PORT" -o "$STORE/runs/r1"

# 4. The evidence, rechecked on the store (inputs rehashed there).
evalcore verify "$STORE/runs/r1"
