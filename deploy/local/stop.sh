#!/usr/bin/env bash
# Stop the local evalcore stack started by start.sh: TERM each process recorded in
# the state directory's pid files (Prefect worker, Dask workers, Dask scheduler,
# Prefect server, in that order), KILL it after EVALCORE_STOP_TIMEOUT seconds, and
# remove the pid files. A pid file whose process is gone, or whose pid now belongs
# to another program, is removed without signalling anything. Running it again, or
# with nothing running, does nothing and succeeds.
#
# Usage: deploy/local/stop.sh [SERVICE...]
#   SERVICE: prefect-worker, dask-worker-<i>, dask-scheduler, prefect-server
#            (default: every service with a pid file)
#
# Logs, the Prefect database (prefect-home/) and stack.env stay in the state
# directory; delete the directory to start from scratch.
set -euo pipefail

case ${1:-} in
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if (($#)); then
    services=("$@")
else
    mapfile -t services < <(known_services)
fi

if ((${#services[@]} == 0)); then
    log "nothing to stop in $EVALCORE_STATE_DIR"
    exit 0
fi
for name in "${services[@]}"; do
    signature "$name" >/dev/null || die "unknown service '$name'"
done
# In dependency order; the Dask workers stop together.
stage() {  # pattern
    local name selected=()
    for name in "${services[@]}"; do
        # shellcheck disable=SC2053
        [[ $name == $1 ]] && selected+=("$name")
    done
    ((${#selected[@]} == 0)) || stop_services "${selected[@]}"
}
stage prefect-worker
stage 'dask-worker-*'
stage dask-scheduler
stage prefect-server
log "stopped: ${services[*]}"
