#!/usr/bin/env bash
# Stops every process that hack/cluster-up.sh and hack/sim-up.sh started for cluster NAME
# and removes its state (unless --keep-state). Leaves nothing running behind.
#
#   hack/cluster-down.sh [NAME] [--keep-state]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env "${1:-demo}"
keep=${2:-}

[ -d "$STATE/pids" ] || { [ "$keep" = --keep-state ] || rm -rf "$STATE"; exit 0; }
# Stop in reverse dependency order: clients first, etcd last.
for name in operator marekvs-sim kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$STATE/pids/$name.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    # Each was started in its own session: signal the whole group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$f"
done
if [ "$keep" = --keep-state ]; then
  log "cluster $NAME stopped (state kept in $STATE)"
else
  rm -rf "$STATE"
  log "cluster $NAME stopped and removed"
fi
