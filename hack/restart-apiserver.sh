#!/usr/bin/env bash
# Chaos helper: kill -9 the running kube-apiserver of cluster NAME, keep it down for
# DOWN_SECONDS, then start it again with exactly the same command line and wait until it
# is ready. Prints how long the API was unavailable (seconds) on stdout.
#
#   hack/restart-apiserver.sh [NAME] [DOWN_SECONDS]     # defaults: test 2
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env "${1:-test}"
down=${2:-2}
bin=$("$here/build-control-plane.sh")
pidf=$STATE/pids/kube-apiserver.pid
pid=$(cat "$pidf" 2>/dev/null) || { log "no kube-apiserver pid file for cluster $NAME"; exit 1; }
kill -0 "$pid" 2>/dev/null || { log "kube-apiserver ($pid) of cluster $NAME is not running"; exit 1; }
# The exact argv of the running server, NUL-separated, so the restart is the same server.
mapfile -d '' args < "/proc/$pid/cmdline"
t0=$(date +%s%N)
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
sleep "$down"
# Keep the dead server's log: start_bg truncates the log file.
mv "$STATE/logs/kube-apiserver.log" "$STATE/logs/kube-apiserver.$(date +%s%N).log" 2>/dev/null || true
start_bg kube-apiserver "${args[@]}"
wait_for "kube-apiserver" 120 kc get --raw /readyz
t1=$(date +%s%N)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", (b - a) / 1e9 }'
