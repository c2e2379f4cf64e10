#!/usr/bin/env bash
# `make bench`: brings up the `bench` cluster (its own ports, beside demo and test) and the
# simulator, runs the benchmarks of e2e/src/bin/bench/ against them and tears everything
# down. Reported numbers, not pass/fail; results go to stdout and to $OUT (default
# target/bench/results.tsv), the last run's logs to logs/ beside it. Arguments go to the bench
# binary (default: all).
#
#   hack/bench.sh                     # steps, replace, scale (200 × 8), failover (200 × 8), load
#   hack/bench.sh steps --runs 5
#   hack/bench.sh scale --clusters 50 --members 8 --steady-seconds 60
#   hack/bench.sh failover --clusters 200 --members 8 --runs 3 --after-seconds 60
#   hack/bench.sh load --bound-seconds 90 --percent 0,25,50,100,150
#
# BENCH_PROFILE=debug runs debug builds (the ones make test builds) instead of release ones.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env bench
out=${OUT:-$REPO/target/bench/results.tsv}
mkdir -p "$(dirname "$out")"

finish() {
  local rc=$?
  # The cluster's state goes with it; an audit log (APISERVER_AUDIT=1) is kept.
  if [ -f "$STATE/logs/audit.log" ]; then cp "$STATE/logs/audit.log" "$(dirname "$out")/audit.log"; fi
  # So are the operators' and the members' logs (the members' under pods/).
  if [ -d "$STATE/logs" ]; then rm -rf "$(dirname "$out")/logs" && cp -r "$STATE/logs" "$(dirname "$out")/logs"; fi
  "$here/cluster-down.sh" bench >/dev/null 2>&1 || true
  exit $rc
}
trap finish EXIT

"$here/cluster-up.sh" bench >/dev/null
profile=${BENCH_PROFILE:-release}
MAREKVS_SIM_PROFILE=$profile "$here/sim-up.sh" bench >/dev/null
if [ "$profile" = release ]; then
  (cd "$REPO" && cargo build -q --release -p marekvs-operator && cargo build -q --release -p marekvs-e2e --bin bench)
else
  build_all
fi
bin=$("$here/build-control-plane.sh")
opkc=$(operator_kubeconfig)
export MAREKVS_OPERATOR_KUBECONFIG=$opkc
export KUBECONFIG=$KUBECONFIG_PATH MAREKVS_SIM_CONTROL_URL=$SIM_CONTROL_URL
# Established is not quite served: wait until the resource answers.
wait_for "the MarekvsCluster API" 60 kc get marekvsclusters -A
export MAREKVS_OPERATOR_BIN=${BENCH_OPERATOR_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/$profile/marekvs-operator}
export MAREKVS_E2E_LOG_DIR=${MAREKVS_E2E_LOG_DIR:-$STATE/logs}
{
  echo "# $(date -u +%FT%TZ) $(git -C "$REPO" rev-parse --short HEAD) $(nproc) cores: bench ${*:-all}"
  "${CARGO_TARGET_DIR:-$REPO/target}/$profile/bench" "${@:-all}" | tee /dev/stderr | grep '^RESULT'
} >> "$out"
log "results appended to $out"
