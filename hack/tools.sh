#!/usr/bin/env bash
# Developer tools built from their Go modules into a cache outside the repository (like
# hack/build-control-plane.sh), once per pinned version. Prints the tool's path.
#
#   hack/tools.sh helm        # build helm $HELM_VERSION on first use, print its path
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${MAREKVS_CACHE:-$HOME/.cache/marekvs-operator}
log() { printf '[tools] %s\n' "$*" >&2; }

case "${1:-}" in
  helm)
    dir="$cache/bin/helm-$HELM_VERSION"
    if [ ! -x "$dir/helm" ]; then
      command -v go >/dev/null || { log "go is needed to build helm (or put helm $HELM_VERSION at $dir/helm)"; exit 1; }
      log "building helm $HELM_VERSION from helm.sh/helm/v3 (first use only)"
      mkdir -p "$dir"
      CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$dir" go install -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    fi
    echo "$dir/helm"
    ;;
  *)
    echo "usage: hack/tools.sh helm" >&2
    exit 2
    ;;
esac
