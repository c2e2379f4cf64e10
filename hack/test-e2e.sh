#!/usr/bin/env bash
# The e2e half of `make test`: brings up the `test` cluster and the simulator, runs the e2e
# suite against them, tears everything down and fails if any process is left behind. Ends
# with one line: "e2e: N passed, N failed, N skipped; N sub-checks skipped" (a skipped test or
# sub-check printed its reason).
# Extra arguments go to the test binaries (e.g. a test name filter).
#
# With MAREKVS_BIN=/path/to/marekvs-server, every member runs that binary instead of the
# simulator: tests that need the simulator's control API are skipped, the rest (data checks
# included) run unchanged.
#
# A second cluster, `side`, runs beside `test` on its own ports and pod network, its members
# played by marekvs-standin (a stand-in for a real binary): the suite shows the two clusters
# do not collide, and that real-binary members bind their listeners to their own pod IPs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
log_file=$(mktemp)
builders=()
# Whatever a shell left over (from make demo, kind) must not point the tests elsewhere.
unset MAREKVS_SIM_CONTROL_URL MAREKVS_E2E_EXTERNAL_OPERATOR

finish() {
  local rc=$?
  # The background builds end here too (each a no-op once cached; the next run needs them).
  [ ${#builders[@]} -eq 0 ] || wait "${builders[@]}" 2>/dev/null || true
  [ -z "${ready:-}" ] || rm -rf "$ready"
  cluster_env test
  if [ $rc -ne 0 ] && [ -d "$STATE/logs" ]; then
    for f in "$STATE"/logs/marekvs-sim.log "$STATE"/logs/operator-*.log; do
      [ -f "$f" ] && { echo "--- last lines of $f" >&2; tail -n 40 "$f" >&2; }
    done
  fi
  if [ $rc -ne 0 ] && [ -n "${MAREKVS_E2E_KEEP:-}" ]; then
    log "MAREKVS_E2E_KEEP is set: clusters test and side left up for inspection (KUBECONFIG=$KUBECONFIG_PATH); hack/cluster-down.sh test; hack/cluster-down.sh side"
    summary
    rm -f "$log_file"
    exit $rc
  fi
  local left=0
  for name in test side; do
    cluster_env "$name"
    "$here/cluster-down.sh" "$name" >/dev/null 2>&1 || true
    if pgrep -f -- "$STATE/" >/dev/null; then
      log "processes left behind:"; pgrep -af -- "$STATE/" >&2
      left=1
    fi
  done
  [ $left -eq 0 ] && log "torn down; no process left behind"
  summary
  rm -f "$log_file"
  [ $left -eq 0 ] || exit 1
  exit $rc
}

# One line over every test binary of the suite; libtest's "ignored" are the skipped tests.
# Nothing when no test ran (the setup failed): a line of zeros would read as a clean run.
summary() {
  grep -q '^test result:' "$log_file" || { log "no test ran"; return 0; }
  # Each failed test's own message again, last: CI shows the end of the output, and the
  # message is otherwise buried above the teardown.
  awk '/^---- .* ----$/ { show = 1; n = 0 } /^failures:$/ && show { show = 0 }
       show && n++ < 30 { print "[failed] " $0 }' "$log_file" >&2
  # Tests skipped here (libtest's ignored), each with its reason, then the checks inside
  # tests that could not be made here (`e2e::skipped_check`): reported, never passed.
  grep -h '^skipped [a-z_0-9]*: ' "$log_file" | sort -u >&2 || true
  local sub
  sub=$(grep -c '^skipped sub-check ' "$log_file" || true)
  if [ "${sub:-0}" -gt 0 ]; then
    grep -h '^skipped sub-check ' "$log_file" | sort | uniq -c >&2
  fi
  awk -v subs="${sub:-0}" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
       END { printf "e2e: %d passed, %d failed, %d skipped; %d sub-checks skipped\n", p, f, s, subs }' "$log_file"
}
trap finish EXIT

# One build of every target of the workspace, the same selection `make test`'s unit stage and
# `make lint`'s CRD check build: cargo reuses each crate as built there, with the same features.
# The e2e crate's test binaries (its test files, and the unit tests of its library and of the
# bench binary) are read from its report.
if [ -n "${MAREKVS_E2E_BINS_FILE:-}" ]; then
  # make test's build stage built them and wrote their list: no cargo here, so the e2e stage
  # never waits on cargo's lock behind a stage running beside it (clippy, say).
  e2e_bins=$(cat "$MAREKVS_E2E_BINS_FILE")
else
  e2e_bins=$(e2e_binaries)
fi
[ -n "$e2e_bins" ] || { log "the build named no e2e test binary"; exit 1; }
target=${CARGO_TARGET_DIR:-$REPO/target}/debug

# The side cluster first: its members are stand-ins, whatever MAREKVS_BIN says.
cluster_env side
"$here/cluster-up.sh" side >/dev/null
MAREKVS_BIN=$target/marekvs-standin "$here/sim-up.sh" side >/dev/null
export MAREKVS_E2E_SIDE_KUBECONFIG=$KUBECONFIG_PATH MAREKVS_E2E_SIDE_POD_NETWORK=$POD_NETWORK
export MAREKVS_E2E_SIDE_POD_LOGS=$STATE/logs/pods

cluster_env test
# The API server logs every change the operators ask for: a test counts a deposed leader's.
APISERVER_AUDIT=mutations "$here/cluster-up.sh" test >/dev/null
export MAREKVS_E2E_AUDIT_LOG=$STATE/logs/audit.log
# Helm and the operator as it stood at the commit e2e/upgrade-from.env pins
# (e2e/tests/upgrade.rs) build in the background, at a lower priority (no-ops once cached):
# only the install, report and upgrade tests need them, and the runner holds those until the
# build each awaits wrote its READY file ("ok" or its error), running the others meanwhile.
ready=$(mktemp -d)
builders=()
build_beside() {
  local name=$1; shift
  (
    if nice -n 10 "$@" > "$ready/$name.log" 2>&1; then echo ok; else
      echo "building $name ($*) failed:"; tail -n 20 "$ready/$name.log"
    fi > "$ready/$name.tmp"
    mv "$ready/$name.tmp" "$ready/$name"
  ) &
  builders+=($!)
}
build_beside helm "$here/tools.sh" helm
build_beside upgrade-from "$here/build-upgrade-from.sh"
upgrade_from=$("$here/build-upgrade-from.sh" --where)
export MAREKVS_E2E_UPGRADE_FROM=$upgrade_from
# Pods of the operator image (the shipped installs, e2e/tests/install.rs) run as this build;
# tagged `upgrade-from`, as that older one.
MAREKVS_SIM_OPERATOR_BIN=$target/marekvs-operator \
  MAREKVS_SIM_OPERATOR_BIN_FOR_TAG=upgrade-from=$upgrade_from/bin/marekvs-operator \
  "$here/sim-up.sh" test >/dev/null
bin=$("$here/build-control-plane.sh")
export MAREKVS_E2E_KUBECTL=$bin/kubectl MAREKVS_E2E_HELM=$("$here/tools.sh" --where helm)
export MAREKVS_E2E_OPERATOR_PODS=1 MAREKVS_E2E_POD_LOGS=$STATE/logs/pods
# Each test runs its own operator process, scoped to the test's namespace, authenticated as
# the operator's ServiceAccount: the suite proves the least-privilege RBAC is enough.
export MAREKVS_OPERATOR_KUBECONFIG=$(operator_kubeconfig)
export KUBECONFIG=$KUBECONFIG_PATH MAREKVS_E2E_POD_NETWORK=$POD_NETWORK
# E2E_OPERATOR_BIN runs the tests' operators from another build (an older commit's, to show a
# test fails without a fix); by default, this tree's.
export MAREKVS_OPERATOR_BIN=${E2E_OPERATOR_BIN:-$target/marekvs-operator}
# The kubectl plugin, run directly and through the pinned kubectl (plugin discovery on PATH).
export MAREKVS_KUBECTL_MKV_BIN=$target/kubectl-mkv MAREKVS_E2E_KUBECTL=$bin/kubectl
export MAREKVS_E2E_LOG_DIR=$STATE/logs MAREKVS_E2E_CLUSTER=$NAME
if [ -n "${MAREKVS_BIN:-}" ]; then
  # Real members: the simulator's control API does not reach them.
  log "members run $MAREKVS_BIN; simulator-only tests will be skipped"
else
  export MAREKVS_SIM_CONTROL_URL=$SIM_CONTROL_URL
fi
set +e
# Every test of every binary in one queue, E2E_THREADS at a time, longest first; the tests that
# change what the whole cluster sees run alone, first or (those awaiting a build) last
# (hack/run-e2e.py says which and why).
# E2E_EXCLUSIVE names more such binaries (comma-separated).
# shellcheck disable=SC2086
python3 "$here/run-e2e.py" --jobs "${E2E_THREADS:-4}" \
  --exclusive "apiserver,platform,install,upgrade,report${E2E_EXCLUSIVE:+,$E2E_EXCLUSIVE}" \
  --await "install=$ready/helm" --await "report=$ready/helm" \
  --await "upgrade=$ready/helm" --await "upgrade=$ready/upgrade-from" \
  --durations "$REPO/e2e/durations.json" ${E2E_RECORD:+--record "$E2E_RECORD"} $e2e_bins -- "$@" 2>&1 | tee "$log_file"
rc=${PIPESTATUS[0]}
set -e
exit "$rc"
