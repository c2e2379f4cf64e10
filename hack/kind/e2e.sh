#!/usr/bin/env bash
# Runs the e2e suite against the kind cluster of hack/kind/up.sh with the real marekvs image.
# Simulator-only tests skip themselves (no MAREKVS_SIM_CONTROL_URL).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export KUBECONFIG=${KIND_KUBECONFIG:-$repo/.state/kind/kubeconfig}
export MAREKVS_IMAGE=${MAREKVS_IMAGE:-ghcr.io/yannick/marekvs:latest}
unset MAREKVS_SIM_CONTROL_URL
cd "$repo" && cargo test -p marekvs-e2e -- "$@"
