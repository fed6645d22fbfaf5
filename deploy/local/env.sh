# shellcheck shell=bash
# Settings and helpers shared by start.sh and stop.sh. Sourced, never executed.
#
# Every setting can be overridden from the environment; README.md lists them.

EVALCORE_ROOT=${EVALCORE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
EVALCORE_STATE_DIR=${EVALCORE_STATE_DIR:-$EVALCORE_ROOT/deploy/local/.state}
if [[ -z ${EVALCORE_BIN:-} ]]; then
    if [[ -x $EVALCORE_ROOT/.venv/bin/prefect ]]; then
        EVALCORE_BIN=$EVALCORE_ROOT/.venv/bin
    elif command -v prefect >/dev/null 2>&1; then
        EVALCORE_BIN=$(dirname "$(command -v prefect)")
    else
        EVALCORE_BIN=$EVALCORE_ROOT/.venv/bin
    fi
fi

# Everything listens on this address only. Loopback by default: the stack has no
# authentication or TLS unless you add it (docs/operations.md, "Securing").
EVALCORE_HOST=${EVALCORE_HOST:-127.0.0.1}
EVALCORE_PREFECT_PORT=${EVALCORE_PREFECT_PORT:-4200}
EVALCORE_DASK_PORT=${EVALCORE_DASK_PORT:-8786}
EVALCORE_DASK_DASHBOARD_PORT=${EVALCORE_DASK_DASHBOARD_PORT:-8787}
EVALCORE_DASK_WORKERS=${EVALCORE_DASK_WORKERS:-2}
EVALCORE_DASK_THREADS=${EVALCORE_DASK_THREADS:-1}
EVALCORE_DASK_MEMORY_LIMIT=${EVALCORE_DASK_MEMORY_LIMIT:-auto}
EVALCORE_WORK_POOL=${EVALCORE_WORK_POOL:-evalcore-process}
EVALCORE_PREFECT_WORKER_HEALTH_PORT=${EVALCORE_PREFECT_WORKER_HEALTH_PORT:-4281}
EVALCORE_PREFECT_HOME=${EVALCORE_PREFECT_HOME:-$EVALCORE_STATE_DIR/prefect-home}
EVALCORE_START_TIMEOUT=${EVALCORE_START_TIMEOUT:-120}
EVALCORE_STOP_TIMEOUT=${EVALCORE_STOP_TIMEOUT:-20}
# Optional basic auth for the Prefect server, "user:password" (same string on every side).
EVALCORE_PREFECT_AUTH_STRING=${EVALCORE_PREFECT_AUTH_STRING:-}

# shellcheck disable=SC2034  # used by the scripts that source this file
PREFECT_URL="http://$EVALCORE_HOST:$EVALCORE_PREFECT_PORT"
# shellcheck disable=SC2034
DASK_ADDRESS="tcp://$EVALCORE_HOST:$EVALCORE_DASK_PORT"
# shellcheck disable=SC2034
DASK_DASHBOARD="http://$EVALCORE_HOST:$EVALCORE_DASK_DASHBOARD_PORT"

log() { printf '[evalcore-local] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

pid_file() { printf '%s/%s.pid\n' "$EVALCORE_STATE_DIR" "$1"; }
log_file() { printf '%s/%s.log\n' "$EVALCORE_STATE_DIR" "$1"; }

# The words a service's command line must contain, so a stale pid file whose pid
# has been reused by another program is never signalled.
signature() {
    case $1 in
        prefect-server) echo "prefect server start" ;;
        prefect-worker) echo "prefect worker start" ;;
        dask-scheduler) echo "dask scheduler" ;;
        dask-worker-*) echo "dask worker" ;;
        *) return 1 ;;
    esac
}

# The pid recorded for a service if that process is alive and is that service.
running_pid() {
    local name=$1 file pid cmd sig
    file=$(pid_file "$name")
    [[ -f $file ]] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [[ -n $pid ]] || return 1
    cmd=$(ps -o command= -p "$pid" 2>/dev/null) || return 1
    sig=$(signature "$name") || return 1
    [[ $cmd == *"$sig"* ]] || return 1
    echo "$pid"
}

# A process that exists and is not a zombie (an exited child not yet reaped).
alive() {
    local stat
    stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ -n $stat && $stat != Z* ]]
}

# Live processes in the process group led by $1 (services are started with setsid,
# so a service's group holds exactly that service and its children).
group_members() {
    ps -eo pid=,pgid=,stat= 2>/dev/null | awk -v g="$1" '$2 == g && $3 !~ /^Z/ { print $1 }'
}

gone() { ! alive "$1" && [[ -z $(group_members "$1") ]]; }

wait_gone() {  # pid timeout_s -> 0 when pid and its group are gone
    local pid=$1 deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        gone "$pid" && return 0
        sleep 0.2
    done
    gone "$pid"
}

# Seconds a service gets between TERM and KILL. The Prefect worker (3.9) does not
# exit on its first TERM or INT while idle (a second signal makes it kill itself),
# so it gets a short grace period: it holds no state, and flow runs it started run
# in sessions of their own and are not affected.
stop_timeout() {
    case $1 in
        prefect-worker) echo "${EVALCORE_PREFECT_WORKER_STOP_TIMEOUT:-3}" ;;
        *) echo "$EVALCORE_STOP_TIMEOUT" ;;
    esac
}

# Stop services together: TERM each, wait for each (its own timeout), KILL what is
# left of it (leader and process group), and remove the pid files.
stop_services() {
    local name pid member
    local -a names=() pids=()
    for name in "$@"; do
        [[ -f $(pid_file "$name") ]] || continue
        if pid=$(running_pid "$name"); then
            log "stopping $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            names+=("$name")
            pids+=("$pid")
        else
            log "$name: stale pid file (process gone or pid reused), removing it"
            rm -f "$(pid_file "$name")"
        fi
    done
    local i
    for i in "${!names[@]}"; do
        name=${names[i]}
        pid=${pids[i]}
        if ! wait_gone "$pid" "$(stop_timeout "$name")"; then
            log "$name did not stop within $(stop_timeout "$name")s; sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
            # Children left behind by a killed leader (e.g. a nanny's worker process).
            for member in $(group_members "$pid"); do
                kill -KILL "$member" 2>/dev/null || true
            done
            wait_gone "$pid" 5 || log "warning: processes of $name's group $pid are still alive"
        fi
        rm -f "$(pid_file "$name")"
    done
}

# Every service with a pid file, in stop order (prefect worker first, server last).
known_services() {
    local f name workers=()
    [[ -d $EVALCORE_STATE_DIR ]] || return 0
    [[ -f $(pid_file prefect-worker) ]] && echo prefect-worker
    for f in "$EVALCORE_STATE_DIR"/dask-worker-*.pid; do
        [[ -e $f ]] || continue
        name=$(basename "$f" .pid)
        workers+=("$name")
    done
    ((${#workers[@]})) && printf '%s\n' "${workers[@]}" | sort -t- -k3,3nr
    [[ -f $(pid_file dask-scheduler) ]] && echo dask-scheduler
    [[ -f $(pid_file prefect-server) ]] && echo prefect-server
    return 0
}

# HTTP GET that succeeds on a 2xx answer; curl when present, else Python.
http_ok() {
    local url=$1 auth=${2:-}
    if command -v curl >/dev/null 2>&1; then
        if [[ -n $auth ]]; then
            curl -fsS -o /dev/null --max-time 5 -u "$auth" "$url" 2>/dev/null
        else
            curl -fsS -o /dev/null --max-time 5 "$url" 2>/dev/null
        fi
    else
        "$EVALCORE_BIN/python" - "$url" "$auth" <<'PY' 2>/dev/null
import base64, sys, urllib.request
url, auth = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url)
if auth:
    req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
with urllib.request.urlopen(req, timeout=5) as r:
    sys.exit(0 if 200 <= r.status < 300 else 1)
PY
    fi
}

http_get() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsS --max-time 5 "$1" 2>/dev/null
    else
        "$EVALCORE_BIN/python" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null
    fi
}

port_in_use() {  # host port
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}
