#!/usr/bin/env bash
# The StorageClasses the e2e suite needs, on a kind cluster (KUBECONFIG): kind's own default,
# `standard` (rancher local-path), cannot expand a volume, and the suite needs a second class,
# `fast`, and a default class that expands in place (storage.size growing). Both come from the
# CSI hostpath driver (pinned below), which supports expansion; `expandable` becomes the
# default class. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
snapshotter=${SNAPSHOTTER_VERSION:-v8.2.0}
hostpath=${CSI_HOSTPATH_VERSION:-v1.15.0}
work=${KIND_WORK:-$here/../../.state/kind}
mkdir -p "$work"

if ! kubectl get storageclass expandable >/dev/null 2>&1; then
  # The hostpath driver's deploy script wants the VolumeSnapshot CRDs and controller.
  base=https://raw.githubusercontent.com/kubernetes-csi/external-snapshotter/$snapshotter
  for crd in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
    kubectl apply -f "$base/client/config/crd/snapshot.storage.k8s.io_$crd.yaml"
  done
  kubectl apply -f "$base/deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml"
  kubectl apply -f "$base/deploy/kubernetes/snapshot-controller/setup-snapshot-controller.yaml"
  [ -d "$work/csi-driver-host-path" ] ||
    git clone -q --depth 1 --branch "$hostpath" https://github.com/kubernetes-csi/csi-driver-host-path "$work/csi-driver-host-path"
  "$work/csi-driver-host-path/deploy/kubernetes-latest/deploy.sh"
fi
kubectl apply -f "$here/storage.yaml"
# One default class: kind's `standard` stays (tests name it) but is no longer the default.
kubectl annotate storageclass standard storageclass.kubernetes.io/is-default-class=false --overwrite
kubectl get storageclass
