#!/usr/bin/env bash
# Start the local evalcore stack on loopback: Prefect server, Dask scheduler,
# N Dask workers and a Prefect process worker. Each service runs in its own session
# with a pid file and a log in the state directory; the script returns once every
# service answers. Safe to run twice: services already running are left alone.
#
# Usage: deploy/local/start.sh [--workers N] [--dask-only] [--no-prefect-worker]
#
#   --workers N          Dask worker processes (default $EVALCORE_DASK_WORKERS or 2)
#   --dask-only          only the Dask scheduler and workers (no Prefect server/worker)
#   --no-prefect-worker  Prefect server and Dask, but no Prefect worker
#
# Settings come from the environment (see env.sh and README.md). Stop with stop.sh.
# shellcheck disable=SC2317  # functions called through trap, until and wait_for
set -euo pipefail

with_prefect=${EVALCORE_WITH_PREFECT:-1}
with_prefect_worker=${EVALCORE_WITH_PREFECT_WORKER:-1}
while (($#)); do
    case $1 in
        --workers)
            [[ $# -ge 2 ]] || { echo "--workers needs a number" >&2; exit 2; }
            EVALCORE_DASK_WORKERS=$2
            shift 2
            ;;
        --workers=*) EVALCORE_DASK_WORKERS=${1#*=}; shift ;;
        --dask-only) with_prefect=0; with_prefect_worker=0; shift ;;
        --no-prefect-worker) with_prefect_worker=0; shift ;;
        -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
done
((with_prefect)) || with_prefect_worker=0

# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

[[ $EVALCORE_DASK_WORKERS =~ ^[1-9][0-9]*$ ]] \
    || die "EVALCORE_DASK_WORKERS must be a positive integer, got '$EVALCORE_DASK_WORKERS'"
for tool in dask python; do
    [[ -x $EVALCORE_BIN/$tool ]] || die "$EVALCORE_BIN/$tool not found; set EVALCORE_BIN to the bin directory of the environment where evalcore is installed (e.g. make test creates .venv)"
done
if ((with_prefect)); then
    [[ -x $EVALCORE_BIN/prefect ]] || die "$EVALCORE_BIN/prefect not found; set EVALCORE_BIN"
fi
mkdir -p "$EVALCORE_STATE_DIR"
((with_prefect)) && mkdir -p "$EVALCORE_PREFECT_HOME"

started=()
cleanup_on_failure() {
    local status=$?
    trap - EXIT
    if ((status != 0 && ${#started[@]})); then
        log "start failed; stopping the services this run started"
        local i
        for ((i = ${#started[@]} - 1; i >= 0; i--)); do
            stop_services "${started[i]}" || true
        done
    fi
    exit "$status"
}
trap cleanup_on_failure EXIT

fail_with_log() {  # name message
    log "$2"
    log "last lines of $(log_file "$1"):"
    tail -n 25 "$(log_file "$1")" >&2 || true
    exit 1
}

# launch NAME PORT... -- COMMAND...: start COMMAND unless NAME is already running.
# Returns 1 (without starting anything) when NAME was already running.
launch() {
    local name=$1 port pid
    shift
    if pid=$(running_pid "$name"); then
        log "$name already running (pid $pid)"
        return 1
    fi
    rm -f "$(pid_file "$name")"
    while [[ $1 != -- ]]; do
        port=$1
        shift
        if port_in_use "$EVALCORE_HOST" "$port"; then
            die "$name: port $EVALCORE_HOST:$port is already in use by another program; choose another one (see README.md for the port variables)"
        fi
    done
    shift
    # setsid: a session and process group of its own, so terminal signals do not
    # reach it and stop.sh can find the service's children by process group.
    if command -v setsid >/dev/null 2>&1; then
        setsid "$@" >>"$(log_file "$name")" 2>&1 </dev/null &
    else
        nohup "$@" >>"$(log_file "$name")" 2>&1 </dev/null &
    fi
    pid=$!
    echo "$pid" >"$(pid_file "$name")"
    started+=("$name")
    log "started $name (pid $pid, log $(log_file "$name"))"
}

# wait_for NAME WHAT COMMAND...: poll COMMAND until it succeeds, the service dies,
# or EVALCORE_START_TIMEOUT passes.
wait_for() {
    local name=$1 what=$2 deadline=$((SECONDS + EVALCORE_START_TIMEOUT))
    shift 2
    until "$@"; do
        running_pid "$name" >/dev/null || fail_with_log "$name" "$name exited before $what"
        ((SECONDS < deadline)) || fail_with_log "$name" "$name: no $what after ${EVALCORE_START_TIMEOUT}s"
        sleep 0.5
    done
    log "$name: $what"
}

n_workers_connected() {
    http_get "$DASK_DASHBOARD/json/counts.json" \
        | "$EVALCORE_BIN/python" -c 'import json, sys; print(json.load(sys.stdin)["workers"])' 2>/dev/null \
        || echo 0
}
workers_ready() {
    local i
    for ((i = 1; i <= EVALCORE_DASK_WORKERS; i++)); do
        running_pid "dask-worker-$i" >/dev/null \
            || fail_with_log "dask-worker-$i" "dask-worker-$i exited before connecting to the scheduler"
    done
    (($(n_workers_connected) >= EVALCORE_DASK_WORKERS))
}

prefect_env=(
    "PREFECT_HOME=$EVALCORE_PREFECT_HOME"
    "PREFECT_API_URL=$PREFECT_URL/api"
    "PREFECT_SERVER_ANALYTICS_ENABLED=false"
    "EVALCORE_ROOT=$EVALCORE_ROOT"
)
if [[ -n $EVALCORE_PREFECT_AUTH_STRING ]]; then
    prefect_env+=(
        "PREFECT_SERVER_API_AUTH_STRING=$EVALCORE_PREFECT_AUTH_STRING"
        "PREFECT_API_AUTH_STRING=$EVALCORE_PREFECT_AUTH_STRING"
    )
fi

# 1. Prefect server (API and UI). Its first start creates the database (~20 s), so
#    the Dask services start meanwhile and it is waited for afterwards.
server_started=0
if ((with_prefect)); then
    if launch prefect-server "$EVALCORE_PREFECT_PORT" -- env "${prefect_env[@]}" \
        "$EVALCORE_BIN/prefect" server start --host "$EVALCORE_HOST" --port "$EVALCORE_PREFECT_PORT" --analytics-off; then
        server_started=1
    fi
fi

# 2. Dask scheduler (comm port and dashboard, which also serves /metrics); one coarse
#    evalcore task per worker thread at a time (docs/operations.md).
export DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="${DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION:-1.0}"
if launch dask-scheduler "$EVALCORE_DASK_PORT" "$EVALCORE_DASK_DASHBOARD_PORT" -- \
    "$EVALCORE_BIN/dask" scheduler --host "$EVALCORE_HOST" --port "$EVALCORE_DASK_PORT" \
    --dashboard-address "$EVALCORE_HOST:$EVALCORE_DASK_DASHBOARD_PORT"; then
    wait_for dask-scheduler "dashboard answering at $DASK_DASHBOARD/health" http_ok "$DASK_DASHBOARD/health"
fi

# 3. Dask workers: one process each, one thread each (the engine's kernels are
#    single-threaded; parallelism comes from processes).
for ((i = 1; i <= EVALCORE_DASK_WORKERS; i++)); do
    launch "dask-worker-$i" -- "$EVALCORE_BIN/dask" worker "$DASK_ADDRESS" \
        --host "$EVALCORE_HOST" --dashboard-address "$EVALCORE_HOST:0" \
        --nthreads "$EVALCORE_DASK_THREADS" --nworkers 1 --memory-limit "$EVALCORE_DASK_MEMORY_LIMIT" \
        --name "local-worker-$i" --local-directory "$EVALCORE_STATE_DIR/dask-worker-space" \
        --preload evalcore.distributed.warm || true
done
wait_for dask-scheduler "$EVALCORE_DASK_WORKERS worker(s) connected" workers_ready

if ((server_started)); then
    wait_for prefect-server "API answering at $PREFECT_URL/api/health" \
        http_ok "$PREFECT_URL/api/health" "$EVALCORE_PREFECT_AUTH_STRING"
fi

# 4. Prefect worker polling the process work pool (created if missing).
if ((with_prefect_worker)); then
    if launch prefect-worker "$EVALCORE_PREFECT_WORKER_HEALTH_PORT" -- env "${prefect_env[@]}" \
        "PREFECT_WORKER_WEBSERVER_HOST=$EVALCORE_HOST" \
        "PREFECT_WORKER_WEBSERVER_PORT=$EVALCORE_PREFECT_WORKER_HEALTH_PORT" \
        ${EVALCORE_WORKER_QUERY_SECONDS:+"PREFECT_WORKER_QUERY_SECONDS=$EVALCORE_WORKER_QUERY_SECONDS"} \
        "$EVALCORE_BIN/prefect" worker start --pool "$EVALCORE_WORK_POOL" --type process \
        --name "evalcore-local-${HOSTNAME:-local}" --with-healthcheck; then
        wait_for prefect-worker "health check answering at http://$EVALCORE_HOST:$EVALCORE_PREFECT_WORKER_HEALTH_PORT/health" \
            http_ok "http://$EVALCORE_HOST:$EVALCORE_PREFECT_WORKER_HEALTH_PORT/health"
    fi
    # The health check answers before the worker has created its pool: wait for the pool.
    wait_for prefect-worker "work pool $EVALCORE_WORK_POOL exists" \
        http_ok "$PREFECT_URL/api/work_pools/$EVALCORE_WORK_POOL" "$EVALCORE_PREFECT_AUTH_STRING"
fi

# Connection details for people and scripts: `source "$EVALCORE_STATE_DIR/stack.env"`.
{
    echo "# written by deploy/local/start.sh at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    ((with_prefect)) && echo "export PREFECT_API_URL=$PREFECT_URL/api"
    echo "export DASK_SCHEDULER_ADDRESS=$DASK_ADDRESS"
    echo "export EVALCORE_DASK_DASHBOARD=$DASK_DASHBOARD"
} >"$EVALCORE_STATE_DIR/stack.env"

trap - EXIT
echo
((with_prefect)) && echo "Prefect UI:             $PREFECT_URL   (API: $PREFECT_URL/api)"
echo "Dask scheduler address: $DASK_ADDRESS"
echo "Dask dashboard:         $DASK_DASHBOARD/status   (Prometheus: $DASK_DASHBOARD/metrics)"
((with_prefect_worker)) && echo "Prefect worker:         pool $EVALCORE_WORK_POOL, log $(log_file prefect-worker)"
echo "State directory:        $EVALCORE_STATE_DIR   (stop with deploy/local/stop.sh)"
echo
echo "Run an evaluation on this cluster:  EvaluateParams(..., cluster=\"$DASK_ADDRESS\")"
exit 0
