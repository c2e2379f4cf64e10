#!/usr/bin/env bash
# A kind cluster for the e2e suite with the operator deployed as users deploy it. Needs Docker
# (or podman), kind, kubectl and git, so it cannot run on the project's own machines, which
# have no container engine; CI runs it (.github/workflows/ci.yaml).
#
#   hack/kind/up.sh            # prints the kubeconfig path
#
# - a kind cluster from a pinned node image;
# - the StorageClasses the suite needs (hack/kind/storage.sh: `expandable` (default), `fast`);
# - the operator image built (`make image`) and loaded into the nodes;
# - deploy/ applied (CRD, RBAC, Deployment) as shipped (OPERATOR_IMAGE: another image).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
name=${KIND_CLUSTER:-marekvs}
node_image=${KIND_NODE_IMAGE:-kindest/node:v1.34.0}
# The image deploy/ names (kustomize `images:`), built here and loaded into the nodes, so the
# Deployment runs as shipped (imagePullPolicy IfNotPresent finds it there).
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/crates/controller/Cargo.toml" | head -n 1)
image=${OPERATOR_IMAGE:-ghcr.io/marekvs/marekvs-operator:$version}
export KUBECONFIG=${KIND_KUBECONFIG:-$repo/.state/kind/kubeconfig}
mkdir -p "$(dirname "$KUBECONFIG")"
kind get clusters | grep -qx "$name" ||
  kind create cluster --name "$name" --image "$node_image" --kubeconfig "$KUBECONFIG" >&2
"$repo/hack/kind/storage.sh" >&2
make -C "$repo" image IMAGE="${image%:*}" TAG="${image##*:}" >&2
kind load docker-image "$image" --name "$name" >&2
kubectl apply --server-side -k "$repo/deploy" >&2
[ -z "${OPERATOR_IMAGE:-}" ] || kubectl -n marekvs-system set image deploy/marekvs-operator operator="$image" >&2
kubectl -n marekvs-system rollout status deploy/marekvs-operator --timeout=180s >&2
echo "$KUBECONFIG"
