#!/usr/bin/env bash
# Runs the e2e suite against the kind cluster of hack/kind/up.sh, where the operator runs as a
# Deployment and members run the real marekvs image. Simulator-only tests skip themselves (no
# MAREKVS_SIM_CONTROL_URL) and are reported skipped with the reason, as are the tests that kill a
# local operator process.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export KUBECONFIG=${KIND_KUBECONFIG:-$repo/.state/kind/kubeconfig}
export MAREKVS_IMAGE=${MAREKVS_IMAGE:-ghcr.io/yannick/marekvs:latest}
export MAREKVS_E2E_EXTERNAL_OPERATOR=1
unset MAREKVS_SIM_CONTROL_URL
cd "$repo" && cargo test --no-fail-fast -p marekvs-e2e -- "$@"
