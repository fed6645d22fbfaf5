#!/usr/bin/env bash
# Helper measurement of issue 30 (not run by the tests): evalcore run with its layers, work directory and
# run directory on a local moto S3 server against the same run on local disk, a scheduler and two workers
# in directories of their own. N=50000 bash deploy/object-store/measure-s3.sh (prints both wall times).
set -euo pipefail
N=${N:-50000}
B=${B:-/tmp/evalcore-s3-bench}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf $B; mkdir -p $B
cd "$ROOT"
export PYTHONPATH=$PWD
PY=$ROOT/.venv/bin/python
EV=$ROOT/.venv/bin/evalcore
MOTO_PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DPORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret AWS_DEFAULT_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$MOTO_PORT AWS_EC2_METADATA_DISABLED=true
( cd $B && exec $ROOT/.venv/bin/moto_server -H 127.0.0.1 -p $MOTO_PORT ) > $B/moto.log 2>&1 &
MOTO=$!
trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT
for i in $(seq 60); do curl -s http://127.0.0.1:$MOTO_PORT >/dev/null && break; sleep 1; done
$PY -c "import boto3; boto3.client('s3').create_bucket(Bucket='bench')"
/usr/bin/time -f "synth %e s" $EV synth --n-ref $N --seed 3 --out $B/layers
$PY - <<PY
import fsspec
fs = fsspec.filesystem("s3")
for n in ("predicted.parquet", "reference.parquet", "aoi.parquet"):
    import os
    p = "$B/layers/" + n
    if os.path.isdir(p):
        fs.put(p, "bench/in/" + n, recursive=True)
    else:
        fs.put_file(p, "bench/in/" + n)
print("uploaded")
PY
mkdir -p $B/sched $B/w0/tmp $B/w1/tmp $B/client
( cd $B/sched && exec $ROOT/.venv/bin/dask scheduler --host 127.0.0.1 --port $DPORT --dashboard-address 127.0.0.1:0 ) > $B/sched.log 2>&1 &
for w in w0 w1; do ( cd $B/$w && TMPDIR=$B/$w/tmp exec $ROOT/.venv/bin/dask worker tcp://127.0.0.1:$DPORT --nthreads 1 --name $w --host 127.0.0.1 ) > $B/$w.log 2>&1 & done
$PY -c "from distributed import Client; Client('tcp://127.0.0.1:$DPORT', timeout='60s').wait_for_workers(2, timeout=120)"
COMMON="--aoi-id-column aoi_id --score-column score --cluster tcp://127.0.0.1:$DPORT"
uptime
cd $B/client
S=$(date +%s.%N); $EV run -p $B/layers/predicted.parquet -r $B/layers/reference.parquet --aoi $B/layers/aoi.parquet $COMMON -o $B/run-local > $B/local.out 2>&1; E=$(date +%s.%N)
echo "local disk run: $(echo "$E - $S" | bc) s"; uptime
S=$(date +%s.%N); $EV run -p s3://bench/in/predicted.parquet -r s3://bench/in/reference.parquet --aoi s3://bench/in/aoi.parquet $COMMON -o s3://bench/runs/r1 > $B/store.out 2>&1; E=$(date +%s.%N)
echo "store run: $(echo "$E - $S" | bc) s"; uptime
$PY - <<PY
import json, fsspec
fs = fsspec.filesystem("s3")
a = json.loads(open("$B/run-local/metrics.json").read()); b = json.loads(fs.cat_file("bench/runs/r1/metrics.json"))
print("metrics equal:", a == b, "count_reference", a.get("count_reference"))
PY
