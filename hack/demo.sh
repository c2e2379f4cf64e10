#!/usr/bin/env bash
# `make demo`: the local control plane, the simulated data plane, and (once the operator
# exists) a demo MarekvsCluster. Idempotent: a second run reuses what is running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
cluster_env demo
bin=$("$here/build-control-plane.sh")
"$here/cluster-up.sh" demo >/dev/null
"$here/sim-up.sh" demo >/dev/null
kc get nodes
cat <<EOT

The local cluster is up (everything on loopback).
  export KUBECONFIG=$KUBECONFIG_PATH
  export PATH=$bin:\$PATH        # kubectl $KUBE_VERSION
  kubectl get nodes,pods -A
  curl -s $SIM_CONTROL_URL/state  # the simulator's view of every member
Stop it with: make demo-down
EOT
