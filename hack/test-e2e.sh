#!/usr/bin/env bash
# The e2e half of `make test`: brings up the `test` cluster and the simulator, runs the e2e
# suite against them, tears everything down and fails if any process is left behind.
# Extra arguments go to the test binary (e.g. a test name filter).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env test

finish() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -d "$STATE/logs" ]; then
    for f in "$STATE"/logs/marekvs-sim.log "$STATE"/logs/operator-*.log; do
      [ -f "$f" ] && { echo "--- last lines of $f" >&2; tail -n 40 "$f" >&2; }
    done
  fi
  if [ $rc -ne 0 ] && [ -n "${MAREKVS_E2E_KEEP:-}" ]; then
    log "MAREKVS_E2E_KEEP is set: cluster $NAME left up for inspection (KUBECONFIG=$KUBECONFIG_PATH); hack/cluster-down.sh $NAME removes it"
    exit $rc
  fi
  "$here/cluster-down.sh" test >/dev/null 2>&1 || true
  if pgrep -f -- "$STATE/" >/dev/null; then
    log "processes left behind:"; pgrep -af -- "$STATE/" >&2
    exit 1
  fi
  log "torn down; no process left behind"
  exit $rc
}
trap finish EXIT

"$here/cluster-up.sh" test >/dev/null
"$here/sim-up.sh" test >/dev/null
bin=$("$here/build-control-plane.sh")
(cd "$REPO" && cargo build -q -p marekvs-operator)
# Each test runs its own operator process, scoped to the test's namespace, authenticated as
# the operator's ServiceAccount: the suite proves the least-privilege RBAC is enough.
export MAREKVS_OPERATOR_KUBECONFIG=$(operator_kubeconfig)
export KUBECONFIG=$KUBECONFIG_PATH MAREKVS_SIM_CONTROL_URL=$SIM_CONTROL_URL
export MAREKVS_OPERATOR_BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug/marekvs-operator
export MAREKVS_E2E_LOG_DIR=$STATE/logs MAREKVS_E2E_CLUSTER=$NAME
(cd "$REPO" && cargo test -p marekvs-e2e -- --test-threads "${E2E_THREADS:-4}" "$@")
