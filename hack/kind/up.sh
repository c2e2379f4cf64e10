#!/usr/bin/env bash
# For users with Docker (cannot run on the project's own machines, which have no Docker engine):
# a kind cluster from a pinned node image, the operator image built and loaded into it, and
# deploy/ (CRD, RBAC, Deployment) applied.
#
#   hack/kind/up.sh            # prints the kubeconfig path
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
name=${KIND_CLUSTER:-marekvs}
node_image=${KIND_NODE_IMAGE:-kindest/node:v1.34.0}
image=${OPERATOR_IMAGE:-marekvs-operator:dev}
kubeconfig=${KIND_KUBECONFIG:-$repo/.state/kind/kubeconfig}
mkdir -p "$(dirname "$kubeconfig")"
kind get clusters | grep -qx "$name" || kind create cluster --name "$name" --image "$node_image" --kubeconfig "$kubeconfig"
docker build -t "$image" -f "$repo/Dockerfile" "$repo"
kind load docker-image "$image" --name "$name"
kubectl --kubeconfig "$kubeconfig" apply -k "$repo/deploy"
kubectl --kubeconfig "$kubeconfig" -n marekvs-system set image deploy/marekvs-operator operator="$image"
kubectl --kubeconfig "$kubeconfig" -n marekvs-system rollout status deploy/marekvs-operator --timeout=180s
echo "$kubeconfig"
