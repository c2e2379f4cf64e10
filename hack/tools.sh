#!/usr/bin/env bash
# Developer tools built from their Go modules into a cache outside the repository (like
# hack/build-control-plane.sh), once per pinned version. Prints the tool's path.
#
#   hack/tools.sh helm        # build helm $HELM_VERSION on first use, print its path
#   hack/tools.sh actionlint  # the same for actionlint $ACTIONLINT_VERSION (GitHub workflows)
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
  actionlint)
    dir="$cache/bin/actionlint-$ACTIONLINT_VERSION"
    if [ ! -x "$dir/actionlint" ]; then
      command -v go >/dev/null || { log "go is needed to build actionlint (or put actionlint $ACTIONLINT_VERSION at $dir/actionlint)"; exit 1; }
      log "building actionlint $ACTIONLINT_VERSION from github.com/rhysd/actionlint (first use only)"
      mkdir -p "$dir"
      CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$dir" go install -trimpath \
        -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" \
        "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
    fi
    echo "$dir/actionlint"
    ;;
  *)
    echo "usage: hack/tools.sh helm|actionlint" >&2
    exit 2
    ;;
esac
