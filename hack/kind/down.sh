#!/usr/bin/env bash
# Deletes the kind cluster of hack/kind/up.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
kind delete cluster --name "${KIND_CLUSTER:-marekvs}" --kubeconfig "${KIND_KUBECONFIG:-$repo/.state/kind/kubeconfig}"
