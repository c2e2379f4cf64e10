#!/usr/bin/env bash
# Builds the pinned upstream control-plane binaries from the Go module proxy into a cache
# outside the repository, keyed by version. A warm cache makes this a no-op.
#
#   hack/build-control-plane.sh            # build what is missing, print the bin dir
#
# k8s.io/kubernetes and go.etcd.io/etcd/server carry replace directives in their go.mod, so
# `go install` refuses them; each is built inside a small wrapper module that requires it
# and (for Kubernetes) replaces every staging module with its published v0.X version, read
# from the tagged go.mod.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache=${MAREKVS_CACHE:-$HOME/.cache/marekvs-operator}
bin="$cache/bin/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
mkdir -p "$bin"
# One build at a time: .ci/run starts this in the background while lint and make test call it
# too; a second caller waits here, then finds every binary built.
exec 9>"$bin/.lock"
flock 9
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl) missing=()
  for b in "${want[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "building ${missing[*]} $KUBE_VERSION (cold build: several minutes)"
  local w="$cache/wrappers/kubernetes-$KUBE_VERSION"
  mkdir -p "$w"
  local gomod
  gomod=$(cd "$w" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
  local minor patch
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2); patch=$(echo "$KUBE_VERSION" | cut -d. -f3)
  {
    echo "module marekvs.local/kubernetes-wrapper"
    echo
    grep -E '^(go|godebug) ' "$gomod" || true
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # Every staging module: `k8s.io/x => ./staging/src/k8s.io/x` becomes its published v0.<minor>.<patch>.
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*#replace \1 => \1 v0.'"$minor.$patch"'#p' "$gomod"
  } > "$w/go.mod"
  (cd "$w" && for b in "${missing[@]}"; do go get -tool "k8s.io/kubernetes/cmd/$b@$KUBE_VERSION" >/dev/null 2>&1 || go get -tool "k8s.io/kubernetes/cmd/$b"; done)
  local pkg=k8s.io/component-base/version
  local commit=0000000000000000000000000000000000000000
  local ldflags="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for b in "${missing[@]}"; do
    (cd "$w" && go build -trimpath -ldflags "$ldflags" -o "$bin/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$bin/$b.tmp" "$bin/$b"
    log "built $b"
  done
}

build_etcd() {
  [ -x "$bin/etcd" ] && return 0
  log "building etcd $ETCD_VERSION"
  local w="$cache/wrappers/etcd-$ETCD_VERSION"
  mkdir -p "$w"
  cat > "$w/go.mod" <<MOD
module marekvs.local/etcd-wrapper

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  (cd "$w" && go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null)
  (cd "$w" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$bin/etcd.tmp" "$bin/etcd"
  log "built etcd"
}

build_kwok() {
  # kwok only: the cluster scripts start kwok themselves, never through kwokctl.
  if ! [ -x "$bin/kwok" ]; then
    log "building kwok $KWOK_VERSION"
    GOBIN="$bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  fi
  # kwok's Logs and PortForward CRDs, from the same module: with them kwok's kubelet API
  # serves `kubectl logs` and `kubectl port-forward` for the pods the podlet runs.
  local crds="$bin/kwok-crds" kind dir
  [ -f "$crds/kwok.x-k8s.io_logs.yaml" ] && [ -f "$crds/kwok.x-k8s.io_portforwards.yaml" ] && return 0
  dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || { log "could not download sigs.k8s.io/kwok@$KWOK_VERSION"; exit 1; }
  mkdir -p "$crds"
  for kind in logs portforwards; do
    cp "$dir/kustomize/crd/bases/kwok.x-k8s.io_$kind.yaml" "$crds/kwok.x-k8s.io_$kind.yaml.tmp"
    mv "$crds/kwok.x-k8s.io_$kind.yaml.tmp" "$crds/kwok.x-k8s.io_$kind.yaml"
  done
}

build_etcd
build_kwok
build_kubernetes
echo "$bin"
