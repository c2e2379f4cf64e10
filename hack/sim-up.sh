#!/usr/bin/env bash
# Starts marekvs-sim (pod runner, volume provisioner, simulated members, control API) against
# the local cluster NAME. Idempotent. With MAREKVS_BIN=/path/to/marekvs-server, member pods
# run that real binary instead of the simulator; their output goes to
# .state/NAME/logs/pods/<namespace>_<pod>_<container>.log. With
# MAREKVS_SIM_OPERATOR_BIN=/path/to/marekvs-operator, pods of the operator image run that
# binary (docs/local-cluster.md#the-operators-own-pods), their output in the same directory.
#
#   hack/sim-up.sh [NAME]          # prints the control API URL
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env "${1:-demo}"
bin=$("$here/build-control-plane.sh")
cluster_healthy || { log "cluster $NAME is not up: run hack/cluster-up.sh $NAME"; exit 1; }

pidf="$STATE/pids/marekvs-sim.pid"
if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null && curl -fsS "$SIM_CONTROL_URL/settings" >/dev/null 2>&1; then
  log "marekvs-sim already running ($SIM_CONTROL_URL)"
  echo "$SIM_CONTROL_URL"
  exit 0
fi
# MAREKVS_SIM_PROFILE=release for benchmarks (thousands of simulated members).
profile=${MAREKVS_SIM_PROFILE:-debug}
if [ "$profile" = release ]; then
  (cd "$REPO" && cargo build -q --release -p marekvs-sim)
else
  build_all
fi
sim="${CARGO_TARGET_DIR:-$REPO/target}/$profile/marekvs-sim"
mkdir -p "$STATE/logs/pods"
args=(--control "127.0.0.1:$SIM_CONTROL_PORT" --volumes-dir "$STATE/volumes" --pod-logs-dir "$STATE/logs/pods")
[ -n "${MAREKVS_BIN:-}" ] && args+=(--real-bin "$MAREKVS_BIN")
# Pods of the operator image run as this binary (hack/test-e2e.sh sets it).
[ -n "${MAREKVS_SIM_OPERATOR_BIN:-}" ] && args+=(--operator-bin "$MAREKVS_SIM_OPERATOR_BIN")
# TAG=PATH: pods of the operator image with that tag run as PATH (the upgrade test's older build).
[ -n "${MAREKVS_SIM_OPERATOR_BIN_FOR_TAG:-}" ] && args+=(--operator-bin-for-tag "$MAREKVS_SIM_OPERATOR_BIN_FOR_TAG")
KUBECONFIG="$KUBECONFIG_PATH" start_bg marekvs-sim "$sim" "${args[@]}"
wait_for "marekvs-sim control API" 60 curl -fsS "$SIM_CONTROL_URL/settings"
log "marekvs-sim running; control API $SIM_CONTROL_URL"
echo "$SIM_CONTROL_URL"
