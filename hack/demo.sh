#!/usr/bin/env bash
# `make demo`: the local control plane, the simulated data plane, the operator (as a local
# process authenticated as its ServiceAccount) and deploy/examples/demo.yaml, then progress
# until the cluster is Healthy. Idempotent: a second run reuses what is running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env demo
bin=$("$here/build-control-plane.sh")
"$here/cluster-up.sh" demo >/dev/null
"$here/sim-up.sh" demo >/dev/null
build_all
opkc=$(operator_kubeconfig)
pidf="$STATE/pids/operator.pid"
if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
  log "operator already running"
else
  KUBECONFIG=$opkc start_bg operator "${CARGO_TARGET_DIR:-$REPO/target}/debug/marekvs-operator" run \
    --metrics-addr "127.0.0.1:$OPERATOR_METRICS_PORT"
  log "operator started (log: $STATE/logs/operator.log)"
fi
kc apply -f "$REPO/deploy/examples/demo.yaml"
deadline=$(( $(date +%s) + 300 ))
until kc wait --for=condition=Ready mkv/demo --timeout=2s >/dev/null 2>&1; do
  kc get mkv demo --no-headers 2>/dev/null | sed 's/^/  /' || true
  [ "$(date +%s)" -lt "$deadline" ] || { log "demo cluster not Healthy after 300 s"; tail -n 30 "$STATE/logs/operator.log" >&2; exit 1; }
  sleep 2
done
kc get mkv,pods,pvc -o wide
cat <<EOT

The demo cluster is Healthy (everything on loopback).
  export KUBECONFIG=$KUBECONFIG_PATH
  export PATH=$bin:\$PATH                 # kubectl $KUBE_VERSION
  kubectl describe mkv demo                # members, per-member conditions, events
  kubectl get pods -o wide                 # each member serves RESP at <pod IP>:6379 (redis-cli -h <pod IP>)
  curl -s http://127.0.0.1:$OPERATOR_METRICS_PORT/metrics   # the operator's own metrics (/healthz, /readyz too)
  kubectl patch mkv demo --type merge -p '{"spec":{"nodes":5}}'
  kubectl patch mkv demo --type merge -p '{"spec":{"nodes":3,"removeMembers":["demo-1"]}}'
  kubectl scale mkv demo --replicas=4
  kubectl patch mkv demo --type merge -p '{"spec":{"extraEnv":{"RUST_LOG":"debug"}}}'   # rolling update
  kubectl patch mkv demo --type merge -p '{"spec":{"paused":true}}'
  curl -s -X PATCH -d '{"load_ops_per_sec":20000}' -H 'content-type: application/json' $SIM_CONTROL_URL/settings   # load: the OPS/S column
  kubectl get mkv demo -o wide -w
  curl -s $SIM_CONTROL_URL/state          # the simulator's view of every member
Operator log: $STATE/logs/operator.log.  Stop everything: make demo-down
EOT
