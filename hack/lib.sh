#!/usr/bin/env bash
# Shared helpers for the hack/ scripts. Source it; do not run it.
# shellcheck disable=SC2034
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/hack/versions.env"

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }

# cluster_env NAME: where the cluster NAME keeps its state, its loopback ports and its pod
# network. Every cluster has its own ports and its own pod CIDRs (127.<POD_NET>.0.0/20), so
# demo, test and bench run side by side; `side` is the second cluster of the e2e test that
# shows exactly that. Ports stay below 32768, outside the kernel's ephemeral range: a client
# socket (even one in TIME-WAIT) on a port of that range made a listener's bind fail.
cluster_env() {
  NAME=$1
  case "$NAME" in
    demo) PORT_BASE=16000 POD_NET=1 ;;
    test) PORT_BASE=26000 POD_NET=2 ;;
    bench) PORT_BASE=31000 POD_NET=3 ;;
    side) PORT_BASE=11000 POD_NET=4 ;;
    *) echo "unknown cluster name '$NAME' (demo, test, bench or side)" >&2; exit 2 ;;
  esac
  POD_NETWORK=127.$POD_NET.0.0/20
  STATE=${MAREKVS_STATE_ROOT:-$REPO/.state}/$NAME
  KUBECONFIG_PATH=$STATE/kubeconfig
  API_PORT=$((PORT_BASE + 443))
  ETCD_PORT=$((PORT_BASE + 379))
  ETCD_PEER_PORT=$((PORT_BASE + 380))
  KCM_PORT=$((PORT_BASE + 257))
  SCHED_PORT=$((PORT_BASE + 259))
  KWOK_PORT=$((PORT_BASE + 247))
  SIM_CONTROL_PORT=$((PORT_BASE + 190))
  SIM_CONTROL_URL=http://127.0.0.1:$SIM_CONTROL_PORT
  OPERATOR_METRICS_PORT=$((PORT_BASE + 80))
  # ClusterIPs are allocated from here but never dialled: nothing routes them.
  SERVICE_CIDR=127.96.0.0/16
}

# build_all [CARGO FLAGS]: every target of the workspace (debug), the one selection every script
# and make target builds. Another selection (`-p some-crate`) unifies other features (the
# controller's tokio test-util, the plugin's kube ws) and rebuilds the kube and tokio stack; with
# one, cargo builds each crate once and every later call reuses it.
build_all() { (cd "$REPO" && cargo build -q --workspace --all-targets "$@"); }

# build_all, then the paths of the e2e crate's test binaries (its test files, and the unit tests
# of its library and of the bench binary), read from cargo's report, one per line.
e2e_binaries() {
  build_all --message-format=json-render-diagnostics | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["manifest_path"].endswith("/e2e/Cargo.toml") \
       and m["profile"]["test"] and m.get("executable"):
        print(m["executable"])'
}

kc() { "$bin/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# start_bg NAME CMD...: run CMD in its own session, log to logs/NAME.log, pid in pids/NAME.pid.
start_bg() {
  local name=$1; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name.pid"
}

# wait_for DESC SECONDS CMD...: retry CMD until it succeeds; on timeout show the logs.
wait_for() {
  local desc=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $desc"
      for f in "$STATE"/logs/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
      return 1
    fi
    # Also fail fast when a process we started has died.
    for p in "$STATE"/pids/*.pid; do
      [ -f "$p" ] || continue
      if ! kill -0 "$(cat "$p")" 2>/dev/null; then
        log "$(basename "$p" .pid) exited while waiting for $desc:"
        tail -n 30 "$STATE/logs/$(basename "$p" .pid).log" >&2
        return 1
      fi
    done
    sleep 0.5
  done
}

# cluster_healthy: every process we started is alive and the API server is ready.
cluster_healthy() {
  local p
  for p in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    [ -f "$STATE/pids/$p.pid" ] && kill -0 "$(cat "$STATE/pids/$p.pid")" 2>/dev/null || return 1
  done
  [ -f "$KUBECONFIG_PATH" ] && kc get --raw /readyz >/dev/null 2>&1
}

# operator_kubeconfig: install the CRD and the operator's RBAC, and write a kubeconfig that
# authenticates as its ServiceAccount (so the local operator runs with exactly the
# least-privilege role of deploy/rbac). Prints the path.
operator_kubeconfig() {
  kc apply -f "$REPO/deploy/crd/marekvs.io_marekvsclusters.yaml" -f "$REPO/deploy/operator/namespace.yaml" >/dev/null
  kc apply -f "$REPO/deploy/rbac/rbac.yaml" >/dev/null
  kc wait --for=condition=Established crd/marekvsclusters.marekvs.io --timeout=60s >/dev/null
  local token
  token=$(kc -n marekvs-system create token marekvs-operator --duration=24h)
  cat > "$STATE/operator.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$STATE/pki/ca.crt"}
users:
- name: marekvs-operator
  user: {token: "$token"}
contexts:
- name: operator
  context: {cluster: local, user: marekvs-operator}
current-context: operator
KCFG
  echo "$STATE/operator.kubeconfig"
}
