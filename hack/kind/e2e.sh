#!/usr/bin/env bash
# Runs the e2e suite, data checks included, against the kind cluster of hack/kind/up.sh, where
# the operator runs as a Deployment and members run the real marekvs image (MAREKVS_IMAGE;
# MAREKVS_IMAGE_NEXT for the rolling-update tests, default the same image). Tests that need
# the simulator's control API, a local operator process or the local control plane skip
# themselves and are reported skipped with the reason.
#
# The data check reaches members through the API server's port-forward
# (MAREKVS_E2E_PORT_FORWARD): the kind API server listens on 127.0.0.1, so every connection
# the tests make stays on loopback; pod IPs are never targeted from the host.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export KUBECONFIG=${KIND_KUBECONFIG:-$repo/.state/kind/kubeconfig}
export MAREKVS_IMAGE=${MAREKVS_IMAGE:-ghcr.io/yannick/marekvs:latest}
export MAREKVS_E2E_EXTERNAL_OPERATOR=1 MAREKVS_E2E_PORT_FORWARD=1
unset MAREKVS_SIM_CONTROL_URL MAREKVS_E2E_CLUSTER MAREKVS_E2E_SIDE_KUBECONFIG
cd "$repo" && cargo test --no-fail-fast -p marekvs-e2e -- --test-threads "${E2E_THREADS:-2}" "$@"
